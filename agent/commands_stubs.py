"""Commands whose capability has not landed yet: they exist, say so, and exit 1."""

from __future__ import annotations

import typer

from agent.cli_app import err_console


def _not_yet(command: str) -> None:
    err_console.print(f"{command}: not yet available in this build")
    raise typer.Exit(1)
