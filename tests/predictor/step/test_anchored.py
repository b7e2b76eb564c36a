"""Anchored mode (predictor/step/anchored.py): the transfer laws composed into a step model,
checked against hand-computed numbers (METHOD §3.1-§3.7)."""

from dataclasses import replace

import pytest

from levers.configuration import Configuration
from predictor.anchors.anchor import DecodeSweep, PackedProbe, Provenance, Signature
from predictor.anchors.store import build_anchor
from predictor.cards.registry import load_card
from predictor.hardware import parse_cluster
from predictor.step import transfer
from predictor.step.anchored import AnchoredStepModel, FixedCost, weight_read_us
from predictor.step.comm_cost import build_comm_model
from predictor.step.cost import Mode, StepCost, StepModel
from predictor.step.imbalance import imbalance_ratio

CARD = load_card("deepseek-r1")
MI355X = parse_cluster("mi355x")
BATCHES = (1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64)
ITL_MS = {b: 20.0 + 0.25 * b for b in BATCHES}
MOE_SHARE = 0.4


class StandIn:
    """Simulate-mode breakdown stand-in: experts 40%, attention 25% of every step."""

    def __init__(self, *args):
        pass

    def decode(self, batch, context_tokens):
        return StepCost.of(gemm=35.0, attention=25.0, moe=40.0)

    def prefill(self, num_tokens, num_seqs=1, context_tokens=0.0):
        return StepCost.of(gemm=35.0, attention=25.0, moe=40.0)


def make_anchor(tp=8, ep=1, dp=1, second=False, spec="none", depth=0, host_ms=0.0, **extra):
    sig = Signature(accelerator="MI355X", engine="sglang", model="DeepSeek-R1", weight_dtype="fp8",
                    activation_dtype="fp8", expert_dtype="fp8", kv_cache_dtype="bf16", tp=tp, ep=ep,
                    attention_dp=dp, captured_sizes=BATCHES, spec_method=spec, spec_depth=depth)
    sweep = DecodeSweep(prompt_tokens=1024, batch_sizes=BATCHES, itl_ms=tuple(ITL_MS[b] for b in BATCHES),
                        second_prompt_tokens=8192 if second else None,
                        second_itl_ms=tuple(ITL_MS[b] + 0.01 * b for b in BATCHES) if second else None)
    lengths = (512, 1024, 2048, 4096, 8192)
    return build_anchor(sig, sweep, lengths, tuple(30.0 + 0.05 * n + 1e-6 * n * n for n in lengths),
                        Provenance(source="test", timestamp="2025-06-01"), host_time_ms=host_ms, **extra)


def model(anchor=None, fixed_cost=FixedCost.KEPT, **changes):
    config = Configuration(**{"tp": 8, **changes})
    return AnchoredStepModel(anchor or make_anchor(), CARD, MI355X, "sglang", config, breakdown_factory=StandIn,
                             fixed_cost=fixed_cost)


def test_is_a_step_model_in_anchored_mode():
    step = model()
    assert isinstance(step, StepModel)
    assert step.mode is Mode.ANCHORED and step.anchor_id == make_anchor().id and step.tokens_per_step == 1.0


def test_same_layout_reproduces_the_sweep():
    step = model()
    for batch in BATCHES:
        assert step.decode_us(batch, 1024) == pytest.approx(ITL_MS[batch] * 1000, abs=1e-6)
    assert step.decode(64, 1024).total_us == pytest.approx(step.decode_us(64, 1024))
    assert step.flags == ()


def test_staircase_pads_batch_33_to_40():
    step = model()
    assert step.decode_us(33, 1024) == pytest.approx(ITL_MS[40] * 1000)
    eager = model(anchor=make_anchor(), graph_capture="none")
    assert eager.decode_us(33, 1024) == pytest.approx(1000 * (ITL_MS[32] + (ITL_MS[40] - ITL_MS[32]) / 8))


def test_eq1_across_tp_keeps_the_fixed_cost():
    narrow = make_anchor(tp=4)
    step = model(anchor=narrow)   # TP4 anchor -> TP8 target, default rho 1/2, f kept whole
    fixed = ITL_MS[1] * 1000
    excess = (ITL_MS[64] - ITL_MS[1]) * 1000
    terms = step.decode(64, 1024)
    assert terms.get("fixed") == pytest.approx(fixed)
    assert terms.get("excess") == pytest.approx(excess / 2)
    comm = build_comm_model(CARD, MI355X, Configuration(tp=8)).step_us(64, 64) \
        - build_comm_model(CARD, MI355X, Configuration(tp=4)).step_us(64, 64)
    assert terms.get("communication_delta") == pytest.approx(comm)
    assert terms.total_us == pytest.approx(fixed + excess / 2 + comm)


def test_measured_rho_from_sibling_and_weight_read_refinement():
    sig_sweep = make_anchor(tp=4)
    slower = sig_sweep.model_copy(update={"decode_sweep": sig_sweep.decode_sweep.model_copy(
        update={"itl_ms": tuple(20.0 + 0.4 * b for b in BATCHES)})})
    anchor = make_anchor(tp=8)
    config = Configuration(tp=8)
    measured = AnchoredStepModel(anchor, CARD, MI355X, "sglang", config, sibling=slower, breakdown_factory=StandIn,
                                 fixed_cost=FixedCost.KEPT)
    # Same width: zero doublings, rho = 1 whatever was measured.
    assert measured.decode_us(64, 1024) == pytest.approx(ITL_MS[64] * 1000)
    wider = replace(config, tp=16)
    # The shrink per doubling is 0.25 / 0.4 = 0.625 at every batch (TP4 -> TP8).
    sixteen = AnchoredStepModel(anchor, CARD, MI355X, "sglang", wider, sibling=slower, breakdown_factory=StandIn)
    assert sixteen.decode(64, 1024).get("excess") == pytest.approx(0.625 * 0.25 * 63 * 1000)
    split = AnchoredStepModel(make_anchor(tp=4), CARD, MI355X, "sglang", config,
                              fixed_cost=FixedCost.SPLIT_WEIGHT_READ, breakdown_factory=StandIn)
    read = min(weight_read_us(CARD, MI355X, Configuration(tp=4)), ITL_MS[1] * 1000)
    assert read > 0
    assert split.decode(1, 1024).get("fixed") == pytest.approx(ITL_MS[1] * 1000 - read / 2)


def test_ep8_costs_more_than_ep1_at_small_batch():
    ep1 = model(ep=1)
    ep8 = model(ep=8)
    ratio = imbalance_ratio(CARD, Configuration(tp=8, ep=8), Configuration(tp=8, ep=1), 4, "decode")[1]
    assert ratio > 1.2
    term = ep8.decode(4, 1024).get("ep_imbalance")
    assert term == pytest.approx(ITL_MS[4] * 1000 * MOE_SHARE * (ratio - 1))
    assert ep8.decode_us(4, 1024) > ep1.decode_us(4, 1024) + 0.9 * term
    assert ep1.decode(4, 1024).get("ep_imbalance") == 0.0


def test_pipeline_adds_eq4_on_the_micro_batch():
    flat, piped = model(), model(pp=2)
    gpu = MI355X.gpu
    hops = build_comm_model(CARD, MI355X, Configuration(tp=8, pp=2)).hops_us(32)
    expected = flat.decode_us(32, 1024) + transfer.pipeline_overhead_us(64, 2, hops, gpu.pp_hop_overhead_us)
    assert piped.decode_us(64, 1024) == pytest.approx(expected)
    assert piped.decode(64, 1024).get("pipeline") == pytest.approx(2 * 970 + hops + 2 * (330 + 6.3 * 32))


def test_context_slope_or_mismatch_flag():
    sloped = model(anchor=make_anchor(second=True))
    slope_ms = 0.01 * 16 / (8192 - 1024)
    assert sloped.decode_us(16, 4096) == pytest.approx((ITL_MS[16] + slope_ms * 3072) * 1000)
    assert "prompt-length-mismatch" not in sloped.flags
    flat = model()
    assert flat.decode_us(16, 1536) == pytest.approx(ITL_MS[16] * 1000)   # within 1.5x: not flagged
    assert flat.flags == ()
    flat.decode_us(16, 4096)
    assert "prompt-length-mismatch" in flat.flags
    flat.decode_us(128, 1024)
    assert "batch-outside-sweep" in flat.flags


def test_prefill_mixed_and_host_time():
    step = model(anchor=make_anchor(host_ms=10.0))
    fixed_us = (30.0 - 10.0) * 1000                      # host time taken out of F
    n = 2048
    expected = fixed_us + 0.05 * n * 1000 + 1e-6 * n * n * 1000
    assert step.prefill_us(n) == pytest.approx(expected, rel=1e-6)
    assert step.prefill(n).total_us == pytest.approx(step.prefill_us(n))
    assert step.host_time_ms == 10.0
    mixed = step.mixed_us(n, 32, 1024)
    assert mixed == pytest.approx(step.decode_us(32, 1024) + expected - fixed_us, rel=1e-6)
    assert step.mixed(n, 32, 1024).total_us == pytest.approx(mixed)
    assert step.mixed_us(n, 0, 0.0) == pytest.approx(step.prefill_us(n))
    # Across width: F kept, c1 and c2 halved (METHOD §3.2).
    wide = model(anchor=make_anchor(tp=4, host_ms=10.0))
    halved = fixed_us + (expected - fixed_us) / 2
    assert wide.prefill(n).total_us - wide.prefill(n).get("communication_delta") == pytest.approx(halved, rel=1e-6)


def test_packed_prefill_beyond_the_probe_is_flagged():
    probe = PackedProbe(num_seqs=4, seq_tokens=1024, step_ms=250.0)
    step = model(anchor=make_anchor(packed_probe=probe))
    step.prefill_us(4096, 4)
    assert "packing-length" not in step.flags
    step.prefill_us(8192, 8)
    assert "packing-length" in step.flags


def test_speculation_needs_the_same_method():
    mismatch = model(spec_method="mtp", spec_depth=2)
    assert mismatch.tokens_per_step == 1.0 and "spec-mismatch" in mismatch.flags
    harvested = make_anchor(spec="mtp", depth=2)
    without = model(anchor=harvested)
    assert without.tokens_per_step == 1.0 and "spec-mismatch" in without.flags
    same = AnchoredStepModel(harvested, CARD, MI355X, "sglang", Configuration(tp=8, spec_method="mtp", spec_depth=2),
                             breakdown_factory=StandIn, acceptance=lambda card, method, depth: 1.0 + 0.7 * depth)
    assert same.tokens_per_step == pytest.approx(2.4) and "spec-mismatch" not in same.flags
    assert same.decode_us(8, 1024) == pytest.approx(ITL_MS[8] * 1000)
    deeper = AnchoredStepModel(harvested, CARD, MI355X, "sglang", Configuration(tp=8, spec_method="mtp", spec_depth=5),
                               breakdown_factory=StandIn, acceptance=lambda card, method, depth: 1.0 + 0.7 * depth)
    # Depth 5 verifies 6 tokens per request, the anchor 3: batch 8 runs like batch 16.
    assert deeper.decode(8, 1024).get("speculation") == pytest.approx((ITL_MS[16] - ITL_MS[8]) * 1000)


def test_ep_share_from_the_real_simulate_breakdown():
    from predictor.step.simulate import SimulateStepModel, moe_share

    anchor = make_anchor()
    ep1 = AnchoredStepModel(anchor, CARD, MI355X, "sglang", Configuration(tp=8))
    ep8 = AnchoredStepModel(anchor, CARD, MI355X, "sglang", Configuration(tp=8, ep=8))
    share = moe_share(SimulateStepModel(CARD, MI355X, "sglang", Configuration(tp=8, ep=8)).decode(4, 1024))
    ratio = imbalance_ratio(CARD, Configuration(tp=8, ep=8), Configuration(tp=8), 4, "decode")[1]
    assert 0.0 < share < 1.0
    assert ep8.decode(4, 1024).get("ep_imbalance") == pytest.approx(ITL_MS[4] * 1000 * share * (ratio - 1))
    assert ep8.decode_us(4, 1024) > ep1.decode_us(4, 1024)


def test_pipelined_anchor_is_read_as_is_at_its_own_width_and_normalised_otherwise():
    piped = make_anchor().model_copy(update={"signature": make_anchor().signature.model_copy(update={"pp": 2})})
    same = model(anchor=piped, pp=2)
    assert same.decode_us(64, 1024) == pytest.approx(ITL_MS[64] * 1000)        # Eq. 4 already inside
    assert same.decode(64, 1024).get("pipeline") == 0.0
    assert same.prefill(2048).get("pipeline") == 0.0
    flat = model(anchor=piped, pp=1)
    gpu = MI355X.gpu
    hops = build_comm_model(CARD, MI355X, Configuration(tp=8, pp=2)).hops_us(32)
    overhead = transfer.pipeline_overhead_us(64, 2, hops, gpu.pp_hop_overhead_us)
    # Client batch 64 at PP2 ran micro-batches of 32: the PP1 target at batch 32 pays
    # the measured step less Eq. 4's overhead.
    assert flat.decode_us(32, 1024) == pytest.approx(ITL_MS[64] * 1000 - overhead)
    assert flat.prefill(2048).get("pipeline") < 0.0


def test_piecewise_capture_softens_the_staircase_by_the_attention_share():
    step = model(graph_capture="piecewise")
    linear_33 = ITL_MS[32] + (ITL_MS[40] - ITL_MS[32]) / 8
    assert step.decode_us(33, 1024) == pytest.approx(1000 * (0.75 * ITL_MS[40] + 0.25 * linear_33))


def test_the_default_eq1_variant_is_the_one_that_scored_better():
    """METHOD §3.1 asks to keep the variant that scores better on TP ladders: splitting
    f into the weight read (sharded) and the true fixed cost (kept) did (docstring of
    `predictor.step.anchored.DEFAULT_FIXED_COST` has the figures)."""
    import inspect

    default = inspect.signature(AnchoredStepModel).parameters["fixed_cost"].default
    assert default is FixedCost.SPLIT_WEIGHT_READ


def test_context_slope_above_the_sweep_grows_with_the_batch_not_along_the_last_segment():
    """METHOD §3.4: above the largest measured batch the slope is the last one scaled by
    batch / largest, so a noisy last segment cannot swing the step."""
    base = make_anchor()
    sweep = base.decode_sweep
    second = tuple(t + 0.001 * b * 1000 for b, t in zip(BATCHES, sweep.itl_ms))   # +1 us/token/request
    noisy = list(second)
    noisy[-2] = sweep.itl_ms[-2] + 0.0001   # the next-to-last slope collapses to ~0
    anchor = base.model_copy(update={"decode_sweep": sweep.model_copy(
        update={"second_prompt_tokens": sweep.prompt_tokens + 1000, "second_itl_ms": tuple(noisy)})})
    step = model(anchor=anchor, graph_capture="none")
    largest = BATCHES[-1]
    last_slope_us = (noisy[-1] - sweep.itl_ms[-1]) * 1000 / 1000      # us per token of context
    above = 2 * largest
    # One token of context less at twice the largest batch: the slope doubles, no more.
    delta = step.decode_us(above, sweep.prompt_tokens) - step.decode_us(above, sweep.prompt_tokens - 1)
    assert delta == pytest.approx(last_slope_us * above / largest, rel=1e-6)
