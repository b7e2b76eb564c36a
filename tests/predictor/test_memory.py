"""Memory model (METHOD §3.9): hand-computed expectations, arithmetic written out.

Conventions checked: bytes per value bf16 2, fp8 1, fp4 4.5 bits (NVIDIA) / 4.25 bits
(AMD); GB = 1e9 bytes; defaults max_batched_tokens 8192, max_captured_batch 256, full
graphs (0.25 GB + 4 MB per captured slot), kv_memory_fraction 0.9, context 2048.
"""

from __future__ import annotations

import math

import pytest

from levers.errors import InputError
from predictor.cards.registry import load_card
from predictor.memory import dtype_bytes, memory_breakdown

H100 = 80_000_000_000       # bytes of HBM
MI355X = 288_000_000_000
GRAPH = 250_000_000 + 4_000_000 * 256


@pytest.fixture(autouse=True)
def isolated_home(tmp_path, monkeypatch):
    monkeypatch.setenv("INFERASIM_HOME", str(tmp_path / "home"))


def llama8b(**layout):
    return memory_breakdown(load_card("llama-3.1-8b"), hbm_bytes=H100, vendor="nvidia", **layout)


# -- Llama-3.1-8B (dense GQA: 32 layers, hidden 4096, 32 q / 8 KV heads of 128, MLP 14336)
def test_llama_8b_single_gpu_by_hand():
    m = llama8b()
    attention = 32 * (4096 * 4096 + 2 * 4096 * 1024 + 4096 * 4096) * 2     # q, k, v, o in bf16
    mlp = 32 * 3 * 4096 * 14336 * 2
    embeddings = 2 * 128256 * 4096 * 2                                     # embed + LM head, untied
    other = (32 * 2 * 4096 + 4096) * 2                                     # norms
    assert m.weights_by_component_bytes == {"attention": attention, "dense_mlp": mlp, "shared_experts": 0,
                                            "routed_experts": 0, "embeddings": embeddings, "other": other}
    assert m.weights_bytes == 16_060_522_496                               # 8.03e9 params x 2 bytes
    assert m.kv_bytes_per_token == 32 * 2 * 8 * 128 * 2 == 131_072
    assert m.state_bytes_per_sequence == 0
    # activations: 8192 tokens x (4 residual buffers x 4096 x 2 B + widest shard 2*14336 x 2 B)
    #              + logits 256 rows x 128256 x 4 B
    activations = 8192 * (4 * 4096 * 2 + 2 * 14336 * 2) + 256 * 128256 * 4
    assert m.activations_bytes == activations == 869_531_648
    assert m.graph_bytes == GRAPH == 1_274_000_000
    assert m.usable_bytes == 72_000_000_000
    pool = 72_000_000_000 - m.weights_bytes - activations - GRAPH
    assert m.kv_pool_bytes == pool
    assert m.max_concurrency == pool // (2048 * 131_072) == 200
    assert m.fits and m.reason is None


def test_gqa_kv_sharded_by_attention_tp_until_kv_heads_run_out():
    assert llama8b(tp=2).kv_bytes_per_token == 32 * 2 * (8 // 2) * 128 * 2 == 65_536
    assert llama8b(tp=8).kv_bytes_per_token == 32 * 2 * 1 * 128 * 2 == 16_384
    # attention TP 16 > 8 KV heads: each rank still keeps one KV head (a replica)
    assert llama8b(tp=16).kv_bytes_per_token == 16_384
    # dcp shards the per-token KV sequence-wise
    assert llama8b(tp=8, dcp=2).kv_bytes_per_token == 16_384 // 2


def test_llama_8b_pipeline_parallel_worst_stage():
    m = llama8b(pp=2)
    w = m.weights_by_component_bytes
    assert w["attention"] == 16 * (2 * 4096 * 4096 + 2 * 4096 * 1024) * 2   # 32 layers / 2 stages
    assert w["dense_mlp"] == 16 * 3 * 4096 * 14336 * 2
    assert w["embeddings"] == 128256 * 4096 * 2       # embedding on stage 1, LM head on stage 2
    assert w["other"] == (16 * 2 * 4096 + 4096) * 2
    assert m.kv_bytes_per_token == 16 * 2 * 8 * 128 * 2 == 65_536


def test_kv_memory_fraction_and_graph_capture_shrink_or_grow_the_pool():
    base = llama8b()
    half = llama8b(kv_memory_fraction=0.5)
    assert half.usable_bytes == 40_000_000_000
    assert base.kv_pool_bytes - half.kv_pool_bytes == 32_000_000_000
    assert llama8b(graph_capture="none").graph_bytes == 0
    assert llama8b(max_captured_batch=512).graph_bytes == 250_000_000 + 4_000_000 * 512


# -- DeepSeek-R1 (61 MLA layers: 3 dense + 58 MoE; native fp8 weights and experts)
R1_MLA_REPLICATED = 7168 * 1536 + 1536 + 7168 * (512 + 64) + 512         # q_a, q_a norm, kv_a, kv_a norm
R1_MLA_SHARDED = 1536 * 128 * 192 + 512 * 128 * (128 + 128) + 128 * 128 * 7168   # q_b, kv_b, o
R1_EXPERT = 3 * 7168 * 2048


def r1(**layout):
    return memory_breakdown(load_card("deepseek-r1"), hbm_bytes=MI355X, vendor="amd", **layout)


def test_deepseek_r1_tp8_by_hand():
    m = r1(tp=8, ep=8)
    w = m.weights_by_component_bytes
    assert w["attention"] == math.ceil(61 * (R1_MLA_REPLICATED + R1_MLA_SHARDED / 8) * 1)     # fp8
    assert w["dense_mlp"] == 3 * 3 * 7168 * 18432 // 8
    assert w["shared_experts"] == 58 * 3 * 7168 * 2048 // 8
    assert w["routed_experts"] == 58 * 256 * R1_EXPERT // 8               # EP8 x MoE-TP1 = 8 GPUs
    assert w["embeddings"] == 2 * 129280 * 7168 * 2 // 8                  # bf16, vocab-parallel
    # MLA latent (512 + 64) per layer, NOT sharded by TP: 61 x 576 x 2 B
    assert m.kv_bytes_per_token == 61 * 576 * 2 == 70_272
    assert r1(tp=1).kv_bytes_per_token == 70_272
    assert r1(tp=8, kv_cache_dtype="fp8").kv_bytes_per_token == 61 * 576 == 35_136
    # activations: widest attention shard 128 x (192 + 128 + 128) / 8 = 7168 elements;
    # MoE: 8 top-k / EP 8 copies x (2 x 2048 + 7168) elements; logits 256 x 129280/8 x 4 B
    activations = (8192 * (4 * 7168 * 2 + 7168 * 2) + 8192 * 8 // 8 * (2 * 2048 + 7168) * 2
                   + 256 * 16160 * 4)
    assert m.activations_bytes == activations
    assert m.max_concurrency == (MI355X * 9 // 10 - m.weights_bytes - activations - GRAPH) // (2048 * 70_272)


def test_deepseek_r1_attention_dp_layout():
    """DEP8: attention-TP 1, so attention and dense MLP are whole on every GPU, the MoE
    still spans 8 GPUs, and each of the 8 ranks owns whole requests (latent not replicated)."""
    m = r1(tp=8, ep=8, attention_dp=8)
    w = m.weights_by_component_bytes
    assert w["attention"] == 61 * (R1_MLA_REPLICATED + R1_MLA_SHARDED)
    assert w["dense_mlp"] == 3 * 3 * 7168 * 18432
    assert w["routed_experts"] == 58 * 256 * R1_EXPERT // 8
    assert w["embeddings"] == 129280 * 7168 * 2 + 129280 * 7168 * 2 // 8   # embed per rank, LM head over tp
    assert m.kv_bytes_per_token == 70_272
    per_gpu = m.kv_pool_bytes // (2048 * 70_272)
    assert m.max_concurrency == per_gpu * 8


def test_deepseek_r1_pipeline_parallel_stage():
    m = r1(tp=4, ep=4, pp=2)
    w = m.weights_by_component_bytes
    assert w["dense_mlp"] == 2 * 3 * 7168 * 18432 // 4          # ceil(3 / 2) dense layers
    assert w["routed_experts"] == 29 * 256 * R1_EXPERT // 4     # 58 / 2 MoE layers
    assert w["embeddings"] == 129280 * 7168 * 2 // 4            # one of embed / LM head per stage
    assert m.kv_bytes_per_token == 31 * 576 * 2                 # ceil(61 / 2) layers


def test_fp4_experts_use_the_platform_format():
    assert dtype_bytes("fp4", "nvidia") == 4.5 / 8
    assert dtype_bytes("fp4", "amd") == 4.25 / 8
    m = r1(tp=8, ep=8, expert_dtype="fp4")
    assert m.weights_by_component_bytes["routed_experts"] == math.ceil(58 * 256 * R1_EXPERT / 8 * 4.25 / 8)


# -- gpt-oss-120b (18 sliding-window(128) + 18 full GQA layers, 8 KV heads of 64; MXFP4 experts)
def test_gpt_oss_sliding_window_and_native_fp4_experts():
    card = load_card("gpt-oss-120b")
    m = memory_breakdown(card, hbm_bytes=H100, vendor="nvidia")
    per_layer_token = 2 * 8 * 64 * 2                             # 2048 B per token per layer
    assert m.kv_bytes_per_token == 18 * per_layer_token == 36_864          # full layers grow
    assert m.window_bytes_per_sequence == 18 * 128 * per_layer_token       # sliding layers capped
    assert m.state_bytes_per_sequence == 18 * 128 * per_layer_token
    assert m.bytes_per_sequence == 2048 * 36_864 + 18 * 128 * 2048
    short = memory_breakdown(card, hbm_bytes=H100, vendor="nvidia", context_tokens=100)
    assert short.window_bytes_per_sequence == 18 * 100 * per_layer_token   # min(context, window)
    expert = 3 * 2880 * 2880 + 2 * 2880 + 2880                              # gate/up/down + biases
    # the checkpoint's MXFP4 (4.25 bits) on an NVIDIA GPU too, not NVFP4's 4.5
    assert m.weights_by_component_bytes["routed_experts"] == math.ceil(36 * 128 * expert * 4.25 / 8)


# -- Qwen3.5-397B-A17B (45 Gated DeltaNet + 15 gated GQA layers: 2 KV heads of 256)
def test_qwen35_gdn_state_and_kv():
    card = load_card("qwen3.5-397b")
    one = memory_breakdown(card, hbm_bytes=MI355X, vendor="amd")
    # GDN per layer: conv (2*16*128 + 64*128) x 3 x 2 B + recurrent 64*128*128 x 4 B
    assert one.state_bytes_per_sequence == 45 * ((2 * 16 * 128 + 64 * 128) * 3 * 2 + 64 * 128 * 128 * 4)
    assert one.state_bytes_per_sequence == 192_061_440          # the record's per_sequence_bytes_tp1
    assert one.kv_bytes_per_token == 15 * 2 * 2 * 256 * 2 == 30_720
    four = memory_breakdown(card, hbm_bytes=MI355X, vendor="amd", tp=4, ep=4)
    # heads sharded by attention TP: 16/4 key heads, 64/4 value heads
    assert four.state_bytes_per_sequence == 45 * ((2 * 4 * 128 + 16 * 128) * 3 * 2 + 16 * 128 * 128 * 4)
    assert four.kv_bytes_per_token == 15 * 2 * 1 * 256 * 2      # 2 KV heads over TP 4: one per rank
    assert four.bytes_per_sequence == 2048 * four.kv_bytes_per_token + four.state_bytes_per_sequence
    assert four.max_concurrency == four.kv_pool_bytes // four.bytes_per_sequence


# -- DeepSeek-V4-Pro (30 CSA ratio-4 layers with indexer, 31 HCA ratio-128; head_dim 512, window 128)
def test_deepseek_v4_compressed_kv_formula():
    card = load_card("deepseek-v4-pro")
    m = memory_breakdown(card, hbm_bytes=MI355X, vendor="amd", tp=8, ep=8, kv_cache_dtype="fp8")
    # per token: CSA 512 B / 4 + FP4 indexer key 64 B / 4; HCA 512 B / 128
    assert m.kv_bytes_per_token == 30 * (512 // 4 + 64 // 4) + 31 * (512 // 128) == 4_444
    # per sequence: 128-token window x 512 B on every layer + fp32 compressor state
    # (2 x ratio x coff x 512 x 4 B; coff 2 at ratio 4) + indexer compressor 2 x 4 x 2 x 128 x 4 B
    window = 30 * (128 * 512 + 2 * 4 * 2 * 512 * 4 + 2 * 4 * 2 * 128 * 4) + 31 * (128 * 512 + 2 * 128 * 512 * 4)
    assert m.window_bytes_per_sequence == window == 21_479_424
    assert m.bytes_per_sequence == 2048 * 4_444 + window
    bf16 = memory_breakdown(card, hbm_bytes=MI355X, vendor="amd", tp=8, ep=8)
    assert bf16.kv_bytes_per_token == 30 * (1024 // 4 + 16) + 31 * (1024 // 128) == 8_408


def test_deepseek_v4_weights_native_fp8_with_fp4_experts():
    m = memory_breakdown(load_card("deepseek-v4-pro"), hbm_bytes=MI355X, vendor="amd", tp=8, ep=8)
    assert m.weights_by_component_bytes["routed_experts"] == math.ceil(61 * 384 * 3 * 7168 * 3072 / 8 * 4.25 / 8)
    assert m.weights_by_component_bytes["shared_experts"] == 61 * 3 * 7168 * 3072 // 8   # fp8


# -- Kimi-K3 (69 KDA layers of 96 heads x 128 + 24 MLA layers; 896 latent experts, FP4)
def test_kimi_k3_kda_state_and_mla_kv():
    card = load_card("kimi-k3")
    one = memory_breakdown(card, hbm_bytes=MI355X, vendor="amd", expert_dtype="fp4")
    # KDA per layer: conv 3 x 96 x 128 x (4 - 1) x 2 B + recurrent 96 x 128 x 128 x 4 B
    assert one.state_bytes_per_sequence == 69 * (3 * 96 * 128 * 3 * 2 + 96 * 128 * 128 * 4) == 449_372_160
    assert one.kv_bytes_per_token == 24 * (512 + 64) * 2 == 27_648
    eight = memory_breakdown(card, hbm_bytes=MI355X, vendor="amd", tp=8, ep=8)
    assert eight.state_bytes_per_sequence == 69 * (3 * 12 * 128 * 3 * 2 + 12 * 128 * 128 * 4)  # 96/8 heads
    assert eight.kv_bytes_per_token == 27_648                   # MLA latent not sharded
    assert eight.weights_by_component_bytes["routed_experts"] == math.ceil(
        92 * 896 * 3 * 3584 * 3072 / 8 * 4.25 / 8)


def test_kimi_k3_bf16_experts_on_one_gpu_does_not_fit():
    m = memory_breakdown(load_card("kimi-k3"), hbm_bytes=MI355X, vendor="amd", expert_dtype="bf16")
    assert m.weights_by_component_bytes["routed_experts"] == 92 * 896 * 3 * 3584 * 3072 * 2   # ~5.4 TB
    assert not m.fits
    assert "exceed 90% of HBM" in m.reason and "259.2 of 288.0 GB" in m.reason
    assert m.max_concurrency == 0 and m.kv_pool_bytes < 0


def test_a_fraction_too_small_for_one_sequence_does_not_fit():
    # 16.1 GB weights + 0.9 + 1.3 + 0.27 GB fit in 90% of 24 GB, but not in the 12 GB of a 0.5 fraction
    m = memory_breakdown(load_card("llama-3.1-8b"), hbm_bytes=24_000_000_000, vendor="nvidia",
                         kv_memory_fraction=0.5)
    assert not m.fits and "kv_memory_fraction=0.5" in m.reason


def test_attention_dp_with_gqa_counts_ranks():
    card = load_card("qwen3-235b-a22b")          # 94 layers, 4 KV heads of 128
    m = memory_breakdown(card, hbm_bytes=MI355X, vendor="amd", tp=8, ep=8, attention_dp=2)
    assert m.kv_bytes_per_token == 94 * 2 * 1 * 128 * 2         # attention TP 4: one KV head per rank
    assert m.max_concurrency == m.kv_pool_bytes // m.bytes_per_sequence * 2


def test_to_json_reports_gb():
    data = llama8b().to_json()
    assert data["weights_per_gpu_gb"] == round(16_060_522_496 / 1e9, 3)
    assert set(data["weights_by_component_gb"]) == {"attention", "dense_mlp", "shared_experts",
                                                    "routed_experts", "embeddings", "other"}
    for key in ("kv_bytes_per_token", "state_bytes_per_sequence", "kv_pool_per_gpu_gb",
                "max_concurrency", "fits", "reason"):
        assert key in data


@pytest.mark.parametrize("layout, what", [
    (dict(tp=8, attention_dp=3), "attention_dp"), (dict(tp=8, ep=3), "ep"),
    (dict(tp=8, attention_dp=8, dcp=2), "dcp"), (dict(tp=0), "tp"),
    (dict(kv_cache_dtype="fp4"), "kv_cache_dtype"), (dict(kv_memory_fraction=1.0), "kv_memory_fraction"),
    (dict(graph_capture="sometimes"), "graph_capture"),
])
def test_bad_inputs_are_input_errors(layout, what):
    with pytest.raises(InputError) as error:
        llama8b(**layout)
    assert error.value.what == what


def test_unknown_vendor():
    with pytest.raises(InputError, match="unknown GPU vendor"):
        memory_breakdown(load_card("llama-3.1-8b"), hbm_bytes=H100, vendor="intel")


def test_engine_memory_flags_ask_for_the_pool_the_lever_prices():
    """SGLang's `--mem-fraction-static` counts weights and KV (activations and graphs
    outside); TensorRT-LLM's `free_gpu_memory_fraction` is a share of what weights,
    activations and graphs leave free; vLLM's utilisation counts what the lever counts."""
    from predictor.memory import engine_memory_fraction, lever_fraction_from_static, static_fraction

    m = llama8b(kv_memory_fraction=0.85)
    static = static_fraction(m)
    assert H100 * static - m.weights_bytes == pytest.approx(m.kv_pool_bytes, abs=1)
    assert lever_fraction_from_static(m, static) == pytest.approx(0.85)
    free = H100 - m.weights_bytes - m.activations_bytes - m.graph_bytes
    assert engine_memory_fraction("trtllm", m) * free == pytest.approx(m.kv_pool_bytes, rel=2e-3)
    assert engine_memory_fraction("sglang", m) == math.floor(static * 1000) / 1000 < 0.85
    assert engine_memory_fraction("vllm", m) is None         # the launch passes the lever itself
    assert engine_memory_fraction("atom", m) is None


def test_a_layout_the_model_prices_no_pool_for_is_launched_with_the_lever():
    """A harvest measures what the memory model doubts: asking TensorRT-LLM for 0% of its
    free memory would only stop it from starting (`predictor.feasibility.engine_memory_flag`)."""
    from levers.configuration import Configuration
    from predictor.feasibility import engine_memory_flag, memory_for
    from predictor.hardware import parse_cluster

    card, cluster = load_card("llama-3.1-70b"), parse_cluster("h100")
    tight = Configuration(tp=2, kv_memory_fraction=0.5)
    assert memory_for(card, cluster, tight).kv_pool_bytes <= 0
    assert engine_memory_flag(card, cluster, "trtllm", tight) is None
    roomy = Configuration(tp=2, kv_memory_fraction=0.9)
    assert 0 < engine_memory_flag(card, cluster, "trtllm", roomy) < 1


def test_eplb_redundant_experts_are_stored_beside_the_cards():
    """64 redundant experts on Kimi-K3's 896 at EP8: the routed experts' bytes grow by
    960 / 896 and the KV pool gives that room up (the lever cost no memory before)."""
    card = load_card("kimi-k3")
    plain = memory_breakdown(card, hbm_bytes=288 * 10**9, vendor="nvidia", tp=8, ep=8)
    eplb = memory_breakdown(card, hbm_bytes=288 * 10**9, vendor="nvidia", tp=8, ep=8, eplb_replicas=64)
    grown = eplb.weights_by_component_bytes["routed_experts"] / plain.weights_by_component_bytes["routed_experts"]
    assert grown == pytest.approx(960 / 896, rel=1e-9)
    assert plain.kv_pool_bytes - eplb.kv_pool_bytes == eplb.weights_bytes - plain.weights_bytes > 0
