"""`inferasim harvest`: measure an anchor on a launched engine or a running endpoint and
write it into the anchor cache (METHOD §4, PRODUCT.md §2, §6). Parses, calls one
library function (`predictor.harvest.run_harvest`, or `plan_harvest` for --dry-run),
renders."""

from __future__ import annotations

import sys

import typer
from agent.cli.app import SEED, app, cli_errors, console, err_console, int_option, output_file, print_json, timeout_option
from agent.cli.render import list_text, number, say, table
from levers.errors import InputError
from levers.inputs import parse_number, quote
from predictor.harvest.client import REQUEST_TIMEOUT_S as DEFAULT_REQUEST_TIMEOUT_S
from predictor.harvest.harvester import DEFAULT_DEADLINE_S, HarvestReport, run_harvest
from predictor.units import NS_PER_MS, US_PER_MS
from predictor.harvest.plan import (
    DEFAULT_READY_TIMEOUT_S,
    HarvestPlan,
    HarvestRequest,
    plan_harvest,
)


MAX_PROMPT_TOKENS = 1_048_576
MAX_DECODE_TOKENS = 65_536
MAX_BATCH = 4096
MAX_LIST_ITEMS = 64


def _ints(text: str | None, what: str, high: int) -> tuple[int, ...] | None:
    if not text:
        return None
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items or len(items) > MAX_LIST_ITEMS:
        raise InputError(what, f"{quote(text)} is not a list of 1 to {MAX_LIST_ITEMS} integers", "e.g. 1,2,4")
    return tuple(parse_number(item, what, integer=True, low=1, high=high) for item in items)


def _render_plan(plan: HarvestPlan) -> None:
    data = plan.to_json()
    console.print(f"[bold]harvest plan[/bold] {data['engine']} / {data['model']} / {data['cluster']}")
    console.print(f"configuration: {data['configuration_text']}", markup=False)
    for note in data["notes"]:
        console.print(f"note: {note}", markup=False)
    console.print("launch: " + (data["launch"] or f"(endpoint {data['endpoint']})"), markup=False, soft_wrap=True)
    for path, text in data["launch_files"].items():
        console.print(f"file {path} (written at launch):\n{text.rstrip()}", markup=False, soft_wrap=True)
    sweep = data["sweep"]
    say(console, f"decode waves at batch {list_text(sweep['decode_batches'])}, {number(sweep['prompt_tokens'])} "
                 "prompt tokens" + (f" (and {number(sweep['second_prompt_tokens'])})" if sweep["second_prompt_tokens"]
                                    else "")
                 + f", {number(sweep['decode_tokens'])} output tokens, {sweep['waves_per_batch']} wave(s) each")
    say(console, f"prefill TTFT at {list_text(sweep['prefill_lengths'])} tokens x{sweep['repeats']}, concurrency 1,"
                 " unique prompts")
    if sweep["packed_probe"]:
        console.print(f"packed-prefill probe: {sweep['packed_probe'][0]} x {sweep['packed_probe'][1]} tokens",
                      markup=False)


def _render_report(report: HarvestReport) -> None:
    anchor = report.anchor
    console.print(f"[bold]anchor[/bold] {anchor.id}")
    console.print(f"written to {report.path}" if report.path else "not written", markup=False)
    grid = table("decode sweep", [("batch", "right"), ("median ITL\nms", "right")])
    for batch, itl in zip(anchor.decode_sweep.batch_sizes, anchor.decode_sweep.itl_ms):
        grid.add_row(str(batch), number(itl))
    console.print(grid)
    sweep = anchor.prefill_sweep
    grid = table("prefill sweep", [("prompt\ntokens", "right"), ("TTFT\nms", "right")])
    for tokens, ttft in zip(sweep.prompt_tokens, sweep.ttft_ms):
        grid.add_row(number(tokens), number(ttft))
    console.print(grid)
    say(console, f"fit: F {number(sweep.fit_f_ms)} ms + {number(sweep.fit_c1_ms * US_PER_MS)} us/token + "
                 f"{number(sweep.fit_c2_ms * NS_PER_MS)} ns/token^2; host {number(anchor.host_time_ms)} ms + "
                 f"{number(anchor.host_us_per_prompt_token)} us/token")
    for check in report.checks:
        if check.outcome != "ok":
            console.print(f"{check.outcome}: {check.message}", markup=False, soft_wrap=True)
    console.print("flags: " + (", ".join(anchor.flags) or "none"), markup=False)


@app.command("harvest")
@cli_errors
def harvest(
    engine: str = typer.Option(..., "--engine", help="vllm, sglang, atom, trtllm, llamacpp."),
    model: str = typer.Option(..., "--model", help="Model card name, or a .gguf file (llamacpp)."),
    cluster: str | None = typer.Option(None, "--cluster", help="A cluster (e.g. mi355x, h100x1) or cpu."),
    config: str | None = typer.Option(None, "--config", help="Anchor configuration k=v,... (widths, dtypes, ...)."),
    endpoint: str | None = typer.Option(None, "--endpoint", help="Harvest an engine already running at URL."),
    model_path: str | None = typer.Option(None, "--model-path", help="Checkpoint to serve (default: the HF id)."),
    draft_model: str | None = typer.Option(None, "--draft-model",
                                           help="Draft checkpoint of EAGLE-3 / DSpark speculation (required for them)."),
    prompt_tokens: int | None = typer.Option(None, "--prompt-tokens", parser=int_option("--prompt-tokens", 1, MAX_PROMPT_TOKENS),
                                             help="Decode sweep prompt length."),
    second_prompt_tokens: int | None = typer.Option(None, "--second-prompt-tokens",
                                                       parser=int_option("--second-prompt-tokens", 0, MAX_PROMPT_TOKENS),
                                                       help="Second decode prompt length (0: none)."),
    decode_tokens: int | None = typer.Option(None, "--decode-tokens", parser=int_option("--decode-tokens", 1, MAX_DECODE_TOKENS),
                                             help="Output tokens per decode request."),
    waves: int | None = typer.Option(None, "--waves", parser=int_option("--waves", 1, 100),
                                     help="Single waves per batch size (median of medians)."),
    prefill_lengths: str | None = typer.Option(None, "--prefill-lengths", help="Prefill prompt lengths, e.g. 512,1024,2048,4096,8192."),
    batches: str | None = typer.Option(None, "--batches", help="Decode wave sizes (default: captured sizes)."),
    repeats: int | None = typer.Option(None, "--repeats", parser=int_option("--repeats", 1, 100),
                                       help="TTFT samples per prefill length."),
    probe: bool = typer.Option(True, "--probe/--no-probe", help="Run the packed-prefill probe."),
    threads: int | None = typer.Option(None, "--threads", parser=int_option("--threads", 1, 1024), help="CPU threads (llamacpp)."),
    ready_timeout: float = typer.Option(DEFAULT_READY_TIMEOUT_S, "--ready-timeout", parser=timeout_option("--ready-timeout"),
                                        help="Seconds to wait for the engine to answer its health check."),
    request_timeout: float = typer.Option(DEFAULT_REQUEST_TIMEOUT_S, "--request-timeout",
                                          parser=timeout_option("--request-timeout"),
                                          help="Seconds one timed request may take, first byte to last."),
    deadline: float = typer.Option(DEFAULT_DEADLINE_S, "--deadline", parser=timeout_option("--deadline"),
                                   help="Seconds the whole harvest may take (start-up, sweeps, checks)."),
    engine_arg: list[str] | None = typer.Option(None, "--engine-arg", help="Extra engine argument (repeatable)."),
    record: str | None = typer.Option(None, "--record", help="Also write every timed stream to this JSON file."),
    seed: int = typer.Option(0, "--seed", parser=SEED, help="Prompt RNG seed."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the launch command and the sweep plan only."),
    json_out: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Measure an anchor (METHOD §4) and write it into $INFERASIM_HOME/anchors."""
    output_file(record, "--record")
    request = HarvestRequest(
        engine=engine, model=model, cluster=cluster, config_text=config, endpoint=endpoint, model_path=model_path,
        draft_model=draft_model,
        prompt_tokens=prompt_tokens, second_prompt_tokens=second_prompt_tokens, decode_tokens=decode_tokens,
        waves_per_batch=waves,
        prefill_lengths=_ints(prefill_lengths, "--prefill-lengths", MAX_PROMPT_TOKENS),
        batches=_ints(batches, "--batches", MAX_BATCH),
        repeats=repeats, probe=probe, threads=threads, ready_timeout_s=ready_timeout,
        extra_args=tuple(engine_arg or ()), seed=seed)
    plan = plan_harvest(request)
    if dry_run:
        return print_json(plan.to_json()) if json_out else _render_plan(plan)
    if not json_out:
        for note in plan.notes:         # before the GPUs are taken (e.g. a layout priced as not fitting)
            err_console.print(f"note: {note}", markup=False)
    progress = None
    if not json_out and sys.stderr.isatty():
        progress = lambda text: err_console.print(f"... {text}", markup=False)
    report = run_harvest(plan, progress=progress, record_path=record, deadline_s=deadline,
                         request_timeout_s=request_timeout)
    if json_out:
        return print_json(report.to_json())
    _render_report(report)
