"""`inferasim simulate`: run the discrete-event simulator (METHOD §5) on a synthetic
workload or a trace and print latency distributions, throughput and prefix hit rates.

The step model comes from the predictor's anchoring, as `predict` takes it (unset levers
take the calibrating anchor's recipe), and so does the mode: anchored or rank-only by the
measured error of the transfer kinds (`predictor.uncertainty`); the KV pools from the
memory model. `--config` may repeat (merged left to right, later keys win);
`--concurrency` overrides the concurrency lever. A rich progress bar shows on a terminal.
A configuration that does not fit or is illegal is a result, as `predict` reports it: the
reasons, `metrics: null` and exit 1.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn
from agent.cli.app import (
    ALLOW_LARGE_HELP,
    LARGE_INPUT_BYTES,
    SEED,
    app,
    check_des_requests,
    check_trace_requests,
    cli_errors,
    console,
    int_option,
    output_file,
    print_json,
)
from agent.cli.info import (ClusterOpt, ConfigOpt, EngineOpt, JsonOpt, ModelOpt, configuration_from_options,
                            target_with_default_engine)
from agent.cli.render import config_text, does_not_fit, number, paragraph, percent, say, table, with_interval
from levers.configuration import Configuration, parse_config_text
from levers.errors import InputError
from levers.legality import context_reasons
from predictor.feasibility import DEFAULT_CONTEXT_TOKENS, check_configuration
from predictor.anchors.anchoring import Anchoring
from predictor.sim import SimOptions, SimResult, load_trace, simulate
from predictor.sim.results import JSON_STATS
from predictor.sim.trace_base import ArrivalMode
from predictor.uncertainty import shipped_error_bars
from predictor.step.cost import StepModel
from predictor.workload import parse_workload

TraceOpt = typer.Option(None, "--trace", help="Mooncake JSONL/JSON, agentic sessions, or CSV.")
CsvOpt = typer.Option(None, "--csv", help="Write one row per request of the first replication to this CSV file.")
LATENCIES = (("ttft_ms", "TTFT from arrival", "ms"), ("ttft_admission_ms", "TTFT from admission", "ms"),
             ("itl_ms", "ITL", "ms"), ("tpot_ms", "TPOT", "ms"),
             # pN of a speed is the floor N% of requests get (the 100-Nth percentile), as P90
             # interactivity is read: its columns fall from p50 on
             ("interactivity_tok_s", "1/TPOT (pN: floor N% get)", "tok/s/user"),
             ("e2e_ms", "E2E", "ms"))


def step_model_factory_for(anchoring: Anchoring) -> Callable[[Configuration], StepModel]:
    """One step model per replica configuration, from the predictor's anchoring (cached per
    run), as `predict` prices its DES replays."""
    models: dict[Configuration, StepModel] = {}

    def factory(config: Configuration) -> StepModel:
        if config not in models:
            models[config] = anchoring.model(config)
        return models[config]

    factory.models = models
    return factory


def _workload(workload: str | None, trace: Path | None, skip_bad_lines: bool, allow_large: bool):
    if workload and trace:
        raise InputError("--trace", "give --workload or --trace, not both", "one workload source")
    if skip_bad_lines and trace is None:
        raise InputError("--skip-bad-lines", "given without --trace (it skips a trace file's malformed lines)",
                         "--trace FILE --skip-bad-lines")
    if trace is not None:
        replay = load_trace(trace, skip_bad_lines=skip_bad_lines, max_bytes=LARGE_INPUT_BYTES if allow_large else None)
        check_trace_requests(replay.num_requests, f"--trace {trace.name}", allow_large)
        return replay
    return parse_workload(workload)


@app.command("simulate")
@cli_errors
def simulate_command(
    model: str = ModelOpt, cluster: str | None = ClusterOpt, engine: str | None = EngineOpt,
    config: list[str] | None = ConfigOpt,
    workload: str | None = typer.Option(None, "--workload", "-w", help="1k/1k, ISL/OSL or agentic (default)."),
    trace: Path | None = TraceOpt,
    concurrency: int | None = typer.Option(None, "--concurrency", parser=int_option("--concurrency", 1, 65536),
                                           help="Overrides the concurrency lever."),
    requests: int | None = typer.Option(None, "--requests", parser=int_option("--requests", 1),
                                        help="Requests to release (default: workload's)."),
    seed: int = typer.Option(0, "--seed", parser=SEED, help="Seed of the workload and router generators."),
    replications: int = typer.Option(1, "--replications", parser=int_option("--replications", 1, 32),
                                     help="Independent workload draws; means with 90% intervals."),
    skip_bad_lines: bool = typer.Option(False, "--skip-bad-lines", help="Skip malformed trace lines, count them."),
    allow_large: bool = typer.Option(False, "--allow-large", help=ALLOW_LARGE_HELP),
    csv: str | None = CsvOpt,
    json_out: bool = JsonOpt,
) -> None:
    """Run the discrete-event simulator: TTFT/ITL/TPOT/E2E distributions, throughput, hit rates."""
    check_des_requests(requests, "--requests", allow_large)
    csv = output_file(csv, "--csv")     # as typed: '' and a trailing '/' are refused, not read as '.'
    target = target_with_default_engine(model, cluster, engine)
    configuration = configuration_from_options(config, concurrency, target.engine)
    replay = _workload(workload, trace, skip_bad_lines, allow_large)
    given = "--concurrency" if concurrency is not None else (
        "--config concurrency" if "concurrency" in parse_config_text(config) else None)
    if given and getattr(replay, "mode", None) is ArrivalMode.OPEN:
        # its timestamps set the load: the option changed no figure, only the mode judged at it
        raise InputError(given, f"does not apply to {trace.name}, an open-loop trace (its timestamps "
                         "set the load)", "a concurrency with a closed-loop trace (sessions) or a --workload")
    context_tokens = getattr(replay, "context_tokens", DEFAULT_CONTEXT_TOKENS)
    too_long = context_reasons(context_tokens, target.card)
    if too_long:   # the workload's requests, not the configuration, are what does not fit
        raise InputError("--trace" if trace is not None else "--workload", too_long[0],
                         f"requests of at most {target.card.max_context:,} tokens, prompt and output")
    # unset levers take the calibrating anchor's recipe, as `predict` takes them: the same
    # command line prices the same kernels in both
    anchoring = Anchoring.of(target, context_tokens=getattr(replay, "priced_context_tokens", None),
                             split=configuration.disaggregated)
    priced = anchoring.priced(configuration)[0]
    feasibility = check_configuration(target.card, target.cluster, target.engine, priced, context_tokens)
    if not feasibility.legal:   # a result, as predict reports it: why, and exit 1
        _does_not_fit(target, replay.name, configuration, feasibility, json_out)
        raise typer.Exit(1)
    factory = step_model_factory_for(anchoring)
    options = SimOptions(keep_rows=csv is not None)
    with _progress(console.is_terminal and not json_out) as report:
        result = simulate(target, priced, replay, step_model_factory=factory, num_requests=requests,
                          seed=seed, progress=report, options=options, replications=replications)
    if csv is not None:
        result.write_csv(csv)
    models = list(factory.models.values())
    # the mode follows the measured error of the transfer kinds, as `predict` judges it
    # (a step model's own label says only whether an anchor calibrates it)
    mode = shipped_error_bars().mode(anchoring.kinds, anchoring.has_anchor)
    info = {**target.to_json(), "workload": replay.name,
            "configuration": configuration.to_dict(), "configuration_text": configuration.describe(),
            "modes": [str(mode)],
            "flags": sorted({f for m in models for f in m.flags}) + list(result.flags) + _capped(requests, replay)}
    if json_out:
        return print_json({**info, **simulation_json(result)})
    _render(info, result)


def _capped(requests: int | None, replay) -> list[str]:
    """A trace replays at most the requests it holds: asking for more is said, not silent."""
    held = getattr(replay, "num_requests", None)
    if requests is None or held is None or requests <= held:
        return []
    return [f"requests-capped: --requests {requests:,} is more than {replay.name} holds; its {held:,} replayed"]


def _does_not_fit(target, workload: str, configuration: Configuration, feasibility, json_out: bool) -> None:
    if json_out:
        return print_json({**target.to_json(), "workload": workload, "configuration": configuration.to_dict(),
                           "configuration_text": configuration.describe(), "legal": False,
                           "reasons": list(feasibility.reasons),
                           "memory": feasibility.memory.to_json() if feasibility.memory else None, "metrics": None})
    does_not_fit(console, f"{target.card.name} on {target.cluster.spec} ({target.engine}), {workload}: "
                          f"{configuration.describe()}", feasibility.reasons)


class _progress:
    """A rich progress bar on a terminal; a no-op callback otherwise."""

    def __init__(self, enabled: bool) -> None:
        self.bar = Progress("simulating", BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                            console=console, transient=True) if enabled else None
        self.task = None

    def __enter__(self):
        if self.bar is None:
            return None
        self.bar.__enter__()
        self.task = self.bar.add_task("requests", total=None)
        return self._update

    def _update(self, done: int, total: int) -> None:
        self.bar.update(self.task, completed=done, total=total)

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.__exit__(*exc)


def simulation_json(result: SimResult) -> dict:
    """The result with the CLI's names: every distribution's key carries its unit, so
    the per-request 1/TPOT distribution is `interactivity_tok_s` (`interactivity` is one
    number everywhere else)."""
    data = result.to_json()
    if "interactivity" in data:
        data["interactivity_tok_s"] = data.pop("interactivity")
    return data


def _render(info: dict, result: SimResult) -> None:
    data = simulation_json(result)
    paragraph(console, f"DES: {info['model']} on {info['cluster']} ({info['engine']}), {info['workload']}, "
                       f"{config_text(info['configuration_text'])}", indent=0)
    bands = data.get("seed_intervals", {})
    title = "over requests (ITL over steps)" + ("; \\[lo-hi]: 90% over replications" if bands else "")
    grid = table(title, [("metric", "left"), ("unit", "left"), *((stat, "right") for stat in JSON_STATS)],
                 wrap=range(2, 2 + len(JSON_STATS)) if bands else ())     # a value and its interval may take two lines
    for name, label, unit in LATENCIES:
        key = "interactivity" if name == "interactivity_tok_s" else name     # seed_intervals' name for it
        grid.add_row(label, unit, *(with_interval(data[name][stat], bands.get(f"{key}_{stat}")) for stat in JSON_STATS))
    console.print(grid)
    hit = data["hit_rate"]
    say(console, f"output throughput {with_interval(data['output_throughput_per_gpu'], bands.get('output_throughput_per_gpu'))}"
                 f" tok/s/GPU (total {with_interval(data['throughput_per_gpu'], bands.get('throughput_per_gpu'))}); "
                 f"prefix hit rate {percent(hit['overall'])} "
                 f"(HBM {percent(hit['per_tier']['hbm'])}, DRAM {percent(hit['per_tier']['dram'])}); "
                 f"{number(data['num_requests'])} requests measured over {data['replications']} replication(s); "
                 f"{number(data['sim_wall_s'])} s wall; "
                 f"mode {', '.join(info['modes'])}")
    if info["flags"]:   # what qualifies the numbers (extrapolation, transfers), as predict prints them
        paragraph(console, "; ".join(info["flags"]), first="flags: ")
    if data.get("bad_lines_skipped"):
        say(console, f"skipped {number(data['bad_lines_skipped'])} bad trace lines")
