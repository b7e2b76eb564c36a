"""Resuming a search by replaying its ledger (PRODUCT.md §5 ``--resume``; METHOD §6).

A resumed search must continue exactly as the uninterrupted one would have for the same
seed. The seed planner's rounds depend on the search so far (each round moves around
the leader of the rounds before it, and a round is listed only once the previous one is
recorded), so loading every recorded trial and then asking the planner for "the next
round" asks about a different search: a kill in the middle of a round used to change
the rest of it. Instead the search is run again from its first trial and each candidate
the planner asks for is taken from the ledger, in order, instead of being priced
(:class:`ReplayPricer`): the planner sees the same leaders at the same moments and
lists the same rounds, so when the recorded trials run out the live search is the one
the kill interrupted. The order of the rounds is thereby a function of the ledger.

LLM-phase trials cannot be asked of the LM again: when the search reaches its LLM phase
the recorded planner/investigator trials are restored as they are (:meth:`Replay.
restore_llm_phase`), and the phase runs live only if the ledger does not record its end
(with the cycles it has not run). If the replay ever diverges from the ledger (another
build of the predictor, say), the remaining recorded trials are restored as they are,
so no priced trial is lost, and the search continues live from there.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator

from agent.pricing import Job, Pricer
from agent.session import SearchSession
from agent.trial import Phase, Trial
from levers.configuration import Configuration

LLM_PHASES = (Phase.PLANNER, Phase.INVESTIGATOR)


class Replay:
    """The recorded trials of a ledger, consumed in order."""

    def __init__(self, trials: list[Trial], llm_phase_end: str | None, planner_calls: int) -> None:
        self.pending: deque[Trial] = deque(trials)
        self.llm_phase_end = llm_phase_end
        self.planner_calls = planner_calls
        self.num_replayed = 0
        self.diverged_at: int | None = None

    @property
    def done(self) -> bool:
        return not self.pending

    @property
    def had_llm_phase(self) -> bool:
        """The recorded search reached its LLM phase (so its seed phase was the LLM share)."""
        return self.llm_phase_end is not None or any(t.phase in LLM_PHASES for t in self.pending)

    def take(self, job: Job, key: Callable[[Configuration], Configuration]) -> Trial | None:
        """The recorded trial for ``job`` when it is the next one, else None (``key``: what
        makes two configurations the same trial, `SearchSession.key`: a max-sustainable-
        concurrency trial records the concurrency it found, not the one it was asked at)."""
        if self.pending and self.pending[0].phase is job.phase and key(self.pending[0].config) == key(job.config):
            self.num_replayed += 1
            return self.pending.popleft()
        return None

    def flush(self, session: SearchSession) -> None:
        """Restore every remaining recorded trial as it is (the replay diverged)."""
        if self.pending and self.diverged_at is None:
            self.diverged_at = len(session.trials)
        while self.pending:
            session.record(self.pending.popleft())

    def restore_llm_phase(self, session: SearchSession) -> bool:
        """Record the recorded LLM-phase trials that come next; True if there were any."""
        restored = False
        while self.pending and self.pending[0].phase in LLM_PHASES:
            session.record(self.pending.popleft())
            restored = True
        return restored


class ReplayPricer:
    """A :class:`Pricer` that answers from the :class:`Replay` while the jobs it is given
    are the ledger's next trials, and prices live once they are not (module docstring)."""

    def __init__(self, inner: Pricer, replay: Replay, session: SearchSession) -> None:
        self.inner = inner
        self.replay = replay
        self.session = session

    def price(self, jobs: list[Job]) -> Iterator[Trial]:
        return self._priced(jobs)

    def _priced(self, jobs: list[Job]) -> Iterator[Trial]:
        for position, job in enumerate(jobs):
            recorded = self.replay.take(job, self.session.key)
            if recorded is not None:
                yield recorded
                continue
            rest = jobs[position:]
            if not self.replay.done:
                self.replay.flush(self.session)
                if rest[0].phase is not Phase.CONFIRM:  # the confirm step pairs its jobs with its trials
                    rest = [j for j in rest if not self.session.has_seen(j.config)]
            yield from self.inner.price(rest)
            return

    def close(self) -> None:
        self.inner.close()

    def __enter__(self) -> "ReplayPricer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
