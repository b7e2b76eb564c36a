"""`inferasim anchors list|show|check`: the anchor cache and its coverage (METHOD §4,
PRODUCT.md §2). Each command parses, calls one library function and renders."""

from __future__ import annotations

from typing import Optional

import typer

from agent.cli.app import EXIT_USER_ERROR, app, cli_errors, console, err_console, print_json
from agent.cli.info import JsonOpt, WideOpt
from agent.cli.render import id_line, list_text, number, paragraph, print_wide, say, table
from levers.catalog import parse_engine
from predictor.anchors.anchor import Anchor
from predictor.anchors.check import FOREIGN, INVALID, REFUSED, check_anchors, coverage_summary, plain_coverage
from predictor.anchors.store import AnchorStore, StoredAnchor
from predictor.cards.registry import load_card
from predictor.hardware import load_gpu, parse_cluster
from predictor.units import NS_PER_MS, US_PER_MS

anchors_app = typer.Typer(help="The anchor cache: list, show and check anchors.", no_args_is_help=True)
app.add_typer(anchors_app, name="anchors")
WIDE_HEADERS = ("id", "GPU", "engine", "model", "dtypes", "widths", "source", "where")

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
def list_anchors(model: Optional[str] = typer.Option(None, "--model", "-m", help="Only this model (name or alias)."),
                 gpu: Optional[str] = typer.Option(None, "--gpu", help="Only this GPU type, e.g. mi355x."),
                 engine: Optional[str] = typer.Option(None, "--engine", "-e", help="Only this engine."),
                 wide: bool = WideOpt, json_out: bool = JsonOpt) -> None:
    """Every anchor: embedded defaults and the user's cache ($INFERASIM_HOME/anchors)."""
    store = AnchorStore.default()
    keep = _filter(model, gpu, engine)
    rows = [_row(item) for item in store.entries() if keep(item.anchor.signature)]
    if json_out:
        return print_json(rows)
    _warn_problems(store)
    if not rows:
        filtered = " matching the filters" if (model or gpu or engine) else ""
        console.print(f"No anchors stored{filtered}. `inferasim harvest` measures one; "
                      "predictions run in simulate mode.")
        return
    if wide:
        grid = table(f"Anchors ({len(rows)})", [(header, "left") for header in WIDE_HEADERS])
        for row in rows:
            grid.add_row(row["id"], row["gpu"], row["engine"], row["model"], _dtypes_text(row), _widths_text(row),
                         row["source"], row["where"])
        return print_wide(console, grid)
    say(console, f"{len(rows)} anchors (id, then GPU / engine / model / dtypes / widths / source):")
    for row in rows:
        id_line(console, row["id"])
        paragraph(console, f"{row['gpu']} {row['engine']} {row['model']}; {_dtypes_text(row)}; "
                           f"{_widths_text(row)}; {row['source']} ({row['where']})", indent=4)


def _filter(model: str | None, gpu: str | None, engine: str | None):
    """A predicate on anchor signatures; names are resolved (with did-you-mean on a typo)."""
    model_name = load_card(model).name if model is not None else None
    gpu_name = load_gpu(gpu, "--gpu").name.lower() if gpu is not None else None
    engine_name = str(parse_engine(engine)) if engine is not None else None

    def keep(sig) -> bool:
        return ((model_name is None or sig.model == model_name)
                and (gpu_name is None or sig.accelerator.lower() == gpu_name)
                and (engine_name is None or sig.engine == engine_name))

    return keep


def _show_json(item: StoredAnchor) -> dict:
    return {"where": item.where, "path": item.path, "coverage": coverage_summary(item.anchor),
            "anchor": item.anchor.model_dump(mode="json")}


def _render_anchor(anchor: Anchor, where: str) -> None:
    sig, sweep, prefill = anchor.signature, anchor.decode_sweep, anchor.prefill_sweep
    id_line(console, anchor.id)
    say(console, f"{where}, source {anchor.provenance.source}, {anchor.provenance.timestamp}")
    paragraph(console, coverage_summary(anchor), first="coverage: ")
    signature = ", ".join(f"{key} {_value(value)}" for key, value in sig.model_dump().items() if value is not None)
    paragraph(console, signature, first="signature: ")
    if anchor.decode_points:
        # what the calibration is fitted to, each at its own context: the sweep summary
        # of a corpus anchor fills its cells across contexts, so it read the same steps at
        # 1,536 and 8,704 tokens, 1.4-1.8x from predict on the anchor's own points
        reproduced = any(p.reproduced_ms is not None for p in anchor.decode_points)
        say(console, "measured decode steps (each at its own context; the calibration is fitted to these"
                     + ("; its own layout prices the reproduced ones, where the model gives the rows' TPOT):"
                        if reproduced else "):"))
        columns = [("batch", "right"), ("context\ntokens", "right"), ("step ms", "right")]
        grid = table(None, columns + ([("reproduced\nms", "right")] if reproduced else []))
        for point in sorted(anchor.decode_points, key=lambda p: (p.context_tokens, p.batch)):
            cells = [str(point.batch), number(point.context_tokens), number(point.step_ms)]
            if reproduced:
                cells.append("-" if point.reproduced_ms is None else number(point.reproduced_ms))
            grid.add_row(*cells)
        console.print(grid)
    else:
        columns = [("batch", "right"), (f"ITL ms\n@ {number(sweep.prompt_tokens)} tok", "right")]
        if sweep.second_itl_ms:
            columns.append((f"ITL ms\n@ {number(sweep.second_prompt_tokens)} tok", "right"))
        say(console, "decode sweep (median single-wave ITL):")
        grid = table(None, columns)
        for index, batch in enumerate(sweep.batch_sizes):
            cells = [str(batch), number(sweep.itl_ms[index])]
            if sweep.second_itl_ms:
                cells.append(number(sweep.second_itl_ms[index]))
            grid.add_row(*cells)
        console.print(grid)
    paragraph(console, f"F {number(prefill.fit_f_ms)} ms + {number(prefill.fit_c1_ms * US_PER_MS)} us/token "
                       f"+ {number(prefill.fit_c2_ms * NS_PER_MS)} ns/token^2 over prompts of "
                       f"{list_text(prefill.prompt_tokens)} tokens", first="prefill fit: ")
    if anchor.flags:
        paragraph(console, ", ".join(anchor.flags), first="flags: ")


def _value(value) -> str:
    if isinstance(value, (list, tuple)):
        return list_text(value)
    return number(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else str(value)


@anchors_app.command("show")
@cli_errors
def show_anchor(anchor_id: str = typer.Argument(..., help="Anchor id (see `inferasim anchors list`)."),
                json_out: bool = JsonOpt) -> None:
    """One anchor: signature, sweeps, fit, provenance and coverage."""
    item = AnchorStore.default().entry(anchor_id)
    if json_out:
        return print_json(_show_json(item))
    _render_anchor(item.anchor, item.where)


MAX_ERROR_LINES = 20     # invalid or refused files said one line each, then counted


@anchors_app.command("check")
@cli_errors
def check(files: Optional[list[str]] = typer.Argument(None, help="Anchor files to validate (default: the store)."),
          cluster: Optional[str] = typer.Option(None, "--cluster", "-c", help="Report anchors of other GPUs as foreign."),
          engine: Optional[str] = typer.Option(None, "--engine", "-e", help="Report other engines' anchors as foreign."),
          plain: bool = typer.Option(False, "--plain-coverage", help=(
              "Instead: how many stored anchors calibrate their own plain configuration in-ladder (widths, "
              "precision and speculation named; every other lever left to the anchor's recipe).")),
          json_out: bool = JsonOpt) -> None:
    """Validate anchor files against the schema, or report the store's coverage and refusals."""
    if plain:
        return _plain(json_out)
    gpu = parse_cluster(cluster).gpu.name if cluster else None
    engine_name = str(parse_engine(engine)) if engine is not None else None
    reports = check_anchors(files, cluster_gpu=gpu, engine=engine_name)
    invalid = [r for r in reports if r.status == INVALID]
    unusable = [r for r in reports if r.status == REFUSED and not all(x.startswith(FOREIGN) for x in r.reasons)]
    if json_out:
        print_json([r.to_json() for r in reports])
    else:
        if not reports or len(invalid) < len(reports):   # not "no anchors" when every file was refused
            _render_reports([r for r in reports if r.status != INVALID])
        errors = [f"error: {report.reasons[0]}" for report in invalid]
        errors += [f"error: anchor {report.anchor_id} ({report.where}) is refused: {'; '.join(report.reasons)}"
                   for report in unusable]
        for line in errors[:MAX_ERROR_LINES]:
            err_console.print(line, markup=False, highlight=False, soft_wrap=True)
        if len(errors) > MAX_ERROR_LINES:   # 2,000 bad files printed 2,000 lines
            err_console.print(f"error: ... and {len(errors) - MAX_ERROR_LINES:,} more ({len(errors):,} in all; "
                              "--json lists every one)", markup=False, highlight=False, soft_wrap=True)
    if invalid or unusable:  # a foreign anchor (another GPU or engine than --cluster/--engine) is not an error
        raise typer.Exit(EXIT_USER_ERROR)


def _plain(json_out: bool) -> None:
    found = plain_coverage(AnchorStore.default())
    if json_out:
        return print_json(found.to_json())
    say(console, f"plain configurations anchored in-ladder by their own anchor: {found.anchored} of {found.total}")
    for anchor_id, why in found.misses:
        id_line(console, anchor_id)
        paragraph(console, why, indent=4)


def _render_reports(reports: list) -> None:
    if not reports:
        console.print("No anchors to check.")
        return
    say(console, f"Anchor check: {len(reports)} anchors (id, then where / status / coverage / notes)")
    for report in reports:
        id_line(console, report.anchor_id, style="bold red" if report.status == REFUSED else "bold")
        notes = "; ".join(report.reasons)
        paragraph(console, f"{report.where}, {report.status}; {report.coverage}" + (f"; {notes}" if notes else ""),
                  indent=4)
