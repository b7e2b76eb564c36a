"""DWDP prefill: data-parallel ranks that share routed-expert storage (arXiv 2604.01621).

A DWDP pool of ``n`` ranks (``prefill_layout=DWDPn``) runs each rank as its own
single-GPU replica: attention, shared experts and dense layers from its own copy, routed
experts from its ``1/n`` shard and from the ``(n-1)/n`` it fetches per MoE layer from its
peers into one of two staging buffers, by the copy engine over the scale-up link (no SMs,
no collective, no cross-rank synchronisation: no DEP-style straggler wait). The weights
and buffers are in `predictor.cards.weights`; this module prices the fetch the compute
does not hide.

Fetch of one MoE layer: ``F = (n-1)/n * routed-expert bytes of a layer / (eta * B)``,
``B`` the GPU's scale-up bandwidth per direction and ``eta`` = 0.78, the per-rank share of
peak measured on GB300 (issue 13). With two buffers, the fetch of layer ``l`` starts once
the fetch of ``l-1`` is done and the buffer of ``l-2`` is free (its MoE done); the MoE of
``l`` waits for its fetch.

Exposed fetch per block of one softmax-attention layer (MLA) and ``r`` linear layers (KDA):
``E = max(0, (r+1)F - C_s - r C_l, max_{j=2..r} ((j-1)F + M - j C_l))`` with ``C_s``, ``C_l``
one softmax / linear layer's compute on the rank's batch and ``M`` the routed-expert part
of a layer (how long a buffer stays held). The first term: the link moves the block's
fetches within the block's compute. The others: once the softmax layer's MoE frees a
buffer, the linear layers' fetches run back to back and linear layer ``j``'s MoE waits for
its fetch. For Kimi-K3's ``r = 3`` the ``j = 2`` term never binds (when it exceeds the
``j = 3`` term it is negative), which leaves ``E = max(0, 4F - C_MLA - 3C_KDA, 2F + M -
3C_KDA)``. A model without linear layers has one-layer blocks: ``E = max(0, F - C)``.

Blocks: one per softmax layer, ``r = round(linear / softmax)``; softmax layers beyond the
``linear // r`` full blocks (Kimi-K3's layer 93 after 23 blocks of 3 KDA + 1 MLA) are
blocks with ``r = 0``. Dense (non-MoE) layers fetch nothing: ``F`` is scaled by the share
of MoE layers.
"""

from __future__ import annotations

from dataclasses import dataclass

from predictor.cards.model_card import ModelCard
from predictor.units import BYTES_PER_GB, US_PER_S

DWDP_FETCH_EFFICIENCY = 0.78      # per-rank share of the scale-up peak measured on GB300


@dataclass(frozen=True, slots=True)
class LayerCosts:
    """One layer's compute on a DWDP rank's batch (us)."""

    softmax_us: float
    linear_us: float
    moe_us: float          # the routed-expert GEMMs of one MoE layer


def block_exposure_us(fetch_us: float, softmax_us: float, linear_us: float, moe_us: float, linear_layers: int) -> float:
    """Exposed fetch of one block of a softmax layer and ``linear_layers`` linear layers
    (module docstring); never negative."""
    r = max(0, int(linear_layers))
    exposed = (r + 1) * fetch_us - softmax_us - r * linear_us
    for j in range(2, r + 1):
        exposed = max(exposed, (j - 1) * fetch_us + moe_us - j * linear_us)
    return max(0.0, exposed)


@dataclass(frozen=True, slots=True)
class DwdpPlan:
    """A DWDP rank's fetch schedule: ``F`` and the block pattern of its layers."""

    ranks: int
    fetch_us: float                      # F, scaled by the share of MoE layers
    blocks: tuple[tuple[int, int], ...]  # (count, linear layers per block)

    def exposed_us(self, costs: LayerCosts) -> float:
        """Exposed fetch of one forward over every block."""
        return sum(count * block_exposure_us(self.fetch_us, costs.softmax_us, costs.linear_us, costs.moe_us, r)
                   for count, r in self.blocks)

    def to_json(self) -> dict:
        return {"ranks": self.ranks, "fetch_ms_per_layer": round(self.fetch_us / 1e3, 4),
                "blocks": [list(block) for block in self.blocks]}


def layer_blocks(num_softmax: int, num_linear: int) -> tuple[tuple[int, int], ...]:
    """(count, linear layers per block) covering the model's layers (module docstring)."""
    if num_softmax <= 0:
        return ((num_linear, 0),) if num_linear else ()
    r = round(num_linear / num_softmax)
    if r <= 0:
        return ((num_softmax, 0),)
    full = min(num_softmax, num_linear // r)
    blocks = [(full, r)]
    if num_softmax > full:
        blocks.append((num_softmax - full, 0))
    return tuple(blocks)


def fetch_us(card: ModelCard, ranks: int, expert_bytes_per_value: float, scale_up_gbps: float,
             efficiency: float = DWDP_FETCH_EFFICIENCY) -> float:
    """``F``: the ``(n-1)/n`` of one MoE layer's routed experts over the scale-up link."""
    layer_bytes = card.num_experts * card.expert_params() * expert_bytes_per_value
    return (ranks - 1) / ranks * layer_bytes / (efficiency * scale_up_gbps * BYTES_PER_GB) * US_PER_S


def dwdp_plan(card: ModelCard, ranks: int, expert_bytes_per_value: float, scale_up_gbps: float) -> DwdpPlan:
    softmax = sum(g.num_layers for g in card.attention if not g.kind.is_linear)
    linear = sum(g.num_layers for g in card.attention if g.kind.is_linear)
    share = card.moe_layers / card.num_layers if card.num_layers else 0.0
    return DwdpPlan(ranks, share * fetch_us(card, ranks, expert_bytes_per_value, scale_up_gbps),
                    layer_blocks(softmax, linear))
