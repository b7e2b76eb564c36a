"""`inferasim ledger list|show|best|compare`: review persisted searches (PRODUCT.md §5).

A ledger is named by its path, its search id, or a unique prefix of the id.
"""

from __future__ import annotations

import typer

from agent.cli.app import app, cli_errors, console, int_option, print_json
from agent.cli.info import JsonOpt, WideOpt
from agent.cli.render import (MISSING, config_text, id_line, mapping_text, metric_header, number,
                              objective_header, paragraph, print_wide, say, table)
from ledgers.review import best_record, compare, overview, rows, unfinished_note
from ledgers.store import load_ledger
from levers.configuration import configuration_from_dict
from objectives.objectives import resolve_objective

ledger_app = typer.Typer(help="Review persisted ledgers (one per search).", no_args_is_help=True)
app.add_typer(ledger_app, name="ledger")

LedgerArg = typer.Argument(..., help="Ledger path, search id, or a unique prefix of the id.")
DEFAULT_SHOWN = 10
BEST_METRICS = ("throughput_per_gpu", "output_throughput_per_gpu", "ttft_ms_mean", "tpot_ms_p50",
                "interactivity_p50", "itl_ms_p90")


@ledger_app.command("list")
@cli_errors
def list_command(json_out: bool = JsonOpt, wide: bool = WideOpt) -> None:
    """Every ledger in $INFERASIM_HOME/ledgers, oldest first."""
    found = rows()
    if json_out:
        return print_json(found)
    if not found:
        console.print("no ledgers yet (inferasim tune writes one per search)")
        return
    if wide:
        return _print_wide(found)
    for item in found:
        id_line(console, item["search_id"])
        paragraph(console, _details(item), indent=4)


def _details(item: dict) -> str:
    if "problem" in item:
        return f"unreadable: {item['problem']}"
    return (f"{item['model']} on {item['cluster']} ({item['engine']}), {item['workload']}; "
            f"{_objective_text(item['objective'], item['best_objective'])}; SLOs {', '.join(item['slos']) or 'none'}; "
            f"{_trials(item)}, {item['status']}")


def _trials(item: dict) -> str:
    """Trials recorded against the search's budget: the confirm step re-prices the best
    few on top of it, so a finished search can hold more trials than its budget."""
    return f"{item['num_trials']} trials (budget {item['budget']})"


def _objective_text(objective: str, value: float | None) -> str:
    unit = objective_unit(objective)
    best = "no trial met the SLOs" if value is None else f"best {number(value)} {unit}".rstrip()
    return f"{objective} {best}"


def objective_unit(name: str) -> str:
    """The objective's unit as a header reads it (tok/s/GPU for per-GPU throughput)."""
    return objective_header(resolve_objective(name)).split("\n")[-1]


def _print_wide(found: list[dict]) -> None:
    grid = table("Ledgers", [("search id", "left"), ("model", "left"), ("cluster", "left"), ("engine", "left"),
                             ("objective", "left"), ("best", "right"), ("unit", "left"), ("SLOs", "left"),
                             ("trials", "right"), ("status", "left")])
    for item in found:
        if "problem" in item:
            grid.add_row(item["search_id"], f"unreadable: {item['problem']}", *[""] * 8)
            continue
        grid.add_row(item["search_id"], item["model"], item["cluster"], item["engine"], item["objective"],
                     number(item["best_objective"]), objective_unit(item["objective"]),
                     ", ".join(item["slos"]) or MISSING, _trials(item), item["status"])
    print_wide(console, grid)


@ledger_app.command("show")
@cli_errors
def show_command(ledger: str = LedgerArg, top: int = typer.Option(DEFAULT_SHOWN, "--top", parser=int_option("--top", 1, 1_000_000)),
                 json_out: bool = JsonOpt) -> None:
    """The question, outcome, top trials, rejections and LLM notes of one search."""
    data = overview(load_ledger(ledger), top, ledger)
    if json_out:
        return print_json(data)
    question = data["question"]
    id_line(console, f"{data['search_id']} ({data['status']})")
    say(console, f"{question['model']} on {question['cluster']} ({question['engine']}), {question['workload']}, "
                 f"objective {question['objective']}, SLOs {', '.join(question['slos']) or 'none'}")
    stop = data["stop_reason"] or f"none recorded (the search is {data['status']})"
    say(console, f"trials by phase: {mapping_text(data['trials_by_phase'])}; stop: {stop}")
    unit = objective_unit(question["objective"])
    grid = table("Top trials", [("#", "right"), ("phase", "left"), (f"objective\n{unit}", "right"),
                                ("SLOs", "left"), ("mode", "left"), ("configuration", "left")], wrap_last=True)
    for trial in data["top"]:
        config = config_text(configuration_from_dict(trial["configuration"]))
        grid.add_row(str(trial["index"]), trial["phase"], number(trial["objective_value"]),
                     _slo_word(trial["slo_met"]), trial["mode"] or MISSING, config)
    console.print(grid)
    for rejected in data["rejected"]:
        paragraph(console, rejected["reason"] or "",
                  first=f"  rejected #{rejected['index']} ({rejected['phase']}, {rejected['rejected_by']}): ")
    llm = data["llm"]
    if llm["calls"]:
        outcomes = ", ".join(f"{c['role']}:{c['outcome']}" for c in llm["calls"])
        say(console, f"LLM calls: {outcomes}; phase end: {llm['phase_end_reason']}")


def _slo_word(met: bool | None) -> str:
    return {True: "met", False: "missed", None: "unverified"}[met]


@ledger_app.command("best")
@cli_errors
def best_command(ledger: str = LedgerArg, json_out: bool = JsonOpt) -> None:
    """The best trial of a search in full (exit 1 when no trial met the SLOs)."""
    loaded = load_ledger(ledger)
    record = best_record(loaded)
    if json_out:
        print_json(record.model_dump() if record else None)
    elif record is None:
        console.print("no trial met the SLOs (see `inferasim ledger show` for the nearest misses)")
    else:
        unfinished = unfinished_note(loaded, ledger)     # its best is not re-priced yet: said, as deploy says it
        say(console, f"trial #{record.index} ({record.phase}, {record.mode}): {loaded.objective} "
                     f"{number(record.objective_value)} {objective_unit(loaded.objective)}"
                     f"{f' (best{unfinished})' if unfinished else ''}")
        paragraph(console, config_text(configuration_from_dict(record.configuration)), first="configuration: ")
        metrics = record.metrics or {}
        shown = [f"{metric_header(key).replace(chr(10), ' ')} {number(metrics[key])}"
                 for key in BEST_METRICS if metrics.get(key) is not None]
        if shown:
            paragraph(console, "; ".join(shown), first="metrics: ")
        if record.source == "des" and record.des_requests:
            # how it was priced, so `predict` can re-price it as recorded
            say(console, f"priced by: the simulator, {record.des_requests:,} requests x {record.replications} "
                         f"replication(s) at seed {loaded.seed} (predict --requests {record.des_requests} "
                         f"--replications {record.replications} --seed {loaded.seed} re-prices it)")
        elif record.source:
            say(console, f"priced by: the {record.source} model")
        if record.flags:
            paragraph(console, "; ".join(record.flags), first="flags: ")
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
    first_id, second_id = data["ledgers"]
    id_line(console, f"A: {first_id}")
    id_line(console, f"B: {second_id}")
    grid = table("Ledger comparison", [("", "left"), ("A", "left"), ("B", "left")], wrap=(1, 2))
    for key, (a, b) in data["question"].items():
        grid.add_row(key, _cell(a), _cell(b))
    for key in ("num_trials", "best_objective", "mode", "stop_reason"):
        a, b = (side[key] for side in data["sides"])
        grid.add_row("best mode" if key == "mode" else key, _cell(a), _cell(b))
    for lever, (a, b) in data["best_configuration_differences"].items():
        grid.add_row(f"best: {lever}", _cell(a), _cell(b))
    console.print(grid)


def _cell(value) -> str:
    if isinstance(value, (list, tuple)):
        return ", ".join(_cell(v) for v in value) or "none"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return number(value)
    return MISSING if value is None else str(value)
