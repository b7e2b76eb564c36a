"""The state of one search: trials, budget, leader, stop rules, LLM notes (METHOD §6).

Every phase submits candidates here; the session prices them through
:func:`agent.scoring.evaluate` (after :mod:`agent.guards` for untrusted proposals),
numbers them, keeps the leader up to date and tells its listeners (the ledger store
writes after every trial; the CLI advances its progress bar). A configuration already
priced is not predicted again: the re-proposal is recorded as a duplicate of the first
trial and still spends budget (an LLM that repeats itself wastes trials, never more).

Stop rules: the trial budget is spent, or the leader has not changed for 70% of the
budget (:data:`STALE_FRACTION`).

When the search bounds its DES trials (:mod:`agent.fidelity`), the answer (best, top,
nearest misses) is chosen among the trials priced at full fidelity: search trials whose
bounded length was the default anyway, and confirm trials (the best re-priced at full
fidelity). Once a DES search has confirm trials (its finalists re-priced over several
replications, with 90% intervals), the answer is chosen among those alone, and the
trials whose objective interval overlaps the best's are its ties. Confirm trials spend
no budget and never lead the search.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from agent.fidelity import bounds, confirms, is_full_fidelity
from agent.guards import guard_proposal
from agent.ranking import best_trial, is_better, nearest_misses, ties_with, top_trials
from agent.scoring import duplicate, evaluate, rejected, with_index
from agent.sustainable import METRIC as SUSTAINABLE_METRIC
from agent.trial import Phase, SearchContext, Stage, Trial
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
        self.leader_since = 0  # search trials recorded when the leader last changed
        self.num_search_trials = 0  # every trial but the confirm step's (they spend the budget)
        self.confirmed: dict[Configuration, Trial] = {}  # configuration -> its confirm trial
        self.bounded = bounds(context)  # DES trials bounded: the answer needs full fidelity
        self.confirming = confirms(context)  # a DES search: the answer comes from replicated finalists
        self.full_fidelity: list[Trial] = []  # the answer pool of a bounded search
        self.full_leader: Trial | None = None
        self.confirm_pool: list[Trial] = []  # the answer pool once finalists are replicated
        self.confirm_leader: Trial | None = None
        self._seen: dict[Configuration, Trial] = {}

    # -- budget and stop rules ---------------------------------------------------------
    @property
    def remaining(self) -> int:
        return max(0, self.budget - self.num_search_trials)

    @property
    def stale_after(self) -> int:
        return max(1, math.ceil(STALE_FRACTION * self.budget))

    def stop_reason(self) -> str | None:
        """Why the search must stop now, or None."""
        if self.num_search_trials >= self.budget:
            return f"budget: all {self.budget} trials spent"
        unchanged = self.num_search_trials - self.leader_since
        if unchanged >= self.stale_after:
            return (f"stale: the best trial has not changed for {unchanged} trials "
                    f"({STALE_FRACTION:.0%} of the budget of {self.budget})")
        return None

    # -- submitting candidates ---------------------------------------------------------
    def submit(self, config: Configuration, phase: Phase,
               proposed: dict[str, Any] | None = None) -> Trial:
        """Price a full configuration (a duplicate reuses the earlier result)."""
        earlier = self._seen.get(self.key(config))
        if earlier is not None:
            return self.record(duplicate(earlier, phase, proposed))
        return self.record(evaluate(self.context, config, phase=phase, proposed=proposed))

    def key(self, config: Configuration) -> Configuration:
        """What makes two configurations the same trial: the whole configuration, but for
        the max-sustainable-concurrency objective its concurrency, which the evaluation
        searches itself (`agent.sustainable`): proposals at 1 and at 4 clients came back
        as the same configuration at 256, each recorded and confirmed as a new trial."""
        if self.context.objective.metric == SUSTAINABLE_METRIC:
            return replace(config, concurrency=1)
        return config

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
        if self.bounded and is_full_fidelity(self.context, trial):
            self.full_fidelity.append(trial)
            if is_better(trial, self.full_leader):
                self.full_leader = trial
        if trial.phase is Phase.CONFIRM:
            self.confirmed.setdefault(trial.config, trial)
            self.confirm_pool.append(trial)
            if is_better(trial, self.confirm_leader):
                self.confirm_leader = trial
            return
        self.num_search_trials += 1
        if trial.config is not None and trial.duplicate_of is None:
            self._seen.setdefault(self.key(trial.config), trial)
        if is_better(trial, self.leader):
            self.leader = trial
            self.leader_since = self.num_search_trials

    # -- reading -----------------------------------------------------------------------
    def has_seen(self, config: Configuration) -> bool:
        return self.key(config) in self._seen

    def incumbent_config(self) -> Configuration | None:
        """The leader's configuration (best so far, or nearest miss)."""
        return self.leader.config if self.leader else None

    def answer_pool(self) -> list[Trial]:
        """Where the answer is chosen: the replicated finalists once there are any, else the
        full-fidelity trials of a bounded search, else all."""
        if self.confirm_pool:
            return self.confirm_pool
        return self.full_fidelity if self.bounded else self.trials

    def answer_leader(self) -> Trial | None:
        """The best of the answer pool, or its nearest miss (the ledger's best/misses)."""
        if self.confirm_pool:
            return self.confirm_leader
        return self.full_leader if self.bounded else self.leader

    def is_confirmed(self, trial: Trial) -> bool:
        """Re-priced by the confirm step (a search without one: always)."""
        return trial.config in self.confirmed or not self.confirming

    def best(self) -> Trial | None:
        return best_trial(self.answer_pool())

    def ties(self) -> list[Trial]:
        """Answer-pool trials tied with the best (objective intervals overlap), best first."""
        best = self.best()
        if best is None:
            return []
        tied = ties_with(best, self.answer_pool(), self.context.objective.metric)
        return top_trials(tied, len(tied))

    def top(self, count: int) -> list[Trial]:
        """The best SLO-meeting trials: full-fidelity ones first, then the bounded others."""
        return self._full_first(top_trials, count)

    def nearest_misses(self, count: int) -> list[Trial]:
        """Trials missing an SLO, nearest first: full-fidelity ones first, then the others."""
        return self._full_first(nearest_misses, count)

    def _full_first(self, rank: Callable[[list[Trial], int], list[Trial]], count: int) -> list[Trial]:
        pool = self.answer_pool()
        if pool is self.trials:
            return rank(self.trials, count)
        first = rank(pool, count)
        shown = {t.config for t in pool}
        rest = [t for t in self.trials if t.phase is not Phase.CONFIRM and t.config not in shown]
        return first + rank(rest, max(0, count - len(first)))

    def count(self, phase: Phase) -> int:
        return sum(1 for trial in self.trials if trial.phase is phase)
