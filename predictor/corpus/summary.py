"""Score summaries over predicted corpus rows (METHOD §8): the row classes, APE and
error factors per metric, ranking within choice sets (model, isl, osl, concurrency) with
each configuration's run-to-run noise, and frontier hits per chart. Pure arithmetic over
`predictor.corpus.metrics`; `predictor.corpus.score` runs the score, `predictor.corpus.report`
renders it.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass
from enum import StrEnum

from predictor.corpus.metrics import Choice, ape, error_factor, frontier_hits, quantile, rank, relative_spread
from predictor.corpus.row import CorpusRow
from predictor.prediction import Prediction
from predictor.units import MS_PER_S

DEFAULT_NOISE = 0.005        # README: median run-to-run variation of throughput per GPU
METRICS = {"ttft": ("ttft_ms_mean", "ttft_ms_mean"), "tpot": ("tpot_ms_mean", "tpot_ms_mean"),
           "throughput": ("output_throughput_per_gpu", "output_throughput_per_gpu")}


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

# A chart's mean TPOT falling by more than this factor as its clients grow (or two runs of
# one configuration that far apart) is a contradiction of the rows, not a modelling miss: a
# decode step does not get cheaper as its batch grows, and the runs differ by more than the
# ~5% the same configuration repeats to (METHOD §8).
CONTRADICTION_FACTOR = 1.25


def chart_contradictions(rows: list[CorpusRow]) -> dict[str, str]:
    """Rows whose mean TPOT contradicts their own chart (`CONTRADICTION_FACTOR`): within one
    stack, layout and pair of lengths, a row at more clients decodes faster than one at
    fewer by more than the factor, or two runs at as many clients are that far apart. Both
    rows of each such pair are named; a row's reason is its worst pair (the other row, both
    TPOTs, the other row's build) and how many other rows it clashes with: which row of a
    pair is wrong the rows cannot say. Reported beside a protocol's absurd predictions,
    never excluded from it."""
    charts: dict[tuple, list[CorpusRow]] = defaultdict(list)
    for row in rows:
        if row.measured.tpot_ms_mean:
            charts[(row.stack, row.layout_name, row.isl, row.osl)].append(row)
    clashes: dict[str, list[tuple[float, str]]] = defaultdict(list)
    for members in charts.values():
        members.sort(key=lambda r: r.concurrency)
        for i, fewer in enumerate(members):
            for more in members[i + 1:]:
                pair = _contradiction(fewer, more)
                if pair is not None:
                    ratio, what, slow, fast = pair
                    for row, other in ((fewer, more), (more, fewer)):
                        clashes[row.id].append((ratio, f"{what} in the same chart ({fast:.2f} vs {slow:.2f} ms TPOT; "
                                                       f"other row {other.id}, build {other.engine_version or 'unknown'})"))
    found = {}
    for row_id, pairs in clashes.items():
        _, worst = max(pairs, key=lambda p: p[0])
        found[row_id] = worst + (f" and {len(pairs) - 1} other rows" if len(pairs) > 1 else "")
    return found


# A row whose mean TTFT is more than this many times its median has a tail of stalled
# requests holding the mean: InferenceX's DeepSeek-R1 FP4 on B200 under SGLang at TP8 and
# 32 clients measures a 7.0-7.5 s mean in all three runs over a 0.33 s median (p99 69-74 s),
# ~2% of requests waiting a minute each. A steady state does not predict that tail (an
# anchor's first-wave stall carries it only where the same stack measured one); a row whose
# median and mean agree within the factor is queueing the model should price.
STALL_FACTOR = 5.0


def ttft_stalls(rows: list[CorpusRow]) -> dict[str, str]:
    """Rows whose mean TTFT is held by stalled requests (`STALL_FACTOR` over the median),
    with the figures. Reported beside a protocol's absurd TTFTs, never excluded from it."""
    found = {}
    for row in rows:
        mean, median = row.measured.ttft_ms_mean, row.measured.ttft_ms_median
        if mean and median and mean > STALL_FACTOR * median:
            found[row.id] = (f"mean TTFT {mean / 1000:.2f} s is {mean / median:.0f}x its median "
                             f"{median / 1000:.2f} s: a tail of stalled requests holds the mean")
    return found


def _contradiction(fewer: CorpusRow, more: CorpusRow) -> tuple[float, str, float, float] | None:
    """(ratio, what, slower TPOT, faster TPOT) when ``more`` clients decode more than
    `CONTRADICTION_FACTOR` faster than ``fewer`` (either way round at as many clients)."""
    a, b = fewer.measured.tpot_ms_mean, more.measured.tpot_ms_mean
    if more.concurrency == fewer.concurrency:
        slow, fast = max(a, b), min(a, b)
        what = f"two runs at {more.concurrency} clients {slow / fast:.1f}x apart"
    else:
        slow, fast = a, b
        what = f"{more.concurrency} clients decode {slow / fast:.1f}x faster than {fewer.concurrency}"
    return (slow / fast, what, slow, fast) if slow > CONTRADICTION_FACTOR * fast else None


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
