"""Every one of the 24 objectives can be searched on the default workload (agentic, DES)
with the real predictor, and returns a best: a metric no DES prediction carried
(max sustainable concurrency, the communication times) left every trial unpriced and
the search said "no trial meets the SLOs". Small budgets and short replays keep it
quick; the numbers are the predictor's."""

import pytest

from agent.question import TuneRequest
from agent.sustainable import METRIC as SUSTAINABLE
from agent.sustainable import RESOLUTION, sustainable
from agent.trial import Phase, Trial
from agent.tune import tune
from levers.configuration import Configuration
from objectives.objectives import list_objectives

BUDGET = 3
DES_REQUESTS = 48


def quick_tune(objective: str, slos: tuple[str, ...] = (), budget: int = BUDGET):
    return tune(TuneRequest(model="kimi-k3", objective=objective, slos=slos, budget=budget, no_llm=True,
                            workers=1, num_requests=DES_REQUESTS))


@pytest.mark.parametrize("objective", [o.name for o in list_objectives()])
def test_a_tune_on_every_objective_returns_a_best(objective):
    result = quick_tune(objective)
    assert result.context.workload.name == "agentic"
    best = result.best
    assert best is not None, [t.reasons for t in result.outcome.nearest_misses]
    assert best.source == "des" and best.objective_value is not None
    assert best.metrics[result.context.objective.metric] == best.objective_value


def test_communication_times_are_predicted_on_agentic_traffic():
    best = quick_tune("prefill_comm_time").best
    assert best.metrics["prefill_comm_ms"] > 0 and best.metrics["decode_comm_ms"] > 0


def test_max_sustainable_concurrency_on_the_real_predictor_meets_the_slo():
    result = quick_tune(SUSTAINABLE, ("p90-itl=60",), budget=1)
    best = result.best
    assert best is not None and best.slo_met is True
    assert best.config.concurrency == best.objective_value == best.metrics[SUSTAINABLE] >= 1


def linear_itl(limit_ms: float, capacity: int):
    """p90 ITL = concurrency ms: the SLO p90-itl=L is met exactly up to L clients."""
    def price(config):
        metrics = {"itl_ms_p90": float(config.concurrency), "max_concurrency": float(capacity)}
        return Trial(phase=Phase.SEED, config=config, proposed=None, legal=True, metrics=metrics,
                     slo_met=config.concurrency <= limit_ms)
    return price


@pytest.mark.parametrize("start", [1, 16, 64, 100, 1000])
def test_the_search_brackets_then_bisects_to_the_largest_meeting_load(start):
    price = linear_itl(100.0, capacity=4096)
    found = sustainable(price(Configuration(concurrency=start)), price)
    assert 100 / RESOLUTION <= found.objective_value <= 100
    assert found.config.concurrency == found.objective_value and found.slo_met


def test_without_a_bound_the_kv_capacity_is_sustained_and_nothing_sustains_nothing():
    price = linear_itl(1e9, capacity=300)
    assert sustainable(price(Configuration(concurrency=8)), price).objective_value == 300
    never = linear_itl(0.5, capacity=300)
    first = never(Configuration(concurrency=8))
    assert sustainable(first, never) is first
