"""The simulator's events: small frozen records; handlers return new events (STYLE rule 3).

The simulator owns the clock and the heap. Ties at one instant resolve by priority:
arrivals (and the loads and hand-offs that put a request in a queue) first, then step
ends, then kicks, so a request released by a completion is seen by the step that starts
at that same instant.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from predictor.sim.request import Request

if TYPE_CHECKING:
    from predictor.sim.rank import Rank
    from predictor.sim.replica import Replica


@dataclass(frozen=True, slots=True)
class Arrival:
    """A request is released by its client and reaches the router."""

    request: Request


@dataclass(frozen=True, slots=True)
class LoadDone:
    """Its DRAM-resident prefix is back in HBM (METHOD §3.10)."""

    request: Request
    rank: Rank


@dataclass(frozen=True, slots=True)
class HandoffDone:
    """Its KV reached the decode pool (METHOD §3.11)."""

    request: Request


@dataclass(frozen=True, slots=True)
class StepEnd:
    """A replica's step (or stretch) ends; stale if the replica's stamp moved on."""

    replica: Replica
    stamp: int


@dataclass(frozen=True, slots=True)
class Kick:
    """An idle replica should look for work."""

    replica: Replica


Event = Arrival | LoadDone | HandoffDone | StepEnd | Kick

PRIORITY: dict[type, int] = {Arrival: 0, LoadDone: 0, HandoffDone: 0, StepEnd: 1, Kick: 2}
