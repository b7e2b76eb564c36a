"""The shared parts of the typer CLI: the app, consoles, error edge and JSON output.

Each command parses its options, calls one library function and renders the result
with rich (or as JSON with `--json`). User mistakes (:class:`InputError`) become one
line on stderr and exit code 2 — never a traceback (PRODUCT.md §6). Commands live in
small modules (`agent/cli/*.py`) that register themselves on `app`; `agent.cli.main`
imports them all.
"""

from __future__ import annotations

import functools
import json
import sys
from typing import Any, Callable

import typer
from rich.console import Console

from levers.errors import InputError

app = typer.Typer(
    name="inferasim",
    help="Find the best way to serve an LLM without paying for trial runs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
# Piped output (logs, CI) gets a wide page instead of rich's 80-column default, so
# tables of configurations stay readable; a terminal keeps its own width.
PIPED_WIDTH = 140
console = Console(width=None if sys.stdout.isatty() else PIPED_WIDTH)
err_console = Console(stderr=True, width=None if sys.stderr.isatty() else PIPED_WIDTH)

EXIT_USER_ERROR = 2


def cli_errors(fn: Callable) -> Callable:
    """Turn domain errors into a one-line message and exit code 2 (PRODUCT.md §6)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except InputError as error:
            err_console.print(f"error: {error.message}", markup=False, highlight=False, soft_wrap=True)
            raise typer.Exit(EXIT_USER_ERROR) from None

    return wrapper


def print_json(data: Any) -> None:
    """Machine-readable output on stdout, nothing else."""
    sys.stdout.write(json.dumps(data, indent=2, default=_json_default) + "\n")


def _json_default(value: Any) -> Any:
    if hasattr(value, "to_json"):
        return value.to_json()
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)
