"""A real LLM end to end (marker `llm`, skipped by default; NOTES.md "A real local LLM").

SmolLM2-135M served by llama-cpp-python's OpenAI-compatible server, reached through
LiteLLM as `openai/smollm2` with the output schema sent (`--lm-json-schema`). Set up with
`scripts/local_llm.sh setup`; then either start it yourself (`scripts/local_llm.sh serve`)
and point `INFERASIM_TEST_LLM_URL` at it, or let this test start one from the cached
model file. Run: `pytest -m llm tests/agent/test_llm_e2e.py`.

The 135M model cannot write configurations; under constrained decoding it can pick
moves from the planner's menu (`agent.menu`, NOTES.md). So the test asserts that the
planner's call parses and that at least one of the LLM's proposals went through the
guards and was priced (legal, with metrics, not a duplicate), records how many of its
proposals were legal (printed; also in $INFERASIM_LLM_REPORT when set), and that the
search still completes with a legal, priced best.
"""

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from agent.tune import TuneRequest, tune
from ledgers.store import load_ledger

pytestmark = pytest.mark.llm

MODEL_FILE = Path(os.environ.get("INFERASIM_CACHE", "~/.cache/inferasim")).expanduser() / \
    "SmolLM2-135M-Instruct.Q4_1.gguf"
READY_TIMEOUT_S = 120
LM_TIMEOUT_S = 300.0  # 5-16 tokens/s on two busy cores: one DSPy call takes 14-100 s
OUTCOMES = {"ok", "parse_error", "timeout", "lm_error", "error", "stopped"}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _wait_ready(url: str, process: subprocess.Popen | None) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            pytest.fail(f"llama_cpp.server exited with {process.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/models", timeout=2) as reply:
                if reply.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    pytest.fail(f"no LLM server at {url} after {READY_TIMEOUT_S} s")


@pytest.fixture(scope="module")
def llm_url():
    given = os.environ.get("INFERASIM_TEST_LLM_URL")
    if given:
        _wait_ready(given.rstrip("/"), None)
        yield given.rstrip("/")
        return
    pytest.importorskip("llama_cpp.server", reason="install inferasim[local] (scripts/local_llm.sh setup)")
    if not MODEL_FILE.is_file():
        pytest.skip(f"no model file {MODEL_FILE} (scripts/local_llm.sh setup)")
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "llama_cpp.server", "--model", str(MODEL_FILE), "--model_alias", "smollm2",
         "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "8192", "--n_threads", "2"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        _wait_ready(url, process)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def test_tune_with_a_real_local_llm(llm_url, tmp_path):
    request = TuneRequest(model="kimi-k3", workload="1k/1k", budget=12, lm="openai/smollm2",
                          lm_base_url=llm_url, lm_json_schema=True, lm_timeout_s=LM_TIMEOUT_S,
                          max_cycles=1, max_steps=2)
    result = tune(request, ledger_dir=tmp_path)
    ledger = load_ledger(result.ledger_path)
    calls = ledger.llm.calls
    assert calls and calls[0].role == "planner" and {c.outcome for c in calls} <= OUTCOMES
    assert calls[0].outcome == "ok", calls[0].message          # the menu planner's answer parsed
    assert all(c.num_requests >= 0 and c.wall_ms > 0 for c in calls)
    assert ledger.lm.model == "openai/smollm2" and ledger.lm.json_schema
    assert ledger.status == "finished" and len(ledger.trials) == ledger.stats.num_trials <= 12
    for trial in ledger.trials:
        assert trial.legal or trial.reason, trial
    proposals = [t for t in ledger.trials if t.phase in ("planner", "investigator")]
    priced = [t for t in proposals if t.legal and t.metrics is not None and t.objective_value is not None
              and t.duplicate_of is None]
    assert priced, [(t.phase, t.proposed, t.reason) for t in proposals]
    counts = {phase: {"proposed": sum(t.phase == phase for t in proposals),
                      "legal": sum(t.phase == phase and t.legal for t in proposals),
                      "priced_new": sum(t.phase == phase for t in priced)} for phase in ("planner", "investigator")}
    assert result.best is not None and result.best.legal and result.best.priced
    report = {"proposals": counts, "calls": [c.model_dump() for c in calls]}
    print(json.dumps(report, indent=1))
    if os.environ.get("INFERASIM_LLM_REPORT"):
        Path(os.environ["INFERASIM_LLM_REPORT"]).write_text(json.dumps(report, indent=1))
