"""Per-GPU memory of one replica layout, fully analytical (METHOD §3.9).

Weights, KV cache, linear-attention state, activations/workspace and graph memory on the
worst GPU of a replica, the KV pool left over and the largest concurrency it holds.

Weights by component and stored precision, the drafter, TP subgroups and DWDP's staging
buffers: `predictor.cards.weights` (its docstring has the sharding rules); precisions per
component: `predictor.cards.precision` (recipes, explicit FP4 formats). Layers split over
`pp` stages, each layer kind's count rounded up per stage (the worst stage); attention runs
as `attention_dp` ranks of attention-TP `tp / attention_dp`; `dcp` shards the per-token KV
sequence-wise over the attention-TP group (MLA's latent, which TP would replicate, is
partitioned instead: each GPU keeps 1/dcp of every sequence's tokens).

KV per token per layer: GQA `2 * kv_heads * head_dim`, heads sharded by attention TP
until it exceeds the KV heads (then one head per rank); MLA `kv_lora_rank +
qk_rope_head_dim`, not sharded; DSA/MSA indexer keys 132 B per token (FP8 + fp32 scale per
128, as vLLM/SGLang store them); DeepSeek-V4 (its record's derived formula, aiconfigurator
`deepseek_v4`): `head_dim / ratio` per token, FP4 indexer keys `index_head_dim / 2 / 4`
per token at ratio 4, plus a 128-token window and fp32 compressor state per sequence.
Sliding-window layers keep `min(context, window)` tokens. Linear layers keep a fixed state
per sequence (KDA conv `3*H*hd*(k-1)` bf16 + recurrent `H*hd*hd` fp32; GDN conv
`(2*nk*dk + nv*dv)*(k-1)` bf16 + recurrent `nv*dv*dk` fp32; lightning `H*hd*hd` fp32),
heads sharded by attention TP. `dcp` divides the per-token KV only. Engine page rounding
(kv_block_size) and the `S // ratio` floor are ignored. The drafter's own layers add their
KV and state (MTP: its softmax layers; EAGLE-3: one GQA layer of 8 KV heads; DSpark: three
mean target layers). A sequence at `context_tokens`
occupies `context * kv_bytes_per_token + state_bytes_per_sequence`, where the fixed part
holds the linear state and the window/compressor bytes (`window_bytes_per_sequence`).

Activations/workspace (an estimate to calibrate, in the spirit of aiconfigurator's
token-proportional activation term): per token of the step budget on a rank, four
residual-width bf16 buffers (times the mHC multiplier) plus the widest per-GPU
intermediate (attention projections, dense MLP, shared experts) in the activation dtype;
per token of the replica's batch, the MoE workspace of its `top_k / ep` expert copies
(`2 * moe_intermediate / moe_tp` + expert width); fp32 logits for
`min(tokens, max_captured_batch)` rows of the vocab shard. Buffers are reused across
layers. Graph memory: none without capture, else 0.25 GB + 4 MB per captured batch slot
(an assumption: engines report 0.5-2 GB for 256-512 slots).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from levers.errors import InputError, accepted_list
from predictor.cards.model_card import AttentionGroup, AttentionKind, Dtype, ModelCard
from predictor.cards.precision import component_dtypes, stored_bytes
from predictor.cards.weights import EAGLE3_HEAD_DIM, EAGLE3_KV_HEADS, Layout, weight_table
from predictor.hardware import FP4_BITS_PER_VALUE_BY_VENDOR
from predictor.step.speculation import DSPARK_LAYERS
from predictor.units import BYTES_PER_GB

HBM_LEGAL_FRACTION = 0.9          # the lever's cap (`levers.catalog`, lever 26); the model itself takes (0, 1)
FP4_BYTES = {vendor: bits / 8 for vendor, bits in FP4_BITS_PER_VALUE_BY_VENDOR.items()}
DTYPE_BYTES = {Dtype.BF16: 2.0, Dtype.FP8: 1.0}
GRAPH_BASE_BYTES = 0.25 * BYTES_PER_GB
GRAPH_BYTES_PER_BATCH = 4e6
GRAPH_CAPTURES = ("none", "piecewise", "full")
RESIDUAL_BUFFERS = 4
DSA_INDEX_KEY_BYTES = 132          # 128 FP8 values + one fp32 scale per 128
STATE_CONV_BYTES, STATE_RECURRENT_BYTES = 2, 4


@dataclass(frozen=True)
class MemoryBreakdown:
    """Per-GPU memory of a replica (bytes unless `_gb`); see the module docstring.

    KV and state sizes are per GPU that holds part of a sequence (its attention-DP rank's
    GPUs, or every attention-TP GPU), summed over the worst PP stage's layers. `fits` iff
    weights + activations + graphs + one sequence at `context_tokens` fit in 90% of HBM and
    the pool left at `kv_memory_fraction` holds that sequence.
    """

    weights_by_component_bytes: dict[str, int]   # keys of predictor.cards.weights.WEIGHT_TABLE on the layout
    weights_bytes: int
    activations_bytes: int
    graph_bytes: int
    kv_bytes_per_token: int
    state_bytes_per_sequence: int      # every fixed per-sequence byte: linear state + window part
    hbm_bytes: int
    usable_bytes: int                  # hbm_bytes * kv_memory_fraction
    kv_pool_bytes: int                 # usable - weights - activations - graphs (may be negative)
    max_concurrency: int               # sequences at context_tokens the whole replica holds
    fits: bool
    reason: str | None = None
    window_bytes_per_sequence: int = 0  # of the fixed part: sliding-window KV and V4 compressor state
    context_tokens: int = 0
    dtypes_by_component: dict[str, str] = field(default_factory=dict)   # stored dtype of each weight key
    kv_cache_dtype: str = "bf16"
    attention_dp: int = 1               # ranks that each hold whole sequences (max_concurrency's factor)
    drafter_kv_bytes_per_token: int = 0   # the drafter's own layers (not in kv_bytes_per_token: the
    drafter_bytes_per_sequence: int = 0   # KV hand-off moves the target's cache)

    @property
    def cache_bytes_per_token(self) -> int:
        """Target and drafter KV per token per GPU (what the pool holds per token)."""
        return self.kv_bytes_per_token + self.drafter_kv_bytes_per_token

    def sequences_at(self, context_tokens: int) -> tuple[int, int]:
        """(bytes per GPU one sequence of ``context_tokens`` takes, drafter included, and the
        sequences of that length the KV pool holds over the replica's attention-DP ranks)."""
        per_sequence = (context_tokens * self.cache_bytes_per_token + self.state_bytes_per_sequence
                        + self.drafter_bytes_per_sequence)
        fitting = max(0, self.kv_pool_bytes) // per_sequence * self.attention_dp if per_sequence else 0
        return per_sequence, fitting

    @property
    def bytes_per_sequence(self) -> int:
        """Bytes one sequence at `context_tokens` occupies on each GPU holding it."""
        return self.sequences_at(self.context_tokens)[0]

    def to_json(self) -> dict:
        gb = lambda value: round(value / BYTES_PER_GB, 3)  # noqa: E731
        return {
            "weights_per_gpu_gb": gb(self.weights_bytes),
            "weights_by_component_gb": {k: gb(v) for k, v in self.weights_by_component_bytes.items()},
            "weight_dtypes_by_component": dict(self.dtypes_by_component),
            "kv_cache_dtype": self.kv_cache_dtype,
            "activations_gb": gb(self.activations_bytes), "graph_gb": gb(self.graph_bytes),
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "state_bytes_per_sequence": self.state_bytes_per_sequence,
            "window_bytes_per_sequence": self.window_bytes_per_sequence,
            "drafter_kv_bytes_per_token": self.drafter_kv_bytes_per_token,
            "drafter_bytes_per_sequence": self.drafter_bytes_per_sequence,
            "bytes_per_sequence": self.bytes_per_sequence, "context_tokens": self.context_tokens,
            "hbm_gb": gb(self.hbm_bytes), "usable_gb": gb(self.usable_bytes),
            "kv_pool_per_gpu_gb": gb(max(0, self.kv_pool_bytes)),   # short of room: `reason` says by how much
            "max_concurrency": self.max_concurrency,
            "fits": self.fits, "reason": self.reason,
        }


def lever_fraction_from_static(memory: MemoryBreakdown, static_fraction: float) -> float:
    """SGLang's `--mem-fraction-static` as the `kv_memory_fraction` lever. SGLang's share
    holds the weights and the KV pool; activations and graphs live in the rest of HBM
    (its `server_args`: "the fraction of the memory used for static allocation (model
    weights and KV cache memory pool)"). The lever's share holds all four (PRODUCT.md
    lever 26), so the same pool is the static share plus the step's workspace."""
    return static_fraction + (memory.activations_bytes + memory.graph_bytes) / memory.hbm_bytes


def static_fraction(memory: MemoryBreakdown) -> float:
    """The lever's share as SGLang's `--mem-fraction-static` (`lever_fraction_from_static`'s inverse)."""
    return (memory.usable_bytes - memory.activations_bytes - memory.graph_bytes) / memory.hbm_bytes


def free_memory_fraction(memory: MemoryBreakdown) -> float:
    """The lever's KV pool as TensorRT-LLM's `free_gpu_memory_fraction`: its share of the
    memory left free once weights, activations and graphs are allocated (the engine sizes
    its cache after a warm-up step), so the same pool is asked for."""
    free = memory.hbm_bytes - memory.weights_bytes - memory.activations_bytes - memory.graph_bytes
    return max(0.0, memory.kv_pool_bytes) / free if free > 0 else 0.0


STATIC_SHARE_ENGINES, FREE_SHARE_ENGINES = frozenset({"sglang"}), frozenset({"trtllm"})


def engine_memory_fraction(engine: str, memory: MemoryBreakdown) -> float | None:
    """The value of ``engine``'s own memory flag that asks for the lever's KV pool:
    SGLang's `--mem-fraction-static` (`static_fraction`), TensorRT-LLM's
    `free_gpu_memory_fraction` (`free_memory_fraction`); None where the flag counts what
    the lever counts (vLLM's and ATOM's `--gpu-memory-utilization`: the launch passes the
    lever). The shares are rounded down to 3 decimals, so the engine never takes more than
    the memory model priced."""
    if str(engine) in STATIC_SHARE_ENGINES:
        value = static_fraction(memory)
    elif str(engine) in FREE_SHARE_ENGINES:
        value = free_memory_fraction(memory)
    else:
        return None
    return math.floor(max(0.0, value) * 1000) / 1000


def dtype_bytes(dtype: Dtype | str, vendor: str) -> float:
    """Bytes per stored value of a precision on a vendor's platform (explicit FP4 formats
    included, `predictor.cards.precision.stored_bytes`)."""
    if vendor not in FP4_BYTES:
        raise InputError("vendor", f"unknown GPU vendor '{vendor}'", accepted_list(FP4_BYTES))
    return stored_bytes(str(dtype), vendor)


def memory_breakdown(card: ModelCard, *, hbm_bytes: int, vendor: str, tp: int = 1, pp: int = 1, ep: int = 1,
                     attention_dp: int = 1, dcp: int = 1, weight_dtype: str | None = None,
                     expert_dtype: str | None = None, activation_dtype: str | None = None,
                     kv_cache_dtype: str | None = None, kv_memory_fraction: float = 0.9,
                     max_batched_tokens: int = 8192, max_captured_batch: int = 256,
                     graph_capture: str = "full", context_tokens: int = 2048, spec_method: str = "none",
                     tp_subgroup: int = 1, dwdp: int = 1, eplb_replicas: int = 0) -> MemoryBreakdown:
    """The per-GPU memory breakdown of `card` on one replica layout (METHOD §3.9);
    ``eplb_replicas`` redundant experts are stored beside the card's (`weights.Layout`)."""
    layout = _checked_layout(tp, pp, ep, attention_dp, dcp, tp_subgroup, dwdp, eplb_replicas)
    _check_inputs(vendor, kv_memory_fraction, graph_capture, context_tokens, max_batched_tokens)
    native = card.native_dtypes
    _dtype("expert_dtype", expert_dtype, native.expert)
    dtypes = component_dtypes(card, weight_dtype, expert_dtype)
    kv_dtype = _dtype("kv_cache_dtype", kv_cache_dtype, native.kv_cache, (Dtype.BF16, Dtype.FP8))
    act_bytes = dtype_bytes(_dtype("activation_dtype", activation_dtype, Dtype.BF16), vendor)
    table = weight_table(card, layout, dtypes, vendor, spec_method)
    target = _cache(card, layout, DTYPE_BYTES[kv_dtype], context_tokens)
    kv_token, window, linear_state = target
    state = linear_state + window
    draft_token, draft_fixed = _drafter_cache(card, layout, DTYPE_BYTES[kv_dtype], context_tokens, spec_method, target)
    activations = _activations(card, layout, act_bytes, max_batched_tokens, max_captured_batch)
    graph = 0 if graph_capture == "none" else int(GRAPH_BASE_BYTES + GRAPH_BYTES_PER_BATCH * max_captured_batch)
    weights_bytes = table.total_bytes
    per_sequence = context_tokens * (kv_token + draft_token) + state + draft_fixed
    usable = int(hbm_bytes * kv_memory_fraction)
    pool = usable - weights_bytes - activations - graph
    concurrency = max(0, pool) // per_sequence * layout.attention_dp if per_sequence else 0
    reason = _reason(hbm_bytes, weights_bytes, activations, graph, per_sequence, context_tokens,
                     concurrency, kv_memory_fraction)
    return MemoryBreakdown(
        weights_by_component_bytes=table.bytes_by_component, weights_bytes=weights_bytes,
        activations_bytes=activations, graph_bytes=graph, kv_bytes_per_token=kv_token,
        state_bytes_per_sequence=state, hbm_bytes=hbm_bytes, usable_bytes=usable, kv_pool_bytes=pool,
        max_concurrency=concurrency, fits=reason is None, reason=reason, window_bytes_per_sequence=window,
        context_tokens=context_tokens, dtypes_by_component=table.dtype_by_component,
        kv_cache_dtype=kv_dtype.value, attention_dp=layout.attention_dp, drafter_kv_bytes_per_token=draft_token,
        drafter_bytes_per_sequence=draft_fixed)


# -- inputs ---------------------------------------------------------------------------
def _checked_layout(tp: int, pp: int, ep: int, attention_dp: int, dcp: int, subgroup: int = 1,
                   dwdp: int = 1, redundant_experts: int = 0) -> Layout:
    for name, value in (("tp", tp), ("pp", pp), ("ep", ep), ("attention_dp", attention_dp), ("dcp", dcp),
                        ("tp_subgroup", subgroup), ("dwdp", dwdp)):
        if not isinstance(value, int) or value < 1:
            raise InputError(name, f"{value!r} is not a positive integer", "1, 2, 4, 8, ...")
    if tp % attention_dp:
        raise InputError("attention_dp", f"{attention_dp} does not divide tp={tp}", "1 or a divisor of tp")
    if tp % ep:
        raise InputError("ep", f"{ep} does not divide tp={tp}", "1 or a divisor of tp")
    if (tp // attention_dp) % dcp:
        raise InputError("dcp", f"{dcp} does not divide the attention TP {tp // attention_dp}",
                         "a divisor of tp / attention_dp")
    if attention_dp % subgroup:
        raise InputError("tp_subgroup", f"TS{subgroup} does not divide attention_dp={attention_dp}",
                         "a divisor of the attention-DP ranks")
    if dwdp > 1 and tp != 1:
        raise InputError("dwdp", f"DWDP ranks are single GPUs (tp={tp})", "tp=1 per DWDP rank")
    return Layout(tp, pp, ep, attention_dp, dcp, subgroup, dwdp, redundant_experts)


def _check_inputs(vendor: str, fraction: float, graph_capture: str, context: int, batched: int) -> None:
    if vendor not in FP4_BYTES:
        raise InputError("vendor", f"unknown GPU vendor '{vendor}'", accepted_list(FP4_BYTES))
    if not 0 < fraction < 1:
        raise InputError("kv_memory_fraction", f"{fraction} is outside (0, 1)", "0.5 .. 0.90")
    if graph_capture not in GRAPH_CAPTURES:
        raise InputError("graph_capture", f"unknown value '{graph_capture}'", accepted_list(GRAPH_CAPTURES))
    if context < 1 or batched < 1:
        raise InputError("context_tokens / max_batched_tokens", "must be at least 1 token", "positive integers")


def _dtype(lever: str, value: str | None, native: Dtype, allowed: tuple[Dtype, ...] = tuple(Dtype)) -> Dtype:
    if value is None:
        return native
    if value not in allowed:
        raise InputError(lever, f"unknown precision '{value}'", accepted_list(allowed))
    return Dtype(value)


# -- KV cache and state ---------------------------------------------------------------
def heads_per_rank(heads: int, attention_tp: int) -> int:
    """Heads one attention-TP rank holds: at least one once TP exceeds the heads."""
    return max(1, -(-heads // attention_tp))


def _cache(card: ModelCard, layout: Layout, kv_bytes: float, context: int) -> tuple[int, int, int]:
    """(KV bytes per token, window bytes per sequence, state bytes per sequence) per GPU."""
    per_token = window = state = 0.0
    for group in card.attention:
        layers = layout.per_stage(group.num_layers)
        token, fixed, linear = _group_cache(group, layout.attention_tp, kv_bytes, context)
        per_token += layers * token
        window += layers * fixed
        state += layers * linear
    return math.ceil(per_token / layout.dcp), math.ceil(window), math.ceil(state)


def _drafter_cache(card: ModelCard, layout: Layout, kv_bytes: float, context: int, method: str,
                   target: tuple[int, int, int]) -> tuple[int, int]:
    """(KV bytes per token, fixed bytes per sequence) of the drafter's own layers per GPU:
    MTP ``max(1, mtp_layers)`` softmax layers, EAGLE-3 one GQA layer (8 KV heads of 128),
    DSpark three mean target layers (``target``: the target's `_cache`)."""
    token, fixed, linear = _drafter_layers(card, layout, kv_bytes, context, method, target)
    return math.ceil(token / layout.dcp), math.ceil(fixed + linear)


def _drafter_layers(card: ModelCard, layout: Layout, kv_bytes: float, context: int, method: str,
                    target: tuple[int, int, int]) -> tuple[float, float, float]:
    if method == "mtp":
        softmax = [g for g in card.attention if not g.kind.is_linear] or list(card.attention)
        token, fixed, linear = _group_cache(softmax[0], layout.attention_tp, kv_bytes, context)
        layers = max(1, card.mtp_layers)
        return layers * token, layers * fixed, layers * linear
    if method == "eagle3":
        return 2 * heads_per_rank(EAGLE3_KV_HEADS, layout.attention_tp) * EAGLE3_HEAD_DIM * kv_bytes, 0.0, 0.0
    if method == "dspark":
        share = DSPARK_LAYERS / card.num_layers * layout.pp
        return share * target[0] * layout.dcp, share * target[1], share * target[2]
    return 0.0, 0.0, 0.0


def _group_cache(g: AttentionGroup, atp: int, kv_bytes: float, context: int) -> tuple[float, float, float]:
    """One layer of a group: (per-token KV, fixed window/compressor bytes, linear state)."""
    if g.kind is AttentionKind.GQA:
        token = 2 * heads_per_rank(g.num_kv_heads, atp) * g.head_dim * kv_bytes
        index = DSA_INDEX_KEY_BYTES if g.indexer_heads else 0
        if g.window_tokens:
            return index, min(context, g.window_tokens) * token, 0.0
        return token + index, 0.0, 0.0
    if g.kind is AttentionKind.MLA:
        index = DSA_INDEX_KEY_BYTES if g.indexer_heads else 0
        return (g.kv_lora_rank + g.qk_rope_head_dim) * kv_bytes + index, 0.0, 0.0
    if g.kind is AttentionKind.COMPRESSED:
        return _compressed_cache(g, kv_bytes, context)
    return 0.0, 0.0, _linear_state(g, atp)


def _compressed_cache(g: AttentionGroup, kv_bytes: float, context: int) -> tuple[float, float, float]:
    """DeepSeek-V4 per layer: window + 1/ratio compressed entries + fp32 compressor state
    (+ FP4 indexer keys and the indexer's compressor state at ratio 4)."""
    entry = g.head_dim * kv_bytes
    fixed = min(context, g.window_tokens or 0) * entry
    ratio = g.compress_ratio
    if not ratio:
        return 0.0, fixed, 0.0
    coff = 2 if ratio == 4 else 1
    token = entry / ratio
    fixed += 2 * ratio * coff * g.head_dim * 4
    if g.indexer_head_dim:
        token += g.indexer_head_dim * 0.5 / ratio
        fixed += 2 * ratio * coff * g.indexer_head_dim * 4
    return token, fixed, 0.0


def _linear_state(g: AttentionGroup, atp: int) -> float:
    """Fixed per-sequence state of one linear-attention layer on one attention-TP rank."""
    nv = heads_per_rank(g.linear_num_v_heads, atp)
    dk, dv = g.linear_k_head_dim, g.linear_v_head_dim
    if g.kind is AttentionKind.GDN:
        nk = heads_per_rank(g.linear_num_k_heads, atp)
        conv = (2 * nk * dk + nv * dv) * (g.conv_kernel - 1)
    elif g.kind is AttentionKind.KDA:
        conv = 3 * nv * dk * (g.conv_kernel - 1)
    else:
        conv = 0
    return conv * STATE_CONV_BYTES + nv * dv * dk * STATE_RECURRENT_BYTES


# -- activations and verdict ----------------------------------------------------------
def _attention_width(g: AttentionGroup) -> int:
    """Elements one token's attention projections produce (whole layer, before TP)."""
    if g.kind is AttentionKind.MLA:
        return g.num_heads * (g.head_dim + g.qk_nope_head_dim + g.v_head_dim)
    if g.kind is AttentionKind.GDN:
        return 2 * g.linear_num_k_heads * g.linear_k_head_dim + 2 * g.linear_num_v_heads * g.linear_v_head_dim
    if g.kind in (AttentionKind.KDA, AttentionKind.LIGHTNING):
        return 4 * g.num_heads * g.head_dim
    if g.kind is AttentionKind.COMPRESSED:
        return g.num_heads * g.head_dim
    return (g.num_heads + 2 * g.num_kv_heads) * g.head_dim


def _activations(card: ModelCard, layout: Layout, act_bytes: float, tokens: int, captured: int) -> int:
    """Workspace of one step (module docstring); TP subgroups add the gathered inputs of the
    subgroup's other ranks (their per-GPU widths shrink as their rows grow, so the widest
    intermediate keeps its size)."""
    rank_tokens = -(-tokens // layout.attention_dp)
    dense_tp = layout.attention_tp if layout.attention_dp > 1 else layout.tp
    widest = max([_attention_width(g) / layout.attention_tp for g in card.attention]
                 + [2 * card.dense_intermediate_size / dense_tp,
                    2 * card.num_shared_experts * card.shared_intermediate_size / dense_tp])
    dense = rank_tokens * (RESIDUAL_BUFFERS * card.hidden_size * card.hyper_connection_mult * 2 + widest * act_bytes)
    dense += (layout.subgroup - 1) * rank_tokens * card.hidden_size * act_bytes
    moe_tp = layout.tp // layout.ep
    copies = tokens * card.top_k / layout.ep        # expert copies of the batch's tokens on one GPU
    moe = copies * (2 * card.moe_intermediate_size / moe_tp + card.expert_hidden_size) * act_bytes
    logits = min(rank_tokens, captured) * -(-card.vocab_size // layout.tp) * 4
    return math.ceil(dense + moe + logits)


def _reason(hbm: int, weights: int, activations: int, graph: int, per_sequence: int, context: int,
            concurrency: int, fraction: float) -> str | None:
    needed = weights + activations + graph + per_sequence
    share = max(HBM_LEGAL_FRACTION, fraction)
    limit = hbm * share
    gb = BYTES_PER_GB
    if needed > limit:
        return (f"weights {weights / gb:,.1f} GB + activations {activations / gb:,.1f} GB + graphs "
                f"{graph / gb:,.1f} GB + one {context}-token sequence {per_sequence / gb:,.2f} GB per GPU "
                f"exceed {share:.0%} of HBM ({limit / gb:,.1f} of {hbm / gb:,.1f} GB)")
    if concurrency < 1:
        return (f"kv_memory_fraction={fraction} leaves no room for one {context}-token sequence "
                f"({per_sequence / gb:,.2f} GB per GPU)")
    return None
