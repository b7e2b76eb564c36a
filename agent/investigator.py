"""The investigator: a DSPy ReAct agent with the tools of METHOD §6.

Tools: evaluate a configuration (one prediction -> metrics, signed score, SLO verdict,
or the illegality reason); read the history; read the incumbent; read the legal sets,
the architecture, the cluster and the objective; read the remaining budget; write and
read the scratchpad; ask a sub-question of the same LLM. Each tool is a typed method
whose docstring is what the model reads. Only ``evaluate_config`` spends budget, and it
goes through the guards and the predictor (:meth:`SearchSession.propose`): the agent
can waste trials but never price anything itself.

With ``--lm-json-schema`` (a small model under constrained decoding, :mod:`agent.menu`)
every field the model writes is bounded by the schema sent to the server: the tool
arguments admit only menu moves for ``evaluate_config`` (one lever of the incumbent to
a legal, unpriced value) and short text elsewhere; the closing best configuration is a
menu move too. Without it, such a model writes unbounded JSON until ``max_tokens``.

When the budget is spent or a stop rule fires, ``evaluate_config`` raises
:class:`agent.lm.StopAgent`, which ends the ReAct loop at once (a normal ending, not a
failure). The agent's closing ``best_config`` is evaluated like any proposal when it is
new, so a claim of "best" is always checked by the predictor.
"""

from __future__ import annotations

import json
from typing import Any

import dspy

from agent import briefing
from agent.guards import guard_proposal
from agent.lm import RESPONSE_SCHEMA_KEY, LmRuntime, StopAgent
from agent.menu import MAX_NOTE_CHARS, MAX_RATIONALE_CHARS, build_menu, changes_schema, text_schema
from levers.redact import redact
from agent.session import SearchSession
from agent.trial import Phase
from prompts import load_prompt

DEFAULT_MAX_STEPS = 30
MAX_SCRATCHPAD_NOTE_CHARS = 1000
MAX_FOLLOW_UPS = 10


class Investigate(dspy.Signature):
    """Improve on the incumbent with the tools (instructions: prompts/investigator.md)."""

    objective: str = dspy.InputField(desc="objective, direction, SLOs and workload")
    plan: str = dspy.InputField(desc="the planner's rationale, hypotheses and polish plan")
    incumbent: str = dspy.InputField(desc="the best trial so far (configuration relative to the baseline)")
    budget: str = dspy.InputField(desc="trials left")
    best_config: dict[str, Any] = dspy.OutputField(
        desc="levers of the best configuration found (changes from the baseline)")
    what_worked: str = dspy.OutputField(desc="one or two sentences")
    follow_ups: list[str] = dspy.OutputField(desc="short suggestions for a next search")


class InvestigatorTools:
    """The tools, bound to one search session."""

    def __init__(self, session: SearchSession, runtime: LmRuntime) -> None:
        self.session = session
        self.runtime = runtime

    def evaluate_config(self, changes: dict[str, Any] | None = None, **levers: Any) -> str:
        """Price one configuration: `changes` maps lever -> value (only the levers to change,
        applied to the incumbent). Returns the objective, SLO verdict and key metrics, or why
        it was rejected. Spends one trial."""
        if self.session.stop_reason():
            raise StopAgent(self.session.stop_reason())
        proposal = {**levers, **changes} if isinstance(changes, dict) else (changes if changes else levers)
        trial = self.session.propose(proposal, Phase.INVESTIGATOR)
        score = "" if trial.score is None else f" (signed score {trial.score:.6g})"
        return briefing.trial_line(trial, self.session.baseline) + score

    def read_history(self, last: int = 10) -> str:
        """The latest `last` trials (at most 40), one per line, configurations relative to the baseline."""
        return briefing.history(self.session, int(last) if str(last).isdigit() else 10)

    def read_incumbent(self) -> str:
        """The best trial so far (or the nearest SLO miss)."""
        return briefing.incumbent(self.session)

    def read_legal_sets(self) -> str:
        """Every lever with its legal values on this engine and what it does."""
        return briefing.legal_sets(self.session)

    def read_architecture(self) -> str:
        """The model's architecture record (layers, heads, experts, dtypes)."""
        return briefing.architecture(self.session)

    def read_cluster(self) -> str:
        """The cluster: GPUs, HBM per GPU, scale-up domain, engine."""
        return briefing.cluster(self.session)

    def read_objective(self) -> str:
        """The objective and its direction, the SLOs and the workload."""
        return briefing.objective(self.session)

    def read_budget(self) -> str:
        """How many trials are left."""
        return briefing.budget(self.session)

    def write_scratchpad(self, note: str) -> str:
        """Append a note (what you learned) to the scratchpad."""
        text = redact(str(note)) or ""
        self.session.notes.scratchpad.append(text[:MAX_SCRATCHPAD_NOTE_CHARS])
        return f"saved ({len(self.session.notes.scratchpad)} notes)"

    def read_scratchpad(self) -> str:
        """Every note written so far."""
        notes = self.session.notes.scratchpad
        return "\n".join(f"- {note}" for note in notes) if notes else "empty"

    def ask(self, question: str) -> str:
        """Ask a sub-question of the same language model (reasoning only, no prediction)."""
        context = briefing.objective(self.session) + "\n" + briefing.incumbent(self.session)
        answer, record = self.runtime.run(
            "subquestion", lambda: dspy.Predict("question, context -> answer")(
                question=str(question), context=context).answer)
        self.session.notes.calls.append(record)
        return str(answer) if answer is not None else f"no answer ({record['outcome']})"

    def all(self) -> list:
        return [self.evaluate_config, self.read_history, self.read_incumbent, self.read_legal_sets,
                self.read_architecture, self.read_cluster, self.read_objective, self.read_budget,
                self.write_scratchpad, self.read_scratchpad, self.ask]


def plan_text(plan: Any) -> str:
    if plan is None:
        return "no plan"
    return json.dumps({"rationale": plan.rationale, "hypotheses": plan.hypotheses,
                       "polish_plan": plan.polish_plan})


def _tool_args_schema(changes: dict[str, Any]) -> dict[str, Any]:
    """Arguments of any one tool: a menu move for evaluate_config, short text or nothing
    for the others (the tool name is already an enum)."""
    def args(properties: dict[str, Any]) -> dict[str, Any]:
        return {"type": "object", "properties": properties, "required": list(properties),
                "additionalProperties": False}
    return {"anyOf": [args({"changes": changes}), args({"note": text_schema(MAX_RATIONALE_CHARS)}),
                      args({"question": text_schema(MAX_RATIONALE_CHARS)}),
                      args({"last": {"type": "integer", "minimum": 1, "maximum": 40}}), args({})]}


def constrain(agent: dspy.ReAct, session: SearchSession) -> dspy.ReAct:
    """Bound every field of a ReAct agent by a schema (module docstring)."""
    center = session.incumbent_config() or session.baseline
    menu = build_menu(session.context, center, session.has_seen) if center is not None else {}
    if not menu:
        return agent
    changes = changes_schema(menu)
    short = text_schema(MAX_RATIONALE_CHARS)
    agent.react.signature = agent.react.signature.with_updated_fields(
        "next_thought", **{RESPONSE_SCHEMA_KEY: short}).with_updated_fields(
        "next_tool_args", **{RESPONSE_SCHEMA_KEY: _tool_args_schema(changes)})
    fields = {"reasoning": short, "best_config": changes, "what_worked": short,
              "follow_ups": {"type": "array", "items": text_schema(MAX_NOTE_CHARS), "maxItems": 2}}
    signature = agent.extract.predict.signature
    for name, schema in fields.items():
        if name in signature.output_fields:
            signature = signature.with_updated_fields(name, **{RESPONSE_SCHEMA_KEY: schema})
    agent.extract.predict.signature = signature
    return agent


def run_investigator(session: SearchSession, runtime: LmRuntime, plan: Any,
                     max_steps: int = DEFAULT_MAX_STEPS) -> dict[str, Any]:
    """One ReAct episode; returns its call record (outcome ok, stopped or a failure)."""
    tools = InvestigatorTools(session, runtime)
    agent = dspy.ReAct(Investigate.with_instructions(load_prompt("investigator")), tools=tools.all(),
                       max_iters=max(1, min(max_steps, 2 * session.remaining + 4)))
    if runtime.settings is not None and runtime.settings.json_schema:
        agent = constrain(agent, session)
    inputs = {"objective": briefing.objective(session), "plan": plan_text(plan),
              "incumbent": briefing.incumbent(session), "budget": briefing.budget(session)}
    result, record = runtime.run("investigator", lambda: agent(**inputs))
    session.notes.calls.append(record)
    if result is not None:
        _take_report(session, result)
    return record


def _take_report(session: SearchSession, result: Any) -> None:
    worked = redact(str(getattr(result, "what_worked", "") or ""))
    if worked:
        session.notes.what_worked.append(worked[:MAX_SCRATCHPAD_NOTE_CHARS])
    follow_ups = getattr(result, "follow_ups", None) or []
    session.notes.follow_ups.extend(redact(str(f))[:MAX_SCRATCHPAD_NOTE_CHARS]
                                    for f in list(follow_ups)[:MAX_FOLLOW_UPS])
    claimed = getattr(result, "best_config", None)
    if not claimed or session.stop_reason():
        return
    guarded = guard_proposal(session.context, session.baseline, claimed)
    if guarded.accepted and session.has_seen(guarded.config):
        return  # already priced: nothing to check
    session.propose(claimed, Phase.INVESTIGATOR, base=session.baseline)
