"""Phase 1 of the search: the seed planner (METHOD §6), deterministic, no LLM.

A safe baseline (the narrowest layout that fits in memory with the checkpoint's
dtypes, or the widest validated precisions; the rest of the cluster filled with
replicas), then one lever at a time in a fixed order — TP, attention DP, precision,
load, scheduler, speculation, EP and MoE options, kernels (attention backend,
fusions), collectives, disaggregation — keeping the legal, distinct candidates. Every gain has one clear
cause: a seed differs from its centre in one lever (plus the repairs that lever forces,
e.g. EP shrinking with TP, or replicas refilling the cluster).

Round 0 moves around the baseline; each later round moves around the leader of the
previous rounds, until the leader stops changing (coordinate ascent, still one lever
per step). Numeric levers without a natural finite set use the ladders below.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Callable, Iterator

from agent.guards import allowed_values, config_guard_reasons, effective_dtype
from agent.trial import SearchContext
from levers.catalog import DTYPES, FUSIONS, LEVERS_BY_NAME, format_layout
from levers.configuration import Configuration, engine_only_values
from levers.errors import InputError
from predictor.anchors.anchoring import as_priced
from predictor.harvest.adapters import adapter_for
from predictor.sim.scheduler import PROFILES
from predictor.step.operators import narrowest_activation

# Ladders for ranged levers (values a first search should try; the LLM may go further).
CONCURRENCY_LADDER = (1, 4, 16, 32, 64, 128, 256, 512, 1024)
RUNNING_REQUESTS_LADDER = (32, 64, 128, 512, 1024)
TOKEN_BUDGET_LADDER = (2048, 4096, 16384, 32768)
CHUNK_LADDER = (2048, 4096, 16384)
KV_FRACTION_LADDER = (0.8, 0.85, 0.9)
# an objective that counts the KV pool (HBM used, KV pool per GPU) is lowered by a smaller pool:
# the lever's range down to its bound (at 0.8-0.9 only, memory_per_gpu stopped "exhausted" at
# 247 GB/GPU where a legal 0.5 holds 155)
KV_FRACTION_MEMORY_LADDER = (LEVERS_BY_NAME["kv_memory_fraction"].bounds[0], 0.6, 0.7, *KV_FRACTION_LADDER)
KV_POOL_METRICS = ("memory_per_gpu_gb", "kv_cache_per_gpu_gb")
HOST_KV_TIER_GB_LADDER = (64.0, 256.0)
SPEC_DEPTHS = (1, 2, 3)
EPLB_REPLICAS_LADDER = (32, 64)
WIDEST_FIRST = ("bf16", "fp8", "fp4")

Partial = dict[str, Any]


class LeverGroup(StrEnum):
    """The fixed order of METHOD §6."""

    TP = "tp"
    ATTENTION_DP = "attention_dp"
    PRECISION = "precision"
    LOAD = "load"
    SCHEDULER = "scheduler"
    SPECULATION = "speculation"
    MOE = "moe"
    KERNELS = "kernels"
    COLLECTIVES = "collectives"
    DISAGGREGATION = "disaggregation"


@dataclass(frozen=True, slots=True)
class Seed:
    config: Configuration
    proposed: Partial   # the levers changed from the centre (the lever and its forced repairs)
    group: str          # "baseline" or a LeverGroup


def is_legal(context: SearchContext, config: Configuration) -> bool:
    """Operator guards, structure and memory: the checks a seed must pass to be kept."""
    if config_guard_reasons(context, config):
        return False
    target = context.target
    return context.check_fn(target.card, target.cluster, target.engine, config,
                            context.context_tokens).legal


def baseline(context: SearchContext) -> Configuration:
    """The narrowest layout that fits, widest validated precisions first (METHOD §6): plain
    TP/PP first; for an MoE model none fits, the same widths with experts across the TP
    group and attention data-parallel inside it (a frontier MoE on 8-GPU H200 nodes spans
    nodes by EP, with attention inside one domain)."""
    cluster = context.target.cluster
    fixed = engine_only_values(context.target.engine)     # llama.cpp: no graph capture
    layouts = [(1, 1)] + ([("tp", a) for a in _values("attention_dp")] if context.target.card.is_moe else [])
    for ep, attention_dp in layouts:
        for weight, expert in _dtype_choices(context):
            for pp in _values("pp"):
                for tp in _values("tp"):
                    if tp * pp > cluster.total_gpus or tp % attention_dp:
                        continue
                    config = Configuration(tp=tp, pp=pp, ep=tp if ep == "tp" else ep, attention_dp=attention_dp,
                                           replicas=_fill(context, tp * pp), weight_dtype=weight, expert_dtype=expert,
                                           **fixed)
                    if is_legal(context, config):
                        return config
    raise InputError("--model", f"{context.target.card.name} does not fit on {cluster.spec} at any "
                     "TP/PP" + (" or EP/attention-DP layout" if context.target.card.is_moe else "")
                     + " with the allowed precisions", "a larger --cluster, or more --precisions")


def _dtype_choices(context: SearchContext) -> list[tuple[str | None, str | None]]:
    """(weight, expert) overrides: the checkpoint's first, then narrower validated ones."""
    probe = Configuration()
    weights = _precision_options(context, probe, "weight_dtype")
    experts = _precision_options(context, probe, "expert_dtype") if context.target.card.is_moe else [None]
    return [(weight, expert) for weight in weights for expert in experts]


def _precision_options(context: SearchContext, probe: Configuration, lever: str) -> list[str | None]:
    native = effective_dtype(context, probe, lever)
    allowed = context.precisions or DTYPES
    options: list[str | None] = [None] if native in allowed else []
    native_rank = WIDEST_FIRST.index(native) if native in WIDEST_FIRST else 0
    options += [d for d in WIDEST_FIRST if d in allowed and WIDEST_FIRST.index(d) > native_rank]
    return options or [d for d in WIDEST_FIRST if d in allowed]


class SeedPlanner:
    """Generates distinct legal seeds, round by round (see the module docstring)."""

    def __init__(self, context: SearchContext, legal: Callable[[Configuration], bool] | None = None):
        self.context = context
        self.legal = legal or (lambda config: is_legal(context, config))
        self.card = context.target.card
        self.cluster = context.target.cluster

    def seeds(self, start: Configuration, incumbent: Callable[[], Configuration | None] = lambda: None,
              seen: Callable[[Configuration], bool] = lambda config: False) -> Iterator[Seed]:
        """Baseline ``start``, its one-lever moves, then rounds around ``incumbent()``:
        the rounds of :meth:`rounds`, one seed at a time."""
        for seeds in self.rounds(start, incumbent, seen):
            yield from seeds

    def rounds(self, start: Configuration, incumbent: Callable[[], Configuration | None] = lambda: None,
               seen: Callable[[Configuration], bool] = lambda config: False) -> Iterator[list[Seed]]:
        """The seeds, one list per round (the baseline opens round 0).

        A round is listed when it is asked for, so the caller prices a whole round at
        once (in parallel) and must record it before asking for the next: the next
        centre is ``incumbent()`` then. Seeds ``seen`` after their round was listed (an
        LLM phase in between) are the caller's to skip.
        """
        yielded: set[Configuration] = set()
        first: list[Seed] = []
        if not seen(start) and self.legal(start):
            yielded.add(start)
            first.append(Seed(start, start.diff(Configuration()), "baseline"))
        yield first + list(self._round(start, yielded, seen))
        centres = {start}
        while True:
            centre = incumbent()
            if centre is None or centre in centres:
                return
            centres.add(centre)
            yield list(self._round(centre, yielded, seen))

    def _round(self, centre: Configuration, yielded: set[Configuration],
               seen: Callable[[Configuration], bool]) -> Iterator[Seed]:
        """The distinct legal one-lever moves of ``centre`` not yielded or seen before."""
        for group, partial in self.moves(centre):
            try:
                config = centre.with_changes(partial)
            except (InputError, ValueError, TypeError):
                continue
            if config in yielded or config == centre or seen(config) or not self.legal(config):
                continue
            yielded.add(config)
            yield Seed(config, config.diff(centre), str(group))

    def moves(self, base: Configuration) -> Iterator[tuple[LeverGroup, Partial]]:
        """One-lever changes of ``base`` in METHOD §6 order."""
        for group, generate in (
            (LeverGroup.TP, self._tp), (LeverGroup.ATTENTION_DP, self._attention_dp),
            (LeverGroup.PRECISION, self._precision), (LeverGroup.LOAD, self._load),
            (LeverGroup.SCHEDULER, self._scheduler), (LeverGroup.SPECULATION, self._speculation),
            (LeverGroup.MOE, self._moe), (LeverGroup.KERNELS, self._kernels),
            (LeverGroup.COLLECTIVES, self._collectives),
            (LeverGroup.DISAGGREGATION, self._disaggregation),
        ):
            for partial in generate(base):
                yield group, partial

    # -- lever groups ------------------------------------------------------------------
    def _tp(self, base: Configuration) -> Iterator[Partial]:
        if base.disaggregated:
            return
        for tp in _values("tp"):
            if tp != base.tp:
                yield self._reshape(base, tp, base.pp)
        for pp in _values("pp"):
            if pp != base.pp:
                yield self._reshape(base, base.tp, pp)
                if base.tp % pp == 0 and base.tp // pp >= 1:
                    yield self._reshape(base, base.tp // pp, pp)

    def _reshape(self, base: Configuration, tp: int, pp: int) -> Partial:
        """New widths with what they force: EP/DP/DCP shrink to divide, replicas refill."""
        ep = _largest(lambda w: w <= base.ep and tp % w == 0 and self._experts_divide(w))
        dp = _largest(lambda d: d <= base.attention_dp and tp % d == 0
                      and self.card.attention_heads % (tp // d) == 0)
        dcp = _largest(lambda c: c <= base.dcp and (tp // dp) % c == 0, "dcp")
        partial: Partial = {"tp": tp, "pp": pp, "ep": ep, "attention_dp": dp, "dcp": dcp,
                            "replicas": _fill(self.context, tp * pp)}
        if ep == 1:
            partial["all_to_all_backend"] = "none"
        return partial

    def _attention_dp(self, base: Configuration) -> Iterator[Partial]:
        for dp in _values("attention_dp"):
            if dp != base.attention_dp and base.tp % dp == 0:
                dcp = _largest(lambda c: c <= base.dcp and (base.tp // dp) % c == 0, "dcp")
                yield {"attention_dp": dp, "dcp": dcp}

    def _precision(self, base: Configuration) -> Iterator[Partial]:
        """Each precision lever's other values: "other" than the base as priced (its unset
        levers take the calibrating anchor's recipe, `as_priced`), so no offer prices the
        base's own launch again (a Qwen3-32B search on H100 spent two of 30 trials so)."""
        priced, _ = as_priced(self.context.target, base, context_tokens=self.context.workload.priced_context_tokens)
        levers = ["weight_dtype", "expert_dtype", "activation_dtype", "kv_cache_dtype"]
        for lever in levers:
            if lever == "expert_dtype" and not self.card.is_moe:
                continue
            current = self._effective(priced, lever)
            for value in allowed_values(self.context, lever):
                if value != current:
                    yield {lever: value}

    def _effective(self, config: Configuration, lever: str) -> str | None:
        if lever in ("weight_dtype", "expert_dtype"):
            return effective_dtype(self.context, config, lever)
        if lever == "activation_dtype":     # unset: the value whose launch it is (its GEMMs' narrowest)
            return config.activation_dtype or narrowest_activation(self.card, config, self.context.target.cluster.gpu)
        return config.kv_cache_dtype or str(self.card.native_dtypes.kv_cache)

    def _load(self, base: Configuration) -> Iterator[Partial]:
        yield from _ladder(base, "concurrency", CONCURRENCY_LADDER)

    def _scheduler(self, base: Configuration) -> Iterator[Partial]:
        yield from _ladder(base, "max_running_requests", RUNNING_REQUESTS_LADDER)
        # an engine without a chunk size of its own (TensorRT-LLM: its chunk is the budget)
        # moves the two together and is not offered chunk sizes that price and launch alike
        own_chunk = not PROFILES[self.context.target.engine].chunk_is_budget
        for budget in TOKEN_BUDGET_LADDER:
            if budget != base.max_batched_tokens:
                yield {"max_batched_tokens": budget,
                       "chunked_prefill_size": min(base.chunked_prefill_size, budget) if own_chunk else budget}
        if own_chunk:
            yield from _ladder(base, "chunked_prefill_size",
                               [c for c in CHUNK_LADDER if c <= base.max_batched_tokens])
        yield from _ladder(base, "kv_memory_fraction", KV_FRACTION_MEMORY_LADDER
                           if self.context.objective.metric in KV_POOL_METRICS else KV_FRACTION_LADDER)
        for lever in ("kv_block_size", "prefix_cache", "graph_capture", "max_captured_batch"):
            yield from _ladder(base, lever, allowed_values(self.context, lever))
        yield from _ladder(base, "host_kv_tier_gb", HOST_KV_TIER_GB_LADDER)
        if base.replicas > 1 or base.disaggregated:
            yield from _ladder(base, "router", allowed_values(self.context, "router"))

    def _speculation(self, base: Configuration) -> Iterator[Partial]:
        for method in allowed_values(self.context, "spec_method"):
            if method == "none":
                if base.spec_method != "none":
                    yield {"spec_method": "none", "spec_depth": 0}
                continue
            if method == "mtp" and not self.card.mtp_layers:
                continue
            for depth in SPEC_DEPTHS:
                if (method, depth) != (base.spec_method, base.spec_depth):
                    yield {"spec_method": method, "spec_depth": depth}

    def _moe(self, base: Configuration) -> Iterator[Partial]:
        if self.card.is_moe:
            for ep in _values("ep"):
                if ep != base.ep and base.tp % ep == 0 and self._experts_divide(ep):
                    yield {"ep": ep, **({"all_to_all_backend": "none"} if ep == 1 else {})}
            widest_ep = _largest(lambda w: base.tp % w == 0 and self._experts_divide(w))
            launchable = adapter_for(self.context.target.engine).all_to_all_choices   # a pick deploy can run
            for backend in allowed_values(self.context, "all_to_all_backend"):
                if backend in launchable and backend != base.all_to_all_backend and widest_ep > 1:
                    yield {"all_to_all_backend": backend, "ep": base.ep if base.ep > 1 else widest_ep}
            yield from _ladder(base, "moe_backend", allowed_values(self.context, "moe_backend"))
            yield from _ladder(base, "eplb_replicas",
                               [r for r in EPLB_REPLICAS_LADDER if r <= self.card.num_experts])

    def _kernels(self, base: Configuration) -> Iterator[Partial]:
        yield from _ladder(base, "attention_backend", allowed_values(self.context, "attention_backend"))
        for fusions in [(name,) for name in FUSIONS] + [("generic",)]:
            if fusions != base.fusions:
                yield {"fusions": fusions}

    def _collectives(self, base: Configuration) -> Iterator[Partial]:
        """The all-reduce algorithms the engine's launch can set (`allreduce_choices`): a
        pick with another cannot be deployed as priced (vLLM has no flag for its custom
        one- or two-shot; it picks one by message size)."""
        if base.tp > 1:
            launchable = adapter_for(self.context.target.engine).allreduce_choices
            yield from _ladder(base, "allreduce_algorithm",
                               [v for v in allowed_values(self.context, "allreduce_algorithm") if v in launchable])

    def _disaggregation(self, base: Configuration) -> Iterator[Partial]:
        """Split pools, or back to colocated; none on an engine whose command line cannot
        start a split (ATOM: `predictor.harvest.adapters`): a pick no one can launch is
        no answer (plan-mix picked ATOM splits of gpt-oss-120b in every tier)."""
        if not base.disaggregated and not adapter_for(self.context.target.engine).launches_split_pools:
            return
        if base.disaggregated:
            yield {"disaggregated": False, "prefill_layout": None, "decode_layout": None,
                   "kv_transfer_backend": None, "prefill_replicas": 1, "decode_replicas": 1,
                   "replicas": _fill(self.context, base.tp * base.pp)}
            yield from _ladder(base, "kv_transfer_backend", allowed_values(self.context, "kv_transfer_backend"))
            return
        domain = self.cluster.scale_up_gpus()
        for prefill_tp in _values("tp"):
            for decode_tp in _values("tp"):
                if max(prefill_tp, decode_tp) > domain or \
                        base.pp * (prefill_tp + decode_tp) > self.cluster.total_gpus:
                    continue
                for decode_layout in self._decode_layouts(decode_tp):
                    yield {"disaggregated": True, "replicas": 1,
                           "prefill_layout": format_layout(prefill_tp, 1, 1),
                           "decode_layout": decode_layout}

    def _decode_layouts(self, tp: int) -> list[str]:
        layouts = [format_layout(tp, 1, 1)]
        if self.card.is_moe and tp > 1 and self._experts_divide(tp):
            layouts.append(format_layout(tp, tp, tp))
        return layouts

    def _experts_divide(self, ep: int) -> bool:
        return ep == 1 or (self.card.is_moe and self.card.num_experts % ep == 0)


def _values(lever: str) -> tuple[Any, ...]:
    """Width levers have the same legal set on every engine (levers.catalog)."""
    return next(iter(LEVERS_BY_NAME[lever].values.values()))


def _largest(accept: Callable[[int], bool], lever: str = "tp") -> int:
    return max((w for w in _values(lever) if accept(w)), default=1)


def _fill(context: SearchContext, replica_gpus: int) -> int:
    """Replicas that fill the cluster (at least one)."""
    return max(1, context.target.cluster.total_gpus // replica_gpus)


def _ladder(base: Configuration, lever: str, values) -> Iterator[Partial]:
    current = getattr(base, lever)
    for value in values:
        if value != current:
            yield {lever: value}
