"""What is known: `models`, `hardware`, `levers`, `objectives`, and the two checks that
need no prediction, `check` (structural legality + memory) and `memory` (METHOD §3.9)."""

from __future__ import annotations

from typing import Optional

import typer
from rich.table import Table

from agent.cli.app import app, cli_errors, console, print_json
from levers.catalog import LEVERS, Engine, parse_engine
from levers.configuration import Configuration, parse_config_text, parse_partial
from objectives.objectives import list_objectives
from predictor.cards.registry import list_cards
from predictor.feasibility import DEFAULT_CONTEXT_TOKENS, check_configuration, memory_for
from predictor.hardware import list_gpus
from predictor.target import resolve_target

JsonOpt = typer.Option(False, "--json", help="Machine-readable output.")
ModelOpt = typer.Option(..., "--model", "-m", help="Model name or alias, e.g. kimi-k3.")
ClusterOpt = typer.Option(None, "--cluster", "-c", help="GPU[xPER_NODE[xNODES]], default mi355x.")
EngineOpt = typer.Option(None, "--engine", "-e", help="vllm, sglang, atom or trtllm.")
ConfigOpt = typer.Option(None, "--config", help="lever=value pairs, comma-separated; may repeat.")


def _card_row(card) -> dict:
    return {
        "name": card.name, "hf_id": card.hf_id, "aliases": list(card.aliases),
        "total_params_b": round(card.total_params() / 1e9, 2),
        "active_params_b": round(card.active_params() / 1e9, 2),
        "layers": card.num_layers, "routed_experts": card.num_experts, "top_k": card.top_k,
        "max_context": card.max_context, "native_dtypes": card.native_dtypes.model_dump(),
        "source": card.source.model_dump() if hasattr(card.source, "model_dump") else card.source,
    }


@app.command("models")
@cli_errors
def models(json_out: bool = JsonOpt) -> None:
    """The embedded (and user-added) model cards."""
    rows = [_card_row(card) for card in list_cards()]
    if json_out:
        return print_json(rows)
    table = Table(title="Model cards")
    for column in ("name", "total B", "active B", "layers", "experts/top-k", "max context", "dtypes"):
        table.add_column(column)
    for row in rows:
        dtypes = row["native_dtypes"]
        table.add_row(row["name"], f"{row['total_params_b']:.1f}", f"{row['active_params_b']:.1f}",
                      str(row["layers"]), f"{row['routed_experts']}/{row['top_k']}",
                      str(row["max_context"]), f"w {dtypes['weight']} / e {dtypes['expert']}")
    console.print(table)


@app.command("hardware")
@cli_errors
def hardware(json_out: bool = JsonOpt) -> None:
    """The embedded GPU profiles."""
    gpus = list_gpus()
    if json_out:
        return print_json([gpu.model_dump(mode="json") for gpu in gpus])
    table = Table(title="GPU profiles")
    for column in ("GPU", "HBM GB", "HBM GB/s", "BF16 TF", "FP8 TF", "FP4 TF", "per node", "scale-up"):
        table.add_column(column)
    for gpu in gpus:
        table.add_row(gpu.name, f"{gpu.hbm_gb:g}", f"{gpu.hbm_bandwidth_gbps:g}", f"{gpu.bf16_tflops:g}",
                      f"{gpu.fp8_tflops:g}", f"{gpu.fp4_tflops:g}" if gpu.fp4_tflops else "-",
                      str(gpu.gpus_per_node), str(gpu.scale_up_domain))
    console.print(table)


def _lever_row(lever, engine: Engine | None) -> dict:
    row = {"index": lever.index, "name": lever.name, "kind": str(lever.kind),
           "description": lever.description, "optional": lever.optional}
    if lever.is_ranged:
        row["range"] = list(lever.bounds)
    elif lever.values is not None:
        engines = [engine] if engine else list(lever.values)
        row["values"] = {str(e): list(lever.legal_values(e)) for e in engines}
    else:
        row["values_text"] = lever.accepted_text()
    return row


@app.command("levers")
@cli_errors
def levers(engine: Optional[str] = EngineOpt, json_out: bool = JsonOpt) -> None:
    """The 36 levers with their kind and legal values (per engine)."""
    chosen = parse_engine(engine) if engine else None
    rows = [_lever_row(lever, chosen) for lever in LEVERS]
    if json_out:
        return print_json(rows)
    table = Table(title=f"Levers ({chosen or 'all engines'})")
    for column in ("#", "lever", "kind", "legal values", "description"):
        table.add_column(column)
    for lever, row in zip(LEVERS, rows):
        table.add_row(str(row["index"]), row["name"], row["kind"], lever.accepted_text(chosen),
                      row["description"])
    console.print(table)


@app.command("objectives")
@cli_errors
def objectives(json_out: bool = JsonOpt) -> None:
    """The 24 objectives with their direction and metric."""
    rows = [{"name": o.name, "group": o.group, "metric": o.metric, "direction": str(o.direction),
             "aliases": list(o.aliases), "description": o.description} for o in list_objectives()]
    if json_out:
        return print_json(rows)
    table = Table(title="Objectives")
    for column in ("objective", "group", "direction", "metric", "aliases"):
        table.add_column(column)
    for row in rows:
        table.add_row(row["name"], row["group"], row["direction"], row["metric"], ", ".join(row["aliases"]))
    console.print(table)


def configuration_from_options(config: list[str] | None, concurrency: int | None = None) -> Configuration:
    """``--config`` pairs over the lever defaults; ``--concurrency`` (when given) wins."""
    partial = parse_config_text(config)
    if concurrency is not None:
        partial.update(parse_partial({"concurrency": concurrency}))
    return Configuration().with_changes(partial)


@app.command("check")
@cli_errors
def check(model: str = ModelOpt, cluster: Optional[str] = ClusterOpt, engine: Optional[str] = EngineOpt,
          config: Optional[list[str]] = ConfigOpt, json_out: bool = JsonOpt) -> None:
    """Is a configuration legal (structure, engine support, fusions, 90% HBM)? Exit 1 if not."""
    target = resolve_target(model, cluster, engine)
    configuration = configuration_from_options(config)
    result = check_configuration(target.card, target.cluster, target.engine, configuration)
    if json_out:
        print_json({**target.to_json(), "config": configuration.to_dict(), **result.to_json()})
    elif result.legal:
        console.print(f"[green]legal[/green]: {configuration.describe()} on {target.cluster.spec} ({target.engine})")
    else:
        console.print(f"[red]illegal[/red]: {configuration.describe()}")
        for reason in result.reasons:
            console.print(f"  - {reason}", markup=False)
    if not result.legal:
        raise typer.Exit(1)


@app.command("memory")
@cli_errors
def memory(model: str = ModelOpt, cluster: Optional[str] = ClusterOpt,
           config: Optional[list[str]] = ConfigOpt,
           context: int = typer.Option(DEFAULT_CONTEXT_TOKENS, "--context", help="Tokens per sequence."),
           json_out: bool = JsonOpt) -> None:
    """Per-GPU memory: weights by component, KV per token, pool, largest concurrency."""
    target = resolve_target(model, cluster, "vllm")
    breakdown = memory_for(target.card, target.cluster, configuration_from_options(config), context)
    data = breakdown.to_json()
    if json_out:
        return print_json({"model": target.card.name, "cluster": target.cluster.spec,
                           "context_tokens": context, **data})
    table = Table(title=f"Memory per GPU: {target.card.name} on {target.cluster.spec}, context {context}")
    table.add_column("item")
    table.add_column("value", justify="right")
    for component, gb in data["weights_by_component_gb"].items():
        table.add_row(f"weights: {component}", f"{gb:.2f} GB")
    table.add_row("weights total", f"{data['weights_per_gpu_gb']:.2f} GB")
    table.add_row("KV bytes per token", f"{data['kv_bytes_per_token']:,}")
    table.add_row("state bytes per sequence", f"{data['state_bytes_per_sequence']:,}")
    table.add_row("KV pool", f"{data['kv_pool_per_gpu_gb']:.2f} GB")
    table.add_row("max concurrency", str(data["max_concurrency"]))
    table.add_row("fits (90% HBM)", "yes" if data["fits"] else f"no: {data.get('reason')}")
    console.print(table)
