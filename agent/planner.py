"""The planner: one typed DSPy call that designs the LLM phase (METHOD §6 "Planner").

It reads the architecture, cluster, legal sets, objective and direction, SLOs,
workload, baseline, a summary of the latest 40 trials and the operator's guidance, and
returns a :class:`Plan`: a short rationale, at most 5 testable hypotheses, 5–8 partial
configurations ordered most to least promising, and a polish plan. The plan is only
advice: each partial configuration is applied to the baseline and goes through the
guards and the predictor like any other proposal (:meth:`SearchSession.propose`).
A reply that does not fit the schema raises ``AdapterParseError``, which
:meth:`LmRuntime.run` records; the caller then falls back to seeds.
"""

from __future__ import annotations

from typing import Any

import dspy
from pydantic import BaseModel, ConfigDict, Field

from agent import briefing
from agent.lm import LmRuntime
from levers.redact import redact
from agent.session import SearchSession
from agent.trial import Phase
from prompts import load_prompt

MAX_HYPOTHESES = 5
MIN_CONFIGS, MAX_CONFIGS = 5, 8
MAX_NOTE_CHARS = 2000


class Plan(BaseModel):
    """The planner's output (a boundary schema: LLM output is untrusted)."""

    model_config = ConfigDict(extra="forbid")

    rationale: str = Field(description="what limits the baseline and why the plan should help")
    hypotheses: list[str] = Field(max_length=MAX_HYPOTHESES, description="at most 5 testable statements")
    configs: list[dict[str, Any]] = Field(
        min_length=MIN_CONFIGS, max_length=MAX_CONFIGS,
        description="5-8 partial configurations (lever -> value, only what changes from the baseline), best first")
    polish_plan: str = Field(description="what to try after these, and what to do if they fail")


class PlanSearch(dspy.Signature):
    """Design the search (instructions: prompts/planner.md)."""

    architecture: str = dspy.InputField(desc="model architecture record (JSON)")
    cluster: str = dspy.InputField(desc="GPUs, HBM, scale-up domain, engine (JSON)")
    legal_sets: str = dspy.InputField(desc="every lever: legal values on this engine | meaning")
    objective: str = dspy.InputField(desc="objective, direction, SLOs and workload")
    baseline: str = dspy.InputField(desc="the baseline configuration (levers that differ from defaults)")
    history: str = dspy.InputField(desc="the latest trials, one per line (configurations relative to the baseline)")
    guidance: str = dspy.InputField(desc="operator guidance (may be 'none')")
    plan: Plan = dspy.OutputField()


def planner_signature() -> type[dspy.Signature]:
    return PlanSearch.with_instructions(load_prompt("planner"))


def plan_inputs(session: SearchSession) -> dict[str, str]:
    return {
        "architecture": briefing.architecture(session), "cluster": briefing.cluster(session),
        "legal_sets": briefing.legal_sets(session), "objective": briefing.objective(session),
        "baseline": briefing.describe(session.baseline, None), "history": briefing.history(session),
        "guidance": session.context.guidance or "none",
    }


def run_planner(session: SearchSession, runtime: LmRuntime) -> tuple[Plan | None, dict[str, Any]]:
    """Ask for a plan; record the call and the plan's notes in the session."""
    predictor = dspy.Predict(planner_signature())
    inputs = plan_inputs(session)
    result, record = runtime.run("planner", lambda: predictor(**inputs).plan)
    session.notes.calls.append(record)
    if result is None:
        return None, record
    plan = result if isinstance(result, Plan) else Plan.model_validate(result)
    session.notes.rationale = _note(plan.rationale)
    session.notes.hypotheses = [_note(h) for h in plan.hypotheses]
    session.notes.polish_plan = _note(plan.polish_plan)
    return plan, record


def execute_plan(session: SearchSession, plan: Plan) -> int:
    """Evaluate the plan's partial configurations over the baseline, in order."""
    evaluated = 0
    for partial in plan.configs:
        if session.stop_reason():
            break
        session.propose(partial, Phase.PLANNER, base=session.baseline)
        evaluated += 1
    return evaluated


def _note(text: str | None) -> str | None:
    if text is None:
        return None
    cleaned = redact(str(text)) or ""
    return cleaned if len(cleaned) <= MAX_NOTE_CHARS else cleaned[:MAX_NOTE_CHARS] + "..."
