"""The two Kimi-K3 deployments of issue 13 (examples/*.txt) run as `inferasim predict`
commands and print what an operator sizes them by (docs/EXAMPLES.md).

Cost: each file runs once with a reduced DES (``--requests 200 --replications 1``), ~1.5
CPU-seconds; the full default runs (40 requests per client, 3 replications) are what
docs/EXAMPLES.md shows and take ~2 CPU-s (A) and ~30 CPU-s (B) (2026-12-02, idle 2-core Xeon;
6 and 77 on 2026-12-03 on a guest 3x slower).
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent.cli.main import app
from tests.agent.cli.narrow import NARROW, console_width, overlong
from tests.agent.cli.test_output_schemas import strict_json

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
FILES = {"kimi-k3-gb300-dcp8.txt": 8, "kimi-k3-gb300-dwdp16-dep16.txt": 32}   # GPUs of the deployment
CHEAP = ["--requests", "200", "--replications", "1"]   # fewer leave no p90 after the warm-up
runner = CliRunner()


@pytest.fixture(autouse=True)
def isolated_home(tmp_path, monkeypatch):
    monkeypatch.setenv("INFERASIM_HOME", str(tmp_path / "home"))


def example_args(name: str) -> list[str]:
    lines = [line for line in (EXAMPLES / name).read_text().splitlines() if line.strip()]
    assert len(lines) == 1, f"{name}: one command line, not {len(lines)}"
    args = shlex.split(lines[0])
    assert "--json" not in args and args[0] != "predict" and "--workload" in args
    assert args[args.index("--workload") + 1] == "agentic"
    return args


@pytest.mark.parametrize("name", sorted(FILES))
def test_example_prices_and_prints_the_sizing(name):
    args = example_args(name)
    with console_width():
        result = runner.invoke(app, ["predict", *args, *CHEAP])
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert not overlong(text, NARROW, ("Kimi-K3 on", "tp=", "80% interval:")), overlong(text, NARROW, ())
    for row in ("TTFT", "throughput (output)", "P90 =", "prefix hit rate: overall",
                "routed experts", "nvfp4", "attention projections", "fp8", "shared experts", "bf16", "drafter",
                "activations + graphs", "KV + state per 200k-token", "requests that fit"):
        assert row in text, row
    if FILES[name] == 32:   # B: both pools, DWDP's staging buffers in the prefill one, the shared host tier
        assert "decode pool" in text and "prefill pool" in text and "DWDP staging" in text
        assert "dram" in text


def test_example_json_is_the_deployment_the_issue_names():
    """A: 8 GPUs, DCP8 under TP8, depth-4 drafter. B: 32 GPUs, 16 DWDP prefill ranks, DEP16
    decode, the NVFP4 recipe (experts NVFP4, attention FP8, shared experts BF16), FP8 KV,
    EAGLE-3 at depth 3, a shared host KV pool."""
    a = json.loads(runner.invoke(app, ["predict", *example_args("kimi-k3-gb300-dcp8.txt"), *CHEAP, "--json"]).stdout)
    assert a["configuration"]["tp"] == 8 and a["configuration"]["dcp"] == 8 and a["configuration"]["spec_depth"] == 4
    assert a["configuration"]["concurrency"] == 72 and a["configuration"]["replicas"] == 1
    b = strict_json(runner.invoke(app, ["predict", *example_args("kimi-k3-gb300-dwdp16-dep16.txt"), *CHEAP,
                                        "--json"]).stdout)
    config = b["configuration"]
    assert config["disaggregated"] and config["prefill_layout"] == "DWDP16" and config["concurrency"] == 512
    assert (config["tp"], config["attention_dp"], config["ep"]) == (16, 16, 16)
    assert config["spec_method"] == "eagle3" and config["spec_depth"] == 3 and config["kv_cache_dtype"] == "fp8"
    assert str(config["host_kv_tier_gb"]).endswith(":shared")
    dtypes = b["memory"]["weight_dtypes_by_component"]
    assert (dtypes["routed_experts"], dtypes["attention"], dtypes["shared_experts"]) == ("nvfp4", "fp8", "bf16")
    assert b["metrics"]["output_throughput_per_gpu"] > 0 and b["breakdown"]["des"]["hit_rate"]["host_tier"] == "shared"
    # split pools never mix a prompt into a decode step: nothing to measure is null, not NaN
    assert b["all_metrics"]["mixed_decode_step_ms"] is None


def test_the_families_plan_is_legal_and_spans_8_to_32_gpus():
    """examples/kimi-k3-gb300-families.yaml (docs/EXAMPLES.md's plan-mix): every candidate
    legal and fits on one of the entry's engines (DCP8 replicas on vLLM: TensorRT-LLM's
    decode context parallelism is decode-pool only; DWDP on TensorRT-LLM), both families
    present, 8 to 32 GPUs."""
    from agent.mix.config import parse_mix_text
    from levers.catalog import Engine
    from predictor.cards.registry import load_card
    from predictor.feasibility import check_configuration
    from predictor.hardware import parse_cluster
    spec = parse_mix_text((EXAMPLES / "kimi-k3-gb300-families.yaml").read_text())
    (plan,) = spec.models
    card, cluster = load_card(plan.name), parse_cluster(plan.cluster)
    for config in plan.candidates:
        engine = Engine.TRTLLM if config.disaggregated else Engine.VLLM
        assert check_configuration(card, cluster, engine, config, 32768).legal, config.describe()
    assert {c.disaggregated for c in plan.candidates} == {False, True}
    assert {c.total_gpus for c in plan.candidates} == {8, 16, 24, 32}


def test_p90_interactivity_is_the_inverse_of_p90_tpot_with_its_intervals_swapped():
    from agent.cli.predict import _shown
    from predictor.prediction import Prediction
    result = Prediction(True, (), None, None, (), {"tpot_ms_p90": 20.0}, None,
                        seed_intervals={"tpot_ms_p90": (16.0, 25.0)}, intervals={"tpot_ms_p90": (10.0, 40.0)})
    assert _shown(result, "tpot_ms_p90", "tok/s/user") == (50.0, (40.0, 62.5), (25.0, 100.0))
    assert _shown(result, "tpot_ms_p90", "ms") == (20.0, (16.0, 25.0), (10.0, 40.0))
