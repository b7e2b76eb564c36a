"""The mix planner: one configuration per model and latency tier (METHOD §7).

An operator serving several models lists them in models.yaml (`agent.mix.config`).
For every entry and engine the planner builds its candidates (listed, or the seed
planner's spread: `agent.mix.candidates`), prices each once with the DES on the
entry's workload (agentic by default) — in parallel on all local cores, each worker
rebuilding its target from names — and lets every tier choose from the same
evaluations (`agent.mix.selection`). Identical (model, cluster, engine, workload,
configuration) candidates are priced once, so the four tiers and repeated entries
share one prediction. Every evaluated candidate goes into the plan's ledger.

The predictor is injected (``predict_fn``, default ``predictor.predict.predict``) so
tests run against a fake; progress is reported through a callback, so the library
prints nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import replace
from typing import Any

from agent.mix.candidates import (
    DEFAULT_MAX_REQUESTS,
    CandidateTask,
    EvalSettings,
    auto_candidates,
    evaluate_task,
    within_budget,
)
from agent.mix.config import MixSpec, ModelPlan
from agent.mix.ledger import write_plan_ledgers
from agent.mix.report import MixReport, Slot
from agent.mix.selection import choose
from agent.pricing import available_cores
from agent.trial import Trial
from levers.configuration import Configuration
from levers.errors import InputError
from predictor.anchors.anchoring import as_priced
from predictor.predict import default_store, predict
from predictor.target import AnchorLookup, Target, resolve_target

Progress = Callable[[int, int], None]


def default_predict_fn() -> Callable[..., Any]:
    """The real predictor (a module-level function, so worker processes can receive it)."""
    return predict


def plan_mix(spec: MixSpec, *, predict_fn: Callable[..., Any] | None = None, seed: int = 0,
             max_requests: int = DEFAULT_MAX_REQUESTS, workers: int | None = None,
             progress: Progress | None = None, has_anchor: AnchorLookup | None = None,
             write_ledger: bool = True, command_line: Sequence[str] = ()) -> MixReport:
    """Price every entry's candidates once and choose per tier (METHOD §7)."""
    started = time.perf_counter()
    lookup = has_anchor if has_anchor is not None else default_store().has_anchor
    per_entry, excluded, merged = build_tasks(spec, lookup)
    unique = tuple(unique_tasks(per_entry.values()))
    settings = EvalSettings(predict_fn or default_predict_fn(), seed, max_requests)
    workers = workers or available_cores()
    trials = evaluate_all(unique, settings, workers, progress)
    slots = tuple(
        Slot(entry, spec.tiers[name], choose(spec.tiers[name],
                                              [(task, trials[task.key]) for task in per_entry[entry.index]]))
        for entry in spec.models for name in entry.tiers
    )
    report = MixReport(spec, slots, unique, per_entry, trials, excluded, time.perf_counter() - started,
                       {"seed": seed, "max_requests": max_requests, "workers": workers,
                        "replications": settings.replications}, same_as_priced=merged)
    if write_ledger:
        report = _with_ledger(report, command_line)
    return report


def build_tasks(spec: MixSpec, has_anchor: AnchorLookup) -> tuple[dict[int, list[CandidateTask]], dict[int, int],
                                                                   dict[int, int]]:
    """Each entry's candidates on each of its engines, within its GPU budget, and per entry
    how many were over the budget and how many were the same deployment as an earlier
    candidate once their unset levers took the calibrating anchor's recipe (`as_priced`:
    `tp=2` and `tp=2, weight_dtype=fp8` on a stack whose anchor ran fp8): priced once."""
    per_entry: dict[int, list[CandidateTask]] = {}
    excluded: dict[int, int] = {}
    merged: dict[int, int] = {}
    for entry in spec.models:
        engines = entry.engines or (str(resolve_target(entry.name, entry.cluster, None, has_anchor).engine),)
        tasks: list[CandidateTask] = []
        for engine in engines:
            target = resolve_target(entry.name, entry.cluster, engine)
            configs = (list(entry.candidates) if entry.candidates is not None
                       else _auto(spec.source, entry, target))
            kept, dropped = within_budget(configs, entry.max_gpus)
            excluded[entry.index] = excluded.get(entry.index, 0) + dropped
            kept, same = _distinct_as_priced(target, kept, entry.workload.priced_context_tokens)
            merged[entry.index] = merged.get(entry.index, 0) + same
            origin = "auto" if entry.candidates is None else "listed"
            tasks += [CandidateTask(target.card.name, entry.cluster, engine, entry.workload.name, config, origin,
                                    entry.workload.acceptance) for config in kept]
        per_entry[entry.index] = list(dict.fromkeys(tasks))
    return per_entry, excluded, merged


def _distinct_as_priced(target: Target, configs: list[Configuration],
                        context_tokens: float | None) -> tuple[list[Configuration], int]:
    """``configs`` without those that are an earlier one's deployment as priced (first kept)."""
    first: dict[Configuration, Configuration] = {}
    for config in configs:
        first.setdefault(as_priced(target, config, context_tokens=context_tokens)[0], config)
    return list(first.values()), len(configs) - len(first)


def unique_tasks(groups: Iterable[list[CandidateTask]]) -> list[CandidateTask]:
    """One task per cache key, first seen wins (a listed and an auto twin share a price)."""
    first: dict[tuple, CandidateTask] = {}
    for tasks in groups:
        for task in tasks:
            first.setdefault(task.key, task)
    return list(first.values())


def _auto(source: str, entry: ModelPlan, target: Target) -> list[Configuration]:
    try:
        return auto_candidates(target, entry.workload, entry.max_gpus)
    except InputError as error:  # e.g. the model fits nowhere on the cluster (or in its GPU budget)
        budgeted = entry.max_gpus is not None and entry.max_gpus < target.cluster.total_gpus
        whole = _whole_cluster_error(target, entry) if budgeted else error
        if whole is None:       # it fits the cluster: the budget is to blame
            raise InputError(f"{source}: models[{entry.index}].max_gpus", f"{error.problem} (its {entry.max_gpus} "
                             f"GPUs of {target.cluster.spec})", "a larger max_gpus, or none (the whole cluster)") from None
        raise InputError(f"{source}: models[{entry.index}]", whole.problem,
                         "a larger cluster: for this model (more GPUs per node or more nodes)") from None


def _whole_cluster_error(target: Target, entry: ModelPlan) -> InputError | None:
    """Why the model has no legal layout on the whole cluster, or None when it has one."""
    try:
        auto_candidates(target, entry.workload)
    except InputError as error:
        return error
    return None


def evaluate_all(tasks: Sequence[CandidateTask], settings: EvalSettings, workers: int,
                 progress: Progress | None = None) -> dict[tuple, Trial]:
    """Price every task once: in this process for one worker, else a process pool."""
    total = len(tasks)
    report = progress or (lambda done, of: None)
    results: dict[tuple, Trial] = {}
    if workers <= 1 or total <= 1:
        for done, task in enumerate(tasks, start=1):
            results[task.key] = evaluate_task(task, settings)
            report(done, total)
        return results
    pool = ProcessPoolExecutor(max_workers=min(workers, total))
    try:
        futures = {pool.submit(evaluate_task, task, settings): task for task in tasks}
        for done, future in enumerate(as_completed(futures), start=1):
            results[futures[future].key] = future.result()
            report(done, total)
    except BaseException:  # an interrupt must not wait for the queued candidates
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()
    return {task.key: results[task.key] for task in tasks}


def _with_ledger(report: MixReport, command_line: Sequence[str]) -> MixReport:
    return replace(report, ledger_paths=write_plan_ledgers(report, command_line))
