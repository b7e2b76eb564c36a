"""Replications (predictor.sim.replications): independent workload draws, their mean and
its 90% interval, which narrows as replications are added; replication 0 is the plain run;
a stopped replay says why."""

import math

import pytest

from levers.configuration import Configuration
from predictor.sim import reuse, simulate
from predictor.sim.replications import mean_interval, overlap, t95
from predictor.sim.stop import StopRule
from predictor.workload import AGENTIC, WorkloadSpec
from tests.predictor.sim.sim_fakes import fake_factory, fixed_capacity

KEYS = ("output_throughput_per_gpu", "ttft_ms_mean", "itl_ms_p90", "e2e_ms_mean")


def run(target, replications, seed=0, **kwargs):
    return simulate(target, Configuration(concurrency=6), AGENTIC, step_model_factory=fake_factory(),
                    capacity_model=fixed_capacity(3_000_000), num_requests=90, seed=seed,
                    replications=replications, **kwargs)


def width(result, key):
    low, high = result.seed_intervals[key]
    return high - low


def test_one_replication_is_the_plain_run_and_has_no_interval(target):
    plain = run(target, 1)
    assert plain.seed_intervals == {} and plain.replications == 1
    pair = run(target, 2)
    assert pair.replications == 2 and pair.num_requests > plain.num_requests
    reuse.STORE.clear()                # replayed, not the kept result (predictor.sim.reuse)
    other = run(target, 1, seed=0)
    assert other.metrics == plain.metrics


def test_the_mean_sits_inside_its_interval_and_intervals_shrink_with_replications(target):
    """Expected shrink from 3 to 12 replications: t(2)/sqrt(3) over t(11)/sqrt(12), 3.3x;
    the sample spread itself varies, so the median over metrics must shrink by 1.5x."""
    few, many = run(target, 3), run(target, 12)
    ratios = []
    for key in KEYS:
        for result in (few, many):
            low, high = result.seed_intervals[key]
            assert low <= result.metrics[key] <= high
        ratios.append(width(few, key) / width(many, key))
    assert sorted(ratios)[len(ratios) // 2] > 1.5, ratios
    assert "overall" in many.hit_rate["intervals"]


def test_intervals_follow_students_t():
    mean, (low, high) = mean_interval([1.0, 2.0, 3.0])
    assert mean == 2.0 and high - mean == pytest.approx(t95(2) * 1.0 / math.sqrt(3)) and low == pytest.approx(4.0 - high)
    assert mean_interval([4.0]) == (4.0, None)
    assert t95(1) == pytest.approx(6.314) and t95(100) == pytest.approx(1.645)
    assert overlap((1.0, 2.0), (2.0, 3.0)) and not overlap((1.0, 2.0), (2.1, 3.0)) and not overlap(None, (1, 2))


def test_a_replay_that_clearly_misses_a_bound_stops_and_says_why(target):
    full = run(target, 1)
    stopped = run(target, 1, stop_rules=(StopRule("ttft_ms_mean", full.metrics["ttft_ms_mean"] / 10),))
    info = stopped.extra["stopped_early"]
    assert info["after_requests"] < 90 and "ttft_ms_mean" in info["reason"]
    assert stopped.metrics["ttft_ms_mean"] > 3 * full.metrics["ttft_ms_mean"] / 10
    kept = run(target, 1, stop_rules=(StopRule("ttft_ms_mean", full.metrics["ttft_ms_mean"]),))
    assert "stopped_early" not in kept.extra and kept.metrics == full.metrics


def test_a_tail_bound_is_not_judged_on_the_first_waves_queue(target):
    """A closed loop's first wave arrives at once, and the first steady requests queue
    behind it: judged on them, a 1k/1k run at 256 clients stopped at its 256th request on
    a p99 TTFT 13x its steady one (a tune then rejected its best candidates)."""
    kwargs = dict(step_model_factory=fake_factory(), capacity_model=fixed_capacity(30_000_000), num_requests=1024)
    config, workload = Configuration(concurrency=256, max_running_requests=1024), WorkloadSpec("fixed", 1024, 1024)
    full = simulate(target, config, workload, **kwargs)
    kept = simulate(target, config, workload, stop_rules=(StopRule("ttft_ms_p99", 1.2 * full.metrics["ttft_ms_p99"]),),
                    **kwargs)
    assert "stopped_early" not in kept.extra and kept.metrics == full.metrics
    # a bound the median misses too is still clearly missed
    stopped = simulate(target, config, workload, stop_rules=(StopRule("ttft_ms_p99", full.metrics["ttft_ms_p50"] / 10),),
                       **kwargs)
    assert "ttft_ms_p99" in stopped.extra["stopped_early"]["reason"]


def test_interval_of_a_non_negative_quantity_stays_non_negative():
    """A heavy-tailed TTFT (seconds) keeps a positive interval around its mean (linear, it
    read [-28 s, 398 s], shown clipped as 0 ms); a share with a draw at 0 stops at 0."""
    draws = [0.5, 1.0, 120.0]
    mean, (low, high) = mean_interval(draws)
    logs = [math.log(v) for v in draws]
    centre = sum(logs) / 3
    factor = math.exp(t95(2) * math.sqrt(sum((v - centre) ** 2 for v in logs) / 2) / math.sqrt(3))
    assert low == pytest.approx(mean / factor) and 0.0 < low < min(draws)     # the logs' lower end
    spread = math.sqrt(sum((v - mean) ** 2 for v in draws) / 2)
    assert high == pytest.approx(mean + t95(2) * spread / math.sqrt(3)) and high < 2 * max(draws)   # the t upper end
    assert mean_interval([0.0, 0.5, 0.9])[1][0] == 0.0                   # a share with a draw at 0
    assert mean_interval([1e-6, 0.5, 0.9])[1][1] == pytest.approx(mean_interval([0.0, 0.5, 0.9])[1][1], rel=1e-4)
    _, (signed_low, _) = mean_interval([-1.0, 0.5, 120.0])  # a signed quantity keeps its t interval
    assert signed_low < 0.0


def test_a_hit_rates_interval_stays_a_share():
    """Two replications at 0 and 1 (a replay too short to warm its cache, and one that
    did): the t interval's upper end would be 3.7; a share ends at 1."""
    from predictor.sim.replications import _hit_rates
    from predictor.sim.results import SimResult

    def result(hit):
        return SimResult({}, {}, {"overall": hit, "per_replica": [hit], "per_tier": {"hbm": hit, "dram": 0.0}},
                         1, 0.0, 0.0)

    rates = _hit_rates([result(0.0), result(1.0)])
    assert rates["overall"] == 0.5
    for low, high in rates["intervals"].values():
        assert 0.0 <= low <= high <= 1.0
    assert rates["intervals"]["overall"] == [0.0, 1.0]


def test_combined_counts_hold_what_any_replication_counted():
    """A count only a later replication holds (its replay was warm-up only, or short) is
    summed too, and a flag it raises is said; the first replication's other extras win."""
    from predictor.sim.replications import combine
    from predictor.sim.results import SHORT_REPLAY, WARMUP_ONLY, SimResult

    def result(extra):
        return SimResult({}, {"output_throughput_per_gpu": 1.0},
                         {"overall": 0.5, "per_replica": [0.5], "per_tier": {"hbm": 0.5}}, 1, 0.0, 0.0, extra)

    combined = combine([result({"steps": 10, "note": "first"}), result({"steps": 12, WARMUP_ONLY: 1}),
                        result({"steps": 11, SHORT_REPLAY: 1, "note": "third"})])
    assert combined.extra["steps"] == 33 and combined.extra[WARMUP_ONLY] == 1 and combined.extra[SHORT_REPLAY] == 1
    assert combined.extra["note"] == "first"
    assert [f.split(":")[0] for f in combined.flags] == ["warm-up only", "short replay"]
    assert "in 1 of 3 replication(s)" in combined.flags[0]


def test_combined_speed_quantiles_are_the_inverse_of_the_combined_tpot_quantiles(target):
    """One replication defines interactivity pN as 1000 / tpot pN; combined, each mean
    over replications would break it (the mean of inverses is not the inverse of the
    mean), so `interactivity pN` and `tpot pN` SLOs could disagree. The mean speed stays
    the mean of its replications."""
    result = run(target, 3)
    metrics, seeds = result.metrics, result.seed_intervals
    for stat in ("p50", "p90", "p99"):
        assert metrics[f"interactivity_{stat}"] == pytest.approx(1000.0 / metrics[f"tpot_ms_{stat}"])
        low, high = seeds[f"tpot_ms_{stat}"]
        assert seeds[f"interactivity_{stat}"] == pytest.approx((1000.0 / high, 1000.0 / low))
    assert metrics["interactivity_mean"] != pytest.approx(1000.0 / metrics["tpot_ms_mean"], rel=1e-9)
