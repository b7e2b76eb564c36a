"""Pricing a replica's step, or a run of identical steps, on the step model (METHOD §5).

A batch the scheduler would repeat unchanged (the same decoders, the same prompts each
taking the same chunk: nothing finishes, nothing can be admitted) runs for
``Batch.max_steps`` steps as one event. Only its contexts grow from step to step: every
decoder's by ``L(k)`` tokens, every chunked prompt's prior by its chunk. A decode stretch
is priced in a few segments at their middle step (step costs are linear in context, so
the middle step prices the segment's sum); a run of chunks step by step (each chunk's
prior grows by a whole chunk, and the ITL tail is read from those steps); a one-step
batch at its own shape. A run cut short re-prices the steps it keeps (`StepPlan.truncated`).

An agentic run asks about the same (batch, prefill tokens) at thousands of contexts.
Prices are learned per step model and key (batch, prefill tokens, prompts) as an affine
function of the decode and prior contexts from the model's own answers (`price_fit`:
checked against further real answers, retired on any disagreement). Prefill tokens are
not rounded: an SGLang-style prefill-first replay moved 4% in TTFT when they were (the
order of admissions changes). A key without a trusted fit is priced by the step model
on contexts rounded to :data:`CONTEXT_BUCKETS` steps per doubling (<= 0.4%), and cached. ``exact=True``
turns rounding, fits and caching off and does not merge runs of mixed or prefill steps
(each is its own event, as before the speed work): the reference the fast path is
checked against (benchmarks/bench_des.py). `settle_flags` replays, at the end, the
extreme contexts each fit answered for, so every flag the model would raise is raised.
"""

from __future__ import annotations

from typing import NamedTuple

from predictor.sim.price_fit import AffineFit
from predictor.step.cost import StepModel

RUN_SEGMENTS = 4            # at most this many pricing points per run ...
STEPS_PER_SEGMENT = 256     # ... one per this many steps
CHUNK_SEGMENTS = 64         # a run of prefill chunks: up to this many points (one per step below it)
CONTEXT_BUCKETS = 128       # rounding steps per doubling of context (2**7)
_BUCKET_SHIFT = 7
PRICE_CACHE_LIMIT = 1 << 18  # entries per step model before the cache starts over
COARSE_SHIFT = 3            # a mixed step's reference context: 8 steps per doubling
SEPARABLE_CHECKS = 8        # mixed steps also priced at their own context first ...
SEPARABLE_RECHECK = 64      # ... and one in this many after
SEPARABLE_TOLERANCE = 1e-5  # relative: beyond it the decomposition is off for the model


class StepShape(NamedTuple):
    """What the step model is asked about at a run's first step (replica batch); a
    NamedTuple as the per-step values of `predictor.sim.scheduler` are."""

    decode_batch: int
    context_tokens: float        # mean decode context
    context_growth: float        # per step: tokens each decoder commits (0 without decoders)
    prefill_tokens: int
    num_seqs: int                # prompts in the busiest rank's prefill
    prior_tokens: float          # mean tokens already in the cache before a chunk
    prior_growth: float          # per step: the mean chunk
    mixes: bool                  # decoders ride in the prefill step (vLLM, TRT-LLM)


def coarse(tokens: float) -> float:
    """``tokens`` to the nearest of 8 steps per doubling (exact below 8): the reference
    context a mixed step is priced at (`StepPricer._mixed_us`)."""
    value = int(tokens + 0.5)
    if value < 1 << COARSE_SHIFT:
        return float(value)
    step = 1 << (value.bit_length() - 1 - COARSE_SHIFT)
    return float((value + step // 2) // step * step)


def rounded(tokens: float) -> float:
    """``tokens`` to the nearest of 128 steps per doubling (exact below 128)."""
    value = int(tokens + 0.5)
    if value < CONTEXT_BUCKETS:
        return float(value)
    step = 1 << (value.bit_length() - 1 - _BUCKET_SHIFT)
    return float((value + step // 2) // step * step)


class StepPricer:
    """One step model's prices, fitted or cached (shared by a pool's replicas)."""

    def __init__(self, model: StepModel, exact: bool = False) -> None:
        self.model = model
        self.exact = exact
        self._cache: dict[tuple, float] = {}
        self._fits: dict[tuple, AffineFit] = {}
        self._prefills: dict[tuple, float] = {}   # exact prefill prices asked twice (see prefill_us)
        self._separable = True       # mixed steps priced at a reference context (see _mixed_us)
        self._mixed_asked = 0
        self.calls = 0               # step-model calls made

    def step_us(self, shape: StepShape, offset: float = 0.0) -> float:
        """The step ``offset`` steps into the run."""
        ctx = shape.context_tokens + shape.context_growth * offset
        prior = shape.prior_tokens + shape.prior_growth * offset
        return self._step_us(shape.decode_batch, ctx, shape.prefill_tokens, shape.num_seqs, prior, shape.mixes)

    def _step_us(self, batch: int, ctx: float, tokens: int, seqs: int, prior: float, mixes: bool) -> float:
        if self.exact:
            return self._price(batch, ctx, tokens, seqs, prior, mixes)
        key = (batch, tokens, seqs, mixes)
        fit = self._fits.get(key)
        if fit is None:
            fit = self._fits[key] = AffineFit()
        fitted = fit.answer(ctx, prior)
        if fitted is not None:
            return fitted
        if fit.retired:
            return self._cached(batch, rounded(ctx), tokens, seqs, rounded(prior), mixes)
        us = self._price(batch, ctx, tokens, seqs, prior, mixes)
        fit.learn(ctx, prior, us)
        return us

    def _cached(self, batch: int, ctx: float, tokens: int, seqs: int, prior: float, mixes: bool) -> float:
        key = (batch, ctx, tokens, seqs, prior, mixes)
        cached = self._cache.get(key)
        if cached is None:
            if len(self._cache) >= PRICE_CACHE_LIMIT:
                self._cache.clear()
            cached = self._cache[key] = self._price(batch, ctx, tokens, seqs, prior, mixes)
        return cached

    def settle_flags(self) -> None:
        """Price, once, the extreme shapes each fit answered for: a flag that depends on the
        distance from the anchor's context is raised as the real calls would have."""
        for (batch, tokens, seqs, mixes), fit in self._fits.items():
            if fit.answered:
                for ctx, prior in fit.extremes():
                    self._price(batch, ctx, tokens, seqs, prior, mixes)

    def _price(self, batch: int, ctx: float, tokens: int, seqs: int, prior: float, mixes: bool) -> float:
        model = self.model
        if not tokens:
            self.calls += 1
            return model.decode_us(batch, ctx)
        if batch and mixes:
            if self._separable and not self.exact:
                return self._mixed_us(batch, ctx, tokens, prior)
            self.calls += 1
            return model.mixed_us(tokens, batch, ctx, prior)
        step_us = self.prefill_us(tokens, seqs, prior)
        return max(step_us, model.decode_us(batch, ctx)) if batch else step_us

    def _mixed_us(self, batch: int, ctx: float, tokens: int, prior: float) -> float:
        """A mixed step at decode context ``ctx`` as the step at a reference context plus
        the decode step's own difference between the two (see the module docstring):
        ``mixed(t, b, c, p) = mixed(t, b, c0, p) + decode(b, c) - decode(b, c0)``. The
        first :data:`SEPARABLE_CHECKS` and every :data:`SEPARABLE_RECHECK` th are also
        priced at ``ctx`` and answered so; one disagreement beyond
        :data:`SEPARABLE_TOLERANCE` turns the decomposition off for this step model."""
        model, reference = self.model, coarse(ctx)
        self.calls += 1
        us = model.mixed_us(tokens, batch, reference, prior)
        if reference != ctx:
            us += self._decode_us(batch, ctx) - self._decode_us(batch, reference)
        self._mixed_asked += 1
        if self._mixed_asked > SEPARABLE_CHECKS and self._mixed_asked % SEPARABLE_RECHECK:
            return us
        self.calls += 1
        exact = model.mixed_us(tokens, batch, ctx, prior)
        if abs(exact - us) > SEPARABLE_TOLERANCE * max(abs(exact), 1.0):
            self._separable = False
        return exact

    def _decode_us(self, batch: int, ctx: float) -> float:
        """The decode step at ``ctx``, fitted or cached as `step_us` prices it."""
        return self._step_us(batch, ctx, 0, 0, 0.0, False)

    def prefill_us(self, tokens: int, seqs: int, prior: float) -> float:
        """The step model's prefill price, kept exactly: a shared-pool fetch is overlapped
        with the prefill it hides behind (`simulator._network_load`), which the rank then
        runs at the same shape (deployment B: half of its prefill calls were repeats)."""
        key = (tokens, seqs, prior)
        found = self._prefills.get(key)
        if found is None:
            if len(self._prefills) >= PRICE_CACHE_LIMIT:
                self._prefills.clear()
            self.calls += 1
            found = self._prefills[key] = self.model.prefill_us(tokens, seqs, prior)
        return found

    def segments(self, shape: StepShape, num_steps: int, first_extra_us: float = 0.0) -> tuple[tuple[int, float], ...]:
        """(steps, step_us) for a run of ``num_steps``; ``first_extra_us`` (host time billed
        on the admitting step) goes on the first step alone. A run of prefill chunks is
        priced step by step (up to :data:`CHUNK_SEGMENTS` points: its steps' times, and so
        the ITL tail, match one event per step); a decode stretch in a few segments."""
        if num_steps <= 1:
            return ((1, self.step_us(shape) + first_extra_us),)
        if shape.prior_growth:
            parts = min(CHUNK_SEGMENTS, num_steps)
        else:
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
