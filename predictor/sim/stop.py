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

    def clearly_missed(self, value: float | None) -> bool:
        if value is None or value != value:   # NaN: not measured yet
            return False
        return value > self.limit if self.is_upper else value < self.limit

    def describe(self, value: float) -> str:
        relation = f"> {FACTOR:g}x" if self.is_upper else f"< 1/{FACTOR:g} of"
        return f"{self.key} {value:.4g} {relation} the bound {self.bound:g}"
