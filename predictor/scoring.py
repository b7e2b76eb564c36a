"""Score the predictor against a measured corpus (METHOD §8; PRODUCT.md §2 `score`).

`score_corpus` splits the rows into anchor rows and rows to predict, builds anchors from
the anchor rows by the corpus rule (`predictor.corpus_anchors`, with its reproduction
step), predicts every other row and compares. Every row ends in exactly one class:
anchor, scored (covered: predicted in anchored mode), rank-only, or failed (with its
reason: unmappable, not anchorable, illegal for the predictor).

Anchor rows by default (fixed before scoring, `DEFAULT_SELECTION`): in each ladder of
one deployment (stack and layout) at one prompt/output length, the 1st, 3rd, 5th, ...
distinct concurrency (lowest first) and the highest; the others are held out, so every
held-out run lies between two anchor runs of its own deployment. `--anchor-where EXPR`
replaces this: the matching rows are the anchor rows (`predictor.corpus_where`).

Metrics (`predictor.score_metrics`): APE of mean TTFT, mean TPOT and output throughput
per GPU (every GPU of the deployment), error factors, ranking of output throughput per GPU
within choice sets (model, isl, osl, concurrency), top-1, regret and frontier hits per
chart; overall over the scored rows, per model, per chart and per mode; rank-only rows
in their own block; targets checked per chart with a reason for each miss.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Iterable

from predictor.anchor import Anchor
from predictor.anchor_store import AnchorStore
from predictor.corpus import AUTO, CorpusRow, RowFailure, filter_rows, read_corpus
from predictor.corpus_anchors import RULE_VERSION
from predictor.corpus_assemble import build_anchors
from predictor.corpus_refine import REFINE_ROUNDS, PredictFn, predict_row, refine, reproduce
from predictor.prediction import Prediction
from predictor.score_metrics import Choice, ape, error_factor, frontier_hits, quantile, rank, relative_spread
from predictor.step import Mode

DEFAULT_SELECTION = ("per deployment ladder (stack, layout, isl, osl): the 1st, 3rd, 5th, ... distinct "
                     "concurrency and the highest are anchor rows; the others are predicted")
DEFAULT_NOISE = 0.005        # README: median run-to-run variation of throughput per GPU
TARGETS = {"tpot_median_ape": (10.0, "max"), "throughput_median_ape": (10.0, "max"),
           "ttft_median_ape": (20.0, "max"), "pair_accuracy": (0.90, "min")}
METRICS = {"ttft": ("ttft_ms_mean", "ttft_ms_mean"), "tpot": ("tpot_ms_mean", "tpot_ms_mean"),
           "throughput": ("output_throughput_per_gpu", "output_throughput_per_gpu")}
STARTUP_STALL_RATIO = 1.5    # mean/median TTFT above this: the mean carries one-off stalls
MS_PER_S = 1000.0


class RowKind(StrEnum):
    ANCHOR = "anchor"
    SCORED = "scored"
    RANK_ONLY = "rank-only"
    FAILED = "failed"


@dataclass(frozen=True)
class RowResult:
    id: str
    kind: RowKind
    row: CorpusRow | None = None
    prediction: Prediction | None = None
    reason: str = ""

    def pair(self, metric: str) -> tuple[float, float] | None:
        """(predicted, measured) of `metric` (ttft, tpot, throughput) when both exist."""
        if self.row is None or self.prediction is None or self.prediction.metrics is None:
            return None
        predicted_key, measured_key = METRICS[metric]
        predicted, measured = self.prediction.metrics.get(predicted_key), self.row.measured.get(measured_key)
        if predicted is None or measured is None or measured <= 0:
            return None
        return predicted, measured


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
    anchors = [r for r in rows if r.concurrency in chosen[_ladder(r)]]
    held = [r for r in rows if r.concurrency not in chosen[_ladder(r)]]
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
    """Read a corpus file (`predictor.corpus`) and score it: what `inferasim score` runs."""
    corpus = read_corpus(path, fmt)
    report = score_corpus(corpus.rows, failures=corpus.failures, anchor_where=anchor_where)
    return replace(report, source=corpus.path, format=corpus.format)


def _classify(row: CorpusRow, prediction: Prediction) -> RowResult:
    if not prediction.legal or prediction.metrics is None:
        return RowResult(row.id, RowKind.FAILED, row, prediction, "; ".join(prediction.reasons) or "not predicted")
    kind = RowKind.SCORED if prediction.mode == Mode.ANCHORED else RowKind.RANK_ONLY
    return RowResult(row.id, kind, row, prediction)


def config_key(row: CorpusRow) -> tuple:
    return (row.gpu, row.engine, row.precision, row.spec, row.layout_name)


def choice_key(row: CorpusRow) -> tuple:
    return (row.model, row.isl, row.osl, row.concurrency)


def noise_by_config(rows: list[CorpusRow]) -> dict[tuple, float]:
    """Run-to-run noise of output throughput per (configuration, choice set): the
    relative spread of repeated runs; configurations run once take the corpus median."""
    runs: dict[tuple, list[float]] = defaultdict(list)
    for row in rows:
        value = row.measured.output_throughput_per_gpu
        if value:
            runs[(config_key(row), choice_key(row))].append(value)
    spreads = {k: s for k, v in runs.items() if (s := relative_spread(v)) is not None}
    default = statistics.median(spreads.values()) if spreads else DEFAULT_NOISE
    return defaultdict(lambda: default, spreads)


# --- summaries ----------------------------------------------------------------------------------

def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def summarize(results: list[RowResult], noise: dict[tuple, float]) -> dict:
    """The score keys over `results` (rows with predictions)."""
    out: dict = {"n": len(results)}
    factors = {}
    for metric in METRICS:
        pairs = [p for r in results if (p := r.pair(metric))]
        apes = [ape(p, m) for p, m in pairs]
        out[f"{metric}_median_ape"] = _round(quantile(apes, 0.5))
        out[f"{metric}_p90_ape"] = _round(quantile(apes, 0.9))
        factors[metric] = _round(error_factor(pairs), 4)
    out["error_factor"] = factors
    typical = [ape(r.prediction.metrics["ttft_ms_p50"], r.row.measured.ttft_ms_median) for r in results
               if r.row.measured.ttft_ms_median and "ttft_ms_p50" in (r.prediction.metrics or {})]
    out["ttft_p50_vs_median_ape"] = _round(quantile(typical, 0.5))
    out.update(_ranking(results, noise))
    out.update(_frontier(results))
    return out


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def _ranking(results: list[RowResult], noise: dict[tuple, float]) -> dict:
    grouped: dict[tuple, dict[tuple, list[tuple[float, float]]]] = defaultdict(lambda: defaultdict(list))
    for result in results:
        if pair := result.pair("throughput"):
            grouped[choice_key(result.row)][config_key(result.row)].append(pair)
    sets = []
    for choice, configs in grouped.items():
        sets.append([Choice(key, _mean([m for _, m in v]), _mean([p for p, _ in v]), noise[(key, choice)])
                     for key, v in configs.items()])
    ranking = rank(sets)
    return {"pair_accuracy": _round(ranking.pair_accuracy, 4), "decisive_pairs": ranking.decisive_pairs,
            "top1": _round(ranking.top1, 4), "choice_sets": ranking.sets,
            "regret_median": _round(quantile(ranking.regrets_pct, 0.5)),
            "regret_p90": _round(quantile(ranking.regrets_pct, 0.9))}


def _frontier(results: list[RowResult]) -> dict:
    charts: dict[str, dict[tuple, list[tuple[float, float, float, float]]]] = defaultdict(lambda: defaultdict(list))
    for result in results:
        tput, tpot = result.pair("throughput"), result.pair("tpot")
        if tput and tpot and tpot[0] > 0:
            point = (tput[1], MS_PER_S / tpot[1], tput[0], MS_PER_S / tpot[0])
            charts[result.row.chart.name][(config_key(result.row), result.row.concurrency)].append(point)
    hits = total = 0
    for points in charts.values():
        means = [tuple(_mean([p[i] for p in group]) for i in range(4)) for group in points.values()]
        hit, count = frontier_hits([(m[0], m[1]) for m in means], [(m[2], m[3]) for m in means])
        hits, total = hits + hit, total + count
    return {"frontier_hits": _round(hits / total if total else None, 4), "frontier_points": total}


# --- the report ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class ScoreReport:
    results: tuple[RowResult, ...]
    anchors: tuple[Anchor, ...]
    anchor_selection: str
    reproduction: tuple[RowResult, ...]
    noise: dict[tuple, float] = field(default_factory=dict)
    source: str = ""
    format: str = ""

    def of_kind(self, kind: RowKind) -> list[RowResult]:
        return [r for r in self.results if r.kind == kind]

    def to_json(self) -> dict:
        from predictor.score_report import report_json

        return report_json(self)


__all__ = ["RULE_VERSION", "RowKind", "RowResult", "ScoreReport", "TARGETS", "default_anchor_rows", "score_corpus",
           "score_file", "select_anchor_rows", "summarize"]
