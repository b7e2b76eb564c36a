"""The 24 objectives of PRODUCT.md §4: groups, directions, metrics, aliases, scoring."""

from __future__ import annotations

from collections import Counter

import pytest

from levers.errors import InputError
from objectives.objectives import (
    LATENCY_METRICS,
    LATENCY_STATS,
    METRIC_KEYS,
    OBJECTIVES,
    SCALAR_METRICS,
    Direction,
    Group,
    latency_key,
    list_objectives,
    objective_names,
    resolve_objective,
)

EXPECTED_GROUP_SIZES = {
    "throughput": 6,
    "latency": 6,
    "capacity": 2,
    "memory": 4,
    "interference": 3,
    "communication": 2,
    "cost": 1,
}
MAXIMISED = {
    "throughput_per_gpu", "throughput_fleet", "output_throughput_per_gpu",
    "output_throughput_fleet", "input_throughput_per_gpu", "input_throughput_fleet",
    "interactivity", "generation_rate", "max_concurrency", "max_sustainable_concurrency",
}


def test_there_are_exactly_24_objectives_in_the_seven_groups():
    assert len(OBJECTIVES) == 24
    assert Counter(o.group for o in list_objectives()) == EXPECTED_GROUP_SIZES


def test_directions_follow_product_section_4():
    for objective in list_objectives():
        expected = Direction.MAX if objective.name in MAXIMISED else Direction.MIN
        assert objective.direction is expected, objective.name


def test_every_objective_reads_a_known_metric_and_latencies_read_the_mean():
    for objective in list_objectives():
        assert objective.metric in METRIC_KEYS
        assert not objective.needs_distribution
    assert OBJECTIVES["ttft"].metric == "ttft_ms_mean"
    assert OBJECTIVES["tpot"].metric == "tpot_ms_mean"
    assert OBJECTIVES["e2e_latency"].metric == "e2e_ms_mean"
    assert OBJECTIVES["interactivity"].metric == "interactivity_mean"


def test_metric_keys_are_distributions_then_scalars():
    assert len(METRIC_KEYS) == len(set(METRIC_KEYS)) == 5 * 6 + len(SCALAR_METRICS)
    assert latency_key("itl_ms", "p90") == "itl_ms_p90" in METRIC_KEYS
    assert "interactivity_p50" in METRIC_KEYS
    assert LATENCY_METRICS == ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "interactivity")
    assert LATENCY_STATS == ("mean", "p50", "p90", "p95", "p99", "p999")
    with pytest.raises(ValueError):
        latency_key("itl_ms", "p91")


def test_groups_are_string_enums():
    assert OBJECTIVES["gpus_per_replica"].group == "cost"
    assert {str(g) for g in Group} == set(EXPECTED_GROUP_SIZES)


@pytest.mark.parametrize(
    ("alias", "name"),
    [
        ("throughput", "output_throughput_per_gpu"),
        ("total_throughput", "throughput_per_gpu"),
        ("interactivity", "interactivity"),
        ("ttft", "ttft"),
        ("tpot", "tpot"),
        ("capacity", "max_concurrency"),
        ("cost", "gpus_per_replica"),
        ("e2e", "e2e_latency"),
    ],
)
def test_aliases_of_product_section_4(alias, name):
    assert resolve_objective(alias).name == name


@pytest.mark.parametrize("spelling", ["Throughput-Per-GPU", " throughput_per_gpu ", "TOTAL-THROUGHPUT"])
def test_resolution_ignores_case_hyphens_and_whitespace(spelling):
    assert resolve_objective(spelling) is OBJECTIVES["throughput_per_gpu"]


def test_aliases_do_not_collide_with_names_or_each_other():
    aliases = [a for o in list_objectives() for a in o.aliases]
    assert len(aliases) == len(set(aliases))
    assert not set(aliases) & set(OBJECTIVES)
    assert len(objective_names()) == 24 + len(aliases)


def test_unknown_objective_names_the_input_and_lists_every_accepted_name():
    with pytest.raises(InputError) as caught:
        resolve_objective("thruput")
    error = caught.value
    assert error.what == "--objective"
    assert "thruput" in error.problem
    for name in objective_names():
        assert name in error.accepted
    assert "..." not in error.accepted


def test_signed_score_is_higher_for_better():
    metrics = {"throughput_per_gpu": 1200.0, "ttft_ms_mean": 450.0}
    assert OBJECTIVES["throughput_per_gpu"].signed_score(metrics) == 1200.0
    assert OBJECTIVES["ttft"].signed_score(metrics) == -450.0
    assert OBJECTIVES["tpot"].signed_score(metrics) is None
    assert OBJECTIVES["tpot"].value(metrics) is None
    assert OBJECTIVES["ttft"].value({"ttft_ms_mean": float("nan")}) is None


def test_better_respects_direction_and_unknowns():
    throughput, ttft = OBJECTIVES["throughput_per_gpu"], OBJECTIVES["ttft"]
    assert throughput.better(2.0, 1.0) and not throughput.better(1.0, 2.0)
    assert ttft.better(1.0, 2.0) and not ttft.better(2.0, 1.0)
    assert not ttft.better(1.0, 1.0)
    assert ttft.better(5.0, None) and not ttft.better(None, 5.0)
    assert not ttft.better(None, None)


def test_better_agrees_with_signed_score():
    for objective in list_objectives():
        low, high = {objective.metric: 1.0}, {objective.metric: 2.0}
        score_says = objective.signed_score(high) > objective.signed_score(low)
        assert objective.better(2.0, 1.0) == score_says, objective.name
