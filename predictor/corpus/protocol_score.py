"""`inferasim score --protocol`: the predictor scored the way users depend on it (METHOD §8).

Each protocol of `predictor.corpus.protocols` names its anchor rows and its targets; here
the anchors are built from the anchor rows by the corpus rule (with its reading of the
rows through the model, `predictor.corpus.refine`), the targets predicted, and one summary
line computed per protocol: rows predicted and not expressible, median and p90 absolute
percentage error of mean TPOT, output throughput per GPU and mean TTFT, ranking pair
accuracy, how often the 80% interval held the measured value, and absurd predictions
(a metric at or below zero, or off by more than `ABSURD_FACTOR`).

Anchors come from the scored corpus only; cross-model priors are learned from those anchors
(`leave-model-out`: from the other models' anchors only). `none` predicts with no anchor of
the scored corpus: physics plus the shipped priors learned from the embedded anchors of
*other* models (`embedded_priors_without`), as a user with an unanchored model gets.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable, Iterable

from predictor.anchors.anchoring import default_store, store_priors
from predictor.anchors.store import AnchorStore
from predictor.cards.registry import load_card
from predictor.corpus.assemble import build_anchors
from predictor.corpus.metrics import ape, quantile
from predictor.corpus.protocols import ALL, PROTOCOLS, Protocol, Selection, select
from predictor.corpus.refine import REFINE_ROUNDS, predict_row, refine
from predictor.corpus.row import CorpusRow
from predictor.corpus.summary import (METRICS, RowKind, RowResult, chart_contradictions, noise_by_config,
                                      summarize, ttft_stalls)
from predictor.step.priors import Priors, learn_from_anchors
from predictor.uncertainty import band_keys

ABSURD_FACTOR = 3.0
PredictFn = Callable[..., object]


@dataclass(frozen=True)
class ProtocolScore:
    """One protocol on one corpus."""

    protocol: Protocol
    results: tuple[RowResult, ...]
    unexpressed: tuple[tuple[str, str], ...]
    num_anchors: int
    failed: tuple[tuple[str, str], ...] = field(default=())

    def summary(self, noise: dict, contradictions: dict[str, str] | None = None,
                stalls: dict[str, str] | None = None) -> dict:
        """The protocol's line; ``contradictions``: rows that contradict their own chart
        (`chart_contradictions`), ``stalls``: rows whose mean TTFT a stalled tail holds
        (`ttft_stalls`, for their TTFT only), each named beside the absurd predictions on them."""
        base = summarize(list(self.results), noise)
        rows = absurd_rows(self.results, contradictions or {}, stalls)
        return {
            "protocol": str(self.protocol), "n": len(self.results), "n_anchors": self.num_anchors,
            "n_unexpressed": len(self.unexpressed), "n_failed": len(self.failed),
            "unexpressed_by_reason": _count(self.unexpressed), "failed_by_reason": _count(self.failed),
            **{f"{m}_median_ape": base[f"{m}_median_ape"] for m in METRICS},
            **{f"{m}_p90_ape": base[f"{m}_p90_ape"] for m in METRICS},
            "pair_accuracy": base["pair_accuracy"], "decisive_pairs": base["decisive_pairs"],
            "interval_coverage": coverage(self.results), "absurd": per_metric(rows),
            "absurd_on_contradicting_rows": per_metric([r for r in rows if r["chart_contradiction"]]),
            "absurd_rows": rows,
            "modes": _count((r.id, str(r.prediction.mode)) for r in self.results),
            "transfer": _count((r.id, str(r.prediction.transfer)) for r in self.results),
        }


def _count(items: Iterable[tuple[str, str]]) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for _, reason in items:
        counts[reason] += 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


def coverage(results: Iterable[RowResult]) -> dict[str, float | None]:
    """Share of rows whose measured value lies in the prediction's 80% interval."""
    out = {}
    for metric, (key, _) in METRICS.items():
        inside = total = 0
        for result in results:
            pair, interval = result.pair(metric), result.prediction.intervals.get(key)
            if pair is None or interval is None:
                continue
            total += 1
            inside += interval[0] <= pair[1] <= interval[1]
        out[metric] = round(inside / total, 4) if total else None
    return out


def per_metric(rows: list[dict]) -> dict[str, int]:
    """How many of `absurd_rows`' ``rows`` each metric has."""
    return {metric: sum(1 for r in rows if r["metric"] == metric) for metric in METRICS}


def _is_absurd(predicted: float, measured: float) -> bool:
    return predicted <= 0 or not math.isfinite(predicted) or max(predicted / measured,
                                                                 measured / predicted) > ABSURD_FACTOR


def absurd_rows(results: Iterable[RowResult], contradictions: dict[str, str],
                stalls: dict[str, str] | None = None) -> list[dict]:
    """Every absurd prediction (at or below zero, or more than `ABSURD_FACTOR` off) with its
    row, values and, when the row contradicts its own chart (`chart_contradictions`) or, for
    a TTFT, its mean is held by stalled requests (`ttft_stalls`), why."""
    stalls = stalls or {}
    out = []
    for result in results:
        for metric in METRICS:
            pair = result.pair(metric)
            if pair is not None and _is_absurd(*pair):
                why = contradictions.get(result.id)
                if why is None and metric == "ttft":
                    why = stalls.get(result.id)
                out.append({"id": result.id, "metric": metric, "predicted": _finite(pair[0]),
                            "measured": _finite(pair[1]), "chart_contradiction": why})
    return out


def _finite(value: float) -> float | None:
    """``value`` rounded for JSON; None when not finite (strict JSON has no NaN)."""
    return round(value, 4) if math.isfinite(value) else None


def residuals(results: Iterable[RowResult]) -> dict[str, list[float]]:
    """``log(measured / predicted)`` per metric family (for `predictor.uncertainty`)."""
    out: dict[str, list[float]] = {m: [] for m in METRICS}
    for result in results:
        for metric in METRICS:
            pair = result.pair(metric)
            if pair and pair[0] > 0:
                out[metric].append(math.log(pair[1] / pair[0]))
    return out


def tiered_residuals(results: Iterable[RowResult]) -> dict[str, dict[str, list[float]]]:
    """`residuals` per band of the predictions (`predictor.uncertainty.band_keys`: fit
    tier, anchor source, both; the row's harness for a prediction no anchor calibrates):
    a prediction counts in each of its bands."""
    by_tier: dict[str, list[RowResult]] = defaultdict(list)
    for result in results:
        for key in band_keys(result.prediction.calibration, result.row.harness.name):
            by_tier[key].append(result)
    return {tier: residuals(items) for tier, items in by_tier.items()}


# --- running a protocol -----------------------------------------------------------------------

def corpus_store(anchor_rows: list[CorpusRow], refine_rounds: int, predict_fn) -> tuple[AnchorStore, int]:
    """The anchors the corpus rule builds from ``anchor_rows`` (refined ``refine_rounds``
    times through ``predict_fn``) as a store, and how many there are."""
    build = refine(build_anchors(anchor_rows, command_line="inferasim score --protocol"), predict_fn, refine_rounds)
    return AnchorStore.from_anchors(list(build.anchors)), len(build.anchors)


_EMBEDDED: dict[str, Priors] = {}


def embedded_priors_without(model: str) -> Priors:
    """Priors learned from the embedded anchors of every model but ``model``."""
    found = _EMBEDDED.get(model.lower())
    if found is None:
        found = _EMBEDDED[model.lower()] = learn_from_anchors(default_store().all(), load_card, exclude_model=model)
    return found


def _classify(row: CorpusRow, prediction) -> RowResult | None:
    if not prediction.legal or prediction.metrics is None:
        return None
    return RowResult(row.id, RowKind.SCORED if prediction.anchor_id else RowKind.RANK_ONLY, row, prediction)


def run_protocol(rows: list[CorpusRow], protocol: Protocol | str, *, predict_fn: PredictFn = predict_row,
                 refine_rounds: int = REFINE_ROUNDS) -> ProtocolScore:
    """Anchors from the protocol's anchor rows, predictions for its targets (module docstring)."""
    chosen: Selection = select(protocol, rows)
    results, failed, num_anchors = [], [], 0
    unexpressed = list(chosen.unexpressed)
    for fold in chosen.folds:
        store, priors, scoped = AnchorStore.from_anchors([]), None, None
        if fold.anchors:
            built, count = corpus_store(list(fold.anchors), refine_rounds, predict_fn)
            num_anchors += count
            if fold.priors_only:
                priors = learn_from_anchors(built.all(), load_card, exclude_model=fold.name)
            else:
                store = built
            if fold.scope is not None and not fold.priors_only:
                priors, scoped = store_priors(built), _scoped_stores(built, fold)
        for row in fold.targets:
            row_priors = priors if priors is not None or fold.anchors else embedded_priors_without(row.model)
            row_store = store if scoped is None else scoped.get(fold.scope(row))
            if row_store is None:       # not a no-anchor price in disguise
                unexpressed.append((row.id, "no anchor was built from its own chart's or deployment's rows "
                                            "(the corpus rule took its layout's points from other rows, or none)"))
                continue
            result = _classify(row, predict_fn(row, row_store, row_priors))
            if result is None:
                failed.append((row.id, "not predicted (illegal or no metrics)"))
            else:
                results.append(result)
    return ProtocolScore(Protocol(protocol), tuple(results), tuple(unexpressed), num_anchors, tuple(failed))


def _scoped_stores(built: AnchorStore, fold) -> dict[tuple, AnchorStore]:
    """The fold's anchors by the scope of the rows each was built from (`Split.scope`)."""
    scope_of = {row.id: fold.scope(row) for row in fold.anchors}
    by_scope: dict[tuple, list] = defaultdict(list)
    for anchor in built.all():
        for key in dict.fromkeys(scope_of[i] for i in anchor.provenance.source_rows if i in scope_of):
            by_scope[key].append(anchor)
    return {key: AnchorStore.from_anchors(anchors) for key, anchors in by_scope.items()}


def parse_protocols(text: str) -> tuple[Protocol, ...]:
    """The protocols a comma list names, each once (`all`: every one); ValueError for an
    unknown name."""
    names = [p.strip().lower() for p in text.split(",") if p.strip()]
    if ALL in names:
        return PROTOCOLS
    return tuple(dict.fromkeys(Protocol(name) for name in names))


def score_protocols(rows: list[CorpusRow], protocols: Iterable[Protocol], **options) -> dict:
    """Every protocol's summary line (module docstring), and its raw residuals."""
    noise, contradictions, stalls = noise_by_config(rows), chart_contradictions(rows), ttft_stalls(rows)
    lines, raw, tiered = [], {}, {}
    for protocol in protocols:
        scored = run_protocol(rows, protocol, **options)
        lines.append(scored.summary(noise, contradictions, stalls))
        raw[str(protocol)] = residuals(scored.results)
        tiered[str(protocol)] = tiered_residuals(scored.results)
    return {"protocols": lines, "residuals": raw, "tiered_residuals": tiered}


def ape_of(result: RowResult, metric: str) -> float | None:
    pair = result.pair(metric)
    return None if pair is None else ape(*pair)


def quantiles(values: list[float]) -> tuple[float | None, float | None]:
    return quantile(values, 0.1), quantile(values, 0.9)
