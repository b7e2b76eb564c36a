"""`inferasim plan-mix MODELS_YAML`: one configuration per model and latency tier (METHOD §7).

Reads models.yaml (nothing runs on a bad file), prices every candidate once with the DES
on all local cores (a progress bar on a terminal, quiet otherwise), prints a table per
tier with each model's pick and its short list, and writes the JSON report (`--out`)
and the plan's ledgers. Exit 0 when at least one slot has a pick, 1 when none does.
"""

from __future__ import annotations

import contextlib
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import typer
from rich import box
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from agent.cli.app import (
    MAX_DES_REQUESTS,
    MIN_DES_REQUESTS,
    SEED,
    WORKERS,
    app,
    cli_errors,
    console,
    err_console,
    int_option,
    json_text,
    output_file,
    print_json,
)
from agent.cli.info import JsonOpt
from agent.cli.render import MISSING, config_text, id_line, number, paragraph, percent, say
from agent.deploy.plan import DeployPlan, deploy_json, try_plan
from agent.mix.candidates import DEFAULT_MAX_REQUESTS
from agent.mix.config import Tier, load_mix_file
from agent.mix.planner import plan_mix
from agent.mix.report import MixReport, Slot
from agent.mix.selection import Scored
from ledgers.store import atomic_write_text
from predictor.sim.results import SHORT_REPLAY_FLAG, WARMUP_ONLY_FLAG
from predictor.target import resolve_target
from predictor.workload import parse_workload


MAX_REASONS = 4


@app.command("plan-mix")
@cli_errors
def plan_mix_command(
    models_yaml: Path = typer.Argument(..., help="models.yaml: models, engines, clusters, candidates, tiers."),
    out: str | None = typer.Option(None, "--out", "-o", help="Write the JSON report to this file."),
    json_out: bool = JsonOpt,
    seed: int = typer.Option(0, "--seed", parser=SEED, help="Seed of every DES run."),
    requests: int = typer.Option(DEFAULT_MAX_REQUESTS, "--requests", parser=int_option("--requests", MIN_DES_REQUESTS, MAX_DES_REQUESTS),
                                 help="At most this many DES requests per candidate (else 40 per client)."),
    workers: int | None = typer.Option(None, "--workers", parser=WORKERS, help="Worker processes (default: all cores)."),
) -> None:
    """Pick one configuration per model and tier; print a table per tier and a short list."""
    out = output_file(out, "--out")     # as typed: '' and a trailing '/' are refused, not read as '.'
    spec = load_mix_file(models_yaml)
    with _progress_bar() as progress:
        report = plan_mix(spec, seed=seed, max_requests=requests, workers=workers, progress=progress,
                          command_line=[Path(sys.argv[0]).name, *sys.argv[1:]])
    deploys = slot_deploys(report)
    data = report.to_json()
    for slot_json, (plan, problem) in zip(data["slots"], deploys):
        slot_json["deploy"] = deploy_json(plan, problem)
    if out is not None:
        atomic_write_text(out, json_text(data) + "\n")
    if json_out:
        print_json(data)
    else:
        render_report(report, out)
        render_deploys(report, deploys)
    if not any(slot.choice.met for slot in report.slots):
        raise typer.Exit(1)


@contextlib.contextmanager
def _progress_bar() -> Iterator:
    """A rich bar on a terminal (stderr, so --json stays clean); a no-op otherwise."""
    bar = Progress(TextColumn("pricing candidates"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   console=err_console, transient=True, disable=not err_console.is_terminal)
    task = bar.add_task("plan-mix", total=None)
    with bar:
        yield lambda done, total: bar.update(task, completed=done, total=total)


def entry_labels(report: MixReport) -> dict[int, str]:
    """Each models.yaml entry's name, with ``#INDEX`` when the file lists its model twice
    (as `deploy --slot MODEL/TIER#ENTRY` names it)."""
    names = Counter(entry.name for entry in report.spec.models)
    return {entry.index: entry.name + (f"#{entry.index}" if names[entry.name] > 1 else "")
            for entry in report.spec.models}


def render_report(report: MixReport, out: Path | None) -> None:
    labels = entry_labels(report)
    for tier in report.spec.tiers.values():
        slots = [slot for slot in report.slots if slot.tier.name == tier.name]
        if not slots:
            continue
        console.print(_tier_table(tier, slots, labels))
        for slot in slots:
            if not slot.choice.met:
                _say(f"{tier.name} / {labels[slot.entry.index]}: {_miss_text(slot)}")
            pick = slot.choice.pick
            for flag in (pick.trial.flags if pick else ()):
                if flag.startswith((WARMUP_ONLY_FLAG, SHORT_REPLAY_FLAG)):   # a too-short replay's (--requests)
                    _say(f"{tier.name} / {labels[slot.entry.index]}: {flag}; raise --requests")
    for entry in report.spec.models:
        total, illegal, reasons = report.illegal_reasons(entry)
        if illegal:
            listed = "; ".join(f"{reason} ({count})" for reason, count in reasons[:MAX_REASONS])
            more = f"; +{len(reasons) - MAX_REASONS} more reasons" if len(reasons) > MAX_REASONS else ""
            _say(f"{labels[entry.index]}: {illegal} of {total} candidates illegal: {listed}{more}")
    rank_only_slots = [s for s in report.slots if s.choice.pick and s.choice.pick.trial.mode == "rank-only"]
    for entry in report.spec.models:     # README: rank-only numbers rank candidates within one engine
        tiers = [s.tier.name for s in rank_only_slots if s.entry.index == entry.index]
        if tiers and len(entry.engines or ()) > 1:
            _say(f"{labels[entry.index]}: rank-only picks among {', '.join(entry.engines)} ({', '.join(tiers)}); "
                 "rank-only numbers rank candidates within one engine, and between engines rest on each engine's "
                 "cross-model prior: harvest an anchor on each before trusting the choice of engine.")
    rank_only = sorted({labels[s.entry.index] for s in rank_only_slots})
    if rank_only:
        _say(f"rank-only picks ({', '.join(rank_only)}): no covering anchor, so tier compliance is "
             "unverified; harvest an anchor at the pick's layout to verify it.")
    data = report.to_json()
    _say(f"{data['candidates_evaluated']} candidates evaluated ({data['candidates_legal']} legal) "
         f"in {number(data['wall_s'])} s on {report.settings['workers']} worker process(es), "
         f"at most {number(report.settings['max_requests'])} DES requests each, over "
         f"{report.settings.get('replications', 1)} workload draws: a value's ± is its 90% interval "
         "(--json: [lo, hi]); 'ties 1': its throughput interval overlaps the pick's")
    if data["excluded_by_max_gpus"]:
        _say(f"{data['excluded_by_max_gpus']} candidates over max_gpus were not priced")
    if data["same_deployment_as_priced"]:
        _say(f"{data['same_deployment_as_priced']} candidates were an earlier candidate's deployment once their unset "
             "levers took the calibrating anchor's recipe: priced once, as the first")
    for path in report.ledger_paths:
        _say(f"ledger: {path}")
    if out is not None:
        _say(f"report: {out}")


def slot_deploys(report: MixReport) -> list[tuple[DeployPlan | None, str | None]]:
    """Each slot's pick as launch commands (agent.deploy), or why there are none."""
    plans = []
    for slot in report.slots:
        pick = slot.choice.pick
        if pick is None:
            plans.append((None, None))
            continue
        task = pick.task
        plans.append(try_plan(resolve_target(task.model, task.cluster, task.engine), task.config,
                              parse_workload(task.workload).priced_context_tokens))
    return plans


def render_deploys(report: MixReport, deploys: list[tuple[DeployPlan | None, str | None]]) -> None:
    """The deploy line(s) of every slot's pick, whole (inferasim deploy --plan REPORT --slot MODEL/TIER
    writes the files and manifests)."""
    labels = entry_labels(report)
    for slot, (plan, problem) in zip(report.slots, deploys):
        if plan is None and problem is None:
            continue
        name, _, entry = labels[slot.entry.index].partition("#")
        heading = f"Deploy {name}/{slot.tier.name}" + (f"#{entry}" if entry else "")
        if plan is None:
            _say(f"{heading}: not expressible on the engine's command line: {problem}")
            continue
        _say(f"{heading}:")
        for line in plan.recipe_lines():
            paragraph(console, line)
        for line in plan.lines():
            id_line(console, f"  {line}", style="")


def _say(text: str) -> None:
    say(console, text)


def _tier_table(tier: Tier, slots: list[Slot], labels: dict[int, str]) -> Table:
    bounds = [f"interactivity {tier.interactivity_stat} >= {tier.interactivity_floor:g} tok/s"
              if tier.interactivity_floor is not None else "",
              f"TTFT {tier.ttft_stat} <= {tier.ttft_cap_s:g} s (qualify at half)" if tier.ttft_cap_s is not None else ""]
    title = f"{tier.name}: " + (", ".join(b for b in bounds if b) or "no latency bound (best throughput)")
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0), pad_edge=False)
    table.add_column("#", no_wrap=True)
    table.add_column("model / engine (mode):\nconfiguration", overflow="fold", ratio=1, min_width=28)
    table.add_column("GPUs", justify="right", no_wrap=True)
    for column in ("out tok/s\nper GPU", f"tok/s/user\n{tier.interactivity_stat}", f"TTFT\n{tier.ttft_stat} s",
                   "head-\nroom"):
        table.add_column(column, justify="right", no_wrap=True)
    for slot in slots:
        choice = slot.choice
        if not choice.met:
            miss = choice.nearest_miss
            name = labels[slot.entry.index]
            row = _row(name, "miss", miss, tier) if miss else [MISSING, f"{name}\nno legal candidate"]
            table.add_row(*row, style="red", end_section=True)
            continue
        for rank, scored in enumerate(choice.short_list, start=1):
            tie = rank > 1 and scored.ties(choice.pick)
            table.add_row(*_row(labels[slot.entry.index] if rank == 1 else "", str(rank), scored, tier, tie),
                          style="bold" if rank == 1 else "dim", end_section=rank == len(choice.short_list))
    return table


def _miss_text(slot: Slot) -> str:
    miss = slot.choice.nearest_miss
    if miss is None:
        return f"no legal candidate among {slot.choice.num_priced} priced"
    missed = "; ".join(str(c) for c in miss.checks if c.met is not True)
    return f"nothing meets the tier; nearest miss {config_text(miss.task.config)}: {missed}"


def _row(model: str, rank: str, scored: Scored, tier: Tier, tie: bool = False) -> list[str]:
    data = scored.to_json(tier)
    heading = f"{model}\n" if model else ""
    intervals = data["intervals"]
    return [
        rank, f"{heading}{data['engine']} ({data['mode'] or MISSING}{', ties 1' if tie else ''}): "
              f"{config_text(data['configuration_text'])}",
        str(data["total_gpus"]), _stacked(data["output_throughput_per_gpu"], intervals.get("output_throughput_per_gpu")),
        _stacked(data["interactivity"], intervals.get("interactivity")),
        _stacked(data["ttft_s"], intervals.get("ttft_s")), percent(data["headroom"], signed=True),
    ]


def _stacked(value: float | None, interval: list[float] | None) -> str:
    """The value, and below it its 90% replication interval relative to it: ``±2%`` when
    the two sides read alike (``[lo-hi]``, in --json, would not fit four metric columns in
    80), else ``-97/+285%`` (a positive metric's lower end held above zero by the logs'
    interval, `predictor.sim.replications`; a hit rate's upper end at one)."""
    if value is None or not interval or not value:
        return number(value)
    low, high = (value - interval[0]) / abs(value), (interval[1] - value) / abs(value)

    def share(x: float) -> str:
        return f"{x:.0%}" if x >= 0.01 else f"{x:.1%}"

    if share(low) == share(high):
        return f"{number(value)}\n±{share(high)}"
    return f"{number(value)}\n-{share(low).rstrip('%')}/+{share(high)}"


