"""One evaluate() for every phase: guard -> structure -> memory -> prediction -> SLO -> objective."""

import pytest

from agent.scoring import evaluate
from agent.seed_planner import baseline
from agent.trial import Phase, Stage
from levers.configuration import Configuration
from tests.agent.tune_fakes import FakePredictor, make_context, metrics_for


def test_priced_trial_carries_objective_mode_and_slo_verdict():
    predictor = FakePredictor()
    context = make_context(slos=("tpot<=20",), predictor=predictor)
    config = baseline(context).with_changes({"kv_cache_dtype": "fp8", "concurrency": 512})
    trial = evaluate(context, config, phase=Phase.SEED, proposed={"kv_cache_dtype": "fp8"})
    expected = metrics_for(config)["output_throughput_per_gpu"]
    assert trial.legal and trial.priced
    assert trial.objective_value == pytest.approx(expected, rel=1e-9)
    assert trial.score == pytest.approx(expected, rel=1e-9)  # max objective: score = value
    assert trial.mode == "anchored" and trial.anchor_id == "fake-anchor"
    assert trial.slo_met is True and trial.miss_distance == 0.0
    assert predictor.calls[-1]["need_distribution"] is False  # mean SLO on a fixed workload


def test_percentile_slo_asks_for_the_distribution_and_a_miss_is_legal_with_reason():
    predictor = FakePredictor()
    context = make_context(slos=("p90-itl<=15",), predictor=predictor)
    config = baseline(context).with_changes({"concurrency": 1024})  # load 128/replica: ITL p90 = 23.4 ms
    trial = evaluate(context, config, phase=Phase.SEED)
    assert predictor.calls[-1]["need_distribution"] is True
    assert trial.legal and trial.slo_met is False
    assert trial.miss_distance == pytest.approx(1.3 * (10 + 128 / 16) / 15 - 1, rel=1e-6)
    assert trial.reason.startswith("SLO missed: p90-itl<=15ms")


def test_structural_memory_guard_and_predictor_failures_are_rejected_with_stage():
    predictor = FakePredictor(fail_on="concurrency=3")
    context = make_context(predictor=predictor, precisions="fp8")
    too_wide = Configuration(tp=16, weight_dtype="fp8", expert_dtype="fp8")
    structural = evaluate(context, too_wide, phase=Phase.INVESTIGATOR)
    assert structural.stage is Stage.STRUCTURE and not structural.legal
    assert any("cluster has 8" in r or "scale-up" in r for r in structural.reasons)
    unvalidated = evaluate(context, Configuration(weight_dtype="fp8"), phase=Phase.PLANNER)  # bf16 experts
    assert unvalidated.stage is Stage.GUARD
    assert unvalidated.reason == "expert_dtype=bf16 (checkpoint dtype) is not a validated precision (--precisions fp8)"
    failing = evaluate(context, Configuration(weight_dtype="fp8", expert_dtype="fp8", concurrency=3), phase=Phase.SEED)
    assert failing.stage is Stage.PREDICTION and "fake predictor failure" in failing.reason
    assert len(predictor.calls) == 1  # rejected before the predictor: never priced


def test_memory_overflow_is_a_memory_rejection():
    context = make_context(model="kimi-k3")
    trial = evaluate(context, Configuration(tp=4, replicas=2), phase=Phase.INVESTIGATOR)
    assert trial.stage is Stage.MEMORY and not trial.legal and trial.metrics is None
    assert "90% of HBM" in trial.reason


def test_trial_json_round_trips_through_the_ledger_model():
    from ledgers.model import TrialRecord

    context = make_context(slos=("ttft<=1s",))
    trial = evaluate(context, baseline(context), phase=Phase.SEED, proposed={"tp": 1})
    record = TrialRecord.model_validate({**trial.to_json(), "index": 0})
    assert record.metrics["output_throughput_per_gpu"] == trial.objective_value
    assert record.slo_checks[0].slo == "mean-ttft<=1000ms"


def test_a_workload_the_configuration_cannot_serve_is_said_so_not_as_a_failure():
    """The DES refuses a request longer than a rank's KV pool with an InputError naming
    ``--config``: inside a search there is no --config, so the rejection reads 'cannot serve
    the workload: ...' (a DeepSeek-R1 tune listed 63 of them as 'prediction failed:
    InputError: --config: ...')."""
    from levers.errors import InputError

    class TooLong(FakePredictor):
        def __call__(self, *args, **kwargs):
            raise InputError("--config", "request 0 (106204 prompt + 126 output tokens) needs 106330 KV tokens "
                             "but one colocated rank's pool holds 68719", "a larger KV pool")

    context = make_context(predictor=TooLong(), precisions="fp8")
    trial = evaluate(context, Configuration(weight_dtype="fp8", expert_dtype="fp8"), phase=Phase.SEED)
    assert trial.stage is Stage.PREDICTION and not trial.legal
    assert trial.reason.startswith("cannot serve the workload: request 0") and "--config" not in trial.reason
