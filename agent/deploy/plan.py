"""The launch commands of one deployment: one per pool (a colocated deployment has one
pool, `serve`; a disaggregated one `prefill` and `decode`), each run by `replicas`
engine instances of `gpus_per_replica` GPUs.

Commands come from the harvester's engine adapters (`predictor.harvest.adapters`), so a
lever maps to a flag in one place, with two differences from a harvest: prefix caching
follows the pick's `prefix_cache` lever (on by default, as it was priced; a harvest
measures with it off), and each pool of a split gets its engine's KV-transfer flags
(`LaunchRequest.pool`). The maximum model length is the model's context, or the longest
sequence (in 1,024-token steps) that fits the pool's KV cache by the memory model (METHOD
§3.9), so the engine does not refuse to start. A lever the engine cannot express is an
`InputError`, as in a harvest.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from levers.catalog import Engine, get_lever
from levers.configuration import Configuration
from levers.errors import InputError
from predictor.anchors.anchoring import as_priced, recipe_text
from predictor.feasibility import check_configuration, engine_memory_flag, memory_for, pool_configs
from predictor.harvest.adapters import adapter_for
from predictor.harvest.layouts import as_the_checkpoint_runs
from predictor.harvest.launch import (
    DECODE,
    DRAFT_CHECKPOINT,
    DRAFT_METHODS,
    ENDPOINT_HINT,
    PREFILL,
    LaunchCommand,
    LaunchRequest,
    PoolRole,
    native_dtypes,
)
from predictor.sim.scheduler import PROFILES
from predictor.target import Target

SERVE = "serve"
DEFAULT_PORT = 8000
DEPLOY_HOST = "0.0.0.0"
DEPLOY_PYTHON = "python3"          # the serving machine's interpreter, not this one
MIN_CONTEXT_TOKENS = 2048
CONTEXT_STEP_TOKENS = 1024         # a launch's max model length: whole multiples of this
DEPLOYABLE = (Engine.VLLM, Engine.SGLANG, Engine.ATOM, Engine.TRTLLM)
PRECISION_LEVERS = ("weight_dtype", "expert_dtype", "activation_dtype")
CHECKPOINT_HINT = "; or --model-path CHECKPOINT that holds these precisions (the engine loads them as they are)"


@dataclass(frozen=True, slots=True)
class DeployOptions:
    """What a launch needs beyond the pick: where the weights are, the port, where the
    engine's option files go (TensorRT-LLM's YAML)."""

    model_path: str | None = None      # default: the card's Hugging Face id
    port: int = DEFAULT_PORT
    files_dir: str = "."
    context_tokens: int | None = None  # default: the model's, as the KV cache allows
    draft_model: str = DRAFT_CHECKPOINT  # EAGLE-3 / DSpark's draft checkpoint (a placeholder to replace)


HEAD_NODE = "HEAD_NODE"             # placeholder: the address of a replica's first node
VLLM_DP_RPC_PORT = 13345            # vLLM's data-parallel coordination port (as its multi-node docs use)
SGLANG_DIST_PORT = 5000             # SGLang's --dist-init-addr port, as its multi-node examples use


@dataclass(frozen=True, slots=True)
class PoolLaunch:
    role: str                 # SERVE, PREFILL or DECODE
    replicas: int
    gpus_per_replica: int
    config: Configuration     # the pool's replica configuration
    request: LaunchRequest
    command: LaunchCommand
    nodes: tuple[LaunchCommand, ...] = ()   # a replica wider than a node: one command per node, rank order

    def to_json(self) -> dict[str, Any]:
        return {"role": self.role, "replicas": self.replicas, "gpus_per_replica": self.gpus_per_replica,
                "argv": list(self.command.argv), "env": dict(self.command.env), "display": self.command.display(),
                "launch_files": {path: text for path, text in self.command.files},
                "max_model_len_tokens": self.request.context_tokens, "prefix_caching": self.request.prefix_caching,
                "nodes": [{"rank": rank, "argv": list(node.argv), "display": node.display()}
                          for rank, node in enumerate(self.nodes)]}


@dataclass(frozen=True)
class DeployPlan:
    target: Target
    config: Configuration
    pools: tuple[PoolLaunch, ...]
    kv_transfer_backend: str | None
    recipe: dict[str, str] = field(default_factory=dict)    # unset levers launched as priced (`as_priced`)
    notes: tuple[str, ...] = ()                             # recipe activations the engine picks itself; placeholders

    @property
    def is_disaggregated(self) -> bool:
        return len(self.pools) > 1

    @property
    def total_gpus(self) -> int:
        return sum(pool.replicas * pool.gpus_per_replica for pool in self.pools)

    def lines(self) -> list[str]:
        """Per pool: a heading, then the command (whole, to copy)."""
        out = []
        for pool in self.pools:
            if not pool.nodes:
                out.append(f"{pool.role}: {pool.replicas} replica(s) x {pool.gpus_per_replica} GPU(s), each:")
                out.append(f"  {pool.command.display()}")
                continue
            out.append(f"{pool.role}: {pool.replicas} replica(s) x {pool.gpus_per_replica} GPU(s) over "
                       f"{len(pool.nodes)} nodes, each replica ({HEAD_NODE}: the address of its node 0):")
            for rank, node in enumerate(pool.nodes):
                out.append(f"  node {rank}: {node.display()}")
        return out

    def recipe_lines(self) -> list[str]:
        """The levers the launch took from the anchor's recipe, and the recipe's activations
        the engine picks itself (prose, to wrap)."""
        return ([recipe_text(self.recipe)] if self.recipe else []) + list(self.notes)

    def to_json(self) -> dict[str, Any]:
        return {**self.target.to_json(), "configuration": self.config.to_dict(),
                "configuration_text": self.config.describe(),
                "disaggregated": self.is_disaggregated, "kv_transfer_backend": self.kv_transfer_backend,
                "total_gpus": self.total_gpus, "recipe": dict(self.recipe), "notes": list(self.notes),
                "pools": [pool.to_json() for pool in self.pools]}


def build_plan(target: Target, config: Configuration, options: DeployOptions = DeployOptions(),
               priced_context: float | None = None) -> DeployPlan:
    """The launch command of every pool of ``config`` on ``target`` (module docstring),
    its unset levers as `predict` priced them (the calibrating anchor's recipe, chosen at
    the workload's ``priced_context`` as the price was: `WorkloadSpec.priced_context_tokens`)."""
    if target.engine not in DEPLOYABLE:
        raise InputError("--engine", f"{target.engine} is a harvest-only engine here",
                         ", ".join(str(e) for e in DEPLOYABLE))
    config, taken = as_priced(target, config, context_tokens=priced_context)
    feasibility = check_configuration(target.card, target.cluster, target.engine, config)
    if not feasibility.legal:
        raise InputError("configuration", f"{config.describe()} cannot run: " + "; ".join(feasibility.reasons),
                         "a legal configuration (inferasim check)")
    split = pool_configs(config)
    backend = (config.kv_transfer_backend or get_lever("kv_transfer_backend").legal_values(target.engine)[0]
               if split else None)
    roles = ((SERVE, config),) if split is None else ((PREFILL, split[0]), (DECODE, split[1]))
    pools = tuple(_pool(target, role, replica, options, backend, offset, taken, config)
                  for offset, (role, replica) in enumerate(roles))
    followed = tuple(dict.fromkeys(lever for pool in pools for lever in taken if getattr(pool.config, lever) is None))
    notes = tuple(f"{lever}={taken[lever]} as priced is not on {target.engine}'s command line: the engine picks "
                  "activations from the checkpoint's weights, as the anchor's run did" for lever in followed)
    restated = tuple(dict.fromkeys(lever for pool in pools for lever in PRECISION_LEVERS if lever not in taken
                                   and getattr(config, lever) is not None and getattr(pool.config, lever) is None))
    if restated:
        notes += (", ".join(f"{lever}={getattr(config, lever)}" for lever in restated)
                  + f": what {target.card.name}'s checkpoint runs on its own, so not on {target.engine}'s command line",)
    if config.spec_method in DRAFT_METHODS and options.draft_model == DRAFT_CHECKPOINT:
        notes += (f"{DRAFT_CHECKPOINT}: the {config.spec_method} draft checkpoint of {target.card.name} "
                  "(deploy --draft-model PATH writes it in)",)
    elif config.spec_method not in DRAFT_METHODS and options.draft_model != DRAFT_CHECKPOINT:
        notes += (f"--draft-model unused: spec_method={config.spec_method} runs no separate draft checkpoint",)
    if config.router == "prefix_hash" and (split is not None or config.replicas > 1):
        notes += ("router=prefix_hash as priced: Dynamo's frontend has no prefix-hash mode, so dynamo.yaml runs "
                  "its KV-aware router (--router-mode kv), which routes on cached blocks, as router=kv_aware is priced",)
    if PROFILES[target.engine].chunk_is_budget and config.chunked_prefill_size not in (
            Configuration().chunked_prefill_size, config.max_batched_tokens):   # neither priced nor launched
        notes += (f"chunked_prefill_size={config.chunked_prefill_size} is not on {target.engine}'s command line and "
                  f"was not priced: its prompt chunk is the token budget, max_batched_tokens={config.max_batched_tokens}",)
    if config.fusions:   # priced (METHOD §3.13); the engines' compilers choose their passes themselves
        notes += (f"fusions={','.join(config.fusions)} as priced is not on {target.engine}'s command line: the "
                  "engine's compiler picks its fusion passes, so the launch may run others than were priced",)
    return DeployPlan(target, config, pools, backend, {k: v for k, v in taken.items() if k not in followed}, notes)


def _pool(target: Target, role: str, config: Configuration, options: DeployOptions, backend: str | None,
          port_offset: int, taken: dict[str, str], deployment: Configuration | None = None) -> PoolLaunch:
    """One pool's launch (``config``: its replica's levers; ``deployment``: the whole
    configuration, which a refusal's hint restates: a split's pool alone is no deployment)."""
    card = target.card
    deployment = deployment or config
    _check_layout_options(target.engine, role, config)
    request = LaunchRequest(
        model_path=options.model_path or card.hf_id, served_name=card.name, port=options.port + port_offset,
        context_tokens=options.context_tokens or max_context_tokens(target, config), host=DEPLOY_HOST,
        python=DEPLOY_PYTHON,
        files_dir=options.files_dir, checkpoint_given=options.model_path is not None,
        prefix_caching=config.prefix_cache == "on",
        pool=None if role == SERVE else PoolRole(role, backend), draft_model=options.draft_model, mla=card.uses_mla,
        fp4_compute=bool(target.cluster.gpu.fp4_tflops))
    request = replace(request, memory_fraction=engine_memory_flag(card, target.cluster, target.engine, config,
                                                                  request.context_tokens))
    try:
        command = adapter_for(target.engine).launch(config, request, native_dtypes(card))
    except InputError as error:   # a deployment has no endpoint to fall back on (harvest's hint)
        lever = next((name for name in taken if error.what.endswith(name)), None)
        if lever == "activation_dtype":     # the recipe's, not the user's: the engine follows the weights
            return _pool(target, role, replace(config, activation_dtype=None), options, backend, port_offset, {},
                         replace(deployment, activation_dtype=None))
        stock = as_the_checkpoint_runs(card, target.cluster, config)
        if stock != config:     # asked precisions that only restate what the checkpoint runs
            return _pool(target, role, stock, options, backend, port_offset, taken, deployment)
        precision = any(name in error.what for name in PRECISION_LEVERS)
        accepted = error.accepted.removesuffix(ENDPOINT_HINT) + (CHECKPOINT_HINT if precision else "")
        if lever is None:
            raise InputError(error.what, error.problem, accepted) from None
        native = native_dtypes(card).get(lever)     # the price came from an anchor of that precision
        if native:      # a runnable line whether the pick came from --config, a ledger or a plan
            own = replace(deployment, **{**{name: None for name in taken}, lever: native})
            accepted += (f"; or price and launch the checkpoint's own {native}: inferasim deploy --model {card.name} "
                         f"--cluster {target.cluster.spec} --engine {target.engine} --config {own.describe()}")
        raise InputError(f"{lever} (unset: the calibrating anchor's recipe, as priced)", error.problem,
                         accepted) from None
    nodes = _node_commands(target, config, command)
    return PoolLaunch(role, config.replicas, config.replica_gpus, config, request, command, nodes)


def _check_layout_options(engine: Engine, role: str, config: Configuration) -> None:
    """A pool layout's options the launches written here cannot express are an error, never
    a launch of another layout: DWDP (prefill ranks sharing expert-weight storage) would
    start ``n`` single-GPU servers each loading every expert (TensorRT-LLM runs it only
    under its MPI disaggregated launch, `trtllm-serve disaggregated_mpi_worker` with
    `dwdp_config`: its DWDP blog, "Current Code-Level Constraints"), TP subgroups (``/TSt``)
    a DEP pool replicating the projections they shard."""
    layout = config.layout_options
    lever = f"{role}_layout" if role != SERVE else "decode_layout"
    if layout.dwdp > 1:
        raise InputError(f"--config {lever}", f"{lever}={layout.text} (ranks sharing expert-weight storage) runs "
                         f"only under {engine}'s MPI disaggregated launch (trtllm-serve disaggregated_mpi_worker "
                         "with dwdp_config), which is not written here",
                         "a TPx/EPy/DPz prefill layout to deploy; DWDP stays a what-if for predict, tune and plan-mix")
    if layout.subgroup > 1:
        raise InputError(f"--config {lever}", f"{lever}={layout.text} (TP subgroups of the selected projections and "
                         f"shared experts) has no flag on the {engine} command line in the release checked",
                         f"the layout without /TS{layout.subgroup} to deploy; TP subgroups stay a what-if for "
                         "predict, tune and plan-mix")


def _node_commands(target: Target, config: Configuration, command: LaunchCommand) -> tuple[LaunchCommand, ...]:
    """A replica wider than one node, as each node launches it: vLLM spreads its attention
    data-parallel ranks over the nodes (``--data-parallel-size-local``, the first node the
    API server, the others ``--headless`` from their start rank), or a tensor-parallel group
    over them (``--nnodes``/``--node-rank``); SGLang runs one ``--nnodes`` group. Other
    engines' multi-node launchers (MPI) are not written here: an error."""
    per_node = target.cluster.gpus_per_node
    gpus = config.replica_gpus
    if gpus <= per_node:
        return ()
    count = -(-gpus // per_node)
    engine = target.engine
    if engine == Engine.VLLM:
        flags = [_vllm_node_flags(config, count, per_node, rank) for rank in range(count)]
    elif engine == Engine.SGLANG:
        flags = [["--nnodes", str(count), "--node-rank", str(rank), "--dist-init-addr", f"{HEAD_NODE}:{SGLANG_DIST_PORT}"]
                 for rank in range(count)]
    else:
        raise InputError("configuration", f"a replica of {gpus} GPUs spans {count} nodes of {per_node}: "
                         f"{engine}'s multi-node launch (MPI) is not written here",
                         "a replica within one node, or launch it with the engine's multi-node launcher")
    return tuple(replace(command, argv=command.argv + tuple(extra)) for extra in flags)


def _vllm_node_flags(config: Configuration, count: int, per_node: int, rank: int) -> list[str]:
    """Node ``rank``'s flags of a vLLM replica over ``count`` nodes: its share of the
    attention-DP ranks when they divide over the nodes (each rank's TP group within one),
    else its place in one tensor-parallel group; every node but the first is headless."""
    headless = ["--headless"] if rank else []
    if config.attention_dp % count == 0 and config.tp // config.attention_dp <= per_node:
        local = config.attention_dp // count
        start = ["--data-parallel-start-rank", str(rank * local)] if rank else []
        return ["--data-parallel-size-local", str(local), "--data-parallel-address", HEAD_NODE,
                "--data-parallel-rpc-port", str(VLLM_DP_RPC_PORT), *start, *headless]
    return ["--nnodes", str(count), "--node-rank", str(rank), "--master-addr", HEAD_NODE, *headless]


def try_plan(target: Target, config: Configuration,
             priced_context: float | None = None) -> tuple[DeployPlan | None, str | None]:
    """The plan, or why there is none (for `tune` and `plan-mix`, which print the
    winner's deploy line but must not fail on a pick an engine cannot express, and for
    `check`'s 'not deployable'). The reason names the lever, not a ``--config`` option:
    a pick's levers were not typed (and `check` names its other refusals by lever too)."""
    try:
        return build_plan(target, config, priced_context=priced_context), None
    except InputError as error:
        return None, InputError(refused_lever(error) or error.what, error.problem, error.accepted).message


def refused_lever(error: InputError) -> str:
    """The lever an engine's refusal names as ``--config LEVER`` ('' for none): a pick's
    levers (a ledger's trial, a plan-mix slot) were not typed, so it is named as the lever."""
    return error.what.removeprefix("--config").strip() if error.what.startswith("--config") else ""


def deploy_json(plan: DeployPlan | None, problem: str | None) -> dict[str, Any] | None:
    """A winner's launch commands for `tune --json` / `plan-mix --json`, or why none."""
    if plan is None:
        return None if problem is None else {"error": problem}
    return {"disaggregated": plan.is_disaggregated, "pools": [pool.to_json() for pool in plan.pools]}


def max_context_tokens(target: Target, config: Configuration) -> int:
    """The model's context, or the longest one sequence that fits the replica's KV cache,
    in whole `CONTEXT_STEP_TOKENS` (memory grows with the length, so a bisection finds it).
    Halving it lost up to half the context: Qwen3.5-35B-A3B on one H100 holds 262,745
    tokens but not the 262,144 of its context plus a sequence's linear-attention state, and
    was launched at 131,072 while its agentic price served prompts of 145k."""
    card = target.card

    def fits(tokens: int) -> bool:
        return memory_for(card, target.cluster, config, tokens).fits

    if fits(card.max_context):
        return card.max_context
    low, high = 1, card.max_context // CONTEXT_STEP_TOKENS    # in steps: low fits or is the floor
    while low + 1 < high:
        middle = (low + high) // 2
        low, high = (middle, high) if fits(middle * CONTEXT_STEP_TOKENS) else (low, middle)
    return max(low * CONTEXT_STEP_TOKENS, MIN_CONTEXT_TOKENS)
