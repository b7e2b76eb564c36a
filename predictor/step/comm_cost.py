"""Per-step communication of one replica layout (METHOD §3.7, §3.6, §3.15).

Every collective costs ``t = alpha + m / B`` on its tier (fits in the GPU profile,
`predictor.step.comm`). Inside a step a collective's kernel already pays the per-kernel
launch cost (the step model counts it), so the step is charged ``m / B`` plus the part of
``alpha`` above that launch cost: ``max(0, alpha - kernel_launch_us)`` (METHOD §3.7: on
MI355X the custom all-reduce's alpha is the launch cost, 4.9-6.4 us against 4.98 us; on
NVIDIA parts a one-shot all-reduce measures 4-7 us against a 3 us launch, a two-shot
8-25 us, an all-to-all 13-18 us: that latency is real and grows with the group).

What a step exchanges (PRODUCT.md §3 parallel semantics):
- per layer, the attention output all-reduce over the attention-TP group;
- per dense layer, the MLP all-reduce: over ``tp`` without attention DP, over the
  attention-TP group under it (dense layers follow the attention ranks);
- per MoE layer, without attention DP and without an EP backend, the TP all-reduce that
  combines the experts' (and shared experts') partial outputs over ``tp``; with an EP
  backend (deepep, mori, pplx) a dispatch and a combine all-to-all over the EP group
  (dispatch in FP8 when activations are low precision, combine in BF16; each GPU sends
  its ``1/tp`` share of the stage's tokens, ``top_k`` copies each, in the experts' width);
  under attention DP without a backend an all-gather and a reduce-scatter of the whole
  stage's hidden states over the DP group;
- per softmax layer under DCP (`DcpComm`, vLLM's scheme): the DCP group all-gathers its
  ranks' queries (each rank then attends for the group's heads over its 1/dcp of every
  sequence's tokens), and reduce-scatters the partial outputs with their log-sum-exp back
  to the heads' owners; for MLA the query is the absorbed ``kv_lora_rank + rope`` and the
  partial output the latent ``kv_lora_rank`` (plus an fp32 LSE per head);
- DEP with TP subgroups (``/TSt``, `predictor.cards.weights`): per layer for the sharded
  attention projections and per MoE (or dense) layer for the shared experts (dense MLP),
  an all-gather of the subgroup's inputs then an all-to-all returning each token's output
  slices: per token ``(t-1) H s_a + ((t-1)/t) H s_a`` bytes, ``s_a`` the activation bytes,
  priced on the all-gather fit (message ``t`` tokens' inputs) and the all-to-all fit
  (message one token's output per token);
- per step, the LM head's logits gathered over ``tp`` (BF16) and ``p`` pipeline hops
  (``p - 1`` activation sends plus the sampled tokens' return).

All-reduce tier: the engine's custom all-reduce up to 8 MiB (METHOD §3.15, graph mode),
one-shot up to the GPU's switch size and two-shot above (or as the
``allreduce_algorithm`` lever forces; ``quick_reduce`` is modelled as two-shot on an
int8-quantised payload, half the bytes; ``fused_rmsnorm`` communicates like the default
and saves a norm kernel, priced by the step model), the library all-reduce above.
A group larger than the cluster's scale-up domain crosses the NICs: all-reduces use the
``allreduce_inter`` fit, all-to-alls ``all_to_all_inter``, all-gather / reduce-scatter
each half an inter-node all-reduce, hops that cross a domain boundary ``p2p_inter``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from levers.configuration import Configuration
from predictor.cards.model_card import ModelCard
from predictor.hardware import Cluster, GpuProfile
from predictor.step.comm import Collective
from predictor.step.operators import precisions_on
from predictor.step.transfer import pipeline_hops_us

CUSTOM_ALLREDUCE_MAX_BYTES = 8 * 1024 * 1024  # METHOD §3.15: custom all-reduce <= 8 MiB
QUICK_REDUCE_PAYLOAD_FRACTION = 0.5          # int8 quantised payload of a bf16 message
HIDDEN_BYTES = 2                              # hidden states and logits travel in BF16
TOKEN_ID_BYTES = 4                            # the sampled tokens' return hop
LSE_BYTES = 4                                 # one fp32 log-sum-exp per head (DCP's combine)
EP_BACKENDS = ("deepep", "mori", "pplx")
LOW_PRECISION = ("fp8", "fp4")


class CommTerms(NamedTuple):
    """Microseconds of one full-depth forward's communication, by kind (a NamedTuple,
    built per priced step: see `predictor.step.roofline.Roofline`)."""

    tp_allreduce_us: float
    moe_exchange_us: float
    other_us: float  # DCP and the LM head gather

    @property
    def total_us(self) -> float:
        return self.tp_allreduce_us + self.moe_exchange_us + self.other_us


def _us_per_byte(gpu: GpuProfile, name: str, group: int) -> float:
    """``1 / B`` of a collective fit in us per byte; 0 for a group of one."""
    if group <= 1:
        return 0.0
    return gpu.collective_us(name, group, 1.0, include_alpha=False)


def _latency_us(gpu: GpuProfile, name: str, group: int) -> float:
    """The part of a collective's ``alpha`` above the per-kernel launch cost (module
    docstring); 0 for a group of one."""
    if group <= 1:
        return 0.0
    return max(0.0, gpu.collective_us(name, group, 0.0) - gpu.kernel_launch_us)


@dataclass(frozen=True, slots=True)
class AllReduceTier:
    """An all-reduce over one group: the tiers its message size can select."""

    group: int
    one_shot: float   # us per byte
    two_shot: float
    library: float
    switch_bytes: float
    algorithm: str | None
    latency: tuple[float, float, float] = (0.0, 0.0, 0.0)   # one-shot, two-shot, library: alpha - launch

    @classmethod
    def build(cls, gpu: GpuProfile, group: int, algorithm: str | None, crosses_nodes: bool) -> AllReduceTier:
        if group <= 1:
            return cls(group, 0.0, 0.0, 0.0, 0.0, algorithm)
        if crosses_nodes:
            inter = _us_per_byte(gpu, Collective.ALLREDUCE_INTER, group)
            wait = _latency_us(gpu, Collective.ALLREDUCE_INTER, group)
            return cls(group, inter, inter, inter, 0.0, "library", (wait, wait, wait))
        two_fits = gpu.collectives.get(Collective.ALLREDUCE_TWO_SHOT, {})
        has_two = bool(two_fits) and max(two_fits) >= group >= min(two_fits)
        one = _us_per_byte(gpu, Collective.ALLREDUCE_ONE_SHOT, group)
        one_wait = _latency_us(gpu, Collective.ALLREDUCE_ONE_SHOT, group)
        two = _us_per_byte(gpu, Collective.ALLREDUCE_TWO_SHOT, group) if has_two else one
        two_wait = _latency_us(gpu, Collective.ALLREDUCE_TWO_SHOT, group) if has_two else one_wait
        return cls(group, one, two, _us_per_byte(gpu, Collective.ALLREDUCE, group),
                   float(gpu.custom_allreduce_switch_bytes), algorithm,
                   (one_wait, two_wait, _latency_us(gpu, Collective.ALLREDUCE, group)))

    def _tier(self, message_bytes: float) -> int:
        """0 one-shot, 1 two-shot, 2 library (and the quick-reduce payload on two-shot)."""
        algorithm = self.algorithm
        if algorithm == "library" or message_bytes > CUSTOM_ALLREDUCE_MAX_BYTES:
            return 2
        if algorithm == "custom_one_shot":
            return 0
        if algorithm in ("custom_two_shot", "quick_reduce"):
            return 1
        return 0 if message_bytes <= self.switch_bytes else 1

    def us(self, message_bytes: float) -> float:
        """One all-reduce of ``message_bytes`` on the selected tier: ``m / B`` plus its
        latency above the kernel launch."""
        if self.group <= 1 or message_bytes <= 0:
            return 0.0
        tier = self._tier(message_bytes)
        per_byte = (self.one_shot, self.two_shot, self.library)[tier]
        if self.algorithm == "quick_reduce" and tier == 1:
            message_bytes *= QUICK_REDUCE_PAYLOAD_FRACTION
        return message_bytes * per_byte + self.latency[tier]


@dataclass(frozen=True, slots=True)
class CommModel:
    """Precomputed per-byte rates and per-token message sizes of one replica layout."""

    num_layers: int
    dense_layers: int
    moe_layers: int
    attention_ar: AllReduceTier
    dense_ar: AllReduceTier
    moe_ar: AllReduceTier | None          # MoE combine as a TP all-reduce (no DP, no backend)
    dcp: "DcpComm | None"
    hidden_bytes_per_token: float
    dispatch_bytes_per_token: float       # per token: top_k copies in the experts' width
    combine_bytes_per_token: float
    a2a_us_per_byte: float                # EP backend all-to-all (0 without one)
    allgather_us_per_byte: float          # attention-DP all-gather (0 unless DP without backend)
    reduce_scatter_us_per_byte: float
    tokens_per_sending_gpu: float         # 1 / tp: each GPU dispatches its share of the stage
    logits_bytes_per_token: float
    logits_us_per_byte: float
    pp: int
    p2p_us_per_byte: float
    p2p_inter_us_per_byte: float
    domains_spanned: int
    a2a_latency_us: float = 0.0           # one dispatch or combine: alpha above the launch
    gather_latency_us: float = 0.0        # one all-gather + one reduce-scatter (attention DP)
    logits_latency_us: float = 0.0
    subgroup: "SubgroupComm | None" = None   # DEP with TP subgroups (/TSt)

    def step(self, rank_tokens: float, stage_tokens: float) -> CommTerms:
        """Communication of one full-depth forward: ``rank_tokens`` per attention rank,
        ``stage_tokens`` in the stage (all attention-DP ranks together)."""
        hidden = self.hidden_bytes_per_token
        tp_us = self.num_layers * self.attention_ar.us(rank_tokens * hidden)
        tp_us += self.dense_layers * self.dense_ar.us(rank_tokens * hidden)
        if self.moe_ar is not None:
            moe_us = self.moe_layers * self.moe_ar.us(stage_tokens * hidden)
        else:
            sent = stage_tokens * self.tokens_per_sending_gpu
            a2a = sent * (self.dispatch_bytes_per_token + self.combine_bytes_per_token) * self.a2a_us_per_byte
            gathered = stage_tokens * hidden * (self.allgather_us_per_byte + self.reduce_scatter_us_per_byte)
            moe_us = self.moe_layers * (a2a + gathered + 2 * self.a2a_latency_us + self.gather_latency_us)
        if self.subgroup is not None:
            tp_us += self.subgroup.us(rank_tokens)
        other = self.dcp.us(rank_tokens) if self.dcp is not None else 0.0
        other += stage_tokens * self.logits_bytes_per_token * self.logits_us_per_byte + self.logits_latency_us
        return CommTerms(tp_us, moe_us, other)

    def step_us(self, rank_tokens: float, stage_tokens: float) -> float:
        return self.step(rank_tokens, stage_tokens).total_us

    def hops_us(self, micro_batch_tokens: float) -> float:
        """Send/recv time of the ``p`` hops of one step (METHOD §3.6): ``p - 1``
        activation sends and the token return, network hops at domain boundaries."""
        if self.pp <= 1:
            return 0.0
        activation = micro_batch_tokens * self.hidden_bytes_per_token
        tokens = micro_batch_tokens * TOKEN_ID_BYTES
        mean_bytes = ((self.pp - 1) * activation + tokens) / self.pp
        return pipeline_hops_us(self.pp, self.domains_spanned, mean_bytes * self.p2p_us_per_byte,
                                mean_bytes * self.p2p_inter_us_per_byte)


@dataclass(frozen=True, slots=True)
class DcpComm:
    """DCP's per-layer query all-gather and LSE-corrected output reduce-scatter (module
    docstring) over ``group`` ranks, summed over the softmax layers."""

    group: int
    layers: int
    query_bytes_per_token: float     # one rank's heads, per token (the all-gather's input)
    output_bytes_per_token: float    # the group's heads' partial outputs + LSE, per token
    gather_us_per_byte: float
    scatter_us_per_byte: float
    latency_us: float

    def us(self, rank_tokens: float) -> float:
        if rank_tokens <= 0:
            return 0.0
        gathered = self.group * rank_tokens * self.query_bytes_per_token * self.gather_us_per_byte
        scattered = rank_tokens * self.output_bytes_per_token * self.scatter_us_per_byte
        return self.layers * (gathered + scattered + self.latency_us)


def dcp_comm(card: ModelCard, cluster: Cluster, config: Configuration) -> DcpComm | None:
    """The DCP collectives of ``config`` (None at dcp=1); the group sits inside the
    attention-TP group, so inside one scale-up domain."""
    group, atp = config.dcp, max(1, config.attention_tp)
    softmax = [g for g in card.attention if not g.kind.is_linear]
    if group <= 1 or not softmax:
        return None
    gpu = cluster.gpu
    query = output = 0.0
    layers = sum(g.num_layers for g in softmax)
    for g in softmax:
        heads = g.num_heads / atp
        if g.kind.value == "mla":
            q_width, o_width = g.kv_lora_rank + g.qk_rope_head_dim, g.kv_lora_rank
        else:
            q_width, o_width = g.head_dim, g.v_head_dim or g.head_dim
        query += g.num_layers / layers * heads * q_width * HIDDEN_BYTES
        output += g.num_layers / layers * heads * group * (o_width * HIDDEN_BYTES + LSE_BYTES)
    return DcpComm(group, layers, query, output, _us_per_byte(gpu, Collective.ALLGATHER, group),
                   _us_per_byte(gpu, Collective.REDUCE_SCATTER, group),
                   _latency_us(gpu, Collective.ALLGATHER, group) + _latency_us(gpu, Collective.REDUCE_SCATTER, group))


@dataclass(frozen=True, slots=True)
class SubgroupComm:
    """The TP-subgroup blocks of one forward (module docstring): ``blocks`` all-gather +
    all-to-all pairs over ``group`` attention-DP ranks."""

    group: int
    blocks: int
    input_bytes_per_token: float           # H * s_a
    gather_us_per_byte: float
    a2a_us_per_byte: float
    latency_us: float                      # one gather + one all-to-all, alpha above the launch

    def traffic_bytes_per_token(self) -> float:
        """Bytes one rank moves per token per block: ``(t-1) H s_a + ((t-1)/t) H s_a``."""
        t = self.group
        return (t - 1) * self.input_bytes_per_token + (t - 1) / t * self.input_bytes_per_token

    def us(self, rank_tokens: float) -> float:
        if rank_tokens <= 0:
            return 0.0
        gathered = self.group * rank_tokens * self.input_bytes_per_token * self.gather_us_per_byte
        returned = rank_tokens * self.input_bytes_per_token * self.a2a_us_per_byte
        return self.blocks * (gathered + returned + self.latency_us)


def subgroup_comm(card: ModelCard, cluster: Cluster, config: Configuration) -> SubgroupComm | None:
    """The subgroup collectives of ``config`` (None without ``/TSt``)."""
    group = config.tp_subgroup
    if group <= 1:
        return None
    gpu, crosses = cluster.gpu, group > max(1, cluster.scale_up_gpus())
    act = 1.0 if _runs(card, config, gpu, "attention") in LOW_PRECISION else float(HIDDEN_BYTES)
    mlp_layers = card.moe_layers if card.is_moe else 0
    mlp_layers += card.dense_layers if card.is_moe else card.num_layers
    latency = (_latency_or_inter(gpu, Collective.ALLGATHER, Collective.ALLREDUCE_INTER, group, crosses, 0.5)
               + _latency_or_inter(gpu, Collective.ALL_TO_ALL, Collective.ALL_TO_ALL_INTER, group, crosses))
    return SubgroupComm(
        group=group, blocks=card.num_layers + mlp_layers, input_bytes_per_token=card.hidden_size * act,
        gather_us_per_byte=_collective_or_inter(gpu, Collective.ALLGATHER, Collective.ALLREDUCE_INTER, group,
                                                crosses, inter_share=0.5),
        a2a_us_per_byte=_collective_or_inter(gpu, Collective.ALL_TO_ALL, Collective.ALL_TO_ALL_INTER, group, crosses),
        latency_us=latency)


def _collective_or_inter(gpu: GpuProfile, name: str, inter: str, group: int, crosses: bool,
                         inter_share: float = 1.0) -> float:
    if group <= 1:
        return 0.0
    if crosses:
        return inter_share * _us_per_byte(gpu, inter, group)
    return _us_per_byte(gpu, name, group)


def _latency_or_inter(gpu: GpuProfile, name: str, inter: str, group: int, crosses: bool,
                      inter_share: float = 1.0) -> float:
    if group <= 1:
        return 0.0
    return inter_share * _latency_us(gpu, inter, group) if crosses else _latency_us(gpu, name, group)


def _runs(card: ModelCard, config: Configuration, gpu: GpuProfile, component: str) -> str:
    """The activations ``component``'s GEMMs run (`Precisions.gemm_activation`): what a
    collective feeding them carries, quantised or not."""
    return precisions_on(card, config, gpu).gemm_activation(component)


def build_comm_model(card: ModelCard, cluster: Cluster, config: Configuration) -> CommModel:
    """The communication of ``config``'s replica layout on ``cluster`` (METHOD §3.7)."""
    gpu, tp, dp, ep = cluster.gpu, config.tp, config.attention_dp, config.ep
    atp = config.attention_tp
    scale_up = max(1, cluster.scale_up_gpus())
    crosses = tp > scale_up
    algorithm = config.allreduce_algorithm
    attention_ar = AllReduceTier.build(gpu, atp, algorithm, atp > scale_up)
    dense_group = config.dense_tp
    dense_ar = AllReduceTier.build(gpu, dense_group, algorithm, dense_group > scale_up)
    backend = config.all_to_all_backend in EP_BACKENDS and ep > 1
    moe_ar = AllReduceTier.build(gpu, tp, algorithm, crosses) if (dp == 1 and not backend) else None
    low_precision = _runs(card, config, gpu, "routed_experts") in LOW_PRECISION   # what dispatch carries
    width = card.expert_hidden_size * card.top_k
    a2a = _collective_or_inter(gpu, Collective.ALL_TO_ALL, Collective.ALL_TO_ALL_INTER, ep, ep > scale_up) if backend else 0.0
    gather_group = dp if (dp > 1 and not backend) else 1
    gather = _collective_or_inter(gpu, Collective.ALLGATHER, Collective.ALLREDUCE_INTER, gather_group,
                                  crosses, inter_share=0.5)
    scatter = _collective_or_inter(gpu, Collective.REDUCE_SCATTER, Collective.ALLREDUCE_INTER, gather_group,
                                   crosses, inter_share=0.5)
    total = tp * config.pp
    return CommModel(
        num_layers=card.num_layers, dense_layers=card.dense_layers if card.is_moe else card.num_layers,
        moe_layers=card.moe_layers if card.is_moe else 0,
        attention_ar=attention_ar, dense_ar=dense_ar, moe_ar=moe_ar,
        dcp=dcp_comm(card, cluster, config),
        hidden_bytes_per_token=card.hidden_size * HIDDEN_BYTES,
        dispatch_bytes_per_token=width * (1 if low_precision else HIDDEN_BYTES),
        combine_bytes_per_token=width * HIDDEN_BYTES,
        a2a_us_per_byte=a2a, allgather_us_per_byte=gather, reduce_scatter_us_per_byte=scatter,
        tokens_per_sending_gpu=1.0 / tp,
        logits_bytes_per_token=card.vocab_size * HIDDEN_BYTES,
        logits_us_per_byte=_collective_or_inter(gpu, Collective.ALLGATHER, Collective.ALLREDUCE_INTER, tp,
                                                crosses, inter_share=0.5),
        pp=config.pp,
        p2p_us_per_byte=_us_per_byte(gpu, Collective.P2P, 2),
        p2p_inter_us_per_byte=_us_per_byte(gpu, Collective.P2P_INTER, 2),
        domains_spanned=-(-total // scale_up),
        a2a_latency_us=_latency_or_inter(gpu, Collective.ALL_TO_ALL, Collective.ALL_TO_ALL_INTER, ep,
                                         ep > scale_up) if backend else 0.0,
        gather_latency_us=(_latency_or_inter(gpu, Collective.ALLGATHER, Collective.ALLREDUCE_INTER, gather_group,
                                             crosses, 0.5)
                           + _latency_or_inter(gpu, Collective.REDUCE_SCATTER, Collective.ALLREDUCE_INTER,
                                               gather_group, crosses, 0.5)),
        logits_latency_us=_latency_or_inter(gpu, Collective.ALLGATHER, Collective.ALLREDUCE_INTER, tp, crosses, 0.5),
        subgroup=subgroup_comm(card, cluster, config),
    )
