"""Keeps a search's ledger on disk (PRODUCT.md §5): a session listener that writes the
ledger after every trial, and the way back from a ledger to a session (``--resume``).

The header (the question the search answers) is written once; each trial is added as
it is recorded; the tail (best, nearest misses, stop reason, LLM notes, statistics) is
recomputed at every write. Only masked text reaches the file (:mod:`levers.redact`).
"""

from __future__ import annotations

import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent.fidelity import fidelity_json
from agent.ranking import meets_slos
from levers.redact import redact, redact_argv
from agent.session import SearchSession
from agent.trial import Phase, SearchContext, Stage, Trial
from ledgers.model import Ledger, TrialRecord
from ledgers.store import LedgerWriter, ledgers_dir
from levers.configuration import Configuration, configuration_from_dict

if TYPE_CHECKING:  # annotations only: plan-mix writes ledgers without loading DSPy
    from agent.lm import LmSettings

NEAREST_MISSES = 5


def now_text() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def new_search_id(model: str) -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    slug = "".join(c if c.isalnum() or c in "-." else "-" for c in model.lower())
    return f"{stamp}-{slug}-{uuid.uuid4().hex[:6]}"


def ledger_header(context: SearchContext, *, search_id: str, command_line: list[str], budget: int,
                  lm: LmSettings | None, no_llm: bool, baseline: Configuration) -> dict[str, Any]:
    target, objective = context.target, context.objective
    return {
        "schema_version": 1, "search_id": search_id, "created_at": now_text(),
        "command_line": redact_argv(list(command_line)), "model": target.card.name,
        "cluster": target.cluster.spec, "engine": str(target.engine), "objective": objective.name,
        "objective_metric": objective.metric, "direction": str(objective.direction),
        "slos": [str(slo) for slo in context.slos], "workload": context.workload.name,
        "budget": budget, "seed": context.seed, "lm": lm.to_json() if lm else None, "no_llm": no_llm,
        "guidance": redact(context.guidance), "precisions": list(context.precisions) if context.precisions else None,
        "num_requests": context.num_requests, "search_fidelity": fidelity_json(context),
        "baseline": baseline.to_dict(),
    }


class LedgerRecorder:
    """Session listener: add the trial, rewrite the ledger atomically."""

    def __init__(self, writer: LedgerWriter, previous_wall_s: float = 0.0, replayed: int = 0,
                 finished: bool = False) -> None:
        self.writer = writer
        self.started = time.perf_counter()
        self.previous_wall_s = previous_wall_s
        self.replayed = replayed  # a resumed search's first trials: already in the ledger (agent.resume)
        self.finished = finished  # the resumed ledger had finished: a replay that adds nothing leaves it as it was

    @classmethod
    def create(cls, header: dict[str, Any], directory: Path | None = None) -> "LedgerRecorder":
        path = (directory or ledgers_dir()) / f"{header['search_id']}.json"
        return cls(LedgerWriter(path, header))

    @property
    def path(self) -> Path:
        return self.writer.path

    def __call__(self, session: SearchSession, trial: Trial) -> None:
        if trial.index < self.replayed:
            return
        self.writer.add_trial(trial.to_json())
        self.writer.write(self.tail(session, "running", None))

    def finish(self, session: SearchSession, stop_reason: str) -> None:
        if self.finished and len(session.trials) <= self.replayed:
            return      # resumed at the budget it had finished: nothing priced, nothing to record
        self.writer.write(self.tail(session, "finished", stop_reason), durable=True)

    def tail(self, session: SearchSession, status: str, stop_reason: str | None) -> dict[str, Any]:
        leader = session.answer_leader()
        best = leader if leader is not None and meets_slos(leader) else None
        misses = [] if best else session.nearest_misses(NEAREST_MISSES)
        return {
            "updated_at": now_text(), "status": status,
            "best": summary(best) if best else None,
            "ties": [t.index for t in session.ties()] if best else [],
            "nearest_misses": [summary(t) for t in misses],
            "stop_reason": stop_reason, "llm": session.notes.to_json(),
            "stats": self.stats(session),
        }

    def stats(self, session: SearchSession) -> dict[str, Any]:
        return trial_stats(session.trials, self.previous_wall_s + time.perf_counter() - self.started)


def trial_stats(trials: list[Trial], wall_s: float) -> dict[str, Any]:
    """The ledger's ``stats`` block for ``trials`` priced in ``wall_s`` seconds."""
    return {
        "num_trials": len(trials), "num_legal": sum(t.legal for t in trials),
        "num_priced": sum(t.priced for t in trials),
        "num_rejected": sum(not t.legal for t in trials),
        "num_duplicates": sum(t.duplicate_of is not None for t in trials),
        "wall_s": round(wall_s, 3), "trials_per_s": round(len(trials) / wall_s, 3) if wall_s > 0 else 0.0,
        "predict_wall_ms": round(sum(t.wall_ms for t in trials), 3),
    }


def summary(trial: Trial) -> dict[str, Any]:
    return {"index": trial.index, "phase": str(trial.phase), "configuration": trial.config.to_dict(),
            "objective_value": trial.objective_value, "slo_met": trial.slo_met,
            "miss_distance": trial.miss_distance, "mode": trial.mode, "anchor_id": trial.anchor_id,
            "flags": list(trial.flags)}


def trial_from_record(record: TrialRecord, context: SearchContext) -> Trial:
    """A ledger trial back as a Trial (configurations re-validated; scores recomputed)."""
    config = configuration_from_dict(record.configuration) if record.configuration else None
    metrics = dict(record.metrics) if record.metrics is not None else None
    score = context.objective.signed_score(metrics) if metrics and record.legal else None
    return Trial(
        phase=Phase(record.phase), config=config, proposed=record.proposed, legal=record.legal,
        reasons=tuple(record.reasons), stage=Stage(record.rejected_by) if record.rejected_by else None,
        mode=record.mode, anchor_id=record.anchor_id, flags=tuple(record.flags), source=record.source,
        metrics=metrics, objective_value=record.objective_value, slo_met=record.slo_met,
        slo_checks=tuple(c.model_dump() for c in record.slo_checks), miss_distance=record.miss_distance,
        fusion_opportunities=tuple(record.fusion_opportunities), wall_ms=record.wall_ms,
        duplicate_of=record.duplicate_of, score=score, index=record.index,
        des_requests=record.des_requests, confirm_of=record.confirm_of, replications=record.replications,
        seed_intervals=None if record.seed_intervals is None else
        {key: (lo, hi) for key, (lo, hi) in record.seed_intervals.items()},
        intervals=None if record.intervals is None else {key: (lo, hi) for key, (lo, hi) in record.intervals.items()},
        transfer=record.transfer,
    )


def resume_header(ledger: Ledger, budget: int, lm: LmSettings | None) -> dict[str, Any]:
    """The header of a resumed ledger: the original question, a possibly larger budget."""
    data = ledger.model_dump(mode="json")
    keep = ("schema_version", "search_id", "created_at", "command_line", "model", "cluster", "engine",
            "objective", "objective_metric", "direction", "slos", "workload", "budget", "seed", "lm",
            "no_llm", "guidance", "precisions", "num_requests", "search_fidelity", "baseline")
    header = {key: data[key] for key in keep}
    header["budget"] = budget
    if lm is not None:
        header["lm"] = lm.to_json()
    return header
