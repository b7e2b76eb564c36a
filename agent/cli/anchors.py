"""`inferasim anchors list|show|check`: the anchor cache and its coverage (METHOD §4,
PRODUCT.md §2). Each command parses, calls one library function and renders."""

from __future__ import annotations

from typing import Optional

import typer
from rich.table import Table

from agent.cli.app import EXIT_USER_ERROR, app, cli_errors, console, err_console, print_json
from agent.cli.info import JsonOpt
from levers.catalog import parse_engine
from predictor.anchors.anchor import Anchor
from predictor.anchors.check import INVALID, REFUSED, check_anchors, coverage_summary
from predictor.anchors.store import AnchorStore, StoredAnchor
from predictor.hardware import parse_cluster

anchors_app = typer.Typer(help="The anchor cache: list, show and check anchors.", no_args_is_help=True)
app.add_typer(anchors_app, name="anchors")



def _row(item: StoredAnchor) -> dict:
    anchor, sig = item.anchor, item.anchor.signature
    return {
        "id": anchor.id, "gpu": sig.accelerator, "engine": sig.engine, "engine_version": sig.engine_version,
        "model": sig.model,
        "dtypes": {"weight": sig.weight_dtype, "activation": sig.activation_dtype,
                   "expert": sig.expert_dtype, "kv_cache": sig.kv_cache_dtype},
        "widths": {"tp": sig.tp, "ep": sig.ep, "attention_dp": sig.attention_dp, "pp": sig.pp},
        "source": anchor.provenance.source, "where": item.where,
    }


def _dtypes_text(row: dict) -> str:
    d = row["dtypes"]
    return f"w {d['weight']} / a {d['activation']} / e {d['expert'] or '-'} / kv {d['kv_cache']}"


def _widths_text(row: dict) -> str:
    w = row["widths"]
    return f"TP{w['tp']} EP{w['ep']} DP{w['attention_dp']}" + (f" PP{w['pp']}" if w["pp"] > 1 else "")


def _warn_problems(store: AnchorStore) -> None:
    for path, message in store.problems:
        err_console.print(f"warning: skipped {path}: {message}", markup=False, highlight=False, soft_wrap=True)


@anchors_app.command("list")
@cli_errors
def list_anchors(json_out: bool = JsonOpt) -> None:
    """Every anchor: embedded defaults and the user's cache ($INFERASIM_HOME/anchors)."""
    store = AnchorStore.default()
    rows = [_row(item) for item in store.entries()]
    if json_out:
        return print_json(rows)
    _warn_problems(store)
    if not rows:
        console.print("No anchors stored. `inferasim harvest` measures one; predictions run in simulate mode.")
        return
    table = Table(title="Anchors")
    table.add_column("id", overflow="fold")
    for column in ("GPU", "engine", "model", "dtypes", "widths", "source", "where"):
        table.add_column(column)
    for row in rows:
        table.add_row(row["id"], row["gpu"], row["engine"], row["model"], _dtypes_text(row), _widths_text(row),
                      row["source"], row["where"])
    console.print(table)


def _show_json(item: StoredAnchor) -> dict:
    return {"where": item.where, "path": item.path, "coverage": coverage_summary(item.anchor),
            "anchor": item.anchor.model_dump(mode="json")}


def _render_anchor(anchor: Anchor, where: str) -> None:
    sig, sweep, prefill = anchor.signature, anchor.decode_sweep, anchor.prefill_sweep
    console.print(f"[bold]{anchor.id}[/bold] ({where}, source {anchor.provenance.source}, "
                  f"{anchor.provenance.timestamp})", highlight=False)
    console.print(f"coverage: {coverage_summary(anchor)}", markup=False, highlight=False)
    console.print(f"signature: {sig.model_dump_json()}", markup=False, highlight=False, soft_wrap=True)
    table = Table(title=f"decode sweep (prompt {sweep.prompt_tokens} tokens)")
    table.add_column("batch")
    table.add_column("ITL ms")
    if sweep.second_itl_ms:
        table.add_column(f"ITL ms @ {sweep.second_prompt_tokens}")
    for index, batch in enumerate(sweep.batch_sizes):
        cells = [str(batch), f"{sweep.itl_ms[index]:.3f}"]
        if sweep.second_itl_ms:
            cells.append(f"{sweep.second_itl_ms[index]:.3f}")
        table.add_row(*cells)
    console.print(table)
    console.print(f"prefill fit: F {prefill.fit_f_ms:.3f} ms + {prefill.fit_c1_ms:.6f} ms/token "
                  f"+ {prefill.fit_c2_ms:.3e} ms/token^2 over lengths {list(prefill.prompt_tokens)}",
                  markup=False, highlight=False)
    if anchor.flags:
        console.print(f"flags: {', '.join(anchor.flags)}", markup=False, highlight=False)


@anchors_app.command("show")
@cli_errors
def show_anchor(anchor_id: str = typer.Argument(..., help="Anchor id (see `inferasim anchors list`)."),
                json_out: bool = JsonOpt) -> None:
    """One anchor: signature, sweeps, fit, provenance and coverage."""
    item = AnchorStore.default().entry(anchor_id)
    if json_out:
        return print_json(_show_json(item))
    _render_anchor(item.anchor, item.where)


@anchors_app.command("check")
@cli_errors
def check(files: Optional[list[str]] = typer.Argument(None, help="Anchor files to validate (default: the store)."),
          cluster: Optional[str] = typer.Option(None, "--cluster", "-c", help="Report anchors of other GPUs as foreign."),
          engine: Optional[str] = typer.Option(None, "--engine", "-e", help="Report other engines' anchors as foreign."),
          json_out: bool = JsonOpt) -> None:
    """Validate anchor files against the schema, or report the store's coverage and refusals."""
    gpu = parse_cluster(cluster).gpu.name if cluster else None
    engine_name = str(parse_engine(engine)) if engine else None
    reports = check_anchors(files, cluster_gpu=gpu, engine=engine_name)
    invalid = [r for r in reports if r.status == INVALID]
    if json_out:
        print_json([r.to_json() for r in reports])
    else:
        _render_reports([r for r in reports if r.status != INVALID])
        for report in invalid:
            err_console.print(f"error: {report.reasons[0]}", markup=False, highlight=False, soft_wrap=True)
    if invalid:
        raise typer.Exit(EXIT_USER_ERROR)


def _render_reports(reports: list) -> None:
    if not reports:
        console.print("No anchors to check.")
        return
    table = Table(title="Anchor check")
    table.add_column("id", overflow="fold")
    for column in ("where", "status", "coverage", "notes"):
        table.add_column(column)
    for report in reports:
        status = f"[red]{report.status}[/red]" if report.status == REFUSED else report.status
        table.add_row(report.anchor_id, report.where, status, report.coverage, "; ".join(report.reasons))
    console.print(table)
