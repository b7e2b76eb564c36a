"""Anchored mode (METHOD §2, §3): a step model calibrated by one measured anchor and
carried to the target's layout by the transfer laws of `predictor.step.transfer`.

A decode step at replica batch `b` is built from named terms (microseconds):
- `fixed` + `excess`: the anchor's sweep carried across TP width by Eq. 1 (§3.1; rho
  measured from a half-width sibling when one is given) and read off the graph-capture
  staircase at the pipeline micro-batch `ceil(b / p)` (§3.3);
- `context`: the per-token-of-context slope from a second prompt length (§3.4), else 0
  and the flag `prompt-length-mismatch` when the context is more than 1.5x from the
  anchor's (the anchor's context is its recorded `prompt_tokens`);
- `ep_imbalance`: the expert share of the step, from the simulate-mode breakdown of the
  target's step, times the ratio of the imbalance factor `I_d` at the target's EP to the
  one at the anchor's EP (§3.5; `I_n` for prefill). Anchors are taken to run without EPLB;
- `communication_delta`: what the target's collectives add or remove relative to the
  anchor's, both priced by `predictor.step.comm_cost` (§3.7). The measured step keeps its own
  communication; `communication_us` gives the modelled total for reporting;
- `speculation`: a draft depth other than the anchor's (same method) moves the verify
  step to the token-equivalent batch `b (k'+1)/(k+1)` on the carried curve (Eq. 2 keeps
  the committed tokens in `tokens_per_step`);
- `pipeline`: Eq. 4's hops, hop overhead and host time (§3.6).

Prefill is the anchor's fit `F + c1 n + c2 n^2` carried across width (§3.2) with the
anchor's host time taken out (`host_time_ms`, `host_us_per_prompt_token`, METHOD §3.12:
the analytical predictor adds host time to TTFT itself), plus the same EP, communication
and pipeline-hop terms. A mixed step is the decode step plus the chunk's prefill
marginal cost `prefill(n) - F` (the fixed cost is paid once, by the decode step).

Rows are computed on first use per batch and memoised: a repeated `decode_us` call is a
dict lookup and two multiplications. Flags observed during calls (context or batch
outside the anchor's range, packed prefill beyond the probe) join `flags`.
"""

from __future__ import annotations

import math
from dataclasses import replace
from enum import StrEnum
from typing import Callable

from levers.catalog import Engine
from levers.configuration import Configuration
from predictor.anchors.anchor import Anchor
from predictor.cards.model_card import ModelCard
from predictor.hardware import Cluster
from predictor.memory import memory_breakdown
from predictor.step import transfer
from predictor.step.comm_cost import CommModel, build_comm_model
from predictor.step.cost import Mode, StepCost
from predictor.step.imbalance import imbalance_ratio
from predictor.step.operators import GB_PER_S_TO_BYTES_PER_US
from predictor.step.simulate import SimulateStepModel, moe_share
from predictor.step.speculation import acceptance_curve
from predictor.units import BYTES_PER_GB, US_PER_MS

CONTEXT_MISMATCH_RATIO = 1.5        # a context more than 1.5x from the anchor's is flagged (§3.4)
PREFILL_GRID_MIN_TOKENS = 16        # EP/communication prefill terms: log2 grid from here
NO_SPECULATION = "none"

BreakdownFactory = Callable[[ModelCard, Cluster, Engine, Configuration], object]
AcceptanceFn = Callable[[ModelCard, str, int], float]


def default_acceptance(card: ModelCard, method: str, depth: int) -> float:
    """`L(k)` from the measured curves (METHOD §3.8, `predictor.step.speculation`)."""
    return acceptance_curve(card.name, method).length(depth)


class FixedCost(StrEnum):
    """How Eq. 1 treats `f` (METHOD §3.1): kept whole, or split into the modelled
    weight-read time (sharded by TP) and the true fixed cost (kept)."""

    KEPT = "kept"
    SPLIT_WEIGHT_READ = "split-weight-read"


# Which Eq. 1 variant to use, chosen on measured TP ladders (METHOD §3.1: "keep whichever
# scores better"): anchors from one TP width of each stack, every other width predicted
# through Eq. 1 (`inferasim score CORPUS --anchor-where tp=4` / `tp=2`; 2026-11-29).
# Median TPOT / throughput APE of the carried rows:
#   InferenceX (tp=4 anchors, 675 rows):       kept 12.6% / 14.1%, split 10.6% / 12.5%
#   AIConfigurator (tp=2 anchors, 1638 rows):  kept 20.1% / 22.1%, split 15.7% / 18.8%
DEFAULT_FIXED_COST = FixedCost.SPLIT_WEIGHT_READ


def weight_read_us(card: ModelCard, cluster: Cluster, config: Configuration) -> float:
    """Modelled batch-1 weight-read time of one GPU (METHOD §3.1 refinement): every
    non-expert weight it holds, the LM head (not the input embedding) and `top_k / E` of
    its routed experts, over HBM bandwidth."""
    gpu = cluster.gpu
    parts = memory_breakdown(card, hbm_bytes=int(gpu.hbm_gb * BYTES_PER_GB), vendor=gpu.vendor, tp=config.tp,
                             ep=config.ep, attention_dp=config.attention_dp, dcp=config.dcp,
                             weight_dtype=config.weight_dtype, expert_dtype=config.expert_dtype,
                             activation_dtype=config.activation_dtype).weights_by_component_bytes
    read = sum(v for k, v in parts.items() if k not in ("routed_experts", "embeddings"))
    read += parts.get("embeddings", 0) / card.embedding_matrices()
    if card.is_moe:
        read += parts.get("routed_experts", 0) * card.top_k / card.num_experts
    return read / (gpu.hbm_bandwidth_gbps * GB_PER_S_TO_BYTES_PER_US)


class AnchoredStepModel:
    """The StepModel of anchored mode (see the module docstring)."""

    mode = Mode.ANCHORED

    def __init__(self, anchor: Anchor, card: ModelCard, cluster: Cluster, engine: Engine | str,
                 config: Configuration, *, sibling: Anchor | None = None, flags: tuple[str, ...] = (),
                 fixed_cost: FixedCost = DEFAULT_FIXED_COST, breakdown_factory: BreakdownFactory | None = None,
                 acceptance: AcceptanceFn | None = None) -> None:
        sig = anchor.signature
        self.anchor, self.card, self.cluster, self.config = anchor, card, cluster, config
        self.engine = engine
        self.anchor_id = anchor.id
        self.host_time_ms = anchor.host_time_ms
        self.first_wave_stall_ms = anchor.first_wave_stall_ms
        self.host_us_per_prompt_token = anchor.host_us_per_prompt_token
        self._base_flags = tuple(dict.fromkeys(flags))
        self._observed: dict[str, None] = {}
        self._anchor_config = replace(config, tp=sig.tp, ep=sig.ep, attention_dp=sig.attention_dp, pp=1,
                                      dcp=sig.dcp, eplb_replicas=0, all_to_all_backend=sig.all_to_all_backend)
        self._anchor_comm: CommModel = build_comm_model(card, cluster, self._anchor_config)
        self._target_comm: CommModel = build_comm_model(card, cluster, replace(config, pp=1))
        self._comm_changes = self._anchor_comm != self._target_comm
        self._hops = build_comm_model(card, cluster, config).hops_us
        # the anchor's own Eq. 4 hops, when its PP width is neither 1 nor the target's
        self._anchor_hops = (build_comm_model(card, cluster, replace(self._anchor_config, pp=sig.pp)).hops_us
                             if 1 < sig.pp != max(1, config.pp) else None)
        self._breakdown_factory = breakdown_factory or SimulateStepModel
        self._breakdown_model = None
        self.tokens_per_step = self._tokens_per_step(acceptance)
        self._build_decode_curve(sibling, fixed_cost)
        self._build_prefill_fit()
        self._decode_rows: dict[int, tuple[float, float, float, bool]] = {}
        self._prefill_grid: dict[int, tuple[float, float]] = {}

    # -- construction ----------------------------------------------------------------
    def _tokens_per_step(self, acceptance: AcceptanceFn | None) -> float:
        """L(k) of the target's depth when the anchor ran the same speculative method
        (METHOD §3.8, §3.11); an anchor with speculation never stands for a target
        without it, nor the reverse: 1 token and the flag `spec-mismatch`."""
        sig, config = self.anchor.signature, self.config
        if sig.spec_method.lower() != config.spec_method.lower():
            self._observed["spec-mismatch"] = None
            return 1.0
        if config.spec_method == NO_SPECULATION or config.spec_depth <= 0:
            return 1.0
        lookup = acceptance or default_acceptance
        return float(lookup(self.card, config.spec_method, config.spec_depth))

    def _full_depth_sweep(self) -> tuple[tuple[int, ...], list[float], list[float] | None]:
        """The anchor's sweep as a full-depth forward per micro-batch (METHOD §3.6).

        An anchor measured with the target's own PP width already contains Eq. 4: it is
        read as is, per replica batch, and no pipeline term is added (`_stages = 1`).
        An anchor measured at another PP width `p_a > 1` has Eq. 4's overhead taken out
        at each point, `s(ceil(C/p_a)) = s_meas(C) - overhead(C)` (the last point of each
        micro-batch kept); the target's Eq. 4 is then added back."""
        sweep, pa, pt = self.anchor.decode_sweep, self.anchor.signature.pp, max(1, self.config.pp)
        first = [ms * US_PER_MS for ms in sweep.itl_ms]
        second = [ms * US_PER_MS for ms in sweep.second_itl_ms] if sweep.second_itl_ms else None
        self._stages = 1 if pa == pt else pt
        if pa <= 1 or pa == pt:
            return sweep.batch_sizes, first, second
        hops = self._anchor_hops
        hop_us = self.cluster.gpu.pp_hop_overhead_us
        rows: dict[int, tuple[float, float | None]] = {}
        for index, clients in enumerate(sweep.batch_sizes):
            micro = transfer.micro_batch(clients, pa)
            overhead = transfer.pipeline_overhead_us(clients, pa, hops(micro), hop_us)
            rows[micro] = (first[index] - overhead, second[index] - overhead if second else None)
        micros = tuple(sorted(rows))
        return (micros, [rows[m][0] for m in micros],
                [rows[m][1] for m in micros] if second else None)  # type: ignore[misc]

    def _build_decode_curve(self, sibling: Anchor | None, fixed_cost: FixedCost) -> None:
        sweep, sig, config = self.anchor.decode_sweep, self.anchor.signature, self.config
        self._batches, steps, second_steps = self._full_depth_sweep()
        fixed = transfer.fixed_step(steps)
        rhos = self._rhos(steps, sibling)
        if fixed_cost == FixedCost.SPLIT_WEIGHT_READ:
            read = weight_read_us(self.card, self.cluster, self._anchor_config)
            ratio = transfer.default_rho(sig.tp, config.tp)
            carry = lambda s, r: transfer.carry_decode_width_split(s, fixed, r, read, ratio)  # noqa: E731
            self._fixed_us = transfer.carry_decode_width_split(fixed, fixed, 1.0, read, ratio)
        else:
            carry = lambda s, r: transfer.carry_decode_width(s, fixed, r)  # noqa: E731
            self._fixed_us = fixed
        self._steps = [carry(s, r) for s, r in zip(steps, rhos)]
        self._context0 = float(sweep.prompt_tokens)
        self._context_band = (self._context0 / CONTEXT_MISMATCH_RATIO, self._context0 * CONTEXT_MISMATCH_RATIO)
        self._slopes: list[float] | None = None
        if second_steps is not None and sweep.second_prompt_tokens:
            second = [carry(s, r) for s, r in zip(second_steps, rhos)]
            self._slopes = list(transfer.context_slopes(self._steps, second, sweep.prompt_tokens,
                                                        sweep.second_prompt_tokens))
        captured = sig.captured_sizes or sweep.batch_sizes
        if 1 < sig.pp != max(1, config.pp):  # normalised: sizes of the anchor's micro-batches
            captured = sorted({transfer.micro_batch(c, sig.pp) for c in captured})
        self._captured = tuple(c for c in captured if c <= config.max_captured_batch)
        self._capture = transfer.CaptureMode(config.graph_capture)

    def _rhos(self, steps: list[float], sibling: Anchor | None) -> list[float]:
        """Eq. 1's rho per sweep batch: measured from a half-width sibling (METHOD §3.1)
        when it yields points, else `w / w'`."""
        sig, target_tp = self.anchor.signature, self.config.tp
        if sibling is not None and sibling.signature.tp * 2 == sig.tp:
            points = transfer.shrink_points(
                self._batches, steps, sibling.decode_sweep.batch_sizes,
                [ms * US_PER_MS for ms in sibling.decode_sweep.itl_ms],
                min_excess=transfer.MIN_EXCESS_FOR_RHO_MS * US_PER_MS)
            if points:
                doublings = transfer.tp_doublings(sig.tp, target_tp)
                return [transfer.measured_rho(b, points, doublings) for b in self._batches]
        return [transfer.default_rho(sig.tp, target_tp)] * len(self._batches)

    def _build_prefill_fit(self) -> None:
        sweep, sig = self.anchor.prefill_sweep, self.anchor.signature
        fixed = max(0.0, sweep.fit_f_ms - self.anchor.host_time_ms) * US_PER_MS
        per_token = max(0.0, sweep.fit_c1_ms * US_PER_MS - self.anchor.host_us_per_prompt_token)
        self._prefill_fit = transfer.carry_prefill((fixed, per_token, sweep.fit_c2_ms * US_PER_MS),
                                                   sig.tp, self.config.tp)

    # -- shared pieces -----------------------------------------------------------------
    @property
    def flags(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys((*self._base_flags, *self._observed)))

    def probe_decode_us(self, batch: int, context_tokens: float) -> float:
        """A decode step priced for reporting only (e.g. the uncontended step): the
        flags it would raise describe the probe, not the prediction, so they are kept out."""
        saved = dict(self._observed)
        try:
            return self.decode_us(batch, context_tokens)
        finally:
            self._observed = saved

    def communication_us(self, tokens: float) -> float:
        """The target's modelled communication of one forward over `tokens` tokens of the
        replica (for reporting: the measured step already contains it)."""
        return self._target_comm.step_us(tokens / max(1, self.config.attention_dp), tokens)

    def _communication_delta_us(self, tokens: float) -> float:
        """METHOD §3.7: what the target's collectives add or remove relative to the
        anchor's, both priced by `predictor.step.comm_cost` (in-step `m / B` only)."""
        if not self._comm_changes:
            return 0.0
        anchor = self._anchor_comm.step_us(tokens / max(1, self.anchor.signature.attention_dp), tokens)
        return transfer.communication_delta(anchor, self.communication_us(tokens))

    def _ep_changes(self) -> bool:
        return self.card.is_moe and (self.config.ep != self.anchor.signature.ep or self.config.eplb_replicas > 0)

    def _breakdown(self):
        if self._breakdown_model is None:  # the full-depth forward: no pipeline terms
            self._breakdown_model = self._breakdown_factory(self.card, self.cluster, self.engine,
                                                            replace(self.config, pp=1))
        return self._breakdown_model

    # -- decode ------------------------------------------------------------------------
    def _attention_share(self, batch: float) -> float:
        """Attention's share of the simulate-mode step (piecewise capture, METHOD §3.3)."""
        cost = self._breakdown().decode(max(1, round(batch)), self._context0)
        return cost.get("attention") / cost.total_us if cost.total_us > 0 else 0.0

    def _curve(self, batch: float, values: list[float]) -> float:
        share = self._attention_share if self._capture == transfer.CaptureMode.PIECEWISE else None
        return transfer.staircase_step(batch, self._batches, values, self._captured, self._capture, share)

    def _decode_terms(self, batch: int) -> dict[str, float]:
        """Every decode term at the anchor's context, plus the context slope."""
        sig, config = self.anchor.signature, self.config
        stages = self._stages
        micro = transfer.micro_batch(max(batch, 1), stages)
        step = self._curve(micro, self._steps)
        terms = {"fixed": self._fixed_us, "excess": step - self._fixed_us}
        tokens = micro * (config.spec_depth + 1)
        if self._ep_changes():
            share = moe_share(self._breakdown().decode(micro, self._context0))
            ratio = imbalance_ratio(self.card, config, self._anchor_config, tokens, "decode")[1]
            terms["ep_imbalance"] = transfer.ep_imbalance_term(step, share, ratio, 1.0)
        terms["communication_delta"] = self._communication_delta_us(tokens)
        if config.spec_method == sig.spec_method and config.spec_depth != sig.spec_depth:
            equivalent = micro * (config.spec_depth + 1) / (sig.spec_depth + 1)
            terms["speculation"] = (transfer.interpolate_linear(equivalent, self._batches, self._steps)
                                    - transfer.interpolate_linear(micro, self._batches, self._steps))
        terms["pipeline"] = self._pipeline_us(batch, micro, stages)
        terms["slope"] = self._slope(micro) if self._slopes else 0.0
        return terms

    def _slope(self, batch: int) -> float:
        """The context slope at `batch` (§3.4). Inside the sweep it is read like the
        step; above the largest measured batch it grows in proportion to the batch (every
        running request reads its own KV), not along the line through the last two
        points: two noisy slopes extrapolated linearly can dwarf the step itself."""
        largest = self._batches[-1]
        if batch <= largest:
            return self._curve(batch, self._slopes)
        return self._slopes[-1] * batch / largest

    def _pipeline_us(self, clients: int, micro: int, stages: int) -> float:
        """Eq. 4 (METHOD §3.6) beyond the full-depth forward."""
        if stages <= 1:
            return 0.0
        hops = self._hops(micro)
        return transfer.pipeline_overhead_us(max(clients, 1), stages, hops, self.cluster.gpu.pp_hop_overhead_us)

    def _decode_row(self, batch: int) -> tuple[float, float, float, bool]:
        terms = self._decode_terms(batch)
        slope = terms.pop("slope")
        micro = transfer.micro_batch(max(batch, 1), self._stages)
        outside = not self._batches[0] <= micro <= self._batches[-1]
        return sum(terms.values()), slope, terms["excess"], outside

    def _context_us(self, slope: float, excess: float, context_tokens: float) -> float:
        if self._slopes is None:
            low, high = self._context_band
            if not low <= context_tokens <= high:
                self._observed["prompt-length-mismatch"] = None
            return 0.0
        return max(transfer.context_term(slope, context_tokens, self._context0), -excess)

    def decode_us(self, batch: int, context_tokens: float) -> float:
        if batch <= 0:
            return 0.0
        row = self._decode_rows.get(batch)
        if row is None:
            row = self._decode_rows[batch] = self._decode_row(batch)
        total, slope, excess, outside = row
        if outside:
            self._observed["batch-outside-sweep"] = None
        return total + self._context_us(slope, excess, context_tokens)

    def decode(self, batch: int, context_tokens: float) -> StepCost:
        if batch <= 0:
            return StepCost(())
        terms = self._decode_terms(batch)
        slope = terms.pop("slope")
        terms["context"] = self._context_us(slope, terms["excess"], context_tokens)
        self.decode_us(batch, context_tokens)  # records the per-call flags
        return StepCost.of(**terms)

    # -- prefill -----------------------------------------------------------------------
    def _prefill_grid_point(self, tokens: int) -> tuple[float, float]:
        """(EP fraction of the prefill time, communication delta us) at `tokens`."""
        point = self._prefill_grid.get(tokens)
        if point is None:
            fraction = 0.0
            if self._ep_changes():
                cost = self._breakdown().prefill(tokens, 1, 0.0)
                ratio = imbalance_ratio(self.card, self.config, self._anchor_config, tokens, "prefill")[0]
                fraction = transfer.ep_imbalance_term(1.0, moe_share(cost), ratio, 1.0)
            point = self._prefill_grid[tokens] = (fraction, self._communication_delta_us(tokens))
        return point

    def _prefill_adjust(self, tokens: float) -> tuple[float, float]:
        """The grid point values interpolated in log2(tokens) between powers of two."""
        if tokens <= PREFILL_GRID_MIN_TOKENS:
            return self._prefill_grid_point(PREFILL_GRID_MIN_TOKENS)
        position = math.log2(tokens)
        low = int(position)
        below, above = self._prefill_grid_point(2 ** low), self._prefill_grid_point(2 ** (low + 1))
        weight = position - low
        return tuple(b + weight * (a - b) for b, a in zip(below, above))  # type: ignore[return-value]

    def _prefill_terms(self, num_tokens: int, num_seqs: int, context_tokens: float) -> dict[str, float]:
        fixed, c1, c2 = self._prefill_fit
        seqs = max(1, num_seqs)
        per_seq = num_tokens / seqs
        attention = c2 * ((context_tokens + per_seq) ** 2 - context_tokens ** 2) * seqs
        fraction, comm = self._prefill_adjust(num_tokens)
        probe = self.anchor.packed_probe
        if probe is not None and seqs > 1 and num_tokens > probe.num_seqs * probe.seq_tokens:
            self._observed["packing-length"] = None
        body = fixed + c1 * num_tokens + attention
        return {"fixed": fixed, "tokens": c1 * num_tokens, "attention": attention,
                "ep_imbalance": fraction * body, "communication_delta": comm}

    def _prefill_pipeline_us(self, num_tokens: int) -> float:
        """A prompt crosses every stage once: `p` hops and `p` hop overheads (METHOD §3.6),
        less what the anchor's own TTFTs already contain at its PP width."""
        anchor_stages, stages = self.anchor.signature.pp, max(1, self.config.pp)
        if anchor_stages == stages:
            return 0.0
        hop_us = self.cluster.gpu.pp_hop_overhead_us
        target = self._hops(num_tokens) + stages * hop_us if stages > 1 else 0.0
        if anchor_stages <= 1:
            return target
        return target - (self._anchor_hops(num_tokens) + anchor_stages * hop_us)

    def prefill(self, num_tokens: int, num_seqs: int = 1, context_tokens: float = 0.0) -> StepCost:
        if num_tokens <= 0:
            return StepCost(())
        terms = self._prefill_terms(num_tokens, num_seqs, context_tokens)
        return StepCost.of(**terms, pipeline=self._prefill_pipeline_us(num_tokens))

    def prefill_us(self, num_tokens: int, num_seqs: int = 1, context_tokens: float = 0.0) -> float:
        if num_tokens <= 0:
            return 0.0
        return (sum(self._prefill_terms(num_tokens, num_seqs, context_tokens).values())
                + self._prefill_pipeline_us(num_tokens))

    # -- mixed -------------------------------------------------------------------------
    def _prefill_marginal(self, prefill_tokens: int, prefill_context_tokens: float) -> dict[str, float]:
        terms = self._prefill_terms(prefill_tokens, 1, prefill_context_tokens)
        del terms["fixed"]
        return {f"prefill_{name}": value for name, value in terms.items()}

    def mixed(self, prefill_tokens: int, decode_batch: int, context_tokens: float,
              prefill_context_tokens: float = 0.0) -> StepCost:
        if decode_batch <= 0:
            return self.prefill(prefill_tokens, 1, prefill_context_tokens)
        decode = self.decode(decode_batch, context_tokens)
        if prefill_tokens <= 0:
            return decode
        return decode.plus(**self._prefill_marginal(prefill_tokens, prefill_context_tokens))

    def mixed_us(self, prefill_tokens: int, decode_batch: int, context_tokens: float,
                 prefill_context_tokens: float = 0.0) -> float:
        if decode_batch <= 0:
            return self.prefill_us(prefill_tokens, 1, prefill_context_tokens)
        decode = self.decode_us(decode_batch, context_tokens)
        if prefill_tokens <= 0:
            return decode
        terms = self._prefill_terms(prefill_tokens, 1, prefill_context_tokens)
        del terms["fixed"]
        return decode + sum(terms.values())
