"""The Pareto frontier of a sweep: output throughput per GPU against interactivity (METHOD §8).

Which points may be on it (:class:`FrontierRule`): a frontier over two axes ignores
TTFT, and a saturated deployment whose queue has grown to minutes keeps a sliver more
throughput than the same layout at half the load, so it would sit on the frontier with a
TTFT no user accepts (seen: 37-384 s). We chose a cap over a third axis: a point is
eligible when its mean TTFT is at most ``ttft_max_ms`` (default 10 s, the loosest TTFT
bound of METHOD §7's tiers, `responsive`; ``None`` lifts it) and it meets every extra
bound given (the CLI's ``--slo``). A three-way dominance (throughput, interactivity,
TTFT) would remove none of those points, since they are the best on throughput.
Ineligible points stay in the sweep's files, marked, and are drawn apart.

Both axes are maximised. A point is *dominated* when another point is at least as good
on both axes and strictly better on one; the frontier is every point that is not
dominated. Two points with identical coordinates do not dominate each other, so both
stay on the frontier, unless the caller passes ``prefer`` (a sort key per point): then
each frontier coordinate keeps one point, the one with the smallest key (a sweep prefers
the shorter TTFT and fewer GPUs among configurations that tie on both axes). Points with
a missing or non-finite coordinate are never on it.

One sort and one pass: order by the first axis descending (the second descending
within ties); a point is on the frontier when its second coordinate beats every point
with a strictly larger first coordinate and it is the best (or tied best) of its own
first-coordinate group. O(n log n), so a 10^5-point sweep costs milliseconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

DEFAULT_TTFT_MAX_MS = 10_000.0   # METHOD §7 responsive tier: TTFT <= 10 s
TTFT_KEY = "ttft_ms_mean"
UPPER, LOWER = "<=", ">="


@dataclass(frozen=True, slots=True)
class Bound:
    """One bound on a metrics key: ``key <= value`` or ``key >= value``; ``text`` is how
    the user wrote it (``p90-itl<=25ms``)."""

    key: str
    op: str
    value: float
    text: str

    def admits(self, metrics: Mapping[str, float]) -> bool:
        """True when met or when the point does not carry the metric (nothing to check)."""
        actual = metrics.get(self.key)
        if actual is None or not math.isfinite(actual):
            return True
        return actual <= self.value if self.op == UPPER else actual >= self.value


@dataclass(frozen=True, slots=True)
class FrontierRule:
    """Which points may be on the frontier (see the module docstring)."""

    ttft_max_ms: float | None = DEFAULT_TTFT_MAX_MS
    bounds: tuple[Bound, ...] = ()

    @property
    def all_bounds(self) -> tuple[Bound, ...]:
        cap = () if self.ttft_max_ms is None else (
            Bound(TTFT_KEY, UPPER, self.ttft_max_ms, f"mean TTFT <= {self.ttft_max_ms / 1000:g} s"),)
        return cap + self.bounds

    def admits(self, metrics: Mapping[str, float]) -> bool:
        return all(bound.admits(metrics) for bound in self.all_bounds)

    def describe(self) -> str:
        return ", ".join(bound.text for bound in self.all_bounds) or "every point"

    def to_json(self) -> dict[str, Any]:
        return {"ttft_max_ms": self.ttft_max_ms,
                "bounds": [{"key": b.key, "op": b.op, "value": b.value, "text": b.text} for b in self.bounds],
                "describe": self.describe()}


def pareto_indices(first: Sequence[float | None], second: Sequence[float | None],
                   prefer: Sequence[Any] | None = None) -> list[int]:
    """Indices (ascending) of the non-dominated points, maximising both coordinates;
    with ``prefer``, one point per frontier coordinate (smallest key, then index)."""
    if len(first) != len(second) or (prefer is not None and len(prefer) != len(first)):
        raise ValueError(f"coordinate lengths differ: {len(first)}, {len(second)}"
                         + ("" if prefer is None else f", {len(prefer)}"))
    finite = [i for i in range(len(first)) if _finite(first[i]) and _finite(second[i])]
    order = sorted(finite, key=lambda i: (-first[i], -second[i]))
    chosen: list[int] = []
    best_before = -math.inf  # best second coordinate among strictly larger first coordinates
    position = 0
    while position < len(order):
        group_end = position
        x = first[order[position]]
        while group_end < len(order) and first[order[group_end]] == x:
            group_end += 1
        group_best = second[order[position]]  # sorted descending within the group
        if group_best > best_before:
            tied = [i for i in order[position:group_end] if second[i] == group_best]
            if prefer is not None:
                tied = [min(tied, key=lambda i: (prefer[i], i))]
            chosen.extend(tied)
            best_before = group_best
        position = group_end
    return sorted(chosen)


def dominates(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """``a`` is at least as good as ``b`` on both axes and strictly better on one."""
    return a[0] >= b[0] and a[1] >= b[1] and (a[0] > b[0] or a[1] > b[1])


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)
