"""The step model: a step rebuilt per operator from the model card and GPU profile
(METHOD §2), priced under a calibration (`predictor.step.calibration`).

With the prior calibration this is simulate mode (rank-only unless the prior's measured
error says otherwise); with factors fitted to an anchor it is anchored mode
(`predictor.step.fit`). Both are the same structure: a calibration never replaces the
physics, it scales its terms.

A step is a full-depth forward of the replica's batch (the worst rank of each layer):
- ``gemm``: attention projections (MLA low-rank included), dense MLP, shared experts
  (with latent-MoE projections), router and LM head, rooflines with efficiency by shape
  (`predictor.step.operators`);
- ``attention``: per attention type (`operators.AttentionOp`), at the real batch;
- ``moe``: routed-expert GEMMs on the busiest EP rank, ``I_n * mean(n)`` rows over
  ``I_d * mean(d)`` experts (METHOD §3.5, `predictor.step.imbalance`), with the few-expert
  bandwidth shortfall, plus token permutation and expert activations scaled by ``I_n``:
  imbalance is evaluated at the layout's own EP, so a calibration fitted at one EP carries
  to another through the physics (both widths evaluated);
- ``communication``: `predictor.step.comm_cost` (``m / B``);
- ``launch``: kernels per forward x the per-kernel cost (+ eager issue), ``other``:
  bandwidth-bound elementwise passes (`predictor.step.kernels`); enabled fusions subtract
  their savings (`predictor.step.fusions`); ``fixed``: the calibration's per-step cost;
- ``speculation``: the drafter (`speculation.DrafterPlan`); a verify step processes
  ``b * (k + 1)`` tokens, which the other terms already price;
- ``pipeline``: under PP, Eq. 4's hops and host time (METHOD §3.6): the forward is priced
  at the micro-batch ``ceil(b / p)``; prefill pays the hops but no host time.

Graph capture (METHOD §3.3): under full or piecewise capture a decode step's GEMMs, MoE,
collectives and elementwise passes run at the padded batch (the next captured size, up to
``max_captured_batch``); attention runs at the real batch (padded requests attend nothing).
Under attention DP attention runs per rank on ``ceil(b / dp)`` requests with attention-TP
``tp / dp``; the MoE sees every token of the stage; dense MLP follows the attention ranks.

Speed: raw parts and their price depend only on the rows of a step and are cached per row
count at first use; a decode call then prices the attention groups at its context.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass

from levers.catalog import Engine
from levers.configuration import Configuration
from predictor.cards.model_card import AttentionGroup, AttentionKind, ModelCard
from predictor.hardware import Cluster
from predictor.memory import dtype_bytes
from predictor.step.calibration import HOST_MAX_MS, PHYSICS, Calibration
from predictor.step.comm_cost import CommModel, build_comm_model
from predictor.step.cost import Mode, StepCost
from predictor.step.dcp import excess_tokens_per_request
from predictor.step.dwdp import LayerCosts, dwdp_plan
from predictor.step.fusions import fusion_plan
from predictor.step.imbalance import distinct_experts, few_expert_bw_fraction, imbalance_factors
from predictor.step.kernels import count_kernels, elementwise_bytes
from predictor.step.operators import (
    ELEMENTWISE_BW_EFFICIENCY,
    GB_PER_S_TO_BYTES_PER_US,
    TFLOPS_TO_FLOPS_PER_US,
    attention_op,
    gemm_parts,
    precisions_on,
)
from predictor.step.residual import DecodeResidual, PrefillResidual
from predictor.step.roofline import ATTENTION, GEMM, MOE, RawStep, Roofline, price, rooflines_us
from predictor.step.speculation import NGRAM_DEFAULT_SOURCE, SpecMethod, acceptance_curve, drafter_plan
from predictor.step.transfer import pipeline_overhead_us

TERMS = ("gemm", "attention", "moe", "communication", "launch", "other", "fixed", "speculation", "pipeline")
ROWS_CACHE_LIMIT = 65_536
BF16_BYTES, FP32_BYTES = 2, 4
EAGLE3_HEAD_DIM, EAGLE3_KV_HEADS = 128, 8
EAGLE3_KERNELS_PER_LAYER = 14
DRAFT_HEAD_KERNELS = 4   # LM head + 3 sampling kernels per draft token
CAPTURE_SIZES: tuple[int, ...] = (1, 2, 4) + tuple(range(8, 1025, 8))   # engines' default ladder

DECODE_MEMO_LIMIT = 4096   # memoised decode steps per model before the memo is reset


@dataclass(frozen=True, slots=True)
class _Gemm:
    """GEMMs sharing rows and dtype, summed over the layers that run them (per GPU)."""

    params: float
    weight_bytes: float
    act_bytes_per_row: float
    flops_per_us: float
    tile_rows: float = 64.0
    row_scale: float = 1.0      # a TP subgroup's GEMM runs on its ranks' gathered rows

    def roofline(self, rows: float, bytes_per_us: float, term: int = GEMM) -> Roofline:
        return Roofline(term, *self.parts(rows, bytes_per_us))

    def parts(self, rows: float, bytes_per_us: float) -> tuple[float, float]:
        """(memory, compute) us over ``rows`` rows (`gemm_parts`)."""
        if self.row_scale != 1.0:
            rows = rows * self.row_scale
        return gemm_parts(rows, self.params, self.weight_bytes, self.act_bytes_per_row,
                          self.flops_per_us, bytes_per_us, tile_rows=self.tile_rows)


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


def padded_rows(rows: int, captured: tuple[int, ...]) -> int:
    """The captured size ``rows`` is padded to (METHOD §3.3); ``rows`` above the largest."""
    index = bisect_left(captured, rows)
    return captured[index] if index < len(captured) else rows


@dataclass(frozen=True, slots=True)
class CarriedHost:
    """An anchor's fitted host time carried off its own widths (`predictor.step.anchored.
    carried_host`): ``front_ms`` (its engine's front-end constant) stays, the rest scales
    with this layout's decode step at ``step`` (batch, context) over the anchor's
    ``anchor_step_us``."""

    front_ms: float
    anchor_step_us: float
    step: tuple[int, int]


def _attention_step(parts) -> RawStep:
    """The attention groups' (memory, compute) parts as one step's rooflines."""
    return RawStep(tuple(Roofline(ATTENTION, m, c) for m, c in parts))


class SimulateStepModel:
    """The step model of one replica layout under one calibration (module docstring)."""

    def __init__(self, card: ModelCard, cluster: Cluster, engine: Engine | str, config: Configuration,
                 acceptance: tuple[float, ...] | None = None, entropy: str = "low", *,
                 calibration: Calibration = PHYSICS, mode: Mode = Mode.RANK_ONLY, anchor_id: str | None = None,
                 flags: tuple[str, ...] = ("rank-only",), captured_sizes: tuple[int, ...] | None = None,
                 first_wave_stall_ms: float = 0.0, first_wave_stall_per_client_ms: float = 0.0,
                 decode_residual: DecodeResidual | None = None,
                 prefill_residual: PrefillResidual | None = None, carried_host: CarriedHost | None = None) -> None:
        self.card, self.cluster, self.engine, self.config = card, cluster, engine, config
        self._carried_host = carried_host
        self._host_ms: float | None = None
        self.decode_residual = decode_residual
        self.prefill_residual = prefill_residual
        self._residual_memo: dict[tuple[int, float], float] = {}
        self.calibration, self.mode, self.anchor_id = calibration, mode, anchor_id
        self.first_wave_stall_ms = first_wave_stall_ms
        self.first_wave_stall_per_client_ms = first_wave_stall_per_client_ms
        self._decode_memo: dict[tuple[int, float], tuple[float, ...]] = {}
        self._flags = tuple(flags)
        gpu = cluster.gpu
        self._precisions = p = precisions_on(card, config, gpu)
        self._bytes_per_us = gpu.hbm_bandwidth_gbps * GB_PER_S_TO_BYTES_PER_US
        self._bf16_flops = gpu.peak_flops("bf16") / TFLOPS_TO_FLOPS_PER_US
        self._dp, self._pp, self._tp, self._atp = config.attention_dp, config.pp, config.tp, config.attention_tp
        self._launch_us = gpu.kernel_launch_us if calibration.launch_us is None else calibration.launch_us
        self._tile = gpu.gemm_tile_rows
        self._hop_us = gpu.pp_hop_overhead_us
        self._subgroup = config.tp_subgroup
        self._dcp = config.dcp
        self._gemms = self._build_gemms()
        self._lm_head = self._head_gemm(card.vocab_size)
        self._attention = tuple(attention_op(g, self._atp, config.dcp, p.kv_bytes) for g in card.attention)
        self._group_kinds = tuple((g.kind.is_linear, g.num_layers) for g in card.attention)
        self._moe = self._build_moe()
        self._kernels = count_kernels(card, config, p)
        self._elementwise = elementwise_bytes(card, config, p)
        self._comm = build_comm_model(card, cluster, config)
        self._dwdp = (dwdp_plan(card, config.dwdp_ranks, p.expert_bytes, gpu.intra_node_bw_gbps)
                      if config.dwdp_ranks > 1 and card.is_moe else None)
        self._fusions = fusion_plan(card, config, gpu.vendor, bool(gpu.fp4_tflops))
        self._spec = SpecMethod(config.spec_method) if config.spec_depth > 0 else SpecMethod.NONE
        self._depth = config.spec_depth if self._spec is not SpecMethod.NONE else 0
        self._queries = self._depth + 1
        self._plan = drafter_plan(card, self._spec)
        self.curve = acceptance_curve(card.name, self._spec, entropy, override=acceptance)
        self.tokens_per_step = self.curve.length(self._depth)
        self._eagle = self._build_eagle() if self._plan.dense_layers_per_draft else None
        # a drafter of its own layers only: priced without building raw steps (`_draft_us`)
        self._eagle_only = (self._eagle is not None and self._depth > 0 and not self._plan.is_free
                            and not self._plan.target_layers_per_draft and not self._plan.target_layers_once)
        vocab = self._plan.lm_head_vocab
        self._draft_head = None if not vocab else self._lm_head if vocab == card.vocab_size else self._head_gemm(vocab)
        sizes = CAPTURE_SIZES if captured_sizes is None else tuple(sorted(captured_sizes))
        self._captured = tuple(s for s in sizes if s <= config.max_captured_batch)
        self._pads = config.graph_capture != "none"
        self._raw_body_memo: dict[tuple, RawStep] = {}
        # per rows: the layers' priced terms, and (gemm, moe, communication, launch, other) of them
        self._body_memo: dict[tuple[int, int], tuple[dict[str, float], tuple[float, ...]]] = {}
        self._head_cache: dict[float, tuple[float, float]] = {}
        self._group_gemm_memo: dict[int, tuple[float, ...]] = {}
        self._prefill_fixed_memo: dict[tuple[int, int], tuple[dict[str, float], dict[str, float]]] = {}

    @property
    def flags(self) -> tuple[str, ...]:
        if self._depth and self.curve.source == NGRAM_DEFAULT_SOURCE:
            return (*self._flags, "acceptance: n-gram default (pass --acceptance)")
        return self._flags

    @property
    def attention_dp(self) -> int:
        return self._dp

    @property
    def host_time_ms(self) -> float:
        """Per-request host time on TTFT and end-to-end (METHOD §3.12), fixed part; an
        anchor's carried off its widths (`CarriedHost`)."""
        carried = self._carried_host
        if carried is None:
            return self.calibration.host_ms
        if self._host_ms is None:
            excess = self.calibration.host_ms - carried.front_ms
            ratio = self.decode(*carried.step).total_us / carried.anchor_step_us
            self._host_ms = min(HOST_MAX_MS, carried.front_ms + max(0.0, excess) * ratio)
        return self._host_ms

    @property
    def host_us_per_prompt_token(self) -> float:
        return self.calibration.host_us_per_token

    @property
    def comm_model(self) -> CommModel:
        """The layout's communication model (METHOD §3.7)."""
        return self._comm

    def with_calibration(self, calibration: Calibration) -> SimulateStepModel:
        """The same layout under other factors (for the fit; caches start empty)."""
        return SimulateStepModel(self.card, self.cluster, self.engine, self.config, calibration=calibration,
                                 mode=self.mode, anchor_id=self.anchor_id, flags=self._flags,
                                 captured_sizes=self._captured, first_wave_stall_ms=self.first_wave_stall_ms,
                                 first_wave_stall_per_client_ms=self.first_wave_stall_per_client_ms,
                                 carried_host=self._carried_host)

    # -- construction ------------------------------------------------------------------
    def _gemm_rates(self, component: str) -> tuple[float, float]:
        """(activation bytes per value, FLOPs per us) of the GEMMs of weight ``component``:
        at the activations they run (`Precisions.gemm_activation`)."""
        activation = self._precisions.gemm_activation(component)
        return (dtype_bytes(activation, self.cluster.gpu.vendor),
                self.cluster.gpu.peak_flops(activation) / TFLOPS_TO_FLOPS_PER_US)

    def _dense_gemm(self, params: float, inner: float, layers: int, weight_bytes: float, component: str) -> _Gemm:
        hidden, sub = self.card.hidden_size, self._subgroup
        if sub > 1:    # TP subgroup: 1/t of the weights over t ranks' rows
            params, inner = params / sub, inner / sub
        act_bytes, flops = self._gemm_rates(component)
        act = hidden * act_bytes + 2 * inner * BF16_BYTES + inner * act_bytes + hidden * BF16_BYTES
        return _Gemm(layers * params, layers * params * weight_bytes, layers * act, flops, self._tile, float(sub))

    def _build_gemms(self) -> tuple[_Gemm, ...]:
        """Attention projections per group (in group order: `prefill_layer_costs` reads them
        so), then dense MLP, shared experts, router; under TP subgroups the replicated
        attention parts last."""
        card, p, atp = self.card, self._precisions, self._atp
        mlp_tp = self.config.dense_tp
        hidden = card.hidden_size
        gemms, replicated_parts = [], []
        act_bytes, flops = self._gemm_rates("attention")
        for group in card.attention:
            act = 2 * hidden * (act_bytes + BF16_BYTES)
            if self._subgroup > 1:
                sharded = (group.params_per_layer - group.replicated_params_per_layer) / atp / self._subgroup
                gemms.append(_Gemm(group.num_layers * sharded, group.num_layers * sharded * p.weight_bytes,
                                   group.num_layers * act, flops, self._tile, float(self._subgroup)))
                replicated = group.num_layers * group.replicated_params_per_layer
                replicated_parts.append(_Gemm(replicated, replicated * p.weight_bytes, 0.0, flops, self._tile))
                continue
            params = group.replicated_params_per_layer + (group.params_per_layer - group.replicated_params_per_layer) / atp
            gemms.append(_Gemm(group.num_layers * params, group.num_layers * params * p.weight_bytes,
                               group.num_layers * act, flops, self._tile))
        moe_layers = card.moe_layers if card.is_moe else 0
        dense_layers = card.num_layers - moe_layers
        if dense_layers and card.dense_intermediate_size:
            gemms.append(self._dense_gemm(card.dense_mlp_params_per_layer() / mlp_tp,
                                          card.dense_intermediate_size / mlp_tp, dense_layers, p.dense_mlp_bytes,
                                          "dense_mlp"))
        if moe_layers:
            shared = card.shared_params_per_moe_layer() / mlp_tp
            if shared:
                inner = card.num_shared_experts * card.shared_intermediate_size / mlp_tp
                gemms.append(self._dense_gemm(shared, inner, moe_layers, p.shared_bytes, "shared_experts"))
            router = card.router_params_per_moe_layer()
            gemms.append(_Gemm(moe_layers * router, moe_layers * router * BF16_BYTES,
                               moe_layers * (hidden * BF16_BYTES + card.num_experts * FP32_BYTES), self._bf16_flops,
                               self._tile))
        return tuple(gemms + replicated_parts)

    def _head_gemm(self, vocab: int) -> _Gemm:
        params = vocab * self.card.hidden_size / self._tp
        act = self.card.hidden_size * BF16_BYTES + vocab / self._tp * BF16_BYTES
        return _Gemm(params, params * self._precisions.embedding_bytes, act, self._bf16_flops, self._tile)

    def _build_moe(self) -> _Moe | None:
        card, config, p = self.card, self.config, self._precisions
        if not card.is_moe:
            return None
        moe_tp = max(1, config.moe_tp)
        width, inner = card.expert_hidden_size, card.moe_intermediate_size / moe_tp
        act_bytes, flops = self._gemm_rates("routed_experts")
        act = width * act_bytes + 2 * inner * BF16_BYTES + inner * act_bytes + width * BF16_BYTES
        return _Moe(card.moe_layers, card.num_experts, card.top_k, config.ep, config.eplb_replicas,
                    card.expert_params() / moe_tp, card.expert_params(), p.expert_bytes, p.expert, act, flops)

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
        gemm = _Gemm(params, params * self._precisions.drafter_bytes, act, self._bf16_flops, self._tile)
        return gemm, (attention_op(group, atp, 1, self._precisions.kv_bytes),)

    # -- raw parts (what a calibration scales) ----------------------------------------------
    def _moe_raw(self, tokens: float) -> tuple[Roofline | None, float, float]:
        """(expert roofline, permutation/activation us, busiest rank's routed rows)."""
        parts = self._moe_parts(tokens)
        if parts is None:
            return None, 0.0, 0.0
        memory, compute, permutation, rows = parts
        return Roofline(MOE, memory, compute), permutation, rows

    def _moe_parts(self, tokens: float) -> tuple[float, float, float, float] | None:
        """(expert memory us, expert compute us, permutation/activation us, busiest rank's
        routed rows) summed over the MoE layers; None without routed experts."""
        m = self._moe
        if m is None or tokens <= 0:
            return None
        factors = imbalance_factors(m.num_experts, m.top_k, m.ep, tokens, m.eplb_replicas)
        rows = factors.tokens_factor * tokens * m.top_k / m.ep
        local = m.num_experts / m.ep
        group = min(local, factors.experts_factor * distinct_experts(tokens, m.top_k, m.num_experts) / m.ep)
        group = max(group, 1.0)
        fraction = few_expert_bw_fraction(group, m.expert_dtype, m.full_expert_params)
        memory, compute = gemm_parts(rows, m.expert_params, group * m.expert_params * m.expert_bytes_per_value,
                                     m.act_bytes_per_row, m.flops_per_us, self._bytes_per_us, fraction, rows / group,
                                     self._tile)
        permutation = rows * self._elementwise.per_moe_row / m.layers / self._elementwise_bpu
        return m.layers * memory, m.layers * compute, m.layers * permutation, rows

    @property
    def _elementwise_bpu(self) -> float:
        return self._bytes_per_us * ELEMENTWISE_BW_EFFICIENCY

    def body_raw(self, rank_rows: int, stage_rows: int, captured: bool | None = None) -> RawStep:
        """The layers of one forward (no LM head): ``rank_rows`` rows per attention rank,
        ``stage_rows`` in the stage. Memoised per rows (a pure function of them: a prefill,
        its DWDP layer costs and its drafter ask for the same body; drafting re-asks per step)."""
        key = (rank_rows, stage_rows, captured)
        found = self._raw_body_memo.get(key)
        if found is None:
            if len(self._raw_body_memo) > ROWS_CACHE_LIMIT:
                self._raw_body_memo.clear()
            found = self._raw_body_memo[key] = self._body_raw(rank_rows, stage_rows, captured)
        return found

    def _body_raw(self, rank_rows: int, stage_rows: int, captured: bool | None) -> RawStep:
        bpu = self._bytes_per_us
        rooflines = [g.roofline(rank_rows, bpu) for g in self._gemms]
        expert, permutation, moe_rows = self._moe_raw(stage_rows)
        if expert is not None:
            rooflines.append(expert)
        return RawStep(tuple(rooflines), *self._body_rest(rank_rows, stage_rows, captured, permutation, moe_rows))

    def _body_rest(self, rank_rows: int, stage_rows: int, captured: bool | None, permutation: float,
                   moe_rows: float) -> tuple[float, float, float, float, float]:
        """The body's (elementwise, MoE elementwise, communication us, kernels, issued)."""
        elementwise = rank_rows * self._elementwise.per_rank_row / self._elementwise_bpu
        kernels = self._kernels
        if captured is None:
            captured = rank_rows <= self.config.max_captured_batch
        capture = self.config.graph_capture
        issued = kernels.per_forward if (capture == "none" or not captured) else (
            2 * kernels.attention if capture == "piecewise" else 0)
        saved_launch, saved_other, saved_moe = self._fusions.saved_us(1.0, self._elementwise_bpu, rank_rows, moe_rows)
        return (max(0.0, elementwise - saved_other), max(0.0, permutation - saved_moe),
                self._comm.step_us(rank_rows, stage_rows),
                max(0.0, kernels.per_forward - kernels.per_forward_head - saved_launch), issued)

    def _body_priced_now(self, rank_rows: int, stage_rows: int) -> dict[str, float]:
        """``price(body_raw(rank_rows, stage_rows))`` without building the GEMMs' rooflines:
        their priced sums handed to `price` (a mixed step's body is asked at a new row count
        almost every step of a replay, so its rooflines would be built once and dropped)."""
        bpu = self._bytes_per_us
        gemm = rooflines_us([g.parts(rank_rows, bpu) for g in self._gemms], self.calibration)
        expert = permutation = moe_rows = 0.0
        parts = self._moe_parts(stage_rows)
        if parts is not None:
            memory, compute, permutation, moe_rows = parts
            expert = rooflines_us(((memory, compute),), self.calibration)
        rest = RawStep((), *self._body_rest(rank_rows, stage_rows, None, permutation, moe_rows))
        return price(rest, self.calibration, self._launch_us, summed=(gemm, 0.0, expert))

    def head_raw(self, lm_rows: float) -> RawStep:
        """Embedding, final norm, LM head and sampling."""
        elementwise = lm_rows * self._elementwise.per_lm_row / self._elementwise_bpu
        return RawStep((self._lm_head.roofline(lm_rows, self._bytes_per_us),), elementwise,
                       kernels=self._kernels.per_forward_head)

    def attention_raw(self, requests: float, context: float, queries: float) -> RawStep:
        return _attention_step(op.decode_parts(requests, context, queries, self._bf16_flops, self._bytes_per_us)
                               for op in self._attention)

    def prefill_attention_raw(self, tokens: float, seqs: float, context: float) -> RawStep:
        return _attention_step(self._prefill_attention_parts(tokens, seqs, context))

    def _prefill_attention_parts(self, tokens: float, seqs: float, context: float) -> tuple[tuple[float, float], ...]:
        """Each attention group's (memory, compute) on a prefill of ``tokens`` in ``seqs``."""
        flops, bpu = self._bf16_flops, self._bytes_per_us
        return tuple(op.prefill_parts(tokens, seqs, context, flops, bpu) for op in self._attention)

    def _padded(self, rows: int) -> int:
        return padded_rows(rows, self._captured) if self._pads and rows <= self.config.max_captured_batch else rows

    def decode_raw(self, batch: int, context: float) -> list[RawStep]:
        """The parts of a decode step (each priced on its own, as the fast path does)."""
        micro, requests, q = self._decode_shape(batch)
        padded_micro = self._padded(micro)
        padded_requests = -(-padded_micro // self._dp)
        parts = [self.body_raw(padded_requests * q, padded_micro * q), self.head_raw(padded_micro * q),
                 self.attention_raw(requests, context, q), RawStep(fixed_steps=1.0,
                                                                  pipeline_us=self._pipeline_us(batch, micro * q))]
        return parts + self._draft_raw(requests, micro, context)

    def prefill_raw(self, num_tokens: int, num_seqs: int = 1, context: float = 0.0) -> list[RawStep]:
        tokens, seqs = max(1, int(num_tokens)), max(1, int(num_seqs))
        rank_tokens, rank_seqs = self._prefill_rank(tokens, seqs)
        parts = [self.body_raw(rank_tokens, tokens), self.head_raw(seqs),
                 self.prefill_attention_raw(rank_tokens, rank_seqs, context),
                 RawStep(fixed_steps=1.0, pipeline_us=self._pipeline_us(seqs, tokens, with_host=False))]
        return parts + self._draft_prefill_raw(rank_tokens, tokens, rank_seqs, context)

    # -- DWDP (predictor.step.dwdp) ---------------------------------------------------------
    def prefill_layer_costs(self, num_tokens: int, num_seqs: int = 1, context: float = 0.0,
                            attention_parts: tuple[tuple[float, float], ...] | None = None) -> LayerCosts:
        """One softmax / linear layer's priced compute and one MoE layer's routed experts on
        a prefill of ``num_tokens`` (the rest of a forward spread evenly over the layers);
        ``attention_parts``: the groups' (memory, compute) at this shape when known."""
        tokens, seqs = max(1, int(num_tokens)), max(1, int(num_seqs))
        rank_tokens, rank_seqs = self._prefill_rank(tokens, seqs)
        body = self._body_terms(rank_tokens, tokens)
        card, bw, cp = self.card, self.calibration.bandwidth, self.calibration.compute
        if attention_parts is None:
            attention_parts = self._prefill_attention_parts(rank_tokens, rank_seqs, context)
        softmax = linear = grouped = 0.0
        # each group's GEMMs and attention priced as `roofline.price` prices a one-layer step
        gemms = self._group_gemm_us(rank_tokens)
        for (is_linear, num_layers), gemm_us, (memory, compute) in zip(self._group_kinds, gemms, attention_parts):
            layer_us = (gemm_us + max(bw * memory, cp * compute)) / num_layers
            grouped += gemm_us
            if is_linear:
                linear = max(linear, layer_us)
            else:
                softmax = max(softmax, layer_us)
        moe_layer = body["moe"] / card.moe_layers if card.moe_layers else 0.0
        rest = (body["gemm"] - grouped + body["other"] + body["launch"] + body["communication"]
                + body["moe"]) / card.num_layers
        return LayerCosts(softmax + rest, linear + rest, moe_layer)

    def _group_gemm_us(self, rank_rows: int) -> tuple[float, ...]:
        """Each attention group's priced projection GEMMs at ``rank_rows`` (cached per rows)."""
        found = self._group_gemm_memo.get(rank_rows)
        if found is None:
            if len(self._group_gemm_memo) > ROWS_CACHE_LIMIT:
                self._group_gemm_memo.clear()
            bpu, bw, cp = self._bytes_per_us, self.calibration.bandwidth, self.calibration.compute
            found = self._group_gemm_memo[rank_rows] = tuple(
                gemm.roofline(rank_rows, bpu).us(bw, cp) for gemm in self._gemms[:len(self._attention)])
        return found

    def _dwdp_exposed_us(self, num_tokens: int, num_seqs: int, context: float,
                         attention_parts: tuple[tuple[float, float], ...] | None = None) -> float:
        if self._dwdp is None or num_tokens <= 0:
            return 0.0
        return self._dwdp.exposed_us(self.prefill_layer_costs(num_tokens, num_seqs, context, attention_parts))

    # -- drafting and pipeline -------------------------------------------------------------
    def _draft_raw(self, requests: int, stage_requests: int, context: float) -> list[RawStep]:
        """Drafting ``k`` tokens for the micro-batch (METHOD §3.8), as scaled layer parts."""
        plan, depth, layers = self._plan, self._depth, self.card.num_layers
        if depth == 0 or plan.is_free:
            return []
        draft = RawStep()
        if plan.target_layers_per_draft:
            layer = self.body_raw(requests, stage_requests).plus(self.attention_raw(requests, context, 1))
            draft = draft.plus(layer, depth * plan.target_layers_per_draft / layers)
        if plan.target_layers_once:
            layer = self.body_raw(requests * depth, stage_requests * depth).plus(
                self.attention_raw(requests, context, depth))
            draft = draft.plus(layer, plan.target_layers_once / layers)
        if self._eagle is not None:
            draft = draft.plus(self._eagle_raw(requests, context), depth)
        if self._draft_head is not None:
            draft = draft.plus(RawStep((self._draft_head.roofline(stage_requests, self._bytes_per_us),),
                                       kernels=DRAFT_HEAD_KERNELS), depth)
        if plan.fusion_params_once:
            params = plan.fusion_params_once / self._atp
            memory, compute = gemm_parts(requests, params, params * BF16_BYTES, 0.0, self._bf16_flops,
                                         self._bytes_per_us, tile_rows=self._tile)
            draft = draft.plus(RawStep((Roofline(GEMM, memory, compute),)))
        return [draft]

    def _eagle_raw(self, requests: float, context: float) -> RawStep:
        gemm, ops = self._eagle
        attention = [op.decode_parts(requests, context, 1, self._bf16_flops, self._bytes_per_us) for op in ops]
        comm = 2 * self._comm.attention_ar.us(requests * self._comm.hidden_bytes_per_token)
        return RawStep((gemm.roofline(requests, self._bytes_per_us), *(Roofline(ATTENTION, m, c) for m, c in attention)),
                       comm_us=comm, kernels=EAGLE3_KERNELS_PER_LAYER)

    def _draft_prefill_raw(self, rank_tokens: int, tokens: int, rank_seqs: int, context: float) -> list[RawStep]:
        """The drafter's own layers see the prompt once (their KV cache)."""
        plan = self._plan
        if self._depth == 0 or plan.is_free:
            return []
        layers = plan.target_layers_per_draft + plan.target_layers_once
        draft = RawStep()
        if layers:
            layer = self.body_raw(rank_tokens, tokens).plus(self.prefill_attention_raw(rank_tokens, rank_seqs, context))
            draft = draft.plus(layer, layers / self.card.num_layers)
        if self._eagle is not None:
            gemm, ops = self._eagle
            parts = [op.prefill_parts(rank_tokens, rank_seqs, context, self._bf16_flops, self._bytes_per_us)
                     for op in ops]
            draft = draft.plus(RawStep((gemm.roofline(rank_tokens, self._bytes_per_us),
                                        *(Roofline(ATTENTION, m, c) for m, c in parts))))
        return [draft]

    def _draft_prefill_us(self, rank_tokens: int, tokens: int, rank_seqs: int, context: float) -> float:
        """`_draft_prefill_raw` priced and summed. A drafter of its own layers only (EAGLE)
        is a GEMM and attention rooflines with no launches, elementwise work or collectives,
        so it is priced directly, in `roofline.price`'s arithmetic and order (every other
        term is an exact zero; a replay prices a new prompt length almost every prefill)."""
        if not self._eagle_only:
            return sum(sum(self._priced(raw).values())
                       for raw in self._draft_prefill_raw(rank_tokens, tokens, rank_seqs, context))
        gemm, ops = self._eagle
        bpu = self._bytes_per_us
        head = rooflines_us((gemm.parts(rank_tokens, bpu),), self.calibration)
        attention = rooflines_us([op.prefill_parts(rank_tokens, rank_seqs, context, self._bf16_flops, bpu)
                                  for op in ops], self.calibration)
        return head + attention

    def _pipeline_us(self, clients: int, micro_batch_tokens: float, with_host: bool = True) -> float:
        if self._pp <= 1:
            return 0.0
        hops = self._comm.hops_us(micro_batch_tokens)
        if not with_host:
            return hops + self._pp * self._hop_us
        return pipeline_overhead_us(clients, self._pp, hops, self._hop_us)

    # -- pricing -------------------------------------------------------------------------------
    def _priced(self, raw: RawStep) -> dict[str, float]:
        return price(raw, self.calibration, self._launch_us)

    def _body(self, rank_rows: int, stage_rows: int) -> tuple[float, ...]:
        """Priced (gemm, moe, communication, launch, other) of the layers (cached per rows)."""
        return self._body_priced(rank_rows, stage_rows)[1]

    def _body_terms(self, rank_rows: int, stage_rows: int) -> dict[str, float]:
        """The layers' priced terms (cached per rows: a prefill's DWDP layer costs and its
        own price ask for the same body)."""
        return self._body_priced(rank_rows, stage_rows)[0]

    def _body_priced(self, rank_rows: int, stage_rows: int) -> tuple[dict[str, float], tuple[float, ...]]:
        key = (rank_rows, stage_rows)
        found = self._body_memo.get(key)
        if found is None:
            if len(self._body_memo) > ROWS_CACHE_LIMIT:
                self._body_memo.clear()
            terms = self._body_priced_now(rank_rows, stage_rows)
            found = self._body_memo[key] = (terms, (terms["gemm"], terms["moe"], terms["communication"],
                                                     terms["launch"], terms["other"]))
        return found

    def _prefill_fixed_priced(self, tokens: int, seqs: int) -> tuple[dict[str, float], dict[str, float]]:
        """A prefill's priced head and per-step parts (`prefill_raw`'s second and fourth),
        which depend on its shape alone (cached per shape)."""
        key = (tokens if self._pp > 1 else 0, seqs)     # the hops alone depend on the tokens
        found = self._prefill_fixed_memo.get(key)
        if found is None:
            if len(self._prefill_fixed_memo) > ROWS_CACHE_LIMIT:
                self._prefill_fixed_memo.clear()
            found = self._prefill_fixed_memo[key] = (
                self._priced(self.head_raw(seqs)),
                self._priced(RawStep(fixed_steps=1.0, pipeline_us=self._pipeline_us(seqs, tokens, with_host=False))))
        return found

    def _head(self, lm_rows: float) -> tuple[float, float, float]:
        cached = self._head_cache.get(lm_rows)
        if cached is None:
            if len(self._head_cache) > ROWS_CACHE_LIMIT:
                self._head_cache.clear()
            terms = self._priced(self.head_raw(lm_rows))
            cached = self._head_cache[lm_rows] = (terms["gemm"], terms["other"], terms["launch"])
        return cached

    def _attention_us(self, requests: float, context: float, queries: float) -> float:
        bw, cp = self.calibration.bandwidth, self.calibration.compute
        flops, bpu, total = self._bf16_flops, self._bytes_per_us, 0.0
        if self._dcp > 1:   # the busiest DCP rank's share of the batch (predictor.step.dcp)
            context += self._dcp * excess_tokens_per_request(int(requests), self._dcp)
        for op in self._attention:   # a loop: ~2x a sum() of a generator
            memory, compute = op.decode_parts(requests, context, queries, flops, bpu)
            total += max(bw * memory, cp * compute)
        return total

    def _prefill_rank(self, tokens: int, seqs: int) -> tuple[int, int]:
        """(tokens, prompts) of a prefill on its busiest attention-DP rank. A prompt is not
        split across ranks: each rank runs its own requests' attention and dense layers,
        so one prompt's prefill is its rank's whole (the others wait at the MoE layers'
        collectives), and ``seqs`` prompts leave ``ceil(seqs / dp)`` on the busiest."""
        if self._dp <= 1:
            return tokens, seqs
        rank_seqs = -(-seqs // self._dp)
        return -(-tokens * rank_seqs // seqs), rank_seqs

    def _decode_shape(self, batch: int) -> tuple[int, int, int]:
        micro = -(-max(1, int(batch)) // self._pp)
        return micro, -(-micro // self._dp), self._queries

    def _draft_us(self, requests: int, micro: int, context: float) -> float:
        """`_draft_raw` priced and summed. A drafter of its own layers only (EAGLE) is
        priced without building its rooflines: its GEMM and attention sums go to
        `roofline.price` (``summed``), with its collectives and kernels, in the order and
        arithmetic of the raw step's (a replay asks a new decode context almost every step)."""
        if not self._eagle_only:
            return sum(sum(self._priced(part).values()) for part in self._draft_raw(requests, micro, context))
        plan, depth, cal, bpu = self._plan, self._depth, self.calibration, self._bytes_per_us
        gemm, ops = self._eagle
        gemms = [gemm.parts(requests, bpu)]           # the raw step's GEMM rooflines, in its order
        kernels = depth * EAGLE3_KERNELS_PER_LAYER
        if self._draft_head is not None:
            gemms.append(self._draft_head.parts(micro, bpu))
            kernels = kernels + depth * DRAFT_HEAD_KERNELS
        gemm_us = rooflines_us(gemms, cal, depth)
        if plan.fusion_params_once:
            params = plan.fusion_params_once / self._atp
            gemm_us += rooflines_us((gemm_parts(requests, params, params * BF16_BYTES, 0.0, self._bf16_flops, bpu,
                                                tile_rows=self._tile),), cal)
        attention = rooflines_us([op.decode_parts(requests, context, 1, self._bf16_flops, bpu) for op in ops],
                                 cal, depth)
        comm = depth * (2 * self._comm.attention_ar.us(requests * self._comm.hidden_bytes_per_token))
        raw = RawStep(comm_us=comm, kernels=kernels)
        return sum(price(raw, cal, self._launch_us, summed=(gemm_us, attention, 0.0)).values())

    def _decode_terms(self, batch: int, context: float) -> tuple[float, ...]:
        """The decode step's terms; memoised per (batch, context): a steady state asks for
        the same step tens of times while it converges, and drafting re-prices layers."""
        key = (batch, context)
        found = self._decode_memo.get(key)
        if found is None:
            if len(self._decode_memo) > DECODE_MEMO_LIMIT:
                self._decode_memo.clear()
            found = self._price_decode(batch, context)
            if self.decode_residual is not None:
                factor = self._residual_factor(batch, context)
                found = tuple(term * factor for term in found)
            self._decode_memo[key] = found
        return found

    def _residual_factor(self, batch: int, context: float) -> float:
        """The anchor's measured-step residual at the batch the step runs (its captured
        size: a padded step costs what its size does, the staircase)."""
        key = (batch, context)
        found = self._residual_memo.get(key)
        if found is None:
            if len(self._residual_memo) > DECODE_MEMO_LIMIT:
                self._residual_memo.clear()
            micro = self._decode_shape(batch)[0]
            found = self._residual_memo[key] = self.decode_residual.factor(self._padded(micro) * self._pp, context)
        return found

    def _price_decode(self, batch: int, context: float) -> tuple[float, ...]:
        micro, requests, q = self._decode_shape(batch)
        padded_micro = self._padded(micro)
        padded_requests = -(-padded_micro // self._dp)
        gemm, moe, comm, launch, other = self._body(padded_requests * q, padded_micro * q)
        head_gemm, head_other, head_launch = self._head(padded_micro * q)
        attention = self._attention_us(requests, context, q)
        draft = self._draft_us(requests, micro, context) if self._depth else 0.0
        return (gemm + head_gemm, attention, moe, comm, launch + head_launch, other + head_other,
                self.calibration.fixed_us, draft, self._pipeline_us(batch, micro * q))

    def decode(self, batch: int, context_tokens: float) -> StepCost:
        if batch <= 0:
            return StepCost(())
        return StepCost(tuple(zip(TERMS, self._decode_terms(batch, context_tokens))))

    def decode_us(self, batch: int, context_tokens: float) -> float:
        if batch <= 0:
            return 0.0
        return sum(self._decode_terms(batch, context_tokens))

    def probe_decode_us(self, batch: int, context_tokens: float) -> float:
        """A decode step priced for reporting only (no flags to record here)."""
        return self.decode_us(batch, context_tokens)

    @property
    def verify_tokens(self) -> int:
        """Tokens a decoding request puts through one (verify) step: 1 + the draft depth."""
        return self._queries

    def communication_us(self, tokens: float) -> float:
        """The layout's communication of one forward over ``tokens`` replica tokens: its
        collectives and, under PP, the activations' sends between stages (priced in the
        step's ``pipeline`` term; reported here too, so the comm-time objectives do not
        rank a PP layout as communicating nothing)."""
        hops = self._comm.hops_us(tokens) if self._pp > 1 else 0.0
        return self.calibration.comm * self._comm.step_us(tokens / max(1, self._dp), tokens) + hops

    def _prefill_terms(self, num_tokens: int, num_seqs: int, context: float) -> tuple[float, ...]:
        """`prefill_raw`'s parts priced; the attention groups' parts are computed once for
        the step and the DWDP layer costs, the head and the step's own parts cached per shape."""
        tokens, seqs = max(1, int(num_tokens)), max(1, int(num_seqs))
        rank_tokens, rank_seqs = self._prefill_rank(tokens, seqs)
        body = self._body_terms(rank_tokens, tokens)
        head, step = self._prefill_fixed_priced(tokens, seqs)
        attention_parts = self._prefill_attention_parts(rank_tokens, rank_seqs, context)
        attention = rooflines_us(attention_parts, self.calibration)
        draft = self._draft_prefill_us(rank_tokens, tokens, rank_seqs, context)
        comm = body["communication"] + self._dwdp_exposed_us(num_tokens, num_seqs, context, attention_parts)
        terms = (body["gemm"] + head["gemm"], attention, body["moe"], comm,
                 body["launch"] + head["launch"], body["other"] + head["other"], step["fixed"], draft,
                 step["pipeline"])
        if self.prefill_residual is None:
            return terms
        # the anchor's measured prefills between their lengths (predictor.step.residual),
        # at the length each prompt reaches in this step
        factor = self.prefill_residual.factor(context + num_tokens / max(1, num_seqs))
        return tuple(term * factor for term in terms)

    def prefill(self, num_tokens: int, num_seqs: int = 1, context_tokens: float = 0.0) -> StepCost:
        if num_tokens <= 0:
            return StepCost(())
        return StepCost(tuple(zip(TERMS, self._prefill_terms(num_tokens, num_seqs, context_tokens))))

    def prefill_us(self, num_tokens: int, num_seqs: int = 1, context_tokens: float = 0.0) -> float:
        if num_tokens <= 0:
            return 0.0
        return sum(self._prefill_terms(num_tokens, num_seqs, context_tokens))

    def _mixed_terms(self, prefill_tokens: int, decode_batch: int, context: float,
                     prefill_context: float, prompts: int = 0, rank_prompts: int = 0) -> tuple[float, ...]:
        if decode_batch <= 0:
            return self._prefill_terms(prefill_tokens, prompts or self._dp, prefill_context)
        if prefill_tokens <= 0:
            return self._decode_terms(decode_batch, context)
        micro = -(-int(decode_batch) // self._pp)
        requests = -(-micro // self._dp)
        q, tokens = self._queries, int(prefill_tokens)
        # ``prompts`` prompts' chunks on their busiest attention-DP rank (`_prefill_rank`, or
        # ``rank_prompts`` of them when the caller says how many it carries); 0: the tokens
        # spread over every rank (a step whose prompts the caller does not count)
        if rank_prompts and prompts:
            rank_prompts = min(rank_prompts, prompts)
            rank_prefill = -(-tokens * rank_prompts // prompts)
        elif prompts:
            rank_prefill, rank_prompts = self._prefill_rank(tokens, prompts)
        else:
            rank_prefill, rank_prompts = -(-tokens // self._dp), 1
        gemm, moe, comm, launch, other = self._body(rank_prefill + requests * q, tokens + micro * q)
        head_gemm, head_other, head_launch = self._head(micro * q + 1)
        # each prompt attends to its own tokens (a step of several prompts is not one sequence)
        prefill_attention = rooflines_us([op.prefill_parts(rank_prefill, rank_prompts, prefill_context,
                                                           self._bf16_flops, self._bytes_per_us)
                                          for op in self._attention], self.calibration)
        # The decode part's attention and drafting are the decode step's own at this batch
        # (memoised there: a replay's mixed steps each carry a new prefill size, not batch).
        decode = self._decode_terms(int(decode_batch), context)
        attention = decode[1] + prefill_attention
        draft = decode[7]
        comm += self._dwdp_exposed_us(tokens, 1, prefill_context)
        terms = (gemm + head_gemm, attention, moe, comm, launch + head_launch, other + head_other,
                 self.calibration.fixed_us, draft, self._pipeline_us(int(decode_batch), tokens + micro * q))
        if self.decode_residual is None:
            return terms
        # The decode rows' share of the step carries the anchor's residual as a pure decode
        # step does (its attention and drafting above already do): a prompt's marginal
        # cost over the decode step stays the calibrated physics' (predictor.step.residual).
        factor = self._residual_factor(int(decode_batch), context)
        extra = 1.0 - 1.0 / factor
        return tuple(term if i in (1, 7) else max(0.0, term + decode[i] * extra) for i, term in enumerate(terms))

    def mixed(self, prefill_tokens: int, decode_batch: int, context_tokens: float,
              prefill_context_tokens: float = 0.0, *, prompts: int = 0, rank_prompts: int = 0) -> StepCost:
        """A decode step of ``decode_batch`` carrying ``prefill_tokens`` of prompt chunks
        (``prompts``: how many prompts they belong to, which places them on attention-DP
        ranks, ``ceil(prompts / dp)`` on the busiest unless ``rank_prompts`` says how many;
        0 spreads them over every rank)."""
        terms = self._mixed_terms(prefill_tokens, decode_batch, context_tokens, prefill_context_tokens, prompts,
                                  rank_prompts)
        return StepCost(tuple(zip(TERMS, terms)))

    def mixed_us(self, prefill_tokens: int, decode_batch: int, context_tokens: float,
                 prefill_context_tokens: float = 0.0, *, prompts: int = 0, rank_prompts: int = 0) -> float:
        return sum(self._mixed_terms(prefill_tokens, decode_batch, context_tokens, prefill_context_tokens, prompts,
                                     rank_prompts))
