"""Pareto sweeps (PRODUCT.md §2 `pareto`; METHOD §8): price the legal space of one
model on one cluster and engine, and keep the throughput-per-GPU vs interactivity
frontier.

`run_sweep` is the one library call behind `inferasim pareto`: it builds the plan
(`predictor.sweep.space`), runs it on an executor (`predictor.sweep.executors`: serial, local
process pool, Ray), turns the compact group results back into configurations, filters
by step-model mode, and marks the frontier (`predictor.sweep.frontier`). Default traffic is
fixed-length and analytical; agentic traffic runs the DES per point (`predict` decides
from the workload). Writing the CSV/JSON/PNG files is `predictor.sweep.output`.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

from levers.configuration import Configuration
from levers.errors import InputError, accepted_list
from levers.inputs import comma_items
from predictor.step.cost import Mode
from predictor.sweep.executors import (
    POINT_METRICS,
    THROUGHPUT_KEY,
    Executor,
    GroupResult,
    LocalPoolExecutor,
    PredictFn,
    ProgressFn,
    SweepJob,
    prepared,
)
from predictor.sweep.frontier import FrontierRule, pareto_indices
from predictor.sweep.space import SpaceOptions, SweepPlan
from predictor.target import Target
from predictor.workload import WorkloadSpec

# tok/s/user: per request 1/TPOT, the median over requests (METHOD §7's default), so the
# axis equals 1000 / the median TPOT; the mean of 1/TPOT is skewed by a few very short
# requests on agentic traffic. Fixed-length (analytical) points have one value for both.
INTERACTIVITY_KEY = "interactivity_p50"
MODE_NAMES: dict[str, Mode] = {"anchored": Mode.ANCHORED, "simulate": Mode.RANK_ONLY,
                               "rank-only": Mode.RANK_ONLY}
ALL_MODES: frozenset[Mode] = frozenset(Mode)
MODE_CHOICES = ("anchored", "rank-only", "simulate")    # --modes, as said back


@dataclass(frozen=True, slots=True)
class SweepPoint:
    """One kept point: the configuration, its step-model mode and its metrics."""

    group: int
    config: Configuration
    mode: Mode
    source: str
    metrics: dict[str, float]
    on_frontier: bool = False
    is_eligible: bool = True      # admitted by the sweep's FrontierRule (TTFT cap, bounds)

    @property
    def output_throughput_per_gpu(self) -> float:
        return self.metrics.get(THROUGHPUT_KEY, math.nan)

    @property
    def interactivity(self) -> float:
        return self.metrics.get(INTERACTIVITY_KEY, math.nan)

    def to_json(self) -> dict[str, Any]:
        return {
            "output_throughput_per_gpu": _rounded(self.output_throughput_per_gpu),
            "interactivity": _rounded(self.interactivity),
            "mode": str(self.mode), "source": self.source, "eligible": self.is_eligible,
            "configuration": self.config.to_dict(), "configuration_text": self.config.describe(),
            "metrics": {k: _rounded(v) for k, v in self.metrics.items()},
        }


@dataclass(frozen=True)
class SweepResult:
    target: dict[str, str]
    workload: WorkloadSpec
    points: tuple[SweepPoint, ...]
    num_groups: int
    num_priced: int             # predictions made (every speculative variant)
    num_illegal_families: int   # shapes x precisions rejected before pricing
    illegal_reasons: tuple[tuple[str, int], ...]
    num_illegal_groups: int     # groups with no legal variant at prediction time
    num_excluded_by_mode: int
    num_sampled_out: int
    modes: tuple[str, ...]
    backend: str
    workers: int
    wall_s: float
    rule: FrontierRule = FrontierRule()

    @property
    def frontier(self) -> tuple[SweepPoint, ...]:
        """Frontier points, by interactivity ascending (throughput descending)."""
        return tuple(sorted((p for p in self.points if p.on_frontier), key=lambda p: (p.interactivity,
                                                                                    -p.output_throughput_per_gpu)))

    @property
    def num_points(self) -> int:
        return len(self.points)

    @property
    def num_ineligible(self) -> int:
        return sum(not point.is_eligible for point in self.points)

    @property
    def points_per_s(self) -> float:
        return self.num_priced / self.wall_s if self.wall_s > 0 else math.inf

    def to_json(self) -> dict[str, Any]:
        return {
            **self.target, "workload": self.workload.name, "modes": list(self.modes),
            "num_points": self.num_points, "num_priced": self.num_priced, "num_groups": self.num_groups,
            "num_illegal_families": self.num_illegal_families, "num_illegal_groups": self.num_illegal_groups,
            "illegal_reasons": [{"reason": r, "count": n} for r, n in self.illegal_reasons],
            "num_excluded_by_mode": self.num_excluded_by_mode, "num_sampled_out": self.num_sampled_out,
            "frontier_rule": self.rule.to_json(), "num_ineligible": self.num_ineligible,
            "backend": self.backend, "workers": self.workers, "wall_s": round(self.wall_s, 3),
            "points_per_s": round(self.points_per_s, 1),
            "frontier": [point.to_json() for point in self.frontier],
        }


def parse_modes(text: str | None) -> frozenset[Mode]:
    """`anchored,rank-only` (default both); `simulate` is an alias of `rank-only`, the label
    every table and file gives a simulate-mode point."""
    if text is None:
        return ALL_MODES
    modes = set()
    for item in (part.lower() for part in comma_items(text, "--modes", accepted_list(MODE_CHOICES))):
        if item not in MODE_NAMES:
            raise InputError("--modes", f"unknown mode '{item}'", accepted_list(MODE_CHOICES))
        modes.add(MODE_NAMES[item])
    return frozenset(modes)


def run_sweep(target: Target, workload: WorkloadSpec, *, options: SpaceOptions | None = None,
              executor: Executor | None = None, modes: frozenset[Mode] = ALL_MODES, seed: int = 0,
              num_requests: int | None = None, predict_fn: PredictFn | None = None,
              on_progress: ProgressFn | None = None, rule: FrontierRule = FrontierRule()) -> SweepResult:
    """Price the space of ``target`` under ``workload`` and mark the frontier among the
    points ``rule`` admits (METHOD §8; `predictor.sweep.frontier`).

    ``predict_fn`` replaces `predictor.predict.predict` (tests, benchmarks); it must be
    a module-level function so worker processes can import it.
    """
    started = time.perf_counter()
    options = options or SpaceOptions(seed=seed)
    executor = executor or LocalPoolExecutor()
    job = SweepJob.for_target(target, workload, options, seed=seed, num_requests=num_requests,
                              predict_fn=predict_fn)
    _, plan = prepared(job)
    if on_progress:
        on_progress(0, len(plan.groups))
    results = executor.run(job, len(plan.groups), on_progress)
    points, illegal, excluded = _points(plan, results, modes)
    marked = _mark_frontier(points, rule)
    return SweepResult(
        target=target.to_json(), workload=workload, points=marked, num_groups=len(plan.groups),
        num_priced=sum(r.num_priced for r in results), num_illegal_families=plan.num_illegal_families,
        illegal_reasons=plan.illegal_reasons, num_illegal_groups=illegal, num_excluded_by_mode=excluded,
        num_sampled_out=plan.num_sampled_out, modes=tuple(sorted(str(m) for m in modes)),
        backend=str(executor.backend), workers=executor.workers, wall_s=time.perf_counter() - started,
        rule=rule,
    )


def _points(plan: SweepPlan, results: list[GroupResult], modes: frozenset[Mode]) -> tuple[list[SweepPoint], int, int]:
    points, illegal, excluded = [], 0, 0
    for result in results:
        if result.variant is None:
            illegal += 1
            continue
        mode = Mode(result.mode) if result.mode else Mode.RANK_ONLY
        if mode not in modes:
            excluded += 1
            continue
        metrics = {key: value for key, value in zip(POINT_METRICS, result.metrics) if not math.isnan(value)}
        points.append(SweepPoint(result.group, plan.configuration(result.group, result.variant), mode,
                                 result.source or "", metrics))
    return points, illegal, excluded


def _mark_frontier(points: list[SweepPoint], rule: FrontierRule) -> tuple[SweepPoint, ...]:
    """METHOD §8 over the points ``rule`` admits; among configurations tying on both axes
    (e.g. concurrency beyond the running cap only queues), the frontier keeps the
    shortest TTFT, then fewest GPUs."""
    eligible = [rule.admits(p.metrics) for p in points]
    nan = math.nan
    prefer = [(p.metrics.get("ttft_ms_mean", math.inf), p.config.total_gpus, p.config.concurrency) for p in points]
    on = set(pareto_indices([p.output_throughput_per_gpu if ok else nan for p, ok in zip(points, eligible)],
                            [p.interactivity for p in points], prefer))
    return tuple(SweepPoint(p.group, p.config, p.mode, p.source, p.metrics, i in on, eligible[i])
                 for i, p in enumerate(points))


def _rounded(value: float) -> float | None:
    return round(value, 4) if math.isfinite(value) else None
