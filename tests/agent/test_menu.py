"""The planner's menu for a small constrained-decoding model (agent/menu.py): only legal,
unpriced one-lever moves, and a schema that admits nothing else."""

import pydantic
import pytest

from agent.lm import output_schema
from agent.menu import MIN_MOVES, as_partials, build_menu, menu_plan_model, menu_text
from agent.planner import PickMoves
from agent.seed_planner import is_legal
from tests.agent.tune_fakes import make_session


def test_every_move_on_the_menu_is_legal_and_unpriced():
    session = make_session()
    center = session.baseline
    seen = {center.with_changes({"kv_cache_dtype": "fp8"})}
    menu = build_menu(session.context, center, lambda config: config in seen)
    assert menu and "fp8" not in menu.get("kv_cache_dtype", ())
    for lever, values in menu.items():
        assert getattr(center, lever) not in values
        for value in values:
            assert is_legal(session.context, center.with_changes({lever: value})), (lever, value)
    assert menu_text(menu).splitlines()[0].startswith(f"{next(iter(menu))}: ")


def test_the_schema_admits_only_menu_moves():
    session = make_session()
    menu = build_menu(session.context, session.baseline, lambda config: False)
    model = menu_plan_model(menu)
    lever, values = next(iter(menu.items()))
    good = {"rationale": "r", "hypotheses": [], "polish_plan": "p",
            "moves": [{"lever": lever, "value": values[0]}] * MIN_MOVES}
    plan = model.model_validate(good)
    with pytest.raises(pydantic.ValidationError):
        model.model_validate({**good, "moves": [{"lever": lever, "value": "nonsense"}] * MIN_MOVES})
    with pytest.raises(pydantic.ValidationError):
        model.model_validate({**good, "moves": [{"lever": "bogus", "value": 1}] * MIN_MOVES})
    partials = as_partials(plan.moves, session.baseline.with_changes({"concurrency": 16}), session.baseline)
    assert partials[0] == {"concurrency": 16, lever: values[0]}


def test_the_schema_goes_to_the_server_not_into_the_prompt():
    session = make_session()
    model = menu_plan_model(build_menu(session.context, session.baseline, lambda config: False))
    signature = PickMoves.with_updated_fields("plan", response_schema=model.model_json_schema())
    schema = output_schema(signature)
    assert schema["required"] == ["plan"] and any(name.startswith("Move_") for name in schema["$defs"])
    assert "Move_" not in signature.output_fields["plan"].json_schema_extra["desc"]
