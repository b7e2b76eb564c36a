"""The two-phase search loop (METHOD §6).

Phase 1, seeds: the deterministic seed planner fills its share of the budget (all of it
without an LM). Phase 2, LLM: cycles of one planner call (its 5–8 partial
configurations evaluated over the baseline) and one investigator episode, while budget
remains. An LM that fails — unreachable, timing out after DSPy's retries, or replying
with something that does not parse — ends phase 2 with the reason recorded; it never
loses the search. Whatever budget is left then goes back to the seed planner, so the
search always ends on a stop rule (budget, staleness) or when the seeds run out.

Seed rounds are priced in batches (in parallel with ``--workers``, :mod:`agent.pricing`)
and recorded in order, checking the stop rules before each trial as a sequential search
does. A DES search ends with a confirm step (:mod:`agent.fidelity`): its best are re-priced
at full fidelity over several replications and the answer is chosen among them.

A resumed search runs this same loop over a :class:`agent.resume.Replay` of its ledger
(its pricer answers from the ledger); at the LLM phase the recorded LLM trials are
restored, and the phase runs live only if the ledger does not record its end.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace

from agent.fidelity import CONFIRM_MAX, CONFIRM_TOP, REPLICATIONS, confirms
from agent.investigator import DEFAULT_MAX_STEPS, run_investigator
from agent.lm import LmRuntime, Outcome
from agent.planner import execute_plan, run_planner
from agent.pricing import Job, Pricer, SeedQueue
from agent.resume import Replay
from agent.ranking import meets_slos, nearest_misses, top_trials
from agent.scoring import confirmed
from agent.seed_planner import SeedPlanner
from agent.session import SearchSession
from agent.trial import Phase, Trial

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
    ties: list[Trial]           # answer-pool trials whose objective interval overlaps the best's
    stop_reason: str
    lm_note: str | None
    wall_s: float


def seed_target(settings: SearchSettings, has_lm: bool) -> int:
    """How many seed trials phase 1 runs."""
    if not has_lm:
        return settings.budget
    return max(1, math.ceil(settings.budget * settings.seed_share))


def run_search(session: SearchSession, settings: SearchSettings, runtime: LmRuntime | None,
               top: int = 10, pricer: Pricer | None = None, replay: Replay | None = None) -> SearchOutcome:
    """Run (or continue) a search on ``session`` until a stop rule or the seeds run out,
    then confirm its best (replicated, at full fidelity) when it ran the DES."""
    started = time.perf_counter()
    pricer = pricer or Pricer(session.context)
    planner = SeedPlanner(session.context)
    seeds = SeedQueue(planner.rounds(session.baseline, session.incumbent_config, session.has_seen),
                      session.has_seen, session.key)
    use_lm = runtime is not None and not settings.no_llm
    had_llm_phase = replay is not None and replay.had_llm_phase
    stop = _seed_phase(session, seeds, seed_target(settings, use_lm or had_llm_phase), pricer)
    lm_note = NO_LLM_NOTE if settings.no_llm else (None if runtime else NO_LM_NOTE)
    if stop is None and replay is not None:
        replay.restore_llm_phase(session)
    if stop is None and replay is not None and replay.llm_phase_end is not None:
        lm_note = replay.llm_phase_end     # the ledger records how its LLM phase ended
    elif stop is None and use_lm:
        if replay is not None and replay.planner_calls:
            settings = replace(settings, max_cycles=max(0, settings.max_cycles - replay.planner_calls))
        lm_note = run_llm_phase(session, runtime, settings)
        session.notes.phase_end_reason = lm_note
    if stop is None:
        stop = _seed_phase(session, seeds, settings.budget, pricer)
    if confirms(session.context):
        run_confirm(session, pricer)
    return SearchOutcome(
        best=session.best(), top=session.top(top), nearest_misses=session.nearest_misses(top), ties=session.ties(),
        stop_reason=stop or session.stop_reason() or SEEDS_EXHAUSTED, lm_note=lm_note,
        wall_s=time.perf_counter() - started)


def _seed_phase(session: SearchSession, seeds: SeedQueue, target: int, pricer: Pricer) -> str | None:
    """Submit seeds until ``target`` seed trials exist; the stop reason, if one fired."""
    while session.count(Phase.SEED) < target:
        reason = session.stop_reason()
        if reason:
            return reason
        batch = seeds.take(min(target - session.count(Phase.SEED), session.remaining))
        if not batch:
            return SEEDS_EXHAUSTED
        trials = pricer.price([Job(seed.config, Phase.SEED, seed.proposed) for seed in batch])
        try:
            for trial in trials:
                reason = session.stop_reason()
                if reason:
                    return reason
                session.record(trial)
        finally:
            trials.close()
    return session.stop_reason()


def confirm_candidates(session: SearchSession) -> list[Trial]:
    """Search trials to confirm, best first: SLO-meeting, then nearest misses."""
    search = [t for t in session.trials if t.phase is not Phase.CONFIRM]
    meeting = top_trials(search, CONFIRM_MAX)
    return meeting + nearest_misses(search, CONFIRM_MAX - len(meeting))


def run_confirm(session: SearchSession, pricer: Pricer) -> None:
    """Re-price the :data:`CONFIRM_TOP` best search trials at full DES fidelity over
    :data:`REPLICATIONS` workload draws; while no confirm trial meets the SLOs, go on down
    the ranking, up to :data:`CONFIRM_MAX` candidates. Trials confirmed before (a resumed
    search) are not priced again."""
    candidates = confirm_candidates(session)
    considered = 0
    while considered < len(candidates):
        if considered and any(meets_slos(t) for t in session.answer_pool()):
            return
        size = CONFIRM_TOP if considered == 0 else CONFIRM_MAX - considered
        batch = [t for t in candidates[considered:considered + size] if not session.is_confirmed(t)]
        considered += size
        jobs = [Job(t.config, Phase.CONFIRM, t.proposed, full_fidelity=True, replications=REPLICATIONS)
                for t in batch]
        trials = pricer.price(jobs)
        try:
            for trial, repriced in zip(batch, trials):
                session.record(confirmed(trial, repriced))
        finally:
            trials.close()


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
