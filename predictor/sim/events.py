"""The simulator's events: small immutable records (NamedTuples: one is built per event,
at a third of a frozen dataclass's cost); handlers return new events (STYLE rule 3).

The simulator owns the clock and the heap. Ties at one instant resolve by priority:
arrivals (and the loads and hand-offs that put a request in a queue) first, then step
ends, then kicks, so a request released by a completion is seen by the step that starts
at that same instant.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from predictor.sim.request import Request

if TYPE_CHECKING:
    from predictor.sim.rank import Rank
    from predictor.sim.replica import Replica


class Arrival(NamedTuple):
    """A request is released by its client and reaches the router."""

    request: Request


class LoadDone(NamedTuple):
    """Its DRAM-resident prefix is back in HBM (METHOD §3.10)."""

    request: Request
    rank: Rank


class HandoffDone(NamedTuple):
    """Its KV reached the decode pool (METHOD §3.11)."""

    request: Request


class StepEnd(NamedTuple):
    """A replica's step (or stretch) ends; stale if the replica's stamp moved on."""

    replica: Replica
    stamp: int


class Kick(NamedTuple):
    """An idle replica should look for work."""

    replica: Replica


Event = Arrival | LoadDone | HandoffDone | StepEnd | Kick

PRIORITY: dict[type, int] = {Arrival: 0, LoadDone: 0, HandoffDone: 0, StepEnd: 1, Kick: 2}
