"""Score the predictor against a measured corpus (METHOD §8; PRODUCT.md §2 `score`).

`score_corpus` splits the rows into anchor rows and rows to predict, builds anchors from
the anchor rows by the corpus rule (`predictor.corpus.anchors`, with its reproduction
step), predicts every other row and compares. Every row ends in exactly one class:
anchor, scored (covered: predicted in anchored mode), rank-only, or failed (with its
reason: unmappable, not anchorable, illegal for the predictor).

Anchor rows by default (fixed before scoring, `DEFAULT_SELECTION`): in each ladder of
one deployment (stack and layout) at one prompt/output length, the 1st, 3rd, 5th, ...
distinct concurrency (lowest first) and the highest; the others are held out, so every
held-out run lies between two anchor runs of its own deployment. `--anchor-where EXPR`
replaces this: the matching rows are the anchor rows (`predictor.corpus.where`).

Metrics (`predictor.corpus.metrics`): APE of mean TTFT, mean TPOT and output throughput
per GPU (every GPU of the deployment), error factors, ranking of output throughput per GPU
within choice sets (model, isl, osl, concurrency), top-1, regret and frontier hits per
chart; overall over the scored rows, per model, per chart and per mode; rank-only rows
in their own block; targets checked per chart with a reason for each miss.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from typing import Iterable

from predictor.anchors.store import AnchorStore
from predictor.corpus.anchors import RULE_VERSION
from predictor.corpus.assemble import build_anchors
from predictor.corpus.read import AUTO, CorpusRow, RowFailure, filter_rows, read_corpus
from predictor.corpus.refine import REFINE_ROUNDS, PredictFn, predict_row, refine, reproduce
from predictor.corpus.report import TARGETS, ScoreReport
from predictor.corpus.summary import RowKind, RowResult, noise_by_config, summarize
from predictor.prediction import Prediction
from predictor.step.cost import Mode

DEFAULT_SELECTION = ("per deployment ladder (stack, layout, isl, osl): the 1st, 3rd, 5th, ... distinct "
                     "concurrency and the highest are anchor rows; the others are predicted")


# --- selection -----------------------------------------------------------------------------

def default_anchor_rows(rows: Iterable[CorpusRow]) -> tuple[list[CorpusRow], list[CorpusRow]]:
    """`DEFAULT_SELECTION` (module docstring)."""
    ladders: dict[tuple, set[int]] = defaultdict(set)
    rows = list(rows)
    for row in rows:
        ladders[_ladder(row)].add(row.concurrency)
    chosen = {}
    for key, levels in ladders.items():
        ordered = sorted(levels)
        chosen[key] = set(ordered[::2]) | {ordered[-1]}
    anchors, held = [], []
    for row in rows:
        (anchors if row.concurrency in chosen[_ladder(row)] else held).append(row)
    return anchors, held


def _ladder(row: CorpusRow) -> tuple:
    return (row.stack, row.layout_name, row.isl, row.osl)


def select_anchor_rows(rows: list[CorpusRow], where: str | None) -> tuple[list[CorpusRow], list[CorpusRow], str]:
    if where and where.strip():
        matched, rest = filter_rows(rows, where)
        return matched, rest, f"rows matching: {where.strip()}"
    anchors, held = default_anchor_rows(rows)
    return anchors, held, DEFAULT_SELECTION


# --- the run -------------------------------------------------------------------------------

def score_corpus(rows: Iterable[CorpusRow], *, failures: Iterable[RowFailure] = (), anchor_where: str | None = None,
                 predict_fn: PredictFn = predict_row, refine_rounds: int = REFINE_ROUNDS) -> "ScoreReport":
    """Build anchors from the anchor rows, predict every other row, compare (METHOD §8)."""
    rows = list(rows)
    anchor_rows, held, selection = select_anchor_rows(rows, anchor_where)
    build = refine(build_anchors(anchor_rows, command_line="inferasim score"), predict_fn, refine_rounds)
    unanchored = {f.id: f.reason for f in build.failures}
    results = [RowResult(f.id, RowKind.FAILED, reason=f.reason) for f in failures]
    results += [RowResult(r.id, RowKind.FAILED, r, reason=f"anchor row: {unanchored[r.id]}") if r.id in unanchored
                else RowResult(r.id, RowKind.ANCHOR, r) for r in anchor_rows]
    store = AnchorStore.from_anchors(list(build.anchors))
    for row in held:
        results.append(_classify(row, predict_fn(row, store)))
    reproduction = [_classify(item.row, item.prediction) for item in reproduce(build, predict_fn)]
    return ScoreReport(tuple(results), build.anchors, selection, tuple(reproduction), noise_by_config(rows))


def score_file(path: str, fmt: str = AUTO, anchor_where: str | None = None) -> "ScoreReport":
    """Read a corpus file (`predictor.corpus.read`) and score it: what `inferasim score` runs."""
    corpus = read_corpus(path, fmt)
    report = score_corpus(corpus.rows, failures=corpus.failures, anchor_where=anchor_where)
    return replace(report, source=corpus.path, format=corpus.format)


def _classify(row: CorpusRow, prediction: Prediction) -> RowResult:
    if not prediction.legal or prediction.metrics is None:
        return RowResult(row.id, RowKind.FAILED, row, prediction, "; ".join(prediction.reasons) or "not predicted")
    kind = RowKind.SCORED if prediction.mode == Mode.ANCHORED else RowKind.RANK_ONLY
    return RowResult(row.id, kind, row, prediction)


__all__ = ["RULE_VERSION", "RowKind", "RowResult", "ScoreReport", "TARGETS", "default_anchor_rows", "score_corpus",
           "score_file", "select_anchor_rows", "summarize"]
