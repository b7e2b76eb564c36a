"""The README's main command on the real predictor (DES on the agentic workload), small budget:
`inferasim tune --model kimi-k3 --objective throughput --slo p90-itl=25 --budget 12` (no LM
configured: seed phase only). Search trials replay a bounded number of DES requests and the
best are confirmed at the simulator's default (agent.fidelity); seed rounds are priced on
the machine's cores (agent.pricing)."""

import json
from pathlib import Path

import jsonschema
import pytest
from typer.testing import CliRunner

from agent.cli.main import app
from agent.fidelity import REPLICATIONS, SEARCH_MAX_REQUESTS

pytestmark = pytest.mark.slow
SCHEMA = Path(__file__).resolve().parents[2] / "ledgers" / "ledger.schema.json"
BUDGET = 12         # round 0 up to 32 clients: SLO-meeting trials at low load, bounded ones above
AGENTIC_PER_CLIENT = 40   # the simulator's default requests per agentic client
JSON_KEYS = {"best", "top", "nearest_misses", "ties", "ledger", "num_trials", "stop_reason", "lm", "lm_note",
             "rank_only", "slo_compliance_verified", "harvest", "stats", "warnings", "deploy"}


def test_default_tune_on_the_real_predictor(monkeypatch):
    monkeypatch.delenv("INFERASIM_LM", raising=False)
    result = CliRunner().invoke(app, ["tune", "--model", "kimi-k3", "--objective", "throughput",
                                      "--slo", "p90-itl=25", "--budget", str(BUDGET), "--json"])
    assert result.exit_code in (0, 1), result.output  # 1: no trial meets the SLO (best null)
    data = json.loads(result.output)
    assert set(data) == JSON_KEYS and data["lm"] is None
    ledger = json.loads(Path(data["ledger"]).read_text())
    jsonschema.validate(ledger, json.loads(SCHEMA.read_text()))
    assert ledger["model"] == "Kimi-K3" and ledger["cluster"] == "mi355x" and ledger["workload"] == "agentic"
    assert ledger["baseline"]["tp"] == 8 and ledger["num_requests"] is None and ledger["budget"] == BUDGET
    assert ledger["search_fidelity"]["max_requests"] == SEARCH_MAX_REQUESTS
    trials = ledger["trials"]
    search = [t for t in trials if t["phase"] == "seed"]
    confirm = [t for t in trials if t["phase"] == "confirm"]
    assert len(search) == BUDGET and len(search) + len(confirm) == len(trials) == data["num_trials"]
    assert all(t["legal"] and t["source"] == "des" for t in trials), [t["reason"] for t in trials]
    assert all(t["mode"] in ("anchored", "rank-only") for t in trials)
    assert all(t["metrics"]["itl_ms_p90"] is not None for t in trials)  # the SLO's percentile is predicted
    for trial in search:                                # bounded: at most 1,024 requests, the default below it
        full = AGENTIC_PER_CLIENT * trial["configuration"]["concurrency"]
        assert trial["des_requests"] == min(full, max(SEARCH_MAX_REQUESTS, 4 * trial["configuration"]["concurrency"]))
    assert confirm, "the best must be confirmed at full fidelity, replicated"
    for trial in confirm:
        original = trials[trial["confirm_of"]]
        assert original["phase"] == "seed" and original["des_requests"] <= trial["des_requests"]
        assert trial["configuration"] == original["configuration"]
        assert trial["des_requests"] == AGENTIC_PER_CLIENT * trial["configuration"]["concurrency"]
        assert trial["replications"] == REPLICATIONS
        low, high = trial["seed_intervals"]["output_throughput_per_gpu"]
        assert low <= trial["metrics"]["output_throughput_per_gpu"] <= high
    assert (data["best"] is None) == (result.exit_code == 1)
    shown = data["best"] or data["nearest_misses"][0]   # the answer is a replicated confirm trial
    assert shown["phase"] == "confirm"
    assert data["stats"]["trials_per_s"] > 0


def test_an_analytical_tie_says_the_values_are_equal_not_that_intervals_overlap(monkeypatch):
    """Fixed-length traffic is priced without replications: trials that fall back to one
    anchor's recipe (weight, expert or activation fp4 on DeepSeek-R1's FP4 anchor) price
    alike, and the tie line spoke of replication intervals no simulator produced."""
    monkeypatch.delenv("INFERASIM_LM", raising=False)
    result = CliRunner().invoke(app, ["tune", "--model", "deepseek-r1", "--cluster", "b200x8", "--workload", "1k/1k",
                                      "--objective", "throughput", "--slo", "ttft<=300ms", "--budget", "25",
                                      "--no-llm", "--workers", "1"])
    assert result.exit_code == 0, result.output
    tie = next(line for line in result.output.splitlines() if line.startswith("Tie:"))
    assert "values are equal (priced without replications" in tie and "replication intervals" not in tie
