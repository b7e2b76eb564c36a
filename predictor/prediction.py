"""The result of pricing one configuration: metrics with their provenance.

Every number says where it comes from (PRODUCT.md §6): ``mode`` (anchored /
rank-only), the anchor id, the flags, ``source`` ("analytical" for the steady-state
predictor, "benchmark" for the wave model of a fixed-count benchmark, "des" for the
discrete-event simulator), ``transfer`` (how far the prediction is from what was
measured) and an 80% ``interval`` per metric from that transfer kind's measured error
(`predictor.uncertainty`). A configuration that does not fit has ``metrics is None`` and
its reasons.

Metric keys follow `objectives.objectives.METRIC_KEYS` (e.g. ``ttft_ms_mean``,
``itl_ms_p90``, ``throughput_per_gpu``); :meth:`Prediction.headline` gives the short
names `predict --json` prints.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from predictor.memory import MemoryBreakdown
from predictor.step.cost import Mode

HEADLINE = {
    "ttft_ms": "ttft_ms_mean", "tpot_ms": "tpot_ms_mean", "itl_ms": "itl_ms_mean",
    "e2e_ms": "e2e_ms_mean", "throughput_per_gpu": "throughput_per_gpu",
    "output_throughput_per_gpu": "output_throughput_per_gpu", "interactivity": "interactivity_mean",
}


@dataclass(frozen=True)
class Prediction:
    legal: bool
    reasons: tuple[str, ...]
    mode: Mode | None
    anchor_id: str | None
    flags: tuple[str, ...]
    metrics: dict[str, float] | None
    memory: MemoryBreakdown | None
    breakdown: dict[str, Any] = field(default_factory=dict)
    fusion_opportunities: tuple[dict[str, Any], ...] = ()
    source: str = "analytical"
    wall_ms: float = 0.0
    seed_intervals: dict[str, tuple[float, float]] = field(default_factory=dict)  # DES: 90% over replications
    transfer: str | None = None                       # the primary transfer kind
    transfer_kinds: tuple[str, ...] = ()
    intervals: dict[str, tuple[float, float]] = field(default_factory=dict)   # 80%, per metric key
    calibration: dict[str, Any] | None = None          # the step model's factors and provenance

    def headline(self) -> dict[str, float] | None:
        if self.metrics is None:
            return None
        return {short: round(self.metrics[key], 4) for short, key in HEADLINE.items() if key in self.metrics}

    def to_json(self) -> dict[str, Any]:
        return {
            "legal": self.legal,
            "reasons": list(self.reasons),
            "mode": str(self.mode) if self.mode else None,
            "anchor": self.anchor_id,
            "flags": list(self.flags),
            "source": self.source,
            "metrics": self.headline(),
            "transfer": self.transfer,
            "transfer_kinds": list(self.transfer_kinds),
            "intervals": {k: [round(lo, 6), round(hi, 6)] for k, (lo, hi) in self.intervals.items()},
            "calibration": self.calibration,
            "all_metrics": None if self.metrics is None else {k: round(v, 6) for k, v in self.metrics.items()},
            "memory": self.memory.to_json() if self.memory else None,
            "breakdown": self.breakdown,
            "fusion_opportunities": list(self.fusion_opportunities),
            "wall_ms": round(self.wall_ms, 3),
            "seed_intervals": {k: [round(lo, 6), round(hi, 6)] for k, (lo, hi) in self.seed_intervals.items()},
        }


def illegal(reasons: tuple[str, ...] | list[str], memory: MemoryBreakdown | None = None) -> Prediction:
    return Prediction(False, tuple(reasons), None, None, (), None, memory)
