"""Cross-model priors (METHOD §2, predictor/step/priors.py): medians of the embedded
anchors' fitted factors per (GPU, engine, dtype class), and what they refuse to learn from."""

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
