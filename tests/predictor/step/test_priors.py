"""Cross-model priors (METHOD §2, predictor/step/priors.py): one fit over the anchors'
points per (GPU, engine, dtype class), and what they refuse to learn from."""

from __future__ import annotations

from predictor.anchors.store import AnchorStore
from predictor.cards.registry import load_card
from predictor.step.priors import learn_from_anchors, shipped_priors


def _embedded(engine: str, gpu: str, count: int):
    found = [e.anchor for e in AnchorStore.default().entries()
             if e.where == "embedded" and e.anchor.signature.engine == engine
             and e.anchor.signature.accelerator.lower() == gpu]
    assert len(found) >= count
    return found[:count]


def test_a_cpu_harvest_teaches_no_gpu_prior():
    """A llama.cpp anchor has no registry profile: learning skips it instead of failing."""
    gpu_anchors = _embedded("vllm", "h200", 3)
    template = gpu_anchors[0]
    cpu = template.model_copy(update={"id": template.id + "-cpu", "signature": template.signature.model_copy(
        update={"accelerator": "cpu", "engine": "llamacpp"})})
    with_cpu = learn_from_anchors([*gpu_anchors, cpu], load_card)
    without = learn_from_anchors(gpu_anchors, load_card)
    assert with_cpu.by_key == without.by_key and with_cpu.counts == without.counts
    assert not any("cpu" in key or "llamacpp" in key for key in with_cpu.by_key)


def test_shipped_priors_are_physical():
    """Every shipped prior sits inside the calibration's bounds and counts its anchors."""
    priors = shipped_priors()
    assert priors.by_key and all(n >= 2 for n in priors.counts.values())
    for calibration in priors.by_key.values():
        assert calibration.clamped() == calibration
        assert 0.0 <= calibration.host_ms <= 1000.0 and 5.0 <= calibration.host_us_per_token <= 11.0


def test_a_pooled_prior_is_one_fit_over_its_members_points():
    """Two anchors of one model under one key: the prior is fitted to their points (it
    reproduces their decode steps about as well as either anchor's own fit does), not
    the median of their factors; without points the median is kept (module docstring)."""
    from dataclasses import replace

    from predictor.hardware import load_gpu
    from predictor.step.fit import PARAMS, fit_points
    from predictor.step.priors import POINTS_PER_ANCHOR, _median_calibration, _spread, fitted_anchor, learn

    anchors = _embedded("vllm", "h200", 4)
    fitted = [fitted_anchor(a, load_card(a.signature.model)) for a in anchors]
    launch = load_gpu("h200").kernel_launch_us
    key = ("h200", "vllm", fitted[0].dtype)
    pooled = learn(fitted, default_launch_us={"h200": launch}).lookup(*key)
    assert pooled.source.startswith("prior:") and pooled.clamped() == pooled
    sample = [p for f in fitted for p in _spread(f.points, POINTS_PER_ANCHOR)]
    own = max(f.calibration.residuals.decode_median_abs for f in fitted)
    assert fit_points(sample, pooled, launch, source="check", frozen=PARAMS).residuals.decode_median_abs <= 3 * own + 0.02
    bare = [replace(f, points=()) for f in fitted]
    median = learn(bare, default_launch_us={"h200": launch}).lookup(*key)
    expected = _median_calibration(median.source.removeprefix("prior:"), [f.calibration for f in fitted], launch)
    assert median == expected and median != pooled


def test_the_pooled_sample_keeps_prefill_points_and_spreads_the_rest():
    from predictor.step.fit import Point
    from predictor.step.priors import _spread

    points = tuple(Point(f"d{i}", "decode", (), 1.0) for i in range(20)) + (Point("p", "prefill", (), 1.0),)
    sample = _spread(points, 8)
    assert len(sample) == 8 and sample[0].kind == "prefill"
    assert [p.label for p in sample[1:]][0] == "d0" and sample[-1].label == "d19"
    assert _spread(points[:3], 8) == points[:3]
