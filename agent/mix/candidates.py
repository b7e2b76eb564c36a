"""The candidates of one plan-mix slot and how one is priced (METHOD §6, §7).

A model entry's candidates are either listed in models.yaml or ``auto``: the seed
planner's round-0 seeds (baseline, then one lever at a time in METHOD §6's order),
kept by a small per-group quota spread evenly over each group, so the set spans layout,
load and disaggregation without pricing all ~90 seeds with the DES. Load matters most
here: one tier wants a lightly loaded replica, another a full one.

A :class:`CandidateTask` names everything by text so a worker process can rebuild the
target; :func:`evaluate_task` prices it through :func:`agent.scoring.evaluate` (the
tuning agent's guards, structure and memory checks, prediction) and always asks the
predictor for a distribution: tiers bound the median over requests of 1/TPOT. Every
candidate is replayed on :data:`MIX_REPLICATIONS` workload draws, so each metric the
report shows carries its 90% interval (`predictor.sim.replications`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

from agent.scoring import evaluate
from agent.seed_planner import SeedPlanner, baseline
from agent.trial import Phase, SearchContext, Trial
from levers.configuration import Configuration
from objectives.objectives import resolve_objective
from predictor.anchors.anchoring import PricedCheck
from predictor.hardware import Cluster
from predictor.sim.agentic import AGENTIC_REQUESTS_PER_CLIENT
from predictor.sim.workloads import FIXED_CLOSED_REQUESTS_PER_CLIENT
from predictor.sweep.space import spread
from predictor.target import Target, resolve_target
from predictor.workload import AGENTIC, WorkloadSpec, parse_workload

RANKING_OBJECTIVE = "output_throughput_per_gpu"  # METHOD §7 ranks qualifiers by (output) throughput per GPU
MIX_REPLICATIONS = 3                     # workload draws per candidate: every metric with a 90% interval
MAX_AUTO_CONCURRENCY = 128               # past it agentic runs are saturated and take tens of seconds
DEFAULT_MAX_REQUESTS = 1024              # DES requests per candidate at most (the full 40 per client up to 25 clients)
AUTO_QUOTAS: dict[str, int] = {          # seeds kept per seed-planner group (METHOD §6 order)
    "baseline": 1, "tp": 3, "attention_dp": 1, "precision": 2, "load": 5,
    "speculation": 1, "moe": 1, "disaggregation": 3,
}


@dataclass(frozen=True, slots=True)
class CandidateTask:
    """One configuration to price, named by text (picklable; rebuilt in a worker)."""

    model: str
    cluster: str
    engine: str
    workload: str
    config: Configuration
    origin: str = "auto"          # "auto" (seed planner) or "listed" (models.yaml)
    acceptance: tuple[float, ...] | None = None   # the entry's traffic acceptance (models.yaml)

    @property
    def key(self) -> tuple:
        """The evaluation cache key: tiers and repeated entries share one prediction."""
        return (self.model, self.cluster, self.engine, self.workload, self.config, self.acceptance)

    @property
    def workload_spec(self) -> WorkloadSpec:
        spec = parse_workload(self.workload)
        return spec if self.acceptance is None else replace(spec, acceptance=self.acceptance)


@dataclass(frozen=True, slots=True)
class EvalSettings:
    """How every candidate is priced: the DES gets the predictor's requests per
    closed-loop client (enough to pass its warm-up), capped at ``max_requests`` so a
    heavily loaded candidate costs seconds, not minutes."""

    predict_fn: Callable[..., Any]
    seed: int = 0
    max_requests: int = DEFAULT_MAX_REQUESTS
    replications: int = MIX_REPLICATIONS

    def requests_for(self, task: CandidateTask) -> int:
        per_client = (AGENTIC_REQUESTS_PER_CLIENT if task.workload == AGENTIC.name
                      else FIXED_CLOSED_REQUESTS_PER_CLIENT)
        return min(self.max_requests, per_client * max(1, task.config.concurrency))


class WithDistribution:
    """A predictor that always runs the DES: tiers bound per-request medians (METHOD §7)."""

    def __init__(self, predict_fn: Callable[..., Any]) -> None:
        self.predict_fn = predict_fn

    def __call__(self, target: Target, config: Configuration, workload: WorkloadSpec, **options: Any) -> Any:
        return self.predict_fn(target, config, workload, **{**options, "need_distribution": True})


def search_context(target: Target, workload: WorkloadSpec, predict_fn: Callable[..., Any] | None = None,
                   seed: int = 0, num_requests: int | None = None) -> SearchContext:
    return SearchContext(
        target=target, workload=workload, objective=resolve_objective(RANKING_OBJECTIVE),
        predict_fn=WithDistribution(predict_fn) if predict_fn else None,
        check_fn=PricedCheck(None, workload.priced_context_tokens),
        seed=seed, context_tokens=workload.context_tokens, num_requests=num_requests,
    )


def evaluate_task(task: CandidateTask, settings: EvalSettings) -> Trial:
    """Price one candidate (runs in a worker process): rebuild the target, then score."""
    target = resolve_target(task.model, task.cluster, task.engine)
    context = search_context(target, task.workload_spec, settings.predict_fn,
                             settings.seed, settings.requests_for(task))
    proposed = task.config.diff(Configuration()) if task.origin == "listed" else None
    return evaluate(context, task.config, phase=Phase.SEED, proposed=proposed, replications=settings.replications)


# -- auto candidates ------------------------------------------------------------------


def budget_cluster(cluster: Cluster, max_gpus: int | None) -> Cluster:
    """The cluster the seeds may fill: ``max_gpus`` GPUs, rounded down to whole nodes
    above one node (the named cluster still prices the fabric)."""
    if max_gpus is None or max_gpus >= cluster.total_gpus:
        return cluster
    if max_gpus <= cluster.gpus_per_node:
        return Cluster(gpu=cluster.gpu, gpus_per_node=max_gpus, num_nodes=1)
    return Cluster(gpu=cluster.gpu, gpus_per_node=cluster.gpus_per_node,
                   num_nodes=max_gpus // cluster.gpus_per_node)


def auto_candidates(target: Target, workload: WorkloadSpec, max_gpus: int | None = None,
                    quotas: dict[str, int] | None = None) -> list[Configuration]:
    """The seed planner's round-0 seeds, a spread per group (see the module docstring)."""
    bounded = Target(target.card, budget_cluster(target.cluster, max_gpus), target.engine)
    context = search_context(bounded, workload)
    by_group: dict[str, list[Configuration]] = {}
    for seed in SeedPlanner(context).seeds(baseline(context)):
        if seed.config.concurrency <= MAX_AUTO_CONCURRENCY:
            by_group.setdefault(seed.group, []).append(seed.config)
    chosen: list[Configuration] = []
    for group, quota in (quotas or AUTO_QUOTAS).items():
        chosen += spread(by_group.get(group, []), quota)
    return list(dict.fromkeys(chosen))


def within_budget(configs: Iterable[Configuration], max_gpus: int | None) -> tuple[list[Configuration], int]:
    """(configurations using at most ``max_gpus`` GPUs, how many were excluded)."""
    configs = list(configs)
    kept = [c for c in configs if max_gpus is None or c.total_gpus <= max_gpus]
    return kept, len(configs) - len(kept)
