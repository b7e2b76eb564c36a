"""The transfer laws (predictor/step/transfer.py), each on a worked number (METHOD §3.1-§3.7)."""

import math

import pytest

from predictor.step import transfer

# --- METHOD §3.1, Eq. 1 ----------------------------------------------------------------

def test_eq1_keeps_fixed_cost_and_halving_the_step_is_wrong_by_the_sharded_fixed_cost():
    # TP4 -> TP8: f = s(1) = 10 ms, s(64) = 30 ms; default rho = 4/8.
    steps = [10.0, 14.0, 30.0]
    fixed = transfer.fixed_step(steps)
    rho = transfer.default_rho(4, 8)
    carried = transfer.carry_decode_width(30.0, fixed, rho)
    assert fixed == 10.0 and rho == 0.5
    assert carried == pytest.approx(20.0, abs=1e-12)          # 10 + 20 * 0.5
    halved = 30.0 * 4 / 8
    # Halving the whole step shards the fixed cost: low by f * (1 - w/w') = 5 ms (25%).
    assert carried - halved == pytest.approx(fixed * (1 - rho), abs=1e-12)
    assert (carried - halved) / carried == pytest.approx(0.25, abs=1e-12)
    # Batch 1 keeps its whole step: the fixed cost does not shrink.
    assert transfer.carry_decode_width(10.0, fixed, rho) == 10.0


def test_eq1_measured_rho_from_a_half_width_sibling():
    # Anchor TP8 and sibling TP4 on one stack (ms): shrink 3/4 at b=8, 12/20 at b=64.
    batches = [1, 8, 64]
    tp8, tp4 = [9.0, 12.0, 21.0], [10.0, 14.0, 30.0]
    points = transfer.shrink_points(batches, tp8, batches, tp4)
    assert [x for x, _ in points] == pytest.approx([math.log(8), math.log(64)])
    assert [y for _, y in points] == pytest.approx([0.75, 0.6])
    one = transfer.tp_doublings(8, 16)
    assert transfer.measured_rho(8, points, one) == pytest.approx(0.75)
    # Interpolated in log b: b = sqrt(8 * 64) sits half-way.
    assert transfer.measured_rho(math.sqrt(8 * 64), points, one) == pytest.approx(0.675)
    # Held at the end values outside, raised to the number of doublings (TP8 -> TP32).
    assert transfer.measured_rho(256, points, transfer.tp_doublings(8, 32)) == pytest.approx(0.36)
    assert transfer.measured_rho(2, points, 2.0) == pytest.approx(0.5625)


def test_eq1_shrink_is_clamped_and_small_excess_ignored():
    batches = [1, 4, 16, 64]
    anchor = [10.0, 10.5, 16.0, 13.0]   # b=4: excess 0.5 ms < 1 ms: skipped
    half = [10.0, 10.8, 14.0, 30.0]     # b=16: 6/4 -> clamped 1.0; b=64: 3/20 -> 0.5
    points = transfer.shrink_points(batches, anchor, batches, half)
    assert [round(y, 6) for _, y in points] == [1.0, 0.5]


def test_eq1_refinement_splits_fixed_cost_into_weight_read_and_true_fixed():
    # f = 10 ms of which 6 ms modelled weight reads: at twice the width they take 3 ms.
    carried = transfer.carry_decode_width_split(30.0, 10.0, 0.5, weight_read=6.0, width_ratio=0.5)
    assert carried == pytest.approx(4.0 + 3.0 + 10.0)
    # The weight-read share is clamped to the fixed cost.
    assert transfer.carry_decode_width_split(10.0, 10.0, 0.5, 25.0, 0.5) == pytest.approx(5.0)


# --- METHOD §3.2 -----------------------------------------------------------------------

def test_prefill_fit_recovers_quadratic_and_carries_across_width():
    lengths = [512, 1024, 2048, 4096, 8192]
    ttfts = [20 + 0.05 * n + 1e-6 * n * n for n in lengths]
    fixed, c1, c2 = transfer.fit_prefill(lengths, ttfts)
    assert (fixed, c1, c2) == pytest.approx((20.0, 0.05, 1e-6), rel=1e-6)
    # Across width: keep F, scale c1, c2 by w/w' (TP4 -> TP8).
    assert transfer.carry_prefill((fixed, c1, c2), 4, 8) == pytest.approx((20.0, 0.025, 5e-7), rel=1e-6)


def test_prefill_fit_keeps_c2_non_negative_and_falls_back_to_a_line():
    lengths = [1000, 2000, 3000, 4000]
    concave = [10 + 0.1 * n - 2e-6 * n * n for n in lengths]
    fixed, c1, c2 = transfer.fit_prefill(lengths, concave)
    assert c2 == 0.0 and fixed >= 0 and c1 > 0
    # Two points: a line through them.
    assert transfer.fit_prefill([1000, 3000], [30.0, 70.0]) == pytest.approx((10.0, 0.02, 0.0))
    # One point: billed per token.
    assert transfer.fit_prefill([2000], [50.0]) == pytest.approx((0.0, 0.025, 0.0))


def test_packed_prefill_bills_attention_per_sequence():
    fit = (20.0, 0.05, 1e-6)
    single = transfer.prefill_time(fit, 2048)
    packed = transfer.prefill_time(fit, 2048, num_seqs=2)
    assert single - packed == pytest.approx(1e-6 * (2048 ** 2 - 2 * 1024 ** 2))
    # A chunk after 1000 cached tokens pays (1000 + 500)^2 - 1000^2 of attention.
    assert transfer.prefill_time(fit, 500, 1, 1000) == pytest.approx(20 + 25 + 1e-6 * (1500 ** 2 - 1000 ** 2))


# --- METHOD §3.3 -----------------------------------------------------------------------

CAPTURED = [1, 2, 4, 8, 16, 24, 32, 40, 48]
STEPS = {b: 10.0 + 0.25 * b for b in CAPTURED}


def _step(batch, mode, share=None):
    return transfer.staircase_step(batch, CAPTURED, [STEPS[b] for b in CAPTURED], CAPTURED, mode, share)


def test_staircase_pads_33_to_the_next_captured_size():
    assert transfer.padded_batch(33, CAPTURED) == 40
    assert _step(33, "full") == pytest.approx(STEPS[40])        # never between 32 and 40
    assert _step(40, "full") == pytest.approx(STEPS[40])
    assert _step(3, "full") == pytest.approx(STEPS[4])


def test_eager_and_above_largest_captured_are_linear():
    assert _step(33, "none") == pytest.approx(STEPS[32] + (STEPS[40] - STEPS[32]) / 8)
    # Above the largest captured size: not padded, extrapolated from the last two points.
    assert transfer.padded_batch(56, CAPTURED) is None
    assert _step(56, "full") == pytest.approx(STEPS[48] + (STEPS[48] - STEPS[40]))


def test_piecewise_capture_exempts_only_attention():
    half = lambda b: 0.5  # noqa: E731  (attention half of the step)
    linear_33 = STEPS[32] + (STEPS[40] - STEPS[32]) / 8
    assert _step(33, "piecewise", half) == pytest.approx(0.5 * STEPS[40] + 0.5 * linear_33)
    assert _step(33, "full") > _step(33, "piecewise", half) > _step(33, "none")


# --- METHOD §3.4 -----------------------------------------------------------------------

def test_context_slope_from_two_prompt_lengths():
    slopes = transfer.context_slopes([10.0, 20.0], [11.0, 27.0], 1024, 8192)
    assert slopes == pytest.approx((1 / 7168, 7 / 7168))
    # Batch 2 at a 4096-token context: 3 ms above its 1024-token step.
    assert transfer.context_term(slopes[1], 4096, 1024) == pytest.approx(3.0)
    assert transfer.context_slopes([10.0], [9.0], 1024, 8192) == (0.0,)   # noise clamped


# --- METHOD §3.5 -----------------------------------------------------------------------

def test_ep_term_scales_only_the_expert_share_by_the_factor_ratio():
    # 20 ms step, experts 40% of it, factor 1.3 at the target's EP vs 1.0 at the anchor's.
    assert transfer.ep_imbalance_term(20.0, 0.4, 1.3, 1.0) == pytest.approx(2.4)
    assert transfer.ep_imbalance_term(20.0, 0.4, 1.3, 1.3) == 0.0   # both widths evaluated


# --- METHOD §3.6, Eq. 4 ----------------------------------------------------------------

def test_eq4_adds_p_hops_and_host_time():
    # p = 2, C = 64: micro-batch 32; t_p2p = 10 us, o = 970 us, H(32) = 330 + 6.3 * 32 us.
    assert transfer.micro_batch(64, 2) == 32
    hops = transfer.pipeline_hops_us(2, 1, 10.0, 50.0)
    overhead = transfer.pipeline_overhead_us(64, 2, hops, 970.0)
    assert overhead == pytest.approx(2 * (10 + 970) + 2 * (330 + 6.3 * 32))
    # One client over four stages: one micro-batch in flight adds its host time once.
    assert transfer.pipeline_overhead_us(1, 4, 4 * 10.0, 970.0) == pytest.approx(4 * 980 + 336.3)
    # Over two nodes: the forward boundary and the token return cross the NIC.
    assert transfer.pipeline_hops_us(4, 2, 10.0, 50.0) == pytest.approx(2 * 10 + 2 * 50)
    assert transfer.pipeline_overhead_us(64, 1, 0.0, 970.0) == 0.0


# --- METHOD §3.7 -----------------------------------------------------------------------

def test_communication_delta_is_target_minus_anchor():
    # The anchor's TP4 all-reduces cost 1.2 ms of its step; at TP8 they cost 1.5 ms.
    assert transfer.communication_delta(1200.0, 1500.0) == pytest.approx(300.0)
    assert transfer.communication_delta(1500.0, 1500.0) == 0.0
