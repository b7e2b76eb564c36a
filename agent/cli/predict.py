"""`inferasim predict`: price one configuration (METHOD §2-§4).

Default workload is `1k/1k` (the analytical predictor); `--workload agentic` runs the
DES over ``--replications`` workload draws (default 3), and every DES metric is shown as
``value [lo-hi]``, its mean and 90% interval over the replications. Fixed-length traffic
is replayed too when ``--requests`` or ``--replications`` is given (as a search replays it
for a percentile SLO, so a ledger's trial can be re-priced as it was). A configuration that
does not fit prints the memory reason, `metrics: null`, and exits 1.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import typer

from agent.cli.app import MAX_DES_REQUESTS, MIN_DES_REQUESTS, SEED, app, cli_errors, console, int_option, print_json
from agent.cli.info import (
    AcceptanceOpt,
    ClusterOpt,
    ConfigOpt,
    EngineOpt,
    JsonOpt,
    ModelOpt,
    configuration_from_options,
    priced_configuration,
    recipe_text,
    target_with_default_engine,
    with_acceptance,
)
from agent.cli.memory_view import memory_pools, memory_table, sizing
from agent.cli.render import MISSING, does_not_fit, number, paragraph, percent, say, table, with_interval
from levers.configuration import Configuration
from predictor.predict import predict
from predictor.prediction import Prediction
from predictor.target import Target, check_workload_context
from predictor.units import MS_PER_S, US_PER_MS
from predictor.workload import PREDICT_WORKLOAD, WorkloadSpec, parse_workload

# Shown in this order when predicted. TPOT and tok/s/user sit at the same statistic (the
# median over requests) so tok/s/user = 1000 / TPOT; the mean of 1/TPOT is --json's
# headline `interactivity` and the `interactivity` objective's, so it is shown too.
SHOWN_METRICS = (
    ("TTFT", "mean", "ttft_ms_mean", "ms"), ("TTFT", "p90", "ttft_ms_p90", "ms"),
    ("TPOT", "mean", "tpot_ms_mean", "ms"), ("TPOT", "p50", "tpot_ms_p50", "ms"),
    ("tok/s/user", "p50 of 1/TPOT", "interactivity_p50", "tok/s/user"),
    ("tok/s/user", "mean of 1/TPOT", "interactivity_mean", "tok/s/user"),
    ("tok/s/user", "P90 = 1000/p90 TPOT", "tpot_ms_p90", "tok/s/user"),
    ("ITL", "mean", "itl_ms_mean", "ms"), ("ITL", "p90", "itl_ms_p90", "ms"),
    ("E2E", "mean", "e2e_ms_mean", "ms"),
    ("throughput (output)", "per GPU", "output_throughput_per_gpu", "tok/s/GPU"),
    ("total throughput", "per GPU", "throughput_per_gpu", "tok/s/GPU"),
    ("total throughput", "fleet", "throughput_fleet", "tok/s"),
)


PREDICT_REPLICATIONS = 3     # DES workload draws per prediction (90% intervals)


def _hits(hits: dict) -> str:
    """Overall and per-tier hit rates, with their replication intervals."""
    intervals = hits.get("intervals", {})
    parts = [("overall", hits["overall"])] + list(hits.get("per_tier", {}).items())
    return ", ".join(f"{name} {with_interval(value, intervals.get(name))}" for name, value in parts)


def _shown(result: Prediction, key: str, unit: str) -> tuple[float, tuple | None, tuple | None]:
    """(value, DES 90% interval, 80% interval) of a shown row; a TPOT key shown in
    tok/s/user is its inverse, 1000 / TPOT (the intervals' ends swap)."""
    value, seeds, interval = result.metrics[key], result.seed_intervals.get(key), result.intervals.get(key)
    if not (key.startswith("tpot_ms") and unit == "tok/s/user"):
        return value, seeds, interval
    inverse = lambda pair: (MS_PER_S / pair[1], MS_PER_S / pair[0]) if pair and min(pair) > 0 else None  # noqa: E731
    return MS_PER_S / value, inverse(seeds), inverse(interval)


@app.command("predict")
@cli_errors
def predict_command(
    model: str = ModelOpt, cluster: Optional[str] = ClusterOpt, engine: Optional[str] = EngineOpt,
    config: Optional[list[str]] = ConfigOpt,
    workload: str = typer.Option(PREDICT_WORKLOAD, "--workload", "-w", help="1k/1k, 8k/1k, ISL/OSL or agentic."),
    concurrency: Optional[int] = typer.Option(None, "--concurrency", parser=int_option("--concurrency", 1, 65536),
                                                help="Overrides the concurrency lever."),
    seed: int = typer.Option(0, "--seed", parser=SEED, help="Seed for DES runs."),
    replications: Optional[int] = typer.Option(None, "--replications", parser=int_option("--replications", 1, 32),
                                               help=f"DES workload draws; metrics are their mean with a 90% interval "
                                                    f"(default {PREDICT_REPLICATIONS}). Given, it replays fixed-length "
                                                    "traffic too, as tune does for a percentile SLO."),
    acceptance: Optional[str] = AcceptanceOpt,
    requests: Optional[int] = typer.Option(None, "--requests", parser=int_option("--requests", MIN_DES_REQUESTS, MAX_DES_REQUESTS),
                                           help="Requests each DES replay releases (default: 40 per client on "
                                                "agentic); fewer is faster and noisier. At most "
                                                f"{MAX_DES_REQUESTS:,} (`simulate --allow-large` replays more)."),
    json_out: bool = JsonOpt,
) -> None:
    """Price one configuration: metrics, mode (anchored / rank-only), flags, memory, breakdown."""
    target = target_with_default_engine(model, cluster, engine)
    configuration = configuration_from_options(config, concurrency, target.engine)
    spec = with_acceptance(parse_workload(workload), acceptance)
    check_workload_context(target.card, spec.context_tokens, spec.name)
    # asked for replays, fixed-length traffic is replayed (the DES), as a search prices it
    # for a percentile SLO: the analytical figure ignored them, 7% from the ledger's trial
    replay = requests is not None or replications is not None
    result = predict(target, configuration, spec, seed=seed, replications=replications or PREDICT_REPLICATIONS,
                     num_requests=requests, need_distribution=replay)
    unused = [name for name, given in (("--seed", seed != 0),) if given]
    notes = []   # options the prediction had no use for are said, not silently dropped
    if unused and result.metrics is not None and result.source != "des":
        notes.append(f"{', '.join(unused)}: DES options, unused: this prediction is {result.source} (no replay)")
    if acceptance is not None and (configuration.spec_method == "none" or configuration.spec_depth == 0):
        notes.append("--acceptance: unused without speculative decoding (set spec_method and spec_depth)")
    if notes:
        result = dataclasses.replace(result, flags=(*result.flags, *notes))
    # unset levers priced as the calibrating anchor's recipe ran them (weight_dtype=fp4 on a
    # bf16 checkpoint, say): said, as `check`, `memory` and `deploy` say it
    taken = priced_configuration(target, configuration, spec.priced_context_tokens)[1]
    if json_out:
        print_json({**target.to_json(), "workload": spec.name, "configuration": configuration.to_dict(),
                    "configuration_text": configuration.describe(), "recipe": taken, **prediction_json(result),
                    **_prefill_pool(target, configuration, spec, result)})
    else:
        render_prediction(target, configuration, spec, result, taken)
    if result.metrics is None:
        raise typer.Exit(1)


def _prefill_pool(target: Target, configuration: Configuration, spec: WorkloadSpec, result: Prediction) -> dict:
    """A split's prefill pool's memory as the table shows it, under ``prefill_pool`` (as
    `memory --json` names it; ``memory`` is the decode pool's, which holds the KV)."""
    if result.memory is None:
        return {}
    pools = memory_pools(target, configuration, result.memory, spec.priced_context_tokens)
    return {"prefill_pool": pools[1][1].to_json()} if len(pools) > 1 else {}


def prediction_json(result: Prediction) -> dict:
    """The prediction's record with the CLI's names (the anchor's id is `anchor_id`, as in
    ledgers; `anchor` is a whole anchor in `anchors show`)."""
    data = result.to_json()
    data["anchor_id"] = data.pop("anchor")
    return data


DECODE_KEYS = ("tpot_", "itl_", "interactivity_", "e2e_")   # undefined (E2E: the TTFT) at one token


def render_prediction(target: Target, configuration: Configuration, spec: WorkloadSpec, result: Prediction,
                      taken: dict[str, str] | None = None) -> None:
    workload, priced_context = spec.name, spec.priced_context_tokens
    single_token = spec.is_fixed and spec.osl == 1
    title = (f"{target.card.name} on {target.cluster.spec} ({target.engine}), {workload}: "
             f"{configuration.describe()}")
    if result.metrics is None:      # PRODUCT.md: the reason, the memory breakdown, and the precisions it sized
        does_not_fit(console, title, result.reasons)
        if result.memory is not None:       # sized (a structural refusal never was)
            if taken:
                say(console, recipe_text(taken))
            console.print(memory_table(memory_pools(target, configuration, result.memory, priced_context),
                                       *sizing(target.card)))
        return
    grid = table(None, [("metric", "left"), ("statistic over requests", "left"), ("value", "right"),
                        ("80% interval", "right"), ("unit", "left")], wrap=(1,))
    metrics, outside = result.metrics, False
    for label, stat, key, unit in SHOWN_METRICS:
        if single_token and key.startswith(DECODE_KEYS):
            continue
        if key == "interactivity_mean" and metrics.get(key) == metrics.get("interactivity_p50"):
            continue        # one speed for every request (the analytical steady state): one row
        if metrics.get(key) is not None:
            value, seeds, interval = _shown(result, key, unit)
            outside = outside or bool(interval and not interval[0] <= value <= interval[1])
            grid.add_row(label, stat, with_interval(value, seeds),
                         f"{number(interval[0])}-{number(interval[1])}" if interval else MISSING, unit)
    paragraph(console, title, indent=0)
    console.print(grid)
    if single_token:
        say(console, "one output token per request: no decode step, so no TPOT, ITL or tok/s/user, and E2E is the TTFT")
    hits = result.breakdown.get("des", {}).get("hit_rate")
    if hits:
        say(console, "prefix hit rate: " + _hits(hits))
    say(console, f"mode: {result.mode}; transfer: {result.transfer or MISSING} "
                 f"({', '.join(result.transfer_kinds) or MISSING}); anchor: {result.anchor_id or MISSING}; "
                 f"source: {result.source}")
    legend = "80% interval: from the measured error of this transfer kind (docs/SCORES.md)"
    if result.seed_intervals:
        legend += (" and the replications' noise; brackets after a value: the 90% interval over DES "
                   "replications")
    if outside:   # a band whose errors are one-sided: the measured values sat on one side of the prediction
        legend += ("; an interval that leaves out its value: this kind's measured values lay on one side of the "
                   "prediction more than 90% of the time (the model's bias there, kept rather than hidden)")
    say(console, legend)
    if result.flags:
        paragraph(console, "; ".join(result.flags), first="flags: ")
    if taken and recipe_text(taken) not in result.flags:     # an illegal one carries no flags
        say(console, recipe_text(taken))
    if result.memory is not None:
        console.print(memory_table(memory_pools(target, configuration, result.memory, priced_context),
                                   *sizing(target.card)))
    step = result.breakdown.get("decode_step")
    if step:
        terms = ", ".join(f"{k.removesuffix('_us')} {number(v / US_PER_MS)}" for k, v in step.items()
                          if k != "total_us" and v)
        paragraph(console, f"{number(step['total_us'] / US_PER_MS)} ms = {terms} (ms)", first="decode step: ")
    for item in result.fusion_opportunities:
        say(console, f"fusion opportunity: {item.get('name')} saves {number(item.get('saving_us', 0))} us "
                     f"({percent(item.get('share', 0))} of the decode step)")
