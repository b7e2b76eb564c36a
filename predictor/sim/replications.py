"""Replications of one simulation and their 90% intervals (METHOD §5, §8; issue 13).

An agentic replay is one draw of a noisy process: seeds 0-3 moved one headline answer
by 30% while a search's top ten spanned 2.5%. A replicated prediction runs the same
configuration on ``R`` independent workload draws (replication ``r`` seeds its
generators from ``(seed, r)``; replication 0 is the plain seed, so one replication is
the unreplicated run) and reports each metric as the mean over the replications with a
90% confidence interval of that mean, ``mean +- t(0.95, R - 1) * s / sqrt(R)``
(Student's t, ``s`` the replications' sample standard deviation); a positive quantity
whose lower end would reach zero takes the lower end of the logs' interval instead
(`mean_interval`). The interval narrows as ``1 / sqrt(R)``; with one replication there is none.

Every candidate of a search sees the same draws (common random numbers): the seed, not
the candidate, decides the sessions (`predictor.sim.agentic`), so a difference between
two candidates is the configurations', not the dice's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from predictor.sim.results import SimResult
from predictor.units import MS_PER_S

CONFIDENCE = 0.90
# Student's t at 0.95 (two-sided 90%) by degrees of freedom; beyond the table, the normal 1.645
_T95 = (6.314, 2.920, 2.353, 2.132, 2.015, 1.943, 1.895, 1.860, 1.833, 1.812,
        1.796, 1.782, 1.771, 1.761, 1.753, 1.746, 1.740, 1.734, 1.729, 1.725)
_T95_NORMAL = 1.645


def seed_sequence(seed: int, replication: int) -> np.random.SeedSequence:
    """The root of replication ``replication``'s generators (0: the plain seed)."""
    return np.random.SeedSequence(seed if replication == 0 else [seed, replication])


def t95(degrees_of_freedom: int) -> float:
    if degrees_of_freedom < 1:
        raise ValueError("an interval needs at least two replications")
    return _T95[degrees_of_freedom - 1] if degrees_of_freedom <= len(_T95) else _T95_NORMAL


def mean_interval(values: Sequence[float], ceiling: float = math.inf) -> tuple[float, tuple[float, float] | None]:
    """(mean, its 90% interval); the interval is None for fewer than two finite values.
    ``ceiling``: what the quantity cannot exceed (1 for a share)."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return float("nan"), None
    mean = sum(finite) / len(finite)
    if len(finite) < 2:
        return mean, None
    t = t95(len(finite) - 1) / math.sqrt(len(finite))
    half = t * math.sqrt(sum((v - mean) ** 2 for v in finite) / (len(finite) - 1))
    low, high = mean - half, min(ceiling, mean + half)
    if min(finite) > 0.0 and low <= 0.0:
        # a positive quantity (every latency and rate here; a hit rate unless one draw had
        # none) whose t interval reaches zero: its lower end is the same interval of the
        # logs, as a factor below the mean, so it stays positive (three heavy-tailed TTFT
        # replications read [0-40,376 ms], a TTFT of 0 ms; the upper end stays the t
        # interval's: the logs' factor above a heavy-tailed mean reached 52x its largest draw)
        logs = [math.log(v) for v in finite]
        centre = sum(logs) / len(logs)
        low = mean / math.exp(t * math.sqrt(sum((v - centre) ** 2 for v in logs) / (len(logs) - 1)))
    elif min(finite) >= 0.0:
        low = max(0.0, low)
    return mean, (low, high)


def overlap(a: tuple[float, float] | None, b: tuple[float, float] | None) -> bool:
    """Whether two intervals share a point (a ranking gap inside them is a tie)."""
    return a is not None and b is not None and a[0] <= b[1] and b[0] <= a[1]


def combine(results: Sequence[SimResult]) -> SimResult:
    """One result from replications: every metric the mean over them, with its interval."""
    if len(results) == 1:
        return results[0]
    intervals: dict[str, tuple[float, float]] = {}

    def mean_of(key: str, values: list[float]) -> float:
        mean, interval = mean_interval(values)
        if interval is not None:
            intervals[key] = interval
        return mean

    first = results[0]
    distributions = {name: {stat: mean_of(f"{name}_{stat}", [r.distributions[name][stat] for r in results])
                            for stat in dist} for name, dist in first.distributions.items()}
    _speed_quantiles_from_tpot(distributions, intervals)
    scalars = {key: mean_of(key, [r.scalars[key] for r in results]) for key in first.scalars}
    extra = {key: value for r in reversed(results) for key, value in r.extra.items()}  # the first's win
    for key, value in extra.items():        # counts a later replication alone holds are summed too
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            total = sum(r.extra.get(key, 0) for r in results)
            extra[key] = total / len(results) if key.startswith("mean_") else total
    return SimResult(distributions, scalars, _hit_rates(results), sum(r.num_requests for r in results),
                     sum(r.sim_wall_s for r in results), sum(r.sim_time_s for r in results) / len(results),
                     extra, first.rows, len(results), intervals)


def _speed_quantiles_from_tpot(distributions: dict, intervals: dict) -> None:
    """Each interactivity quantile ``pN`` as 1000 / the combined ``tpot_ms_pN`` (its
    interval the inverse of TPOT's), as one replication defines it up to the percentile's
    interpolation (`predictor.sim.results`): the mean over replications of each one's inverse is not the
    inverse of their mean, and the two drifted 40% apart at p99 (DeepSeek-R1 MTP on B200,
    16 agentic clients), so an SLO on ``interactivity pN`` and one on ``tpot pN`` could
    disagree. The mean speed (the mean of 1/TPOT over requests) stays a mean."""
    speeds, tpot = distributions.get("interactivity"), distributions.get("tpot_ms")
    if not speeds or not tpot:
        return
    for stat in speeds:
        value = tpot.get(stat)
        if stat == "mean" or not value or value <= 0:
            continue
        speeds[stat] = MS_PER_S / value
        interval = intervals.get(f"tpot_ms_{stat}")
        if interval is not None and interval[0] > 0:
            intervals[f"interactivity_{stat}"] = (MS_PER_S / interval[1], MS_PER_S / interval[0])
        else:
            intervals.pop(f"interactivity_{stat}", None)


def _hit_rates(results: Sequence[SimResult]) -> dict:
    """Mean hit rates, with the overall and per-tier intervals under ``intervals`` (a
    share's interval ends at 1)."""
    def mean(values: list[float]) -> tuple[float, tuple[float, float] | None]:
        value, interval = mean_interval(values, ceiling=1.0)
        return round(value, 6), interval

    overall, overall_interval = mean([r.hit_rate["overall"] for r in results])
    tiers = {tier: mean([r.hit_rate["per_tier"][tier] for r in results]) for tier in results[0].hit_rate["per_tier"]}
    replicas = [round(sum(column) / len(column), 6) for column in zip(*(r.hit_rate["per_replica"] for r in results))]
    found = {"overall": overall_interval, **{tier: interval for tier, (_, interval) in tiers.items()}}
    return {"overall": overall, "per_replica": replicas, "per_tier": {t: v for t, (v, _) in tiers.items()},
            "host_tier": results[0].hit_rate.get("host_tier", "none"),
            "intervals": {k: [round(v[0], 6), round(v[1], 6)] for k, v in found.items() if v is not None}}
