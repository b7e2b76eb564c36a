"""What one forward launches, and the elementwise bytes it moves (METHOD §2 simulate mode).

Simulate mode charges ``kernel_launch_us`` per kernel (the measured per-kernel occupancy
floor, 4.98 us on MI355X, METHOD §3.15) and prices norms, residual adds, RoPE, the KV
store, activations, quantisation, router top-k, sampling and MoE permutation as
bandwidth-bound passes. This module counts both, unfused (fusions subtract their savings,
`predictor.step.fusions`), for a full-depth forward of one replica layout.

Kernels per layer (unfused; "q" = one quant kernel where the GEMMs it feeds run fp8/fp4
activations, `Precisions.quantized_sites`: a GEMM whose weights are wider than the
activations keeps its input as it is):
- every layer: 2 residual adds, 2 RMSNorms, a q before the attention projections and one
  before the MLP (dense, or the experts and shared experts); 2 hyper-connection mixes under mHC;
- GQA: QKV, RoPE, KV store, attention, O (+ index Q, index K store, top-k with an indexer);
  MLA: fused QKV-A, 2 LoRA norms, Q-B, K absorb, RoPE, KV store, attention, V absorb, O
  (2 fewer without a Q LoRA); compressed (V4): Q-A, Q norm, Q-B, KV, KV norm, RoPE, store,
  attention, 2 O-LoRA GEMMs, 2 compressor kernels (when compressing), indexer 3;
  linear (KDA/GDN/lightning): in-projection, conv, gating, recurrence, gated norm, out;
  + one all-reduce over attention TP; + one DCP reduction under DCP;
- dense MLP: gate/up, activation, q, down, + one all-reduce over the MLP's TP;
- MoE: router, top-k, permutation setup, expert gate/up, activation, q, expert down,
  unpermute/combine; shared experts gate/up, activation, q, down (+ gate, + 2 latent
  projections); exchange: one all-reduce, or dispatch + combine, or all-gather +
  reduce-scatter (attention DP);
- per forward: embedding, final norm, LM head, logits gather (TP > 1), 3 sampling kernels.
``allreduce_algorithm=fused_rmsnorm`` removes one RMSNorm per all-reduce.

Eager mode (graph_capture none, or more rows per rank than the largest captured batch)
issues every kernel from the CPU: `predictor.step.roofline.EAGER_CPU_US_PER_KERNEL`
(8 us) each, the Python and dispatcher work around one kernel of a compiled
(torch.compile/Inductor) or C++ forward.
Measured on the dev corpora: gpt-oss-120b's 1k-token TTFT on B200/vLLM falls from 44 to
27 ms between TP1 and TP8 (host time ~24 ms at every width); the earlier assumption of
25 us per kernel made every width's ~750-kernel prefill CPU-bound at ~19 ms, flat in TP.
Eager decode of a 30-60 layer model (1-2k kernels) stays CPU-bound at 8-16 ms. The GPU
hides CPU time while it is busy, so only the excess of the forward's CPU issue time over its GPU time is
exposed: small-kernel decode steps pay, long prefill kernels hide it. Piecewise capture
issues only the attention kernels (and the graph pieces between them, one per layer) eagerly.
"""

from __future__ import annotations

from dataclasses import dataclass

from levers.configuration import Configuration
from predictor.cards.model_card import AttentionGroup, AttentionKind, ModelCard
from predictor.memory import dtype_bytes, heads_per_rank
from predictor.step.comm_cost import EP_BACKENDS
from predictor.step.operators import Precisions

SAMPLING_KERNELS = 3
BF16, FP32, TOPK_ENTRY = 2, 4, 8


@dataclass(frozen=True, slots=True)
class KernelCounts:
    per_forward: int
    attention: int       # kernels that stay eager under piecewise capture
    per_forward_head: int  # embedding, final norm, LM head, gather, sampling


def _attention_kernels(group: AttentionGroup) -> int:
    index = 3 if group.indexer_heads else 0
    if group.kind is AttentionKind.MLA:
        return 10 - (0 if group.q_lora_rank else 2) + index
    if group.kind is AttentionKind.COMPRESSED:
        return 11 + (2 if group.compress_ratio else 0) + index
    if group.kind.is_linear:
        return 6
    return 5 + index


def count_kernels(card: ModelCard, config: Configuration, precisions: Precisions) -> KernelCounts:
    """Kernels of one full-depth forward (see the module docstring)."""
    sites = precisions.quantized_sites
    q_attention, q_dense = int("attention" in sites), int("dense_mlp" in sites)
    q_routed, q_shared = int("routed_experts" in sites), int("shared_experts" in sites)
    atp, dp, tp = config.attention_tp, config.attention_dp, config.tp
    mlp_tp = config.dense_tp
    moe_layers = card.moe_layers if card.is_moe else 0
    dense_layers = card.num_layers - moe_layers
    per_layer_common = 4 + q_attention + (2 if card.hyper_connection_mult > 1 else 0)
    total = card.num_layers * per_layer_common + dense_layers * q_dense + moe_layers * len(moe_input_formats(precisions))
    attention_core = 0
    for group in card.attention:
        total += group.num_layers * (_attention_kernels(group) + (1 if atp > 1 else 0) + (1 if config.dcp > 1 else 0))
        attention_core += group.num_layers
    total += dense_layers * (3 + q_dense + (1 if mlp_tp > 1 else 0))
    if moe_layers:
        shared = (3 + q_shared if card.num_shared_experts else 0) + (1 if card.shared_expert_gate else 0)
        shared += 2 if card.latent_moe_dim else 0
        backend = config.all_to_all_backend in EP_BACKENDS and config.ep > 1
        exchange = 2 if (backend or dp > 1) else (1 if tp > 1 else 0)
        total += moe_layers * (3 + 4 + q_routed + 1 + shared + exchange)
    if config.allreduce_algorithm == "fused_rmsnorm":
        total -= card.num_layers * (1 if atp > 1 else 0) + (dense_layers * (1 if mlp_tp > 1 else 0))
    head = 3 + (1 if tp > 1 else 0) + SAMPLING_KERNELS
    return KernelCounts(total + head, attention_core, head)


@dataclass(frozen=True, slots=True)
class ElementwiseBytes:
    """Unfused elementwise bytes of one full-depth forward, by what they scale with."""

    per_rank_row: float   # norms, adds, quant, RoPE, KV store, dense/shared activations, router top-k
    per_lm_row: float     # embedding, final norm, logits written and sampled
    per_moe_row: float    # permutation, expert activation (+ quant), unpermute/combine


def elementwise_bytes(card: ModelCard, config: Configuration, precisions: Precisions) -> ElementwiseBytes:
    """Bytes per row of the bandwidth-bound kernels (see the module docstring)."""
    atp, sites = config.attention_tp, precisions.quantized_sites
    act = precisions.site_activation_bytes
    mlp_tp = config.dense_tp
    hidden, mult = card.hidden_size, card.hyper_connection_mult
    per_layer = 2 * (3 * hidden * mult * BF16) + 2 * (2 * hidden * BF16)  # 2 adds (x, r -> r), 2 norms
    if mult > 1:  # mHC: each sub-layer mixes the streams in (mult h -> h) and out (h + mult h -> mult h)
        per_layer += 2 * (3 * mult + 2) * hidden * BF16
    if "attention" in sites:
        per_layer += hidden * (BF16 + act("attention"))
    rows = card.num_layers * per_layer
    for group in card.attention:
        rows += group.num_layers * _rope_and_store_bytes(group, atp, precisions.kv_bytes)
    moe_layers = card.moe_layers if card.is_moe else 0
    dense_layers = card.num_layers - moe_layers
    dense_inner = card.dense_intermediate_size / mlp_tp
    if "dense_mlp" in sites:
        rows += dense_layers * hidden * (BF16 + act("dense_mlp"))
    rows += dense_layers * _activation_bytes(dense_inner, act("dense_mlp"), "dense_mlp" in sites)
    if moe_layers:
        shared_inner = card.num_shared_experts * card.shared_intermediate_size / mlp_tp
        rows += moe_layers * sum(hidden * (BF16 + dtype_bytes(f, precisions.vendor)) for f in moe_input_formats(precisions))
        rows += moe_layers * (_activation_bytes(shared_inner, act("shared_experts"), "shared_experts" in sites)
                              + 2 * card.num_experts * FP32 + 3 * card.top_k * TOPK_ENTRY)
    vocab = card.vocab_size / config.tp
    lm_row = hidden * (precisions.embedding_bytes + BF16) + 2 * hidden * BF16 + vocab * BF16 + 2 * vocab * FP32
    moe_row = 0.0
    if moe_layers:
        width, inner = card.expert_hidden_size, card.moe_intermediate_size / max(1, config.moe_tp)
        routed = act("routed_experts")
        moe_row = moe_layers * (2 * width * routed + _activation_bytes(inner, routed, "routed_experts" in sites)
                                + 2 * width * BF16)
    return ElementwiseBytes(rows, lm_row, moe_row)


def moe_input_formats(precisions: Precisions) -> set[str]:
    """The format a MoE layer's input is quantised to, when its experts or shared experts
    take it quantised: one quant kernel, at the routed experts' format where they do.
    (Routed experts at W4A4 beside W8A8 shared experts would need two; not counted so,
    as the shipped anchors were fitted.)"""
    quantized = [c for c in ("routed_experts", "shared_experts") if c in precisions.quantized_sites]
    return {precisions.gemm_activation(quantized[0])} if quantized else set()


def _activation_bytes(inner: float, act: float, quant: bool) -> float:
    """SiLU*mul (reads 2I, writes I in BF16) and its quant kernel."""
    return inner * (3 * BF16) + (inner * (BF16 + act) if quant else 0.0)


def _rope_and_store_bytes(group: AttentionGroup, atp: int, kv_bytes: float) -> float:
    """RoPE on q and k (read + write) and the KV store of one token, one layer."""
    if group.kind.is_linear:
        return 0.0
    heads = group.num_heads / atp
    if group.kind is AttentionKind.MLA:
        rope_values = (heads + 1) * group.qk_rope_head_dim
        stored = (group.kv_lora_rank + group.qk_rope_head_dim)
    elif group.kind is AttentionKind.COMPRESSED:
        rope_values = (heads + 1) * (group.qk_rope_head_dim or group.head_dim)
        stored = group.head_dim
    else:
        kv_heads = heads_per_rank(group.num_kv_heads, atp)
        rope_values = (heads + kv_heads) * group.head_dim
        stored = 2 * kv_heads * group.head_dim
    return 2 * rope_values * BF16 + stored * (BF16 + kv_bytes)
