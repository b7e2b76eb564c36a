"""Search fidelity and the confirm step (agent.fidelity): DES trials replay a bounded number
of requests during the search, the best are re-priced at the predictor's default over
several replications (90% intervals), and the answer is chosen among the confirmed
trials; a confirmed trial whose objective interval overlaps the best's is a tie."""

import json
from dataclasses import replace
from pathlib import Path

import jsonschema
import pytest

from agent.fidelity import (
    CONFIRM_MAX,
    CONFIRM_TOP,
    REPLICATIONS,
    SEARCH_MAX_REQUESTS,
    bounded_requests,
    bounds,
    confirms,
    full_requests,
    trial_requests,
)
from agent.tune import TuneRequest, tune
from ledgers.store import load_ledger
from levers.configuration import Configuration
from predictor.feasibility import check_configuration
from tests.agent.tune_fakes import REPLICATION_SPREAD, FakePredictor, make_context

SCHEMA = Path(__file__).resolve().parents[2] / "ledgers" / "ledger.schema.json"
AGENTIC_PER_CLIENT = 40   # predictor.sim.agentic.AGENTIC_REQUESTS_PER_CLIENT
FIXED_PER_CLIENT = 10     # predictor.sim.workloads.FIXED_CLOSED_REQUESTS_PER_CLIENT


def full_factor(tp: int) -> float:
    """The fake's full-length DES throughput over its bounded one: long runs show the
    cost of wide TP that a short run misses."""
    return 1.0 - tp / 32.0


@pytest.mark.parametrize("concurrency, expected", [
    (1, 40), (16, 640), (25, 1000), (26, 1024), (64, 1024), (256, 1024), (512, 2048), (1024, 4096)])
def test_agentic_search_requests_are_the_default_capped_at_1024_with_4_per_client(concurrency, expected):
    context = make_context(workload="agentic")
    config = Configuration(concurrency=concurrency)
    assert full_requests(context, config) == AGENTIC_PER_CLIENT * concurrency
    assert trial_requests(context, config) == expected == bounded_requests(AGENTIC_PER_CLIENT * concurrency,
                                                                           concurrency)
    assert trial_requests(context, config, full=True) == AGENTIC_PER_CLIENT * concurrency


def test_fixed_workloads_bound_the_des_only_when_a_percentile_needs_it():
    analytical = make_context(workload="1k/1k", slos=("tpot<=20",))
    assert not confirms(analytical) and trial_requests(analytical, Configuration(concurrency=1024)) is None
    des = make_context(workload="1k/1k", slos=("p90-itl<=20",))
    assert bounds(des) and confirms(des)
    assert trial_requests(des, Configuration(concurrency=64)) == FIXED_PER_CLIENT * 64      # below the cap: full
    assert trial_requests(des, Configuration(concurrency=1024)) == 4096                   # 1 warm-up + 3 measured
    assert trial_requests(des, Configuration(concurrency=128)) == SEARCH_MAX_REQUESTS


def test_explicit_des_requests_price_every_trial_alike_and_the_confirm_step_only_replicates():
    context = make_context(workload="agentic", num_requests=64)
    assert not bounds(context) and confirms(context)
    assert trial_requests(context, Configuration(concurrency=1024)) == 64
    assert trial_requests(context, Configuration(concurrency=1024), full=True) == 64


class FidelityPredictor(FakePredictor):
    """The fake DES: a full-length run (the predictor's default number of requests) scales
    the fake's throughput by ``full_factor``; a bounded run does not."""

    def __call__(self, target, config, workload, **options):
        prediction = super().__call__(target, config, workload, **options)
        if not prediction.legal:
            return prediction
        metrics = dict(prediction.metrics)
        if options["num_requests"] == AGENTIC_PER_CLIENT * config.concurrency:
            metrics["throughput_per_gpu"] *= full_factor(config.tp)
            metrics["output_throughput_per_gpu"] *= full_factor(config.tp)
        intervals = {k: (v * (1 - REPLICATION_SPREAD), v * (1 + REPLICATION_SPREAD)) for k, v in metrics.items()} \
            if prediction.seed_intervals else {}
        return replace(prediction, metrics=metrics, source="des", seed_intervals=intervals)


def run(tmp_path, predictor=None, **options):
    request = TuneRequest(model="qwen3-30b-a3b", workload="agentic", no_llm=True,
                          **{"budget": 40, "slos": ("p90-itl<=40",), **options})
    return tune(request, predict_fn=predictor or FidelityPredictor(), check_fn=check_configuration,
                ledger_dir=tmp_path)


def test_the_confirm_step_reprices_the_bounded_best_and_the_answer_needs_full_fidelity(tmp_path):
    result = run(tmp_path)
    ledger = load_ledger(result.ledger_path)
    jsonschema.validate(json.loads(result.ledger_path.read_text()), json.loads(SCHEMA.read_text()))
    search = [t for t in ledger.trials if t.phase != "confirm"]
    confirmed = [t for t in ledger.trials if t.phase == "confirm"]
    assert len(search) <= 40 and ledger.stats.num_trials == len(search) + len(confirmed)  # confirms spend no budget
    assert ledger.search_fidelity is not None and ledger.search_fidelity.confirm_top == CONFIRM_TOP
    full = {t.index for t in search if t.des_requests == AGENTIC_PER_CLIENT * t.configuration["concurrency"]}
    assert full and len(full) < len(search)          # up to 25 clients the bounded length is the default
    # the best CONFIRM_TOP search trials, in rank order, re-priced at the default over replications
    ranked = sorted((t for t in search if t.slo_met and t.duplicate_of is None),
                    key=lambda t: (-t.objective_value, t.index))
    assert [t.confirm_of for t in confirmed] == [t.index for t in ranked[:CONFIRM_TOP]]
    for trial in confirmed:
        original = ledger.trials[trial.confirm_of]
        assert trial.configuration == original.configuration and trial.proposed == original.proposed
        assert trial.des_requests == AGENTIC_PER_CLIENT * trial.configuration["concurrency"] >= original.des_requests
        assert trial.replications == REPLICATIONS and trial.seed_intervals is not None
        low, high = trial.seed_intervals[ledger.objective_metric]
        assert low < trial.objective_value < high
        factor = 1.0 if original.index in full else full_factor(trial.configuration["tp"])
        assert trial.objective_value == pytest.approx(original.objective_value * factor, rel=1e-6)
    # the answer: the best confirm trial; the bounded search's leader lost its lead
    best = result.best
    assert best.phase == "confirm" and best.index == ledger.best.index
    assert best.objective_value == max(t.objective_value for t in confirmed if t.slo_met)
    assert ranked[0].index not in full and best.confirm_of != ranked[0].index
    shown = result.outcome.top
    assert shown[0].index == best.index
    assert [t.index for t in shown[:len(confirmed)]] == [t.index for t in sorted(
        confirmed, key=lambda t: (-t.objective_value, t.index))]
    # ties: confirm trials whose interval (the fake's +-2%) overlaps the best's
    band = best.interval(ledger.objective_metric)
    expected = [t.index for t in shown[1:len(confirmed)]
                if t.seed_intervals[ledger.objective_metric][1] >= band[0]]
    assert ledger.ties == expected


def test_confirmation_goes_on_while_no_full_fidelity_trial_meets_the_slos(tmp_path):
    class FullFidelityMisses(FidelityPredictor):
        def __call__(self, target, config, workload, **options):
            prediction = super().__call__(target, config, workload, **options)
            if prediction.legal and options["num_requests"] == AGENTIC_PER_CLIENT * config.concurrency:
                return replace(prediction, metrics={**prediction.metrics, "itl_ms_p90": 1000.0})
            return prediction

    result = run(tmp_path, FullFidelityMisses(), slos=("p90-itl<=100",))
    ledger = load_ledger(result.ledger_path)
    search = [t for t in ledger.trials if t.phase != "confirm"]
    ranked = sorted((t for t in search if t.slo_met and t.duplicate_of is None),
                    key=lambda t: (-t.objective_value, t.index))
    confirmed = [t for t in ledger.trials if t.phase == "confirm"]
    assert [t.confirm_of for t in confirmed] == [t.index for t in ranked[:CONFIRM_MAX]]
    assert len(confirmed) > CONFIRM_TOP
    assert not any(t.slo_met for t in confirmed)
    assert result.best is None and ledger.best is None                # nothing meets at full fidelity
    assert result.outcome.nearest_misses[0].phase in ("confirm", "seed")


def test_resuming_a_confirmed_search_keeps_its_confirmations_and_budget(tmp_path):
    first = run(tmp_path, budget=20)
    before = load_ledger(first.ledger_path)
    assert any(t.phase == "confirm" for t in before.trials)
    resumed = tune(TuneRequest(resume=str(first.ledger_path), budget=30), predict_fn=FidelityPredictor(),
                   check_fn=check_configuration)
    ledger = load_ledger(resumed.ledger_path)
    assert [t.model_dump() for t in ledger.trials[:len(before.trials)]] == [t.model_dump() for t in before.trials]
    assert sum(t.phase != "confirm" for t in ledger.trials) <= 30 < len(ledger.trials)
    assert ledger.search_fidelity == before.search_fidelity
    confirmed_configs = [json.dumps(t.configuration, sort_keys=True) for t in ledger.trials if t.phase == "confirm"]
    assert len(confirmed_configs) == len(set(confirmed_configs))   # a configuration is confirmed once
    assert resumed.best is not None and ledger.best.index == resumed.best.index
