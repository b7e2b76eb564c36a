"""Cross-model priors (METHOD §2, predictor/step/priors.py): one fit over the anchors'
points per (GPU, engine, dtype class), and what they refuse to learn from."""

from __future__ import annotations

import numpy as np
import pytest

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


def _fitted(source: str, engine: str, model: str, host_ms: float, per_token: float):
    from predictor.step.calibration import Calibration
    from predictor.step.priors import Fitted

    return Fitted("h200", engine, "fp8", model, Calibration(host_ms=host_ms, host_us_per_token=per_token,
                                                            source=f"anchor:{model}"), source=source)


def test_host_time_is_learned_per_harness_and_engine():
    """The host-time table (module docstring): medians per (harness, engine) over at least
    two anchors, never from the excluded model; a no-anchor lookup that names its harness
    takes it, one that names none (the product's own questions) or an engine the harness
    has too few anchors of keeps the pooled prior's host time."""
    from predictor.step.priors import learn

    fitted = [_fitted("aiconfigurator", "trtllm", "a", 150.0, 6.0), _fitted("aiconfigurator", "trtllm", "b", 250.0, 8.0),
              _fitted("aiconfigurator", "trtllm", "c", 900.0, 10.0), _fitted("inferencex", "trtllm", "a", 4.0, 5.0),
              _fitted("inferencex", "trtllm", "b", 6.0, 7.0), _fitted("inferencex", "vllm", "a", 9.0, 5.0)]
    priors = learn(fitted, default_launch_us={"h200": 4.0}, pooled=False)
    assert priors.hosts["aiconfigurator/trtllm"] == (250.0, 8.0, 3)
    assert priors.hosts["inferencex/trtllm"] == (5.0, 6.0, 2)
    assert "inferencex/vllm" not in priors.hosts            # one anchor: not a key
    pooled = priors.lookup("h200", "trtllm", "fp8")
    measured_by = priors.lookup("h200", "trtllm", "fp8", harness="InferenceX")
    assert (measured_by.host_ms, measured_by.host_us_per_token) == (5.0, 6.0)
    assert measured_by.source == f"{pooled.source}+host:inferencex/trtllm"
    assert (measured_by.bandwidth, measured_by.compute, measured_by.launch_us) == \
        (pooled.bandwidth, pooled.compute, pooled.launch_us)
    assert priors.lookup("h200", "vllm", "fp8", harness="inferencex") == priors.lookup("h200", "vllm", "fp8")
    assert priors.lookup("h200", "trtllm", "fp8", harness="elsewhere") == pooled
    without_a = learn(fitted, default_launch_us={"h200": 4.0}, exclude_model="a", pooled=False)
    assert without_a.hosts["aiconfigurator/trtllm"] == (575.0, 9.0, 2) and "inferencex/trtllm" not in without_a.hosts


def test_the_host_table_round_trips_and_ships():
    from predictor.step.priors import Priors

    priors = Priors(hosts={"inferencex/vllm": (12.5, 5.5, 4)})
    assert Priors.from_json(priors.to_json()).hosts == priors.hosts
    shipped = shipped_priors().hosts
    assert {"inferencex/vllm", "aiconfigurator/trtllm"} <= set(shipped)
    for host_ms, per_token, anchors in shipped.values():
        assert 0.0 <= host_ms <= 1000.0 and 5.0 <= per_token <= 11.0 and anchors >= 2


def test_a_pooled_prior_follows_what_its_anchors_share_not_one_unlike_stack():
    """H100 under TensorRT-LLM, Llama-3.1-8B left out: gpt-oss-120b decodes 42-51 ms at
    160-368 requests whatever the batch, which no factors shared with the Qwen3 anchors
    reproduce. Unweighted, the pooled fit put the key's compute factor at 4.0 (the Qwen3-32B
    anchors' own fits: 1.1-1.6); the robust fit keeps the key where its anchors agree
    (module docstring) and reproduces the Qwen3-32B decode steps."""
    import statistics

    from predictor.hardware import load_gpu
    from predictor.step.fit import PARAMS, fit_points
    from predictor.step.priors import POINTS_PER_ANCHOR, _spread, fitted_anchor

    anchors = [a for a in _embedded("trtllm", "h100", 14) if a.signature.model.lower() != "llama-3.1-8b"]
    assert {a.signature.model.lower() for a in anchors} == {"gpt-oss-120b", "qwen3-235b-a22b", "qwen3-32b"}
    prior = learn_from_anchors(anchors, load_card).by_key["h100/trtllm"]
    qwen = [fitted_anchor(a, load_card(a.signature.model)) for a in anchors if a.signature.model.lower() == "qwen3-32b"]
    own = statistics.median(f.calibration.compute for f in qwen)
    assert prior.compute <= own * 1.25, (prior.compute, own)
    sample = [p for f in qwen for p in _spread(f.points, POINTS_PER_ANCHOR) if p.kind == "decode"]
    check = fit_points(sample, prior, load_gpu("h100").kernel_launch_us, source="check", frozen=PARAMS)
    assert check.residuals.decode_median_abs <= 0.10


def test_a_prior_pooled_over_engines_keeps_the_documented_host_time():
    """Host time is the engine's front end's and the client's (METHOD §3.12): a lookup
    that falls back to a key naming no engine ("*" or a GPU alone) and finds no harness
    host takes the documented default, not a fit pooled over other engines' front ends
    (leave-model-out on InferenceX: gpt-oss-120b under vLLM on H100 and H200 priced with
    a 29.6 ms host time pooled from DeepSeek-R1's SGLang and TensorRT-LLM anchors)."""
    from predictor.step.calibration import PHYSICS
    from predictor.step.priors import learn

    fitted = [_fitted("inferencex", "trtllm", "a", 150.0, 6.0), _fitted("inferencex", "sglang", "b", 250.0, 8.0)]
    priors = learn(fitted, default_launch_us={"h200": 4.0}, pooled=False)
    pooled_over_engines = priors.lookup("h200", "vllm", "fp8")
    assert pooled_over_engines.source == "prior:h200"
    assert (pooled_over_engines.host_ms, pooled_over_engines.host_us_per_token) == (PHYSICS.host_ms,
                                                                                  PHYSICS.host_us_per_token)
    assert priors.by_key["h200"].host_ms > 150.0            # the table keeps what it learned
    more = learn([*fitted, _fitted("inferencex", "trtllm", "c", 50.0, 6.0)], default_launch_us={"h200": 4.0},
                 pooled=False)
    assert more.lookup("h200", "trtllm", "fp8").host_ms > 50.0      # a key naming the engine keeps its own


@pytest.mark.parametrize("gpu, engine, dtype, left_out, most", [("b200", "sglang", "fp4", "deepseek-r1", 1.7),
                                                                   ("h200", "trtllm", "fp8", "llama-3.1-70b", 1.0)])
def test_a_pooled_prior_keeps_its_collective_factor_where_most_of_its_members_measured_it(
        gpu, engine, dtype, left_out, most):
    """B200 under SGLang, FP4 experts, DeepSeek-R1 left out (its InferenceX rows priced with
    no anchor): seven anchors whose own fits put ``comm`` between 0.7 and 1.7 pooled into
    2.99 with bandwidth at its floor, pricing DeepSeek-R1's TP4 and TP8 decode 26% slow.
    H200 under TensorRT-LLM, FP8: six DeepSeek anchors, five fitting ``comm`` at 0.5-0.8 and
    one attention-DP anchor at 4.65, pooled into 4.3 and priced Llama-3.1-70B's TP8
    all-reduces 4.3x. The pooled factor stays inside the middle half of the members' own
    values (`_pooled_calibration`), of the members that teach other models
    (`teaches_other_models`)."""
    from predictor.hardware import load_gpu
    from predictor.step.priors import dtype_class, fitted_anchor, learn, teaches_other_models

    anchors = [e.anchor for e in AnchorStore.default().entries()
               if e.where == "embedded" and e.anchor.signature.engine == engine
               and e.anchor.signature.accelerator.lower() == gpu
               and dtype_class(e.anchor.signature.weight_dtype, e.anchor.signature.expert_dtype) == dtype
               and e.anchor.signature.model.lower() != left_out]
    assert len(anchors) >= 5
    fitted = [fitted_anchor(a, load_card(a.signature.model)) for a in anchors]
    prior = learn(fitted, default_launch_us={gpu: load_gpu(gpu).kernel_launch_us}).by_key[f"{gpu}/{engine}/{dtype}"]
    low, high = np.quantile([f.calibration.comm for f in fitted if teaches_other_models(f.calibration)], [0.25, 0.75])
    assert low - 1e-9 <= prior.comm <= high + 1e-9 and prior.comm < most, (prior.comm, low, high)


def test_an_anchor_whose_fit_left_the_physical_range_teaches_no_other_model():
    """AIConfigurator's Qwen3-32B fp8 on H100 under SGLang: four split-pool anchors, three
    one decode point of a queued run each (bandwidth factors 3.2-14.6), the fourth at its
    host bound. Pooled, they priced every fp8 model on H100 under SGLang 4x below HBM's rate
    (Llama-3.1-8B fp8 2.8x slower than bf16); they keep pricing their own stack, but the
    key's prior falls back to one learned from anchors that describe the GPU and engine."""
    from predictor.step.calibration import PHYSICS
    from predictor.step.priors import TEACHING_MAX_BANDWIDTH, fitted_anchor, learn, teaches_other_models

    assert teaches_other_models(PHYSICS)
    assert not teaches_other_models(PHYSICS.__class__(bandwidth=TEACHING_MAX_BANDWIDTH * 1.01))
    assert teaches_other_models(PHYSICS.__class__(host_ms=1000.0))    # a host time at its bound still teaches
    anchors = _embedded("sglang", "h100", 8)
    fitted = [fitted_anchor(a, load_card(a.signature.model)) for a in anchors]
    fp8 = [f for f in fitted if f.dtype == "fp8"]
    assert len(fp8) == 4 and sum(teaches_other_models(f.calibration) for f in fp8) == 1
    priors = learn(fitted, default_launch_us={"h100": 4.0})
    assert "h100/sglang/fp8" not in priors.by_key and "h100/sglang/fp8" in priors.seeds     # one teaches: < 2
    assert priors.lookup("h100", "sglang", "fp8").bandwidth <= TEACHING_MAX_BANDWIDTH
    assert shipped_priors().lookup("h100", "sglang", "fp8").bandwidth <= TEACHING_MAX_BANDWIDTH


def _with_compute(dtype: str, model: str, compute: float):
    from predictor.step.calibration import Calibration
    from predictor.step.priors import Fitted

    return Fitted("h200", "vllm", dtype, model, Calibration(compute=compute, launch_us=4.0, source=f"anchor:{model}"))


def test_a_key_of_few_anchors_is_shrunk_toward_its_parent_and_a_key_of_many_is_not():
    """Two fp8 anchors at compute 4.0 among six bf16 ones at 1.0 on one GPU and engine:
    the fp8 prior is pulled toward the engine's by ``n / (n + SHRINK_ANCHORS)`` in log
    space (a model with no anchor is a new draw from the key's models); forty of each keep
    their own (`predictor.step.priors._shrunk`; B300 under vLLM, FP8, had pooled compute
    3.9 from four anchors where the engine's on that GPU was 1.2)."""
    import math

    from predictor.step.priors import SHRINK_ANCHORS, learn, parent_key

    assert [parent_key(k) for k in ("h200/vllm/fp8", "h200/vllm", "*/vllm/fp8", "*/vllm", "h200", "*")] == [
        "h200/vllm", "*/vllm", "*/vllm", "*", "*", None]
    few = [_with_compute("fp8", f"f{i}", 4.0) for i in range(2)] + [_with_compute("bf16", f"b{i}", 1.0)
                                                                      for i in range(6)]
    priors = learn(few, default_launch_us={"h200": 4.0})
    assert priors.by_key["h200/vllm"].compute == pytest.approx(1.0)
    weight = 2 / (2 + SHRINK_ANCHORS)
    assert SHRINK_ANCHORS > 0
    assert priors.lookup("h200", "vllm", "fp8").compute == pytest.approx(math.exp(weight * math.log(4.0)), rel=1e-4)
    assert priors.seeds["h200/vllm/fp8"].compute == pytest.approx(4.0)      # an anchor's own fit starts from its own
    many = [_with_compute("fp8", f"f{i}", 4.0) for i in range(40)] + [_with_compute("bf16", f"b{i}", 1.0)
                                                                        for i in range(40)]
    parent = learn(many, default_launch_us={"h200": 4.0}).by_key["h200/vllm"].compute
    own = learn(many, default_launch_us={"h200": 4.0}).by_key["h200/vllm/fp8"].compute
    assert own == pytest.approx(math.exp((40 * math.log(4.0) + SHRINK_ANCHORS * math.log(parent)) / (40 + SHRINK_ANCHORS)),
                                rel=1e-4) and own > 3.5
