"""`inferasim deploy`: the launch command of a pick, and for a disaggregated pick a
Dynamo graph and llm-d manifests (agent.deploy).

The pick is one of: a ledger (its best trial, or `--trial N`), a plan-mix report and
`--slot MODEL/TIER`, or `--model ... --config ...`. Commands are printed whole, one per
pool, ready to copy; `--out` (default `./deploy-MODEL-CLUSTER-ENGINE`) receives
`deploy.json`, the engine's option files a command names (TensorRT-LLM's YAML), and for
a split `dynamo.yaml` and `llm-d-prefill.yaml` / `llm-d-decode.yaml`. A folder reused
for another pick loses the files the earlier deploy listed and this one does not write.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Optional

import typer

from agent.cli.app import app, cli_errors, console, int_option, output_dir, print_json
from agent.cli.info import ClusterOpt, ConfigOpt, EngineOpt, JsonOpt, target_with_default_engine
from agent.cli.render import config_text, id_line, number, paragraph, say
from agent.deploy.manifests import dynamo_graph, llmd_manifests
from agent.deploy.pick import Pick, from_config, from_ledger, from_plan
from agent.deploy.plan import DEFAULT_PORT, DeployOptions, DeployPlan, build_plan, refused_lever
from levers.errors import InputError
from predictor.files import atomic_write_text
from predictor.harvest.launch import DRAFT_CHECKPOINT

PORT = int_option("--port", 1, 65535)
TRIAL = int_option("--trial", 0)
SOURCES_ACCEPTED = "a LEDGER (path or search id), --plan REPORT.json --slot MODEL/TIER, or --model M [--config ...]"


@app.command("deploy")
@cli_errors
def deploy_command(
    ledger: Optional[str] = typer.Argument(None, help="Ledger path or search id: deploy its best trial."),
    trial: Optional[int] = typer.Option(None, "--trial", parser=TRIAL, help="Deploy this trial of the ledger."),
    plan: Optional[str] = typer.Option(None, "--plan", help="A plan-mix report (plan-mix --out)."),
    slot: Optional[str] = typer.Option(None, "--slot", help="MODEL/TIER of the plan-mix report, e.g. kimi-k3/interactive (MODEL/TIER#ENTRY when the models.yaml lists the model twice)."),
    model: Optional[str] = typer.Option(None, "--model", "-m", help="Deploy --config on this model."),
    cluster: Optional[str] = ClusterOpt, engine: Optional[str] = EngineOpt, config: Optional[list[str]] = ConfigOpt,
    model_path: Optional[str] = typer.Option(None, "--model-path", help="Checkpoint to serve (default: the HF id)."),
    draft_model: Optional[str] = typer.Option(None, "--draft-model",
                                              help="Draft checkpoint of EAGLE-3 / DSpark speculation (default: the "
                                                   "placeholder DRAFT_CHECKPOINT, to replace)."),
    port: int = typer.Option(DEFAULT_PORT, "--port", parser=PORT, help="Port of the first pool (decode: +1)."),
    image: Optional[str] = typer.Option(None, "--image", help="Container image for the manifests."),
    out: Optional[str] = typer.Option(None, "--out", help="Folder for the files (default ./deploy-MODEL-CLUSTER-ENGINE)."),
    json_out: bool = JsonOpt,
) -> None:
    """The launch command (and Dynamo / llm-d manifests) for a ledger's pick, a plan-mix slot or a --config."""
    for option, value, accepted in (("--model-path", model_path, "a checkpoint path or Hugging Face id"),
                                    ("--image", image, "a container image reference")):
        if value is not None and not value.strip():
            raise InputError(option, "is empty", f"{accepted}, or leave it out")
    pick = resolve_pick(ledger, trial, plan, slot, model, cluster, engine, config)
    target = pick.target
    folder = output_dir(out if out is not None else f"deploy-{target.card.name}-{target.cluster.spec}-{target.engine}",
                        "--out")
    options = DeployOptions(model_path, port, str(folder), draft_model=draft_model or DRAFT_CHECKPOINT)
    try:
        deployed = build_plan(target, pick.config, options, pick.priced_context)
    except InputError as error:
        raise _named_for(error, pick, ledger is not None) from None
    manifests, refused = manifests_for(deployed, image)
    if manifests and image is None and target.cluster.gpu.vendor == "amd":
        deployed = replace(deployed, notes=(*deployed.notes, AMD_IMAGE_NOTE))
    data = {**deployed.to_json(), "pick": pick.to_json(), "manifests": refused}
    paths = write_files(folder, deployed, manifests, data)
    data["files"] = {p.name: str(p) for p in paths}
    if json_out:
        return print_json(data)
    render(pick, deployed, paths, refused)


def _named_for(error: InputError, pick: Pick, from_ledger: bool) -> InputError:
    """A refusal of a ledger's or a report's pick names where its levers came from, not a
    --config the user never typed (`deploy LEDGER` read "--config expert_dtype: ...")."""
    if pick.origin == "--config" or not error.what.startswith("--config"):
        return error
    lever = refused_lever(error)
    another = "--trial N for another of its trials (inferasim ledger show)" if from_ledger else "another slot"
    return InputError(pick.origin, f"{lever}: {error.problem}" if lever else error.problem,
                      f"{error.accepted}; or {another}" if error.accepted else another)


def resolve_pick(ledger: str | None, trial: int | None, plan: str | None, slot: str | None, model: str | None,
                 cluster: str | None, engine: str | None, config: list[str] | None) -> Pick:
    """Exactly one source (module docstring)."""
    given = [name for name, value in (("LEDGER", ledger), ("--plan", plan), ("--model", model)) if value]
    if len(given) != 1:
        problem = "nothing to deploy" if not given else f"{' and '.join(given)} both name a pick"
        raise InputError("deploy", problem, SOURCES_ACCEPTED)
    if trial is not None and not ledger:
        raise InputError("--trial", "needs a LEDGER", SOURCES_ACCEPTED)
    if slot is not None and not plan:
        raise InputError("--slot", "needs --plan REPORT.json", SOURCES_ACCEPTED)
    # a ledger's or a report's pick carries its own model, cluster, engine and configuration
    overridden = [name for name, value in (("--cluster", cluster), ("--engine", engine), ("--config", config))
                  if value] if not model else []
    if overridden:
        raise InputError(overridden[0], f"cannot change the pick of {given[0]} (it names its own cluster, engine "
                                        "and configuration)", "--model M with --cluster, --engine and --config")
    if ledger:
        return from_ledger(ledger, trial)
    if plan:
        return from_plan(plan, slot)
    return from_config(target_with_default_engine(model, cluster, engine), config)


#: the manifests' default images (agent.deploy.manifests) are CUDA builds
AMD_IMAGE_NOTE = ("the manifests' images are the engines' public NVIDIA builds (CUDA): on AMD GPUs pass --image "
                  "with the engine's ROCm build")


def manifests_for(plan: DeployPlan, image: str | None) -> tuple[dict[str, str], dict[str, str]]:
    """(file name -> text, manifest kind -> why it was not written) for a split, or for
    colocated replicas (a router in front of them: Dynamo's frontend; llm-d's manifests
    here are its P/D path's). One colocated replica needs none."""
    if not plan.is_disaggregated and plan.pools[0].replicas <= 1:
        return {}, {}
    files, refused = {}, {}
    try:
        files["dynamo.yaml"] = dynamo_graph(plan, image)
    except InputError as error:
        refused["dynamo"] = error.problem
    if not plan.is_disaggregated:
        refused["llm-d"] = ("written for a split's prefill and decode pools only; colocated replicas run behind "
                            "the Dynamo frontend (dynamo.yaml)")
        return files, refused
    try:
        files.update({f"llm-d-{role}.yaml": text for role, text in llmd_manifests(plan, image).items()})
    except InputError as error:
        refused["llm-d"] = error.problem
    return files, refused


def write_files(folder: Path, plan: DeployPlan, manifests: dict[str, str], data: dict) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for pool in plan.pools:
        for path, text in pool.command.files:
            paths.append(atomic_write_text(Path(path), text))
    for name, text in manifests.items():
        paths.append(atomic_write_text(folder / name, text))
    summary = folder / "deploy.json"
    stale = earlier_files(folder, {p.name for p in [*paths, summary]})
    files = {p.name: str(p) for p in [*paths, summary]}
    atomic_write_text(summary, json.dumps({**data, "files": files}, indent=1) + "\n")
    for path in stale:                      # a reused folder holds this pick's files only
        path.unlink(missing_ok=True)
    return [*paths, summary]


def earlier_files(folder: Path, keep: set[str]) -> list[Path]:
    """Files an earlier deploy into ``folder`` wrote (its deploy.json lists them) that
    this one does not: a split's manifests left beside a colocated pick would be applied
    with it (`kubectl apply -f FOLDER`). Only files in ``folder`` itself are touched."""
    try:
        listed = json.loads((folder / "deploy.json").read_text("utf-8")).get("files", {})
        paths = [Path(str(path)) for path in listed.values()]
    except (OSError, ValueError, AttributeError):
        return []
    home = folder.resolve()
    return [path for path in paths
            if path.name not in keep and path.is_file() and path.resolve().parent == home]


def render(pick: Pick, plan: DeployPlan, paths: list[Path], refused: dict[str, str]) -> None:
    target = plan.target
    say(console, f"Deploy {target.card.name} on {target.cluster.spec} ({target.engine}), from {pick.origin}"
                 + (f" ({pick.mode})" if pick.mode else ""))
    paragraph(console, config_text(plan.config), first="configuration: ")
    for line in plan.recipe_lines():
        say(console, line)
    for line in plan.lines():
        id_line(console, line, style="")
    first = plan.pools[0].request
    say(console, f"prefix caching {'on' if first.prefix_caching else 'off'} (the prefix_cache lever, as priced); "
                 f"max model length {number(first.context_tokens)} tokens; {number(plan.total_gpus)} GPUs in all")
    for kind, reason in refused.items():
        say(console, f"no {kind} manifest: {reason}")
    say(console, "files:")
    for path in paths:
        id_line(console, f"  {path}", style="")

