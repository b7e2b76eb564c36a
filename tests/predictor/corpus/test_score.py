"""Scoring conventions (METHOD §8) with constructed numbers, the default anchor-row rule,
and the report of `score_corpus` with a scripted predictor."""

import math
from dataclasses import replace
from pathlib import Path

import pytest

from predictor.corpus.metrics import Choice, ape, error_factor, frontier_hits, is_decisive, quantile, rank
from predictor.corpus.read import read_corpus
from predictor.corpus.score import default_anchor_rows, score_corpus
from predictor.prediction import Prediction
from predictor.step.cost import Mode
from tests.fixtures.corpus_truth import truth_rows, write_native

NATIVE = Path(__file__).resolve().parents[2] / "fixtures" / "corpus" / "native_small.csv"


def test_ape_quantiles_and_error_factor():
    assert ape(110.0, 100.0) == pytest.approx(10.0) and ape(90.0, 100.0) == pytest.approx(10.0)
    assert quantile([1, 2, 3, 4, 5], 0.5) == 3.0 and quantile([0, 10], 0.9) == pytest.approx(9.0)
    assert quantile([], 0.5) is None
    assert error_factor([(2.0, 1.0), (1.0, 2.0)]) == pytest.approx(2.0)      # both 2x misses
    assert error_factor([(1.1, 1.0)]) == pytest.approx(1.1)
    assert error_factor([(1.0, 1.0), (4.0, 1.0)]) == pytest.approx(2.0)      # geometric mean of 1 and 4


def test_decisive_pairs_need_3_percent_and_the_noise():
    a = Choice("a", 100.0, 1.0)
    assert not is_decisive(a, Choice("b", 102.0, 2.0))                      # 2% gap
    assert is_decisive(a, Choice("b", 104.0, 2.0))                          # 4% gap
    assert not is_decisive(a, Choice("b", 104.0, 2.0, noise=0.05))          # inside 5% noise


def test_pair_accuracy_ties_top1_and_regret():
    right = [Choice("a", 100.0, 10.0), Choice("b", 120.0, 12.0), Choice("c", 150.0, 15.0)]
    wrong = [Choice("a", 100.0, 20.0), Choice("b", 130.0, 10.0)]            # picks a, best is b
    tie = [Choice("a", 100.0, 5.0), Choice("b", 130.0, 5.0)]
    ranking = rank([right, wrong, tie, [Choice("solo", 1.0, 1.0)]])
    assert ranking.decisive_pairs == 5 and ranking.correct == pytest.approx(3.5)
    assert ranking.pair_accuracy == pytest.approx(0.7)
    assert ranking.sets == 3 and ranking.top1 == pytest.approx(1 / 3)
    assert ranking.regrets_pct[1] == pytest.approx(30 / 130 * 100)


def test_frontier_hits():
    measured = [(100.0, 10.0), (50.0, 30.0), (40.0, 20.0)]                   # frontier: 0, 1
    predicted = [(100.0, 10.0), (30.0, 30.0), (40.0, 25.0)]                  # frontier: 0, 1, 2
    assert frontier_hits(measured, predicted) == (2, 2)
    assert frontier_hits(measured, [(100.0, 10.0), (30.0, 5.0), (40.0, 25.0)]) == (1, 2)


def test_default_anchor_rows_interleave_each_ladder():
    rows = read_corpus(NATIVE).rows
    anchors, held = default_anchor_rows(rows)
    assert sorted({r.concurrency for r in anchors}) == [4, 16, 64]
    assert sorted({r.concurrency for r in held}) == [8, 32] and len(held) == 4
    short = [r for r in rows if r.concurrency in (4, 8, 16, 32)]
    anchors, held = default_anchor_rows(short)
    assert sorted({r.concurrency for r in anchors}) == [4, 16, 32]


def _scripted(factor: float = 1.1, illegal_tp: int | None = None, rank_only_concurrency: int | None = None):
    """A predictor that returns the measured values scaled by `factor`."""

    def predict(row, store, priors=None):
        if row.config.tp == illegal_tp:
            return Prediction(False, ("tp too wide",), None, None, (), None, None)
        m = row.measured
        metrics = {"ttft_ms_mean": m.ttft_ms_mean * factor, "ttft_ms_p50": m.ttft_ms_mean * factor,
                   "tpot_ms_mean": m.tpot_ms_mean * factor,
                   "output_throughput_per_gpu": m.output_throughput_per_gpu / factor}
        mode = Mode.RANK_ONLY if row.concurrency == rank_only_concurrency else Mode.ANCHORED
        return Prediction(True, (), mode, "x", ("flag-a",), metrics, None)

    return predict


def test_score_corpus_report_keys_and_counts(tmp_path):
    rows = read_corpus(NATIVE).rows
    report = score_corpus(rows, predict_fn=_scripted(1.15, rank_only_concurrency=32), refine_rounds=1)
    data = report.to_json()
    assert (data["n_rows"], data["n_anchor_rows"], data["n_scored"], data["n_rank_only"], data["n_failed"]) == \
        (10, 6, 2, 2, 0)
    assert data["tpot_median_ape"] == pytest.approx(15.0) and data["ttft_median_ape"] == pytest.approx(15.0)
    assert data["throughput_median_ape"] == pytest.approx(100 * (1 - 1 / 1.15), abs=1e-3)
    assert data["error_factor"]["tpot"] == pytest.approx(1.15)
    for key in ("n_rows", "n_scored", "ttft_median_ape", "tpot_median_ape", "throughput_median_ape",
                "pair_accuracy", "per_model", "per_chart", "per_mode", "rank_only", "reproduction", "targets"):
        assert key in data
    chart = data["per_chart"]["gpt-oss-120b/H100/vllm/fp4/none/1024x1024"]
    assert chart["n"] == 2 and chart["tpot_median_ape"] == pytest.approx(15.0)
    assert set(data["per_model"]) == {"gpt-oss-120b"}
    assert data["rank_only"]["n"] == 2
    # TP4 beats TP2 on throughput per GPU at concurrency 8 by more than 3%: one decisive pair, right
    assert data["decisive_pairs"] == 1 and data["pair_accuracy"] == 1.0 and data["top1"] == 1.0
    assert data["targets"]["ttft_median_ape"]["met"] is True
    assert data["targets"]["tpot_median_ape"]["met"] is False
    [miss] = data["targets"]["tpot_median_ape"]["charts_missed"]
    assert "predicted high by 15.0%" in miss["why"] and "flag-a" in miss["why"]


def test_failures_are_reported_with_reasons(tmp_path):
    corpus = read_corpus(NATIVE)
    rows = [replace(r, config=replace(r.config, tp=8)) if r.config.tp == 4 and r.concurrency == 8 else r
            for r in corpus.rows]
    report = score_corpus(rows, anchor_where="tp=2|4", predict_fn=_scripted(1.0, illegal_tp=8), refine_rounds=1)
    data = report.to_json()
    assert data["n_failed"] == 1 and data["failures"]["by_reason"] == {"tp too wide": 1}
    assert data["n_rows"] == data["n_anchor_rows"] + data["n_scored"] + data["n_rank_only"] + data["n_failed"]


def test_anchor_where_selects_the_anchor_rows():
    rows = read_corpus(NATIVE).rows
    data = score_corpus(rows, anchor_where="concurrency<=16", predict_fn=_scripted(1.0), refine_rounds=1).to_json()
    assert data["n_anchor_rows"] == 6 and data["n_scored"] == 4
    assert data["anchor_rows"] == "rows matching: concurrency<=16"
    assert data["tpot_median_ape"] == pytest.approx(0.0)


def test_real_predictor_on_held_out_rows(tmp_path):
    """End to end with the product's predictor on a corpus from a known steady state:
    held-out concurrencies are interpolated within a few percent."""
    corpus = read_corpus(write_native(tmp_path / "truth.csv", truth_rows()))
    data = score_corpus(corpus.rows, refine_rounds=2).to_json()
    assert data["n_scored"] == 4 and data["n_failed"] == 0
    assert data["tpot_median_ape"] < 3.0 and data["ttft_median_ape"] < 3.0
    assert data["throughput_median_ape"] < 3.0
    assert data["reproduction"]["tpot_median_ape"] < 1.0
    assert not math.isnan(data["frontier_hits"])


def test_a_row_without_an_anchor_takes_its_harness_host_time():
    """A corpus row names its harness (its source); priced with no anchor, it takes the
    host time that harness's anchors of its engine measured, not the pooled prior's
    (`predictor.step.priors.Priors.host`), and its TTFT moves by that difference only."""
    from predictor.anchors.store import AnchorStore
    from predictor.corpus.refine import predict_row
    from predictor.step.priors import Priors

    row = next(r for r in read_corpus(str(NATIVE.parent / "inferencex_small.csv"), "inferencex").rows
               if not r.config.disaggregated)
    assert row.harness.name == "inferencex"
    empty = AnchorStore.from_anchors([])
    pooled = predict_row(row, empty, Priors())
    taught = predict_row(row, empty, Priors(hosts={f"inferencex/{row.engine}": (200.0, 5.0, 3)}))
    other = predict_row(row, empty, Priors(hosts={f"aiconfigurator/{row.engine}": (200.0, 5.0, 3)}))
    assert other.metrics == pooled.metrics
    assert taught.metrics["ttft_ms_mean"] > pooled.metrics["ttft_ms_mean"] + 150.0
    assert taught.metrics["tpot_ms_mean"] == pytest.approx(pooled.metrics["tpot_ms_mean"], rel=0.02)
    assert "+host:inferencex/" in taught.calibration["source"]
