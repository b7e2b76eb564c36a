"""The harvests a deployment needs, each one checked (METHOD §3.14, §4).

`reduced_harvests` reduces a configuration to its anchor layouts
(`predictor.harvest.reduce`) and gives each the `inferasim harvest` command that
measures it, after two checks: the layout must fit in memory (a reduction narrows TP,
so the weights are spread over fewer GPUs) and `plan_harvest` must accept it (what
`--dry-run` runs: every engine refusal, e.g. a precision an engine cannot quantize).

A precision the engine cannot quantize to online (anything on TensorRT-LLM; a slot the
checkpoint already holds quantized on vLLM) is measured from a checkpoint quantized to
it: the command then names it `--model-path QUANTIZED_CHECKPOINT`, a placeholder to
replace.

When the one-node reduction does not fit in memory and the cluster's scale-up domain
spans nodes (GB300 NVL72: trays of 4 GPUs in one NVLink domain of 72), the narrowest
width that fits, within the domain and no wider than the target, is measured instead:
the engine is started across those nodes by its own launcher and harvested through
`--endpoint` (the command carries a `HEAD_NODE` placeholder to replace). Otherwise the
result says why no harvest can measure the layout.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from levers.catalog import Engine
from levers.configuration import Configuration
from levers.errors import InputError
from predictor.cards.registry import ModelCard
from predictor.feasibility import check_configuration
from predictor.hardware import Cluster
from predictor.harvest.plan import HarvestRequest, plan_harvest
from predictor.harvest.reduce import Reduction, anchor_layouts, harvest_command, harvest_config_text
from predictor.harvest.launch import DRAFT_CHECKPOINT
from predictor.step.operators import precisions_on

CHECK_PORT = 8000                                # a validation-only plan binds nothing
DOMAIN_ENDPOINT = "http://HEAD_NODE:8000"        # where the user starts a multi-node engine
QUANTIZED_CHECKPOINT = "QUANTIZED_CHECKPOINT"    # a checkpoint with the asked precisions
PRECISION_LEVERS = ("weight_dtype", "activation_dtype", "expert_dtype")


@dataclass(frozen=True, slots=True)
class ReducedHarvest:
    """One anchor layout and the harvest measuring it: ``command`` passed `plan_harvest`,
    else ``problem`` says why there is none. ``notes`` say how it must be launched."""

    reduction: Reduction
    command: str | None
    problem: str | None = None
    notes: tuple[str, ...] = ()

    def lines(self) -> list[str]:
        """Shell-ready lines: the reduction, notes and problem as comments, then the command."""
        head = [f"{self.reduction.pool} pool (restored by METHOD §3.11)"] if self.reduction.pool else []
        if self.reduction.steps:
            head.append("reduced (METHOD §3.14): " + "; ".join(self.reduction.steps))
        lines = ["# " + ", ".join(head)] if head else []
        lines += [f"# {note}" for note in self.notes]
        if self.problem:
            lines.append(f"# no harvest for {harvest_config_text(self.reduction.config)}: {self.problem}")
        return lines + ([self.command] if self.command else [])


def _fits(card: ModelCard, cluster: Cluster, engine: Engine | str, config: Configuration) -> str | None:
    feasibility = check_configuration(card, cluster, engine, config)
    return None if feasibility.legal else "; ".join(feasibility.reasons)


def _plan_problem(engine: Engine | str, model: str, cluster: Cluster, config: Configuration, endpoint: str | None,
                  model_path: str | None) -> InputError | None:
    try:
        plan_harvest(HarvestRequest(engine=str(engine), model=model, cluster=cluster.spec,
                                    config_text=harvest_config_text(config), endpoint=endpoint,
                                    model_path=model_path, port=CHECK_PORT, draft_model=DRAFT_CHECKPOINT))
    except InputError as error:
        return error
    return None


def _checked(engine: Engine | str, model: str, cluster: Cluster, reduction: Reduction, endpoint: str | None,
             notes: tuple[str, ...] = ()) -> ReducedHarvest:
    extra = (f"--endpoint {endpoint}",) if endpoint else ()
    problem = _plan_problem(engine, model, cluster, reduction.config, endpoint, None)
    asked = {name: getattr(reduction.config, name) for name in PRECISION_LEVERS if getattr(reduction.config, name)}
    if problem and asked and endpoint is None \
            and not _plan_problem(engine, model, cluster, reduction.config, None, QUANTIZED_CHECKPOINT):
        wanted = ", ".join(f"{k}={v}" for k, v in asked.items())
        notes += (f"{engine} cannot quantize to {wanted} at launch: serve a checkpoint of {model} that holds it "
                  f"(replace {QUANTIZED_CHECKPOINT} with its path or id)",)
        extra, problem = (f"--model-path {QUANTIZED_CHECKPOINT}",), None
    if problem:
        return ReducedHarvest(reduction, None, problem.message, notes)
    return ReducedHarvest(reduction, harvest_command(str(engine), model, cluster.spec, reduction.config, *extra),
                          None, notes)


def _across_domain(engine: Engine | str, model: str, card: ModelCard, cluster: Cluster, config: Configuration,
                   index: int) -> ReducedHarvest | None:
    """The narrowest multi-node width of one scale-up domain that fits (module docstring)."""
    devices = cluster.gpus_per_node * 2
    while devices <= min(cluster.scale_up_gpus(), config.replica_gpus):
        reduction = anchor_layouts(config, devices, "the narrowest width that fits in memory")[index]
        if reduction.config.replica_gpus > cluster.gpus_per_node and not _fits(card, cluster, engine,
                                                                               reduction.config):
            nodes = -(-reduction.config.replica_gpus // cluster.gpus_per_node)
            note = (f"TP{reduction.config.tp} spans {nodes} nodes of one {cluster.scale_up_gpus()}-GPU scale-up "
                    f"domain: start {engine} across them, then replace HEAD_NODE with its address")
            return _checked(engine, model, cluster, reduction, DOMAIN_ENDPOINT, (note,))
        devices *= 2
    return None


def as_the_checkpoint_runs(card: ModelCard, cluster: Cluster, config: Configuration) -> Configuration:
    """``config`` without the precision levers that restate what its checkpoint runs unset
    (its own weight and expert dtypes, and the activations those GEMMs then take), so a
    harvest launches the stock checkpoint: DeepSeek-R1's FP8 recipe (weights, experts and
    activations FP8) was sent looking for a quantized checkpoint because SGLang cannot
    set activation_dtype on its command line, and it needs none."""
    native = card.native_dtypes
    bare = replace(config, weight_dtype=None if config.weight_dtype == str(native.weight) else config.weight_dtype,
                   expert_dtype=None if config.expert_dtype == str(native.expert) else config.expert_dtype)
    unset = replace(bare, activation_dtype=None)
    if bare.activation_dtype and (precisions_on(card, unset, cluster.gpu).gemm_activations()
                                  == precisions_on(card, bare, cluster.gpu).gemm_activations()):
        return unset
    return bare


def reduced_harvests(engine: Engine | str, model: str, card: ModelCard, cluster: Cluster,
                     config: Configuration) -> list[ReducedHarvest]:
    """The anchor layouts of ``config`` (launched as its checkpoint runs where its
    precisions say no more, `as_the_checkpoint_runs`), each with its checked harvest
    (module docstring)."""
    results = []
    for index, reduction in enumerate(anchor_layouts(as_the_checkpoint_runs(card, cluster, config),
                                                     cluster.gpus_per_node)):
        problem = _fits(card, cluster, engine, reduction.config) if reduction.is_reduced else None
        if problem is None:
            results.append(_checked(engine, model, cluster, reduction, None))
            continue
        wider = _across_domain(engine, model, card, cluster, config, index)
        results.append(wider or ReducedHarvest(reduction, None, f"the reduced layout cannot run: {problem}"))
    return results
