"""Commands whose capability has not landed yet: they exist, say so, and exit 1."""

from __future__ import annotations

import typer

from agent.cli_app import app, err_console


def _not_yet(command: str) -> None:
    err_console.print(f"{command}: not yet available in this build")
    raise typer.Exit(1)


@app.command("plan-mix", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def plan_mix(ctx: typer.Context) -> None:
    """Pick one configuration per model and latency tier (not yet available)."""
    _not_yet("plan-mix")
