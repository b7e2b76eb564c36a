"""Anchored mode (predictor/step/anchored.py, fit.py, simulate.py): an anchor calibrates the
physical step model and the calibrated model prices other layouts through the same physics
(METHOD §2-§4). Anchors here are measured by the model itself under a known calibration,
so what the fit must recover and what the transfer must give are known."""

from dataclasses import replace

import pytest

from levers.configuration import Configuration
from predictor.analytical import stall_ms
from predictor.anchors.anchor import HOST_PER_ENGINE, DecodeSweep, Provenance, Signature
from predictor.anchors.store import build_anchor
from predictor.cards.registry import load_card
from predictor.hardware import parse_cluster
from predictor.corpus.host import host_for
from predictor.step.anchored import HOST_STEP, anchor_config, anchored_model, calibrate, own_model
from predictor.step.calibration import PHYSICS, Calibration
from predictor.step.cost import Mode, StepModel
from predictor.step.simulate import SimulateStepModel

CARD = load_card("deepseek-r1")
MI355X = parse_cluster("mi355x")
BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
LENGTHS = (512, 1024, 2048, 4096, 8192)
TRUTH = Calibration(bandwidth=1.3, compute=1.6, moe=1.4, comm=1.5, launch_us=6.0, fixed_us=800.0, host_ms=20.0,
                    host_us_per_token=7.0, source="truth")


def _signature(tp=8, ep=1, dp=1, expert="fp8", spec="none", depth=0, pp=1) -> Signature:
    return Signature(accelerator="MI355X", engine="sglang", model="DeepSeek-R1", weight_dtype="fp8",
                     activation_dtype="fp8", expert_dtype=expert, kv_cache_dtype="bf16", tp=tp, ep=ep,
                     attention_dp=dp, pp=pp, spec_method=spec, spec_depth=depth)


def measured(sig: Signature, truth: Calibration = TRUTH, context: int = 1024):
    """An anchor of `sig` measured by the step model under `truth`."""
    config = anchor_config(build_anchor(sig, DecodeSweep(prompt_tokens=1, batch_sizes=(1,), itl_ms=(1.0,)),
                                        (1,), (1.0,), Provenance(source="test", timestamp="2026-01-01")))
    model = SimulateStepModel(CARD, MI355X, "sglang", config, calibration=truth)
    itl = tuple(model.decode_us(b, context) / 1000.0 for b in BATCHES)
    ttft = tuple((model.prefill_us(n) / 1000.0 + truth.host_ms + truth.host_us_per_token * n / 1000.0)
                 for n in LENGTHS)
    sweep = DecodeSweep(prompt_tokens=context, batch_sizes=BATCHES, itl_ms=itl)
    return build_anchor(sig, sweep, LENGTHS, ttft, Provenance(source="test", timestamp="2026-01-01"),
                        host_time_ms=truth.host_ms, host_us_per_prompt_token=truth.host_us_per_token)


def truth_model(config: Configuration) -> SimulateStepModel:
    return SimulateStepModel(CARD, MI355X, "sglang", config, calibration=TRUTH)


def target(**changes) -> Configuration:
    base = dict(tp=8, weight_dtype="fp8", activation_dtype="fp8", expert_dtype="fp8", kv_cache_dtype="bf16")
    return Configuration(**{**base, **changes})


def calibrated(anchor, config) -> SimulateStepModel:
    return anchored_model(anchor, CARD, MI355X, "sglang", config, PHYSICS)


def test_is_a_step_model_with_its_provenance():
    anchor = measured(_signature())
    step = calibrated(anchor, target())
    assert isinstance(step, StepModel) and step.mode is Mode.ANCHORED and step.anchor_id == anchor.id
    cal = step.calibration
    assert cal.source == f"anchor:{anchor.id}" and cal.prior == "physics"
    assert len(cal.points) == len(BATCHES) + len(LENGTHS) and cal.points[0].startswith("decode b=1 ")
    assert cal.residuals.num_decode_points == len(BATCHES) and cal.residuals.num_prefill_points == len(LENGTHS)
    with pytest.raises(AttributeError):
        cal.bandwidth = 2.0                       # a frozen record


def test_fit_reproduces_every_point_and_recovers_the_determined_factors():
    """Decode points determine the expert reads (bandwidth x MoE); a prefill sweep whose
    compute and per-token host time both grow with the prompt splits them only by the
    prior, so the fit is judged on the TTFT it predicts, inside and beyond the sweep."""
    anchor = measured(_signature())
    cal = calibrate(anchor, CARD, "sglang", PHYSICS)
    assert cal.residuals.decode_max_abs < 0.01 and cal.residuals.prefill_max_abs < 0.03
    assert cal.bandwidth * cal.moe == pytest.approx(TRUTH.bandwidth * TRUTH.moe, rel=0.05)
    step, truth = calibrated(anchor, target()), truth_model(target())
    assert step.decode_us(48, 1024) == pytest.approx(truth.decode_us(48, 1024), rel=0.01)
    for n in (3000, 16384):
        fitted = step.prefill_us(n) + (cal.host_ms + cal.host_us_per_token * n / 1000) * 1000
        real = truth.prefill_us(n) + (TRUTH.host_ms + TRUTH.host_us_per_token * n / 1000) * 1000
        assert fitted == pytest.approx(real, rel=0.1)


def test_factors_stay_physical_whatever_the_points():
    """No term below its roofline, no negative cost: even a sweep faster than the datasheet."""
    anchor = measured(_signature(), Calibration(bandwidth=0.3, compute=0.3, moe=1.0, launch_us=0.0))
    cal = calibrate(anchor, CARD, "sglang", PHYSICS)
    assert cal.bandwidth >= 0.8 and cal.compute >= 0.8 and cal.moe >= 1.0
    assert cal.launch_us >= 0 and cal.fixed_us >= 0 and 5.0 <= cal.host_us_per_token <= 11.0
    step = calibrated(anchor, target())
    assert all(v >= 0 for _, v in step.decode(64, 1024).terms)
    assert [step.decode_us(b, 1024) for b in BATCHES] == sorted(step.decode_us(b, 1024) for b in BATCHES)


def test_a_carried_sweep_is_not_read_as_the_layouts_measurement():
    """A corpus layout seen in one pool role borrows the other role's sweep from a
    neighbouring layout (`predictor.corpus.anchors`, step 7). Its fit and its measured-step
    corrections read only what the layout measured: a TP4 decode pool's steps carried to a
    TP1 prefill pool had fitted that pool's compute at 4.6x the prior and priced its
    prefill 2.4x slow (gpt-oss-120b on GB200, TensorRT-LLM: 3.3 s TTFT against 0.7 s)."""
    from predictor.step.anchored import decode_measurements

    anchor = measured(_signature())
    prefill_pool = anchor.model_copy(update={"flags": ("decode-sweep-carried", "split-pool")})
    fitted = calibrate(prefill_pool, CARD, "sglang", PHYSICS)
    assert fitted.points == tuple(f"prefill n={n}" for n in LENGTHS)
    assert fitted.residuals.num_decode_points == 0 and decode_measurements(prefill_pool) == []
    decode_pool = anchor.model_copy(update={"flags": ("prefill-sweep-carried", "split-pool")})
    assert calibrate(decode_pool, CARD, "sglang", PHYSICS).residuals.num_prefill_points == 0
    assert len(decode_measurements(decode_pool)) == len(BATCHES)


def test_the_shipped_gpt_oss_prefill_pool_fits_its_own_prefill():
    """The embedded anchor of the case above: its compute factor stays physical and an
    8,192-token prefill of eight 1k prompts takes well under the 71 ms the corpus's
    saturated runs bound it by (115k prompt tokens/s on that one GPU at 3,072 clients)."""
    from predictor.anchors.store import AnchorStore
    from predictor.hardware import load_gpu
    from predictor.step.anchored import own_model
    from predictor.step.priors import dtype_class, shipped_priors

    anchor = next(e.anchor for e in AnchorStore.default().entries()
                  if e.anchor.id.startswith("gb200-trtllm-gpt-oss-120b-bf16-tp1ep1dp1"))
    sig, card = anchor.signature, load_card("gpt-oss-120b")
    prior = shipped_priors().seed(sig.accelerator, sig.engine, dtype_class(sig.weight_dtype, sig.expert_dtype))
    fitted = calibrate(anchor, card, sig.engine, prior)
    assert fitted.compute < 1.5 and fitted.residuals.num_decode_points == 0
    assert own_model(anchor, card, sig.engine, load_gpu("gb200"), fitted).prefill_us(8192, 8) < 71_000


def test_width_transfer_keeps_the_fixed_cost_and_shards_the_weights():
    """Eq. 1 is what the physics does: TP4 -> TP8 shards weight reads and compute, keeps the
    per-kernel cost, adds the collectives; the calibrated TP4 anchor predicts TP8 as the
    truth model does."""
    anchor = measured(_signature(tp=4))
    narrow, wide = calibrated(anchor, target(tp=4)), calibrated(anchor, target(tp=8))
    at_one_narrow, at_one_wide = narrow.decode(1, 1024), wide.decode(1, 1024)
    assert at_one_wide.get("launch") == pytest.approx(at_one_narrow.get("launch"), rel=0.1)
    assert at_one_wide.get("moe") < 0.6 * at_one_narrow.get("moe")
    assert at_one_wide.get("communication") > at_one_narrow.get("communication")
    for batch in (1, 16, 128):
        assert wide.decode_us(batch, 1024) == pytest.approx(truth_model(target(tp=8)).decode_us(batch, 1024),
                                                            rel=0.05)


def test_staircase_pads_batch_33_to_40_under_graph_capture_only():
    step = calibrated(measured(_signature()), target())
    b33, b40 = step.decode(33, 1024), step.decode(40, 1024)
    assert b33.get("moe") == pytest.approx(b40.get("moe")) and b33.get("gemm") == pytest.approx(b40.get("gemm"))
    assert b33.get("attention") < b40.get("attention")            # padded requests attend nothing
    eager = calibrated(measured(_signature()), target(graph_capture="none"))
    assert eager.decode(33, 1024).get("moe") < eager.decode(40, 1024).get("moe")


def test_ep_imbalance_is_evaluated_at_the_target_width():
    """The anchor's EP1 imbalance is inside its fit; EP8 pays its own busiest rank."""
    anchor = measured(_signature(ep=1))
    ep1, ep8 = calibrated(anchor, target(ep=1)), calibrated(anchor, target(ep=8))
    assert ep8.decode(8, 1024).get("moe") > ep1.decode(8, 1024).get("moe") / 8 * 1.5
    assert ep8.decode_us(128, 1024) == pytest.approx(truth_model(target(ep=8)).decode_us(128, 1024), rel=0.05)


def test_another_precision_is_priced_by_the_physics_never_at_the_anchor_speed():
    anchor = measured(_signature(expert="fp8"))
    fp8, fp4 = calibrated(anchor, target(expert_dtype="fp8")), calibrated(anchor, target(expert_dtype="fp4"))
    assert fp4.decode(16, 1024).get("moe") < 0.8 * fp8.decode(16, 1024).get("moe")
    assert fp4.decode_us(16, 1024) != fp8.decode_us(16, 1024)


def test_fusions_change_the_anchored_step_relative_to_the_anchor():
    anchor = measured(_signature())
    plain, fused = calibrated(anchor, target()), calibrated(anchor, target(fusions=("add_rmsnorm", "moe_expert")))
    assert fused.decode_us(32, 1024) < plain.decode_us(32, 1024)


def test_pipeline_adds_eq4_and_context_grows_the_kv_reads():
    anchor = measured(_signature())
    step = calibrated(anchor, target())
    assert step.decode(64, 8192).get("attention") > 4 * step.decode(64, 1024).get("attention")
    piped = calibrated(anchor, target(tp=4, pp=2))
    assert piped.decode(64, 1024).get("pipeline") > 0 and step.decode(64, 1024).get("pipeline") == 0


def test_speculation_depth_is_physics_with_the_calibrated_factors():
    anchor = measured(_signature(spec="mtp", depth=1))
    one, three = calibrated(anchor, target(spec_method="mtp", spec_depth=1)), calibrated(
        anchor, target(spec_method="mtp", spec_depth=3))
    assert three.tokens_per_step > one.tokens_per_step > 1.0
    assert three.decode(16, 1024).get("speculation") > one.decode(16, 1024).get("speculation")
    assert three.decode_us(16, 1024) == pytest.approx(
        truth_model(target(spec_method="mtp", spec_depth=3)).decode_us(16, 1024), rel=0.05)


def test_the_same_anchor_and_prior_are_fitted_once():
    anchor = measured(_signature())
    assert calibrate(anchor, CARD, "sglang", PHYSICS) is calibrate(anchor, CARD, "sglang", PHYSICS)
    other = replace(PHYSICS, bandwidth=1.2)
    assert calibrate(anchor, CARD, "sglang", other) is not calibrate(anchor, CARD, "sglang", PHYSICS)


def test_an_engines_measured_host_time_lets_one_width_split_host_from_prefill():
    """At one prompt length, host time and prefill compute both add to the TTFT: the free
    fit splits them by its priors and carries the wrong split to other widths. An anchor
    flagged `host-per-engine` holds the engine's measured host time, so the prefill takes
    the rest and the TTFT transfers (METHOD §3.12: fit it per engine)."""
    sig = _signature(tp=2)
    config = anchor_config(build_anchor(sig, DecodeSweep(prompt_tokens=1, batch_sizes=(1,), itl_ms=(1.0,)),
                                        (1,), (1.0,), Provenance(source="test", timestamp="2026-01-01")))
    truth = SimulateStepModel(CARD, MI355X, "sglang", config, calibration=TRUTH)
    itl = tuple(truth.decode_us(b, 1024) / 1000.0 for b in BATCHES)
    ttft = (truth.prefill_us(1024) / 1000.0 + TRUTH.host_ms + TRUTH.host_us_per_token * 1.024,)
    free = build_anchor(sig, DecodeSweep(prompt_tokens=1024, batch_sizes=BATCHES, itl_ms=itl), (1024,), ttft,
                        Provenance(source="test", timestamp="2026-01-01"),
                        host_time_ms=TRUTH.host_ms, host_us_per_prompt_token=TRUTH.host_us_per_token)
    held = free.model_copy(update={"flags": (HOST_PER_ENGINE,)})

    def ttft_error(anchor, tp):
        cal = calibrate(anchor, CARD, "sglang", PHYSICS)
        model = calibrated(anchor, target(tp=tp))
        wide = truth_model(target(tp=tp))
        fitted = model.prefill_us(1024) / 1000 + cal.host_ms + cal.host_us_per_token * 1.024
        real = wide.prefill_us(1024) / 1000 + TRUTH.host_ms + TRUTH.host_us_per_token * 1.024
        return abs(fitted / real - 1)

    held_cal = calibrate(held, CARD, "sglang", PHYSICS)
    assert held_cal.host_ms == pytest.approx(TRUTH.host_ms, rel=0.05)
    assert ttft_error(held, 2) < 0.03 and ttft_error(held, 8) < 0.05
    assert ttft_error(free, 8) > 2 * ttft_error(held, 8)


def test_a_first_wave_stall_goes_with_the_anchors_kernel_set_not_its_widths():
    """A run's one-off start-up stall is its kernels' warm-up (`own_kernels`): the same
    kernels at another width or load keep it, another precision does not."""
    anchor = measured(_signature()).model_copy(update={"first_wave_stall_ms": 4000.0,
                                                       "first_wave_stall_per_client_ms": 3.0})
    for same in (target(), target(tp=4)):
        model = calibrated(anchor, same)
        assert (model.first_wave_stall_ms, model.first_wave_stall_per_client_ms) == (4000.0, 3.0)
        assert stall_ms(model, 64) == 4000.0 + 3.0 * 64
    for other in (target(expert_dtype="fp4"), target(kv_cache_dtype="fp8")):
        model = calibrated(anchor, other)
        assert (model.first_wave_stall_ms, model.first_wave_stall_per_client_ms) == (0.0, 0.0)
        assert stall_ms(model, 64) == 0.0


def test_host_time_beyond_the_engines_front_end_is_carried_with_the_decode_step():
    """One width's TTFTs cannot tell host time from engine work: off the anchor's widths,
    what its fit holds beyond its engine's front-end constant scales with the batch-1
    decode step (`carried_host`); on its own widths, and where the fit holds no more than
    the front end, the fitted host time stands."""
    front = host_for("sglang").base_ms
    anchor = measured(_signature(tp=2), replace(TRUTH, host_ms=200.0))
    fitted = calibrate(anchor, CARD, "sglang", PHYSICS).host_ms
    assert fitted > 100.0
    own = calibrated(anchor, target(tp=2))
    assert own.host_time_ms == fitted
    physics = own_model(anchor, CARD, "sglang", MI355X.gpu, calibrate(anchor, CARD, "sglang", PHYSICS))
    for tp in (4, 8):
        wide = calibrated(anchor, target(tp=tp))
        ratio = wide.decode(*HOST_STEP).total_us / physics.decode(*HOST_STEP).total_us
        assert 0.2 < ratio < 0.95
        assert wide.host_time_ms == pytest.approx(front + (fitted - front) * ratio, rel=1e-9)
    quick = measured(_signature(tp=2), replace(TRUTH, host_ms=0.0))
    assert calibrated(quick, target(tp=8)).host_time_ms == calibrate(quick, CARD, "sglang", PHYSICS).host_ms


@pytest.mark.parametrize("source, replaced", [("aiconfigurator", True), ("inferencex", True), ("harvest", False)])
def test_a_users_deployment_pays_its_engines_front_end_not_a_benchmarks_harness(source, replaced):
    """A public benchmark's anchor fits its harness's host time (AIConfigurator's TTFT
    floors): a question about the user's own deployment (``engine_host``) is priced with
    the engine's front end (`host_for`) at every width and flagged; a harvest (the user's
    own engine through the product's client) keeps what it fitted."""
    anchor = measured(_signature(tp=2), replace(TRUTH, host_ms=200.0))
    anchor = anchor.model_copy(update={"provenance": anchor.provenance.model_copy(update={"source": source})})
    fitted = calibrate(anchor, CARD, "sglang", PHYSICS).host_ms
    front = host_for("sglang")
    for tp in (2, 8):
        product = anchored_model(anchor, CARD, MI355X, "sglang", target(tp=tp), PHYSICS, engine_host=True)
        benchmark = calibrated(anchor, target(tp=tp))
        assert benchmark.host_time_ms > 100.0
        if replaced:
            assert product.host_time_ms == front.base_ms
            assert product.host_us_per_prompt_token == front.per_token_us
            assert any(flag.startswith(f"host time: the sglang front end's, not the {source} harness's")
                       for flag in product.flags)
            assert product.decode_us(8, 1024) == benchmark.decode_us(8, 1024)   # only the host time moves
        else:
            assert product.host_time_ms == benchmark.host_time_ms and fitted > 100.0


def test_a_corpus_anchors_reproduced_steps_move_its_own_layout_not_its_calibration():
    """A shipped corpus anchor's own layout prices each measured step at its reproduced
    value (`DecodePoint.reproduced_ms`); the same anchor without them (an anchor file
    written before the field) prices them at the steps it measured. The calibration,
    which carries to other layouts, is the same for both."""
    from predictor.anchors.store import AnchorStore

    anchor = next(a for a in AnchorStore.default().all() if a.id.startswith("h100-trtllm-llama-3.1-8b-bf16-tp8"))
    assert all(p.reproduced_ms is not None for p in anchor.decode_points)
    older = anchor.model_copy(update={"decode_points": tuple(p.model_copy(update={"reproduced_ms": None})
                                                             for p in anchor.decode_points)})
    card = load_card(anchor.signature.model)
    assert calibrate(anchor, card, "trtllm", PHYSICS) == calibrate(older, card, "trtllm", PHYSICS)
    for stored, expected in ((anchor, [p.reproduced_ms for p in anchor.decode_points]),
                             (older, [p.step_ms for p in anchor.decode_points])):
        model = anchored_model(stored, card, parse_cluster("h100x8"), "trtllm", anchor_config(stored), PHYSICS)
        priced = [model.decode_us(p.batch, float(p.context_tokens)) / 1000.0 for p in stored.decode_points]
        assert priced == pytest.approx(expected, rel=1e-3)
