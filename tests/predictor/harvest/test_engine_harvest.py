"""A real harvest on this CPU: llama-cpp-python's server with SmolLM2-135M (marker
`engine`; `pytest -m engine tests/predictor/harvest/test_engine_harvest.py -s`).

The anchor must validate, and because llama.cpp serves one request at a time the decode
waves above batch 1 and the packed probe must be flagged serialised. The anchored step
model then predicts TTFT and TPOT at a prompt length the harvest did not use, which is
measured on the same server. Tolerances are wide on purpose and stated: this runs on a
shared 2-core VM where other work moves single measurements by tens of percent.
Set INFERASIM_GGUF to the .gguf file (default ~/.cache/inferasim/..., where
`scripts/local_llm.sh setup` puts it), and
INFERASIM_HARVEST_REPORT to a path to keep the figures as JSON.
"""

import json
import os
import random
from pathlib import Path

import pytest

from predictor.anchors.store import load_anchor_file
from predictor.harvest import harvester
from predictor.harvest.client import OpenAIStreamClient
from predictor.harvest.harvester import run_harvest
from predictor.harvest.plan import HarvestRequest, plan_harvest
from predictor.harvest.process import EngineProcess, group_alive
from predictor.harvest.prompts import PromptFactory
from predictor.harvest.validate import measure_point, predict_point, relative_error

pytestmark = pytest.mark.engine

GGUF = Path(os.environ.get("INFERASIM_GGUF", Path(os.environ.get("INFERASIM_CACHE", "~/.cache/inferasim"))
                           / "SmolLM2-135M-Instruct.Q4_1.gguf")).expanduser()
UNSEEN_PROMPT_TOKENS = 384          # between the sweep's 256 and 512, used by no sweep
OUTPUT_TOKENS = 16
CHECK_REPEATS = 5
TTFT_TOLERANCE = 0.5                # |predicted / measured - 1| on a loaded 2-core VM
TPOT_TOLERANCE = 0.6


@pytest.fixture(scope="module")
def gguf():
    pytest.importorskip("llama_cpp.server")
    if not GGUF.is_file():
        pytest.skip(f"{GGUF} not found (scripts/harvest_cpu.sh fetches it)")
    return GGUF


def test_real_cpu_harvest_then_unseen_prompt_length(gguf, tmp_path, monkeypatch):
    plan = plan_harvest(HarvestRequest(
        engine="llamacpp", model=str(gguf), cluster="cpu", config_text="tp=1", threads=1, prompt_tokens=64,
        second_prompt_tokens=256, decode_tokens=OUTPUT_TOKENS, prefill_lengths=(32, 64, 128, 256, 512), repeats=3,
        probe_seqs=4, probe_tokens=128, ready_timeout_s=120.0))
    started: list[EngineProcess] = []

    class Recording(EngineProcess):
        def start(self) -> None:
            super().start()
            started.append(self)

    monkeypatch.setattr(harvester, "EngineProcess", Recording)
    report = run_harvest(plan, directory=tmp_path / "anchors", log_path=tmp_path / "engine.log")

    # the engine is gone, the anchor file validates, serialisation is flagged
    assert len(started) == 1 and not group_alive(started[0].pid)
    anchor = load_anchor_file(report.path)
    assert anchor == report.anchor
    assert {"serialised-decode", "serialised-probe"} <= set(anchor.flags)
    assert anchor.decode_sweep.batch_sizes == (1,) and not anchor.decode_sweep.is_full_sweep
    assert anchor.signature.engine_version.startswith("llama_cpp_python==")
    assert anchor.prefill_sweep.prompt_tokens == (32, 64, 128, 256, 512)

    predicted, flags = predict_point(anchor, plan.card, plan.cluster, plan.engine, plan.config,
                                     UNSEEN_PROMPT_TOKENS, OUTPUT_TOKENS)
    base = f"http://{plan.launch_request.host}:{plan.launch_request.port}"
    client = OpenAIStreamClient(base, plan.served_name, extras=plan.adapter.request_extras(plan.eos_token_id),
                                tokenize_path=plan.adapter.tokenize_path, tokenize_body=plan.adapter.tokenize_body)
    with client, EngineProcess(plan.launch.argv, ready=lambda: client.get_json("/v1/models") is not None,
                               timeout_s=120.0, log_path=tmp_path / "check.log") as engine:
        factory = PromptFactory(random.Random(7), client.tokenize_count)
        client.stream(factory.make(64).text, 4)                                      # warm-up
        measured = measure_point(client, factory, UNSEEN_PROMPT_TOKENS, OUTPUT_TOKENS, CHECK_REPEATS)
    assert not group_alive(engine.pid)

    ttft_error = relative_error(predicted.ttft_ms, measured.ttft_ms)
    tpot_error = relative_error(predicted.tpot_ms, measured.tpot_ms)
    figures = {"anchor": json.loads(anchor.model_dump_json()), "predicted": predicted.to_json(),
               "measured": measured.to_json(), "ttft_error": ttft_error, "tpot_error": tpot_error,
               "step_model_flags": list(flags), "checks": [c.to_json() for c in report.checks]}
    print(json.dumps({k: v for k, v in figures.items() if k != "anchor"}, indent=1))
    if os.environ.get("INFERASIM_HARVEST_REPORT"):
        Path(os.environ["INFERASIM_HARVEST_REPORT"]).write_text(json.dumps(figures, indent=1))
    assert abs(ttft_error) <= TTFT_TOLERANCE
    assert abs(tpot_error) <= TPOT_TOLERANCE
