"""Kernel fusions: what each saves and which are worth offering (METHOD §3.13).

A fusion's ideal saving is the launch cost of the kernels it removes (``kernel_launch_us``
each) plus the intermediate bytes no longer written to HBM and read back, at the rate the
elementwise kernels that moved them reach (0.7 of HBM bandwidth, `predictor.step.operators`). Named fusions realise 0.875 of it (the middle of METHOD's 75-100%: hand-written
fused kernels still pay some extra register pressure and tail effects).

Per forward (full depth), with ``h`` the hidden width and ``I`` a per-GPU intermediate:
- ``norm_quant``: RMSNorm + activation quant before the attention and MLP GEMMs that take
  quantised input (at most twice per layer); removes each quant kernel and its BF16 normed
  tensor (written and read, 2h bytes);
- ``add_rmsnorm``: residual add + RMSNorm, twice per layer; removes the add kernel and the
  norm's re-read of the residual (2h bytes);
- ``moe_expert``: expert gate/up, activation, quant and down in one kernel per MoE layer;
  removes the activation, quant (low-precision activations) and down kernels and the
  gate/up output (2I BF16, written and read) and activation output per routed row;
- ``moe_routing``: router top-k + permutation per MoE layer; removes the top-k and
  permutation-setup kernels and the fp32 router logits (written and read);
- ``act_quant``: SiLU*mul + quant before the down projection of dense MLPs, shared experts
  and (unless ``moe_expert`` already covers them) routed experts; removes the quant kernel
  and the BF16 activation output (written and read);
- ``rope_kvstore``: RoPE written straight into the KV-cache store, per softmax layer;
  removes the store kernel and the rotated keys/queries (written and read).

``generic``: an engine-wide generic fusion pass (torch.compile / Inductor-style pattern
matching over the model graph). It fuses neighbouring elementwise kernels around the GEMMs:
residual add + RMSNorm, and, with low-precision activations, RMSNorm + quant and SiLU*mul +
quant. It cannot see inside custom attention and MoE ops, so it does not fuse RoPE into the
KV store or the MoE kernels. Generated kernels are less tuned than hand-written ones: it
realises 0.75 (the low end of METHOD's range).

Legality (levers.legality): quant-fed patterns need fp8/fp4 activations (the resolved
activation dtype here), MoE patterns a MoE model; no repeats; ``generic`` alone.
Opportunities are the legal named fusions not enabled that would save >= 2% of the decode
step, largest first (none when ``generic`` is on: named fusions may not join it).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from levers.catalog import FUSIONS, MOE_FUSIONS, QUANT_FED_FUSIONS
from levers.configuration import Configuration
from predictor.cards.model_card import ModelCard
from predictor.hardware import GpuProfile
from predictor.memory import heads_per_rank
from predictor.step.kernels import moe_input_formats
from predictor.step.operators import (
    ELEMENTWISE_BW_EFFICIENCY,
    GB_PER_S_TO_BYTES_PER_US,
    Precisions,
    resolve_precisions,
)

NAMED_REALISED_FRACTION = 0.875
GENERIC_REALISED_FRACTION = 0.75
GENERIC = "generic"
GENERIC_COVERS = ("add_rmsnorm", "norm_quant", "act_quant")
OPPORTUNITY_MIN_SHARE = 0.02
BF16_BYTES = 2
FP32_BYTES = 4
TOPK_ENTRY_BYTES = 8   # int32 expert id + fp32 weight per choice


@dataclass(frozen=True, slots=True)
class FusionSaving:
    """Ideal saving of one fusion over a full-depth forward, split by what it scales with."""

    name: str
    kernels_removed: int
    bytes_per_rank_row: float    # rows of one attention rank (attention side, dense MLP)
    bytes_per_moe_row: float     # routed rows of one EP rank (mean; the step applies I_n)

    def ideal_us(self, launch_us: float, bytes_per_us: float, rank_rows: float, moe_rows: float) -> tuple[float, float]:
        """(launch part, bytes part) of the ideal saving, microseconds."""
        moved = self.bytes_per_rank_row * rank_rows + self.bytes_per_moe_row * moe_rows
        return self.kernels_removed * launch_us, moved / bytes_per_us


@dataclass(frozen=True, slots=True)
class _Shape:
    layers: int
    softmax_layers: int
    dense_layers: int
    moe_layers: int
    hidden: int                   # the width norms and quant kernels see
    dense_inner: float            # dense MLP intermediate per GPU
    shared_inner: float           # shared experts' intermediate per GPU (all shared experts)
    expert_inner: float           # one routed expert's intermediate per GPU
    rope_values: float            # rotated q + k values per token per softmax layer (per rank)
    num_experts: int
    top_k: int


def _shape(card: ModelCard, config: Configuration) -> _Shape:
    atp = config.attention_tp
    dense_tp = config.dense_tp
    softmax = [g for g in card.attention if not g.kind.is_linear]
    rope = 0.0
    for group in softmax:
        dim = group.qk_rope_head_dim or group.head_dim
        kv_heads = 1 if group.kv_lora_rank or group.compress_ratio else heads_per_rank(group.num_kv_heads, atp)
        rope = max(rope, (group.num_heads / atp + kv_heads) * dim)
    moe_layers = card.moe_layers if card.is_moe else 0
    return _Shape(
        layers=card.num_layers, softmax_layers=sum(g.num_layers for g in softmax),
        dense_layers=card.num_layers - moe_layers, moe_layers=moe_layers,
        hidden=card.hidden_size,
        dense_inner=card.dense_intermediate_size / dense_tp,
        shared_inner=card.num_shared_experts * card.shared_intermediate_size / dense_tp,
        expert_inner=card.moe_intermediate_size / max(1, config.moe_tp),
        rope_values=rope, num_experts=card.num_experts, top_k=card.top_k)


def _savings(shape: _Shape, precisions: Precisions, enabled: frozenset[str]) -> dict[str, FusionSaving]:
    """What each fusion removes, at the quant kernels the step has (`Precisions.quantized_sites`:
    a quant kernel sits only before GEMMs that take quantised input)."""
    sites = precisions.quantized_sites
    q_attention, q_dense = int("attention" in sites), int("dense_mlp" in sites)
    q_shared, q_routed = int("shared_experts" in sites), int("routed_experts" in sites)
    normed = shape.layers * q_attention + shape.dense_layers * q_dense + shape.moe_layers * len(moe_input_formats(precisions))
    routed_act_quant = 0 if "moe_expert" in enabled else q_routed
    shared = 1 if shape.shared_inner > 0 else 0
    act_rows = shape.dense_layers * shape.dense_inner * q_dense + shape.moe_layers * shape.shared_inner * q_shared
    routed_act = precisions.site_activation_bytes("routed_experts")
    return {
        "norm_quant": FusionSaving("norm_quant", normed, normed * 2 * shape.hidden * BF16_BYTES, 0.0),
        "add_rmsnorm": FusionSaving("add_rmsnorm", 2 * shape.layers, 2 * shape.layers * shape.hidden * BF16_BYTES, 0.0),
        "moe_expert": FusionSaving("moe_expert", shape.moe_layers * (2 + q_routed), 0.0,
                                   shape.moe_layers * shape.expert_inner * (2 * 2 * BF16_BYTES + 2 * routed_act)),
        "moe_routing": FusionSaving("moe_routing", 2 * shape.moe_layers,
                                    shape.moe_layers * 2 * (shape.num_experts * FP32_BYTES + shape.top_k * TOPK_ENTRY_BYTES),
                                    0.0),
        "act_quant": FusionSaving("act_quant",
                                  shape.dense_layers * q_dense + shape.moe_layers * (shared * q_shared + routed_act_quant),
                                  act_rows * 2 * BF16_BYTES,
                                  routed_act_quant * shape.moe_layers * shape.expert_inner * 2 * BF16_BYTES),
        "rope_kvstore": FusionSaving("rope_kvstore", shape.softmax_layers,
                                     shape.softmax_layers * 2 * shape.rope_values * BF16_BYTES, 0.0),
    }


def legal_fusions(card: ModelCard, precisions: Precisions) -> tuple[str, ...]:
    """Named fusions legal for this model and resolved activation dtype."""
    return tuple(name for name in FUSIONS
                 if (name not in QUANT_FED_FUSIONS or precisions.is_low_precision_activation)
                 and (name not in MOE_FUSIONS or card.is_moe))


@dataclass(frozen=True, slots=True)
class FusionPlan:
    """Enabled fusions (with their realised fraction) and the legal ones not enabled."""

    enabled: tuple[tuple[FusionSaving, float], ...]
    available: tuple[FusionSaving, ...]

    def saved_us(self, launch_us: float, bytes_per_us: float, rank_rows: float,
                 moe_rows: float) -> tuple[float, float, float]:
        """(launch, other-bytes, MoE-bytes) microseconds the enabled fusions remove."""
        launch = other = moe = 0.0
        for saving, fraction in self.enabled:
            launch += fraction * (saving.kernels_removed * launch_us)
            other += fraction * saving.bytes_per_rank_row * rank_rows / bytes_per_us
            moe += fraction * saving.bytes_per_moe_row * moe_rows / bytes_per_us
        return launch, other, moe


@lru_cache(maxsize=1024)
def fusion_plan(card: ModelCard, config: Configuration, vendor: str, fp4_compute: bool = True) -> FusionPlan:
    """What ``config.fusions`` removes and what else is legal (cached per configuration)."""
    precisions = resolve_precisions(card, config, vendor, fp4_compute)
    legal = legal_fusions(card, precisions)
    chosen = set(config.fusions)
    savings = _savings(_shape(card, config), precisions, frozenset(chosen))
    if GENERIC in chosen:
        enabled = tuple((savings[n], GENERIC_REALISED_FRACTION) for n in GENERIC_COVERS if n in legal)
        return FusionPlan(enabled, ())
    enabled = tuple((savings[n], NAMED_REALISED_FRACTION) for n in FUSIONS if n in chosen and n in legal)
    available = tuple(savings[n] for n in legal if n not in chosen)
    return FusionPlan(enabled, available)


def _rows(card: ModelCard, config: Configuration, tokens: float) -> tuple[float, float]:
    """(rows per attention rank, mean routed rows per EP rank) for ``tokens`` replica tokens."""
    rank_rows = -(-max(0.0, tokens) // config.attention_dp)
    moe_rows = tokens * card.top_k / max(1, config.ep) if card.is_moe else 0.0
    return rank_rows, moe_rows


def _elementwise_bytes_per_us(gpu: GpuProfile) -> float:
    return gpu.hbm_bandwidth_gbps * GB_PER_S_TO_BYTES_PER_US * ELEMENTWISE_BW_EFFICIENCY


def fusion_savings_us(card: ModelCard, gpu: GpuProfile, config: Configuration, tokens: float) -> float:
    """Microseconds the fusions enabled in ``config`` remove from a step of ``tokens``
    replica tokens (realised fraction included)."""
    rank_rows, moe_rows = _rows(card, config, tokens)
    plan = fusion_plan(card, config, gpu.vendor, bool(gpu.fp4_tflops))
    return sum(plan.saved_us(gpu.kernel_launch_us, _elementwise_bytes_per_us(gpu), rank_rows, moe_rows))


def fusion_opportunities(card: ModelCard, gpu: GpuProfile, config: Configuration, decode_step_us: float,
                         tokens: float) -> list[dict]:
    """Legal named fusions not enabled worth >= 2% of the decode step, largest first:
    ``[{"name", "saving_us", "share"}]`` (METHOD §3.13)."""
    if decode_step_us <= 0:
        return []
    rank_rows, moe_rows = _rows(card, config, tokens)
    bytes_per_us = _elementwise_bytes_per_us(gpu)
    found = []
    for saving in fusion_plan(card, config, gpu.vendor, bool(gpu.fp4_tflops)).available:
        launch, moved = saving.ideal_us(gpu.kernel_launch_us, bytes_per_us, rank_rows, moe_rows)
        saved = NAMED_REALISED_FRACTION * (launch + moved)
        share = saved / decode_step_us
        if share >= OPPORTUNITY_MIN_SHARE:
            found.append({"name": saving.name, "saving_us": round(saved, 3), "share": round(share, 4)})
    return sorted(found, key=lambda item: -item["saving_us"])
