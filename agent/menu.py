"""A menu of legal one-lever moves, for a chat model too small to write configurations
(METHOD §6 "Planner"; NOTES.md "A real local LLM").

A 135M-parameter model served by llama.cpp follows a JSON schema only because the
schema constrains its decoding; asked for free-form partial configurations it writes
unknown levers and values outside their legal sets, which the guards reject (every one
of its proposals was rejected before this menu existed). So with `--lm-json-schema` the
planner is asked a simpler question: pick 5-8 moves from a menu. The menu holds, for
each lever a first search should vary, the values one step from the incumbent that the
guards would let through (operator precisions, structure, the 90% HBM cap: the seed
planner's `is_legal`) and that the search has not priced yet. Its schema is a union of
one `{"lever": const, "value": enum}` object per lever, so constrained decoding can only
emit moves from it. The LLM still chooses; the guards and the predictor still check and
price every move like any other proposal.

Ranged levers offer the seed planner's ladders; the values are kept in lever order.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, create_model

from agent.guards import allowed_values
from agent.seed_planner import (
    CHUNK_LADDER,
    CONCURRENCY_LADDER,
    HOST_KV_TIER_GB_LADDER,
    KV_FRACTION_LADDER,
    RUNNING_REQUESTS_LADDER,
    TOKEN_BUDGET_LADDER,
    is_legal,
)
from agent.trial import SearchContext
from levers.catalog import LEVERS_BY_NAME
from levers.configuration import Configuration, format_value
from levers.errors import InputError

RANGED_LADDERS: dict[str, tuple[Any, ...]] = {
    "concurrency": CONCURRENCY_LADDER, "max_running_requests": RUNNING_REQUESTS_LADDER,
    "max_batched_tokens": TOKEN_BUDGET_LADDER, "chunked_prefill_size": CHUNK_LADDER,
    "kv_memory_fraction": KV_FRACTION_LADDER, "host_kv_tier_gb": HOST_KV_TIER_GB_LADDER,
    "spec_depth": (1, 2, 3),
}
MENU_LEVERS = ("tp", "attention_dp", "ep", "weight_dtype", "expert_dtype", "kv_cache_dtype", "concurrency",
               "max_running_requests", "max_batched_tokens", "chunked_prefill_size", "kv_memory_fraction",
               "graph_capture", "attention_backend", "moe_backend", "all_to_all_backend", "allreduce_algorithm",
               "spec_depth", "prefix_cache", "host_kv_tier_gb")
MIN_MOVES = MAX_MOVES = 5           # METHOD's lower bound: each move is ~20 constrained tokens
MAX_RATIONALE_CHARS = 120           # short strings: a small model on a CPU writes ~10-50 tokens/s
MAX_NOTE_CHARS = 80
MAX_HYPOTHESES = 2

Menu = dict[str, tuple[Any, ...]]


def _candidates(context: SearchContext, name: str) -> tuple[Any, ...]:
    lever = LEVERS_BY_NAME[name]
    if lever.is_ranged:
        return RANGED_LADDERS.get(name, ())
    return tuple(v for v in allowed_values(context, name) if v is not None)


def build_menu(context: SearchContext, center: Configuration, seen) -> Menu:
    """Every lever of `MENU_LEVERS` with the values that make a legal, unpriced move."""
    menu: Menu = {}
    for name in MENU_LEVERS:
        values = []
        for value in _candidates(context, name):
            if value == getattr(center, name):
                continue
            try:
                moved = center.with_changes({name: value})
            except (InputError, TypeError, ValueError):
                continue
            if not seen(moved) and is_legal(context, moved):
                values.append(value)
        if values:
            menu[name] = tuple(values)
    return menu


def menu_text(menu: Menu) -> str:
    """One line per lever: the values it may take, and what it does."""
    return "\n".join(f"{name}: {', '.join(format_value(v) for v in values)} | {LEVERS_BY_NAME[name].description}"
                     for name, values in menu.items())


def _move_model(name: str, values: tuple[Any, ...]) -> type[BaseModel]:
    return create_model(f"Move_{name}", __config__=ConfigDict(extra="forbid"),
                        lever=(Literal[name], ...), value=(Literal[values], ...))


def menu_plan_model(menu: Menu) -> type[BaseModel]:
    """The planner's output schema for ``menu`` (module docstring)."""
    variants = tuple(_move_model(name, values) for name, values in menu.items())
    move = variants[0] if len(variants) == 1 else Union[variants]  # noqa: UP007 - built at run time
    return create_model(
        "MenuPlan", __config__=ConfigDict(extra="forbid"),
        rationale=(str, Field(max_length=MAX_RATIONALE_CHARS, description="why these moves")),
        hypotheses=(list[Annotated[str, Field(max_length=MAX_NOTE_CHARS)]],
                    Field(max_length=MAX_HYPOTHESES, description="short testable statements")),
        moves=(list[move], Field(min_length=MIN_MOVES, max_length=MAX_MOVES, description="best first")),
        polish_plan=(str, Field(max_length=MAX_NOTE_CHARS, description="what to try next")),
    )


def as_partials(moves: list[BaseModel], center: Configuration, baseline: Configuration | None) -> list[dict]:
    """Each move as a partial configuration over the baseline (the centre's changes plus
    the move), the form the planner's configurations take."""
    around = center.diff(baseline) if baseline is not None else {}
    partials = []
    for move in moves:
        partial = {k: list(v) if isinstance(v, tuple) else v for k, v in around.items()}
        partial[move.lever] = move.value
        partials.append(partial)
    return partials


def changes_schema(menu: Menu) -> dict[str, Any]:
    """A JSON Schema admitting exactly one menu move as ``{lever: value}`` (the
    investigator's `evaluate_config` changes and its closing best configuration)."""
    return {"anyOf": [{"type": "object", "properties": {name: {"enum": list(values)}}, "required": [name],
                       "additionalProperties": False} for name, values in menu.items()]}


def text_schema(max_chars: int) -> dict[str, Any]:
    return {"type": "string", "maxLength": max_chars}
