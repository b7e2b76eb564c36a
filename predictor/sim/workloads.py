"""Workloads the simulator replays (METHOD §5 input), as streams of sessions.

Everything is a *session*: a small DAG of requests (a fixed-length request is a session
of one; a multi-turn conversation a chain; an agentic session a chain with subagent
fan-outs and joins). Under a closed loop each of ``concurrency`` client slots runs one
session at a time and starts the next when it ends (a client's next request refills its
slot); under an open loop session roots arrive at their own times (Poisson or trace).

:class:`SyntheticWorkload` draws prompt and output lengths fixed or uniform in a range,
optionally prepends one of ``num_prefixes`` shared prefixes (uniform or Zipf popularity),
and runs closed loop with think time or open loop Poisson. Prompts carry block ids only
when a prefix pool is configured (random-token prompts share nothing).
"""

from __future__ import annotations

import math

from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

import numpy as np

from levers.errors import InputError
from predictor.sim.request import RequestSpec
from predictor.units import US_PER_S

PREFIX_ID_BASE = 1 << 40          # synthetic block-id ranges (prefix pool, unique blocks)
PREFIX_ID_STRIDE = 1 << 24
UNIQUE_ID_BASE = 1 << 50
DEFAULT_BLOCK_TOKENS = 64
FIXED_CLOSED_REQUESTS_PER_CLIENT = 10   # default replay length: 10 requests per client
OPEN_LOOP_DEFAULT_REQUESTS = 1000


class ArrivalMode(StrEnum):
    CLOSED = "closed"
    OPEN = "open"


class Popularity(StrEnum):
    UNIFORM = "uniform"
    ZIPF = "zipf"


@dataclass(frozen=True, slots=True)
class Session:
    """A session's requests; ``children[i]`` are the requests that wait on request ``i``
    (derived once: a search replays the same session many times)."""

    requests: tuple[RequestSpec, ...]
    label: str = ""
    children: tuple[tuple[int, ...], ...] = field(default=(), compare=False, repr=False)

    def __post_init__(self) -> None:
        children: list[list[int]] = [[] for _ in self.requests]
        for index, spec in enumerate(self.requests):
            for dep in spec.deps:
                children[dep].append(index)
        object.__setattr__(self, "children", tuple(tuple(c) for c in children))


class Workload(Protocol):
    """A replayable workload: its arrival mode, block size and a session stream."""

    name: str
    mode: ArrivalMode
    block_tokens: int
    warmup_sessions_per_slot: int
    # optional (`SessionSource` reads them with defaults 0 / False): ``warm_start_sessions``,
    # the first N sessions of a closed loop start mid-way (their opening turns: warm-up);
    # ``counts_sent_requests``, the budget counts requests sent, not scheduled

    def sessions(self, rng: np.random.Generator) -> Iterator[Session]: ...

    def default_num_requests(self, concurrency: int) -> int: ...


@dataclass(frozen=True, slots=True)
class LengthRange:
    """Tokens, fixed (``low == high``) or uniform in [low, high]."""

    low: int
    high: int

    @staticmethod
    def fixed(tokens: int) -> LengthRange:
        return LengthRange(tokens, tokens)

    def __post_init__(self) -> None:
        if not 1 <= self.low <= self.high:
            raise InputError("--workload", f"bad length range {self.low}..{self.high}",
                             "1 <= low <= high tokens")

    def draw(self, rng: np.random.Generator, size: int) -> np.ndarray:
        if self.low == self.high:
            return np.full(size, self.low, dtype=np.int64)
        return rng.integers(self.low, self.high + 1, size=size)


@dataclass(frozen=True, slots=True)
class SyntheticWorkload:
    prompt: LengthRange
    output: LengthRange
    mode: ArrivalMode = ArrivalMode.CLOSED
    arrival_rate: float = 0.0              # requests/s (open loop)
    think_s: float = 0.0                   # closed loop: client think time between requests
    num_prefixes: int = 0
    prefix_tokens: int = 0
    popularity: Popularity = Popularity.UNIFORM
    zipf_exponent: float = 1.0
    block_tokens: int = DEFAULT_BLOCK_TOKENS
    warmup_sessions_per_slot: int = 0      # 1: a closed loop's first request per client is warm-up
    name: str = "synthetic"
    batch_size: int = 4096                 # requests drawn per RNG call
    # Closed loop: the first N requests (the clients' warm-ups) end after a share (k + 0.5) / N
    # of their output, so each client's later requests run out of phase with the others', as a
    # served deployment's arrive. Without it identical fixed-length requests that start
    # together finish together, and every round met the prefill as one wave: DeepSeek-R1 TP4
    # on B200 under SGLang at 32 clients a replica waited 232 ms from admission each round
    # where the analytical steady state (staggered arrivals) prices 80 ms.
    staggered_warmups: int = 0

    @property
    def warm_start_sessions(self) -> int:
        return 0

    @property
    def counts_sent_requests(self) -> bool:
        return False

    def default_num_requests(self, concurrency: int) -> int:
        if self.mode is ArrivalMode.OPEN:
            return OPEN_LOOP_DEFAULT_REQUESTS
        return FIXED_CLOSED_REQUESTS_PER_CLIENT * concurrency

    def _prefix_weights(self) -> np.ndarray:
        ranks = np.arange(1, self.num_prefixes + 1, dtype=float)
        weights = ranks ** -self.zipf_exponent if self.popularity is Popularity.ZIPF else np.ones_like(ranks)
        return weights / weights.sum()

    def sessions(self, rng: np.random.Generator) -> Iterator[Session]:
        next_unique = UNIQUE_ID_BASE
        clock_us = 0.0
        weights = self._prefix_weights() if self.num_prefixes else None
        staggered = self.staggered_warmups if self.mode is ArrivalMode.CLOSED else 0
        sent = 0
        while True:
            prompts = self.prompt.draw(rng, self.batch_size)
            outputs = self.output.draw(rng, self.batch_size)
            gaps = rng.exponential(US_PER_S / self.arrival_rate, self.batch_size) \
                if self.mode is ArrivalMode.OPEN else None
            picks = rng.choice(self.num_prefixes, self.batch_size, p=weights) if weights is not None else None
            for i in range(self.batch_size):
                prompt = int(prompts[i]) + (self.prefix_tokens if picks is not None else 0)
                ids = np.zeros(0, dtype=np.int64)
                if picks is not None:
                    ids, next_unique = self._block_ids(int(picks[i]), prompt, next_unique)
                arrival = None
                if gaps is not None:
                    clock_us += float(gaps[i])
                    arrival = clock_us
                think = 0.0 if gaps is not None else self.think_s * US_PER_S
                output = int(outputs[i])
                if sent < staggered:      # a warm-up, cut to its phase (field comment)
                    output = max(1, math.ceil(output * (sent + 0.5) / staggered))
                sent += 1
                yield Session((RequestSpec(prompt, output, ids, (), think, arrival),))

    def _block_ids(self, prefix: int, prompt: int, next_unique: int) -> tuple[np.ndarray, int]:
        prefix_blocks = self.prefix_tokens // self.block_tokens
        own_blocks = prompt // self.block_tokens - prefix_blocks
        shared = PREFIX_ID_BASE + prefix * PREFIX_ID_STRIDE + np.arange(prefix_blocks, dtype=np.int64)
        own = next_unique + np.arange(max(0, own_blocks), dtype=np.int64)
        return np.concatenate([shared, own]), next_unique + max(0, own_blocks)
