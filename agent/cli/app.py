"""The shared parts of the typer CLI: the app, consoles, error edge and JSON output.

Each command parses its options, calls one library function and renders the result
with rich (or as JSON with `--json`). User mistakes (:class:`InputError`) become one
line on stderr and exit code 2 — never a traceback (PRODUCT.md §6). Commands live in
small modules (`agent/cli/*.py`) that register themselves on `app`.

Start-up is part of the interface (`inferasim --help` should feel instant): the app's
group is a :class:`LazyGroup` that knows the commands from `agent.cli.commands` (plain
data) and imports a command's module only when that command runs, so `--help` loads
typer and rich, and `inferasim models` loads the model cards, nothing else.

Everything printed passes the one redaction pass and loses its control characters
(:func:`levers.redact.clean_text`): the consoles clean every string they render (table
cells too), and JSON output is redacted before it is written. An error message is
bounded in size. A file the product could not read or write (``OSError``) is an input
error too; anything else unexpected is one line and exit code 3, never a traceback
(``INFERASIM_DEBUG=1`` shows it).

Numeric options take one of the parsers below (``typer.Option(..., parser=SEED)``): an
ASCII number, finite, inside the stated range, or typer's usage error (exit 2) before any
work. Output paths are checked before any work (:func:`output_file`, :func:`output_dir`).
Work bounds: a DES run replays at most :data:`MAX_DES_REQUESTS` requests and a trace
holds at most :data:`MAX_TRACE_REQUESTS` (measured here: the agentic DES prices about
6,000 requests/s on one core and holds ~2.5 KB per request, so a million is a few
minutes and a few GB); ``--allow-large`` lifts both, and the trace file size limit.
"""

from __future__ import annotations

import difflib
import functools
import importlib
import json
import math
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import click
import typer
from rich.console import Console
from typer.core import TyperGroup

from agent.cli.commands import BY_NAME, COMMANDS
from levers.errors import InputError
from levers.inputs import bounded, check_output_dir, check_output_file, parse_number, quote
from levers.redact import clean_text, redact

try:    # typer >= 0.16 parses with its own copy of click
    from typer._click.exceptions import ClickException as ParserClickException
except ImportError:     # pragma: no cover - an older typer parses with click itself
    ParserClickException = click.ClickException


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

    def make_context(self, info_name, args, parent=None, **extra):
        with _bounded_usage_errors():
            return super().make_context(info_name, args, parent, **extra)

    def invoke(self, ctx: click.Context):
        with _bounded_usage_errors():
            return super().invoke(ctx)

    def resolve_command(self, ctx: click.Context, args: list[str]):
        if args and self.get_command(ctx, args[0]) is None and not args[0].startswith("-"):
            close = difflib.get_close_matches(args[0], self.list_commands(ctx), n=3, cutoff=0.6)
            hint = f" Did you mean {', '.join(repr(name) for name in close)}?" if close else ""
            ctx.fail(f"No such command {args[0]!r}.{hint}")
        return super().resolve_command(ctx, args)


@contextmanager
def _bounded_usage_errors() -> Iterator[None]:
    """A usage error the parser raises (an extra argument, an unknown option, a value its
    type refuses) echoes the argument whole: a 100,000-character one made a 112 KB
    message. Its text is bounded as every message of the tool's own is."""
    try:
        yield
    except (click.ClickException, ParserClickException) as error:
        # the help a command with no arguments prints is carried as such an error: not bounded
        if isinstance(getattr(error, "message", None), str) and type(error).__name__ != "NoArgsIsHelpError":
            error.message = bounded(error.message)
        raise


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
EXIT_USER_ERROR = 2
EXIT_INTERNAL_ERROR = 3
DEBUG_ENV = "INFERASIM_DEBUG"


class SafeConsole(Console):
    """A rich console that redacts and strips control characters from every string it
    renders (PRODUCT.md §6: LLM replies and ledger fields are untrusted)."""

    def render_str(self, text: str, **kwargs: Any):  # noqa: ANN201 - rich's own signature
        return super().render_str(clean_text(text), **kwargs)


console = SafeConsole(width=None if sys.stdout.isatty() else PIPED_WIDTH)
err_console = SafeConsole(stderr=True, width=None if sys.stderr.isatty() else PIPED_WIDTH)


def cli_errors(fn: Callable) -> Callable:
    """Turn domain errors into a one-line message and exit code 2 (PRODUCT.md §6)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except InputError as error:
            _say_error(error.message)
            raise typer.Exit(EXIT_USER_ERROR) from None
        except OSError as error:
            where = f"{quote(str(error.filename))}: " if error.filename else ""
            _say_error(f"{where}{error.strerror or error}")
            raise typer.Exit(EXIT_USER_ERROR) from None
        except (typer.Exit, typer.Abort, KeyboardInterrupt, SystemExit):
            raise
        except Exception as error:  # noqa: BLE001 - the edge: one line, never a traceback
            if os.environ.get(DEBUG_ENV):
                raise
            _say_error(f"internal error ({type(error).__name__}: {error}); rerun with {DEBUG_ENV}=1 "
                       "for the traceback and report it")
            raise typer.Exit(EXIT_INTERNAL_ERROR) from None

    return wrapper


def _say_error(message: str) -> None:
    err_console.print(f"error: {bounded(message)}", markup=False, highlight=False, soft_wrap=True)


def print_json(data: Any) -> None:
    """Machine-readable output on stdout, nothing else (secrets masked)."""
    sys.stdout.write(redact(json_text(data)) + "\n")


def json_text(data: Any, indent: int = 2) -> str:
    """Strict JSON: a value that is not a finite number (a metric with nothing to
    measure, e.g. the mixed step of a pool that never mixes) is ``null``; ``NaN`` and
    ``Infinity`` are not JSON, and strict parsers (JavaScript's, jq's) refuse them."""
    return json.dumps(_finite(data), indent=indent, default=_json_default, allow_nan=False)


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    if hasattr(value, "to_json") or hasattr(value, "model_dump"):
        return _finite(_json_default(value))
    return value


def _json_default(value: Any) -> Any:
    if hasattr(value, "to_json"):
        return value.to_json()
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)


# --- option validation (module docstring) ---------------------------------------------

MAX_DES_REQUESTS = 1_000_000
MIN_DES_REQUESTS = 16            # fewer: a replay of warm-up alone, its intervals meaningless (predict, plan-mix)
MAX_TRACE_REQUESTS = 1_000_000
LARGE_INPUT_BYTES = 1 << 40          # --allow-large: a trace file up to 1 TB
MAX_SEED = 2**32 - 1
MAX_WORKERS = 256
MAX_TIMEOUT_S = 7 * 24 * 3600.0      # a week: any wait longer than that is a typo
ALLOW_LARGE_HELP = (f"Lift the caps on DES requests ({MAX_DES_REQUESTS:,}), trace requests "
                    f"({MAX_TRACE_REQUESTS:,}) and the trace file size (the input limit).")


def int_option(what: str, low: int | None = None, high: int | None = None) -> Callable[[object], int]:
    """A typer ``parser`` for option ``what``: a whole number in ``[low, high]``."""
    def parse(value: object) -> int:
        return _parsed(value, what, integer=True, low=low, high=high)
    return parse


def float_option(what: str, low: float | None = None, high: float | None = None, *,
           positive: bool = False) -> Callable[[object], float]:
    """A typer ``parser`` for option ``what``: a finite number in ``[low, high]``
    (``positive``: above 0)."""
    def parse(value: object) -> float:
        result = float(_parsed(value, what, integer=False, low=low, high=high))
        if positive and result <= 0:
            _option_error(InputError(what, f"{result:g} is not positive",
                                     "a number > 0" + (f" and <= {high:g}" if high is not None else "")))
        return result
    return parse


def _parsed(value: object, what: str, *, integer: bool, low: float | None, high: float | None) -> int | float:
    try:
        return parse_number(value, what, integer=integer, low=low, high=high)
    except InputError as error:
        _option_error(error)


def _option_error(error: InputError):
    """An option's value is refused while typer parses it: the same one line and exit
    code 2 as :func:`cli_errors` (``typer.Exit`` passes through typer's converters)."""
    _say_error(error.message)
    raise typer.Exit(EXIT_USER_ERROR)


def timeout_option(what: str) -> Callable[[object], float]:
    return float_option(what, 0, MAX_TIMEOUT_S, positive=True)


SEED = int_option("--seed", 0, MAX_SEED)
WORKERS = int_option("--workers", 1, MAX_WORKERS)


def check_des_requests(value: int | None, what: str, allow_large: bool) -> int | None:
    """``--requests``-like options: at most :data:`MAX_DES_REQUESTS` unless ``--allow-large``."""
    if value is not None and value > MAX_DES_REQUESTS and not allow_large:
        raise InputError(what, f"{value:,} requests is over the cap of {MAX_DES_REQUESTS:,}",
                         f"1 to {MAX_DES_REQUESTS:,}, or --allow-large to run it anyway")
    return value


def check_trace_requests(num_requests: int, what: str, allow_large: bool) -> None:
    if num_requests > MAX_TRACE_REQUESTS and not allow_large:
        raise InputError(what, f"the trace holds {num_requests:,} requests, over the cap of {MAX_TRACE_REQUESTS:,}",
                         "a shorter trace, or --allow-large to replay it anyway")


def output_file(path: str | Path | None, what: str) -> Path | None:
    """An output file option checked before any work (None: not asked for)."""
    return None if path is None else check_output_file(path, what)


def output_dir(path: str | Path | None, what: str) -> Path | None:
    """An output folder option checked before any work (None: not asked for)."""
    return None if path is None else check_output_dir(path, what)
