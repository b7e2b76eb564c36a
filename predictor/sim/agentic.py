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
per session (the traces' local hash scope), so sessions share nothing.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
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

    def default_num_requests(self, concurrency: int) -> int:
        return AGENTIC_REQUESTS_PER_CLIENT * concurrency

    def sessions(self, rng: np.random.Generator) -> Iterator[Session]:
        index = 0
        while True:
            warm = self.warm_start and index < self.concurrency
            session = _SessionBuilder(self, rng, index).build(warm)
            index += 1
            if session.requests:
                yield session


class _SessionBuilder:
    def __init__(self, workload: AgenticWorkload, rng: np.random.Generator, index: int) -> None:
        self.p = workload.profile
        self.rng = rng
        self.cap = workload.max_context_tokens
        self.base = index << SESSION_ID_SHIFT
        self.streams = 0
        self.requests: list[RequestSpec] = []
        self.bs = self.p.block_tokens
        self.parent_ids = self._stream(self.cap // self.bs + 1)

    def _stream(self, num_blocks: int) -> np.ndarray:
        self.streams += 1
        return self.base + (self.streams << STREAM_ID_SHIFT) + np.arange(num_blocks, dtype=np.int64)

    def _think_us(self, dist: Lognormal) -> float:
        return min(dist.draw(self.rng), self.p.idle_gap_cap_s) * US_PER_S

    def build(self, warm: bool) -> Session:
        p, rng = self.p, self.rng
        turns = max(1, round(p.turns_per_session.draw(rng)))
        skip = int(turns * rng.uniform(*p.warm_start_fraction)) if warm else 0
        prompt = int(p.first_prompt_tokens.draw(rng))
        deps: tuple[int, ...] = ()
        for turn in range(turns):
            output = max(1, round(p.output_tokens.draw(rng)))
            if prompt + output > self.cap:
                break
            if turn >= skip:
                think = self._think_us(p.think_time_s) if deps else 0.0
                self.requests.append(RequestSpec(prompt, output, self.parent_ids[: prompt // self.bs], deps,
                                                 think, label=f"turn {turn}"))
                deps = (len(self.requests) - 1,)
                if rng.random() < p.subagents.group_probability_per_turn.value:
                    deps = self._subagent_group(deps[0])
            prompt += int(p.new_tokens_per_turn.draw(rng))
        return Session(tuple(self.requests))

    def _subagent_group(self, parent: int) -> tuple[int, ...]:
        sub, rng = self.p.subagents, self.rng
        sizes, probabilities = sub.group_sizes
        size = int(rng.choice(sizes, p=probabilities))
        shared_blocks = int(sub.shared_prefix_tokens.value) // self.bs
        shared = self._stream(shared_blocks)
        finals = []
        for agent in range(size):
            own = self._stream(self.cap // self.bs + 1)
            stream = np.concatenate([shared, own])
            prompt = max(int(sub.first_prompt_tokens.draw(rng)), shared_blocks * self.bs + self.bs)
            dep, think = parent, self._think_us(sub.think_time_s)
            for turn in range(max(1, round(sub.turns.draw(rng)))):
                output = max(1, round(sub.output_tokens.draw(rng)))
                if prompt + output > self.cap:
                    break
                self.requests.append(RequestSpec(prompt, output, stream[: prompt // self.bs], (dep,), think,
                                                 label=f"subagent {agent} turn {turn}"))
                dep, think = len(self.requests) - 1, self._think_us(sub.think_time_s)
                prompt += int(sub.new_tokens_per_turn.draw(rng))
            if dep != parent:
                finals.append(dep)
        return tuple(finals) or (parent,)
