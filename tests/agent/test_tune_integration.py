"""The README's main command on the real predictor (DES on the agentic workload), small budget:
`inferasim tune --model kimi-k3 --objective throughput --slo p90-itl=25 --no-llm --budget 3
--des-requests 64` (the simulator's default of ~39 requests per client costs seconds per trial)."""

import json
from pathlib import Path

import jsonschema
import pytest
from typer.testing import CliRunner

from agent.cli import app

pytestmark = pytest.mark.slow
SCHEMA = Path(__file__).resolve().parents[2] / "ledgers" / "ledger.schema.json"
BUDGET = 3
DES_REQUESTS = "64"


def test_default_tune_on_the_real_predictor():
    result = CliRunner().invoke(app, ["tune", "--model", "kimi-k3", "--objective", "throughput",
                                      "--slo", "p90-itl=25", "--no-llm", "--budget", str(BUDGET),
                                      "--des-requests", DES_REQUESTS, "--json"])
    assert result.exit_code in (0, 1), result.output  # 1: no trial meets the SLO (best null)
    data = json.loads(result.output)
    ledger = json.loads(Path(data["ledger"]).read_text())
    jsonschema.validate(ledger, json.loads(SCHEMA.read_text()))
    assert ledger["model"] == "Kimi-K3" and ledger["cluster"] == "mi355x" and ledger["workload"] == "agentic"
    assert ledger["baseline"]["tp"] == 8 and ledger["num_requests"] == int(DES_REQUESTS)
    trials = ledger["trials"]
    assert 1 <= len(trials) <= BUDGET and all(t["phase"] == "seed" for t in trials)
    assert all(t["legal"] and t["source"] == "des" for t in trials), [t["reason"] for t in trials]
    assert all(t["mode"] in ("anchored", "rank-only") for t in trials)
    assert all(t["metrics"]["itl_ms_p90"] is not None for t in trials)  # the SLO's percentile is predicted
    assert (data["best"] is None) == (result.exit_code == 1)
    assert data["stats"]["trials_per_s"] > 0
