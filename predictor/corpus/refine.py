"""Step 6 of the corpus rule (`predictor.corpus.anchors`): correct each anchor point until
the predictor reproduces the rows it came from, and the reproduction check itself.

The closed form of steps 3-4 removes prefill interference and host time with a crude
model; the predictor's steady state (METHOD §2, `predictor.analytical`) is the model the
anchor will be used with, so the points are corrected through it: a decode point is
scaled by the median measured/predicted mean TPOT of its rows, a prefill point moves by
the median measured-minus-predicted TTFT (median TTFT when the corpus gives it) of its
lowest-concurrency rows. `REFINE_ROUNDS` rounds, damped; what is left is reported by the
reproduction check (`reproduce`).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Callable

from levers.catalog import Engine
from predictor.anchors.store import AnchorStore
from predictor.corpus.anchors import AnchorBuild, Group, recorded_batch
from predictor.corpus.assemble import rebuild
from predictor.corpus.host import ttft_typical
from predictor.corpus.row import CorpusRow
from predictor.predict import predict
from predictor.prediction import Prediction
from predictor.step.cost import Mode
from predictor.target import Target
from predictor.workload import WorkloadSpec

REFINE_ROUNDS = 6
HOST_DAMPING = 0.8           # H0 moves by this share of the median TTFT miss per round
MAX_STEP_RATIO = 3.0         # a row predicted further off than this is not used to correct its point

PredictFn = Callable[[CorpusRow, AnchorStore], Prediction]


def predict_row(row: CorpusRow, store: AnchorStore) -> Prediction:
    """The product's prediction of one corpus row (fixed-length traffic)."""
    target = Target(row.card(), row.cluster(), Engine(row.engine))
    return predict(target, row.config, WorkloadSpec("fixed", row.isl, row.osl, row.requests_per_client),
                   store=store)


def _uses(prediction: Prediction, anchor_id: str) -> bool:
    return (prediction.legal and prediction.metrics is not None
            and anchor_id in (prediction.anchor_id or "").split(","))


def refine(build: AnchorBuild, predict_fn: PredictFn = predict_row, rounds: int = REFINE_ROUNDS,
           command_line: str = "") -> AnchorBuild:
    """Step 6: `rounds` corrections of every point through the predictor."""
    for _ in range(rounds):
        store = AnchorStore.from_anchors(list(build.anchors))
        cache: dict[str, Prediction] = {}

        def predicted(row: CorpusRow) -> Prediction:
            if row.id not in cache:
                cache[row.id] = predict_fn(row, store)
            return cache[row.id]

        for anchor_id, group in build.groups.items():
            rows = group.source_rows()
            _correct_decode(group, anchor_id, rows, predicted)
            _correct_host(group, anchor_id, rows, predicted)
            _correct_stall(group, anchor_id, rows, predicted)
        build = rebuild(build, command_line)
    return build


def _reads_point(prediction: Prediction, batch: int) -> bool:
    """The prediction's decode batch falls on the point (else its error is not the point's)."""
    predicted_batch = prediction.breakdown.get("decode_batch")
    return isinstance(predicted_batch, int) and recorded_batch(max(1, predicted_batch)) == batch


def _correct_decode(group: Group, anchor_id: str, rows: dict[str, CorpusRow], predicted) -> None:
    for key, ids in group.point_rows.items():
        ratios = []
        for row_id in ids:
            prediction = predicted(rows[row_id])
            if (_uses(prediction, anchor_id) and prediction.metrics["tpot_ms_mean"] > 0
                    and _reads_point(prediction, key[1])):
                ratio = rows[row_id].measured.tpot_ms_mean / prediction.metrics["tpot_ms_mean"]
                if 1 / MAX_STEP_RATIO <= ratio <= MAX_STEP_RATIO:
                    ratios.append(ratio)
        if ratios:
            ratio = statistics.median(ratios)
            group.decode_points[key] = [value * ratio for value in group.decode_points[key]]


def _ttft_sensitivity(prediction: Prediction) -> float:
    """How much of a change in one anchor's H0 reaches the predicted TTFT: all of it, or
    half in a split whose pools use two anchors (METHOD §3.11 bills half of each)."""
    return 0.5 if len((prediction.anchor_id or "").split(",")) > 1 else 1.0


def _correct_host(group: Group, anchor_id: str, rows: dict[str, CorpusRow], predicted) -> None:
    """Move H0 by the median TTFT miss of the lowest-concurrency rows (step 6)."""
    shifts = []
    for ids in group.prefill_rows.values():
        for row_id in ids:
            prediction = predicted(rows[row_id])
            # The median is compared with the steady state, a mean with the run's mean.
            key = "ttft_ms_p50" if rows[row_id].measured.ttft_ms_median is not None else "ttft_ms_mean"
            if _uses(prediction, anchor_id) and prediction.metrics[key] > 0:
                miss = ttft_typical(rows[row_id]) - prediction.metrics[key]
                shifts.append(miss / _ttft_sensitivity(prediction))
    if shifts:
        group.host_base_ms = max(0.0, group.host_base_ms + HOST_DAMPING * statistics.median(shifts))


def _correct_stall(group: Group, anchor_id: str, rows: dict[str, CorpusRow], predicted) -> None:
    """Fit the first wave's one-off stall from rows that give both a mean and a median
    TTFT: the host time matches the median (steady state); what the run's mean adds
    beyond the modelled first wave is a stall paid by one request in
    `row.requests_per_client` (step 6)."""
    shifts = []
    for row in rows.values():
        measured = row.measured
        if measured.ttft_ms_median is None or measured.ttft_ms_mean is None or not row.requests_per_client:
            continue
        prediction = predicted(row)
        if _uses(prediction, anchor_id):
            miss = measured.ttft_ms_mean - prediction.metrics["ttft_ms_mean"]
            shifts.append(miss * row.requests_per_client / _ttft_sensitivity(prediction))
    if shifts:
        group.first_wave_stall_ms = max(0.0, group.first_wave_stall_ms + HOST_DAMPING * statistics.median(shifts))


# --- the reproduction check --------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Reproduction:
    """One source row predicted with the anchors built from it."""

    row: CorpusRow
    prediction: Prediction

    @property
    def anchored(self) -> bool:
        return self.prediction.legal and self.prediction.mode == Mode.ANCHORED


def reproduce(build: AnchorBuild, predict_fn: PredictFn = predict_row) -> list[Reproduction]:
    """Predict every source row of every anchor with the built anchors."""
    store = AnchorStore.from_anchors(list(build.anchors))
    seen: dict[str, CorpusRow] = {}
    for group in build.groups.values():
        seen.update(group.source_rows())
    return [Reproduction(row, predict_fn(row, store)) for row in seen.values()]
