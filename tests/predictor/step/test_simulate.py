"""Simulate mode (METHOD §2): the step rebuilt per operator, rank-only.

Sanity checks against first-principles numbers, each with its stated tolerance:
- Llama-3.1-8B TP1 H100 BF16, decode batch 1: weight bytes over HBM bandwidth
  (16.06 GB / 3.35 TB/s = 4.8 ms) within 0.8-1.6x (the 0.8 streaming efficiency and the
  per-kernel launch floor put it near 1.4x);
- prefill of 8k tokens is compute-bound: 2 * params * n / BF16 peak within 1.0-2.0x (GEMM
  efficiency 0.79 at 8k rows plus attention's causal FLOPs).
"""

from __future__ import annotations

import math

import pytest

from levers.configuration import Configuration
from predictor.cards.registry import load_card
from predictor.hardware import parse_cluster
from predictor.step.cost import Mode, StepModel
from predictor.step.imbalance import imbalance_ratio
from predictor.step.operators import attention_op, resolve_precisions
from predictor.step.simulate import TERMS, SimulateStepModel, moe_share
from predictor.step.speculation import acceptance_curve
from predictor.step.transfer import pipeline_host_us

REL = 1e-9


def _model(name: str, cluster: str, **levers) -> SimulateStepModel:
    return SimulateStepModel(load_card(name), parse_cluster(cluster), "vllm", Configuration(**levers))


@pytest.fixture(scope="module")
def llama():
    return _model("Llama-3.1-8B", "h100x1")


def test_protocol_and_flags(llama):
    assert isinstance(llama, StepModel)
    assert llama.mode is Mode.RANK_ONLY and llama.flags == ("rank-only",) and llama.anchor_id is None
    assert llama.tokens_per_step == 1.0
    step = llama.decode(8, 1024)
    assert tuple(name for name, _ in step.terms) == TERMS
    assert llama.decode_us(8, 1024) == pytest.approx(step.total_us, rel=REL)
    assert llama.prefill_us(2048, 2, 100) == pytest.approx(llama.prefill(2048, 2, 100).total_us, rel=REL)
    assert llama.mixed_us(512, 8, 1024) == pytest.approx(llama.mixed(512, 8, 1024).total_us, rel=REL)


def test_llama_decode_batch1_is_weight_bound(llama):
    card, gpu = load_card("Llama-3.1-8B"), parse_cluster("h100x1").gpu
    ideal_us = card.total_params() * 2 / (gpu.hbm_bandwidth_gbps * 1e9) * 1e6
    ratio = llama.decode_us(1, 1024) / ideal_us
    assert 0.8 <= ratio <= 1.6, ratio


def test_llama_prefill_8k_is_compute_bound(llama):
    card, gpu = load_card("Llama-3.1-8B"), parse_cluster("h100x1").gpu
    ideal_us = 2 * card.total_params() * 8192 / gpu.peak_flops("bf16") * 1e6
    step = llama.prefill(8192, 1, 0)
    assert 1.0 <= step.total_us / ideal_us <= 2.0, step.total_us / ideal_us
    assert step.get("gemm") > 0.6 * step.total_us


def test_tp2_is_faster_but_not_twice(llama):
    tp1 = llama.decode_us(1, 1024)
    tp2 = _model("Llama-3.1-8B", "h100", tp=2).decode_us(1, 1024)
    assert tp1 / 2 < tp2 < tp1


def test_ep8_pays_imbalance_at_small_batch():
    ep1 = _model("DeepSeek-V3", "mi355x", tp=8, ep=1).decode(1, 2048)
    ep8 = _model("DeepSeek-V3", "mi355x", tp=8, ep=8).decode(1, 2048)
    assert ep8.get("moe") > 1.5 * ep1.get("moe")
    assert ep8.get("gemm") == pytest.approx(ep1.get("gemm"), rel=REL)   # router and shared experts unchanged
    assert 0.0 < moe_share(ep8) < 1.0
    ratio_n, _ = imbalance_ratio(load_card("DeepSeek-V3"), Configuration(tp=8, ep=8), Configuration(tp=8), 1)
    assert ratio_n > 2.0


def test_dense_model_has_no_moe_term(llama):
    assert llama.decode(64, 1024).get("moe") == 0.0 and moe_share(llama.decode(64, 1024)) == 0.0


def test_attention_by_type():
    card = load_card("Llama-3.1-8B")
    gqa = attention_op(card.attention[0], 1, 1, 2.0)
    assert gqa.decode_us(4, 2000, 1, 1e9, 3e6) == pytest.approx(2 * gqa.decode_us(4, 1000, 1, 1e9, 3e6), rel=REL)
    oss = load_card("gpt-oss-120b")
    window = next(g for g in oss.attention if g.window_tokens)
    sliding = attention_op(window, 1, 1, 2.0)
    assert sliding.attended(100_000) == window.window_tokens
    linear = attention_op(next(g for g in load_card("Qwen3.5-397B-A17B").attention if g.kind.is_linear), 8, 1, 2.0)
    assert linear.decode_us(4, 1000, 1, 1e9, 3e6) == linear.decode_us(4, 100_000, 1, 1e9, 3e6) > 0
    v4 = load_card("DeepSeek-V4-Pro")
    csa = attention_op(next(g for g in v4.attention if g.compress_ratio == 4), 8, 1, 2.0)
    context = 400_000
    assert csa.attended(context) == 128 + csa.topk_tokens      # window + indexer top-k
    assert csa.indexed(context) == context / 4
    mla = attention_op(load_card("DeepSeek-V3").attention[0], 8, 1, 2.0)
    mla_tp1 = attention_op(load_card("DeepSeek-V3").attention[0], 1, 1, 2.0)
    assert mla.entry_bytes == mla_tp1.entry_bytes == (512 + 64) * 2    # latent not sharded by TP
    assert attention_op(load_card("DeepSeek-V3").attention[0], 8, 2, 2.0).entry_bytes == mla.entry_bytes / 2


def test_an_fp8_kv_cache_holds_twice_the_tokens_but_reads_as_long():
    """A quantized cache is read at the BF16 cache's time per token (the kernels
    dequantise as they read, `predictor.step.operators`): its gain is capacity."""
    from predictor.memory import memory_breakdown
    from predictor.step.operators import KV_READ_MIN_BYTES

    bf16 = _model("Llama-3.1-8B", "h100x1").decode(64, 8192).get("attention")
    fp8 = _model("Llama-3.1-8B", "h100x1", kv_cache_dtype="fp8").decode(64, 8192).get("attention")
    assert fp8 == pytest.approx(bf16, rel=REL) and bf16 > 0
    card = load_card("Llama-3.1-8B")
    group = card.attention[0]
    assert attention_op(group, 1, 1, 1.0).entry_bytes == attention_op(group, 1, 1, KV_READ_MIN_BYTES).entry_bytes
    assert attention_op(group, 1, 1, 4.0).entry_bytes == 2 * attention_op(group, 1, 1, 2.0).entry_bytes
    h100 = parse_cluster("h100x1").gpu
    pools = [memory_breakdown(card, hbm_bytes=int(h100.hbm_gb * 1e9), vendor="nvidia", kv_cache_dtype=kv)
             for kv in ("bf16", "fp8")]
    assert pools[1].kv_bytes_per_token * 2 == pools[0].kv_bytes_per_token
    assert pools[1].max_concurrency >= 2 * pools[0].max_concurrency - 1


def test_precision_semantics():
    card, vendor = load_card("DeepSeek-V3"), "amd"
    p = resolve_precisions(card, Configuration(), vendor)
    assert (p.weight, p.activation, p.expert) == ("fp8", "fp8", "fp8")        # unset activation follows fp8 weights
    kimi = resolve_precisions(load_card("Kimi-K3"), Configuration(), vendor)
    assert (kimi.expert, kimi.activation, kimi.expert_bytes) == ("fp4", "bf16", 4.25 / 8)
    bf16 = _model("Llama-3.1-8B", "h100x1")
    fp8 = _model("Llama-3.1-8B", "h100x1", weight_dtype="fp8")
    assert 0.45 < fp8.decode(1, 128).get("gemm") / bf16.decode(1, 128).get("gemm") < 0.55
    # fp4 weights with bf16 activations on Hopper: weight-only quantisation, compute stays bf16.
    fp4 = _model("Llama-3.1-8B", "h100x1", weight_dtype="fp4", activation_dtype="bf16")
    assert fp4.prefill(8192).get("gemm") == pytest.approx(bf16.prefill(8192).get("gemm"), rel=0.05)
    fp8_act = _model("Llama-3.1-8B", "h100x1", weight_dtype="fp8", activation_dtype="fp8")
    assert fp8_act.prefill(8192).get("gemm") < 0.6 * bf16.prefill(8192).get("gemm")


def test_attention_dp_replicates_weights_and_splits_requests():
    tp = _model("DeepSeek-V3", "mi355x", tp=8, ep=8).decode(64, 4096)
    dp = _model("DeepSeek-V3", "mi355x", tp=8, ep=8, attention_dp=8).decode(64, 4096)
    assert dp.get("gemm") > 2 * tp.get("gemm")                 # attention weights whole on every rank
    assert dp.get("attention") < tp.get("attention") / 4     # each rank reads 8 requests' latents, not 64
    assert dp.get("moe") == pytest.approx(tp.get("moe"), rel=REL)   # the MoE sees the stage's tokens either way


def test_attention_dp_prompt_stays_on_its_rank():
    """A prompt is not split across attention-DP ranks: one prompt's prefill on DP8 runs
    its attention and dense layers whole on its rank (attention TP1), slower than on TP8
    where they shard; eight prompts spread one per rank cost about what one does."""
    tp = _model("DeepSeek-V3", "mi355x", tp=8, ep=8)
    dp = _model("DeepSeek-V3", "mi355x", tp=8, ep=8, attention_dp=8)
    one_tp, one_dp = tp.prefill(4096, 1), dp.prefill(4096, 1)
    assert one_dp.get("attention") > 4 * one_tp.get("attention")
    assert one_dp.get("gemm") > 4 * one_tp.get("gemm")
    eight = dp.prefill(8 * 4096, 8)
    assert eight.get("attention") == pytest.approx(one_dp.get("attention"), rel=REL)   # one prompt per rank
    assert dp.prefill(9 * 4096, 9).get("attention") == pytest.approx(2 * one_dp.get("attention"), rel=REL)
    # a mixed step: its chunk on one rank when the caller counts one prompt, spread when not
    counted = dp.mixed_us(4096, 64, 2048, prompts=1)
    spread = dp.mixed_us(4096, 64, 2048)
    assert counted > 2 * spread
    assert tp.mixed_us(4096, 64, 2048, prompts=1) == pytest.approx(tp.mixed_us(4096, 64, 2048), rel=REL)


def test_speculation_verify_step_and_drafter():
    plain = _model("DeepSeek-V3", "mi355x", tp=8, ep=8)
    mtp = _model("DeepSeek-V3", "mi355x", tp=8, ep=8, spec_method="mtp", spec_depth=3)
    assert mtp.tokens_per_step == pytest.approx(acceptance_curve("DeepSeek-V3", "mtp").length(3), rel=REL)
    verify, step = mtp.decode(16, 2048), plain.decode(16, 2048)
    assert verify.get("speculation") > 0 and step.get("speculation") == 0
    assert verify.get("moe") == pytest.approx(plain.decode(64, 2048).get("moe"), rel=REL)   # b * (k + 1) tokens
    ngram = _model("Llama-3.1-8B", "h100x1", spec_method="ngram", spec_depth=4)
    assert ngram.decode(8, 1024).get("speculation") == 0.0 and ngram.tokens_per_step > 1
    override = SimulateStepModel(load_card("Kimi-K3"), parse_cluster("mi355x"), "vllm",
                                 Configuration(tp=8, ep=8, spec_method="dspark", spec_depth=7),
                                 acceptance=(1.18, 1.3, 1.4, 1.5, 1.55, 1.6, 1.68))
    assert override.tokens_per_step == 1.68


def test_pipeline_term_is_equation_4():
    model = _model("Llama-3.1-70B", "h100", tp=4, pp=2)
    gpu = parse_cluster("h100").gpu
    step = model.decode(1, 1024)
    hops = model.comm_model.hops_us(1)
    assert step.get("pipeline") == pytest.approx(hops + 2 * gpu.pp_hop_overhead_us + pipeline_host_us(1), rel=REL)
    full = model.decode(8, 1024)     # 8 clients, 2 stages: micro-batches of 4, both stages add host time
    assert full.get("pipeline") == pytest.approx(model.comm_model.hops_us(4) + 2 * gpu.pp_hop_overhead_us
                                                 + 2 * pipeline_host_us(4), rel=REL)
    no_pipeline = _model("Llama-3.1-70B", "h100", tp=4)      # the full-depth forward at ceil(b/p) = 4
    assert full.get("gemm") == pytest.approx(no_pipeline.decode(4, 1024).get("gemm"), rel=REL)


def test_graph_capture_and_eager():
    full = _model("DeepSeek-V3", "mi355x", tp=8).decode(1, 1024)
    eager = _model("DeepSeek-V3", "mi355x", tp=8, graph_capture="none").decode(1, 1024)
    assert eager.get("launch") > full.get("launch")
    big = _model("Llama-3.1-8B", "h100x1", graph_capture="none").prefill(8192)
    assert big.get("launch") == pytest.approx(_model("Llama-3.1-8B", "h100x1").prefill(8192).get("launch"), rel=REL)


def test_prefill_and_mixed(llama):
    short, longer = llama.prefill(1024), llama.prefill(2048)
    assert longer.get("attention") > 2 * short.get("attention")       # causal attention grows as n^2
    with_context = llama.prefill(1024, 1, 8192)
    assert with_context.get("attention") > short.get("attention")
    mixed = llama.mixed_us(1024, 32, 2048)
    assert max(llama.prefill_us(1024), llama.decode_us(32, 2048)) < mixed
    assert mixed < llama.prefill_us(1024) + llama.decode_us(32, 2048)    # one set of launches and weight reads
    assert llama.mixed_us(0, 32, 2048) == pytest.approx(llama.decode_us(32, 2048), rel=REL)


def test_cross_node_tensor_parallel_costs_more_communication():
    inside = _model("Llama-3.1-70B", "h100x8x2", tp=8).decode(64, 1024).get("communication")
    across = _model("Llama-3.1-70B", "h100x8x2", tp=16).decode(64, 1024).get("communication")
    assert across > inside > 0
    assert math.isfinite(across)
