"""Per-component precision (issue 13): the weight_dtype grammar, recipes, and memory and
step pricing of every component at its own stored precision, hand-computed."""

from __future__ import annotations

import math

import pytest

from levers.catalog import Engine
from levers.configuration import Configuration, parse_config_text
from levers.errors import InputError
from levers.legality import effective_activation_dtype, structural_reasons
from levers.precision import canonical_weight_dtype, gemm_activation, parse_weight_spec
from predictor.cards.precision import component_dtypes
from predictor.cards.registry import load_card
from predictor.hardware import parse_cluster
from predictor.memory import memory_breakdown
from predictor.step.operators import resolve_precisions
from predictor.step.simulate import SimulateStepModel

GB300 = 298_014_000_000
NVFP4, MXFP4 = 4.5 / 8, 4.25 / 8


@pytest.fixture(autouse=True)
def isolated_home(tmp_path, monkeypatch):
    monkeypatch.setenv("INFERASIM_HOME", str(tmp_path / "home"))


def k3_memory(**levers):
    return memory_breakdown(load_card("kimi-k3"), hbm_bytes=GB300, vendor="nvidia", **levers)


# -- the lever's grammar -------------------------------------------------------------------
def test_plain_values_stay_plain_and_specs_are_canonical():
    assert canonical_weight_dtype("FP8") == "fp8"
    assert canonical_weight_dtype("shared:bf16+recipe:NVFP4+attn:fp8") == "recipe:nvfp4+attention:fp8+shared_experts:bf16"
    spec = parse_weight_spec("fp8+drafter:bf16")
    assert (spec.component("attention"), spec.component("dense_mlp"), spec.component("drafter")) == ("fp8", "fp8", "bf16")
    assert spec.component("embeddings") is None


@pytest.mark.parametrize("bad", ["fp9", "attention:fp9", "routed:fp4", "recipe:", "fp8++bf16",
                                 "fp8+attention:bf16+attention:fp4", "fp8+bf16", "recipe:a+recipe:b"])
def test_bad_specs_name_the_lever(bad):
    with pytest.raises(InputError) as caught:
        parse_config_text(f"weight_dtype={bad}")
    assert "weight_dtype" in caught.value.message


def test_unknown_recipe_is_a_legality_reason_and_a_memory_error():
    card, cluster = load_card("kimi-k3"), parse_cluster("gb300x4x2")
    config = Configuration(tp=8, weight_dtype="recipe:fp2")
    assert any("lists no such checkpoint" in r for r in structural_reasons(config, Engine.VLLM, card, cluster))
    with pytest.raises(InputError):
        k3_memory(tp=8, weight_dtype="recipe:fp2")
    assert not structural_reasons(Configuration(tp=8, weight_dtype="recipe:nvfp4"), Engine.VLLM, card, cluster)


# -- resolution: native, recipe, lever items, expert_dtype --------------------------------------
def test_levers_override_the_recipe_in_order():
    card = load_card("kimi-k3")
    native = component_dtypes(card)
    assert (native.attention, native.shared_experts, native.routed_experts) == ("bf16", "bf16", "mxfp4")
    # fp4 on an MXFP4 checkpoint is its own blocks, however it is asked (an anchor or a
    # corpus row that ran the checkpoint says fp4): one checkpoint, one size
    assert component_dtypes(card, expert_dtype="fp4").routed_experts == "mxfp4"
    assert component_dtypes(load_card("deepseek-r1"), expert_dtype="fp4").routed_experts == "fp4"   # NVFP4 on NVIDIA
    recipe = component_dtypes(card, "recipe:nvfp4")
    assert (recipe.attention, recipe.shared_experts, recipe.routed_experts) == ("fp8", "bf16", "nvfp4")
    mixed = component_dtypes(card, "recipe:nvfp4+attention:bf16", expert_dtype="fp8")
    assert (mixed.attention, mixed.routed_experts) == ("bf16", "fp8")
    # the recipe's FP8 attention makes unset activations fp8, as a plain fp8 weight would
    assert effective_activation_dtype(Configuration(weight_dtype="recipe:nvfp4"), card) == "fp8"
    assert effective_activation_dtype(Configuration(weight_dtype="recipe:nvfp4+attention:bf16"), card) == "bf16"


def test_memory_prices_each_component_at_its_precision():
    card = load_card("kimi-k3")
    native, recipe = k3_memory(tp=8), k3_memory(tp=8, weight_dtype="recipe:nvfp4")
    params = {"attention": 0.0, "shared_experts": card.moe_layers * card.shared_params_per_moe_layer() / 8,
              "routed_experts": card.moe_layers * card.num_experts * card.expert_params() / 8}
    for group in card.attention:
        sharded = group.params_per_layer - group.replicated_params_per_layer
        params["attention"] += group.num_layers * (group.replicated_params_per_layer + sharded / 8)
    got = recipe.weights_by_component_bytes
    assert got["attention"] == math.ceil(params["attention"] * 1)            # FP8
    assert got["shared_experts"] == math.ceil(params["shared_experts"] * 2)  # BF16
    assert got["routed_experts"] == math.ceil(params["routed_experts"] * NVFP4)
    assert native.weights_by_component_bytes["attention"] == math.ceil(params["attention"] * 2)
    assert recipe.dtypes_by_component["routed_experts"] == "nvfp4"
    assert recipe.dtypes_by_component["attention"] == "fp8"
    mx = k3_memory(tp=8, weight_dtype="attention:mxfp4").weights_by_component_bytes
    nv = k3_memory(tp=8, weight_dtype="attention:nvfp4").weights_by_component_bytes
    assert mx["attention"] / nv["attention"] == pytest.approx(MXFP4 / NVFP4, rel=1e-6)
    assert k3_memory(tp=8, expert_dtype="fp8").weights_by_component_bytes["routed_experts"] == \
        math.ceil(params["routed_experts"])


def test_embeddings_and_dense_mlp_items():
    base, changed = k3_memory(tp=8), k3_memory(tp=8, weight_dtype="embeddings:fp8+dense_mlp:fp8")
    for key in ("embeddings", "dense_mlp"):
        assert changed.weights_by_component_bytes[key] == pytest.approx(base.weights_by_component_bytes[key] / 2, abs=1)
    assert changed.weights_by_component_bytes["attention"] == base.weights_by_component_bytes["attention"]


def test_step_model_bytes_follow_the_components():
    card, vendor = load_card("kimi-k3"), "nvidia"
    p = resolve_precisions(card, Configuration(weight_dtype="recipe:nvfp4"), vendor)
    assert (p.weight_bytes, p.shared_bytes, p.dense_mlp_bytes, p.expert_bytes) == (1.0, 2.0, 2.0, NVFP4)
    assert (p.weight, p.expert, p.activation) == ("fp8", "fp4", "fp8")
    plain = resolve_precisions(card, Configuration(weight_dtype="fp8"), vendor)
    assert plain.weight_bytes == plain.shared_bytes == plain.dense_mlp_bytes == 1.0


# -- the drafter ---------------------------------------------------------------------------------
def test_drafter_weights_and_cache_are_counted():
    card = load_card("kimi-k3")
    none = k3_memory(tp=8, kv_cache_dtype="fp8")
    eagle = k3_memory(tp=8, kv_cache_dtype="fp8", spec_method="eagle3")
    assert "drafter" not in none.weights_by_component_bytes
    hidden, inner = card.hidden_size, card.dense_intermediate_size
    layer = (2 * hidden * hidden + 2 * hidden * 8 * 128 + 3 * hidden * inner) / 8
    expected = (layer + 3 * hidden * hidden + 32_000 * hidden / 8) * 2            # BF16 head
    assert eagle.weights_by_component_bytes["drafter"] == math.ceil(expected)
    assert eagle.drafter_kv_bytes_per_token == 2 * 1 * 128 * 1                    # one GQA layer, 1 KV head/rank
    assert eagle.kv_bytes_per_token == none.kv_bytes_per_token                    # the hand-off moves the target's
    assert eagle.max_concurrency <= none.max_concurrency
    fp8 = k3_memory(tp=8, kv_cache_dtype="fp8", spec_method="eagle3", weight_dtype="drafter:fp8")
    assert fp8.weights_by_component_bytes["drafter"] == pytest.approx(expected / 2, abs=1)
    dspark = k3_memory(tp=8, spec_method="dspark")
    mean_layer = sum(v for k, v in none.weights_by_component_bytes.items()
                     if k in ("attention", "dense_mlp", "shared_experts", "routed_experts", "other")) / card.num_layers
    assert dspark.weights_by_component_bytes["drafter"] == pytest.approx(3 * mean_layer, rel=0.02)


def test_a_gemm_never_runs_activations_narrower_than_its_weights():
    """METHOD §3.2a: fp4 activations over fp8 attention projections and Kimi-K3's fp4
    experts price W8A8 attention GEMMs (as fp8 activations do) and W4A4 expert GEMMs (as
    fp4 weights do); the bf16 shared experts stay bf16 throughout."""
    assert [gemm_activation(a, w) for a, w in (("fp4", "fp8"), ("fp8", "bf16"), ("fp8", "fp4"), ("bf16", "fp4"))] \
        == ["fp8", "bf16", "fp8", "bf16"]
    card, cluster = load_card("kimi-k3"), parse_cluster("b200")

    def prefill_terms(**levers) -> dict[str, float]:
        model = SimulateStepModel(card, cluster, "vllm", Configuration(tp=8, **levers))
        return dict(model.prefill(16384).terms)

    w8a4 = prefill_terms(weight_dtype="fp8", activation_dtype="fp4")
    w8a8 = prefill_terms(weight_dtype="fp8", activation_dtype="fp8")
    w4a4 = prefill_terms(weight_dtype="fp4", activation_dtype="fp4")
    assert w8a4["gemm"] == w8a8["gemm"] > w4a4["gemm"]
    assert w8a4["moe"] == w4a4["moe"] < w8a8["moe"]


def test_fp8_weights_under_an_unset_activation_lever_compute_at_the_fp8_rate():
    """`Precisions.gemm_activation`: engines run a GEMM over fp8 weights W8A8 (activations
    quantised per token on the fly), so GLM-5.2's fp8 experts on a BF16 checkpoint compute
    at the fp8 rate when the lever is unset, and as W8A16 only when bf16 is asked; bf16
    weights keep the lever's default."""
    card, cluster = load_card("glm-5.2"), parse_cluster("b300x8")
    p = resolve_precisions(card, Configuration(tp=8, ep=8, expert_dtype="fp8"), "nvidia")
    assert p.activation == "bf16" and not p.activation_asked
    assert [p.gemm_activation(c) for c in ("routed_experts", "attention")] == ["fp8", "bf16"]
    asked = resolve_precisions(card, Configuration(tp=8, ep=8, expert_dtype="fp8", activation_dtype="bf16"), "nvidia")
    assert asked.gemm_activation("routed_experts") == "bf16"

    def moe(**levers) -> tuple[float, float]:
        memory, compute, _, _ = SimulateStepModel(card, cluster, "vllm", Configuration(tp=8, ep=8, **levers))._moe_parts(64)
        return memory, compute

    bf16, fp8, w8a16 = moe(), moe(expert_dtype="fp8"), moe(expert_dtype="fp8", activation_dtype="bf16")
    assert fp8[0] == pytest.approx(w8a16[0], rel=0.05) and fp8[0] < bf16[0] * 0.55     # half the weight bytes
    assert fp8[1] == pytest.approx(w8a16[1] / 2) and w8a16[1] == pytest.approx(bf16[1])


def test_fp4_weights_under_an_unset_activation_lever_run_w4a4_unless_the_checkpoint_ships_them():
    """fp4 weights the checkpoint does not ship (a BF16 checkpoint quantized online, which
    vLLM runs as MXFP4 W4A4 and `deploy` launches so; Kimi-K3's NVFP4 recipe) compute at
    the fp4 rate with the lever unset; a checkpoint's own 4-bit experts (Kimi-K3's MXFP4,
    gpt-oss's) run weight-only at the lever's default, as before."""
    kimi, glm = load_card("kimi-k3"), load_card("glm-5.2")
    native = resolve_precisions(kimi, Configuration(tp=8, ep=8), "nvidia")
    assert native.gemm_activation("routed_experts") == "bf16"
    online = resolve_precisions(kimi, Configuration(tp=8, ep=8, weight_dtype="fp4"), "nvidia")
    assert [online.gemm_activation(c) for c in ("attention", "routed_experts")] == ["fp4", "bf16"]
    recipe = resolve_precisions(kimi, Configuration(tp=8, ep=8, weight_dtype="recipe:nvfp4"), "nvidia")
    assert [recipe.gemm_activation(c) for c in ("attention", "routed_experts", "shared_experts")] \
        == ["fp8", "fp4", "bf16"]      # bf16 shared experts keep their width under fp8 activations
    assert resolve_precisions(glm, Configuration(tp=8, ep=8, expert_dtype="fp4"), "nvidia") \
        .gemm_activation("routed_experts") == "fp4"
    asked = resolve_precisions(glm, Configuration(tp=8, ep=8, expert_dtype="fp4", activation_dtype="bf16"), "nvidia")
    assert asked.gemm_activation("routed_experts") == "bf16"
    cluster = parse_cluster("b300x8")

    def moe_compute(**levers) -> float:
        return SimulateStepModel(glm, cluster, "vllm", Configuration(tp=8, ep=8, **levers))._moe_parts(64)[1]

    assert moe_compute(expert_dtype="fp4") == pytest.approx(moe_compute(expert_dtype="fp4", activation_dtype="fp4"))
    assert moe_compute(expert_dtype="fp4") < moe_compute(expert_dtype="fp4", activation_dtype="bf16") / 2


def test_fp4_weights_on_a_gpu_without_fp4_tensor_cores_stay_weight_only():
    """`activation_dtype=fp4` is illegal on Hopper, so an unset lever does not price W4A4
    there either: GLM-5.2's requantized fp4 experts on H200 run at the lever's default."""
    glm = load_card("glm-5.2")
    hopper = resolve_precisions(glm, Configuration(tp=8, ep=8, expert_dtype="fp4"), "nvidia", fp4_compute=False)
    assert hopper.gemm_activation("routed_experts") == "bf16" and not hopper.quantized_sites
    h200 = parse_cluster("h200x8")
    model = SimulateStepModel(glm, h200, "vllm", Configuration(tp=8, ep=8, expert_dtype="fp4"))
    asked = SimulateStepModel(glm, h200, "vllm", Configuration(tp=8, ep=8, expert_dtype="fp4", activation_dtype="bf16"))
    assert model.decode(64, 2048).total_us == pytest.approx(asked.decode(64, 2048).total_us)


def test_an_int4_checkpoint_requantized_to_fp4_runs_w4a4():
    """Kimi-K2.5 ships its experts in INT4 (run weight-only); `expert_dtype=fp4` is an NVFP4
    requantization, whose kernels take fp4 activations."""
    card = load_card("kimi-k2.5")
    assert resolve_precisions(card, Configuration(tp=8), "nvidia").gemm_activation("routed_experts") == "bf16"
    fp4 = resolve_precisions(card, Configuration(tp=8, expert_dtype="fp4"), "nvidia")
    assert fp4.gemm_activation("routed_experts") == "fp4" and fp4.quantized_sites == {"routed_experts"}


def test_a_launch_is_priced_the_same_whether_its_activations_are_asked_or_follow_the_weights():
    """The same GEMMs, the same kernels: an unset lever whose weights quantise their own
    activations (W4A4 attention on a BF16 checkpoint) and the lever set to what they run
    price one step, and a quant kernel sits only before GEMMs that take quantised input
    (Llama-3.1-70B fp4 on eight GB300 under vLLM was 11% cheaper unset)."""
    cluster = parse_cluster("gb300x4x2")
    for name, levers, asked in (("llama-3.1-70b", {"weight_dtype": "fp4"}, "fp4"),
                                ("glm-5.2", {"ep": 8, "expert_dtype": "fp4"}, "fp4"),
                                ("glm-5.2", {"ep": 8, "expert_dtype": "fp8"}, "fp8")):
        card = load_card(name)
        unset = SimulateStepModel(card, cluster, "vllm", Configuration(tp=8, **levers))
        named = SimulateStepModel(card, cluster, "vllm", Configuration(tp=8, activation_dtype=asked, **levers))
        assert unset.decode(32, 2048).total_us == pytest.approx(named.decode(32, 2048).total_us), name
        assert unset.prefill(8192).total_us == pytest.approx(named.prefill(8192).total_us), name
    card = load_card("glm-5.2")
    bf16 = SimulateStepModel(card, cluster, "vllm", Configuration(tp=8, ep=8, activation_dtype="bf16"))
    experts_only = SimulateStepModel(card, cluster, "vllm", Configuration(tp=8, ep=8, expert_dtype="fp4"))
    everything = SimulateStepModel(card, cluster, "vllm", Configuration(tp=8, ep=8, weight_dtype="fp4",
                                                                       expert_dtype="fp4"))
    moe_layers, layers = card.moe_layers, card.num_layers
    kernels = lambda model: model._kernels.per_forward   # noqa: E731
    # two quant kernels per MoE layer (input, before the down projection) and none before attention
    assert kernels(experts_only) - kernels(bf16) == 2 * moe_layers
    assert kernels(everything) - kernels(experts_only) > layers       # attention's and the shared experts' too


def test_quant_fed_fusions_are_legal_where_the_weights_quantise_their_own_activations():
    """`check` agrees with the step model: requantized fp4 experts run W4A4 on B200 with the
    lever unset, so act_quant is legal there; on H200 they run weight-only and it is not."""
    glm = load_card("glm-5.2")
    config = Configuration(tp=8, ep=8, expert_dtype="fp4", fusions=("act_quant",))
    needs = "fusion act_quant needs fp8 or fp4 activations"
    assert needs not in structural_reasons(config, Engine.VLLM, glm, parse_cluster("b200x8"))
    assert needs in structural_reasons(config, Engine.VLLM, glm, parse_cluster("h200x8"))
    assert needs in structural_reasons(Configuration(tp=8, ep=8, fusions=("act_quant",)), Engine.VLLM, glm,
                                       parse_cluster("b200x8"))


def test_no_single_activation_lever_value_means_the_default():
    """fp4 attention quantized online beside Kimi-K3's own MXFP4 experts runs W4A4 and W4A16
    at once: no lever value runs that, so an anchor of it signs the lever's default."""
    from predictor.step.operators import narrowest_activation
    b200 = parse_cluster("b200x8").gpu
    assert narrowest_activation(load_card("kimi-k3"), Configuration(tp=8, weight_dtype="fp4"), b200) == "bf16"
    assert narrowest_activation(load_card("glm-5.2"), Configuration(tp=8, ep=8, expert_dtype="fp4"), b200) == "fp4"


def test_fusions_remove_only_the_quant_kernels_the_step_has_and_comm_follows_the_experts():
    """With the lever unset and only GLM-5.2's experts in fp4, the fused step keeps fewer
    kernels than the unfused one but never fewer than a step without any quant kernel, and
    an expert dispatch carries what the experts run: unset and asked price the same."""
    card, cluster = load_card("glm-5.2"), parse_cluster("b200x8")
    levers = dict(tp=8, ep=8, attention_dp=8, all_to_all_backend="deepep", expert_dtype="fp4")

    def step(**more) -> float:
        return SimulateStepModel(card, cluster, "vllm", Configuration(**{**levers, **more})).decode(64, 2048).total_us

    plain, fused = step(), step(fusions=("norm_quant", "act_quant"))
    bf16 = step(activation_dtype="bf16")
    assert bf16 * 0.9 < fused < plain
    assert step() == pytest.approx(step(activation_dtype="fp4"))
