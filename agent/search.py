"""The two-phase search loop (METHOD §6).

Phase 1, seeds: the deterministic seed planner fills its share of the budget (all of it
without an LM). Phase 2, LLM: cycles of one planner call (its 5–8 partial
configurations evaluated over the baseline) and one investigator episode, while budget
remains. An LM that fails — unreachable, timing out after DSPy's retries, or replying
with something that does not parse — ends phase 2 with the reason recorded; it never
loses the search. Whatever budget is left then goes back to the seed planner, so the
search always ends on a stop rule (budget, staleness) or when the seeds run out.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Iterator

from agent.investigator import DEFAULT_MAX_STEPS, run_investigator
from agent.lm import LmRuntime, Outcome
from agent.planner import execute_plan, run_planner
from agent.ranking import nearest_misses, top_trials
from agent.scoring import Phase, Trial
from agent.seed_planner import Seed, SeedPlanner
from agent.session import SearchSession

DEFAULT_BUDGET = 300
SEED_SHARE_WITH_LLM = 0.4   # share of the budget the seeds take before the LLM phase
DEFAULT_MAX_CYCLES = 3      # planner + investigator rounds
NO_LM_NOTE = "no LM configured (set --lm or INFERASIM_LM): seed phase only"
NO_LLM_NOTE = "--no-llm: seed phase only"
SEEDS_EXHAUSTED = "exhausted: every one-lever move around the best configuration has been tried"


@dataclass(frozen=True, slots=True)
class SearchSettings:
    budget: int = DEFAULT_BUDGET
    no_llm: bool = False
    seed_share: float = SEED_SHARE_WITH_LLM
    max_cycles: int = DEFAULT_MAX_CYCLES
    max_steps: int = DEFAULT_MAX_STEPS


@dataclass(frozen=True)
class SearchOutcome:
    best: Trial | None
    top: list[Trial]
    nearest_misses: list[Trial]
    stop_reason: str
    lm_note: str | None
    wall_s: float


def seed_target(settings: SearchSettings, has_lm: bool) -> int:
    """How many seed trials phase 1 runs."""
    if not has_lm:
        return settings.budget
    return max(1, math.ceil(settings.budget * settings.seed_share))


def run_search(session: SearchSession, settings: SearchSettings, runtime: LmRuntime | None,
               top: int = 10) -> SearchOutcome:
    """Run (or continue) a search on ``session`` until a stop rule or the seeds run out."""
    started = time.perf_counter()
    planner = SeedPlanner(session.context)
    seeds = planner.seeds(session.baseline, session.incumbent_config, session.has_seen)
    use_lm = runtime is not None and not settings.no_llm
    stop = _seed_phase(session, seeds, seed_target(settings, use_lm))
    lm_note = NO_LLM_NOTE if settings.no_llm else (None if runtime else NO_LM_NOTE)
    if stop is None and use_lm:
        lm_note = run_llm_phase(session, runtime, settings)
        session.notes.phase_end_reason = lm_note
    if stop is None:
        stop = _seed_phase(session, seeds, settings.budget)
    return SearchOutcome(
        best=session.best(), top=top_trials(session.trials, top),
        nearest_misses=nearest_misses(session.trials, top),
        stop_reason=stop or session.stop_reason() or SEEDS_EXHAUSTED, lm_note=lm_note,
        wall_s=time.perf_counter() - started)


def _seed_phase(session: SearchSession, seeds: Iterator[Seed], target: int) -> str | None:
    """Submit seeds until ``target`` seed trials exist; the stop reason, if one fired."""
    while session.count(Phase.SEED) < target:
        reason = session.stop_reason()
        if reason:
            return reason
        seed = next(seeds, None)
        if seed is None:
            return SEEDS_EXHAUSTED
        session.submit(seed.config, Phase.SEED, seed.proposed)
    return session.stop_reason()


def run_llm_phase(session: SearchSession, runtime: LmRuntime, settings: SearchSettings) -> str:
    """Planner/investigator cycles; returns why the phase ended (for the ledger)."""
    for cycle in range(settings.max_cycles):
        if session.stop_reason():
            return f"search stopped during the LLM phase ({session.stop_reason()})"
        before = len(session.trials)
        plan, record = run_planner(session, runtime)
        if plan is None:
            return f"planner call failed ({record['outcome']}): {record['message']}; continuing with seeds"
        execute_plan(session, plan)
        if session.stop_reason():
            return f"search stopped during the LLM phase ({session.stop_reason()})"
        record = run_investigator(session, runtime, plan, settings.max_steps)
        if record["outcome"] not in (Outcome.OK, Outcome.STOPPED):
            return f"investigator call failed ({record['outcome']}): {record['message']}; continuing with seeds"
        if len(session.trials) == before:
            return f"cycle {cycle + 1}: the LLM proposed nothing new; continuing with seeds"
    return f"{settings.max_cycles} planner/investigator cycles done"
