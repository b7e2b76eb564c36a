"""Instructions (text files) for the DSPy planner and investigator signatures.

The text lives beside this module (`planner.md`, `investigator.md`) so it can be read
and edited without touching code; `load_prompt` reads it as package data.
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources


@lru_cache(maxsize=None)
def load_prompt(name: str) -> str:
    """The text of `prompts/<name>.md`."""
    return resources.files(__name__).joinpath(f"{name}.md").read_text(encoding="utf-8").strip()
