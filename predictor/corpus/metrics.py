"""The scoring conventions of METHOD §8 as pure functions over numbers.

- **APE**: `|pred - meas| / meas`, in percent (0-100 and beyond); median and p90 (linear
  interpolation between order statistics).
- **Error factor**: geometric mean of `max(pred/meas, meas/pred)`; 1.00 exact.
- **Ranking** over choice sets (configurations serving the same model, prompt/output
  length and concurrency): a pair is *decisive* when its measured gap, relative to the
  smaller value, exceeds both 3% and the run-to-run noise of either configuration; the
  pair accuracy is the share of decisive pairs the prediction orders the same way, a
  predicted tie counting half. **Top-1**: the predicted best is the measured best.
  **Regret**: how much worse (percent of the measured best) the predicted pick measured.
- **Frontier hits**: measured-frontier points (throughput per GPU vs interactivity, both
  maximised) that are also on the predicted frontier.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Hashable, Sequence

import numpy as np

from predictor.sweep.frontier import pareto_indices

DECISIVE_GAP = 0.03          # METHOD §8: a decisive pair differs by more than 3%...
TIE_TOLERANCE = 1e-9         # ...and predicted values this close (relative) are a tie
PERCENT = 100.0


def ape(predicted: float, measured: float) -> float:
    return abs(predicted - measured) / measured * PERCENT


def quantile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    return float(np.quantile(np.asarray(values, dtype=float), q))


def error_factor(pairs: Sequence[tuple[float, float]]) -> float | None:
    """Geometric mean of max(pred/meas, meas/pred) over (pred, meas) pairs."""
    logs = [abs(math.log(p / m)) for p, m in pairs if p > 0 and m > 0]
    return math.exp(sum(logs) / len(logs)) if logs else None


@dataclass(frozen=True, slots=True)
class Choice:
    """One configuration in a choice set: its measured and predicted value (higher is
    better) and its run-to-run noise (relative)."""

    key: Hashable
    measured: float
    predicted: float
    noise: float = 0.0


@dataclass(frozen=True, slots=True)
class Ranking:
    decisive_pairs: int
    correct: float               # ties count half
    sets: int                    # choice sets with at least two configurations
    top1_hits: int
    regrets_pct: tuple[float, ...]

    @property
    def pair_accuracy(self) -> float | None:
        return self.correct / self.decisive_pairs if self.decisive_pairs else None

    @property
    def top1(self) -> float | None:
        return self.top1_hits / self.sets if self.sets else None


def is_decisive(a: Choice, b: Choice) -> bool:
    low, high = sorted((a.measured, b.measured))
    gap = (high - low) / low if low > 0 else math.inf
    return gap > max(DECISIVE_GAP, a.noise, b.noise)


def pair_score(a: Choice, b: Choice) -> float:
    """1 when the prediction orders a decisive pair as measured, 0.5 on a predicted tie."""
    scale = max(abs(a.predicted), abs(b.predicted), 1e-30)
    if abs(a.predicted - b.predicted) <= TIE_TOLERANCE * scale:
        return 0.5
    return 1.0 if (a.predicted > b.predicted) == (a.measured > b.measured) else 0.0


def rank(choice_sets: Sequence[Sequence[Choice]]) -> Ranking:
    decisive, correct, sets, hits, regrets = 0, 0.0, 0, 0, []
    for choices in choice_sets:
        if len(choices) < 2:
            continue
        sets += 1
        for i, a in enumerate(choices):
            for b in choices[i + 1:]:
                if is_decisive(a, b):
                    decisive += 1
                    correct += pair_score(a, b)
        best = max(choices, key=lambda c: c.measured)
        pick = max(choices, key=lambda c: c.predicted)
        hits += pick.key == best.key
        regrets.append((best.measured - pick.measured) / best.measured * PERCENT if best.measured > 0 else 0.0)
    return Ranking(decisive, correct, sets, hits, tuple(regrets))


def frontier_hits(measured: Sequence[tuple[float, float]], predicted: Sequence[tuple[float, float]]) -> tuple[int, int]:
    """(measured-frontier points also on the predicted frontier, measured-frontier points)."""
    if not measured:
        return 0, 0
    on_measured = set(pareto_indices([m[0] for m in measured], [m[1] for m in measured]))
    on_predicted = set(pareto_indices([p[0] for p in predicted], [p[1] for p in predicted]))
    return len(on_measured & on_predicted), len(on_measured)


def relative_spread(values: Sequence[float]) -> float | None:
    """Run-to-run noise of repeated measurements: (max - min) / mean; None for one run."""
    if len(values) < 2:
        return None
    mean = sum(values) / len(values)
    return (max(values) - min(values)) / mean if mean > 0 else None
