"""The planner: one typed DSPy call that designs the LLM phase (METHOD §6 "Planner").

It reads the architecture, cluster, legal sets, objective and direction, SLOs,
workload, baseline, a summary of the latest 40 trials and the operator's guidance, and
returns a :class:`Plan`: a short rationale, at most 5 testable hypotheses, 5–8 partial
configurations ordered most to least promising, and a polish plan. The plan is only
advice: each partial configuration is applied to the baseline and goes through the
guards and the predictor like any other proposal (:meth:`SearchSession.propose`).
A reply that does not fit the schema raises ``AdapterParseError``, which
:meth:`LmRuntime.run` records; the caller then falls back to seeds.

With ``--lm-json-schema`` (a small local model under constrained decoding) the planner
is asked the simpler question of :mod:`agent.menu`: pick 5 legal one-lever moves from
the incumbent (instructions: ``prompts/planner_menu.md``). Its answer becomes the same
:class:`Plan`, each move a partial configuration over the baseline.
"""

from __future__ import annotations

from typing import Any

import dspy
from pydantic import BaseModel, ConfigDict, Field

from agent import briefing
from agent.lm import RESPONSE_SCHEMA_KEY, LmRuntime
from agent.menu import as_partials, build_menu, menu_plan_model, menu_text
from levers.redact import redact
from agent.session import SearchSession
from agent.trial import Phase
from levers.configuration import Configuration
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


class PickMoves(dspy.Signature):
    """Pick moves from a menu (instructions: prompts/planner_menu.md)."""

    objective: str = dspy.InputField(desc="objective, direction, SLOs and workload")
    incumbent: str = dspy.InputField(desc="the best trial so far")
    menu: str = dspy.InputField(desc="lever: the values a move may give it | what the lever does")
    plan: dict[str, Any] = dspy.OutputField(
        desc='{"rationale": one sentence, "hypotheses": [at most 2], "moves": [{"lever": name, "value": v}, '
             '5 of them, best first], "polish_plan": one sentence}')


def planner_signature() -> type[dspy.Signature]:
    return PlanSearch.with_instructions(load_prompt("planner"))


def uses_menu(runtime: LmRuntime) -> bool:
    """Constrained decoding (``--lm-json-schema``): the menu planner (module docstring)."""
    return bool(runtime.settings and runtime.settings.json_schema)


def plan_inputs(session: SearchSession) -> dict[str, str]:
    return {
        "architecture": briefing.architecture(session), "cluster": briefing.cluster(session),
        "legal_sets": briefing.legal_sets(session), "objective": briefing.objective(session),
        "baseline": briefing.describe(session.baseline, None), "history": briefing.history(session),
        "guidance": session.context.guidance or "none",
    }


def _menu_plan(session: SearchSession, runtime: LmRuntime) -> tuple[Plan | None, dict[str, Any]]:
    center = session.incumbent_config() or session.baseline or Configuration()

    def ask() -> Any:
        menu = build_menu(session.context, center, session.has_seen)
        if not menu:
            raise LookupError("the menu is empty: every legal one-lever move from the incumbent is priced")
        model = menu_plan_model(menu)
        signature = PickMoves.with_instructions(load_prompt("planner_menu")).with_updated_fields(
            "plan", **{RESPONSE_SCHEMA_KEY: model.model_json_schema()})
        answer = dspy.Predict(signature)(objective=briefing.objective(session), incumbent=briefing.incumbent(session),
                                         menu=menu_text(menu)).plan
        return model.model_validate(answer)

    result, record = runtime.run("planner", ask)
    if result is None:
        return None, record
    plan = Plan(rationale=result.rationale, hypotheses=result.hypotheses, polish_plan=result.polish_plan,
                configs=as_partials(result.moves, center, session.baseline))
    return plan, record


def _free_plan(session: SearchSession, runtime: LmRuntime) -> tuple[Plan | None, dict[str, Any]]:
    predictor = dspy.Predict(planner_signature())
    inputs = plan_inputs(session)
    result, record = runtime.run("planner", lambda: predictor(**inputs).plan)
    if result is None:
        return None, record
    return (result if isinstance(result, Plan) else Plan.model_validate(result)), record


def run_planner(session: SearchSession, runtime: LmRuntime) -> tuple[Plan | None, dict[str, Any]]:
    """Ask for a plan; record the call and the plan's notes in the session."""
    plan, record = (_menu_plan if uses_menu(runtime) else _free_plan)(session, runtime)
    session.notes.calls.append(record)
    if plan is None:
        return None, record
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
