"""`inferasim report SOURCE [-o report.html]`: one self-contained HTML page (agent.report)
for a search (a ledger path or search id) or a plan-mix run (the JSON report of
`plan-mix --out`). The page needs no network: styles, script and figures are inline.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

import typer

from agent.cli.app import app, cli_errors, console, int_option, output_file, print_json
from agent.cli.info import JsonOpt
from agent.cli.render import id_line, number, say
from agent.report.mix import is_mix_report, mix_page
from agent.report.search import TOP, search_page
from ledgers.store import load_ledger
from levers.errors import InputError
from levers.inputs import load_json, quote
from predictor.files import atomic_write_text

MAX_TOP = 1000
MAX_NAME_CHARS = 80
SOURCES = "a ledger (its path or search id) or a plan-mix report (plan-mix --out)"
TopOpt = typer.Option(TOP, "--top", parser=int_option("--top", 1, MAX_TOP), help="Best trials shown (a search).")


@app.command("report")
@cli_errors
def report_command(
    source: str = typer.Argument(..., help="A ledger (path or search id) or a plan-mix report (plan-mix --out)."),
    out: Optional[str] = typer.Option(None, "--out", "-o", help="The HTML file (default ./report-NAME.html)."),
    top: int = TopOpt,
    json_out: bool = JsonOpt,
) -> None:
    """One self-contained HTML page for a search ledger or a plan-mix report."""
    text, name = build(source, top)
    path = output_file(out if out is not None else f"report-{file_name(name)}.html", "--out")
    atomic_write_text(path, text)
    if json_out:
        return print_json({"source": source, "report": str(path), "bytes": len(text.encode())})
    say(console, f"report ({number(len(text.encode()) / 1024)} KiB, self-contained):")
    id_line(console, f"  {path}", style="")


def file_name(name: str) -> str:
    """A file name from a ledger's search id or a report's stem, which the file itself
    says: letters, digits, '.', '_' and '-' only, at most 80 characters (a search id of
    '/../../x' wrote its page outside the working directory)."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip(".-")[:MAX_NAME_CHARS].strip(".-")
    return safe or "search"


def build(source: str, top: int) -> tuple[str, str]:
    """(the page, a name for its file): a plan-mix report if the file is one, else a ledger."""
    if not source.strip():
        raise InputError("report source", "is empty", SOURCES)
    candidate = Path(source)
    if candidate.exists() and not candidate.is_file() and not candidate.is_dir():   # a FIFO, a device
        raise InputError(f"report source {quote(source)}", "is not a regular file", SOURCES)
    if candidate.is_file() and candidate.suffix == ".json":
        data = load_json(candidate, "report source", expected="a ledger or a plan-mix report")
        if is_mix_report(data):
            return mix_page(data, str(candidate)), candidate.stem
    ledger = load_ledger(source)
    return search_page(ledger, top, source), ledger.search_id
