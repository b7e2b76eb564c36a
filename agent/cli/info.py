"""What is known: `models`, `hardware`, `levers`, `objectives`, and the two checks that
need no prediction, `check` (structural legality + memory) and `memory` (METHOD §3.9)."""

from __future__ import annotations

import dataclasses
from typing import Optional

import typer
from rich.markup import escape

from agent.cli.app import app, cli_errors, console, err_console, int_option, print_json
from agent.cli.render import MISSING, number, objective_header, paragraph, say, table
from levers.catalog import LEVERS, Engine, parse_engine
from levers.configuration import Configuration, engine_only_values, from_partial, parse_config_text, parse_partial
from levers.legality import structural_reasons
from objectives.objectives import list_objectives
from predictor.cards.registry import card_problems, list_cards
from predictor.feasibility import DEFAULT_CONTEXT_TOKENS, check_configuration, memory_for, pool_configs
from predictor.hardware import list_gpus
from predictor.memory import MemoryBreakdown
from predictor.step.speculation import parse_acceptance, read_acceptance_file
from predictor.target import Target, check_workload_context, resolve_target
from predictor.workload import PREDICT_CONTEXT_TOKENS, WorkloadSpec

JsonOpt = typer.Option(False, "--json", help="Machine-readable output.")
WideOpt = typer.Option(False, "--wide", help="One table with the ids in it (lines wider than the terminal).")
MAX_CONTEXT_TOKENS = 1 << 27  # 134M tokens: beyond every model card
ModelOpt = typer.Option(..., "--model", "-m", help="Model name or alias, e.g. kimi-k3.")
ClusterOpt = typer.Option(None, "--cluster", "-c", help="GPU\\[xPER_NODE\\[xNODES]], default mi355x.")
EngineOpt = typer.Option(None, "--engine", "-e", help="vllm, sglang, atom, trtllm or llamacpp (default: the first "
                                                     "with an anchor for the model on the cluster, else vllm).")
ConfigOpt = typer.Option(None, "--config", help="lever=value pairs, comma-separated; may repeat; @FILE reads a YAML/JSON mapping.")
AcceptanceOpt = typer.Option(None, "--acceptance", help=(
    "Speculative acceptance of this traffic (METHOD §3.8): L(1),L(2),... committed tokens per verify step, "
    "k:AL pairs (e.g. 3:2.4), al=X (a forced acceptance length at the configured depth, e.g. al=3.2, as "
    "benchmarks fix it), or a JSON/CSV file of them. Default: the measured curve of the model and "
    "method; n-gram has none and takes a flagged conservative default."))


def with_acceptance(spec: WorkloadSpec, acceptance: str | None) -> WorkloadSpec:
    """The workload with the traffic's acceptance curve (`--acceptance`), if given."""
    if acceptance is None:
        return spec
    return dataclasses.replace(spec, acceptance=parse_acceptance(acceptance, read_acceptance_file))


def _card_row(card) -> dict:
    return {
        "name": card.name, "hf_id": card.hf_id, "aliases": list(card.aliases),
        "total_params_b": round(card.total_params() / 1e9, 2),
        "active_params_b": round(card.active_params() / 1e9, 2),
        "layers": card.num_layers, "routed_experts": card.num_experts, "top_k": card.top_k,
        "max_context": card.max_context, "native_dtypes": card.native_dtypes.model_dump(),
        "recipes": list(card.recipe_names),     # weight_dtype=recipe:NAME (native: the checkpoint)
        "provenance": card.source.model_dump() if hasattr(card.source, "model_dump") else card.source,
    }


@app.command("models")
@cli_errors
def models(json_out: bool = JsonOpt) -> None:
    """The embedded (and user-added) model cards."""
    rows = [_card_row(card) for card in list_cards()]
    for path, problem in card_problems():
        err_console.print(f"warning: skipped {path}: {problem}", markup=False, highlight=False, soft_wrap=True)
    if json_out:
        return print_json(rows)
    grid = table("Model cards", [("name", "left"), ("params\ntotal B", "right"), ("params\nactive B", "right"),
                                 ("layers", "right"), ("experts\n/ top-k", "right"), ("context\ntokens", "right"),
                                 ("dtypes\nw / e", "left"), ("recipes", "left")], wrap_last=True)
    for row in rows:
        dtypes = row["native_dtypes"]
        experts = f"{row['routed_experts']}/{row['top_k']}" if row["routed_experts"] else "dense"
        expert = dtypes["expert"] or "-"
        if dtypes.get("expert_format"):   # a 4-bit checkpoint's own format (MXFP4, INT4)
            expert = f"{expert} ({dtypes['expert_format']})"
        grid.add_row(row["name"], number(row["total_params_b"]), number(row["active_params_b"]),
                     str(row["layers"]), experts, number(row["max_context"]),
                     f"{dtypes['weight']} / {expert}", ", ".join(row["recipes"]))
    console.print(grid)
    say(console, "recipes: the checkpoints weight_dtype=recipe:NAME selects (native: the model's own)")


@app.command("hardware")
@cli_errors
def hardware(json_out: bool = JsonOpt) -> None:
    """The embedded GPU profiles."""
    gpus = list_gpus()
    if json_out:
        return print_json([gpu.model_dump(mode="json") for gpu in gpus])
    grid = table("GPU profiles", [("GPU", "left"), ("HBM\nGB", "right"), ("HBM\nGB/s", "right"),
                                  ("BF16\nTFLOPS", "right"), ("FP8\nTFLOPS", "right"), ("FP4\nTFLOPS", "right"),
                                  ("GPUs per\nnode", "right"), ("scale-up\nGPUs", "right")])
    for gpu in gpus:
        grid.add_row(gpu.name, number(gpu.hbm_gb), number(gpu.hbm_bandwidth_gbps), number(gpu.bf16_tflops),
                     number(gpu.fp8_tflops), number(gpu.fp4_tflops) if gpu.fp4_tflops else MISSING,
                     str(gpu.gpus_per_node), str(gpu.scale_up_domain))
    console.print(grid)


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
def levers(engine: Optional[str] = typer.Option(None, "--engine", "-e", help="vllm, sglang, atom, trtllm or llamacpp "
                                                "(default: every engine)."),
           json_out: bool = JsonOpt) -> None:
    """The 36 levers with their kind and legal values (per engine)."""
    chosen = parse_engine(engine) if engine is not None else None
    rows = [_lever_row(lever, chosen) for lever in LEVERS]
    if json_out:
        return print_json(rows)
    grid = table(f"Levers ({chosen or 'all engines'})", [("#", "right"), ("lever", "left"), ("kind", "left"),
                                                          ("legal values", "left"), ("description", "left")],
                 wrap=(2, 3, 4))
    for lever, row in zip(LEVERS, rows):
        grid.add_row(str(row["index"]), row["name"], row["kind"], escape(lever.accepted_text(chosen)),
                     escape(row["description"]))     # literal text: `[/TSt]` is not markup
    console.print(grid)


@app.command("objectives")
@cli_errors
def objectives(json_out: bool = JsonOpt) -> None:
    """The 24 objectives with their direction and metric."""
    rows = [{"name": o.name, "group": o.group, "metric": o.metric, "direction": str(o.direction),
             "unit": objective_header(o).split("\n")[-1],     # tok/s/GPU, tok/s/user: as the tables say
             "aliases": list(o.aliases), "description": o.description} for o in list_objectives()]
    if json_out:
        return print_json(rows)
    grid = table("Objectives", [("objective", "left"), ("dir.", "left"), ("unit", "left"),
                                ("what it is (aliases)", "left")], wrap_last=True)
    for row in rows:
        aliases = f" (alias {', '.join(row['aliases'])})" if row["aliases"] else ""
        grid.add_row(row["name"], row["direction"], row["unit"], f"{row['description']}; reads {row['metric']}{aliases}")
    console.print(grid)


def configuration_from_options(config: list[str] | None, concurrency: int | None = None,
                               engine: Engine | None = None) -> Configuration:
    """``--config`` pairs over the lever defaults; ``--concurrency`` (when given) wins. On
    ``engine``, a lever the user left unset whose default the engine cannot run and which
    it allows one value for takes that value (llama.cpp: `graph_capture=none`), as the
    seed planner and a harvest do (`levers.configuration.engine_only_values`)."""
    partial = parse_config_text(config)
    if concurrency is not None:
        partial.update(parse_partial({"concurrency": concurrency}))
    fixed = engine_only_values(engine, partial) if engine is not None else {}
    return from_partial({**fixed, **partial})


def priced_configuration(target: Target, configuration: Configuration,
                         context_tokens: float | None = None) -> tuple[Configuration, dict[str, str]]:
    """`predictor.anchors.anchoring.as_priced`, imported here only (the anchors are read
    by the commands that price)."""
    from predictor.anchors.anchoring import as_priced
    return as_priced(target, configuration, context_tokens=context_tokens)


def recipe_text(taken: dict[str, str]) -> str:
    from predictor.anchors.anchoring import recipe_text as text
    return text(taken)


def target_with_default_engine(model: str, cluster: str | None, engine: str | None) -> Target:
    """PRODUCT.md §2: the first engine with an anchor for the model there, else vllm
    (the anchors are read only here: `inferasim models` and the like stay light)."""
    from predictor.anchors.anchoring import default_store
    return resolve_target(model, cluster, engine, has_anchor=default_store().has_anchor)


@app.command("check")
@cli_errors
def check(model: str = ModelOpt, cluster: Optional[str] = ClusterOpt, engine: Optional[str] = EngineOpt,
          config: Optional[list[str]] = ConfigOpt,
          context: int = typer.Option(DEFAULT_CONTEXT_TOKENS, "--context",
                                      parser=int_option("--context", 1, MAX_CONTEXT_TOKENS),
                                      help="Tokens per sequence one request must fit (prompt + output)."),
          json_out: bool = JsonOpt) -> None:
    """Is a configuration legal (structure, engine support, fusions, 90% HBM)? Exit 1 if not.

    Memory fits one sequence of --context tokens (prompt + output), as `memory` sizes it. A
    legal configuration its engine's launch cannot express (an ATOM split) is said as
    'not deployable' (exit 0: its price stands; `deploy` refuses it)."""
    target = target_with_default_engine(model, cluster, engine)
    check_workload_context(target.card, context, f"{context:,} tokens", "--context")
    typed = configuration_from_options(config, engine=target.engine)
    configuration, taken = priced_configuration(target, typed, PREDICT_CONTEXT_TOKENS)
    result = check_configuration(target.card, target.cluster, target.engine, configuration, context)
    # legal to price, and yet its engine's launch may refuse it (ATOM has no split pools): said, as deploy says it.
    # Imported here: deploy's adapters cost `levers`, `models` and the other commands of this module 0.5 s of start-up.
    from agent.deploy.plan import DEPLOYABLE, try_plan
    deployable = result.legal and target.engine in DEPLOYABLE       # llama.cpp: a harvest-only engine, no deploy
    refused = try_plan(target, typed, PREDICT_CONTEXT_TOKENS)[1] if deployable else None
    if json_out:
        print_json({**target.to_json(), "configuration": configuration.to_dict(),
                    "configuration_text": configuration.describe(), "recipe": taken, **result.to_json(),
                    "deploy_refused": refused})
        if not result.legal:
            raise typer.Exit(1)
        return
    if taken:
        say(console, recipe_text(taken))
    if result.legal:
        console.print(f"[green]legal[/green]: {configuration.describe()} on {target.cluster.spec} ({target.engine})")
        if refused:
            paragraph(console, refused, first="  not deployable: ")
    else:
        console.print(f"[red]illegal[/red]: {configuration.describe()}")
        for reason in result.reasons:
            paragraph(console, reason, first="  - ")
    if not result.legal:
        raise typer.Exit(1)


@app.command("memory")
@cli_errors
def memory(model: str = ModelOpt, cluster: Optional[str] = ClusterOpt, engine: Optional[str] = EngineOpt,
           config: Optional[list[str]] = ConfigOpt,
           context: int = typer.Option(DEFAULT_CONTEXT_TOKENS, "--context", parser=int_option("--context", 1, MAX_CONTEXT_TOKENS),
                                        help="Tokens per sequence."),
           json_out: bool = JsonOpt) -> None:
    """Per-GPU memory: weights by component, KV per token, pool, largest concurrency.

    A disaggregated deployment shows each pool: its prefill and decode layouts."""
    target = target_with_default_engine(model, cluster, engine)
    check_workload_context(target.card, context, f"{context:,} tokens", "--context")
    configuration, taken = priced_configuration(target, configuration_from_options(config, engine=target.engine),
                                                 PREDICT_CONTEXT_TOKENS)
    pools = pool_configs(configuration)
    shown = {None: configuration} if pools is None else {"prefill pool": pools[0], "decode pool": pools[1]}
    memories = {label: memory_for(target.card, target.cluster, pool, context) for label, pool in shown.items()}
    reasons = structural_reasons(configuration, target.engine, target.card, target.cluster)
    main = memories[None] if pools is None else memories["decode pool"]     # the pool that holds the KV
    short = [(label, m.reason) for label, m in memories.items() if not m.fits]
    data = {**main.to_json(), "fits": not short,
            "reason": "; ".join(f"{label}: {why}" if label else why for label, why in short) or None}
    if json_out:
        extra = {} if pools is None else {"prefill_pool": memories["prefill pool"].to_json(),
                                          "decode_layout": pools[1].describe(), "prefill_layout": pools[0].describe()}
        return print_json({"model": target.card.name, "cluster": target.cluster.spec, "engine": str(target.engine),
                           "configuration_text": configuration.describe(), "recipe": taken,
                           # legal as `check` says it: structurally, and inside 90% of HBM
                           "legal": not reasons and not short,
                           "reasons": reasons + ([data["reason"]] if short else []),
                           "context_tokens": context, **data, **extra})
    if taken:
        say(console, recipe_text(taken))
    for label, memory in memories.items():
        pool = "" if label is None else f" ({label}: {shown[label].describe()})"
        console.print(_memory_table(f"Memory per GPU{pool}: {target.card.name} on {target.cluster.spec}, "
                                    f"context {number(context)} tokens", memory, context))
    if reasons:     # the memory of a layout that cannot run is still shown, but not as a verdict
        paragraph(console, "; ".join(reasons), first="legal (inferasim check): no: ")


def _memory_table(title: str, memory: MemoryBreakdown, context: int):
    data = memory.to_json()
    grid = table(title, [("item", "left"), ("value", "right"), ("unit", "left")], wrap=(1,))
    for component, gb in data["weights_by_component_gb"].items():
        grid.add_row(f"weights: {component}", number(gb), "GB")
    grid.add_row("weights total", number(data["weights_per_gpu_gb"]), "GB")
    grid.add_row("KV per token" + (" (drafter incl.)" if memory.drafter_kv_bytes_per_token else ""),
                 number(memory.cache_bytes_per_token), "bytes")
    grid.add_row("state per sequence" + (" (drafter incl.)" if memory.drafter_bytes_per_sequence else ""),
                 number(memory.state_bytes_per_sequence + memory.drafter_bytes_per_sequence), "bytes")
    grid.add_row(f"KV + state per {number(context)}-token sequence", number(data["bytes_per_sequence"]), "bytes")
    grid.add_row("activations + graphs", number(data["activations_gb"] + data["graph_gb"]), "GB")
    grid.add_row("KV pool", number(data["kv_pool_per_gpu_gb"]), "GB")
    grid.add_row("max concurrency", number(data["max_concurrency"]), "sequences")
    grid.add_row("fits (90% HBM)", "yes" if data["fits"] else f"no: {data.get('reason')}", "")
    return grid
