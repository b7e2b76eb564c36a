"""A card's weights per GPU by component and precision, on one replica layout (METHOD §3.9).

Split from `predictor.memory` (which adds KV, state, activations and the verdict) because
the weight table carries the deployment's shape: every component at its own stored
precision (`predictor.cards.precision`), the drafter, TP subgroups and DWDP.

Sharding (PRODUCT.md §3, SGLang's semantics): attention weights are shared by attention
TP except `replicated_params_per_layer` (MLA/V4 down-projections, indexers, compressors),
which every rank holds whole; dense MLP and shared experts use TP ``tp``, or the attention
ranks' TP under attention DP; routed experts span the stage's ``tp`` GPUs (EP x MoE-TP);
input embedding vocab-parallel over attention TP, LM head over ``tp`` (with PP the worst
stage holds the larger); "other" (norms, routers, mHC) replicated, bf16 (mHC fp32).

DEP with TP subgroups (``/TSt``): the sharded attention projections, the shared experts
and the dense MLP are stored 1/t across a subgroup of t attention-DP ranks (each GPU keeps
1/(t * attention-TP)); core attention and its cache stay local. DWDP (``DWDPn``): each
rank holds every non-expert weight whole (TP1) and 1/n of the routed experts, plus two
staging buffers, each the (n-1)/n of one MoE layer's routed experts fetched from its
peers (`predictor.step.dwdp`). EPLB's redundant experts (``eplb_replicas`` R) add R / E
to the routed experts a GPU stores.

The drafter (METHOD §3.8's plans): MTP adds ``max(1, mtp_layers)`` target layers of the
softmax kind (attention, MoE block, the ``2H x H`` input fusion), sharded like the target;
EAGLE-3 one dense GQA layer (128-dim heads, 8 KV heads, the target's dense MLP width or
8H/3), its ``3H x H`` fusion and a 32k-vocabulary LM head, sharded by attention TP
(LM head by ``tp``); DSpark three mean target layers; n-gram nothing. Embeddings are
shared with the target.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from predictor.cards.model_card import AttentionGroup, ModelCard
from predictor.cards.precision import ComponentDtypes, stored_bytes
from predictor.step.speculation import DSPARK_LAYERS, EAGLE3_DRAFT_VOCAB

BF16_BYTES, FP32_BYTES = 2.0, 4.0
EAGLE3_HEAD_DIM, EAGLE3_KV_HEADS = 128, 8
DWDP_STAGING_BUFFERS = 2
WEIGHT_TABLE = ("attention", "dense_mlp", "shared_experts", "routed_experts", "embeddings", "other", "drafter",
                "dwdp_staging")


@dataclass(frozen=True, slots=True)
class Layout:
    """One replica layout as the memory model sees it (`predictor.memory`)."""

    tp: int
    pp: int
    ep: int
    attention_dp: int
    dcp: int
    subgroup: int = 1      # TP subgroup of attention-DP ranks (/TSt)
    dwdp: int = 1          # DWDP ranks sharing the routed experts
    redundant_experts: int = 0   # EPLB's copies of hot experts, stored beside the card's

    @property
    def attention_tp(self) -> int:
        return self.tp // self.attention_dp

    @property
    def projection_tp(self) -> int:
        """GPUs sharing the sharded attention projections (attention TP x subgroup)."""
        return self.attention_tp * self.subgroup

    @property
    def dense_tp(self) -> int:
        return self.attention_tp * self.subgroup if self.attention_dp > 1 else self.tp

    @property
    def expert_shards(self) -> int:
        return self.tp * self.dwdp

    def per_stage(self, count: int) -> int:
        return -(-count // self.pp)


@dataclass(frozen=True, slots=True)
class CardConstants:
    """Per-card numbers every call needs, computed once per card."""

    attention: tuple[tuple[int, int, int], ...]   # (layers, replicated, sharded params per layer)
    dense_mlp_params: int
    shared_params: int
    routed_params: int                           # all routed experts of one MoE layer
    router_params: int
    embedding_matrix: int


@lru_cache(maxsize=256)
def card_constants(card: ModelCard) -> CardConstants:
    return CardConstants(
        attention=tuple((g.num_layers, g.replicated_params_per_layer,
                         g.params_per_layer - g.replicated_params_per_layer) for g in card.attention),
        dense_mlp_params=card.dense_mlp_params_per_layer(), shared_params=card.shared_params_per_moe_layer(),
        routed_params=card.num_experts * card.expert_params(), router_params=card.router_params_per_moe_layer(),
        embedding_matrix=card.vocab_size * card.hidden_size)


@dataclass(frozen=True, slots=True)
class WeightTable:
    """Bytes per GPU by component (keys of `WEIGHT_TABLE` present on the layout) and the
    dtype each is stored in."""

    bytes_by_component: dict[str, int]
    dtype_by_component: dict[str, str]

    @property
    def total_bytes(self) -> int:
        return sum(self.bytes_by_component.values())


def weight_table(card: ModelCard, layout: Layout, dtypes: ComponentDtypes, vendor: str,
                 spec_method: str = "none") -> WeightTable:
    """The per-GPU weights of ``card`` on ``layout`` (module docstring)."""
    params = target_params(card, layout)
    size = {name: params[name] * dtypes.bytes_per_value(name, vendor)
            for name in ("attention", "dense_mlp", "shared_experts", "routed_experts", "embeddings")}
    size["other"] = params["other"] * BF16_BYTES + params["hyper_connections"] * FP32_BYTES
    kinds = {name: getattr(dtypes, name) for name in size if name != "other"}
    kinds["other"] = "bf16"
    drafter, drafter_kind = drafter_bytes(card, layout, dtypes, vendor, spec_method)
    if drafter_kind is not None:
        size["drafter"], kinds["drafter"] = drafter, drafter_kind
    if layout.dwdp > 1 and card.is_moe:
        size["dwdp_staging"] = staging_bytes(card, layout.dwdp, dtypes, vendor)
        kinds["dwdp_staging"] = dtypes.routed_experts
    return WeightTable({key: math.ceil(value) for key, value in size.items()}, kinds)


def target_params(card: ModelCard, layout: Layout) -> dict[str, float]:
    """Parameters per GPU of the target's components on the worst PP stage."""
    const, per_stage, ptp = card_constants(card), layout.per_stage, layout.projection_tp
    attention = sum(per_stage(layers) * (replicated + sharded / ptp) for layers, replicated, sharded in const.attention)
    moe_layers = per_stage(card.moe_layers)
    embed, head = const.embedding_matrix / layout.attention_tp, const.embedding_matrix / layout.tp
    if card.tie_word_embeddings and layout.pp == 1:
        embeddings = embed
    else:
        embeddings = embed + head if layout.pp == 1 else max(embed, head)
    return {
        "attention": attention,
        "dense_mlp": per_stage(card.dense_layers) * const.dense_mlp_params / layout.dense_tp,
        "shared_experts": moe_layers * const.shared_params / layout.dense_tp,
        "routed_experts": moe_layers * const.routed_params * _stored_experts(card, layout) / layout.expert_shards,
        "embeddings": embeddings,
        "other": (per_stage(card.num_layers) * card.norm_params_per_layer + moe_layers * const.router_params
                  + card.final_params),
        "hyper_connections": per_stage(card.num_layers) * card.hyper_connection_params_per_layer,
    }


def _stored_experts(card: ModelCard, layout: Layout) -> float:
    """Routed experts stored per card expert: (E + R) / E with EPLB's R redundant copies (a
    token still reads its top-k, so only memory grows)."""
    return (card.num_experts + layout.redundant_experts) / card.num_experts if card.num_experts else 1.0


def staging_bytes(card: ModelCard, ranks: int, dtypes: ComponentDtypes, vendor: str) -> float:
    """DWDP's two staging buffers: each the (n-1)/n of one MoE layer's routed experts."""
    layer = card_constants(card).routed_params * dtypes.bytes_per_value("routed_experts", vendor)
    return DWDP_STAGING_BUFFERS * layer * (ranks - 1) / ranks


def drafter_bytes(card: ModelCard, layout: Layout, dtypes: ComponentDtypes, vendor: str,
                  method: str) -> tuple[float, str | None]:
    """(bytes per GPU, the dtype the drafter's largest part is stored in); (0, None) without one."""
    if method == "mtp":
        return _mtp_bytes(card, layout, dtypes, vendor), dtypes.drafter_dtype(method, "routed_experts"
                                                                              if card.is_moe else "dense_mlp")
    if method == "eagle3":
        return _eagle3_bytes(card, layout, stored_bytes(dtypes.drafter_dtype(method), vendor)), \
            dtypes.drafter_dtype(method)
    if method == "dspark":
        params = target_params(card, layout)
        share = DSPARK_LAYERS / card.num_layers
        parts = ("attention", "dense_mlp", "shared_experts", "routed_experts")
        total = sum(params[name] * stored_bytes(dtypes.drafter_dtype(method, name), vendor) for name in parts)
        total += params["other"] * BF16_BYTES
        return share * total, dtypes.drafter_dtype(method, "routed_experts" if card.is_moe else "dense_mlp")
    return 0.0, None


def _softmax_group(card: ModelCard) -> AttentionGroup:
    softmax = [g for g in card.attention if not g.kind.is_linear]
    return (softmax or list(card.attention))[0]


def _mtp_bytes(card: ModelCard, layout: Layout, dtypes: ComponentDtypes, vendor: str) -> float:
    """``max(1, mtp_layers)`` layers: softmax attention, the MoE block (or dense MLP), eh_proj."""
    const, group, hidden = card_constants(card), _softmax_group(card), card.hidden_size
    sharded = group.params_per_layer - group.replicated_params_per_layer
    at = lambda component: stored_bytes(dtypes.drafter_dtype("mtp", component), vendor)  # noqa: E731
    layer = (group.replicated_params_per_layer + sharded / layout.projection_tp) * at("attention")
    layer += 2 * hidden * hidden * at("attention")
    if card.is_moe:
        layer += const.routed_params / layout.expert_shards * at("routed_experts")
        layer += const.shared_params / layout.dense_tp * at("shared_experts")
        layer += const.router_params * BF16_BYTES
    else:
        layer += const.dense_mlp_params / layout.dense_tp * at("dense_mlp")
    return max(1, card.mtp_layers) * layer


def _eagle3_bytes(card: ModelCard, layout: Layout, value_bytes: float) -> float:
    hidden, atp = card.hidden_size, layout.attention_tp
    heads = max(1, hidden // EAGLE3_HEAD_DIM)
    kv_heads = min(EAGLE3_KV_HEADS, heads)
    inner = card.dense_intermediate_size or 8 * hidden // 3
    layer = (2 * hidden * hidden + 2 * hidden * kv_heads * EAGLE3_HEAD_DIM + 3 * hidden * inner) / atp
    fusion = 3 * hidden * hidden
    head = min(EAGLE3_DRAFT_VOCAB, card.vocab_size) * hidden / layout.tp
    return (layer + fusion + head) * value_bytes
