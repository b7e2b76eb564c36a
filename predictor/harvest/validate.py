"""Check a fresh anchor against the engine it came from, at a prompt length the harvest
did not use (METHOD §2: anchored numbers are predictions with an error bar).

`predict_point` prices one request of `prompt_tokens` in / `output_tokens` out through
the step model calibrated by the anchor (`predictor.step.anchored.anchored_model`): TTFT
is the prefill plus host time (METHOD §3.12: `host_ms + host_us_per_token * n`, fitted
with the other factors), TPOT the batch-1 decode step at the mean context `n + osl / 2`.
This is exactly what the analytical predictor does for one request at a time
(concurrency 1).
`measure_point` measures the same on the server: median TTFT and median ITL over
`repeats` unique prompts sent one after another.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from itertools import pairwise

from levers.catalog import Engine
from levers.configuration import Configuration
from predictor.analytical import host_time_ms
from predictor.anchors.anchor import Anchor
from predictor.cards.registry import ModelCard
from predictor.hardware import Cluster
from predictor.harvest.client import StreamClient, failed
from predictor.harvest.prompts import PromptFactory
from predictor.step.anchored import anchored_model
from predictor.step.calibration import PHYSICS
from predictor.units import S_PER_MS, US_PER_MS


@dataclass(frozen=True, slots=True)
class PointFigures:
    prompt_tokens: int
    output_tokens: int
    ttft_ms: float
    tpot_ms: float

    def to_json(self) -> dict:
        return {"prompt_tokens": self.prompt_tokens, "output_tokens": self.output_tokens,
                "ttft_ms": round(self.ttft_ms, 3), "tpot_ms": round(self.tpot_ms, 3)}


def predict_point(anchor: Anchor, card: ModelCard, cluster: Cluster, engine: Engine | str, config: Configuration,
                  prompt_tokens: int, output_tokens: int) -> tuple[PointFigures, tuple[str, ...]]:
    """(prediction, the step model's flags) for one request at a time (module docstring)."""
    model = anchored_model(anchor, card, cluster, engine, config, PHYSICS, flags=anchor.flags)
    ttft = model.prefill_us(prompt_tokens) / US_PER_MS + host_time_ms(model, prompt_tokens)
    tpot = model.decode_us(1, prompt_tokens + output_tokens / 2.0) / US_PER_MS
    return PointFigures(prompt_tokens, output_tokens, ttft, tpot), model.flags


def measure_point(client: StreamClient, factory: PromptFactory, prompt_tokens: int, output_tokens: int,
                  repeats: int) -> PointFigures:
    """Median TTFT and median inter-token gap of `repeats` sequential unique requests."""
    ttfts, gaps = [], []
    for _ in range(repeats):
        trace = client.stream(factory.make(prompt_tokens).text, output_tokens)
        failed([trace], f"the check at {prompt_tokens} prompt tokens")
        ttfts.append(trace.ttft_ms)
        times = trace.token_times_s
        gaps.extend((b - a) / S_PER_MS for a, b in pairwise(times))
    return PointFigures(prompt_tokens, output_tokens, statistics.median(ttfts), statistics.median(gaps))


def relative_error(predicted: float, measured: float) -> float:
    """Signed error of a prediction, as a fraction of the measurement."""
    return (predicted - measured) / measured
