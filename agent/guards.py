"""Guards: the LLM is untrusted input (PRODUCT.md §6, METHOD §6 "Guards").

A proposal (a partial configuration from the planner or the investigator) is validated
like user input before anything is priced: an unknown lever, a value outside the
lever's legal set on this engine, or an unvalidated precision is rejected with its
reason, and the ledger records it. What survives becomes a full :class:`Configuration`
(the proposal's levers over a base) and then faces the same structural check, memory
cap and prediction as a seed (:func:`agent.scoring.evaluate`).

When the operator lists validated precisions (``--precisions fp8,fp4``), only those
weight and expert precisions are offered (:func:`allowed_values`) and accepted
(:func:`config_guard_reasons`), including a lever left unset whose checkpoint dtype is
not on the list. No lever among the 36 sets a sparse-attention width, so a checkpoint's
trained width cannot be changed by a proposal in the first place.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping

from agent.trial import SearchContext
from levers.catalog import DTYPES, LEVERS_BY_NAME, get_lever
from levers.configuration import Configuration, format_value, parse_config_text
from levers.errors import InputError, accepted_list

PRECISION_LEVERS = ("weight_dtype", "expert_dtype")
MAX_PROPOSAL_TEXT = 2000  # longer proposal text is truncated in reasons


@dataclass(frozen=True, slots=True)
class GuardResult:
    """A validated proposal (``config`` set, ``reasons`` empty) or why it was refused."""

    config: Configuration | None
    partial: dict[str, Any] | None
    reasons: tuple[str, ...] = ()

    @property
    def accepted(self) -> bool:
        return self.config is not None and not self.reasons


def parse_precisions(text: str | None) -> tuple[str, ...] | None:
    """``--precisions fp8,fp4`` -> ("fp8", "fp4"); None when not given."""
    if text is None or not text.strip():
        return None
    items = [item.strip().lower() for item in text.replace("+", ",").split(",") if item.strip()]
    for item in items:
        if item not in DTYPES:
            raise InputError("--precisions", f"unknown precision '{item}'", accepted_list(DTYPES))
    return tuple(dict.fromkeys(items))


def effective_dtype(context: "SearchContext", config: Configuration, lever: str) -> str | None:
    """The precision a lever resolves to: its value, else the checkpoint's (None: no experts)."""
    value = getattr(config, lever)
    if value is not None:
        return value
    card = context.target.card
    if lever == "expert_dtype":
        return str(card.native_dtypes.expert) if card.is_moe else None
    return str(card.native_dtypes.weight)


def config_guard_reasons(context: "SearchContext", config: Configuration) -> list[str]:
    """Operator guards on a full configuration (validated precisions)."""
    if context.precisions is None:
        return []
    reasons = []
    for lever in PRECISION_LEVERS:
        dtype = effective_dtype(context, config, lever)
        if dtype is not None and dtype not in context.precisions:
            source = "" if getattr(config, lever) is not None else " (checkpoint dtype)"
            reasons.append(f"{lever}={dtype}{source} is not a validated precision "
                           f"(--precisions {','.join(context.precisions)})")
    return reasons


def allowed_values(context: "SearchContext", lever_name: str) -> tuple[Any, ...]:
    """The legal set of a discrete lever on the search's engine, minus unvalidated precisions."""
    lever = LEVERS_BY_NAME[lever_name]
    values = lever.legal_values(context.target.engine)
    if lever_name in PRECISION_LEVERS and context.precisions is not None:
        values = tuple(v for v in values if v in context.precisions)
    return values


def guard_proposal(context: "SearchContext", base: Configuration, proposal: Any) -> GuardResult:
    """Validate an untrusted partial configuration and apply it to ``base``."""
    items, problem = _as_mapping(proposal)
    if problem:
        return GuardResult(None, None, (problem,))
    partial: dict[str, Any] = {}
    reasons: list[str] = []
    for name, raw in items.items():
        value, reason = _guard_value(context, name, raw)
        if reason:
            reasons.append(reason)
        else:
            partial[get_lever(name).name] = value
    if reasons:
        return GuardResult(None, partial, tuple(reasons))
    try:
        config = base.with_changes(partial)
    except (InputError, TypeError, ValueError) as error:
        return GuardResult(None, partial, (f"cannot apply the proposal: {error}",))
    return GuardResult(config, partial)


def _as_mapping(proposal: Any) -> tuple[Mapping[str, Any], str | None]:
    if isinstance(proposal, str):
        text = proposal.strip()
        try:
            proposal = json.loads(text) if text.startswith("{") else parse_config_text(text)
        except (InputError, ValueError) as error:
            return {}, f"unreadable proposal '{_short(text)}': {error}"
    if not isinstance(proposal, Mapping):
        return {}, (f"a proposal must be an object of lever -> value, not "
                    f"{type(proposal).__name__} '{_short(str(proposal))}'")
    if not proposal:
        return {}, "the proposal changes no lever"
    return proposal, None


def _guard_value(context: "SearchContext", name: Any, raw: Any) -> tuple[Any, str | None]:
    try:
        lever = get_lever(str(name))
    except InputError:
        return None, f"unknown lever '{_short(str(name))}'"
    try:
        value = lever.parse(raw)
    except InputError as error:
        return None, _short(error.message)
    if lever.values is None or lever.is_ranged or value is None:
        return value, None
    legal = allowed_values(context, lever.name)
    if value not in legal:
        shown = ", ".join(format_value(v) for v in legal) or "none"
        why = "is not a validated precision" if lever.name in PRECISION_LEVERS and \
            value in lever.legal_values(context.target.engine) else \
            f"is not in the legal set on {context.target.engine}"
        return None, f"{lever.name}={format_value(value)} {why} (legal: {shown})"
    return value, None


def _short(text: str) -> str:
    return text if len(text) <= MAX_PROPOSAL_TEXT else text[:MAX_PROPOSAL_TEXT] + "..."
