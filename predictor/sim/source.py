"""Releases a workload's requests as the simulation runs (METHOD §5, timed simulation).

Open loop: every session root arrives at its own time. Closed loop: ``concurrency``
client slots each run one session; a session's next turn is released ``think`` after
the request(s) it waits on finish (never before: a turn is not a candidate until the
request it waits on has been served), and when a session ends its slot starts the next
one. The request budget (``num_requests``) is enforced here. A closed loop of sessions
(agentic, session traces) counts requests as they are sent (`sends`, asked at arrival),
as a benchmark counts them: a turn still thinking when the last one is sent is never sent,
so the drain is the service of the requests in flight, not up to 300 s of think time
(deployment B: 304 s of a 2,188 s replay). Other closed loops count requests as they are
scheduled (their arrival is their release, or host time after it).

Warm-up (the AgentX rule): a client's first session of a warm-started workload starts
mid-way with a long uncached context; the turns it opens with are warm-up requests, whose
end opens the measured window (`Simulation`).
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
        closed = self.mode is ArrivalMode.CLOSED   # a workload without these knobs: neither rule
        self.counts_sends = closed and getattr(workload, "counts_sent_requests", False)
        self.warms_up_first_turns = closed and getattr(workload, "warm_start_sessions", 0) > 0
        self.sent = 0
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

    def sends(self) -> bool:
        """A request reaches the router: False if the budget's requests were all sent (it
        is never sent). Always True unless the source counts requests sent."""
        if not self.counts_sends:
            return True
        if self.sent >= self.budget:
            return False
        self.sent += 1
        if self.sent >= self.budget:
            self.is_exhausted = True
        return True

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
        opens_warm = first and self.warms_up_first_turns
        self._live[live.index] = live
        self._next_session += 1
        for index, spec in enumerate(requests):
            if pending[index] == 0:
                if self.mode is ArrivalMode.OPEN:
                    at = spec.arrival_us if spec.arrival_us is not None else 0.0
                else:
                    at = now_us + (0.0 if first else spec.think_us)
                self._release(live, index, at, out, opens_warm)
        if live.outstanding == 0:          # budget hit before anything was released
            del self._live[live.index]
            return False
        return True

    def _release(self, live: _LiveSession, index: int, at_us: float, out: list[Release],
                 is_warmup: bool = False) -> None:
        if self.counts_sends:
            if self.sent >= self.budget:
                return
        elif self.released >= self.budget:
            self.is_exhausted = True
            return
        request = Request(self.released, live.session.requests[index], live.index, live.slot,
                          at_us, live.is_warmup or is_warmup, local_index=index)
        live.outstanding += 1
        self.released += 1
        if self.released >= self.budget and not self.counts_sends:
            self.is_exhausted = True
        out.append((at_us, request))
