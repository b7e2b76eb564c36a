"""Protocol selections of `inferasim score --protocol` (METHOD §8) on a small native corpus."""

from pathlib import Path

from predictor.corpus.protocol_score import run_protocol, score_protocols
from predictor.corpus.protocols import Protocol
from predictor.corpus.read import read_corpus
from predictor.corpus.refine import predict_row
from predictor.corpus.summary import STALL_FACTOR, chart_contradictions, ttft_stalls
from tests.fixtures.corpus_edits import (NATIVE_SMALL, native_rows, native_with_fast_row, native_with_slower_repeat,
                                         native_with_stalled_row, write_rows)


def _two_precisions(tmp_path: Path) -> Path:
    """The fixture's two ladders (TP2, TP4) each also run at a second precision at two
    concurrencies: fp4 is TP2's main precision, bf16 TP4's."""
    rows = native_rows()
    extra = []
    for row in rows:
        if row["concurrency"] in ("4", "8"):
            extra.append({**row, "precision": "bf16"} if row["tp"] == "2" else dict(row))
        if row["tp"] == "4":
            row["precision"] = "bf16"
    return write_rows(tmp_path / "two_precisions.csv", rows + extra)


def test_a_precision_target_is_calibrated_by_its_own_deployments_anchor(tmp_path):
    """Not by an anchor of its own precision at another layout: that is a width transfer."""
    rows = list(read_corpus(_two_precisions(tmp_path)).rows)
    seen: dict[str, set] = {}

    def recording(row, store, priors=None):
        seen[row.id] = {(a.signature.tp, a.signature.weight_dtype) for a in store.all()}
        return predict_row(row, store, priors)

    scored = run_protocol(rows, "precision", predict_fn=recording)
    targets = {(r.row.config.tp, r.row.precision): r for r in scored.results}
    assert set(targets) == {(2, "bf16"), (4, "fp4")} and len(scored.results) == 4
    for result in scored.results:
        tp = result.row.config.tp
        assert {t for t, _ in seen[result.id]} == {tp}           # its own layout's anchor only


def test_a_cross_width_target_is_calibrated_by_its_own_charts_narrowest_width(tmp_path):
    """At 1k/1k the fixture's TP2 rows anchor its TP4 rows; at 2k/1k TP4 is the narrowest
    width (and TP8 its target). The 1k/1k TP4 rows must not take the 2k/1k TP4 anchor: that
    would be a length transfer at their own width, scored as a width one."""
    rows = native_rows()
    longer = [{**r, "isl": "2048", "tp": "8" if r["tp"] == "2" else r["tp"]} for r in rows]
    path = write_rows(tmp_path / "two_charts.csv", rows + longer)
    seen: dict[str, set] = {}

    def recording(row, store, priors=None):
        seen[row.id] = {a.signature.tp for a in store.all()}
        return predict_row(row, store, priors)

    scored = run_protocol(list(read_corpus(path).rows), "cross-width", predict_fn=recording)
    widths = {(r.row.isl, r.row.config.tp) for r in scored.results}
    assert widths == {(1024, 4), (2048, 8)}
    for result in scored.results:
        assert seen[result.id] == ({2} if result.row.isl == 1024 else {4})
        assert "width" in result.prediction.transfer_kinds


def test_a_scoped_target_without_an_anchor_of_its_scope_is_reported_not_priced(tmp_path, monkeypatch):
    import predictor.corpus.protocol_score as protocol_score

    monkeypatch.setattr(protocol_score, "_scoped_stores", lambda built, fold: {})
    scored = run_protocol(list(read_corpus(_two_precisions(tmp_path)).rows), "precision")
    assert not scored.results and not scored.failed and len(scored.unexpressed) == 4
    assert all("own chart's or deployment's rows" in why for _, why in scored.unexpressed)


def test_rows_that_contradict_their_chart_are_named_with_the_row_they_contradict(tmp_path):
    assert chart_contradictions(list(read_corpus(NATIVE_SMALL).rows)) == {}
    path, fast = native_with_fast_row(tmp_path, 6.0)
    found = chart_contradictions(list(read_corpus(path).rows))
    assert fast in found and "faster than" in found[fast] and "other rows" in found[fast]
    partners = {i for i in found if i != fast}
    assert partners and all(fast in found[i] for i in partners)      # each names the fast row


def test_the_contradiction_threshold_is_the_run_to_run_margin(tmp_path):
    """Made 1.5x faster, the last row is 1.16x faster than the next-busiest: noise. At 1.8x
    it is 1.39x faster: above `CONTRADICTION_FACTOR` (1.25)."""
    below, _ = native_with_fast_row(tmp_path, 1.5)
    assert chart_contradictions(list(read_corpus(below).rows)) == {}
    above, fast = native_with_fast_row(tmp_path, 1.8)
    assert fast in chart_contradictions(list(read_corpus(above).rows))


def test_two_runs_of_one_configuration_far_apart_contradict_whichever_comes_first(tmp_path):
    path, first, repeat = native_with_slower_repeat(tmp_path, 2.0)
    found = chart_contradictions(list(read_corpus(path).rows))
    assert {first, repeat} <= set(found) and "two runs at" in found[first] and "two runs at" in found[repeat]
    assert all(repeat in reason for row_id, reason in found.items() if row_id != repeat)   # the repeat is the odd one
    close, _, _ = native_with_slower_repeat(tmp_path, 1.1)
    assert chart_contradictions(list(read_corpus(close).rows)) == {}


def test_an_absurd_prediction_on_a_contradicting_row_says_so(tmp_path):
    path, fast = native_with_fast_row(tmp_path, 6.0)
    line = score_protocols(list(read_corpus(path).rows), [Protocol("load")])["protocols"][0]
    on_fast = [r for r in line["absurd_rows"] if r["id"] == fast]
    assert on_fast and all(r["chart_contradiction"] for r in on_fast)
    assert line["absurd_on_contradicting_rows"]["tpot"] >= 1
    assert sum(line["absurd"].values()) == len(line["absurd_rows"])


def test_an_absurd_ttft_on_a_row_whose_mean_a_stalled_tail_holds_says_so(tmp_path):
    """A mean TTFT 20x its median is a tail of stalled requests (`STALL_FACTOR`): its absurd
    TTFT names the stall, while its TPOT and throughput, which the tail does not touch, do not."""
    assert ttft_stalls(list(read_corpus(NATIVE_SMALL).rows)) == {}
    near, _ = native_with_stalled_row(tmp_path, STALL_FACTOR * 0.9)
    assert ttft_stalls(list(read_corpus(near).rows)) == {}
    path, stalled = native_with_stalled_row(tmp_path, 20.0)
    assert set(ttft_stalls(list(read_corpus(path).rows))) == {stalled}
    line = score_protocols(list(read_corpus(path).rows), [Protocol("load")])["protocols"][0]
    on_row = [r for r in line["absurd_rows"] if r["id"] == stalled]
    assert [r["metric"] for r in on_row] == ["ttft"] and "stalled" in on_row[0]["chart_contradiction"]
    assert line["absurd_on_contradicting_rows"]["ttft"] >= 1


def test_load_down_prices_a_ladders_few_clients_from_its_runs_under_load_and_carries_that_kind(tmp_path):
    """The way down of the load transfer (a served run at many clients asked about a few):
    anchors at >= 64 clients, targets at <= 16, each target's transfer kind `load-down`
    (its own error band), not the way up's `load`."""
    from predictor.anchors.coverage import LOAD, LOAD_DOWN
    from predictor.corpus.protocols import LOAD_ANCHOR_MAX_CONCURRENCY, LOAD_DOWN_ANCHOR_MIN_CONCURRENCY, select

    rows = list(read_corpus(NATIVE_SMALL).rows)
    selection = select(Protocol.LOAD_DOWN, rows)
    (fold,) = selection.folds
    assert fold.anchors and fold.targets
    assert all(r.concurrency >= LOAD_DOWN_ANCHOR_MIN_CONCURRENCY for r in fold.anchors)
    assert all(r.concurrency <= LOAD_ANCHOR_MAX_CONCURRENCY for r in fold.targets)
    scored = run_protocol(rows, "load-down")
    kinds = [k for result in scored.results for k in result.prediction.transfer_kinds]
    assert LOAD_DOWN in kinds and LOAD not in kinds
