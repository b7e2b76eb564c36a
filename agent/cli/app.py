"""The shared parts of the typer CLI: the app, consoles, error edge and JSON output.

Each command parses its options, calls one library function and renders the result
with rich (or as JSON with `--json`). User mistakes (:class:`InputError`) become one
line on stderr and exit code 2 — never a traceback (PRODUCT.md §6). Commands live in
small modules (`agent/cli/*.py`) that register themselves on `app`.

Start-up is part of the interface (`inferasim --help` should feel instant): the app's
group is a :class:`LazyGroup` that knows the commands from `agent.cli.commands` (plain
data) and imports a command's module only when that command runs, so `--help` loads
typer and rich, and `inferasim models` loads the model cards, nothing else.
"""

from __future__ import annotations

import difflib
import functools
import importlib
import json
import sys
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Callable

import click
import typer
from rich.console import Console
from typer.core import TyperGroup

from agent.cli.commands import BY_NAME, COMMANDS
from levers.errors import InputError


class LazyGroup(TyperGroup):
    """A typer group whose commands are imported on first use (see the module docstring).

    While help is formatted the listing uses each command's one-line summary from
    `agent.cli.commands` instead of importing it; a mistyped command gets difflib's
    suggestions over every command name, loaded or not.
    """

    _listing = False

    def list_commands(self, ctx: click.Context) -> list[str]:
        loaded = [name for name in self.commands if name not in BY_NAME]
        return [entry.name for entry in COMMANDS] + loaded

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands:
            return self.commands[cmd_name]
        entry = BY_NAME.get(cmd_name)
        if entry is None:
            return None
        if self._listing:
            return click.Command(cmd_name, help=entry.summary)
        importlib.import_module(entry.module)
        command = typer.main.get_group(app).commands.get(cmd_name)
        if command is not None:
            self.commands[cmd_name] = command
        return command

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False

    def resolve_command(self, ctx: click.Context, args: list[str]):
        if args and self.get_command(ctx, args[0]) is None and not args[0].startswith("-"):
            close = difflib.get_close_matches(args[0], self.list_commands(ctx), n=3, cutoff=0.6)
            hint = f" Did you mean {', '.join(repr(name) for name in close)}?" if close else ""
            ctx.fail(f"No such command {args[0]!r}.{hint}")
        return super().resolve_command(ctx, args)


app = typer.Typer(
    cls=LazyGroup,
    name="inferasim",
    help="Find the best way to serve an LLM without paying for trial runs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def package_version() -> str:
    """The installed distribution's version (a source checkout without metadata: unknown)."""
    try:
        return version("inferasim")
    except PackageNotFoundError:
        return "unknown"


def _print_version(value: bool) -> None:
    if value:
        sys.stdout.write(f"inferasim {package_version()} (Python {sys.version.split()[0]})\n")
        raise typer.Exit()


@app.callback()
def _root(version_flag: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                            help="Print the version and exit.")) -> None:
    """Find the best way to serve an LLM without paying for trial runs."""

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
