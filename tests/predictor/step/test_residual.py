"""An anchor's measured decode steps and prefills between the calibrated physics (predictor/step/
residual.py, anchored.py): exact at the measured steps of its own layout, interpolated
between them, fading to the calibrated physics outside them, never on another layout."""

import math

import pytest

from predictor.anchors.anchor import DecodeSweep, Provenance
from predictor.anchors.store import build_anchor
from predictor.step.anchored import anchored_model, calibrate, own_layout
from predictor.step.calibration import PHYSICS
from predictor.step.residual import FADE_OCTAVES, MAX_LOG_RESIDUAL, MEASURED_STEPS, DecodeResidual, PrefillResidual
from predictor.step.simulate import SimulateStepModel
from tests.predictor.step.test_anchored import CARD, MI355X, _signature, measured, target


def test_interpolates_in_batch_and_fades_outside():
    table = DecodeResidual.from_points([(4, 1000.0, 0.1), (16, 1000.0, -0.1)])
    assert math.log(table.factor(4, 1000.0)) == pytest.approx(0.1)
    assert math.log(table.factor(10, 1000.0)) == pytest.approx(0.0)       # halfway in batch
    below = 4 / 2 ** (FADE_OCTAVES / 2)                                   # halfway through the fade
    assert math.log(table.factor(below, 1000.0)) == pytest.approx(0.05)
    assert table.factor(16 * 2 ** FADE_OCTAVES, 1000.0) == 1.0            # past it: the physics
    assert table.factor(16, 1000.0 * 2 ** FADE_OCTAVES) == 1.0


def test_interpolates_between_contexts_and_bounds_a_residual():
    table = DecodeResidual.from_points([(8, 1000.0, 0.2), (8, 4000.0, 0.0), (8, 1000.0, 0.0), (4, 1000.0, 3.0)])
    assert math.log(table.factor(8, 1000.0)) == pytest.approx(0.1)        # repeated points average
    assert math.log(table.factor(8, 2500.0)) == pytest.approx(0.05)       # halfway in context
    assert math.log(table.factor(4, 1000.0)) == pytest.approx(MAX_LOG_RESIDUAL)
    assert DecodeResidual.from_points([]) is None


def _noisy_anchor():
    """An anchor whose steps carry a ladder shape no calibration has (+4% at 8, -3% at 64)."""
    clean = measured(_signature())
    bumps = {8: 1.04, 64: 0.97}
    sweep = clean.decode_sweep
    itl = tuple(step * bumps.get(b, 1.0) for b, step in zip(sweep.batch_sizes, sweep.itl_ms))
    prefill = clean.prefill_sweep
    return build_anchor(clean.signature, DecodeSweep(prompt_tokens=sweep.prompt_tokens, batch_sizes=sweep.batch_sizes,
                                                     itl_ms=itl),
                        prefill.prompt_tokens, prefill.ttft_ms, Provenance(source="test", timestamp="2026-01-01"),
                        host_time_ms=clean.host_time_ms, host_us_per_prompt_token=clean.host_us_per_prompt_token)


def test_own_layout_reproduces_its_measured_steps_and_other_layouts_take_the_physics():
    anchor = _noisy_anchor()
    own = anchored_model(anchor, CARD, MI355X, "sglang", target(), PHYSICS)
    bare = SimulateStepModel(CARD, MI355X, "sglang", target(), calibration=calibrate(anchor, CARD, "sglang", PHYSICS))
    sweep = anchor.decode_sweep
    for batch, step_ms in zip(sweep.batch_sizes, sweep.itl_ms):
        assert own.decode_us(batch, sweep.prompt_tokens) == pytest.approx(step_ms * 1000, rel=1e-6)
    assert abs(bare.decode_us(8, sweep.prompt_tokens) / (sweep.itl_ms[3] * 1000) - 1) > 0.02
    # Another width, or the residual switched off (an anchor's points being read): the physics.
    wide = anchored_model(anchor, CARD, MI355X, "sglang", target(tp=4), PHYSICS)
    assert wide.decode_residual is None and not own_layout(anchor, target(tp=4))
    assert MEASURED_STEPS in own.flags and MEASURED_STEPS not in wide.flags
    off = anchored_model(anchor, CARD, MI355X, "sglang", target(), PHYSICS, measured_steps=False)
    assert off.decode_us(8, sweep.prompt_tokens) == pytest.approx(bare.decode_us(8, sweep.prompt_tokens))


def test_a_prompts_marginal_cost_stays_the_physics():
    """The decode rows of a mixed step carry the residual; the prompt's cost over the
    decode step does not change."""
    anchor = _noisy_anchor()
    own = anchored_model(anchor, CARD, MI355X, "sglang", target(), PHYSICS)
    off = anchored_model(anchor, CARD, MI355X, "sglang", target(), PHYSICS, measured_steps=False)
    context = anchor.decode_sweep.prompt_tokens
    for batch in (8, 64):
        marginal = own.mixed_us(2048, batch, context) - own.decode_us(batch, context)
        assert marginal == pytest.approx(off.mixed_us(2048, batch, context) - off.decode_us(batch, context), rel=1e-6)
        assert own.decode_us(batch, context) != pytest.approx(off.decode_us(batch, context), rel=1e-3)


def test_a_prefill_residual_interpolates_in_length_and_fades_outside():
    table = PrefillResidual.from_points([(256, 0.1), (512, -0.1), (256, 0.2), (64, -2.0)])
    assert math.log(table.factor(256)) == pytest.approx(0.15)             # repeated lengths average
    assert math.log(table.factor(384)) == pytest.approx(0.025)            # halfway between 256 and 512
    assert math.log(table.factor(64)) == pytest.approx(-MAX_LOG_RESIDUAL)  # bounded
    assert table.factor(512 * 2 ** FADE_OCTAVES) == 1.0                   # past the fade: the physics
    assert PrefillResidual.from_points([]) is None


def _curved_anchor(source_rows=()):
    """An anchor whose prefill grows faster than the calibration can (+15% at the longest
    prompt, -10% at the shortest): what llama.cpp's CPU prefill does."""
    clean = measured(_signature())
    prefill = clean.prefill_sweep
    bumps = {prefill.prompt_tokens[0]: 0.90, prefill.prompt_tokens[-1]: 1.15}
    ttft = tuple(t * bumps.get(n, 1.0) for n, t in zip(prefill.prompt_tokens, prefill.ttft_ms))
    return build_anchor(clean.signature, clean.decode_sweep, prefill.prompt_tokens, ttft,
                        Provenance(source="test", timestamp="2026-01-01", source_rows=tuple(source_rows)),
                        host_time_ms=clean.host_time_ms, host_us_per_prompt_token=clean.host_us_per_prompt_token)


def test_own_layout_reproduces_its_measured_prefills_and_other_layouts_take_the_physics():
    anchor = _curved_anchor()
    own = anchored_model(anchor, CARD, MI355X, "sglang", target(), PHYSICS)
    calibration = calibrate(anchor, CARD, "sglang", PHYSICS)
    host_ms = lambda n: calibration.host_ms + calibration.host_us_per_token * n / 1000.0
    chunk = min(own.config.chunked_prefill_size, own.config.max_batched_tokens)
    bare = anchored_model(anchor, CARD, MI355X, "sglang", target(), PHYSICS, measured_steps=False)
    prefill = anchor.prefill_sweep
    assert prefill.prompt_tokens[0] <= chunk
    for tokens, ttft_ms in zip(prefill.prompt_tokens, prefill.ttft_ms):
        if tokens <= chunk:                                              # one chunk: exact where measured
            assert own.prefill_us(tokens) / 1000.0 + host_ms(tokens) == pytest.approx(ttft_ms, rel=1e-6)
    shortest, ttft_ms = prefill.prompt_tokens[0], prefill.ttft_ms[0]
    assert abs((bare.prefill_us(shortest) / 1000.0 + host_ms(shortest)) / ttft_ms - 1) > 0.03   # the fit alone misses
    assert own.prefill_residual is not None and MEASURED_STEPS in own.flags
    wide = anchored_model(anchor, CARD, MI355X, "sglang", target(tp=4), PHYSICS)
    assert wide.prefill_residual is None


def test_a_corpus_anchors_prefill_points_are_not_carried_as_measurements():
    """A served run's TTFT reading (queueing included) calibrates, it is not a prefill sweep."""
    served = anchored_model(_curved_anchor(source_rows=("corpus.csv:2",)), CARD, MI355X, "sglang", target(), PHYSICS)
    assert served.prefill_residual is None
