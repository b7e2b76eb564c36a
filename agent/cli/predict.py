"""`inferasim predict`: price one configuration (METHOD §2-§4).

Default workload is `1k/1k` (the analytical predictor); `--workload agentic` runs the
DES. A configuration that does not fit prints the memory reason, `metrics: null`, and
exits 1.
"""

from __future__ import annotations

from typing import Optional

import typer
from rich.table import Table

from agent.cli.app import app, cli_errors, console, print_json
from agent.cli.info import ClusterOpt, ConfigOpt, EngineOpt, JsonOpt, ModelOpt, configuration_from_options
from levers.configuration import Configuration
from predictor.predict import default_store, predict
from predictor.prediction import Prediction
from predictor.target import Target, resolve_target
from predictor.units import US_PER_MS
from predictor.workload import parse_workload


def target_with_default_engine(model: str, cluster: str | None, engine: str | None) -> Target:
    """PRODUCT.md §2: the first engine with an anchor for the model there, else vllm."""
    return resolve_target(model, cluster, engine, has_anchor=default_store().has_anchor)


@app.command("predict")
@cli_errors
def predict_command(
    model: str = ModelOpt, cluster: Optional[str] = ClusterOpt, engine: Optional[str] = EngineOpt,
    config: Optional[list[str]] = ConfigOpt,
    workload: str = typer.Option("1k/1k", "--workload", "-w", help="1k/1k, 8k/1k, ISL/OSL or agentic."),
    concurrency: Optional[int] = typer.Option(None, "--concurrency", help="Overrides the concurrency lever."),
    seed: int = typer.Option(0, "--seed", help="Seed for DES runs."),
    json_out: bool = JsonOpt,
) -> None:
    """Price one configuration: metrics, mode (anchored / rank-only), flags, memory, breakdown."""
    target = target_with_default_engine(model, cluster, engine)
    configuration = configuration_from_options(config, concurrency)
    spec = parse_workload(workload)
    result = predict(target, configuration, spec, seed=seed)
    if json_out:
        print_json({**target.to_json(), "workload": spec.name, "config": configuration.to_dict(),
                    **result.to_json()})
    else:
        render_prediction(target, configuration, spec.name, result)
    if result.metrics is None:
        raise typer.Exit(1)


def render_prediction(target: Target, configuration: Configuration, workload: str, result: Prediction) -> None:
    title = (f"{target.card.name} on {target.cluster.spec} ({target.engine}), {workload}: "
             f"{configuration.describe()}")
    if result.metrics is None:
        console.print(f"[red]does not fit / illegal[/red]: {title}")
        for reason in result.reasons:
            console.print(f"  - {reason}", markup=False)
        console.print("metrics: null")
        return
    table = Table(title=title)
    table.add_column("metric")
    table.add_column("value", justify="right")
    for name, value in (result.headline() or {}).items():
        table.add_row(name, f"{value:,.2f}")
    console.print(table)
    console.print(f"mode: [bold]{result.mode}[/bold]   anchor: {result.anchor_id or '-'}   source: {result.source}")
    if result.flags:
        console.print("flags: " + "; ".join(result.flags), markup=False)
    memory = result.memory.to_json() if result.memory else {}
    if memory:
        console.print(f"memory per GPU: weights {memory['weights_per_gpu_gb']:.1f} GB, "
                      f"KV pool {memory['kv_pool_per_gpu_gb']:.1f} GB, max concurrency {memory['max_concurrency']}")
    step = result.breakdown.get("decode_step")
    if step:
        terms = ", ".join(f"{k} {v / US_PER_MS:.2f}" for k, v in step.items() if k != "total_us" and v)
        console.print(f"decode step {step['total_us'] / US_PER_MS:.2f} ms = {terms} (ms)", markup=False)
    for item in result.fusion_opportunities:
        console.print(f"fusion opportunity: {item.get('name')} saves {item.get('saving_us', 0):.1f} us "
                      f"({100 * item.get('share', 0):.1f}% of the decode step)", markup=False)
