"""`inferasim tune`: run a search and show its best configurations (PRODUCT.md §2).

Parses the options, calls :func:`agent.tune.tune`, renders a table (or JSON). Exit code
1 when no trial meets the SLOs (``best`` is null; the nearest misses are shown), 2 on bad
input. A rank-only answer says that SLO compliance is unverified and prints the
harvest command lines that would verify it. ``--workers`` prices seed rounds in parallel
(default: all cores); ``--des-requests`` fixes the DES length of every trial (default:
bounded during the search, the best confirmed at full fidelity; agent.fidelity).
"""

from __future__ import annotations

import os
import sys
import textwrap
from typing import Optional

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from agent.briefing import describe
from agent.cli.app import (MAX_DES_REQUESTS, MIN_DES_REQUESTS, SEED, WORKERS, app, cli_errors, console, err_console,
                           int_option, print_json, timeout_option)
from agent.cli.render import (MISSING, config_text, id_line, metric_header, number, objective_header, paragraph,
                              percent, say, table, with_interval)
from agent.deploy.plan import DeployPlan, deploy_json, try_plan
from agent.fidelity import SEARCH_MAX_REQUESTS, SEARCH_REQUESTS_PER_CLIENT, uses_des
from agent.lm import DEFAULT_TIMEOUT_S, LM_ENV
from agent.trial import Trial
from levers.errors import InputError
from agent.tune import DEFAULT_OBJECTIVE, DEFAULT_TOP, MAX_BUDGET, SearchInterrupted, TuneRequest, TuneResult, tune
from objectives.objectives import Objective

EXIT_NO_SLO_MEETING_TRIAL = 1
EXIT_INTERRUPTED = 130            # 128 + SIGINT, as a shell reports Ctrl-C
MAX_FLAGS_SHOWN = 3
MAX_TOP = 10_000
METRIC_COLUMNS = (("TTFT\nmean ms", "ttft_ms_mean"), ("TPOT\np50 ms", "tpot_ms_p50"))


@app.command("tune")
@cli_errors
def tune_command(
    model: Optional[str] = typer.Option(None, "--model", "-m", help="Model name or alias, e.g. kimi-k3."),
    cluster: Optional[str] = typer.Option(None, "--cluster", "-c", help="GPU\\[xPER_NODE\\[xNODES]] (default mi355x)."),
    engine: Optional[str] = typer.Option(None, "--engine", "-e",
                                         help="vllm, sglang, atom, trtllm, llamacpp (default: first with an anchor, else vllm; llamacpp on --cluster cpu)."),
    workload: Optional[str] = typer.Option(None, "--workload", "-w", help="agentic (default), 1k/1k, 8k/1k, ISL/OSL."),
    objective: Optional[str] = typer.Option(None, "--objective", "-o",
                                            help=f"One of the 24 objectives or an alias (default {DEFAULT_OBJECTIVE})."),
    slo: Optional[list[str]] = typer.Option(None, "--slo", help="e.g. p90-itl=25, ttft<=2s (repeatable)."),
    lm: Optional[str] = typer.Option(None, "--lm", help="LiteLLM model string (default $INFERASIM_LM)."),
    lm_base_url: Optional[str] = typer.Option(None, "--lm-base-url", help="Endpoint of an OpenAI-compatible server."),
    lm_json_schema: bool = typer.Option(False, "--lm-json-schema",
                                        help="Send the output schema in response_format (llama.cpp servers)."),
    lm_timeout: float = typer.Option(DEFAULT_TIMEOUT_S, "--lm-timeout", parser=timeout_option("--lm-timeout"), help="Seconds per LM request."),
    lm_from_ledger: bool = typer.Option(False, "--lm-from-ledger",
                                        help="With --resume and no --lm: use the LM the ledger names (it never "
                                             "receives a key from the environment unless --lm-base-url is given)."),
    budget: Optional[int] = typer.Option(None, "--budget", parser=int_option("--budget", 1, MAX_BUDGET),
                                         help="Trials, seed + LLM (default 300)."),
    seed: int = typer.Option(0, "--seed", parser=SEED, help="Fixes every random choice."),
    des_requests: Optional[int] = typer.Option(
        None, "--des-requests", parser=int_option("--des-requests", MIN_DES_REQUESTS, MAX_DES_REQUESTS),
        help="Requests per DES run, every trial (default: bounded during the search, then the best "
             "confirmed at the simulator's default)."),
    workers: Optional[int] = typer.Option(None, "--workers", parser=WORKERS,
                                          help="Processes pricing seed rounds (default: all cores, at most 8; 1: in process)."),
    no_llm: bool = typer.Option(False, "--no-llm", help="Seed phase only."),
    guidance: Optional[str] = typer.Option(None, "--guidance", help="Free-form operator guidance for the planner."),
    precisions: Optional[str] = typer.Option(None, "--precisions",
                                             help="Validated weight/expert precisions, e.g. fp8,fp4."),
    resume: Optional[str] = typer.Option(None, "--resume", help="Continue a ledger (path or search id)."),
    json_out: bool = typer.Option(False, "--json", help="Machine-readable output."),
    top: int = typer.Option(DEFAULT_TOP, "--top", parser=int_option("--top", 1, MAX_TOP), help="Configurations to show."),
) -> None:
    """Search for the best configuration (seed phase, then the LLM phase when an LM is configured)."""
    _check_lm_options(lm, lm_base_url, lm_from_ledger, no_llm, resume)
    _check_planner_options(no_llm, guidance=guidance, lm_json_schema=lm_json_schema,
                           lm_timeout=lm_timeout != DEFAULT_TIMEOUT_S)
    request = TuneRequest(
        model=model, cluster=cluster, engine=engine, workload=workload, objective=objective,
        slos=tuple(slo or ()), lm=lm, lm_base_url=lm_base_url, lm_json_schema=lm_json_schema,
        lm_timeout_s=lm_timeout, budget=budget, seed=seed, no_llm=no_llm, guidance=guidance,
        precisions=precisions, num_requests=des_requests, resume=resume, top=top, workers=workers,
        lm_from_ledger=lm_from_ledger,
        command_line=tuple(["inferasim", *sys.argv[1:]]))
    try:
        result = tune(request) if json_out or not console.is_terminal else _with_progress(request, budget)
    except SearchInterrupted as stop:
        err_console.print(f"interrupted after {stop.num_trials} trials; they are in the ledger {stop.path} "
                          f"(interrupted): continue with `inferasim tune --resume {stop.path.stem}`",
                          markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(EXIT_INTERRUPTED) from None
    winner = try_plan(result.context.target, result.best.config, result.context.workload.priced_context_tokens) \
        if result.best else (None, None)
    if json_out:
        print_json({**result_json(result), "deploy": deploy_json(*winner)})
    else:
        render(result)
        print_deploy(result.best, *winner)
        if des_requests is not None and not uses_des(result.context):
            say(console, f"--des-requests {des_requests:,} unused: this search priced every trial analytically "
                         "(fixed lengths, no percentile SLO or objective)")
    if result.best is None:
        raise typer.Exit(EXIT_NO_SLO_MEETING_TRIAL)


def _with_progress(request: TuneRequest, budget: int | None) -> TuneResult:
    columns = (TextColumn("tuning"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("{task.description}"))
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task("", total=budget)

        def advance(session, trial: Trial) -> None:
            progress.update(task, total=max(session.budget, len(session.trials)),
                            completed=len(session.trials), description=f"{trial.phase}")

        return tune(request, listeners=[advance])


def result_json(result: TuneResult) -> dict:
    outcome = result.outcome
    return {
        "best": outcome.best.to_json() if outcome.best else None,
        "top": [trial.to_json() for trial in outcome.top],
        "nearest_misses": [] if outcome.best else [t.to_json() for t in outcome.nearest_misses],
        "ties": [t.index for t in outcome.ties],
        "ledger": str(result.ledger_path), "num_trials": result.num_trials,
        "stop_reason": outcome.stop_reason, "lm": result.lm.to_json() if result.lm else None,
        "lm_note": outcome.lm_note, "rank_only": result.rank_only_best,
        "slo_compliance_verified": not result.rank_only_best, "harvest": result.harvest,
        "stats": result.stats, "warnings": list(result.warnings),
    }


def print_deploy(best: Trial | None, plan: DeployPlan | None, problem: str | None) -> None:
    """The winner's deploy line(s), whole, after the table (agent.deploy)."""
    if best is None:
        return
    if plan is None:
        say(console, f"Deploy #{best.index}: not expressible on the engine's command line: {problem}")
        return
    say(console, f"Deploy #{best.index} (the files and manifests: inferasim deploy LEDGER):")
    for line in plan.recipe_lines():
        paragraph(console, line)
    for line in plan.lines():
        id_line(console, f"  {line}", style="")


def shell_comment(line: str) -> None:
    """A harvest note wrapped at the console width, every line still a shell comment."""
    console.print(textwrap.fill(line.lstrip("# "), width=max(40, console.width), initial_indent="  # ",
                                subsequent_indent="  #   ", break_long_words=False, break_on_hyphens=False),
                  markup=False, highlight=False, soft_wrap=True)


def render(result: TuneResult) -> None:
    context, outcome = result.context, result.outcome
    goal = context.objective
    title = (f"{context.target.card.name} on {context.target.cluster.spec} ({context.target.engine}), "
             f"{context.workload.name}: {goal.name} ({goal.direction})")
    shown = outcome.top if outcome.best is not None else outcome.nearest_misses
    if outcome.best is None:
        slos = ", ".join(str(s) for s in context.slos) or "none"
        console.print(f"[red]No trial meets the SLOs[/red] ({slos}); best is null. Nearest misses:")
    paragraph(console, title, indent=0)
    tied = {t.index for t in outcome.ties}
    console.print(trial_table(shown, None, goal, [slo.key for slo in context.slos], tied))
    if any(t.confirm_of is not None for t in shown):
        say(console, TABLE_LEGEND)
    if tied:
        replicated = outcome.best.interval(goal.metric) is not None
        why = ("90% replication intervals overlap, so their order is inside the simulator's noise" if replicated
               else f"{goal.name} values are equal (priced without replications, so no order between them)")
        say(console, f"Tie: {', '.join(f'#{i}' for i in sorted(tied))} with the best #{outcome.best.index}: their "
                     f"{why}.")
    print_configurations(shown)
    if result.rank_only_best:
        say(console, "Rank-only: no anchor covers these configurations; SLOs were applied to their "
                     "estimates, so compliance is unverified until these anchors exist:")
        for line in result.harvest:
            if line.startswith("#"):
                shell_comment(line)
            else:
                id_line(console, f"  {line}", style="")
    if outcome.lm_note:
        say(console, f"LLM phase: {outcome.lm_note}")
    for warning in result.warnings:
        say(console, f"warning: {warning}")
    if result.num_confirmed is not None:
        say(console, f"Search DES trials replayed at most max({SEARCH_MAX_REQUESTS}, {SEARCH_REQUESTS_PER_CLIENT}"
                     f" x clients) requests; {result.num_confirmed} of the best re-priced at the default; "
                     "the answer is priced at full fidelity.")
    stats = result.stats
    say(console, f"Stopped: {outcome.stop_reason}")
    rejected = f", {number(stats['num_rejected'])} of them rejected (by reason: inferasim ledger show)" \
        if stats.get("num_rejected") else ""
    say(console, f"{number(result.num_trials)} trials in {number(stats.get('wall_s', 0))} s "
                 f"({number(stats.get('trials_per_s', 0))} trials/s){rejected}")
    console.print("Ledger:", highlight=False)
    id_line(console, f"  {result.ledger_path}", style="")


def metric_columns(slo_keys: list[str]) -> list[tuple[str, str]]:
    """(header, metrics key): TTFT and TPOT, then every SLO's metric not already shown."""
    columns = list(METRIC_COLUMNS)
    for key in slo_keys:
        if key not in (k for _, k in columns):
            columns.append((metric_header(key), key))
    return columns


def _check_lm_options(lm: str | None, base_url: str | None, from_ledger: bool, no_llm: bool,
                      resume: str | None) -> None:
    """Options that contradict each other are refused, not silently resolved."""
    if no_llm and (lm or from_ledger):
        raise InputError("--no-llm", f"given with {'--lm' if lm else '--lm-from-ledger'}, which asks for an LM",
                         "one of them")
    if from_ledger and (resume is None or lm):
        raise InputError("--lm-from-ledger", "needs --resume (the ledger whose LM it reuses) and no --lm",
                         "--resume LEDGER --lm-from-ledger")
    if base_url and not (lm or from_ledger or os.environ.get(LM_ENV)):
        raise InputError("--lm-base-url", f"given without an LM (--lm, --lm-from-ledger or {LM_ENV})",
                         "--lm MODEL --lm-base-url URL")


def _check_planner_options(no_llm: bool, **given: bool) -> None:
    """The LM planner's options with --no-llm: refused, as --lm is (nothing would read them)."""
    used = [f"--{name.replace('_', '-')}" for name, value in given.items() if value]
    if no_llm and used:
        raise InputError("--no-llm", f"given with {', '.join(used)}, which only the LLM phase reads",
                         "drop them, or drop --no-llm")


TABLE_LEGEND = ("80%: the objective's interval from the measured error of the row's transfer kind and the DES "
                "replications' noise; [lo-hi] under a "
                "value: its 90% interval over DES replications. Confirm rows are re-priced at full fidelity, seed rows "
                "on the search's shorter replay, so a seed row's value may sit above or below its confirmed one.")


def trial_table(trials: list[Trial], title: str | None, goal: Objective, slo_keys: list[str] = (),
                tied: set[int] | None = None) -> Table:
    """One row per trial; a replicated trial (the confirm step) shows each metric as
    ``value [lo-hi]``, its mean and 90% interval over replications, and ``rank`` says
    whether it is the best or ties it (the intervals overlap). ``80%`` is the objective's
    interval from the measured error of the trial's transfer kind (`predictor.uncertainty`)."""
    metrics_shown = metric_columns(list(slo_keys))
    columns = [("#", "right"), ("found\nby", "left"), (objective_header(goal), "right"), ("80%", "right"),
               *((header, "right") for header, _ in metrics_shown), ("SLOs", "left"), ("rank", "left"), ("mode", "left")]
    grid = table(title, columns, wrap=(1, len(columns) - 1))    # numbers are never cut: the words wrap
    for position, trial in enumerate(trials):
        metrics = trial.metrics or {}
        values = [_over_interval(metrics.get(key), trial.interval(key)) for _, key in metrics_shown]
        rank = "best" if position == 0 and trial.slo_met else "tie" if trial.index in (tied or set()) else MISSING
        error = trial.error_interval(goal.metric)
        grid.add_row(str(trial.index), _found_by(trial), _over_interval(trial.objective_value, trial.interval(goal.metric)),
                     f"{number(error[0])}-{number(error[1])}" if error else MISSING, *values, _slo_text(trial), rank,
                     f"{trial.mode or MISSING}" + (f" ({trial.transfer})" if trial.transfer else ""))
    return grid


def _over_interval(value: float | None, interval) -> str:
    """``value`` over its ``[lo-hi]`` (`with_interval` on two lines: a confirm row's every
    metric has one, and side by side they overflowed 140 columns)."""
    return with_interval(value, interval).replace(" [", "\n[", 1)


def _slo_text(trial: Trial) -> str:
    if trial.slo_met is None:
        return "unverified"
    return "met" if trial.slo_met else f"miss {percent(trial.miss_distance)}"


def _found_by(trial: Trial) -> str:
    """The phase; a confirm trial names the search trial it re-priced at full fidelity."""
    return f"confirm #{trial.confirm_of}" if trial.confirm_of is not None else str(trial.phase)


def print_configurations(trials: list[Trial]) -> None:
    """Each shown trial's configuration (levers that differ from the defaults) and flags."""
    for trial in trials:
        paragraph(console, config_text(describe(trial.config, None)), first=f"  #{trial.index}: ")
        if trial.flags:
            paragraph(console, _flags(trial.flags), first="      flags: ")


def _flags(flags: tuple[str, ...]) -> str:
    if not flags:
        return MISSING
    shown = "; ".join(flags[:MAX_FLAGS_SHOWN])
    return shown + (f" (+{len(flags) - MAX_FLAGS_SHOWN} more)" if len(flags) > MAX_FLAGS_SHOWN else "")
