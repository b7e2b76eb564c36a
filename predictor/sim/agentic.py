"""The synthetic agentic coding workload (PRODUCT.md §2 default; METHOD §5, §7).

A session is a chain of parent turns whose prompt grows: each turn's prompt is the
previous one plus new tokens (tool results, the previous answer), so the previous prompt
is the shared prefix (theoretical reuse ~0.97-0.99, as in the traces). After a turn a
subagent group may start: one to three subagents, each its own growing chain that
opens with a prefix shared by its siblings; the parent's next turn joins the whole
group. Think times separate turns; idle gaps are capped; a session ends after its drawn
number of turns or when its context would pass the model's limit. As in the AgentX
replay rules, a client's first session starts 25-75% of the way in (its context is
already long and uncached). Every number comes from `predictor/data/agentic_profile.json`
(built with its sources by `scripts/build_agentic_profile.py`). Block ids are scoped
per session (the traces' local hash scope), so sessions share nothing and every
session's first turn is unique (the AgentX rule).

Common random numbers: session ``k`` is drawn from its own generator, seeded by the
simulation seed and ``k``, in a few batched numpy calls, so every candidate of a search
replays the same sessions whatever its concurrency or timing; a process keeps the
sessions it built (`SessionBank`) and a search draws each once.
"""

from __future__ import annotations

import json
import math
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cached_property, lru_cache
from importlib import resources
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from predictor.sim.request import RequestSpec
from predictor.sim.workloads import ArrivalMode, Session
from predictor.units import US_PER_S

Z90 = 1.2815515655446004     # standard normal quantile at 0.9
SESSION_ID_SHIFT = 36        # block ids: session << 36 | stream << 24 | block
STREAM_ID_SHIFT = 24
AGENTIC_REQUESTS_PER_CLIENT = 40
SEED_LIMIT = 1 << 62         # a session's generator: default_rng([base seed, session index])
BANK_SESSIONS = 8192         # built sessions kept per profile (a 1,024-client search uses ~2,000)
BANK_PROFILES = 4


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Lognormal(_Frozen):
    dist: Literal["lognormal"]
    p50: float
    p90: float
    source: str
    min: float | None = None
    max: float | None = None
    cap: float | None = None

    @cached_property
    def sampling(self) -> tuple[float, float, float | None, float | None]:
        """(log median, sigma, upper bound, lower bound): computed once, drawn thousands of
        times per simulation (the upper bound is the smaller of ``max`` and ``cap``)."""
        sigma = max(0.0, math.log(self.p90 / self.p50) / Z90)
        bounds = [bound for bound in (self.max, self.cap) if bound is not None]
        return math.log(self.p50), sigma, min(bounds) if bounds else None, self.min

    def draw(self, rng: np.random.Generator) -> float:
        mu, sigma, upper, lower = self.sampling
        value = float(rng.lognormal(mu, sigma))
        if upper is not None:
            value = min(value, upper)
        return max(value, lower) if lower is not None else value

    def draw_many(self, rng: np.random.Generator, size: int) -> np.ndarray:
        mu, sigma, upper, lower = self.sampling
        values = rng.lognormal(mu, sigma, size)
        if upper is not None or lower is not None:
            np.clip(values, lower, upper, out=values)
        return values


class Sourced(_Frozen):
    value: float | int | dict[str, int]
    source: str


class SubagentProfile(_Frozen):
    group_probability_per_turn: Sourced
    group_size_weights: Sourced
    turns: Lognormal
    shared_prefix_tokens: Sourced
    first_prompt_tokens: Lognormal
    new_tokens_per_turn: Lognormal
    output_tokens: Lognormal
    think_time_s: Lognormal

    @cached_property
    def group_sizes(self) -> tuple[np.ndarray, np.ndarray]:
        """(subagent group sizes, their probabilities), for ``Generator.choice``."""
        weights = self.group_size_weights.value
        sizes = np.array([int(k) for k in weights], dtype=int)
        counts = np.array(list(weights.values()), dtype=float)
        return sizes, counts / counts.sum()


class AgenticProfile(_Frozen):
    about: str
    block_tokens: int
    max_context_tokens: int
    idle_gap_cap_s: float
    warm_start_fraction: tuple[float, float]
    replay_rules_source: str
    turns_per_session: Lognormal
    first_prompt_tokens: Lognormal
    new_tokens_per_turn: Lognormal
    output_tokens: Lognormal
    think_time_s: Lognormal
    subagents: SubagentProfile
    theoretical_reuse: dict[str, float | str]


@lru_cache(maxsize=1)
def load_profile() -> AgenticProfile:
    text = (resources.files("predictor") / "data" / "agentic_profile.json").read_text("utf-8")
    return AgenticProfile.model_validate(json.loads(text))


@dataclass(frozen=True, slots=True)
class AgenticWorkload:
    """Closed loop over ``concurrency`` live sessions (METHOD §7: the mix planner's workload)."""

    profile: AgenticProfile
    concurrency: int
    max_context_tokens: int
    warm_start: bool = True
    name: str = "agentic"
    mode: ArrivalMode = ArrivalMode.CLOSED
    warmup_sessions_per_slot: int = 0

    @property
    def block_tokens(self) -> int:
        return self.profile.block_tokens

    @property
    def warm_start_sessions(self) -> int:
        return self.concurrency if self.warm_start else 0

    @property
    def counts_sent_requests(self) -> bool:
        return True

    def default_num_requests(self, concurrency: int) -> int:
        return AGENTIC_REQUESTS_PER_CLIENT * concurrency

    def sessions(self, rng: np.random.Generator) -> Iterator[Session]:
        """Session ``k`` depends only on the seed behind ``rng`` and ``k`` (and whether it
        is one of the first ``concurrency``, which start warm): common random numbers for
        every candidate of a search. Built sessions are kept (`SessionBank`)."""
        base = int(rng.integers(SEED_LIMIT))
        bank = _bank_for(self.profile)
        index = 0
        while True:
            warm = self.warm_start and index < self.concurrency
            session = bank.get((self.max_context_tokens, base, index, warm),
                               lambda: _SessionBuilder(self, np.random.default_rng([base, index]), index).build(warm))
            index += 1
            if session.requests:
                yield session


class SessionBank:
    """Sessions already built for one profile, keyed by (context cap, seed, index, warm):
    a search prices hundreds of candidates on the same sessions (common random numbers),
    so each is drawn once per process. Least recently used sessions go first."""

    def __init__(self, profile: AgenticProfile, limit: int = BANK_SESSIONS) -> None:
        self.profile = profile
        self.limit = limit
        self._sessions: OrderedDict[tuple, Session] = OrderedDict()

    def get(self, key: tuple, build: Callable[[], Session]) -> Session:
        session = self._sessions.get(key)
        if session is None:
            session = self._sessions[key] = build()
            if len(self._sessions) > self.limit:
                self._sessions.popitem(last=False)
        else:
            self._sessions.move_to_end(key)
        return session


_BANKS: dict[int, SessionBank] = {}


def _bank_for(profile: AgenticProfile) -> SessionBank:
    bank = _BANKS.get(id(profile))
    if bank is None or bank.profile is not profile:
        if len(_BANKS) >= BANK_PROFILES:
            _BANKS.clear()
        bank = _BANKS[id(profile)] = SessionBank(profile)
    return bank


class _SessionBuilder:
    """One session from its own generator, drawn in batches (a numpy call per quantity
    and session, not per turn). Every draw is made whether or not the turn is kept
    (warm start), so a session's warm and cold variants share their turns."""

    def __init__(self, workload: AgenticWorkload, rng: np.random.Generator, index: int) -> None:
        self.p = workload.profile
        self.rng = rng
        self.cap = workload.max_context_tokens
        self.index = index
        self.base = index << SESSION_ID_SHIFT
        self.streams = 0
        self.requests: list[RequestSpec] = []
        self.bs = self.p.block_tokens
        self.parent_ids = self._stream(self.cap // self.bs + 1)

    def _stream(self, num_blocks: int) -> range:
        """A new stream's block ids: consecutive, so a turn's prompt is a ``range`` (the
        prefix caches store it as one run, `radix_cache`)."""
        self.streams += 1
        first = self.base + (self.streams << STREAM_ID_SHIFT)
        return range(first, first + num_blocks)

    def _chain(self, turns: int, first_prompt: int, profile: AgenticProfile | SubagentProfile) -> _Chain:
        rng = self.rng
        outputs = np.maximum(1, np.rint(profile.output_tokens.draw_many(rng, turns))).astype(np.int64)
        growth = profile.new_tokens_per_turn.draw_many(rng, turns).astype(np.int64)
        prompts = first_prompt + np.concatenate(([0], np.cumsum(growth[:-1])))
        thinks = np.minimum(profile.think_time_s.draw_many(rng, turns), self.p.idle_gap_cap_s) * US_PER_S
        fits = prompts + outputs <= self.cap
        kept = turns if fits.all() else int(np.argmin(fits))
        return _Chain(prompts[:kept].tolist(), outputs[:kept].tolist(), thinks[:kept].tolist())

    def build(self, warm: bool) -> Session:
        p, rng = self.p, self.rng
        turns = max(1, round(p.turns_per_session.draw(rng)))
        fraction = rng.uniform(*p.warm_start_fraction)
        chain = self._chain(turns, int(p.first_prompt_tokens.draw(rng)), p)
        skip = int(len(chain.prompts) * fraction) if warm else 0
        groups = rng.random(len(chain.prompts)) < p.subagents.group_probability_per_turn.value
        deps: tuple[int, ...] = ()
        for turn, (prompt, output, think) in enumerate(zip(chain.prompts, chain.outputs, chain.thinks)):
            group = self._subagent_group() if groups[turn] else None
            if turn < skip:
                continue
            self.requests.append(RequestSpec(prompt, output, self.parent_ids[: prompt // self.bs], deps,
                                             think if deps else 0.0, label=f"turn {turn}"))
            deps = (len(self.requests) - 1,)
            if group is not None:
                deps = self._append_group(group, deps[0])
        return Session(tuple(self.requests), f"session {self.index}")

    def _subagent_group(self) -> list[tuple[np.ndarray, float, _Chain]]:
        """Draw a group: per subagent its block stream, start delay and turns."""
        sub, rng = self.p.subagents, self.rng
        sizes, probabilities = sub.group_sizes
        size = int(rng.choice(sizes, p=probabilities))
        shared_blocks = int(sub.shared_prefix_tokens.value) // self.bs
        shared = self._stream(shared_blocks)
        agents = []
        for _ in range(size):
            own = self._stream(self.cap // self.bs + 1)
            stream = np.concatenate([np.arange(shared.start, shared.stop, dtype=np.int64),
                                     np.arange(own.start, own.stop, dtype=np.int64)])
            first = max(int(sub.first_prompt_tokens.draw(rng)), shared_blocks * self.bs + self.bs)
            start_us = min(sub.think_time_s.draw(rng), self.p.idle_gap_cap_s) * US_PER_S
            agents.append((stream, start_us, self._chain(max(1, round(sub.turns.draw(rng))), first, sub)))
        return agents

    def _append_group(self, group: list[tuple[np.ndarray, float, _Chain]], parent: int) -> tuple[int, ...]:
        finals = []
        for agent, (stream, start_us, chain) in enumerate(group):
            dep, think = parent, start_us
            for turn, (prompt, output, next_think) in enumerate(zip(chain.prompts, chain.outputs, chain.thinks)):
                self.requests.append(RequestSpec(prompt, output, stream[: prompt // self.bs], (dep,), think,
                                                 label=f"subagent {agent} turn {turn}"))
                dep, think = len(self.requests) - 1, next_think
            if dep != parent:
                finals.append(dep)
        return tuple(finals) or (parent,)


@dataclass(frozen=True, slots=True)
class _Chain:
    """A growing chain of turns, cut before the first that would pass the context cap."""

    prompts: list[int]
    outputs: list[int]
    thinks: list[float]      # us; turn i's think is the gap before turn i + 1 in a subagent
