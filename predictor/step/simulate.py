"""Simulate mode: the step rebuilt per operator from the model card and GPU profile
(METHOD §2). Every number it produces is flagged ``rank-only``: the fixed per-step cost is
shared by candidates on one engine and mostly cancels, so it ranks, it does not promise.

A step is a full-depth forward of the replica's batch (the worst rank of each layer):
- ``gemm``: attention projections (MLA low-rank included), dense MLP, shared experts
  (with latent-MoE projections), router and LM head on a roofline with efficiency by
  shape (`predictor.step.operators`);
- ``attention``: per attention type (`operators.AttentionOp`);
- ``moe``: routed-expert GEMMs on the busiest EP rank, ``I_n * mean(n)`` rows over
  ``I_d * mean(d)`` experts (METHOD §3.5, `predictor.step.imbalance`), with the few-expert
  bandwidth shortfall, plus token permutation and expert activations scaled by ``I_n``.
  Anchored mode scales exactly this term by the imbalance ratios (:func:`moe_share`);
- ``communication``: `predictor.step.comm_cost` (``m / B`` only);
- ``launch``: kernels per forward x ``kernel_launch_us`` (+ eager dispatch), and
  ``other``: bandwidth-bound elementwise passes (`predictor.step.kernels`); enabled
  fusions subtract their savings from ``launch``, ``other`` and ``moe`` (`predictor.step.fusions`);
- ``speculation``: the drafter (`speculation.DrafterPlan`); a verify step processes
  ``b * (k + 1)`` tokens, which the other terms already price;
- ``pipeline``: under PP, Eq. 4's hops and host time (METHOD §3.6): the forward is priced
  at the micro-batch ``ceil(b / p)``; prefill pays the hops but no host time.

Under attention DP attention runs per rank on ``ceil(b / dp)`` requests with attention-TP
``tp / dp``; the MoE sees every token of the stage; dense MLP follows the attention ranks.

Speed: everything that depends only on the rows of a step is cached per row count at first
use; a decode call then evaluates the attention groups at the requested context.
"""

from __future__ import annotations

from dataclasses import dataclass

from levers.catalog import Engine
from levers.configuration import Configuration
from predictor.cards.model_card import AttentionGroup, AttentionKind, ModelCard
from predictor.hardware import Cluster
from predictor.step.comm_cost import CommModel, build_comm_model
from predictor.step.cost import Mode, StepCost
from predictor.step.fusions import fusion_plan
from predictor.step.imbalance import distinct_experts, few_expert_bw_fraction, imbalance_factors
from predictor.step.kernels import count_kernels, elementwise_bytes
from predictor.step.operators import (
    GB_PER_S_TO_BYTES_PER_US,
    TFLOPS_TO_FLOPS_PER_US,
    attention_op,
    elementwise_us,
    gemm_us,
    resolve_precisions,
)
from predictor.step.speculation import SpecMethod, acceptance_curve, drafter_plan
from predictor.step.transfer import pipeline_overhead_us

TERMS = ("gemm", "attention", "moe", "communication", "launch", "other", "speculation", "pipeline")
ROWS_CACHE_LIMIT = 65_536
BF16_BYTES, FP32_BYTES = 2, 4
EAGLE3_HEAD_DIM, EAGLE3_KV_HEADS = 128, 8
EAGLE3_KERNELS_PER_LAYER = 14
DRAFT_HEAD_KERNELS = 4   # LM head + 3 sampling kernels per draft token


@dataclass(frozen=True, slots=True)
class _Gemm:
    """GEMMs sharing rows and dtype, summed over the layers that run them (per GPU)."""

    params: float
    weight_bytes: float
    act_bytes_per_row: float
    flops_per_us: float

    def us(self, rows: float, bytes_per_us: float) -> float:
        return gemm_us(rows, self.params, self.weight_bytes, self.act_bytes_per_row, self.flops_per_us, bytes_per_us)


@dataclass(frozen=True, slots=True)
class _Moe:
    layers: int
    num_experts: int
    top_k: int
    ep: int
    eplb_replicas: int
    expert_params: float        # one expert's weights on one GPU (MoE-TP shard)
    full_expert_params: int
    expert_bytes_per_value: float
    expert_dtype: str
    act_bytes_per_row: float
    flops_per_us: float


def moe_share(step: StepCost) -> float:
    """Share of the step in the ``moe`` term (expert GEMMs + permutation, METHOD §3.5)."""
    total = step.total_us
    return step.get("moe") / total if total > 0 else 0.0


class SimulateStepModel:
    """The StepModel of simulate mode (rank-only) for one replica layout."""

    mode = Mode.RANK_ONLY
    anchor_id = None
    flags = ("rank-only",)

    def __init__(self, card: ModelCard, cluster: Cluster, engine: Engine | str, config: Configuration,
                 acceptance: tuple[float, ...] | None = None, entropy: str = "low") -> None:
        self.card, self.cluster, self.engine, self.config = card, cluster, engine, config
        gpu = cluster.gpu
        self._precisions = p = resolve_precisions(card, config, gpu.vendor)
        self._bytes_per_us = gpu.hbm_bandwidth_gbps * GB_PER_S_TO_BYTES_PER_US
        self._act_flops = gpu.peak_flops(p.activation) / TFLOPS_TO_FLOPS_PER_US
        self._bf16_flops = gpu.peak_flops("bf16") / TFLOPS_TO_FLOPS_PER_US
        self._dp, self._pp, self._tp, self._atp = config.attention_dp, config.pp, config.tp, config.attention_tp
        self._launch_us, self._hop_us = gpu.kernel_launch_us, gpu.pp_hop_overhead_us
        self._gemms = self._build_gemms()
        self._lm_head = self._head_gemm(card.vocab_size)
        self._attention = tuple(attention_op(g, self._atp, config.dcp, p.kv_bytes) for g in card.attention)
        self._moe = self._build_moe()
        self._kernels = count_kernels(card, config, p)
        self._elementwise = elementwise_bytes(card, config, p)
        self._comm = build_comm_model(card, cluster, config)
        self._fusions = fusion_plan(card, config, gpu.vendor)
        self._spec = SpecMethod(config.spec_method) if config.spec_depth > 0 else SpecMethod.NONE
        self._depth = config.spec_depth if self._spec is not SpecMethod.NONE else 0
        self._queries = self._depth + 1
        self._plan = drafter_plan(card, self._spec)
        self.curve = acceptance_curve(card.name, self._spec, entropy, override=acceptance)
        self.tokens_per_step = self.curve.length(self._depth)
        self._eagle = self._build_eagle() if self._plan.dense_layers_per_draft else None
        self._body_cache: dict[tuple[int, int], tuple[float, float, float, float, float]] = {}
        self._head_cache: dict[float, tuple[float, float]] = {}

    @property
    def comm_model(self) -> CommModel:
        """The layout's communication model (METHOD §3.7)."""
        return self._comm

    # -- construction ------------------------------------------------------------------
    def _dense_gemm(self, params: float, inner: float, layers: int) -> _Gemm:
        p, hidden = self._precisions, self.card.hidden_size
        act = hidden * p.activation_bytes + 2 * inner * BF16_BYTES + inner * p.activation_bytes + hidden * BF16_BYTES
        return _Gemm(layers * params, layers * params * p.weight_bytes, layers * act, self._act_flops)

    def _build_gemms(self) -> tuple[_Gemm, ...]:
        card, p, atp = self.card, self._precisions, self._atp
        mlp_tp = self.config.dense_tp
        hidden = card.hidden_size
        gemms = []
        for group in card.attention:
            params = group.replicated_params_per_layer + (group.params_per_layer - group.replicated_params_per_layer) / atp
            act = 2 * hidden * (p.activation_bytes + BF16_BYTES)
            gemms.append(_Gemm(group.num_layers * params, group.num_layers * params * p.weight_bytes,
                               group.num_layers * act, self._act_flops))
        moe_layers = card.moe_layers if card.is_moe else 0
        dense_layers = card.num_layers - moe_layers
        if dense_layers and card.dense_intermediate_size:
            gemms.append(self._dense_gemm(card.dense_mlp_params_per_layer() / mlp_tp,
                                          card.dense_intermediate_size / mlp_tp, dense_layers))
        if moe_layers:
            shared = card.shared_params_per_moe_layer() / mlp_tp
            if shared:
                inner = card.num_shared_experts * card.shared_intermediate_size / mlp_tp
                gemms.append(self._dense_gemm(shared, inner, moe_layers))
            router = card.router_params_per_moe_layer()
            gemms.append(_Gemm(moe_layers * router, moe_layers * router * BF16_BYTES,
                               moe_layers * (hidden * BF16_BYTES + card.num_experts * FP32_BYTES), self._bf16_flops))
        return tuple(gemms)

    def _head_gemm(self, vocab: int) -> _Gemm:
        params = vocab * self.card.hidden_size / self._tp
        act = self.card.hidden_size * BF16_BYTES + vocab / self._tp * BF16_BYTES
        return _Gemm(params, params * self._precisions.embedding_bytes, act, self._bf16_flops)

    def _build_moe(self) -> _Moe | None:
        card, config, p = self.card, self.config, self._precisions
        if not card.is_moe:
            return None
        moe_tp = max(1, config.moe_tp)
        width, inner = card.expert_hidden_size, card.moe_intermediate_size / moe_tp
        act = width * p.activation_bytes + 2 * inner * BF16_BYTES + inner * p.activation_bytes + width * BF16_BYTES
        return _Moe(card.moe_layers, card.num_experts, card.top_k, config.ep, config.eplb_replicas,
                    card.expert_params() / moe_tp, card.expert_params(), p.expert_bytes, p.expert, act,
                    self._act_flops)

    def _build_eagle(self) -> tuple[_Gemm, tuple]:
        """EAGLE-3's dense draft layer: a GQA layer (128-dim heads, 8 KV heads) in BF16."""
        hidden, atp = self.card.hidden_size, self._atp
        heads = max(1, hidden // EAGLE3_HEAD_DIM)
        kv_heads = min(EAGLE3_KV_HEADS, heads)
        inner = self.card.dense_intermediate_size or 8 * hidden // 3
        params = (2 * hidden * hidden + 2 * hidden * kv_heads * EAGLE3_HEAD_DIM) / atp + 3 * hidden * inner / atp
        act = 4 * hidden * BF16_BYTES + 3 * inner / atp * BF16_BYTES
        group = AttentionGroup(kind=AttentionKind.GQA, num_layers=1, num_heads=heads, num_kv_heads=kv_heads,
                               head_dim=EAGLE3_HEAD_DIM, params_per_layer=0)
        gemm = _Gemm(params, params * BF16_BYTES, act, self._bf16_flops)
        return gemm, (attention_op(group, atp, 1, self._precisions.kv_bytes),)

    # -- rows-only terms (cached) ---------------------------------------------------------
    def _moe_us(self, tokens: float) -> tuple[float, float]:
        """(moe term, busiest rank's routed rows) for ``tokens`` MoE tokens."""
        m = self._moe
        if m is None or tokens <= 0:
            return 0.0, 0.0
        factors = imbalance_factors(m.num_experts, m.top_k, m.ep, tokens, m.eplb_replicas)
        rows = factors.tokens_factor * tokens * m.top_k / m.ep
        local = m.num_experts / m.ep
        group = min(local, factors.experts_factor * distinct_experts(tokens, m.top_k, m.num_experts) / m.ep)
        group = max(group, 1.0)
        fraction = few_expert_bw_fraction(group, m.expert_dtype, m.full_expert_params)
        expert = gemm_us(rows, m.expert_params, group * m.expert_params * m.expert_bytes_per_value,
                         m.act_bytes_per_row, m.flops_per_us, self._bytes_per_us, fraction, rows / group)
        permutation = elementwise_us(rows * self._elementwise.per_moe_row / m.layers, self._bytes_per_us)
        return m.layers * (expert + permutation), rows

    def _body(self, rank_rows: int, stage_rows: int) -> tuple[float, float, float, float, float]:
        """(gemm, moe, communication, launch, other) of the layers, without the LM head."""
        key = (rank_rows, stage_rows)
        cached = self._body_cache.get(key)
        if cached is not None:
            return cached
        if len(self._body_cache) > ROWS_CACHE_LIMIT:
            self._body_cache.clear()
        bpu = self._bytes_per_us
        gemm = sum(g.us(rank_rows, bpu) for g in self._gemms)
        moe, moe_rows = self._moe_us(stage_rows)
        comm = self._comm.step_us(rank_rows, stage_rows)
        other = elementwise_us(rank_rows * self._elementwise.per_rank_row, bpu)
        captured = rank_rows <= self.config.max_captured_batch
        launch = self._kernels.launch_us(self._launch_us, self.config.graph_capture, captured,
                                         gemm + moe + comm + other)
        saved_launch, saved_other, saved_moe = self._fusions.saved_us(self._launch_us, bpu, rank_rows, moe_rows)
        terms = (gemm, max(0.0, moe - saved_moe), comm, max(0.0, launch - saved_launch),
                 max(0.0, other - saved_other))
        self._body_cache[key] = terms
        return terms

    def _head_us(self, lm_rows: float) -> tuple[float, float]:
        """(gemm, other) of the embedding, final norm, LM head and sampling (cached per rows)."""
        cached = self._head_cache.get(lm_rows)
        if cached is not None:
            return cached
        if len(self._head_cache) > ROWS_CACHE_LIMIT:
            self._head_cache.clear()
        terms = (self._lm_head.us(lm_rows, self._bytes_per_us),
                 elementwise_us(lm_rows * self._elementwise.per_lm_row, self._bytes_per_us))
        self._head_cache[lm_rows] = terms
        return terms

    # -- attention, drafting, pipeline ------------------------------------------------------
    def _decode_attention(self, requests: float, context: float, queries: float) -> float:
        total, flops, bpu = 0, self._bf16_flops, self._bytes_per_us   # a loop: ~2x a sum() of a generator
        for op in self._attention:
            total += op.decode_us(requests, context, queries, flops, bpu)
        return total

    def _prefill_attention(self, tokens: float, seqs: float, context: float) -> float:
        total, flops, bpu = 0, self._bf16_flops, self._bytes_per_us
        for op in self._attention:
            total += op.prefill_us(tokens, seqs, context, flops, bpu)
        return total

    def _mean_layer_us(self, rank_rows: int, stage_rows: int, attention_us: float) -> float:
        return (sum(self._body(rank_rows, stage_rows)) + attention_us) / self.card.num_layers

    def _draft_us(self, requests: int, stage_requests: int, context: float) -> float:
        """Drafting ``k`` tokens for the micro-batch (METHOD §3.8)."""
        plan, depth = self._plan, self._depth
        if depth == 0 or plan.is_free:
            return 0.0
        cost = 0.0
        if plan.target_layers_per_draft:
            attention = self._decode_attention(requests, context, 1)
            cost += depth * plan.target_layers_per_draft * self._mean_layer_us(requests, stage_requests, attention)
        if plan.target_layers_once:
            attention = self._decode_attention(requests, context, depth)
            cost += plan.target_layers_once * self._mean_layer_us(requests * depth, stage_requests * depth, attention)
        if self._eagle is not None:
            cost += depth * self._eagle_layer_us(requests, context)
        if plan.lm_head_vocab:
            head = self._head_gemm(plan.lm_head_vocab) if plan.lm_head_vocab != self.card.vocab_size else self._lm_head
            cost += depth * (head.us(stage_requests, self._bytes_per_us) + DRAFT_HEAD_KERNELS * self._launch_us)
        if plan.fusion_params_once:
            params = plan.fusion_params_once / self._atp
            cost += gemm_us(requests, params, params * BF16_BYTES, 0.0, self._bf16_flops, self._bytes_per_us)
        return cost

    def _eagle_layer_us(self, requests: float, context: float) -> float:
        gemm, ops = self._eagle
        attention = sum(op.decode_us(requests, context, 1, self._bf16_flops, self._bytes_per_us) for op in ops)
        comm = 2 * self._comm.attention_ar.us(requests * self._comm.hidden_bytes_per_token)
        return gemm.us(requests, self._bytes_per_us) + attention + comm + EAGLE3_KERNELS_PER_LAYER * self._launch_us

    def _pipeline_us(self, clients: int, micro_batch_tokens: float, with_host: bool = True) -> float:
        if self._pp <= 1:
            return 0.0
        hops = self._comm.hops_us(micro_batch_tokens)
        if not with_host:
            return hops + self._pp * self._hop_us
        return pipeline_overhead_us(clients, self._pp, hops, self._hop_us)

    # -- the StepModel protocol -------------------------------------------------------------
    def _decode_terms(self, batch: int, context: float) -> tuple[float, ...]:
        batch = max(1, int(batch))
        micro = -(-batch // self._pp)
        requests = -(-micro // self._dp)
        q = self._queries
        gemm, moe, comm, launch, other = self._body(requests * q, micro * q)
        head_gemm, head_other = self._head_us(micro * q)
        attention = self._decode_attention(requests, context, q)
        draft = self._draft_us(requests, micro, context)
        return (gemm + head_gemm, attention, moe, comm, launch, other + head_other, draft,
                self._pipeline_us(batch, micro * q))

    def decode(self, batch: int, context_tokens: float) -> StepCost:
        return StepCost(tuple(zip(TERMS, self._decode_terms(batch, context_tokens))))

    def decode_us(self, batch: int, context_tokens: float) -> float:
        return sum(self._decode_terms(batch, context_tokens))

    def _prefill_terms(self, num_tokens: int, num_seqs: int, context: float) -> tuple[float, ...]:
        tokens, seqs = max(1, int(num_tokens)), max(1, int(num_seqs))
        rank_tokens, rank_seqs = -(-tokens // self._dp), -(-seqs // self._dp)
        gemm, moe, comm, launch, other = self._body(rank_tokens, tokens)
        head_gemm, head_other = self._head_us(seqs)
        attention = self._prefill_attention(rank_tokens, rank_seqs, context)
        draft = self._draft_prefill_us(rank_tokens, tokens, rank_seqs, context)
        return (gemm + head_gemm, attention, moe, comm, launch, other + head_other, draft,
                self._pipeline_us(seqs, tokens, with_host=False))

    def _draft_prefill_us(self, rank_tokens: int, tokens: int, rank_seqs: int, context: float) -> float:
        """The drafter's own layers see the prompt once (their KV cache)."""
        plan = self._plan
        if self._depth == 0 or plan.is_free:
            return 0.0
        layers = plan.target_layers_per_draft + plan.target_layers_once
        cost = 0.0
        if layers:
            attention = self._prefill_attention(rank_tokens, rank_seqs, context)
            cost += layers * self._mean_layer_us(rank_tokens, tokens, attention)
        if self._eagle is not None:
            gemm, ops = self._eagle
            cost += gemm.us(rank_tokens, self._bytes_per_us) + sum(
                op.prefill_us(rank_tokens, rank_seqs, context, self._bf16_flops, self._bytes_per_us) for op in ops)
        return cost

    def prefill(self, num_tokens: int, num_seqs: int = 1, context_tokens: float = 0.0) -> StepCost:
        return StepCost(tuple(zip(TERMS, self._prefill_terms(num_tokens, num_seqs, context_tokens))))

    def prefill_us(self, num_tokens: int, num_seqs: int = 1, context_tokens: float = 0.0) -> float:
        return sum(self._prefill_terms(num_tokens, num_seqs, context_tokens))

    def _mixed_terms(self, prefill_tokens: int, decode_batch: int, context: float,
                     prefill_context: float) -> tuple[float, ...]:
        if decode_batch <= 0:
            return self._prefill_terms(prefill_tokens, 1, prefill_context)
        if prefill_tokens <= 0:
            return self._decode_terms(decode_batch, context)
        micro = -(-int(decode_batch) // self._pp)
        requests = -(-micro // self._dp)
        q, tokens = self._queries, int(prefill_tokens)
        rank_prefill = -(-tokens // self._dp)
        gemm, moe, comm, launch, other = self._body(rank_prefill + requests * q, tokens + micro * q)
        head_gemm, head_other = self._head_us(micro * q + 1)
        attention = (self._decode_attention(requests, context, q)
                     + self._prefill_attention(rank_prefill, 1, prefill_context))
        draft = self._draft_us(requests, micro, context)
        return (gemm + head_gemm, attention, moe, comm, launch, other + head_other, draft,
                self._pipeline_us(int(decode_batch), tokens + micro * q))

    def mixed(self, prefill_tokens: int, decode_batch: int, context_tokens: float,
              prefill_context_tokens: float = 0.0) -> StepCost:
        terms = self._mixed_terms(prefill_tokens, decode_batch, context_tokens, prefill_context_tokens)
        return StepCost(tuple(zip(TERMS, terms)))

    def mixed_us(self, prefill_tokens: int, decode_batch: int, context_tokens: float,
                 prefill_context_tokens: float = 0.0) -> float:
        return sum(self._mixed_terms(prefill_tokens, decode_batch, context_tokens, prefill_context_tokens))
