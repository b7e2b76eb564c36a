"""Stopping a replay that has clearly missed a latency bound (issue 13 speed).

A search prices hundreds of candidates; many miss its SLO by an order of magnitude (a
p90 ITL of 500 ms against 25 ms), and replaying them to the end buys nothing. A
:class:`StopRule` names one metric key of the result (``itl_ms_p90``) and its bound; the
simulation checks the rules every :data:`CHECKS` th of its release budget once
:data:`MIN_SHARE` of it has finished, and stops when a metric is past
:data:`FACTOR` times its bound (upper bounds) or below its bound over the factor (lower
bounds, e.g. interactivity). The factor is wide on purpose: an agentic replay starts
with long uncached prompts whose prefills inflate early tails, and a stopped run only
ever reports a miss, so a false stop would lose a candidate. The result says when and
why it stopped (``extra["stopped_early"]``); its numbers cover what was replayed.

Only steady requests are judged (not a closed loop's first wave nor the opening turns,
which all arrive at once), and a request-level tail quantile only when the same metric's
median is past the bound too: the first steady requests still queue behind the warm-up's
burst, and a p99 over the first few hundred is theirs (a 1k/1k run at 256 clients read
127-272 ms there against a steady p99 of 23 ms and a median of 10, and stopped; a search
then rejected its best candidates on a p99 TTFT bound). A load that truly misses a tail
bound threefold moves its median too.
"""

from __future__ import annotations

from dataclasses import dataclass

CHECKS = 16            # checks per release budget
MIN_SHARE = 0.25       # of the budget finished before the first check
FACTOR = 3.0           # "clearly": three times past the bound
MIN_REQUESTS = 64      # ... and at least this many requests measured


@dataclass(frozen=True, slots=True)
class StopRule:
    key: str                 # metric key, e.g. itl_ms_p90
    bound: float             # ms or tok/s
    is_upper: bool = True    # latencies are upper bounds, interactivity a lower one

    @property
    def limit(self) -> float:
        """The value past which the bound is clearly missed."""
        return FACTOR * self.bound if self.is_upper else self.bound / FACTOR

    def clearly_missed(self, value: float | None, median: float | None = None) -> bool:
        """``value`` past the limit and, for a tail quantile, ``median`` (the same metric's
        p50) past the bound itself (module docstring)."""
        if value is None or value != value:   # NaN: not measured yet
            return False
        if self.is_tail and not (median is not None and (median > self.bound if self.is_upper
                                                         else median < self.bound)):
            return False
        return value > self.limit if self.is_upper else value < self.limit

    @property
    def is_tail(self) -> bool:
        """A request-level tail quantile (an ITL quantile has a sample from every token, so
        the warm-up's few requests do not hold it)."""
        name, _, stat = self.key.rpartition("_")
        return stat not in ("mean", "p50") and not name.startswith("itl")

    @property
    def median_key(self) -> str:
        return self.key.rpartition("_")[0] + "_p50"

    def describe(self, value: float) -> str:
        relation = f"> {FACTOR:g}x" if self.is_upper else f"< 1/{FACTOR:g} of"
        return f"{self.key} {value:.4g} {relation} the bound {self.bound:g}"
