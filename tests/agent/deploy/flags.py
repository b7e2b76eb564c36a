"""Check a launch command against an engine's own option definitions
(tests/fixtures/engine_flags/ENGINE.json, built by scripts/build_engine_flags.py from
the engine's released source)."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "engine_flags"


@lru_cache(maxsize=None)
def engine_flags(engine: str) -> dict:
    return json.loads((FIXTURES / f"{engine}.json").read_text(encoding="utf-8"))


def argv_problems(argv: list[str] | tuple[str, ...], engine: str, start: int) -> list[str]:
    """What in ``argv[start:]`` the engine's parser would reject: unknown options, a
    value missing or given to a switch, a value outside the option's choices, a stray
    positional argument."""
    options = engine_flags(engine)["options"]
    problems: list[str] = []
    position = start
    while position < len(argv):
        token = argv[position]
        name, has_value, inline = token.partition("=")
        spec = options.get(name) if token.startswith("-") else None
        if spec is None:
            problems.append(f"{token}: {'not an option of ' + engine if token.startswith('-') else 'stray positional'}")
            position += 1
            continue
        kind, choices = spec["kind"], spec["choices"]
        following = argv[position + 1] if position + 1 < len(argv) else None
        if kind == "switch":
            if has_value:
                problems.append(f"{token}: {name} takes no value")
            position += 1
            continue
        if kind == "list":
            values = []
            position += 1
            while position < len(argv) and not argv[position].startswith("--"):
                values.append(argv[position])
                position += 1
            if not values:
                problems.append(f"{name}: needs one or more values")
            problems += [f"{name} {v}: not one of {choices}" for v in values if choices and v not in map(str, choices)]
            continue
        takes_next = not has_value and following is not None and not following.startswith("--")
        if kind == "value" and not has_value and not takes_next:
            problems.append(f"{name}: needs a value")
        value = inline if has_value else following if takes_next else None
        if value is not None and choices and value not in map(str, choices):
            problems.append(f"{name} {value}: not one of {choices}")
        position += 1 + (1 if takes_next else 0)
    return problems


def env_problems(env: dict[str, str], engine: str) -> list[str]:
    known = set(engine_flags(engine)["env"])
    return [f"{name}: not an environment variable {engine} reads" for name in env if name not in known]
