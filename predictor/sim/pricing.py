"""Pricing a replica's step, or a run of identical steps, on the step model (METHOD §5).

A batch the scheduler would repeat unchanged (the same decoders, the same prompts each
taking the same chunk: nothing finishes, nothing can be admitted) runs for
``Batch.max_steps`` steps as one event. Only its contexts grow from step to step: every
decoder's by ``L(k)`` tokens, every chunked prompt's prior by its chunk. The run is priced
in a few segments at their middle step (step costs are close to linear in context, so
the middle step prices the segment's sum); a one-step batch is priced at its own shape.

Prices are cached per step model on the shape rounded to :data:`CONTEXT_BUCKETS` steps
per doubling of context (<= 0.4% off in context, so far less in step time): an agentic
run revisits the same (tokens, batch, context) thousands of times. ``exact=True`` turns
rounding and caching off and runs of mixed or prefill steps are not merged (each is its
own event, as before the speed work): the reference that work is checked against
(benchmarks/bench_des.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from predictor.step.cost import StepModel

RUN_SEGMENTS = 4            # at most this many pricing points per run ...
STEPS_PER_SEGMENT = 256     # ... one per this many steps
CONTEXT_BUCKETS = 128       # rounding steps per doubling of context (2**7)
_BUCKET_SHIFT = 7
PRICE_CACHE_LIMIT = 1 << 18  # entries per step model before the cache starts over


@dataclass(frozen=True, slots=True)
class StepShape:
    """What the step model is asked about at a run's first step (replica batch)."""

    decode_batch: int
    context_tokens: float        # mean decode context
    context_growth: float        # per step: tokens each decoder commits (0 without decoders)
    prefill_tokens: int
    num_seqs: int                # prompts in the busiest rank's prefill
    prior_tokens: float          # mean tokens already in the cache before a chunk
    prior_growth: float          # per step: the mean chunk
    mixes: bool                  # decoders ride in the prefill step (vLLM, TRT-LLM)


def rounded(tokens: float) -> float:
    """``tokens`` to the nearest of 128 steps per doubling (exact below 128)."""
    value = int(tokens + 0.5)
    if value < CONTEXT_BUCKETS:
        return float(value)
    step = 1 << (value.bit_length() - 1 - _BUCKET_SHIFT)
    return float((value + step // 2) // step * step)


class StepPricer:
    """One step model's prices, cached on rounded shapes (shared by a pool's replicas)."""

    def __init__(self, model: StepModel, exact: bool = False) -> None:
        self.model = model
        self.exact = exact
        self._cache: dict[tuple, float] = {}
        self.calls = 0               # step-model calls made (cache misses)

    def step_us(self, shape: StepShape, offset: float = 0.0) -> float:
        """The step ``offset`` steps into the run."""
        ctx = shape.context_tokens + shape.context_growth * offset
        prior = shape.prior_tokens + shape.prior_growth * offset
        if not self.exact:
            ctx, prior = rounded(ctx), rounded(prior)
        key = (shape.decode_batch, ctx, shape.prefill_tokens, shape.num_seqs, prior, shape.mixes)
        cached = self._cache.get(key)
        if cached is None:
            cached = self._price(shape.decode_batch, ctx, shape.prefill_tokens, shape.num_seqs, prior, shape.mixes)
            if not self.exact:
                if len(self._cache) >= PRICE_CACHE_LIMIT:
                    self._cache.clear()
                self._cache[key] = cached
        return cached

    def _price(self, batch: int, ctx: float, tokens: int, seqs: int, prior: float, mixes: bool) -> float:
        model = self.model
        self.calls += 1
        if not tokens:
            return model.decode_us(batch, ctx)
        if batch and mixes:
            return model.mixed_us(tokens, batch, ctx, prior)
        step_us = model.prefill_us(tokens, seqs, prior)
        return max(step_us, model.decode_us(batch, ctx)) if batch else step_us

    def segments(self, shape: StepShape, num_steps: int, first_extra_us: float = 0.0) -> tuple[tuple[int, float], ...]:
        """(steps, step_us) for a run of ``num_steps``; ``first_extra_us`` (host time billed
        on the admitting step) goes on the first step alone."""
        if num_steps <= 1:
            return ((1, self.step_us(shape) + first_extra_us),)
        parts = min(RUN_SEGMENTS, -(-num_steps // STEPS_PER_SEGMENT))
        base, extra = divmod(num_steps, parts)
        out: list[tuple[int, float]] = []
        done = 0
        if first_extra_us:
            out.append((1, self.step_us(shape) + first_extra_us))
            done, base, extra = 1, *divmod(num_steps - 1, parts)
        for part in range(parts):
            count = base + (1 if part < extra else 0)
            if count:
                out.append((count, self.step_us(shape, done + (count - 1) / 2.0)))
                done += count
        return tuple(out)
