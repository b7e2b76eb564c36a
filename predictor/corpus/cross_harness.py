"""The harness transfer (METHOD §3.12, §8): TTFT from one benchmark's anchors for a
deployment measured through another front end and client.

A question about the user's own deployment names no harness, so an anchor from a public
benchmark prices it with its engine's front-end host time, not the host time that
benchmark's client added (`predictor.step.anchored.with_engine_host`). The dev corpora
measure that transfer once: anchors from AIConfigurator's colocated runs of every stack
InferenceX measured too, then InferenceX's rows of those stacks priced with their own
launch (scheduler intervals, mixed prefill) and their harness unnamed, against
InferenceX's median TTFT (its mean carries start-up stalls). The residuals are the
``harness`` kind's TTFT band (`scripts/build_error_bars.py`); nothing is fitted to them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import replace

from predictor.anchors.anchoring import store_priors
from predictor.corpus.protocol_score import REFINE_ROUNDS, corpus_store
from predictor.corpus.refine import predict_row
from predictor.corpus.row import CorpusRow

USER = "user"              # the row asked as the product asks: its harness unnamed
ANCHORS_OWN = "anchor"     # the row named as the anchors' harness: their fitted host time


def _stack(row: CorpusRow) -> tuple[str, str, str]:
    return row.card().name, row.gpu.upper(), str(row.engine)


def ttft_residuals(anchor_rows: Iterable[CorpusRow], scored_rows: Iterable[CorpusRow],
                   anchor_harness: str = "aiconfigurator") -> dict[str, dict[tuple[str, str, str], list[float]]]:
    """``log(measured median TTFT / predicted)`` of every colocated scored row whose stack
    the anchor rows measured, per way of asking (`USER`, `ANCHORS_OWN`) and stack."""
    anchor_rows, scored_rows = list(anchor_rows), list(scored_rows)
    shared = {_stack(r) for r in anchor_rows} & {_stack(r) for r in scored_rows}
    store, _ = corpus_store([r for r in anchor_rows if _stack(r) in shared and not r.config.disaggregated],
                                 REFINE_ROUNDS, predict_row)
    priors = store_priors(store)
    out: dict[str, dict[tuple[str, str, str], list[float]]] = {USER: {}, ANCHORS_OWN: {}}
    for row in scored_rows:
        measured = row.measured.ttft_ms_median
        if _stack(row) not in shared or row.config.disaggregated or not measured:
            continue
        ways = {USER: replace(row, harness=replace(row.harness, name=None)),
                ANCHORS_OWN: replace(row, harness=replace(row.harness, name=anchor_harness))}
        for way, asked in ways.items():
            prediction = predict_row(asked, store, priors)
            ttft = (prediction.metrics or {}).get("ttft_ms_mean") if prediction.legal else None
            if ttft and ttft > 0 and prediction.anchor_id:
                out[way].setdefault(_stack(row), []).append(math.log(measured / ttft))
    return out


__all__ = ["ANCHORS_OWN", "USER", "ttft_residuals"]
