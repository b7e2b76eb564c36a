"""The largest concurrency a configuration sustains under the search's SLOs (PRODUCT.md
§4 "max sustainable concurrency under the SLO").

Every other objective is a number one prediction carries; this one is a question about
the configuration across loads. For a candidate priced at concurrency ``c``: if it
meets the SLOs, double ``c`` until a prediction misses them or the ceiling is reached;
if it misses, halve ``c`` until one meets them (or 1 misses too); then bisect between
the last meeting and the first missing concurrency until they are within
:data:`RESOLUTION`. The ceiling is what the KV cache holds (the prediction's
``max_concurrency``; past it requests only queue), within the concurrency lever's range,
so a search without SLOs finds the KV capacity. The answer is the candidate priced at
the largest meeting concurrency, with ``max_sustainable_concurrency`` set to it; when
even one client misses, the candidate keeps its own concurrency and the metric stays
unpredicted (it sustains no load).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from agent.trial import Trial
from levers.catalog import get_lever
from levers.configuration import Configuration

METRIC = "max_sustainable_concurrency"
RESOLUTION = 1.25          # stop bisecting when the bracket is within 25%
MAX_PROBES = 12            # predictions per candidate at most (besides its own)

Price = Callable[[Configuration], Trial]


def _ceiling(trial: Trial) -> int:
    lever_max = int(get_lever("concurrency").bounds[1])
    capacity = (trial.metrics or {}).get("max_concurrency")
    return max(1, min(lever_max, int(capacity))) if capacity else lever_max


def _meets(trial: Trial) -> bool:
    """Predicted and every SLO met (no SLOs: always)."""
    return trial.legal and trial.metrics is not None and trial.slo_met is True


def sustainable(first: Trial, price: Price) -> Trial:
    """``first`` (a priced candidate) re-priced at its largest SLO-meeting concurrency."""
    if first.config is None or first.metrics is None:
        return first
    config, ceiling = first.config, _ceiling(first)
    trials = {config.concurrency: first}

    def at(concurrency: int) -> Trial:
        if concurrency not in trials:
            trials[concurrency] = price(replace(config, concurrency=concurrency))
        return trials[concurrency]

    low, high = _bracket(config.concurrency, ceiling, at)
    while low is not None and high is not None and high > low * RESOLUTION and high - low > 1 \
            and len(trials) <= MAX_PROBES:
        middle = (low + high) // 2
        low, high = (middle, high) if _meets(at(middle)) else (low, middle)
    if low is None:
        return first
    best = trials[low]
    metrics = {**(best.metrics or {}), METRIC: float(low)}
    return replace(best, metrics=metrics, objective_value=float(low), score=float(low))


def _bracket(start: int, ceiling: int, at: Callable[[int], Trial]) -> tuple[int | None, int | None]:
    """(largest meeting concurrency seen, smallest missing one above it; None: none)."""
    concurrency = min(start, ceiling)
    if _meets(at(concurrency)):
        while concurrency < ceiling:
            following = min(ceiling, concurrency * 2)
            if not _meets(at(following)):
                return concurrency, following
            concurrency = following
        return concurrency, None
    while concurrency > 1:
        following = max(1, concurrency // 2)
        if _meets(at(following)):
            return following, concurrency
        concurrency = following
    return None, None
