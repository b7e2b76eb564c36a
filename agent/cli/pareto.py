"""`inferasim pareto`: sweep the legal space of one model and keep the output
throughput-per-GPU vs interactivity frontier (PRODUCT.md §2, METHOD §8).

Default workload `1k/1k` (analytical); `--workload agentic` runs the DES per point.
Runs on every local core, or on Ray with `--ray auto|ADDRESS`. Writes `points.csv`,
`frontier.csv`, `sweep.json` and `pareto.png` into `--out`, prints the frontier as a
text chart and a table (or `--json`), and shows its progress and ETA: a bar on a terminal, a line
on stderr at every tenth of the groups otherwise.
The frontier is taken among points with a mean TTFT under `--ttft-max` (default 10 s;
`none` lifts the cap) that meet every `--slo` (`predictor.sweep.frontier`).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from agent.cli.app import (
    MAX_DES_REQUESTS,
    SEED,
    WORKERS,
    app,
    cli_errors,
    console,
    err_console,
    int_option,
    output_dir,
    print_json,
)
from agent.cli.chart import frontier_chart, key_of
from agent.cli.info import ClusterOpt, EngineOpt, JsonOpt, ModelOpt, target_with_default_engine
from agent.cli.render import config_text, number, paragraph, say, table
from levers.errors import InputError, accepted_list
from levers.inputs import parse_number
from objectives.objectives import LATENCY_STATS, latency_key
from objectives.slo import SLO_METRICS, parse_slos
from predictor.sweep.executors import POINT_METRICS, ProgressFn, make_executor
from predictor.sweep.frontier import DEFAULT_TTFT_MAX_MS, Bound, FrontierRule
from predictor.sweep.output import sweep_json, write_sweep
from predictor.sweep.run import ALL_MODES, SweepResult, parse_modes, run_sweep
from predictor.sweep.space import DEFAULT_MAX_SPEC_DEPTH, SpaceOptions, spread, sweeps_splits
from predictor.target import check_workload_context
from predictor.units import MS_PER_S
from predictor.workload import parse_workload

MAX_TABLE_ROWS = 30
MAX_POINTS = 100_000_000
MIN_TTFT_MAX_S = 0.001


@app.command("pareto")
@cli_errors
def pareto_command(
    model: str = ModelOpt, cluster: Optional[str] = ClusterOpt, engine: Optional[str] = EngineOpt,
    workload: str = typer.Option("1k/1k", "--workload", "-w", help="1k/1k, 8k/1k, ISL/OSL or agentic (DES per point)."),
    modes: str = typer.Option("anchored,rank-only", "--modes",
                              help="Step-model modes kept: anchored, rank-only (simulate mode; 'simulate' is an alias)."),
    out: Optional[str] = typer.Option(None, "--out", help="Output folder (default ./pareto-MODEL-CLUSTER-ENGINE)."),
    ray: Optional[str] = typer.Option(None, "--ray", help="Run on Ray: 'auto' (Ray's default instance) or ADDRESS."),
    workers: Optional[int] = typer.Option(None, "--workers", parser=WORKERS, help="Local processes (default: every core)."),
    max_points: Optional[int] = typer.Option(None, "--max-points", parser=int_option("--max-points", 1, MAX_POINTS),
                                             help="Cap on predictions (whole families sampled, seeded)."),
    max_spec_depth: int = typer.Option(DEFAULT_MAX_SPEC_DEPTH, "--max-spec-depth", parser=int_option("--max-spec-depth", 0, 8),
                                       help="Deepest speculative depth tried (best kept per concurrency)."),
    disaggregated: bool = typer.Option(True, "--disaggregated/--no-disaggregated", help="Sweep prefill/decode splits (on an engine whose launch can start them)."),
    num_requests: Optional[int] = typer.Option(None, "--num-requests", parser=int_option("--num-requests", 1, MAX_DES_REQUESTS),
                                              help="Requests per DES run (agentic)."),
    seed: int = typer.Option(0, "--seed", parser=SEED, help="Seed for DES runs and --max-points sampling."),
    plot: bool = typer.Option(True, "--plot/--no-plot", help="Write pareto.png."),
    ttft_max: str = typer.Option(f"{DEFAULT_TTFT_MAX_MS / MS_PER_S:g}", "--ttft-max",
                                 help="Seconds: points with a longer mean TTFT stay off the frontier ('none': no cap)."),
    slo: Optional[list[str]] = typer.Option(None, "--slo", help="Frontier points must meet it, e.g. "
                                            "interactivity>=25 (drawn as a line), p90-itl<=50 (repeatable)."),
    json_out: bool = JsonOpt,
) -> None:
    """Sweep layouts, precisions, splits, concurrency and speculation; write the frontier.

    Exit 1 when the frontier is empty (no legal point, or none the --slo / --ttft-max
    rule keeps); the files are written either way."""
    rule = frontier_rule(ttft_max, slo)
    target = target_with_default_engine(model, cluster, engine)
    spec = parse_workload(workload)
    check_bounds_recorded(rule, spec)
    if num_requests is not None and spec.is_fixed:
        raise InputError("--num-requests", f"a {spec.name} sweep is priced analytically (no DES replay), so a "
                         "replay length has no use", "--workload agentic (the DES), or no --num-requests")
    check_workload_context(target.card, spec.context_tokens, spec.name)
    kept_modes = parse_modes(modes)
    options = SpaceOptions(max_spec_depth=max_spec_depth, include_disaggregated=disaggregated,
                           max_points=max_points, seed=seed)
    folder = output_dir(out if out is not None else f"pareto-{target.card.name}-{target.cluster.spec}-{target.engine}",
                        "--out")
    executor = make_executor(ray, workers)
    with _progress(enabled=console.is_terminal and not json_out) as on_progress:
        result = run_sweep(target, spec, options=options, executor=executor, modes=kept_modes, seed=seed,
                           num_requests=num_requests, on_progress=on_progress, rule=rule)
    paths = write_sweep(result, folder, plot=plot)
    if json_out:
        print_json(sweep_json(result, paths))
    else:
        render_sweep(result, paths)
        if disaggregated and not sweeps_splits(target.engine, disaggregated):
            say(console, f"no prefill/decode splits swept: {target.engine}'s launch cannot start split pools")
    if not result.frontier:     # no point, or none the rule keeps: exit 1 as a search with no best does
        raise typer.Exit(1)


def frontier_rule(ttft_max: str, slos: list[str] | None) -> FrontierRule:
    """``--ttft-max`` (seconds or ``none``) and ``--slo`` as the sweep's frontier rule."""
    cap_ms = None
    if ttft_max.strip().lower() != "none":
        try:
            cap_ms = parse_number(ttft_max, "--ttft-max", low=MIN_TTFT_MAX_S) * MS_PER_S
        except InputError as error:
            raise InputError(error.what, error.problem, f"seconds >= {MIN_TTFT_MAX_S:g}, e.g. 10, or none") from None
    bounds = []
    for parsed in parse_slos(slos or ()):
        if parsed.key not in POINT_METRICS:
            raise InputError("--slo", f"{parsed} bounds {parsed.key}, which sweep points do not record",
                             slo_choices())
        bounds.append(Bound(parsed.key, parsed.op, parsed.value, str(parsed)))
    return FrontierRule(cap_ms, tuple(bounds))


def recorded_slos() -> list[str]:
    """The SLO spellings (`objectives.slo`) whose metric sweep points record, e.g. p90-itl."""
    return [f"{stat}-{metric}" for metric, recorded in SLO_METRICS.items() for stat in LATENCY_STATS
            if latency_key(recorded, stat) in POINT_METRICS]


DES_ONLY_METRICS = ("ttft_ms_p90", "itl_ms_p90")   # tails: a DES replay records them, the analytical model not


def slo_choices() -> str:
    """The bounds a sweep can judge, as one accepted text: every workload's, then the
    tails only a DES sweep records (one list for both errors: the first listed p90-ttft
    and the second then refused it for a fixed-length sweep)."""
    tails = {f"{stat}-{metric}" for metric, recorded in SLO_METRICS.items() for stat in LATENCY_STATS
             if latency_key(recorded, stat) in DES_ONLY_METRICS}
    every = [slo for slo in recorded_slos() if slo not in tails]
    return f"{accepted_list(every)}; with --workload agentic (the DES) also {', '.join(sorted(tails))}"


def check_bounds_recorded(rule: FrontierRule, spec) -> None:
    """A fixed-length sweep is priced analytically (means, no tails): a bound on a tail
    would admit every point (nothing to check), so it is refused, not ignored."""
    if not spec.is_fixed:
        return
    for bound in rule.bounds:
        if bound.key in DES_ONLY_METRICS:
            raise InputError("--slo", f"{bound.text} bounds {bound.key}, which a fixed-length sweep does not record "
                             "(priced analytically: means, not tails)", slo_choices())


class _progress:
    """A rich progress bar over groups, with the time remaining at the rate so far (an
    agentic sweep runs the DES per point: minutes), on a terminal; otherwise (a log, CI,
    nohup) a line on stderr at every tenth of the groups with the same figures."""

    def __init__(self, enabled: bool) -> None:
        self.bar = Progress(TextColumn("pricing"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                            TextColumn("ETA"), TimeRemainingColumn(), console=console, transient=True) \
            if enabled else None

    def __enter__(self) -> ProgressFn:
        if self.bar is None:
            return _progress_lines(time.perf_counter())
        self.bar.start()
        task = self.bar.add_task("pricing", total=None)
        return lambda done, total: self.bar.update(task, completed=done, total=total)

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()


def render_sweep(result: SweepResult, paths: dict[str, Path]) -> None:
    target = result.target
    say(console, f"{number(result.num_priced)} predictions, {number(result.num_points)} points kept "
                 f"({number(result.num_groups)} groups) in {number(result.wall_s)} s "
                 f"({number(result.points_per_s)} predictions/s, {result.backend} x{result.workers}); "
                 f"{number(result.num_illegal_families)} illegal shapes skipped")
    if result.num_sampled_out:
        say(console, f"--max-points: {number(result.num_sampled_out)} predictions sampled out")
    frontier = result.frontier
    if not frontier:
        _render_empty(result)
        return
    say(console, f"Pareto frontier: {target['model']} on {target['cluster']} ({target['engine']}), "
                 f"{result.workload.name}; among points with {result.rule.describe()} "
                 f"({number(result.num_ineligible)} excluded)")
    shown = spread(frontier, MAX_TABLE_ROWS)
    for line in frontier_chart([(p.interactivity, p.output_throughput_per_gpu) for p in shown],
                               min(console.width, 78), "tok/s/user (p50)", "output tok/s/GPU"):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    grid = table(None, [("key", "left"), ("tok/s/user\np50", "right"), ("TPOT\np50 ms", "right"),
                        ("output tok/s\nper GPU", "right"), ("total tok/s\nper GPU", "right"),
                        ("TTFT\nmean ms", "right"), ("GPUs", "right"),
                        ("mode", "left"), ("configuration", "left")], wrap_last=True)
    for index, point in enumerate(shown):
        metrics = point.metrics
        grid.add_row(key_of(index), number(point.interactivity), number(metrics.get("tpot_ms_p50")),
                     number(point.output_throughput_per_gpu), number(metrics.get("throughput_per_gpu")),
                     number(metrics.get("ttft_ms_mean")),
                     str(point.config.total_gpus), str(point.mode), config_text(point.config))
    console.print(grid)
    if len(frontier) > MAX_TABLE_ROWS:
        say(console, f"{MAX_TABLE_ROWS} of {len(frontier)} frontier points shown; all in {paths['frontier']}")
    say(console, "files: " + ", ".join(str(path) for path in paths.values()))


def _render_empty(result: SweepResult) -> None:
    target = result.target
    where = f"{target['model']} on {target['cluster']} ({target['engine']})"
    if result.num_excluded_by_mode:
        others = ", ".join(sorted({str(mode) for mode in ALL_MODES} - set(result.modes)))
        sampled = (f"; --max-points left {number(result.num_sampled_out)} predictions out before the mode "
                   f"filter: raise it to reach more" if result.num_sampled_out else "")
        console.print(f"[red]no point in modes {', '.join(result.modes)}[/red] for {where}: "
                      f"{result.num_excluded_by_mode:,} points excluded by --modes (they are {others}; "
                      f"see --modes){sampled}", highlight=False)
        return
    if result.points:
        say(console, f"no point meets the frontier rule ({result.rule.describe()}) for {where}: "
                     f"{number(result.num_ineligible)} points excluded; see --ttft-max and --slo")
        return
    console.print(f"[red]no legal point[/red] for {where}")
    for reason, count in result.illegal_reasons:
        paragraph(console, reason, first=f"  - {count} x ")


PROGRESS_LINES = 10     # lines a sweep's progress prints off a terminal
PROGRESS_QUIET_S = 2.0  # ... none before this much time (a sub-second analytical sweep needs no ETA)


def _progress_lines(started: float) -> ProgressFn:
    """Progress off a terminal: ``pricing: done/total groups, elapsed, ETA`` on stderr each
    time another tenth of the groups is done, once the sweep has run `PROGRESS_QUIET_S`."""
    printed = [-1]

    def report(done: int, total: int) -> None:
        tenth = done * PROGRESS_LINES // total if total else 0
        elapsed = time.perf_counter() - started
        if not total or tenth == printed[0] or elapsed < PROGRESS_QUIET_S:
            return
        printed[0] = tenth
        eta = f"{elapsed / done * (total - done):.1f} s" if done else "-"
        err_console.print(f"pricing: {done:,}/{total:,} groups, {elapsed:.1f} s elapsed, ETA {eta}",
                          markup=False, highlight=False)

    return report
