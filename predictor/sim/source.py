"""Releases a workload's requests as the simulation runs (METHOD §5, timed simulation).

Open loop: every session root arrives at its own time. Closed loop: ``concurrency``
client slots each run one session; a session's next turn is released ``think`` after
the request(s) it waits on finish (never before: a turn is not a candidate until the
request it waits on has been served), and when a session ends its slot starts the next
one. The release budget (``num_requests``) is enforced here; the moment the last
request is released ends a closed loop's steady-state window.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from predictor.sim.request import Request
from predictor.sim.workloads import ArrivalMode, Session, Workload

Release = tuple[float, Request]


@dataclass(slots=True)
class _LiveSession:
    index: int
    slot: int
    session: Session
    is_warmup: bool
    pending: list[int]                       # unfinished deps per request
    outstanding: int = 0                     # released, not finished


class SessionSource:
    def __init__(self, workload: Workload, num_requests: int, concurrency: int,
                 rng: np.random.Generator) -> None:
        self.mode = workload.mode
        self.concurrency = max(1, concurrency)
        self.budget = num_requests
        self.warmup_per_slot = workload.warmup_sessions_per_slot
        self._sessions: Iterator[Session] = workload.sessions(rng)
        self._next_session = 0
        self._slot_sessions = [0] * self.concurrency
        self._live: dict[int, _LiveSession] = {}
        self.released = 0
        self.is_exhausted = False

    # -- public ----------------------------------------------------------------------------
    def start(self) -> list[Release]:
        out: list[Release] = []
        if self.mode is ArrivalMode.OPEN:
            while not self.is_exhausted:
                if not self._open_session(0, out):
                    self.is_exhausted = True
        else:
            for slot in range(self.concurrency):
                if not self._open_session(slot, out, now_us=0.0, first=True):
                    self.is_exhausted = True
                    break
        return out

    def on_finish(self, request: Request, now_us: float) -> list[Release]:
        live = self._live[request.session]
        live.outstanding -= 1
        out: list[Release] = []
        for child in live.session.children[request.local_index]:
            live.pending[child] -= 1
            if live.pending[child] == 0:
                spec = live.session.requests[child]
                self._release(live, child, now_us + spec.think_us, out)
        if live.outstanding == 0:
            del self._live[live.index]
            refill = self.mode is ArrivalMode.CLOSED and not self.is_exhausted
            if refill and not self._open_session(live.slot, out, now_us=now_us):
                self.is_exhausted = True
        return out

    # -- internals ---------------------------------------------------------------------------
    def _open_session(self, slot: int, out: list[Release], now_us: float = 0.0,
                      first: bool = False) -> bool:
        session = next(self._sessions, None)
        if session is None or not session.requests:
            return False
        requests = session.requests
        pending = [len(spec.deps) for spec in requests]
        is_warmup = self._slot_sessions[slot] < self.warmup_per_slot
        self._slot_sessions[slot] += 1
        live = _LiveSession(self._next_session, slot, session, is_warmup, pending)
        self._live[live.index] = live
        self._next_session += 1
        for index, spec in enumerate(requests):
            if pending[index] == 0:
                if self.mode is ArrivalMode.OPEN:
                    at = spec.arrival_us if spec.arrival_us is not None else 0.0
                else:
                    at = now_us + (0.0 if first else spec.think_us)
                self._release(live, index, at, out)
        if live.outstanding == 0:          # budget hit before anything was released
            del self._live[live.index]
            return False
        return True

    def _release(self, live: _LiveSession, index: int, at_us: float, out: list[Release]) -> None:
        if self.released >= self.budget:
            self.is_exhausted = True
            return
        request = Request(self.released, live.session.requests[index], live.index, live.slot,
                          at_us, live.is_warmup, local_index=index)
        live.outstanding += 1
        self.released += 1
        if self.released >= self.budget:
            self.is_exhausted = True
        out.append((at_us, request))
