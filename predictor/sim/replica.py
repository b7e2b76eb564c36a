"""One engine replica: its ranks, its pricer and the step it is running (METHOD §5).

The engine step is schedule -> price -> advance (STYLE rule 2): `begin_step` asks the
engine scheduler for a batch and prices it (`predictor.sim.pricing`); the simulator
waits until the step ends and `end_step` applies it. Attention-DP ranks run in lockstep
and a step costs its slowest rank: the step model is called with ``dp x`` the largest
rank load (the replica batch when ranks are balanced). A batch the scheduler would
repeat unchanged (a decode-only stretch to the next finish; a long prompt's chunks with
the same decoders) is advanced as many steps at once; a request that reaches the
replica mid-run cuts it at the next step boundary (`truncate`), so skipping steps never
delays an admission.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from enum import StrEnum
from typing import NamedTuple

from predictor.sim.pricing import StepPricer, StepShape
from predictor.sim.rank import Rank
from predictor.sim.scheduler import (
    Batch,
    EngineScheduler,
    Limits,
    Recorder,
    StepOutcome,
    advance,
)


class StepKind(StrEnum):
    DECODE = "decode"
    PREFILL = "prefill"
    MIXED = "mixed"


class StepPlan(NamedTuple):
    """One priced step or run of steps (a NamedTuple as the per-step values of
    `predictor.sim.scheduler` are)."""

    batch: Batch
    kind: StepKind
    start_us: float
    segments: tuple[tuple[int, float], ...]   # (steps, step_us)
    stalls_decoders: bool                      # prefill work while requests were decoding
    shape: StepShape | None = None             # what was priced (for the recorder)
    num_steps: int = 0                         # derived from segments by `plan`
    duration_us: float = 0.0

    @property
    def end_us(self) -> float:
        return self.start_us + self.duration_us

    def truncated(self, now_us: float, price: Callable[[float], float] | None = None) -> StepPlan:
        """The same run cut at its first step boundary at or after ``now_us``. A segment cut
        part-way is re-priced at the middle of the steps it keeps (``price(offset)``: the
        step ``offset`` steps into the run), not at its full middle: a long prompt's chunks
        grow dearer step by step."""
        elapsed, kept, cut, done = now_us - self.start_us, [], 0.0, 0
        for count, step_us in self.segments:
            remaining = elapsed - cut
            if kept and remaining <= 1e-9:
                break
            need = max(1, math.ceil(remaining / step_us - 1e-9)) if step_us > 0 else count
            if need < count:
                kept.append(_partial(need, count, step_us, remaining, done, price))
                break
            kept.append((count, step_us))
            cut += count * step_us
            done += count
        return plan(self.batch, self.kind, self.start_us, tuple(kept), self.stalls_decoders, self.shape)


def _partial(need: int, count: int, step_us: float, remaining_us: float, done: int,
             price: Callable[[float], float] | None) -> tuple[int, float]:
    """(steps, step_us) kept of a segment: at least ``need``, re-priced, still ending at or
    after the cut (``remaining_us`` into the segment)."""
    if price is None:
        return need, step_us
    while need < count:
        us = price(done + (need - 1) / 2.0)
        if need * us >= remaining_us - 1e-9:
            return need, us
        need += 1
    return count, step_us


def plan(batch: Batch, kind: StepKind, start_us: float, segments: tuple[tuple[int, float], ...],
         stalls_decoders: bool, shape: StepShape | None = None) -> StepPlan:
    steps, duration = 0, 0.0
    for count, step_us in segments:
        steps += count
        duration += count * step_us
    return StepPlan(batch, kind, start_us, segments, stalls_decoders, shape, steps, duration)


class Replica:
    def __init__(self, index: int, ranks: list[Rank], scheduler: EngineScheduler, pricer: StepPricer,
                 limits: Limits, recorder: Recorder, *, host_us_on_prefill: float = 0.0,
                 host_us_per_prompt_token: float = 0.0) -> None:
        self.index = index
        self.ranks = ranks
        self.scheduler = scheduler
        self.pricer = pricer
        self.merges_runs = not pricer.exact     # ReplicaView: merge repeated prefill/mixed steps
        self.admits_for_decode = False          # a disaggregated prefill replica (set by the deployment)
        self.fetches = any(rank.pool.fetches for rank in ranks)   # a host tier: fetch at admission
        self.limits = limits
        self.recorder = recorder
        self.dp = len(ranks)
        self.steps_run = 0                      # ReplicaView: engine steps run
        self.hold_from: int | None = None       # ReplicaView: a balanced admission hold's start
        self.plan: StepPlan | None = None
        self.stamp = 0
        self.kick_pending = False
        self.host_us_on_prefill = host_us_on_prefill
        self.host_us_per_prompt_token = host_us_per_prompt_token

    @property
    def bills_host(self) -> bool:
        return bool(self.host_us_on_prefill or self.host_us_per_prompt_token)

    def begin_step(self, now_us: float) -> StepPlan | None:
        """Schedule and price the next step; None when there is nothing to do."""
        batch = self.scheduler.schedule(self, now_us)
        if batch is None:
            self.plan = None
            return None
        self.plan = self._price(batch, now_us)
        self.stamp += 1
        return self.plan

    def truncate(self, now_us: float) -> StepPlan | None:
        """Cut a running stretch at the next step boundary; None if nothing changed."""
        plan = self.plan
        if plan is None or plan.num_steps <= 1 or now_us >= plan.end_us:
            return None
        shape, pricer = plan.shape, self.pricer
        cut = plan.truncated(now_us, None if shape is None else
                             (lambda offset: pricer.step_us(shape, offset)))
        if cut.num_steps == plan.num_steps:
            return None
        self.plan = cut
        self.stamp += 1
        return cut

    def end_step(self) -> StepOutcome:
        """Advance the running step (the third part of schedule -> price -> advance)."""
        plan, self.plan = self.plan, None
        self.steps_run += plan.num_steps
        self.recorder.step(plan.kind, plan.num_steps, plan.duration_us, plan.stalls_decoders, plan.shape)
        return advance(plan.batch.work, plan.start_us, plan.segments[0][1], plan.segments, self.recorder)

    # -- pricing ---------------------------------------------------------------------------
    def _price(self, batch: Batch, now_us: float) -> StepPlan:
        dp, bills_host = self.dp, self.bills_host
        num_decoders = max_decoders = max_tokens = max_seqs = 0
        ctx_sum = prior_sum = host_us = 0.0
        num_chunks, all_tokens, stalls, mixes = 0, 0, False, False
        for w in batch.work:
            rank = w.rank
            stalls = stalls or rank.num_decoders > 0
            if w.decodes:
                num_decoders += rank.num_decoders
                max_decoders = max(max_decoders, rank.num_decoders)
                ctx_sum += rank.context_sum()
            if not w.chunks:
                continue
            mixes = mixes or w.decodes
            tokens = 0
            for request, take in w.chunks:
                tokens += take
                prior_sum += request.cached_tokens + request.prefilled
                if bills_host and request.prefilled == 0:
                    host_us += self.host_us_on_prefill + self.host_us_per_prompt_token * request.prompt_tokens
            max_tokens = max(max_tokens, tokens)
            all_tokens += tokens
            max_seqs = max(max_seqs, len(w.chunks))
            num_chunks += len(w.chunks)
        growth = self.pricer.model.tokens_per_step if num_decoders else 0.0
        ctx = ctx_sum / num_decoders if num_decoders else 0.0
        if not num_chunks:
            shape = StepShape(dp * max_decoders, ctx, growth, 0, 0, 0.0, 0.0, False)
            return plan(batch, StepKind.DECODE, now_us, self.pricer.segments(shape, batch.max_steps), False, shape)
        prior = prior_sum / num_chunks
        shape = StepShape(dp * max_decoders, ctx, growth, dp * max_tokens, dp * max_seqs, prior,
                          all_tokens / num_chunks, mixes)
        kind = StepKind.MIXED if shape.decode_batch and mixes else StepKind.PREFILL
        return plan(batch, kind, now_us, self.pricer.segments(shape, batch.max_steps, host_us), stalls, shape)
