"""The JSON of a `ScoreReport` (METHOD §8; PRODUCT.md §2 `score --json`) and the reasons
given for each missed target.

Top-level error keys are over the scored rows (covered, anchored mode); rank-only rows
have their own block; `per_model`, `per_chart` and `per_mode` map a name to the same keys.
A missed target names its chart and a reason read off the rows: measured mean TTFT
carrying startup stalls, TTFT growth with concurrency the prediction lacks, the most
common prediction flags of the missed rows, and the sign of the bias.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from predictor.anchors.anchor import Anchor
from predictor.corpus.anchors import RULE_VERSION
from predictor.corpus.host import ttft_typical
from predictor.corpus.metrics import PERCENT
from predictor.corpus.summary import RowKind, RowResult, summarize

TARGETS = {"tpot_median_ape": (10.0, "max"), "throughput_median_ape": (10.0, "max"),
           "ttft_median_ape": (20.0, "max"), "pair_accuracy": (0.90, "min")}
STARTUP_STALL_RATIO = 1.5    # mean/median TTFT above this: the mean carries one-off stalls

MAX_FAILED_ROWS_LISTED = 200
# "batch-outside-sweep" is left out of the reasons: predict() prices `uncontended_step_ms`
# at batch 1, which raises it on every anchored prediction whose sweep starts above 1.
FLAG_PREFIXES_IGNORED = ("rank-only",)
FLAGS_IGNORED = ("batch-outside-sweep",)


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
        return report_json(self)


def report_json(report: ScoreReport) -> dict:
    scored = report.of_kind(RowKind.SCORED)
    rank_only = report.of_kind(RowKind.RANK_ONLY)
    failed = report.of_kind(RowKind.FAILED)
    overall = summarize(scored, report.noise)
    rank_only_summary = summarize(rank_only, report.noise)
    per_chart = _per(scored, lambda r: r.row.chart.name, report)
    return {
        "corpus": report.source,
        "format": report.format,
        "n_rows": len(report.results),
        "n_anchor_rows": len(report.of_kind(RowKind.ANCHOR)),
        "n_scored": len(scored),
        "n_rank_only": len(rank_only),
        "n_failed": len(failed),
        "anchor_rule": RULE_VERSION,
        "anchor_rows": report.anchor_selection,
        "n_anchors": len(report.anchors),
        "n_throughput_derived": sum(1 for r in scored if r.row.measured.throughput_derived),
        **{k: v for k, v in overall.items() if k != "n"},
        "per_model": _per(scored, lambda r: r.row.model, report),
        "per_chart": per_chart,
        "per_mode": {"anchored": overall, "rank-only": rank_only_summary},
        "rank_only": rank_only_summary,
        "reproduction": _reproduction(report),
        "targets": targets(overall, scored, per_chart),
        "failures": _failures(failed),
    }


def _per(results: list[RowResult], key, report: ScoreReport) -> dict[str, dict]:
    groups: dict[str, list[RowResult]] = defaultdict(list)
    for result in results:
        groups[key(result)].append(result)
    return {name: summarize(items, report.noise) for name, items in sorted(groups.items())}


def _reproduction(report: ScoreReport) -> dict:
    """The rule's check: every anchor row predicted with the anchors built from it."""
    anchored = [r for r in report.reproduction if r.kind == RowKind.SCORED]
    summary = summarize(anchored, report.noise)
    keys = ("n", "ttft_median_ape", "ttft_p90_ape", "tpot_median_ape", "tpot_p90_ape", "throughput_median_ape",
            "throughput_p90_ape", "ttft_p50_vs_median_ape")
    out = {k: summary[k] for k in keys}
    out["n_not_anchored"] = len(report.reproduction) - len(anchored)
    return out


def _failures(failed: list[RowResult]) -> dict:
    reasons = Counter(short_reason(r.reason) for r in failed)
    return {"by_reason": dict(reasons.most_common()),
            "rows": [{"id": r.id, "reason": r.reason} for r in failed[:MAX_FAILED_ROWS_LISTED]],
            "rows_listed": min(len(failed), MAX_FAILED_ROWS_LISTED)}


def short_reason(reason: str) -> str:
    """A failed row's reason without its list of legal values, at most 160 characters."""
    return reason.split(" (legal:")[0][:160]


# --- targets --------------------------------------------------------------------------------------

def _met(value: float | None, target: float, sense: str) -> bool | None:
    if value is None:
        return None
    return value <= target if sense == "max" else value >= target


def targets(overall: dict, scored: list[RowResult], per_chart: dict[str, dict]) -> dict:
    """Each target against the overall value, and the charts (`per_chart`: their
    summaries) that miss it, with why."""
    charts: dict[str, list[RowResult]] = defaultdict(list)
    for result in scored:
        charts[result.row.chart.name].append(result)
    out = {}
    for key, (target, sense) in TARGETS.items():
        value = overall.get(key)
        missed = []
        for chart, items in sorted(charts.items()):
            chart_value = per_chart[chart].get(key)
            if _met(chart_value, target, sense) is False:
                missed.append({"chart": chart, "value": chart_value, "n": len(items), "why": why(key, items)})
        out[key] = {"target": target, "sense": "<=" if sense == "max" else ">=", "value": value,
                    "met": _met(value, target, sense), "charts_missed": missed}
    return out


def why(key: str, items: list[RowResult]) -> str:
    """A reason for a missed target read off the chart's rows."""
    metric = key.split("_")[0]
    if metric == "pair":
        return "mis-ordered decisive pairs of output throughput per GPU: " + _bias_text(items, "throughput")
    parts = []
    if metric == "ttft":
        parts += _ttft_reasons(items)
    parts.append(_bias_text(items, metric))
    flags = _common_flags(items, metric)
    if flags:
        parts.append("prediction flags on the missed rows: " + ", ".join(flags))
    return "; ".join(p for p in parts if p)


def _signed_errors(items: list[RowResult], metric: str) -> list[float]:
    return [(p - m) / m * PERCENT for r in items if (pair := r.pair(metric)) for p, m in [pair]]


def _bias_text(items: list[RowResult], metric: str) -> str:
    errors = _signed_errors(items, metric)
    if not errors:
        return ""
    bias = statistics.median(errors)
    return f"{metric} predicted {'high' if bias > 0 else 'low'} by {abs(bias):.1f}% (median signed error)"


def _ttft_reasons(items: list[RowResult]) -> list[str]:
    reasons = []
    ratios = [r.row.measured.ttft_ms_mean / r.row.measured.ttft_ms_median for r in items
              if r.row.measured.ttft_ms_median and r.row.measured.ttft_ms_mean]
    if ratios and statistics.median(ratios) > STARTUP_STALL_RATIO:
        reasons.append(f"measured mean TTFT carries one-off stalls (mean/median {statistics.median(ratios):.1f}x)")
    growth = _growth(items)
    if growth:
        measured, predicted = growth
        if measured > 1.5 * predicted:
            reasons.append(f"measured TTFT (median where given) grows {measured:.1f}x from the lowest to the highest "
                           f"concurrency, "
                           f"predicted {predicted:.1f}x (closed-loop prefill queueing not modelled)")
    return reasons


def _growth(items: list[RowResult]) -> tuple[float, float] | None:
    by_deployment: dict[str, list[RowResult]] = defaultdict(list)
    for result in items:
        by_deployment[result.row.layout_name].append(result)
    ratios_m, ratios_p = [], []
    for results in by_deployment.values():
        ordered = sorted((r for r in results if r.pair("ttft")), key=lambda r: r.row.concurrency)
        if len(ordered) >= 2 and ordered[0].row.concurrency < ordered[-1].row.concurrency:
            low, high = ordered[0], ordered[-1]
            ratios_m.append(ttft_typical(high.row) / ttft_typical(low.row))
            ratios_p.append(high.pair("ttft")[0] / max(low.pair("ttft")[0], 1e-9))
    if not ratios_m:
        return None
    return statistics.median(ratios_m), statistics.median(ratios_p)


def _common_flags(items: list[RowResult], metric: str, limit: int = 3) -> list[str]:
    missed = [r for r in items if (pair := r.pair(metric)) and abs(pair[0] - pair[1]) / pair[1] > 0.1]
    counts = Counter(flag.split(":")[0] if flag.startswith("queueing") else flag
                     for r in missed for flag in r.prediction.flags
                     if not flag.startswith(FLAG_PREFIXES_IGNORED) and not flag.endswith(FLAGS_IGNORED))
    return [f"{flag} ({count}/{len(missed)})" for flag, count in counts.most_common(limit)]
