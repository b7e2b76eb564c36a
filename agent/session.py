"""The state of one search: trials, budget, leader, stop rules, LLM notes (METHOD §6).

Every phase submits candidates here; the session prices them through
:func:`agent.scoring.evaluate` (after :mod:`agent.guards` for untrusted proposals),
numbers them, keeps the leader up to date and tells its listeners (the ledger store
writes after every trial; the CLI advances its progress bar). A configuration already
priced is not predicted again: the re-proposal is recorded as a duplicate of the first
trial and still spends budget (an LLM that repeats itself wastes trials, never more).

Stop rules: the trial budget is spent, or the leader has not changed for 70% of the
budget (:data:`STALE_FRACTION`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

from agent.guards import guard_proposal
from agent.ranking import best_trial, is_better
from agent.scoring import Phase, SearchContext, Stage, Trial, duplicate, evaluate, rejected, with_index
from levers.configuration import Configuration

STALE_FRACTION = 0.7

Listener = Callable[["SearchSession", Trial], None]


@dataclass
class LlmNotes:
    """What the LLM phase said and did (the ledger's ``llm`` block)."""

    rationale: str | None = None
    hypotheses: list[str] = field(default_factory=list)
    polish_plan: str | None = None
    scratchpad: list[str] = field(default_factory=list)
    what_worked: list[str] = field(default_factory=list)
    follow_ups: list[str] = field(default_factory=list)
    calls: list[dict[str, Any]] = field(default_factory=list)
    phase_end_reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"rationale": self.rationale, "hypotheses": list(self.hypotheses),
                "polish_plan": self.polish_plan, "scratchpad": list(self.scratchpad),
                "what_worked": list(self.what_worked), "follow_ups": list(self.follow_ups),
                "calls": list(self.calls), "phase_end_reason": self.phase_end_reason}

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> "LlmNotes":
        return cls(**(data or {}))


class SearchSession:
    """Mutable search state; the only place trials are created and numbered."""

    def __init__(self, context: SearchContext, budget: int, baseline: Configuration | None = None,
                 listeners: list[Listener] | None = None) -> None:
        self.context = context
        self.budget = budget
        self.baseline = baseline
        self.trials: list[Trial] = []
        self.notes = LlmNotes()
        self.listeners: list[Listener] = list(listeners or [])
        self.leader: Trial | None = None
        self.leader_since = 0  # trials recorded when the leader last changed
        self._seen: dict[Configuration, Trial] = {}

    # -- budget and stop rules ---------------------------------------------------------
    @property
    def remaining(self) -> int:
        return max(0, self.budget - len(self.trials))

    @property
    def stale_after(self) -> int:
        return max(1, math.ceil(STALE_FRACTION * self.budget))

    def stop_reason(self) -> str | None:
        """Why the search must stop now, or None."""
        if len(self.trials) >= self.budget:
            return f"budget: all {self.budget} trials spent"
        unchanged = len(self.trials) - self.leader_since
        if unchanged >= self.stale_after:
            return (f"stale: the best trial has not changed for {unchanged} trials "
                    f"({STALE_FRACTION:.0%} of the budget of {self.budget})")
        return None

    # -- submitting candidates ---------------------------------------------------------
    def submit(self, config: Configuration, phase: Phase,
               proposed: dict[str, Any] | None = None) -> Trial:
        """Price a full configuration (a duplicate reuses the earlier result)."""
        earlier = self._seen.get(config)
        if earlier is not None:
            return self.record(duplicate(earlier, phase, proposed))
        return self.record(evaluate(self.context, config, phase=phase, proposed=proposed))

    def propose(self, proposal: Any, phase: Phase, base: Configuration | None = None) -> Trial:
        """Guard an untrusted partial configuration, apply it to ``base`` and price it."""
        base = base or self.incumbent_config() or self.baseline or Configuration()
        guarded = guard_proposal(self.context, base, proposal)
        if not guarded.accepted:
            raw = proposal if isinstance(proposal, dict) else {"text": str(proposal)}
            return self.record(rejected(phase, None, raw, guarded.reasons, Stage.GUARD))
        return self.submit(guarded.config, phase, proposal if isinstance(proposal, dict) else guarded.partial)

    def record(self, trial: Trial) -> Trial:
        """Number a trial, update the leader and tell the listeners."""
        trial = with_index(trial, len(self.trials))
        self._add(trial)
        for listener in self.listeners:
            listener(self, trial)
        return trial

    def restore(self, trials: list[Trial]) -> None:
        """Reload the trials of a resumed ledger (already numbered; no listeners)."""
        for trial in trials:
            self._add(trial)

    def _add(self, trial: Trial) -> None:
        self.trials.append(trial)
        if trial.config is not None and trial.duplicate_of is None:
            self._seen.setdefault(trial.config, trial)
        if is_better(trial, self.leader):
            self.leader = trial
            self.leader_since = len(self.trials)

    # -- reading -----------------------------------------------------------------------
    def has_seen(self, config: Configuration) -> bool:
        return config in self._seen

    def incumbent_config(self) -> Configuration | None:
        """The leader's configuration (best so far, or nearest miss)."""
        return self.leader.config if self.leader else None

    def best(self) -> Trial | None:
        return best_trial(self.trials)

    def count(self, phase: Phase) -> int:
        return sum(1 for trial in self.trials if trial.phase is phase)
