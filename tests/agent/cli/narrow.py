"""Helpers for the 80-column checks: run a command with the CLI's console narrowed."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from agent.cli.app import console

NARROW = 80


@contextlib.contextmanager
def console_width(width: int = NARROW) -> Iterator[None]:
    """The shared console at ``width`` columns (what a terminal of that size gets)."""
    before = console.width
    console.width = width
    try:
        yield
    finally:
        console.width = before


def overlong(output: str, width: int = NARROW, whole: tuple[str, ...] = ()) -> list[str]:
    """Lines wider than ``width``, except lines printed whole on purpose (ids, command
    lines, paths), recognised by their start after leading spaces."""
    return [line for line in output.splitlines()
            if len(line) > width and not line.lstrip().startswith(whole)]
