"""DEP with TP subgroups and DWDP prefill pools (issue 13): the layout grammar, legality,
the memory table and the step model's communication, against hand-computed values."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from levers.catalog import Engine, parse_layout, parse_layout_options
from levers.configuration import Configuration, parse_config_text
from levers.errors import InputError
from levers.legality import structural_reasons
from predictor.cards.registry import load_card
from predictor.feasibility import check_configuration, memory_for, pool_configs
from predictor.hardware import parse_cluster
from predictor.step.comm_cost import build_comm_model
from predictor.step.simulate import SimulateStepModel

NVFP4 = 4.5 / 8


@pytest.fixture(autouse=True)
def isolated_home(tmp_path, monkeypatch):
    monkeypatch.setenv("INFERASIM_HOME", str(tmp_path / "home"))


def split(text: str) -> Configuration:
    return Configuration().with_changes(parse_config_text(text))


B_POOLS = ("disaggregated=true,prefill_layout=DWDP16,decode_layout=TP16/EP16/DP16/TS4,"
           "all_to_all_backend=deepep,weight_dtype=recipe:nvfp4,kv_cache_dtype=fp8")


def test_layout_grammar():
    assert parse_layout_options("tp16/ep16/dp16/ts4").text == "TP16/EP16/DP16/TS4"
    assert parse_layout("DWDP16") == (16, 16, 16)            # 16 GPUs of 16 ranks
    assert parse_layout_options("dwdp8").dwdp == 8
    for bad in ("DWDP8/TP2", "TS4", "TP8/TS2/TS2"):
        with pytest.raises(InputError):
            parse_layout_options(bad)
    config = split(B_POOLS)
    assert config.total_gpus == 32 and config.tp_subgroup == 4 and config.dwdp_ranks == 1


def test_legality_of_the_new_layouts():
    card, cluster = load_card("kimi-k3"), parse_cluster("gb300x4x8")
    assert not structural_reasons(split(B_POOLS), Engine.TRTLLM, card, cluster)
    on_vllm = structural_reasons(split(B_POOLS), Engine.VLLM, card, cluster)
    assert any("DWDP" in r and "trtllm" in r for r in on_vllm)
    decode_dwdp = split("disaggregated=true,prefill_layout=TP16/EP16/DP16,decode_layout=DWDP16")
    assert any("prefill-pool layout" in r for r in structural_reasons(decode_dwdp, Engine.TRTLLM, card, cluster))
    odd = split("disaggregated=true,prefill_layout=TP8/EP8/DP8,decode_layout=TP16/EP16/DP16/TS3")
    assert any("TS3" in r for r in structural_reasons(odd, Engine.TRTLLM, card, cluster))
    dense = structural_reasons(split("disaggregated=true,prefill_layout=DWDP8,decode_layout=TP8"), Engine.TRTLLM,
                               load_card("llama-3.1-70b"), parse_cluster("gb300x4x4"))
    assert any("MoE" in r for r in dense)
    # TensorRT-LLM's decode context parallelism is Helix: a split's decode pool, on Blackwell
    colocated = structural_reasons(Configuration(tp=8, ep=8, dcp=8), Engine.TRTLLM, card, parse_cluster("gb300x4x2"))
    assert any("decode pool only" in r for r in colocated)
    assert not structural_reasons(Configuration(tp=8, ep=8, dcp=8), Engine.VLLM, card, parse_cluster("gb300x4x2"))
    hopper = structural_reasons(split("disaggregated=true,prefill_layout=TP8/EP8/DP1,decode_layout=TP8/EP8/DP1,dcp=8"),
                                Engine.TRTLLM, load_card("deepseek-r1"), parse_cluster("h200x8x2"))
    assert any("needs Blackwell" in r for r in hopper) and not any("decode pool only" in r for r in hopper)
    r1 = load_card("deepseek-r1")     # fp8 experts: TensorRT-LLM's DWDP runs NVFP4 experts only
    fp8 = structural_reasons(split("disaggregated=true,prefill_layout=DWDP8,decode_layout=TP8/EP8/DP8"),
                             Engine.TRTLLM, r1, parse_cluster("gb300x4x4"))
    assert any("needs NVFP4 routed experts" in r and "not fp8" in r for r in fp8)
    assert not any("NVFP4" in r for r in structural_reasons(
        split("disaggregated=true,prefill_layout=DWDP8,decode_layout=TP8/EP8/DP8,expert_dtype=fp4"),
        Engine.TRTLLM, r1, parse_cluster("gb300x4x4")))
    # a native 4-bit checkpoint is MXFP4 (Kimi-K3, gpt-oss) or INT4 (Kimi-K2.5), not NVFP4
    for name, native in (("kimi-k3", "mxfp4"), ("gpt-oss-120b", "mxfp4"), ("kimi-k2.5", "int4")):
        for extra in ("", ",weight_dtype=recipe:native"):
            reasons = structural_reasons(split(f"disaggregated=true,prefill_layout=DWDP8,decode_layout=TP8/EP8/DP8{extra}"),
                                         Engine.TRTLLM, load_card(name), parse_cluster("gb300x4x4"))
            assert any("needs NVFP4 routed experts" in r and f"not {native}" in r for r in reasons), (name, extra)
    k3 = structural_reasons(split("disaggregated=true,prefill_layout=DWDP8,decode_layout=TP8/EP8/DP8"),
                            Engine.TRTLLM, card, parse_cluster("gb300x4x4"))
    assert any("weight_dtype=recipe:nvfp4" in r and "expert_dtype" not in r for r in k3)   # its NVFP4 recipe
    fp4 = structural_reasons(split("disaggregated=true,prefill_layout=DWDP8,decode_layout=TP8/EP8/DP8,expert_dtype=fp4"),
                             Engine.TRTLLM, card, parse_cluster("gb300x4x4"))
    assert any("not mxfp4" in r for r in fp4)     # fp4 on an MXFP4 checkpoint is its MXFP4, not a requantization
    assert not any("NVFP4" in r for r in structural_reasons(
        split("disaggregated=true,prefill_layout=DWDP8,decode_layout=TP8/EP8/DP8,weight_dtype=recipe:nvfp4"),
        Engine.TRTLLM, card, parse_cluster("gb300x4x4")))


def test_pool_configs_keep_the_options():
    prefill, decode = pool_configs(split(B_POOLS))
    assert (prefill.tp, prefill.ep, prefill.attention_dp, prefill.replicas, prefill.dwdp_ranks) == (1, 1, 1, 16, 16)
    assert (decode.tp, decode.attention_dp, decode.tp_subgroup, decode.dwdp_ranks) == (16, 16, 4, 1)
    plain_prefill, plain_decode = pool_configs(split("disaggregated=true,prefill_layout=TP8,decode_layout=TP8"))
    assert plain_prefill.prefill_layout is None and plain_decode.decode_layout is None   # unchanged for old layouts
    # decode context parallelism is the decode pool's (TensorRT-LLM's Helix context servers run without it)
    helix_prefill, helix_decode = pool_configs(split("disaggregated=true,prefill_layout=TP8,decode_layout=TP8,dcp=8"))
    assert (helix_prefill.dcp, helix_decode.dcp) == (1, 8)


# -- DEP with TP subgroups -------------------------------------------------------------------------
def test_tp_subgroup_memory_table():
    """DEP16 with TS4: the sharded attention projections, shared experts and dense MLP are
    stored 1/4 per GPU; the replicated parts, routed experts, KV and state are unchanged."""
    card, cluster = load_card("kimi-k3"), parse_cluster("gb300x4x8")
    _, with_groups = pool_configs(split(B_POOLS))
    without = replace(with_groups, decode_layout=None)
    a, b = memory_for(card, cluster, without, 200_000), memory_for(card, cluster, with_groups, 200_000)
    rep = sum(g.num_layers * g.replicated_params_per_layer for g in card.attention)
    sharded = sum(g.num_layers * (g.params_per_layer - g.replicated_params_per_layer) for g in card.attention)
    assert a.weights_by_component_bytes["attention"] == math.ceil(rep + sharded)          # FP8, attention TP 1
    assert b.weights_by_component_bytes["attention"] == math.ceil(rep + sharded / 4)
    shared = card.moe_layers * card.shared_params_per_moe_layer() * 2
    assert a.weights_by_component_bytes["shared_experts"] == math.ceil(shared)
    assert b.weights_by_component_bytes["shared_experts"] == math.ceil(shared / 4)
    assert b.weights_by_component_bytes["dense_mlp"] == math.ceil(a.weights_by_component_bytes["dense_mlp"] / 4)
    for key in ("routed_experts", "embeddings", "other"):
        assert a.weights_by_component_bytes[key] == b.weights_by_component_bytes[key]
    assert (a.kv_bytes_per_token, a.state_bytes_per_sequence) == (b.kv_bytes_per_token, b.state_bytes_per_sequence)
    assert b.kv_pool_bytes > a.kv_pool_bytes and b.max_concurrency >= a.max_concurrency


def test_tp_subgroup_traffic_per_token():
    """(T-1) H s_a + ((T-1)/T) H s_a per token per block, FP8 activations (s_a = 1)."""
    card, cluster = load_card("kimi-k3"), parse_cluster("gb300x4x8")
    _, decode = pool_configs(split(B_POOLS))
    comm = build_comm_model(card, cluster, decode).subgroup
    h = card.hidden_size
    assert comm.traffic_bytes_per_token() == pytest.approx(3 * h + 0.75 * h)
    assert comm.blocks == card.num_layers + card.moe_layers + card.dense_layers
    assert build_comm_model(card, cluster, replace(decode, decode_layout=None)).subgroup is None
    # the step pays the subgroup collectives and saves weight bandwidth
    model = SimulateStepModel(card, cluster, "trtllm", decode)
    plain = SimulateStepModel(card, cluster, "trtllm", replace(decode, decode_layout=None))
    step, base = model.decode(64, 50_000), plain.decode(64, 50_000)
    assert step.get("communication") > base.get("communication")
    assert step.get("gemm") < base.get("gemm")
    assert step.get("attention") == pytest.approx(base.get("attention"))      # core attention stays local


# -- DWDP -----------------------------------------------------------------------------------------
def test_dwdp_memory_table():
    """Each rank: non-expert weights whole (TP1), 1/16 of the routed experts, two staging
    buffers of 15/16 of one layer's routed experts."""
    card, cluster = load_card("kimi-k3"), parse_cluster("gb300x4x8")
    prefill, _ = pool_configs(split(B_POOLS))
    m = memory_for(card, cluster, prefill, 200_000)
    layer = card.num_experts * card.expert_params() * NVFP4
    assert m.weights_by_component_bytes["routed_experts"] == math.ceil(card.moe_layers * layer / 16)
    assert m.weights_by_component_bytes["dwdp_staging"] == math.ceil(2 * layer * 15 / 16)
    attention = sum(g.num_layers * g.params_per_layer for g in card.attention)
    assert m.weights_by_component_bytes["attention"] == math.ceil(attention * 1)        # FP8, whole
    assert m.fits
    feasible = check_configuration(card, cluster, Engine.TRTLLM, split(B_POOLS), 200_000)
    assert feasible.legal and feasible.prefill_memory.weights_by_component_bytes["dwdp_staging"] > 0


def test_the_des_sizes_pools_with_tp_subgroups_and_dwdp():
    """The DES's pool capacity (one copy of the KV at TP1) of a /TS4 decode pool and a DWDP
    prefill pool: the layout text does not leak into the single-GPU copy."""
    from predictor.sim.capacity import memory_capacity
    from predictor.target import resolve_target
    capacity = memory_capacity(resolve_target("kimi-k3", "gb300x4x8", "trtllm"))
    prefill, decode = pool_configs(split(B_POOLS))
    card = load_card("kimi-k3")
    latent = sum(g.num_layers * (g.kv_lora_rank + g.qk_rope_head_dim) for g in card.attention if not g.kind.is_linear)
    for pool in (prefill, decode):
        sized = capacity(pool)
        assert sized.kv_capacity_tokens > 0 and sized.copy_kv_bytes_per_token == latent    # FP8: 1 byte a value


def test_dcp_is_bounded_by_the_kv_duplication_attention_tp_makes():
    """DCP shards the KV copies attention TP duplicates (vLLM: dcp in [1, tp / kv_heads]):
    gpt-oss-120b's 8 KV heads over TP8 are not duplicated, so DCP there would leave a GPU
    less than its share (the memory model sized 576 bytes a token, 1/64 of the model's);
    Qwen3-235B's 4 heads at TP8 are duplicated twice; a latent cache (MLA) TP-fold."""
    from predictor.hardware import parse_cluster
    cluster = parse_cluster("b200x8")

    def reasons(model, **levers):
        return [r for r in structural_reasons(Configuration(**levers), "vllm", load_card(model), cluster)
                if "KV duplication" in r]

    assert reasons("gpt-oss-120b", tp=8, dcp=2) and reasons("gpt-oss-120b", tp=8, dcp=8)
    assert not reasons("qwen3-235b", tp=8, dcp=2) and reasons("qwen3-235b", tp=8, dcp=4)
    assert not reasons("deepseek-r1", tp=8, dcp=8) and not reasons("kimi-k3", tp=8, dcp=8)
