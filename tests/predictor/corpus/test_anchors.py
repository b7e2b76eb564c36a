"""The corpus-to-anchor rule (predictor.corpus.anchors / points / assemble / refine): on rows
the step model itself priced under a known calibration, the rule reads them back, the fit
recovers what they determine, and a narrow layout predicts a wider one."""

import statistics
from pathlib import Path

import pytest

from levers.catalog import Engine
from predictor.anchors.anchor import HOST_PER_ENGINE, SPLIT_POOL
from predictor.corpus.host import HOST_BY_ENGINE
from predictor.corpus.anchors import CAPTURE_LADDER, context_gamma, decode_sweep, prefill_sweep, recorded_batch
from predictor.corpus.assemble import build_anchors
from predictor.corpus.read import read_corpus
from predictor.anchors.store import AnchorStore
from predictor.cards.registry import load_card
from predictor.corpus.refine import _stall_line, predict_row, refine, reproduce
from predictor.analytical import single_ttft_ms
from predictor.hardware import parse_cluster
from predictor.step.anchored import anchor_config, anchored_model, calibrate
from predictor.step.calibration import PHYSICS
from tests.fixtures.corpus_truth import TRUTH, truth_rows, truth_single_ttft_ms, write_native

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "corpus"


def test_recorded_batch_pads_to_the_capture_ladder_then_bins():
    assert [recorded_batch(b) for b in (1, 3, 5, 33, 256)] == [1, 4, 8, 40, 256]
    assert recorded_batch(300) == 304 and recorded_batch(1030) == 1024   # 16 bins per octave above 256
    assert CAPTURE_LADDER[:5] == (1, 2, 4, 8, 16)


def test_decode_sweep_keeps_measured_points_and_fits_the_context_slope():
    gamma = 2e-5

    def step(b, ctx):
        return 5.0 + 0.1 * b + gamma * b * ctx

    points = {(1536, b): [step(b, 1536)] for b in (4, 8, 16, 32, 64)}
    points.update({(5120, b): [step(b, 5120)] for b in (8, 32, 128)})
    points[(8704, 16)] = [step(16, 8704)]
    sweep = decode_sweep(points)
    assert sweep.prompt_tokens == 1536 and sweep.second_prompt_tokens == 8704       # primary, farthest
    assert sweep.batch_sizes == (4, 8, 16, 32, 64, 128)
    for b, value, second in zip(sweep.batch_sizes, sweep.itl_ms, sweep.second_itl_ms):
        assert value == pytest.approx(step(b, 1536), rel=1e-9)        # 128 carried from 5120 by the slope
        assert second == pytest.approx(step(b, 8704), rel=1e-9)
    by_ctx = {1536: {b: step(b, 1536) for b in (4, 16)}, 5120: {8: step(8, 5120)}}
    assert context_gamma(by_ctx, 1536) == pytest.approx(gamma, rel=1e-9)


def test_prefill_fit_keeps_f_and_recovers_the_curve():
    points = {n: 10.0 + 0.02 * n + 1e-6 * n * n for n in (1024, 4096, 8192)}
    sweep = prefill_sweep(points, 10.0)
    assert (sweep.fit_c1_ms, sweep.fit_c2_ms) == (pytest.approx(0.02), pytest.approx(1e-6))
    single = prefill_sweep({1024: 30.0}, 10.0)
    assert (single.fit_c1_ms, single.fit_c2_ms) == (pytest.approx(20.0 / 1024), 0.0)


def _built(tmp_path, widths=(2, 4)):
    corpus = read_corpus(write_native(tmp_path / "truth.csv", truth_rows(widths)))
    return build_anchors(list(corpus.rows))


def test_rule_builds_one_anchor_per_layout_with_every_point(tmp_path):
    build = _built(tmp_path)
    assert len(build.anchors) == 2 and not build.failures
    for anchor in build.anchors:
        group = build.groups[anchor.id]
        assert group.marginal_source[1024] == "itl"           # the per-token stream shows the interference
        assert len(anchor.decode_points) == len(group.decode_points) == 5
        assert all(p.context_tokens == 1536 for p in anchor.decode_points)     # isl + osl / 2
        assert not anchor.decode_sweep.is_full_sweep and anchor.decode_sweep.prompt_tokens == 1536
        assert anchor.signature.captured_sizes == CAPTURE_LADDER
        assert len(anchor.provenance.source_rows) == 5
        assert SPLIT_POOL not in anchor.flags                 # colocated rows


def test_refined_anchor_rows_are_reproduced(tmp_path):
    """Read through the model that priced them, the rows come back within 1% (TTFT 2%: the
    anchor holds vLLM's measured host time, 20.2 ms per 1k prompt, 0.9 ms off this truth's)."""
    build = refine(_built(tmp_path), rounds=2)
    checks = reproduce(build)
    assert len(checks) == 10 and all(c.anchored for c in checks)
    for check in checks:
        metrics, measured = check.prediction.metrics, check.row.measured
        assert metrics["tpot_ms_mean"] == pytest.approx(measured.tpot_ms_mean, rel=0.01)
        assert metrics["ttft_ms_mean"] == pytest.approx(measured.ttft_ms_mean, rel=0.02)
        assert metrics["output_throughput_per_gpu"] == pytest.approx(measured.output_throughput_per_gpu, rel=0.01)


def test_refined_calibration_recovers_what_the_rows_determine(tmp_path):
    """Decode at small batch is weight reads and kernels: the fit recovers the time the
    experts cost (bandwidth x MoE) and a concurrency-1 TTFT (host + prefill); what one
    prompt length cannot split (host time vs prefill compute, per-kernel vs per-step cost)
    it need not."""
    build = refine(_built(tmp_path, widths=(2,)), rounds=2)
    [anchor] = build.anchors
    card = load_card(anchor.signature.model)
    fitted = calibrate(anchor, card, "vllm", PHYSICS)
    assert fitted.bandwidth * fitted.moe == pytest.approx(TRUTH.bandwidth * TRUTH.moe, rel=0.1)
    model = anchored_model(anchor, card, parse_cluster("h100x2"), "vllm", anchor_config(anchor), PHYSICS)
    assert single_ttft_ms(model, 1024, 8192) == pytest.approx(truth_single_ttft_ms(2), rel=0.03)
    assert fitted.residuals.decode_max_abs < 0.02


def test_narrow_anchor_predicts_the_wider_layout(tmp_path):
    """Cross-width on a corpus the physics can express: TP2 rows predict TP4 within 2% on
    TPOT and throughput, 10% on TTFT (the compute factor is not determined at TP2's loads)."""
    tp2 = refine(_built(tmp_path, widths=(2,)), rounds=2)
    store = AnchorStore.from_anchors(list(tp2.anchors))
    wide = read_corpus(write_native(tmp_path / "tp4.csv", truth_rows((4,)))).rows
    for row in wide:
        metrics = predict_row(row, store).metrics
        assert metrics["tpot_ms_mean"] == pytest.approx(row.measured.tpot_ms_mean, rel=0.02)
        assert metrics["output_throughput_per_gpu"] == pytest.approx(row.measured.output_throughput_per_gpu, rel=0.02)
        assert metrics["ttft_ms_mean"] == pytest.approx(row.measured.ttft_ms_mean, rel=0.10)


def test_a_vllm_anchor_holds_its_engines_measured_host_time(tmp_path):
    """vLLM's host time was measured apart from the prefill over many layouts
    (`HOST_BY_ENGINE`); an anchor from per-token-streaming vLLM runs keeps it (flagged) and
    its prefill takes the rest of its TTFT, where one width's TTFTs alone cannot split them."""
    build = refine(_built(tmp_path, widths=(2,)), rounds=1)
    [anchor] = build.anchors
    assert HOST_PER_ENGINE in anchor.flags
    engine = HOST_BY_ENGINE[Engine.VLLM]
    assert anchor.host_time_ms == pytest.approx(engine.base_ms, rel=0.35)     # ENGINE_HOST_SIGMA = 0.3 (log)
    # the truth's host (15 ms + 6 us/token) is near the engine's: the TTFT is reproduced
    card = load_card(anchor.signature.model)
    model = anchored_model(anchor, card, parse_cluster("h100x2"), "vllm", anchor_config(anchor), PHYSICS)
    assert single_ttft_ms(model, 1024, 8192) == pytest.approx(truth_single_ttft_ms(2), rel=0.05)


def test_runs_without_a_per_token_stream_fit_their_own_host_time(tmp_path):
    rows = truth_rows((2,))
    for row in rows:
        row["itl_ms_median"] = ""             # no median ITL: the interference is not visible
    build = refine(build_anchors(list(read_corpus(write_native(tmp_path / "chunked.csv", rows)).rows)), rounds=1)
    assert all(HOST_PER_ENGINE not in anchor.flags for anchor in build.anchors)


def test_split_rows_feed_both_pool_layouts():
    corpus = read_corpus(FIXTURES / "inferencex_small.csv")
    build = build_anchors([r for r in corpus.rows if r.gpu == "GB200"])
    [anchor] = build.anchors                 # prefill and decode pools share the TP4/DP4 layout
    assert (anchor.signature.tp, anchor.signature.attention_dp) == (4, 4)
    assert SPLIT_POOL in anchor.flags        # measured in split pools only
    assert anchor.provenance.source_rows and all(i.startswith("inferencex_small.csv:")
                                                 for i in anchor.provenance.source_rows)


def test_illegal_layouts_fail_with_their_reason(tmp_path):
    rows = truth_rows()[:2]
    for row in rows:
        row["tp"] = 32                        # wider than one 8-GPU node without a cross-domain EP
    corpus = read_corpus(write_native(tmp_path / "wide.csv", rows))
    build = build_anchors(list(corpus.rows))
    assert not build.anchors
    assert {f.reason for f in build.failures} == {
        "layout TP32/EP1/DP1 cannot be anchored: tp=32 exceeds the 8-GPU scale-up domain "
        "(use pp, or an EP that spans domains with attention inside one)"}


def test_the_first_wave_stall_is_read_as_a_line_over_the_runs_clients():
    """The TTFT skew a fixed-count run shows beyond the modelled first wave grows with its
    clients on some stacks and is one constant on others (`refine._stall_line`): a robust
    line with a slope of at least 0, through the origin when its intercept would be < 0,
    kept only where it fits the shifts better than their median by more than one more
    parameter buys."""
    clients = [4, 8, 16, 32, 64]
    assert _stall_line(clients, [100 + 3 * c for c in clients]) == pytest.approx((100.0, 3.0))
    growing = [100 + 3 * c + noise for c, noise in zip(clients, (5, -4, 6, -3, 2))]
    base, slope = _stall_line(clients, growing)
    assert slope == pytest.approx(3.0, rel=0.1) and base == pytest.approx(100.0, abs=15.0)
    flat = [2500.0, 2300.0, 2600.0, 2400.0, 2550.0]
    assert _stall_line(clients, flat) == (2500.0, 0.0)
    flat_with_outlier = [200.0, 210.0, 190.0, 205.0, 5000.0]
    assert _stall_line(clients, flat_with_outlier) == (205.0, 0.0)
    assert _stall_line(clients, [400.0, 380.0, 390.0, 200.0, 100.0]) == pytest.approx((380.0, 0.0))
    base, slope = _stall_line(clients, [5 * c - 20 for c in clients])
    assert base == 0.0 and slope == pytest.approx(statistics.median((5 * c - 20) / c for c in clients))
    assert _stall_line([16, 16], [200.0, 300.0]) == pytest.approx((250.0, 0.0))


def test_settled_own_steps_hold_the_anchors_own_rows_and_leave_its_calibration(tmp_path):
    """Rows the physics cannot hold at one calibration (TPOT up to 20% above the truth's,
    growing with clients): the first reading reproduces them to -3%; settled, the anchor's
    own layout holds each within 0.6%, and the calibration is still the one fitted to the
    first reading (it is what carries to other widths)."""
    rows = truth_rows((2,))
    for row in rows:
        slower = 1 + 0.2 * row["concurrency"] / 64
        row["tpot_ms"] *= slower
        row["itl_ms"] *= slower
        row["output_throughput_per_gpu"] /= slower
    corpus = list(read_corpus(write_native(tmp_path / "slower.csv", rows)).rows)
    first = refine(build_anchors(corpus), rounds=1, own_step_passes=0)
    settled = refine(build_anchors(corpus), rounds=1)

    def worst(build):
        return max(abs(c.prediction.metrics["tpot_ms_mean"] / c.row.measured.tpot_ms_mean - 1) for c in reproduce(build))

    assert worst(first) > 0.02 and worst(settled) < 0.006
    [before], [after] = first.anchors, settled.anchors
    assert all(p.reproduced_ms is None for p in before.decode_points)
    assert all(p.reproduced_ms is not None for p in after.decode_points)
    assert [p.step_ms for p in after.decode_points] == [p.step_ms for p in before.decode_points]
    card = load_card(after.signature.model)
    assert calibrate(after, card, "vllm", PHYSICS) == calibrate(before, card, "vllm", PHYSICS)
