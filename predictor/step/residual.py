"""What a calibrated anchor still misses at its own measured decode steps and prefills,
carried to the steps between them (METHOD §4: an anchor is exact where it measured).

A calibration has few factors, so it reproduces an anchor's decode steps to a few percent,
not exactly (a ladder's curvature between its graph-capture sizes, one run's noise). On the
anchor's own layout and kernel set, between two of its measured batches or contexts, the
measured steps are better evidence than the factors: the step is the calibrated model's
times the residual ``r = measured / modelled`` interpolated in batch and context.
Outside the measured range the residual fades to nothing over two octaves, so what the
anchor did not measure is priced by the calibrated physics alone, as is every other layout,
precision or pool (`predictor.step.anchored.anchored_model` applies it only on the anchor's
own layout). A residual is bounded (`MAX_LOG_RESIDUAL`): a larger miss is the model's,
shown in the fit's residuals, not absorbed here.

A prefill sweep is carried the same way (`PrefillResidual`): at each measured prompt
length, ``r = (measured TTFT - host time) / modelled prefill``, interpolated in the
prompt's length and applied to a prefill step (not to a prompt's marginal cost in a mixed
step, as for decode). One compute factor covers GEMMs and attention, so a prefill that
grows faster than linearly (llama.cpp on a CPU: 13 ms a token at 128-256 tokens, 15 at
512) is missed by the fit at both ends of its sweep (+24% at 64 tokens, -20% at 512);
between two measured lengths the measurement is the better evidence.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass

MAX_LOG_RESIDUAL = 0.25      # |log r| at most (~28%)
MEASURED_STEPS = "measured-steps"   # the flag of a step model that applies them
# Outside the measured range the residual fades over this many octaves of batch or
# context. Measured on the dev corpora (1 refine round), 1 / 2 / 3 octaves: load TPOT
# InferenceX 4.9 / 4.5 / 4.2%, AIConfigurator 8.0 / 7.8 / -; cross-length TPOT InferenceX
# 4.4 / 4.4 / 4.6% (p90 10.5 / 10.8 / 11.0); in-ladder and width transfers unchanged.
FADE_OCTAVES = 2.0


@dataclass(frozen=True, slots=True)
class DecodeResidual:
    """Log residuals of an anchor's decode points: per measured context (ascending), the
    measured batches (ascending) and ``log(measured / modelled)`` at each."""

    contexts: tuple[float, ...]
    batches: tuple[tuple[float, ...], ...]
    log_residuals: tuple[tuple[float, ...], ...]

    @classmethod
    def from_points(cls, points: list[tuple[int, float, float]]) -> DecodeResidual | None:
        """From ``(batch, context, log residual)`` triples; None when there are none."""
        by_context: dict[float, dict[float, list[float]]] = {}
        for batch, context, log_r in points:
            clipped = max(-MAX_LOG_RESIDUAL, min(MAX_LOG_RESIDUAL, log_r))
            by_context.setdefault(float(context), {}).setdefault(float(batch), []).append(clipped)
        if not by_context:
            return None
        contexts = tuple(sorted(by_context))
        batches = tuple(tuple(sorted(by_context[c])) for c in contexts)
        logs = tuple(tuple(sum(by_context[c][b]) / len(by_context[c][b]) for b in sorted(by_context[c]))
                     for c in contexts)
        return cls(contexts, batches, logs)

    def factor(self, batch: float, context: float) -> float:
        """The multiplier of the calibrated decode step at ``batch`` and ``context``."""
        at_batch = [_interpolate(batches, logs, batch) for batches, logs in zip(self.batches, self.log_residuals)]
        return math.exp(_interpolate(self.contexts, at_batch, context))


def _interpolate(xs: Sequence[float], ys: Sequence[float], x: float) -> float:
    """Piecewise linear between the points (a step is close to affine in batch and in
    context: in log batch instead, in-ladder TPOT InferenceX 2.4 -> 2.6%, AIConfigurator
    3.0 -> 3.1%), fading to 0 over `FADE_OCTAVES` outside them."""
    x = max(x, 1e-9)
    if x <= xs[0]:
        return ys[0] * _fade(xs[0] / x)
    if x >= xs[-1]:
        return ys[-1] * _fade(x / xs[-1])
    i = bisect.bisect_right(xs, x)
    low, high = xs[i - 1], xs[i]
    share = (x - low) / (high - low)
    return ys[i - 1] + share * (ys[i] - ys[i - 1])


def _fade(ratio: float) -> float:
    return max(0.0, 1.0 - math.log2(ratio) / FADE_OCTAVES)


@dataclass(frozen=True, slots=True)
class PrefillResidual:
    """Log residuals of an anchor's prefill sweep: per measured prompt length (ascending),
    ``log(measured prefill / modelled prefill)``."""

    lengths: tuple[float, ...]
    log_residuals: tuple[float, ...]

    @classmethod
    def from_points(cls, points: list[tuple[int, float]]) -> PrefillResidual | None:
        """From ``(prompt tokens, log residual)`` pairs; None when there are none."""
        by_length: dict[float, list[float]] = {}
        for tokens, log_r in points:
            by_length.setdefault(float(tokens), []).append(max(-MAX_LOG_RESIDUAL, min(MAX_LOG_RESIDUAL, log_r)))
        if not by_length:
            return None
        lengths = tuple(sorted(by_length))
        return cls(lengths, tuple(sum(by_length[n]) / len(by_length[n]) for n in lengths))

    def factor(self, prompt_tokens: float) -> float:
        """The multiplier of the calibrated prefill of a prompt ``prompt_tokens`` long."""
        return math.exp(_interpolate(self.lengths, self.log_residuals, prompt_tokens))


__all__ = ["DecodeResidual", "FADE_OCTAVES", "MAX_LOG_RESIDUAL", "MEASURED_STEPS", "PrefillResidual"]
