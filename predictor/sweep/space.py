"""The legal space a Pareto sweep prices (PRODUCT.md §2 `pareto`; METHOD §2, §3.8, §3.11).

The space is enumerated as *families*: one deployment shape (a colocated layout
tp/pp/ep/attention-DP with a replica count, or a disaggregated split of prefill and
decode pool layouts and replica counts) at one precision choice (weights, routed
experts, KV cache). A family is priced at every rung of the concurrency ladder; each
(family, concurrency) is a *group*, and within a group every speculative variant
(none, then each method at depths 1..max) is priced and the best is kept (METHOD §3.8:
the depth with the most committed tokens per unit of time at that load).

Legality is decided once per family with `check_configuration` (structure, then
memory) on the family as priced (`PricedCheck`: an unset precision at the calibrating
anchor's recipe): neither depends on the concurrency or the draft depth, so a 10^4-point
sweep runs the memory model only a few hundred times. The plan is deterministic, so a worker
process rebuilds it from names and options and only index ranges cross processes.

Precision choices (modelling choice): the lever unset (`None`: the calibrating anchor's
recipe where one is, else the checkpoint's own dtype) and every narrower one the GPU can
run (FP4 only with FP4 tensor cores); widening a checkpoint never helps and is not swept.
KV cache: native and fp8.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from importlib import resources
from typing import TypeVar

from levers.catalog import Engine, format_layout, get_lever
from levers.configuration import Configuration, engine_only_values
from predictor.anchors.anchoring import PricedCheck
from predictor.cards.registry import ModelCard
from predictor.hardware import Cluster
from predictor.harvest.adapters import adapter_for
from predictor.memory import dtype_bytes
from predictor.target import Target
from predictor.workload import WorkloadSpec

DEFAULT_CONCURRENCY_LADDER: tuple[int, ...] = tuple(2 ** i for i in range(11))  # 1 .. 1024
DEFAULT_MAX_SPEC_DEPTH = 3
NO_SPECULATION: tuple[str, int] = ("none", 0)
CURVE_ONLY_METHODS = ("eagle3", "dspark")  # need a measured acceptance curve to be swept
KV_DTYPES = ("bf16", "fp8")
TOP_REASONS = 8

Layout = tuple[int, int, int, int]  # (tp, pp, ep, attention_dp)
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class SpaceOptions:
    """What to sweep. ``max_points`` caps the priced points by sampling whole families
    (seeded, so a rerun prices the same points)."""

    concurrency_ladder: tuple[int, ...] = DEFAULT_CONCURRENCY_LADDER
    max_spec_depth: int = DEFAULT_MAX_SPEC_DEPTH
    include_disaggregated: bool = True
    max_points: int | None = None
    seed: int = 0


@dataclass(frozen=True, slots=True)
class Family:
    """One deployment shape and precision; ``variants`` are (spec_method, spec_depth)."""

    base: Configuration
    variants: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class Group:
    family: int
    concurrency: int


@dataclass(frozen=True)
class SweepPlan:
    families: tuple[Family, ...]
    groups: tuple[Group, ...]
    num_illegal_families: int
    illegal_reasons: tuple[tuple[str, int], ...]   # most frequent first, with counts
    num_sampled_out: int                           # points dropped by max_points

    @property
    def num_points(self) -> int:
        """Predictions the sweep makes (every speculative variant counts)."""
        return sum(len(self.families[group.family].variants) for group in self.groups)

    def configuration(self, group_index: int, variant: tuple[str, int]) -> Configuration:
        group = self.groups[group_index]
        method, depth = variant
        return replace(self.families[group.family].base, concurrency=group.concurrency,
                       spec_method=method, spec_depth=depth)


def build_plan(target: Target, workload: WorkloadSpec, options: SpaceOptions) -> SweepPlan:
    """Every legal family of ``target`` and its groups, in a fixed order."""
    card, cluster, engine = target.card, target.cluster, target.engine
    context = workload.context_tokens
    variants = speculative_variants(card, engine, options.max_spec_depth)
    families: list[Family] = []
    reasons: Counter[str] = Counter()
    check = PricedCheck(None, workload.priced_context_tokens)
    for base in candidate_bases(card, cluster, engine, options.include_disaggregated):
        feasibility = check(card, cluster, engine, base, context)
        if feasibility.legal:
            families.append(Family(base, variants))
        else:
            reasons[_reason_kind(feasibility.reasons[0])] += 1
    groups = _groups(families, options.concurrency_ladder)
    plan = SweepPlan(tuple(families), groups, sum(reasons.values()),
                     tuple(reasons.most_common(TOP_REASONS)), 0)
    return _capped(plan, options)


def candidate_bases(card: ModelCard, cluster: Cluster, engine: Engine,
                    include_disaggregated: bool) -> list[Configuration]:
    """Structurally plausible shapes x precisions (legality is checked by the caller); no
    split on an engine whose command line cannot start one (ATOM, llama.cpp: `deploy`
    refuses them, and a frontier of ATOM splits was no answer), as the seed planner."""
    layouts = colocated_layouts(card, cluster, engine)
    shapes = [Configuration(tp=tp, pp=pp, ep=ep, attention_dp=dp, replicas=replicas)
              for tp, pp, ep, dp in layouts
              for replicas in replica_counts(tp * pp, cluster.total_gpus)]
    if sweeps_splits(engine, include_disaggregated):
        shapes += disaggregated_shapes(pool_layouts(layouts), cluster.total_gpus)
    precisions = precision_choices(card, cluster)
    fixed = engine_only_values(engine)      # llama.cpp: no graph capture (the default's illegal there)
    return [replace(shape, weight_dtype=w, expert_dtype=e, kv_cache_dtype=kv, **fixed)
            for shape in shapes for w, e, kv in precisions]


def sweeps_splits(engine: Engine, include_disaggregated: bool) -> bool:
    """Whether a sweep prices prefill/decode splits: asked, and on an engine whose launch
    can start them (`candidate_bases`)."""
    return include_disaggregated and adapter_for(engine).launches_split_pools


def colocated_layouts(card: ModelCard, cluster: Cluster, engine: Engine) -> list[Layout]:
    """(tp, pp, ep, attention_dp) whose widths divide what they must (levers.legality)."""
    widths = get_lever("tp").legal_values(engine)
    stages = get_lever("pp").legal_values(engine)
    layouts = []
    for tp in widths:
        for pp in stages:
            if tp * pp > cluster.total_gpus or card.num_layers % pp:
                continue
            for ep in widths:
                if tp % ep or (ep > 1 and (not card.is_moe or card.num_experts % ep)):
                    continue
                for dp in widths:
                    if tp % dp == 0 and card.attention_heads % (tp // dp) == 0:
                        layouts.append((tp, pp, ep, dp))
    return layouts


def replica_counts(replica_gpus: int, total_gpus: int) -> list[int]:
    """Powers of two up to the replicas that fill the cluster."""
    counts, replicas = [], 1
    while replicas * replica_gpus <= total_gpus:
        counts.append(replicas)
        replicas *= 2
    return counts


def pool_layouts(layouts: list[Layout]) -> list[Layout]:
    """Pool layouts of a split: one stage, EP and attention DP either off or full width
    (the shapes disaggregated deployments use; partial widths stay in the colocated sweep)."""
    return [(tp, pp, ep, dp) for tp, pp, ep, dp in layouts if pp == 1 and ep in (1, tp) and dp in (1, tp)]


def disaggregated_shapes(layouts: list[Layout], total_gpus: int) -> list[Configuration]:
    """Prefill/decode pool layouts and replica ratios that fit (METHOD §3.11).

    Per-GPU metrics of k copies of a split equal one copy at 1/k of the concurrency, so
    only ratios with one pool at a single replica are swept (the other at powers of two).
    """
    shapes = []
    for ptp, _, pep, pdp in layouts:
        for dtp, _, dep, ddp in layouts:
            ratios = [(p, 1) for p in replica_counts(ptp, total_gpus - dtp)]
            ratios += [(1, d) for d in replica_counts(dtp, total_gpus - ptp) if d > 1]
            for prefill_replicas, decode_replicas in ratios:
                shapes.append(Configuration().with_changes({
                        "disaggregated": True, "prefill_layout": format_layout(ptp, pep, pdp),
                        "decode_layout": format_layout(dtp, dep, ddp),
                        "prefill_replicas": prefill_replicas, "decode_replicas": decode_replicas}))
    return shapes


def precision_choices(card: ModelCard, cluster: Cluster) -> list[tuple[str | None, str | None, str | None]]:
    """(weight, expert, kv_cache) dtypes; ``None`` = the checkpoint's own."""
    vendor = cluster.gpu.vendor
    runnable = [d for d in ("bf16", "fp8", "fp4") if d != "fp4" or cluster.gpu.fp4_tflops]

    def narrowing(native: str) -> list[str | None]:
        native_bytes = dtype_bytes(native, vendor)
        return [None] + [d for d in runnable if d != native and dtype_bytes(d, vendor) < native_bytes]

    native = card.native_dtypes
    experts = narrowing(str(native.expert)) if card.is_moe else [None]
    kv = [None] + [d for d in KV_DTYPES if d != str(native.kv_cache)]
    return [(w, e, k) for w in narrowing(str(native.weight)) for e in experts for k in kv]


def speculative_variants(card: ModelCard, engine: Engine, max_depth: int) -> tuple[tuple[str, int], ...]:
    """No speculation, then each usable method at depths 1..max_depth (METHOD §3.8):
    MTP when the checkpoint has MTP layers, EAGLE-3/DSpark when a curve is measured."""
    legal = get_lever("spec_method").legal_values(engine)
    curves = _curve_methods().get(card.name.lower(), frozenset())
    methods = [m for m in legal
               if (m == "mtp" and card.mtp_layers) or (m in CURVE_ONLY_METHODS and m in curves)]
    return (NO_SPECULATION, *((m, d) for m in methods for d in range(1, max_depth + 1)))


@lru_cache(maxsize=1)
def _curve_methods() -> dict[str, frozenset[str]]:
    """Model (lower-case card name) -> methods with a measured acceptance curve."""
    data = json.loads((resources.files("predictor") / "data" / "acceptance.json").read_text())
    found: dict[str, set[str]] = {}
    for curve in data.get("curves", []):
        found.setdefault(str(curve["model"]).lower(), set()).add(str(curve["method"]))
    return {model: frozenset(methods) for model, methods in found.items()}


def _groups(families: list[Family] | tuple[Family, ...], ladder: tuple[int, ...]) -> tuple[Group, ...]:
    """Every rung with at least one client per replica (decode replica when split)."""
    groups = []
    for index, family in enumerate(families):
        base = family.base
        replicas = base.decode_replicas if base.disaggregated else base.replicas
        groups.extend(Group(index, c) for c in ladder if c >= replicas)
    return tuple(groups)


def _capped(plan: SweepPlan, options: SpaceOptions) -> SweepPlan:
    """Sample whole families (seeded) until ``max_points`` predictions are reached; the
    first family that no longer fits contributes the rungs that still do (spread over its
    ladder), so a small cap still prices something."""
    if options.max_points is None or plan.num_points <= options.max_points:
        return plan
    by_family: dict[int, list[int]] = {}
    for group in plan.groups:
        by_family.setdefault(group.family, []).append(group.concurrency)
    order = sorted(by_family)
    random.Random(options.seed).shuffle(order)
    chosen: dict[int, list[int]] = {}
    budget = options.max_points
    for index in order:
        rungs, width = by_family[index], len(plan.families[index].variants)
        fitting = min(len(rungs), budget // width)
        if fitting:
            chosen[index] = spread(rungs, fitting)
            budget -= fitting * width
        if fitting < len(rungs):
            break
    kept = sorted(chosen)
    groups = tuple(Group(position, c) for position, index in enumerate(kept) for c in chosen[index])
    sampled = replace(plan, families=tuple(plan.families[i] for i in kept), groups=groups)
    return replace(sampled, num_sampled_out=plan.num_points - sampled.num_points)


def spread(items: Sequence[T], count: int) -> list[T]:
    """``count`` items evenly spread over ``items`` (first and last included); all of
    them when there are no more than ``count``, none for a count below one."""
    if count <= 0 or not items:
        return []
    if len(items) <= count:
        return list(items)
    if count == 1:
        return [items[0]]
    step = (len(items) - 1) / (count - 1)
    return [items[round(i * step)] for i in range(count)]


def _reason_kind(reason: str) -> str:
    """A reason without its numbers, so counts group similar rejections."""
    head = reason.split(":")[0] if reason.startswith("memory") else reason
    return head.strip()
