"""`inferasim pareto`: sweep the legal space of one model and keep the throughput-per-GPU
vs interactivity frontier (PRODUCT.md §2, METHOD §8).

Default workload `1k/1k` (analytical); `--workload agentic` runs the DES per point.
Runs on every local core, or on Ray with `--ray auto|ADDRESS`. Writes `points.csv`,
`frontier.csv`, `sweep.json` and `pareto.png` into `--out`, prints the frontier as a
table (or `--json`), and shows a progress bar only on a terminal.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from agent.cli.app import MAX_DES_REQUESTS, SEED, WORKERS, app, cli_errors, console, int_option, output_dir, print_json
from agent.cli.info import ClusterOpt, EngineOpt, JsonOpt, ModelOpt
from agent.cli.predict import target_with_default_engine
from predictor.sweep.executors import ProgressFn, make_executor
from predictor.sweep.output import sweep_json, write_sweep
from predictor.sweep.run import SweepResult, parse_modes, run_sweep
from predictor.sweep.space import DEFAULT_MAX_SPEC_DEPTH, SpaceOptions, spread
from predictor.workload import parse_workload

MAX_TABLE_ROWS = 30
MAX_POINTS = 100_000_000


@app.command("pareto")
@cli_errors
def pareto_command(
    model: str = ModelOpt, cluster: Optional[str] = ClusterOpt, engine: Optional[str] = EngineOpt,
    workload: str = typer.Option("1k/1k", "--workload", "-w", help="1k/1k, 8k/1k, ISL/OSL or agentic (DES per point)."),
    modes: str = typer.Option("anchored,simulate", "--modes", help="Step-model modes kept: anchored, simulate."),
    out: Optional[Path] = typer.Option(None, "--out", help="Output folder (default ./pareto-MODEL-CLUSTER-ENGINE)."),
    ray: Optional[str] = typer.Option(None, "--ray", help="Run on Ray: 'auto' (Ray's default instance) or ADDRESS."),
    workers: Optional[int] = typer.Option(None, "--workers", parser=WORKERS, help="Local processes (default: every core)."),
    max_points: Optional[int] = typer.Option(None, "--max-points", parser=int_option("--max-points", 1, MAX_POINTS),
                                             help="Cap on predictions (whole families sampled, seeded)."),
    max_spec_depth: int = typer.Option(DEFAULT_MAX_SPEC_DEPTH, "--max-spec-depth", parser=int_option("--max-spec-depth", 0, 8),
                                       help="Deepest speculative depth tried (best kept per concurrency)."),
    disaggregated: bool = typer.Option(True, "--disaggregated/--no-disaggregated", help="Sweep prefill/decode splits."),
    num_requests: Optional[int] = typer.Option(None, "--num-requests", parser=int_option("--num-requests", 1, MAX_DES_REQUESTS),
                                              help="Requests per DES run (agentic)."),
    seed: int = typer.Option(0, "--seed", parser=SEED, help="Seed for DES runs and --max-points sampling."),
    plot: bool = typer.Option(True, "--plot/--no-plot", help="Write pareto.png (needs matplotlib)."),
    json_out: bool = JsonOpt,
) -> None:
    """Sweep layouts, precisions, splits, concurrency and speculation; write the frontier."""
    target = target_with_default_engine(model, cluster, engine)
    spec = parse_workload(workload)
    kept_modes = parse_modes(modes)
    options = SpaceOptions(max_spec_depth=max_spec_depth, include_disaggregated=disaggregated,
                           max_points=max_points, seed=seed)
    folder = output_dir(out or Path(f"pareto-{target.card.name}-{target.cluster.spec}-{target.engine}"), "--out")
    executor = make_executor(ray, workers)
    with _progress(enabled=console.is_terminal and not json_out) as on_progress:
        result = run_sweep(target, spec, options=options, executor=executor, modes=kept_modes, seed=seed,
                           num_requests=num_requests, on_progress=on_progress)
    paths = write_sweep(result, folder, plot=plot)
    if json_out:
        print_json(sweep_json(result, paths))
    else:
        render_sweep(result, paths)
    if not result.points:
        raise typer.Exit(1)


class _progress:
    """A rich progress bar over groups when enabled; a no-op callback otherwise."""

    def __init__(self, enabled: bool) -> None:
        self.bar = Progress(TextColumn("pricing"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                            console=console, transient=True) if enabled else None

    def __enter__(self) -> ProgressFn | None:
        if self.bar is None:
            return None
        self.bar.start()
        task = self.bar.add_task("pricing", total=None)
        return lambda done, total: self.bar.update(task, completed=done, total=total)

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()


def render_sweep(result: SweepResult, paths: dict[str, Path]) -> None:
    target = result.target
    console.print(f"{result.num_priced:,} predictions, {result.num_points:,} points kept "
                  f"({result.num_groups:,} groups) in {result.wall_s:.1f} s "
                  f"({result.points_per_s:,.0f} predictions/s, {result.backend} x{result.workers}); "
                  f"{result.num_illegal_families:,} illegal shapes skipped", highlight=False)
    if result.num_sampled_out:
        console.print(f"--max-points: {result.num_sampled_out:,} predictions sampled out", highlight=False)
    frontier = result.frontier
    if not frontier:
        _render_empty(result)
        return
    table = Table(title=f"Pareto frontier: {target['model']} on {target['cluster']} ({target['engine']}), "
                        f"{result.workload.name}")
    for column in ("tok/s/user", "tok/s/GPU", "TTFT ms", "GPUs", "mode"):
        table.add_column(column, justify="left" if column == "mode" else "right", no_wrap=True)
    table.add_column("configuration", overflow="fold")
    for point in spread(frontier, MAX_TABLE_ROWS):
        metrics = point.metrics
        table.add_row(f"{point.interactivity:,.1f}", f"{point.throughput_per_gpu:,.0f}",
                      _ms(metrics.get("ttft_ms_mean")), str(point.config.total_gpus), str(point.mode),
                      point.config.describe())
    console.print(table)
    if len(frontier) > MAX_TABLE_ROWS:
        console.print(f"{MAX_TABLE_ROWS} of {len(frontier)} frontier points shown; all in {paths['frontier']}",
                      highlight=False)
    console.print("files: " + ", ".join(str(path) for path in paths.values()), highlight=False)


def _render_empty(result: SweepResult) -> None:
    target = result.target
    where = f"{target['model']} on {target['cluster']} ({target['engine']})"
    if result.num_excluded_by_mode:
        console.print(f"[red]no point in modes {', '.join(result.modes)}[/red] for {where}: "
                      f"{result.num_excluded_by_mode:,} points excluded by --modes "
                      f"(the others are rank-only or anchored: see --modes)", highlight=False)
        return
    console.print(f"[red]no legal point[/red] for {where}")
    for reason, count in result.illegal_reasons:
        console.print(f"  - {count} x {reason}", markup=False)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"
