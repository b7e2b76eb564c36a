"""Reading ledgers back: list, show, best and compare (`inferasim ledger ...`).

Pure functions of validated :class:`Ledger` objects returning plain dicts the CLI
renders (or prints as JSON). Ranking follows the search's rule: a trial that meets
every SLO beats one that does not, then the objective in its recorded direction.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ledgers.model import Ledger, TrialRecord
from ledgers.lock import is_held
from ledgers.store import list_ledgers, load_ledger, resolve_ledger
from levers.errors import InputError

QUESTION_FIELDS = ("model", "cluster", "engine", "objective", "slos", "workload", "budget", "seed")


def ranked(ledger: Ledger) -> list[TrialRecord]:
    """Priced, distinct trials in the order `tune` shows them: SLO-meeting first; the
    ledger's best leads (`ledger best`'s answer, chosen among full-fidelity trials, so a
    running search's bounded trials priced higher do not pass it), then the confirm step's
    trials, then the others, each by the objective. A search trial re-priced by the confirm
    step is represented by its confirm trial."""
    sign = 1.0 if ledger.direction == "max" else -1.0
    superseded = {t.confirm_of for t in ledger.trials if t.confirm_of is not None}
    best = ledger.best.index if ledger.best is not None else None
    priced = [t for t in ledger.trials
              if t.legal and t.objective_value is not None and t.duplicate_of is None and t.index not in superseded]
    return sorted(priced, key=lambda t: (t.slo_met is not True, t.index != best, bool(superseded) and t.confirm_of is None,
                                         t.miss_distance or 0.0, -sign * t.objective_value, t.index))


def best_record(ledger: Ledger) -> TrialRecord | None:
    """The best trial as recorded (None when no trial met the SLOs)."""
    if ledger.best is None:
        return None
    return ledger.trials[ledger.best.index]


def status_of(ledger: Ledger, reference: str | Path | None = None) -> str:
    """``finished``; ``running`` while a live process holds the ledger's lock (or where the
    ledger's file is unknown); else ``interrupted``: a search stopped before it finished
    (Ctrl-C, killed), which ``tune --resume`` continues."""
    if ledger.status == "finished":
        return "finished"
    if reference is None:
        return "running"
    try:
        written = is_held(resolve_ledger(str(reference)))
    except InputError:
        return "running"
    return "running" if written else "interrupted"


def unfinished_note(ledger: Ledger, reference: str | Path | None = None) -> str:
    """What a search's best is worth before the search finished ("" once it has): the best
    so far; a DES search's, among its trials priced at full fidelity (a bounded search's
    shorter replays wait for its confirm step), not yet re-priced over replications."""
    status = status_of(ledger, reference)
    if status == "finished":
        return ""
    how = ("still running" if status == "running"
           else f"interrupted; tune --resume {reference or ledger.search_id} continues it")
    replayed = any(t.source == "des" for t in ledger.trials)
    return f" so far of an unfinished search ({how})" + (
        ": among the trials priced at full fidelity, not yet re-priced over replications" if replayed else "")


def row(path: Path) -> dict[str, Any]:
    """One line of `ledger list` (an unreadable file is listed with its problem)."""
    try:
        ledger = load_ledger(path)
    except InputError as error:
        return {"search_id": path.stem, "path": str(path), "problem": error.problem}
    best = ledger.best
    return {
        "search_id": ledger.search_id, "path": str(path), "created_at": ledger.created_at,
        "model": ledger.model, "cluster": ledger.cluster, "engine": ledger.engine,
        "objective": ledger.objective, "slos": ledger.slos, "workload": ledger.workload,
        "num_trials": len(ledger.trials), "budget": ledger.budget, "status": status_of(ledger, path),
        "best_objective": best.objective_value if best else None, "stop_reason": ledger.stop_reason,
        "lm": ledger.lm.model_dump() if ledger.lm else None,
    }


def rows() -> list[dict[str, Any]]:
    return [row(path) for path in list_ledgers()]


def overview(ledger: Ledger, top: int, reference: str | Path | None = None) -> dict[str, Any]:
    """`ledger show`: the question, the outcome, the top trials and the LLM notes
    (``reference``: where the ledger was read, for its status, `status_of`)."""
    phases: dict[str, int] = {}
    for trial in ledger.trials:
        phases[trial.phase] = phases.get(trial.phase, 0) + 1
    return {
        "question": {key: getattr(ledger, key) for key in QUESTION_FIELDS},
        "search_id": ledger.search_id, "status": status_of(ledger, reference), "stop_reason": ledger.stop_reason,
        "lm": ledger.lm.model_dump() if ledger.lm else None, "trials_by_phase": phases,
        "stats": ledger.stats.model_dump(), "best": ledger.best.model_dump() if ledger.best else None,
        "nearest_misses": [m.model_dump() for m in ledger.nearest_misses],
        "top": [t.model_dump() for t in ranked(ledger)[:top]],
        "rejected": [{"index": t.index, "phase": t.phase, "rejected_by": t.rejected_by, "reason": t.reason}
                     for t in ledger.trials if not t.legal][:top],
        "llm": ledger.llm.model_dump(),
    }


def compare(first: Ledger, second: Ledger) -> dict[str, Any]:
    """Two searches side by side: their questions, outcomes and best configurations."""
    best_a, best_b = best_record(first), best_record(second)
    config_a = best_a.configuration if best_a else {}
    config_b = best_b.configuration if best_b else {}
    differing = {key: [config_a.get(key), config_b.get(key)] for key in sorted(set(config_a) | set(config_b))
                 if config_a.get(key) != config_b.get(key)} if best_a and best_b else {}
    return {
        "ledgers": [first.search_id, second.search_id],
        "question": {key: [getattr(first, key), getattr(second, key)] for key in QUESTION_FIELDS},
        "same_question": all(getattr(first, k) == getattr(second, k) for k in QUESTION_FIELDS if k != "budget"),
        "sides": [_side(ledger, best) for ledger, best in ((first, best_a), (second, best_b))],
        "best_configuration_differences": differing,
    }


def _side(ledger: Ledger, best: TrialRecord | None) -> dict[str, Any]:
    """One ledger's outcome in a comparison (the same names as everywhere else)."""
    return {"search_id": ledger.search_id, "num_trials": len(ledger.trials), "stop_reason": ledger.stop_reason,
            "best_objective": best.objective_value if best else None, "mode": best.mode if best else None}
