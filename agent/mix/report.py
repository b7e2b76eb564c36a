"""The records of one plan-mix run (METHOD §7): a :class:`Slot` per (model entry, tier)
with its choice, and the :class:`MixReport` that `plan-mix` prints and writes.

They sit below the planner (which builds them) and the ledger writer (which reads them).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.mix.candidates import CandidateTask
from agent.mix.config import MixSpec, ModelPlan, Tier
from agent.mix.selection import SlotChoice
from agent.trial import Trial


@dataclass(frozen=True, slots=True)
class Slot:
    """One (model entry, tier) of the plan and its choice."""

    entry: ModelPlan
    tier: Tier
    choice: SlotChoice

    def to_json(self) -> dict[str, Any]:
        choice = self.choice
        return {
            "model": self.entry.name, "entry": self.entry.index, "cluster": self.entry.cluster,
            "tier": self.tier.name, "met": choice.met,
            "pick": choice.pick.to_json(self.tier) if choice.pick else None,
            "short_list": [s.to_json(self.tier, choice.pick) for s in choice.short_list],
            "nearest_miss": choice.nearest_miss.to_json(self.tier) if choice.nearest_miss else None,
            "candidates_priced": choice.num_priced, "candidates_qualified": choice.num_qualified,
        }


@dataclass(frozen=True)
class MixReport:
    spec: MixSpec
    slots: tuple[Slot, ...]
    tasks: tuple[CandidateTask, ...]          # unique, in evaluation order
    tasks_by_entry: dict[int, list[CandidateTask]]
    trials: dict[tuple, Trial]                # task key -> its evaluation
    excluded_by_max_gpus: dict[int, int]      # entry index -> listed/auto candidates over max_gpus
    wall_s: float
    settings: dict[str, Any] = field(default_factory=dict)
    ledger_paths: tuple[Path, ...] = ()
    same_as_priced: dict[int, int] = field(default_factory=dict)   # entry -> candidates that were another's deployment

    @property
    def candidates_evaluated(self) -> int:
        return len(self.tasks)

    def illegal_reasons(self, entry: ModelPlan) -> tuple[int, int, list[tuple[str, int]]]:
        """(candidates, illegal ones, their reasons with counts, most common first) of one
        entry; a reason is the stage that refused the candidate and its first reason."""
        trials = [self.trials[task.key] for task in self.tasks_by_entry.get(entry.index, [])]
        reasons = Counter(_staged(trial.stage or "prediction", trial.reasons[0] if trial.reasons else "no reason given")
                          for trial in trials if not trial.legal)
        return len(trials), sum(reasons.values()), reasons.most_common()

    def _entries_json(self) -> list[dict[str, Any]]:
        entries = []
        for entry in self.spec.models:
            total, illegal, reasons = self.illegal_reasons(entry)
            entries.append({"model": entry.name, "entry": entry.index, "tiers": list(entry.tiers),
                            "candidates": total, "illegal": illegal,
                            "illegal_reasons": [{"reason": reason, "count": count} for reason, count in reasons]})
        return entries

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.spec.source,
            "tiers": [tier.to_json() for tier in self.spec.tiers.values()],
            "slots": [slot.to_json() for slot in self.slots],
            "entries": self._entries_json(),
            "candidates_evaluated": self.candidates_evaluated,
            "candidates_legal": sum(1 for t in self.trials.values() if t.legal),
            "excluded_by_max_gpus": sum(self.excluded_by_max_gpus.values()),
            "same_deployment_as_priced": sum(self.same_as_priced.values()),
            "wall_s": round(self.wall_s, 3),
            "settings": self.settings,
            "ledgers": [str(path) for path in self.ledger_paths],
        }


def _staged(stage: str, reason: str) -> str:
    """``stage: reason``, once: a memory refusal already reads ``memory: ...``."""
    return reason if reason.startswith(f"{stage}:") or reason.startswith(f"{stage} (") else f"{stage}: {reason}"
