"""The ledgers of one plan-mix run (PRODUCT.md §5), through `ledgers.store`.

A ledger (`ledgers.model.Ledger`) records one model on one cluster and engine, so a
plan writes one per (model entry, engine): a seed-only "search" whose trials are that
entry's evaluated candidates, objective throughput per GPU (METHOD §7 ranks qualifiers
by it), no SLOs (each tier applies its own bounds; the plan report says which
qualified). They share the plan id, so `inferasim ledger list|show|best|compare` read
them like any other ledger, and the plan report lists their paths.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agent.mix.candidates import RANKING_OBJECTIVE, CandidateTask
from agent.mix.report import MixReport
from agent.recorder import summary, trial_stats
from agent.scoring import with_index
from agent.session import LlmNotes
from agent.trial import Trial
from ledgers.model import SCHEMA_VERSION
from ledgers.store import SUFFIX, LedgerWriter, ledgers_dir
from objectives.objectives import resolve_objective
from predictor.units import MS_PER_S

STOP_REASON = "plan-mix: every candidate of the entry priced once"
ID_SUFFIX_HEX = 6


def plan_id(now: datetime) -> str:
    return f"mix-{now.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:ID_SUFFIX_HEX]}"


def write_plan_ledgers(report: MixReport, command_line: Sequence[str] = ()) -> tuple[Path, ...]:
    """One ledger per (entry, engine); returns their paths in entry order."""
    now = datetime.now(UTC)
    stamp = now.isoformat(timespec="seconds")
    base_id = plan_id(now)
    groups: dict[tuple[int, str], list[CandidateTask]] = {}
    for index, tasks in report.tasks_by_entry.items():
        for task in tasks:
            groups.setdefault((index, task.engine), []).append(task)
    paths = []
    for (index, engine), tasks in groups.items():
        search_id = f"{base_id}-{index:02d}-{_slug(tasks[0].model)}-{engine}"
        trials = [with_index(report.trials[task.key], n) for n, task in enumerate(tasks)]
        header = _header(search_id, stamp, command_line, tasks[0], trials, report)
        writer = LedgerWriter(ledgers_dir() / f"{search_id}{SUFFIX}", header,
                              [_record(task, trial) for task, trial in zip(tasks, trials)])
        # the run prices every entry's candidates in one pool: a ledger's own time is its
        # candidates' pricing time, not the whole run's
        writer.write(_tail(trials, sum(trial.wall_ms for trial in trials) / MS_PER_S), durable=True)
        paths.append(writer.path)
    return tuple(paths)


def _header(search_id: str, stamp: str, command_line: Sequence[str], first: CandidateTask,
            trials: list[Trial], report: MixReport) -> dict[str, Any]:
    objective = resolve_objective(RANKING_OBJECTIVE)
    return {
        "schema_version": SCHEMA_VERSION, "search_id": search_id, "created_at": stamp,
        "updated_at": stamp, "status": "finished", "command_line": list(command_line),
        "model": first.model, "cluster": first.cluster, "engine": first.engine,
        "objective": objective.name, "objective_metric": objective.metric,
        "direction": str(objective.direction), "slos": [], "workload": first.workload,
        "budget": max(1, len(trials)), "seed": report.settings.get("seed", 0), "lm": None,
        "no_llm": True, "guidance": f"plan-mix {report.spec.source}", "precisions": None,
        "num_requests": report.settings.get("max_requests"), "baseline": first.config.to_dict(),
    }


def _record(task: CandidateTask, trial: Trial) -> dict[str, Any]:
    record = trial.to_json()
    if task.origin == "listed" and record.get("proposed") is None:
        record["proposed"] = task.config.diff(type(task.config)())
    return record


def _tail(trials: list[Trial], wall_s: float) -> dict[str, Any]:
    best = max((t for t in trials if t.priced), key=lambda t: (t.score, -t.index), default=None)
    return {
        "best": summary(best) if best else None, "nearest_misses": [], "stop_reason": STOP_REASON,
        "llm": LlmNotes().to_json(), "stats": trial_stats(trials, wall_s),
    }


def _slug(text: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "._" else "-" for ch in text.lower())
