"""The SLO grammar of PRODUCT.md §2: parsing, printing (round trip) and checking."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from levers.errors import InputError
from objectives.objectives import LATENCY_STATS, METRIC_KEYS
from objectives.slo import (
    LOWER_BOUND_METRICS,
    SLO,
    SLO_METRICS,
    check_all,
    miss_distance,
    needs_distribution,
    parse_slo,
    parse_slos,
)


@pytest.mark.parametrize(
    ("text", "expected", "key"),
    [
        ("p90-itl=25", SLO("itl", "p90", "<=", 25.0), "itl_ms_p90"),
        ("ttft<=2s", SLO("ttft", "mean", "<=", 2000.0), "ttft_ms_mean"),
        ("p99-tpot<=40ms", SLO("tpot", "p99", "<=", 40.0), "tpot_ms_p99"),
        ("interactivity>=70", SLO("interactivity", "mean", ">=", 70.0), "interactivity_mean"),
        ("p999-e2e<=30s", SLO("e2e", "p999", "<=", 30000.0), "e2e_ms_p999"),
        ("mean-ttft=500", SLO("ttft", "mean", "<=", 500.0), "ttft_ms_mean"),
        ("P50-Interactivity = 25 tok/s", SLO("interactivity", "p50", ">=", 25.0),
         "interactivity_p50"),
        ("  p95 - ITL <= 0.5 S ", SLO("itl", "p95", "<=", 500.0), "itl_ms_p95"),
        ("e2e=1.5e3ms", SLO("e2e", "mean", "<=", 1500.0), "e2e_ms_mean"),
        ("tpot<=0.0035s", SLO("tpot", "mean", "<=", 3.5), "tpot_ms_mean"),
    ],
)
def test_documented_forms_parse(text, expected, key):
    slo = parse_slo(text)
    assert slo == expected
    assert slo.key == key
    assert slo.key in METRIC_KEYS


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("itl", "no operator"),
        ("p90itl=25", "needs a hyphen ('p90-itl')"),
        ("p91-itl=2", "unknown percentile 'p91'"),
        ("foo=3", "unknown metric 'foo'"),
        ("itl=abc", "'abc' is not a number"),
        ("itl>=5", "itl takes an upper bound"),
        ("ttft=2tok/s", "unit 'tok/s' does not apply to ttft"),
        ("interactivity<=5", "interactivity takes a lower bound"),
        ("interactivity=5ms", "unit 'ms' does not apply to interactivity"),
        ("itl<5", "unknown operator '<'"),
        ("itl=0", "positive"),
        ("itl=-5", "positive"),
        ("=5", "missing metric"),
        ("", "empty"),
    ],
)
def test_malformed_slos_are_rejected_naming_the_input_and_accepted_forms(text, reason):
    with pytest.raises(InputError) as caught:
        parse_slo(text)
    error = caught.value
    assert error.what == "--slo"
    assert f"cannot parse '{text}'" in error.problem
    assert reason in error.problem
    for form in ("p90-itl=25", "ttft<=2s", "interactivity>=70", "p999"):
        assert form in error.accepted
    assert text in str(error)


def _slos():
    """Any valid SLO, values spanning tiny to huge floats."""
    return st.builds(
        lambda metric, stat, value: SLO(
            metric, stat, ">=" if metric in LOWER_BOUND_METRICS else "<=", value
        ),
        st.sampled_from(sorted(SLO_METRICS)),
        st.sampled_from(LATENCY_STATS),
        st.floats(min_value=1e-9, max_value=1e12, allow_nan=False, allow_infinity=False),
    )


@given(_slos())
def test_printed_slo_parses_back_to_an_equal_slo(slo):
    text = str(slo)
    assert parse_slo(text) == slo
    assert parse_slo(text.upper()) == slo


@given(
    st.sampled_from(["ttft", "tpot", "itl", "e2e"]),
    st.integers(min_value=1, max_value=10**6),
    st.sampled_from(["", "ms", "s", " ms", " S"]),
)
def test_latency_units_convert_to_milliseconds(metric, number, unit):
    slo = parse_slo(f"{metric}={number}{unit}")
    scale = 1000.0 if unit.strip().lower() == "s" else 1.0
    assert slo.value == number * scale
    assert slo.op == "<="


def test_needs_distribution_only_for_percentiles():
    assert not parse_slo("ttft<=2s").needs_distribution
    assert parse_slo("p50-ttft<=2s").needs_distribution
    assert needs_distribution(parse_slos(["ttft<=2s", "p90-itl=25"]))
    assert not needs_distribution(parse_slos(["ttft<=2s", "interactivity>=70"]))


def test_parse_slos_accepts_repeats_commas_and_nothing():
    assert parse_slos(None) == ()
    assert parse_slos([]) == ()
    slos = parse_slos(["p90-itl=25, ttft<=2s", "interactivity>=70"])
    assert [s.key for s in slos] == ["itl_ms_p90", "ttft_ms_mean", "interactivity_mean"]
    assert parse_slos("p90-itl=25") == (parse_slo("p90-itl=25"),)


def test_parse_slos_rejects_two_bounds_on_one_key():
    with pytest.raises(InputError) as caught:
        parse_slos(["p90-itl=25", "p90-itl<=30ms"])
    assert "itl_ms_p90" in caught.value.problem


def test_direct_construction_guards_invariants():
    with pytest.raises(ValueError):
        SLO("itl", "p90", ">=", 25.0)
    with pytest.raises(ValueError):
        SLO("itl", "p90", "<=", math.inf)
    with pytest.raises(ValueError):
        SLO("queue", "mean", "<=", 1.0)


def test_upper_bound_check_met_missed_and_missing():
    slo = parse_slo("p90-itl=25")
    met = slo.check({"itl_ms_p90": 20.0})
    assert met.met is True and met.actual == 20.0
    assert met.slack == pytest.approx(0.2, rel=1e-12)
    missed = slo.check({"itl_ms_p90": 30.0})
    assert missed.met is False
    assert missed.slack == pytest.approx(-0.2, rel=1e-12)
    assert slo.check({"itl_ms_p90": 25.0}).met is True
    missing = slo.check({"itl_ms_mean": 20.0})
    assert (missing.met, missing.actual, missing.slack) == (None, None, None)
    assert "not predicted" in str(missing)


def test_lower_bound_check_met_and_missed():
    slo = parse_slo("interactivity>=70")
    met = slo.check({"interactivity_mean": 84.0})
    assert met.met is True and met.slack == pytest.approx(0.2, rel=1e-12)
    missed = slo.check({"interactivity_mean": 35.0})
    assert missed.met is False and missed.slack == pytest.approx(-0.5, rel=1e-12)


def test_check_all_verdicts_and_miss_distance():
    slos = parse_slos(["p90-itl=25", "ttft<=2s", "interactivity>=70"])
    good = {"itl_ms_p90": 20.0, "ttft_ms_mean": 1000.0, "interactivity_mean": 80.0}
    verdict, checks = check_all(slos, good)
    assert verdict is True and len(checks) == 3
    assert miss_distance(checks) == 0.0

    bad = {**good, "itl_ms_p90": 30.0, "interactivity_mean": 35.0}
    verdict, checks = check_all(slos, bad)
    assert verdict is False
    assert miss_distance(checks) == pytest.approx(0.2 + 0.5, rel=1e-12)

    unknown = {k: v for k, v in good.items() if k != "itl_ms_p90"}
    verdict, checks = check_all(slos, unknown)
    assert verdict is None
    assert miss_distance(checks) == 0.0

    verdict, _ = check_all(slos, {**unknown, "ttft_ms_mean": 3000.0})
    assert verdict is False
    assert check_all((), good) == (True, [])


@given(_slos(), st.floats(min_value=1e-6, max_value=1e9))
def test_slack_sign_agrees_with_verdict(slo, actual):
    check = slo.check({slo.key: actual})
    assert check.met == (check.slack >= 0)
