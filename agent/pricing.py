"""Pricing many candidates at once: seed rounds and the confirm step across local cores
(METHOD §6; PRODUCT.md §2 `--workers`).

A seed round does not depend on its own results (its centre is fixed when the round is
listed), so its candidates are priced together: :class:`Pricer` hands them to a
``concurrent.futures.ProcessPoolExecutor`` and yields the trials back **in submission
order**, so the session numbers and records them exactly as a sequential search would
(the ledger is the same trial for trial; only wall times differ). Each worker rebuilds
the search context once, from the question's names (:class:`agent.tune.TuneRequest`), in
its initializer (workers are forked where the OS allows, so they also inherit the loaded
cards and anchors); a task carries one configuration. With one worker, or an injected
predictor (tests), candidates are priced in this process, one at a time, lazily.

The LLM phase stays sequential (ReAct is): it prices through the session in process.
"""

from __future__ import annotations

import multiprocessing
import os
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

from agent.question import TuneRequest, build_context
from agent.scoring import evaluate
from agent.seed_planner import Seed
from agent.trial import Phase, SearchContext, Trial
from levers.configuration import Configuration
from levers.errors import InputError

MAX_WORKERS = 256
DEFAULT_MAX_WORKERS = 8   # a seed round has ~75 candidates: more processes mostly add memory


@dataclass(frozen=True, slots=True)
class Job:
    """One candidate to price."""

    config: Configuration
    phase: Phase
    proposed: dict[str, Any] | None = None
    full_fidelity: bool = False
    replications: int = 1


def available_cores() -> int:
    """Cores this process may run on (the affinity mask where the OS has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def resolve_workers(workers: int | None) -> int:
    """``--workers``: None means every available core (at most :data:`DEFAULT_MAX_WORKERS`);
    1 prices in this process."""
    if workers is None:
        return min(available_cores(), DEFAULT_MAX_WORKERS)
    if not 1 <= workers <= MAX_WORKERS:
        raise InputError("--workers", f"{workers} is out of range", f"1 to {MAX_WORKERS} (default: all cores)")
    return workers


# -- worker side ----------------------------------------------------------------------
_WORKER_CONTEXT: SearchContext | None = None


def _init_worker(question: "TuneRequest") -> None:
    """Per-process context, rebuilt from names (no big object crosses per task)."""
    global _WORKER_CONTEXT
    _WORKER_CONTEXT = build_context(question)


def _price_in_worker(job: Job) -> Trial:
    return evaluate(_WORKER_CONTEXT, job.config, phase=job.phase, proposed=job.proposed,
                    full_fidelity=job.full_fidelity, replications=job.replications)


# -- caller side ----------------------------------------------------------------------
class Pricer:
    """Prices jobs in order, in a process pool when ``workers > 1`` and the context can be
    rebuilt from ``question`` (the real predictor), else in this process."""

    def __init__(self, context: SearchContext, question: "TuneRequest | None" = None, workers: int = 1) -> None:
        self.context = context
        self.question = question
        self.workers = workers if question is not None else 1
        self._executor: Executor | None = None

    @property
    def parallel(self) -> bool:
        return self.workers > 1

    def price(self, jobs: list[Job]) -> Iterator[Trial]:
        """The jobs' trials in job order. Stop iterating to drop the rest (queued ones are
        cancelled)."""
        if not self.parallel or len(jobs) <= 1:
            return (self._price_here(job) for job in jobs)
        return self._pool().map(_price_in_worker, jobs)

    def _price_here(self, job: Job) -> Trial:
        return evaluate(self.context, job.config, phase=job.phase, proposed=job.proposed,
                        full_fidelity=job.full_fidelity, replications=job.replications)

    def _pool(self) -> Executor:
        if self._executor is None:
            method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
            self._executor = ProcessPoolExecutor(
                max_workers=self.workers, mp_context=multiprocessing.get_context(method),
                initializer=_init_worker, initargs=(self.question,))
        return self._executor

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None

    def __enter__(self) -> "Pricer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SeedQueue:
    """The seed planner's rounds as batches: a batch never crosses a round boundary, and
    the next round is listed only when the previous one has been taken (and recorded).
    ``key`` says which configurations are the same trial (`SearchSession.key`): a batch
    holds one of each."""

    def __init__(self, rounds: Iterator[list[Seed]], seen: Callable[[Configuration], bool],
                 key: Callable[[Configuration], Configuration] = lambda config: config) -> None:
        self._rounds = rounds
        self._seen = seen
        self._key = key
        self._pending: deque[Seed] = deque()
        self._done = False

    def take(self, limit: int) -> list[Seed]:
        """Up to ``limit`` unseen seeds of the current round (the next round when it is
        used up); empty when the planner has no more."""
        batch: list[Seed] = []
        keys: set[Configuration] = set()
        while limit > 0 and not self._done:
            while self._pending and len(batch) < limit:
                seed = self._pending.popleft()
                key = self._key(seed.config)
                if key not in keys and not self._seen(seed.config):
                    keys.add(key)
                    batch.append(seed)
            if batch:
                return batch
            next_round = next(self._rounds, None)
            if next_round is None:
                self._done = True
            else:
                self._pending.extend(next_round)
        return batch
