"""Per-operator roofline costs of simulate mode (METHOD §2, §3.5).

Every operator is priced on the GPU's datasheet rates as ``max(compute, memory)``:
``flops / (peak(dtype) * eff_c)`` against ``bytes / (HBM BW * eff_bw)``. Launch cost is
not here: the step model adds ``kernel_launch_us`` per kernel it counts.

Efficiency by shape (a documented assumption, rank-only like everything in simulate mode):
- GEMM compute efficiency grows with the rows ``M`` a GEMM streams its weights for:
  ``eff_c(M) = 0.80 * M / (M + 64)`` (0.40 at 64 rows, 0.71 at 512, 0.79 at 8k). Small ``M``
  is therefore bandwidth-bound (its weight bytes dominate); large ``M`` compute-bound.
- Streaming efficiency of weights and activations ``eff_bw = 0.80`` (aiconfigurator's
  empirical memory-bandwidth factor for NVIDIA parts; shared/data/hardware conventions).
- Elementwise kernels (norms, RoPE, activations, permutation) reach 0.70 of HBM bandwidth.
- Attention: decode reads the KV cache at 0.75 of HBM bandwidth, computes at 0.50 of the
  BF16 peak; prefill computes at 0.55 of the BF16 peak. A quantized (FP8, FP4) cache is
  read at the BF16 cache's time per token (``KV_READ_MIN_BYTES``): the kernels dequantise
  it to BF16 as they read, so it holds twice the tokens (capacity, `predictor.memory`)
  but does not halve the read (the shared METHOD §5 counts a KV dtype among the
  settings that run the same kernels). Measured: AIConfigurator's TensorRT-LLM runs of
  FP8 checkpoints have an FP8 cache's capacity (Llama-3.1-70B at TP1, 1k/8k, queues from
  64 clients on H200 and 128 on B200, where FP8 pools hold 40 and 65 such requests, BF16
  ones 20 and 32) and a BF16 read's context slope: read as FP8 with FP8 reads, their TP1
  fits put the difference into the cost per kernel and AIConfigurator cross-width TPOT
  went 9.8 -> 11.1% (docs/SCORES.md, choices measured).

Attention per type, per layer, per attention rank (METHOD §3.9 shapes):
- GQA/MHA reads ``2 * kv_heads_r * head_dim`` values per token of context per request
  (``kv_heads_r`` sharded by attention TP until it exceeds the KV heads); sliding windows
  cap the span; a sparse indexer (MiniMax-M3 MSA, DSA) reads one index key per token
  and attends to its top-k only;
- MLA reads the latent ``kv_lora_rank + qk_rope_head_dim`` (not sharded by TP; ``dcp``
  splits the tokens) and computes the absorbed form at decode, the expanded one at prefill;
- compressed KV (DeepSeek-V4) reads ``c / ratio`` entries (at most the indexer's top-k)
  plus the window, and at ratio 4 the indexer's keys (FP4) of every compressed entry;
- linear attention (KDA, Gated DeltaNet, lightning) reads and writes a fixed state per
  request (fp32 recurrent + bf16 conv), independent of context; prefill runs a chunked
  algorithm at ~6 FLOPs per state element per token.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from levers.configuration import Configuration
from levers.legality import effective_activation_dtype, requantized_components
from levers.precision import DTYPE_BITS, gemm_activation, unset_activation
from predictor.cards.model_card import AttentionGroup, AttentionKind, ModelCard
from predictor.cards.precision import config_dtypes
from predictor.cards.weights import BF16_BYTES
from predictor.hardware import GpuProfile
from predictor.memory import dtype_bytes, heads_per_rank

GEMM_COMPONENTS = ("attention", "dense_mlp", "shared_experts", "routed_experts")   # weights a GEMM streams
LOW_PRECISION_ACTIVATIONS = ("fp8", "fp4")
GEMM_PEAK_EFFICIENCY = 0.80
GEMM_HALF_EFFICIENCY_ROWS = 64.0
GEMM_BW_EFFICIENCY = 0.80
ELEMENTWISE_BW_EFFICIENCY = 0.70
ATTENTION_DECODE_BW_EFFICIENCY = 0.75
KV_READ_MIN_BYTES = BF16_BYTES   # a quantized KV cache is read at the BF16 cache's time per token (module docstring)
ATTENTION_DECODE_COMPUTE_EFFICIENCY = 0.50
ATTENTION_PREFILL_COMPUTE_EFFICIENCY = 0.55
LINEAR_PREFILL_FLOPS_PER_STATE = 6.0
LINEAR_DECODE_FLOPS_PER_STATE = 4.0
DSA_INDEX_KEY_BYTES_PER_DIM = 132 / 128   # FP8 keys plus one fp32 scale per 128 values
V4_INDEX_KEY_BYTES_PER_DIM = 0.5          # FP4 indexer keys (DeepSeek-V4)
STATE_CONV_BYTES, STATE_RECURRENT_BYTES = 2, 4
GB_PER_S_TO_BYTES_PER_US = 1e3
TFLOPS_TO_FLOPS_PER_US = 1e6


def compute_efficiency(rows: float, tile_rows: float = GEMM_HALF_EFFICIENCY_ROWS) -> float:
    """``eff_c(M) = 0.80 * M / (M + tile)``: GEMM compute efficiency at ``M`` rows (tile 64
    on a GPU's tensor cores, `GpuProfile.gemm_tile_rows`)."""
    return GEMM_PEAK_EFFICIENCY * rows / (rows + tile_rows)


def gemm_parts(rows: float, params: float, weight_bytes: float, act_bytes_per_row: float,
               flops_per_us: float, bytes_per_us: float, bw_fraction: float = 1.0,
               rows_per_weight: float | None = None,
               tile_rows: float = GEMM_HALF_EFFICIENCY_ROWS) -> tuple[float, float]:
    """(memory, compute) time of GEMMs with ``params`` weights over ``rows`` rows at the
    prior efficiencies; the roofline is their max (a calibration scales each side).

    ``weight_bytes`` is the bytes of all weights read; ``act_bytes_per_row`` the
    activation bytes read and written per row; ``rows_per_weight`` the rows each weight
    is reused for (``rows`` unless the GEMM is grouped over experts).
    """
    if rows <= 0 or params <= 0:
        return 0.0, 0.0
    reuse = rows if rows_per_weight is None else rows_per_weight
    compute = 2.0 * rows * params / (flops_per_us * compute_efficiency(reuse, tile_rows))
    memory = (weight_bytes + rows * act_bytes_per_row) / (bytes_per_us * GEMM_BW_EFFICIENCY * bw_fraction)
    return memory, compute


def gemm_us(rows: float, params: float, weight_bytes: float, act_bytes_per_row: float,
            flops_per_us: float, bytes_per_us: float, bw_fraction: float = 1.0,
            rows_per_weight: float | None = None) -> float:
    """Roofline time of GEMMs at the prior efficiencies (:func:`gemm_parts`)."""
    return max(gemm_parts(rows, params, weight_bytes, act_bytes_per_row, flops_per_us, bytes_per_us,
                          bw_fraction, rows_per_weight))


def elementwise_us(num_bytes: float, bytes_per_us: float) -> float:
    """A bandwidth-bound elementwise pass over ``num_bytes``."""
    return num_bytes / (bytes_per_us * ELEMENTWISE_BW_EFFICIENCY)


@dataclass(frozen=True, slots=True)
class AttentionOp:
    """One attention group's per-layer cost coefficients on one attention rank.

    Attended tokens at context ``c``: ``min(c, window)`` (window part) plus
    ``min(c / ratio, topk)`` (main part, absent for a pure sliding window); indexer keys
    read: ``c / ratio`` when the group has an indexer.
    """

    num_layers: int
    is_linear: bool
    window_tokens: float          # 0 = no window part
    main_ratio: float             # 0 = no main part; 1 = every token; r = compressed
    topk_tokens: float            # math.inf = dense attention
    has_index: bool
    entry_bytes: float            # per attended token per request (this rank's share)
    decode_entry_flops: float     # per attended token per query
    prefill_entry_flops: float
    index_key_bytes: float        # per indexed token
    index_flops: float            # per indexed token per query
    state_bytes: float            # linear: state read and written per request
    state_flops: float            # linear: per query (decode)
    prefill_state_flops: float    # linear: per token (prefill)

    def attended(self, context: float) -> float:
        window = min(context, self.window_tokens) if self.window_tokens else 0.0
        main = min(context / self.main_ratio, self.topk_tokens) if self.main_ratio else 0.0
        return window + main

    def indexed(self, context: float) -> float:
        return context / self.main_ratio if self.has_index and self.main_ratio else 0.0

    def decode_parts(self, requests: float, context: float, queries: float, flops_per_us: float,
                     bytes_per_us: float) -> tuple[float, float]:
        """(memory, compute) of all layers of the group: ``requests`` requests at
        ``context``, ``queries`` each, at the prior efficiencies."""
        if requests <= 0:
            return 0.0, 0.0
        if self.is_linear:
            num_bytes, flops = requests * self.state_bytes, requests * queries * self.state_flops
        else:
            attended, indexed = self.attended(context), self.indexed(context)
            num_bytes = requests * (attended * self.entry_bytes + indexed * self.index_key_bytes)
            flops = requests * queries * (attended * self.decode_entry_flops + indexed * self.index_flops)
        memory = num_bytes / (bytes_per_us * ATTENTION_DECODE_BW_EFFICIENCY)
        compute = flops / (flops_per_us * ATTENTION_DECODE_COMPUTE_EFFICIENCY)
        return self.num_layers * memory, self.num_layers * compute

    def decode_us(self, requests: float, context: float, queries: float, flops_per_us: float,
                  bytes_per_us: float) -> float:
        return max(self.decode_parts(requests, context, queries, flops_per_us, bytes_per_us))

    def prefill_parts(self, tokens: float, seqs: float, context: float, flops_per_us: float,
                      bytes_per_us: float) -> tuple[float, float]:
        """(memory, compute) of all layers: ``tokens`` new tokens in ``seqs`` sequences
        after ``context`` cached tokens each (causal: a query attends ``context + n/2``
        tokens on average)."""
        if tokens <= 0:
            return 0.0, 0.0
        seqs = max(1.0, seqs)
        if self.is_linear:
            flops, num_bytes = tokens * self.prefill_state_flops, seqs * self.state_bytes
        else:
            span = context + tokens / seqs / 2.0
            flops = tokens * (self.attended(span) * self.prefill_entry_flops + self.indexed(span) * self.index_flops)
            full = context + tokens / seqs
            num_bytes = seqs * (self.attended(full) * self.entry_bytes + self.indexed(full) * self.index_key_bytes)
        compute = flops / (flops_per_us * ATTENTION_PREFILL_COMPUTE_EFFICIENCY)
        memory = num_bytes / (bytes_per_us * ATTENTION_DECODE_BW_EFFICIENCY)
        return self.num_layers * memory, self.num_layers * compute

    def prefill_us(self, tokens: float, seqs: float, context: float, flops_per_us: float,
                   bytes_per_us: float) -> float:
        return max(self.prefill_parts(tokens, seqs, context, flops_per_us, bytes_per_us))


def attention_op(group: AttentionGroup, attention_tp: int, dcp: int, kv_bytes: float) -> AttentionOp:
    """The coefficients of ``group`` on one rank of attention TP ``attention_tp``; a
    cache of ``kv_bytes`` per value is read at no fewer than `KV_READ_MIN_BYTES` (module
    docstring)."""
    kv_bytes = max(kv_bytes, KV_READ_MIN_BYTES)
    layers = group.num_layers
    heads = group.num_heads / attention_tp
    if group.kind.is_linear:
        return _linear_op(group, attention_tp, layers)
    if group.kind is AttentionKind.MLA:
        latent = group.kv_lora_rank + group.qk_rope_head_dim
        decode = 2 * heads * (latent + group.kv_lora_rank)
        prefill = 2 * heads * (group.head_dim + (group.v_head_dim or group.head_dim))
        return _softmax_op(group, layers, latent * kv_bytes / dcp, decode, prefill, DSA_INDEX_KEY_BYTES_PER_DIM,
                           window=0.0, ratio=1.0)
    if group.kind is AttentionKind.COMPRESSED:
        flops = 4 * heads * group.head_dim
        entry = group.head_dim * group.num_kv_heads * kv_bytes / dcp
        return _softmax_op(group, layers, entry, flops, flops, V4_INDEX_KEY_BYTES_PER_DIM,
                           window=float(group.window_tokens or 0), ratio=float(group.compress_ratio or 0))
    kv_heads = heads_per_rank(group.num_kv_heads, max(1, attention_tp // dcp))
    entry = 2 * kv_heads * group.head_dim * kv_bytes / dcp
    flops = 4 * heads * group.head_dim
    if group.window_tokens:
        return _softmax_op(group, layers, entry, flops, flops, DSA_INDEX_KEY_BYTES_PER_DIM,
                           window=float(group.window_tokens), ratio=0.0)
    return _softmax_op(group, layers, entry, flops, flops, DSA_INDEX_KEY_BYTES_PER_DIM, window=0.0, ratio=1.0)


def _softmax_op(group: AttentionGroup, layers: int, entry_bytes: float, decode_flops: float,
                prefill_flops: float, index_bytes_per_dim: float, window: float, ratio: float) -> AttentionOp:
    has_index = bool(group.indexer_heads and group.indexer_head_dim)
    index_dim = group.indexer_head_dim or 0
    return AttentionOp(
        num_layers=layers, is_linear=False, window_tokens=window, main_ratio=ratio,
        topk_tokens=float(group.indexer_topk) if group.indexer_topk else math.inf, has_index=has_index,
        entry_bytes=entry_bytes, decode_entry_flops=decode_flops, prefill_entry_flops=prefill_flops,
        index_key_bytes=index_dim * index_bytes_per_dim if has_index else 0.0,
        index_flops=2.0 * (group.indexer_heads or 0) * index_dim if has_index else 0.0,
        state_bytes=0.0, state_flops=0.0, prefill_state_flops=0.0)


def _linear_op(group: AttentionGroup, attention_tp: int, layers: int) -> AttentionOp:
    nv = heads_per_rank(group.linear_num_v_heads or group.num_heads, attention_tp)
    nk = heads_per_rank(group.linear_num_k_heads or group.num_heads, attention_tp)
    dk = group.linear_k_head_dim or group.head_dim
    dv = group.linear_v_head_dim or group.head_dim
    kernel = max(1, (group.conv_kernel or 1) - 1)
    if group.kind is AttentionKind.GDN:
        conv = (2 * nk * dk + nv * dv) * kernel
    elif group.kind is AttentionKind.KDA:
        conv = 3 * nv * dk * kernel
    else:
        conv = 0
    states = nv * dk * dv
    state_bytes = 2.0 * (conv * STATE_CONV_BYTES + states * STATE_RECURRENT_BYTES)  # read + write
    return AttentionOp(
        num_layers=layers, is_linear=True, window_tokens=0.0, main_ratio=0.0, topk_tokens=math.inf,
        has_index=False, entry_bytes=0.0, decode_entry_flops=0.0, prefill_entry_flops=0.0,
        index_key_bytes=0.0, index_flops=0.0, state_bytes=state_bytes,
        state_flops=LINEAR_DECODE_FLOPS_PER_STATE * states,
        prefill_state_flops=LINEAR_PREFILL_FLOPS_PER_STATE * states)


# -- precision semantics (PRODUCT.md §3) ---------------------------------------------------
@dataclass(frozen=True, slots=True)
class Precisions:
    """Resolved dtypes of one configuration and their bytes per value on a vendor.

    Every weight component at its own stored precision (`predictor.cards.precision`:
    native dtypes, a recipe, the lever's items, ``expert_dtype``); ``weight`` is the
    attention projections' compute dtype, ``expert`` the routed experts'. ``activation``
    is the lever's, or its default when unset (fp8 when the attention projections are fp8,
    else bf16). Each component's GEMMs compute at the activations they run
    (`gemm_activation`): with the lever unset, fp8 weights and fp4 weights the checkpoint
    does not ship quantise their own (`levers.precision.unset_activation`); fp4 or fp8
    weights with bf16 activations asked are weight-only quantisation (bytes shrink,
    compute stays bf16); activations narrower than a GEMM's weights run at the weights'
    width, since no kernel takes them narrower (`levers.precision.gemm_activation`).
    """

    weight: str
    expert: str
    activation: str
    kv_cache: str
    embedding: str
    weight_bytes: float           # attention projections
    expert_bytes: float
    activation_bytes: float
    kv_bytes: float
    embedding_bytes: float
    dense_mlp_bytes: float = 0.0
    shared_bytes: float = 0.0
    drafter_bytes: float = 2.0    # an EAGLE-3 head's weights (MTP/DSpark are priced as target layers)
    dense_mlp: str = "bf16"       # compute dtypes of the dense MLP and shared experts
    shared: str = "bf16"
    activation_asked: bool = True   # the activation_dtype lever set (not the default)
    requantized: frozenset[str] = frozenset()   # weight components not stored as the checkpoint ships them
    fp4_compute: bool = True        # the GPU has FP4 tensor cores
    vendor: str = "nvidia"          # ... and whose formats size an activation (`predictor.memory.dtype_bytes`)
    components: tuple[str, ...] = GEMM_COMPONENTS   # the weight components the model's GEMMs have

    @property
    def quantized_sites(self) -> frozenset[str]:
        """The weight components whose GEMMs run fp8 or fp4 activations: each quantises its
        input (a kernel and its bytes, `predictor.step.kernels`), the others run as they are."""
        return frozenset(c for c in self.components if self.gemm_activation(c) in LOW_PRECISION_ACTIVATIONS)

    def weight_of(self, component: str) -> str:
        """The compute dtype of ``component``'s weights (of `GEMM_COMPONENTS`)."""
        return {"attention": self.weight, "routed_experts": self.expert, "dense_mlp": self.dense_mlp,
                "shared_experts": self.shared}[component]

    def lever_value(self) -> str:
        """The activation lever value that runs every GEMM as these precisions do: the
        narrowest they run, when set as the lever it reproduces each (no GEMM takes
        activations narrower than its weights, `levers.precision.gemm_activation`); else
        the lever's default (fp4 attention quantized online beside a checkpoint's own MXFP4
        experts: W4A4 and W4A16 at once, which no single value runs)."""
        runs = self.gemm_activations()
        for value in sorted(set(runs.values()), key=DTYPE_BITS.__getitem__):
            if all(gemm_activation(value, self.weight_of(c)) == ran for c, ran in runs.items()):
                return value
        return self.activation

    def gemm_activations(self) -> dict[str, str]:
        """What each of the model's GEMMs runs its activations at (`gemm_activation`)."""
        return {c: self.gemm_activation(c) for c in self.components}

    def site_activation_bytes(self, component: str) -> float:
        """Bytes per value of the activations the GEMMs of ``component`` run."""
        return dtype_bytes(self.gemm_activation(component), self.vendor)

    @property
    def is_low_precision_activation(self) -> bool:
        """Some GEMM runs quantised activations (what quant-fed fusions need)."""
        return bool(self.quantized_sites)

    def gemm_activation(self, component: str) -> str:
        """The activations the GEMMs of weight ``component`` (attention, dense_mlp,
        shared_experts, routed_experts) run. With the lever unset, the weights decide
        where they quantise activations (`levers.precision.unset_activation`): fp8 experts
        on a BF16 checkpoint compute at the fp8 rate, not as W8A16 at BF16's (GLM-5.2 on
        eight B300 under vLLM, 64 clients: 36.9 ms TPOT at fp8 experts against 36.3 at bf16
        ones when priced as W8A16), and fp4 weights the checkpoint does not ship run W4A4
        as `deploy` launches them. Otherwise the asked activations, at least the weights'
        width (`levers.precision.gemm_activation`)."""
        weight = self.weight_of(component)
        if not self.activation_asked:
            runs = unset_activation(weight, native=component not in self.requantized, fp4_compute=self.fp4_compute)
            if runs is not None:
                return runs
        return gemm_activation(self.activation, weight)


@lru_cache(maxsize=4096)      # a prediction asks it for the step model and again for its collectives
def resolve_precisions(card: ModelCard, config: Configuration, vendor: str, fp4_compute: bool = True) -> Precisions:
    """The :class:`Precisions` of ``config`` for ``card`` on a ``vendor`` GPU (with FP4
    tensor cores: ``fp4_compute``; requantized components: `levers.legality.requantized_components`)."""
    dtypes = config_dtypes(card, config)
    activation = effective_activation_dtype(config, card)
    kv = config.kv_cache_dtype or str(card.native_dtypes.kv_cache)
    at = lambda component: dtypes.bytes_per_value(component, vendor)  # noqa: E731
    return Precisions(dtypes.compute("attention"), dtypes.compute("routed_experts"), activation, kv,
                      dtypes.compute("embeddings"), at("attention"), at("routed_experts"),
                      dtype_bytes(activation, vendor), dtype_bytes(kv, vendor), at("embeddings"),
                      at("dense_mlp"), at("shared_experts"), dtype_bytes(dtypes.drafter_dtype("eagle3"), vendor),
                      dtypes.compute("dense_mlp"), dtypes.compute("shared_experts"),
                      activation_asked=config.activation_dtype is not None,
                      requantized=requantized_components(config, card), fp4_compute=fp4_compute, vendor=vendor,
                      components=gemm_components(card))


def gemm_components(card: ModelCard) -> tuple[str, ...]:
    """The weight components whose GEMMs ``card`` has (of `GEMM_COMPONENTS`)."""
    present = ["attention"]
    if card.num_layers > (card.moe_layers if card.is_moe else 0) and card.dense_intermediate_size:
        present.append("dense_mlp")
    if card.is_moe:
        present.append("routed_experts")
        if card.num_shared_experts:
            present.append("shared_experts")
    return tuple(present)


def precisions_on(card: ModelCard, config: Configuration, gpu: GpuProfile) -> Precisions:
    """`resolve_precisions` on ``gpu`` (its vendor, and whether it has FP4 tensor cores)."""
    return resolve_precisions(card, config, gpu.vendor, bool(gpu.fp4_tflops))


def narrowest_activation(card: ModelCard, config: Configuration, gpu: GpuProfile) -> str:
    """The activation lever value that runs every GEMM of ``card`` as ``config`` does on
    ``gpu`` (`Precisions.lever_value`)."""
    return precisions_on(card, config, gpu).lever_value()
