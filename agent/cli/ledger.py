"""`inferasim ledger list|show|best|compare`: review persisted searches (PRODUCT.md §5).

A ledger is named by its path, its search id, or a unique prefix of the id.
"""

from __future__ import annotations

import json

import typer
from rich.table import Table

from agent.cli.app import app, cli_errors, console, print_json
from agent.cli.info import JsonOpt
from ledgers.review import best_record, compare, overview, rows
from ledgers.store import load_ledger
from levers.configuration import configuration_from_dict

ledger_app = typer.Typer(help="Review persisted ledgers (one per search).", no_args_is_help=True)
app.add_typer(ledger_app, name="ledger")

LedgerArg = typer.Argument(..., help="Ledger path, search id, or a unique prefix of the id.")
DEFAULT_SHOWN = 10


@ledger_app.command("list")
@cli_errors
def list_command(json_out: bool = JsonOpt) -> None:
    """Every ledger in $INFERASIM_HOME/ledgers, oldest first."""
    found = rows()
    if json_out:
        return print_json(found)
    if not found:
        console.print("no ledgers yet (inferasim tune writes one per search)")
        return
    table = Table(title="Ledgers")
    for column in ("search id", "model", "cluster", "engine", "objective", "SLOs", "trials", "best", "status"):
        table.add_column(column, overflow="fold")
    for item in found:
        if "problem" in item:
            table.add_row(item["search_id"], f"[red]unreadable[/red]: {item['problem']}", *[""] * 7)
            continue
        best = "-" if item["best_objective"] is None else f"{item['best_objective']:.4g}"
        table.add_row(item["search_id"], item["model"], item["cluster"], item["engine"], item["objective"],
                      ", ".join(item["slos"]) or "-", f"{item['num_trials']}/{item['budget']}", best,
                      item["status"])
    console.print(table)


@ledger_app.command("show")
@cli_errors
def show_command(ledger: str = LedgerArg, top: int = typer.Option(DEFAULT_SHOWN, "--top", min=1),
                 json_out: bool = JsonOpt) -> None:
    """The question, outcome, top trials, rejections and LLM notes of one search."""
    data = overview(load_ledger(ledger), top)
    if json_out:
        return print_json(data)
    question = data["question"]
    console.print(f"[bold]{data['search_id']}[/bold] ({data['status']}): {question['model']} on "
                  f"{question['cluster']} ({question['engine']}), {question['workload']}, objective "
                  f"{question['objective']}, SLOs {', '.join(question['slos']) or 'none'}")
    console.print(f"trials by phase: {data['trials_by_phase']}; stop: {data['stop_reason']}", markup=False)
    table = Table(title="Top trials")
    for column in ("#", "phase", "objective", "SLOs", "mode", "configuration"):
        table.add_column(column, overflow="fold")
    for trial in data["top"]:
        config = configuration_from_dict(trial["configuration"]).describe()
        table.add_row(str(trial["index"]), trial["phase"], f"{trial['objective_value']:.4g}",
                      str(trial["slo_met"]), str(trial["mode"]), config)
    console.print(table)
    for rejected in data["rejected"]:
        console.print(f"  rejected #{rejected['index']} ({rejected['phase']}, {rejected['rejected_by']}): "
                      f"{rejected['reason']}", markup=False, soft_wrap=True)
    llm = data["llm"]
    if llm["calls"]:
        outcomes = ", ".join(f"{c['role']}:{c['outcome']}" for c in llm["calls"])
        console.print(f"LLM calls: {outcomes}; phase end: {llm['phase_end_reason']}", markup=False)


@ledger_app.command("best")
@cli_errors
def best_command(ledger: str = LedgerArg, json_out: bool = JsonOpt) -> None:
    """The best trial of a search in full (exit 1 when no trial met the SLOs)."""
    record = best_record(load_ledger(ledger))
    if json_out:
        print_json(record.model_dump() if record else None)
    elif record is None:
        console.print("no trial met the SLOs (see `inferasim ledger show` for the nearest misses)")
    else:
        console.print(f"trial #{record.index} ({record.phase}, {record.mode}): objective "
                      f"{record.objective_value:.6g}", markup=False)
        console.print(json.dumps(record.configuration, indent=2), markup=False)
    if record is None:
        raise typer.Exit(1)


@ledger_app.command("compare")
@cli_errors
def compare_command(first: str = typer.Argument(..., help="First ledger."),
                    second: str = typer.Argument(..., help="Second ledger."), json_out: bool = JsonOpt) -> None:
    """Two searches side by side: question, outcome, and how their best configurations differ."""
    data = compare(load_ledger(first), load_ledger(second))
    if json_out:
        return print_json(data)
    table = Table(title="Ledger comparison")
    for column in ("", *data["ledgers"]):
        table.add_column(column, overflow="fold")
    for key, (a, b) in data["question"].items():
        table.add_row(key, str(a), str(b))
    for key in ("num_trials", "best_objective", "best_mode", "stop_reason"):
        a, b = data[key]
        table.add_row(key, str(a), str(b))
    for lever, (a, b) in data["best_configuration_differences"].items():
        table.add_row(f"best: {lever}", str(a), str(b))
    console.print(table)
