"""User-facing errors shared by every layer.

An :class:`InputError` names the input, what was wrong with it and what is accepted
(PRODUCT.md §6). The CLI turns it into one line on stderr and exit code 2; nothing
below the CLI prints or exits.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class InputError(ValueError):
    """A user (or LLM) supplied value that cannot be used.

    ``what`` names the input (``--model``, ``models.yaml: models[2].name``), ``problem``
    says what is wrong and ``accepted`` what would be accepted instead.
    """

    def __init__(self, what: str, problem: str, accepted: str = "") -> None:
        self.what = what
        self.problem = problem
        self.accepted = accepted
        super().__init__(self.message)

    @property
    def message(self) -> str:
        text = f"{self.what}: {self.problem}"
        if self.accepted:
            text += f" (accepted: {self.accepted})"
        return text


def did_you_mean(word: object, choices: Iterable[object]) -> str:
    """``; did you mean 'x'?`` when difflib finds a close choice (case-insensitive), else ``''``.

    Appended to an error's problem, so a typo of a model, GPU, lever, engine or value
    names the likely intent before the (possibly long) accepted list. A number among
    numbers gets none: spelling distance says nothing about them (``tp=3`` is as near
    ``32`` as ``2`` to difflib), and their accepted list, which follows, is short and ordered."""
    try:
        text = str(word)
    except ValueError:      # an integer past 4,300 digits (YAML hex has no limit): near nothing
        return ""
    names = {str(choice).lower(): str(choice) for choice in choices}
    if _is_number(text) and names and all(_is_number(name) for name in names):
        return ""
    close = difflib.get_close_matches(text.strip().lower(), list(names), n=1, cutoff=0.6)
    return f"; did you mean '{names[close[0]]}'?" if close else ""


def _is_number(value: object) -> bool:
    try:
        float(str(value).strip())
    except ValueError:
        return False
    return True


def accepted_list(values, limit: int = 12) -> str:
    """A short, readable list of accepted values."""
    items = [str(v) for v in values]
    if len(items) > limit:
        return ", ".join(items[:limit]) + f", ... ({len(items)} in all)"
    return ", ".join(items)
