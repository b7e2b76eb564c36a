"""What a harvest will do, decided before anything runs (METHOD §4): the model card,
the cluster, the validated configuration, the engine command line (or the endpoint),
the sweep plan and the checks that can refuse up front. `--dry-run` prints this.

Sweep defaults (`SweepDefaults`) differ between GPU engines and a CPU engine only in
size: a CPU at a few tokens per second gets shorter prompts, the 1/2/4 wave ladder
(enough to show serialisation) and three waves per batch (a shared machine is noisy). Engine-only values: a lever the
user did not set whose default is illegal on the engine and which has exactly one
legal value there (llama.cpp: `graph_capture=none`) takes that value, and the plan
lists it under `engine_defaults` (never silently).

Width: a launched engine runs on this host, so its stage fits one node; an endpoint may
span the nodes of one scale-up domain (an NVL72 rack's trays: the engine was started
across them by its own launcher). A layout that is not an anchor layout (PP, replicas,
disaggregated pools, wider than the limit) is refused with its reduction (METHOD §3.14,
`predictor.harvest.reduce`) and the exact harvest command(s) that measure it instead.
"""

from __future__ import annotations

import socket
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from urllib.parse import urlsplit

from levers.catalog import LEVERS, Engine
from levers.configuration import Configuration, engine_only_values, format_value, from_partial, parse_config_text
from levers.errors import InputError
from levers.inputs import quote
from levers.legality import structural_reasons
from predictor.anchors.anchor import Signature
from predictor.anchors.store import signature_for
from predictor.cards.registry import ModelCard, load_card
from predictor.feasibility import memory_flag, memory_for
from predictor.hardware import DEFAULT_CLUSTER, Cluster, parse_cluster
from predictor.memory import MemoryBreakdown
from predictor.harvest.adapters import (
    EngineAdapter,
    LaunchCommand,
    LaunchRequest,
    adapter_for,
    native_dtypes,
)
from predictor.harvest.checks import (
    Check,
    check_prefix_cache_lever,
    check_weights,
    check_width,
    refusals,
)
from predictor.harvest.cpu import cpu_cluster, is_cpu_cluster
from predictor.harvest.gguf import card_from_gguf, eos_token_id, read_gguf_header
from predictor.harvest.reduce import anchor_layouts, harvest_command

DEFAULT_PORT = 0                 # 0: pick a free port at launch
DEFAULT_READY_TIMEOUT_S = 900.0
PRECISION_LEVERS = ("weight_dtype", "activation_dtype", "expert_dtype")


@dataclass(frozen=True, slots=True)
class SweepDefaults:
    prompt_tokens: int
    second_prompt_tokens: int | None
    decode_tokens: int
    waves_per_batch: int
    prefill_lengths: tuple[int, ...]
    repeats: int
    probe_seqs: int
    probe_tokens: int
    context_tokens: int


GPU_DEFAULTS = SweepDefaults(prompt_tokens=1024, second_prompt_tokens=4096, decode_tokens=64, waves_per_batch=1,
                             prefill_lengths=(512, 1024, 2048, 4096, 8192), repeats=3, probe_seqs=8,
                             probe_tokens=1024, context_tokens=16384)
CPU_DEFAULTS = SweepDefaults(prompt_tokens=64, second_prompt_tokens=256, decode_tokens=32, waves_per_batch=3,
                             prefill_lengths=(32, 64, 128, 256, 512), repeats=3, probe_seqs=4,
                             probe_tokens=128, context_tokens=4096)


@dataclass(frozen=True, slots=True)
class HarvestRequest:
    """Everything the user asked for (the CLI builds it; `plan_harvest` validates it)."""

    engine: str
    model: str                                   # card name/alias, or a .gguf file
    cluster: str | None = None
    config_text: str | None = None
    endpoint: str | None = None
    model_path: str | None = None                # checkpoint to serve (default: the card's HF id / the GGUF)
    draft_model: str | None = None               # EAGLE-3 / DSpark's draft checkpoint (required for them)
    prompt_tokens: int | None = None
    second_prompt_tokens: int | None = None
    decode_tokens: int | None = None
    waves_per_batch: int | None = None
    prefill_lengths: tuple[int, ...] | None = None
    batches: tuple[int, ...] | None = None
    repeats: int | None = None
    probe: bool = True
    probe_seqs: int | None = None
    probe_tokens: int | None = None
    threads: int | None = None
    context_tokens: int | None = None
    ready_timeout_s: float = DEFAULT_READY_TIMEOUT_S
    seed: int = 0
    extra_args: tuple[str, ...] = ()
    python: str = sys.executable
    port: int = DEFAULT_PORT


@dataclass(frozen=True, slots=True)
class SweepPlan:
    batches: tuple[int, ...]
    prompt_tokens: int
    second_prompt_tokens: int | None
    decode_tokens: int
    waves_per_batch: int
    prefill_lengths: tuple[int, ...]
    repeats: int
    probe: tuple[int, int] | None                # (sequences, tokens each)

    def to_json(self) -> dict:
        return {"decode_batches": list(self.batches), "prompt_tokens": self.prompt_tokens,
                "second_prompt_tokens": self.second_prompt_tokens, "decode_tokens": self.decode_tokens,
                "waves_per_batch": self.waves_per_batch,
                "prefill_lengths": list(self.prefill_lengths), "repeats": self.repeats,
                "packed_probe": list(self.probe) if self.probe else None}


@dataclass(frozen=True)
class HarvestPlan:
    request: HarvestRequest
    engine: Engine
    adapter: EngineAdapter
    card: ModelCard
    cluster: Cluster
    config: Configuration
    explicit: frozenset[str]
    engine_defaults: dict[str, object]
    served_name: str
    model_path: str
    launch_request: LaunchRequest | None
    launch: LaunchCommand | None
    sweep: SweepPlan
    signature: Signature                          # engine_version filled in at run time
    checks: tuple[Check, ...]
    eos_token_id: int | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_json(self) -> dict:
        return {
            "engine": str(self.engine), "model": self.card.name, "cluster": self.cluster.spec,
            "configuration": self.config.to_dict(), "configuration_text": self.config.describe(),
            "engine_defaults": {k: format_value(v) for k, v in self.engine_defaults.items()},
            "endpoint": self.request.endpoint, "launch": self.launch.display() if self.launch else None,
            "launch_argv": list(self.launch.argv) if self.launch else None,
            "launch_files": {path: text for path, text in self.launch.files} if self.launch else {},
            "sweep": self.sweep.to_json(), "signature": self.signature.model_dump(mode="json"),
            "checks": [c.to_json() for c in self.checks], "notes": list(self.notes),
        }


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now (the engine binds it moments later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def _is_gguf(text: str | None) -> bool:
    return bool(text) and str(text).lower().endswith(".gguf")


def _card_and_path(request: HarvestRequest, engine: Engine) -> tuple[ModelCard, str, int | None]:
    """(card, checkpoint to serve, EOS token id when known)."""
    for candidate in (request.model, request.model_path):
        if _is_gguf(candidate):
            file = Path(str(candidate)).expanduser()
            if not file.is_file():
                raise InputError("--model", f"GGUF file {file} not found", "a path to a .gguf file")
            card = card_from_gguf(file) if candidate == request.model else load_card(request.model)
            return card, str(file.resolve()), eos_token_id(read_gguf_header(file))
    if engine == Engine.LLAMACPP:
        raise InputError("--model", "llama.cpp serves a GGUF file", "--model FILE.gguf or --model-path FILE.gguf")
    card = load_card(request.model)
    return card, request.model_path or card.hf_id, None


def _cluster(text: str | None, engine: Engine) -> Cluster:
    if is_cpu_cluster(text) or (text is None and engine == Engine.LLAMACPP):
        return cpu_cluster()
    return parse_cluster(DEFAULT_CLUSTER if text is None else text)   # "" is an error, not the default


def _positive(name: str, values: tuple[int, ...]) -> tuple[int, ...]:
    if not values or any(v < 3 for v in values):
        raise InputError(name, f"{list(values)} must be token counts of at least 3", "e.g. 64,128,256")
    return tuple(sorted(set(values)))


def _sweep(request: HarvestRequest, adapter: EngineAdapter, config: Configuration,
           base: SweepDefaults) -> SweepPlan:
    batches = tuple(sorted(set(request.batches))) if request.batches else adapter.sweep_batches(config)
    if any(b < 1 for b in batches):
        raise InputError("--batches", f"{list(batches)} must be positive", "e.g. 1,2,4")
    cap = config.max_running_requests * config.attention_dp     # the cap is each scheduler's (one per DP rank)
    if request.batches and batches[-1] > cap:   # the adapters' own ladders are cut there
        raise InputError("--batches", f"{batches[-1]} is above the replica's {cap} running requests "
                                      f"(max_running_requests={config.max_running_requests} x attention_dp="
                                      f"{config.attention_dp}): such a wave would queue, not decode as one batch",
                         f"batches up to {cap}, or a larger max_running_requests in --config")
    lengths = _positive("--prefill-lengths", request.prefill_lengths or base.prefill_lengths)
    prompt = request.prompt_tokens or base.prompt_tokens
    second = request.second_prompt_tokens if request.second_prompt_tokens is not None else base.second_prompt_tokens
    second = second or None
    _positive("--prompt-tokens", (prompt,) + ((second,) if second else ()))
    probe = None
    if request.probe:
        probe = (request.probe_seqs or base.probe_seqs, request.probe_tokens or base.probe_tokens)
    return SweepPlan(batches=batches, prompt_tokens=prompt, second_prompt_tokens=second,
                     decode_tokens=request.decode_tokens or base.decode_tokens,
                     waves_per_batch=request.waves_per_batch or base.waves_per_batch, prefill_lengths=lengths,
                     repeats=request.repeats or base.repeats, probe=probe)


def width_limit(cluster: Cluster, endpoint: str | None) -> tuple[int, str]:
    """(devices one anchor may span, what they are): a node for a launch, the scale-up
    domain for an endpoint (module docstring)."""
    if endpoint is None or cluster.scale_up_gpus() <= cluster.gpus_per_node:
        return cluster.gpus_per_node, "node"
    return cluster.scale_up_gpus(), "scale-up domain"


def _refuse_reducible(request: HarvestRequest, card: ModelCard, cluster: Cluster, engine: Engine,
                      config: Configuration) -> None:
    """Refuse a layout that is not one anchor, saying how METHOD §3.14 reduces it and
    printing the harvest command of each reduced layout (`predictor.harvest.layouts`
    also checks each against memory and the other refusals)."""
    devices, span = width_limit(cluster, request.endpoint)
    reductions = anchor_layouts(config, devices)
    if not any(r.is_reduced for r in reductions):
        return
    model = request.model if _is_gguf(request.model) else card.name
    extra = (f"--endpoint {request.endpoint}",) if request.endpoint else ()
    lines = [(f"{r.pool} pool" if r.pool else "") + (": " if r.pool and r.steps else "") + "; ".join(r.steps)
             + " -> " + harvest_command(str(engine), model, cluster.spec, r.config, *extra) for r in reductions]
    if request.endpoint is None and cluster.gpus_per_node < config.replica_gpus <= cluster.scale_up_gpus():
        lines.append(f"or start the engine across the nodes of one {cluster.scale_up_gpus()}-GPU scale-up domain "
                     "and pass --endpoint URL")
    raise InputError("--config", f"not an anchor layout ({config.describe()}): an anchor is one replica, "
                     f"no pipeline, on one {span} of {devices} (METHOD §2)",
                     "the reduced layout(s) of METHOD §3.14: " + " | ".join(lines))


ENDPOINT_FORMS = "http://HOST[:PORT] or https://HOST[:PORT] of a running engine's OpenAI-compatible server"


def check_endpoint(url: str) -> None:
    """An ``--endpoint`` that could be reached at all: refused now rather than after the
    whole ``--ready-timeout`` of waiting for an answer that cannot come."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError as error:
        raise InputError("--endpoint", f"{quote(url)} is not a URL ({error})", ENDPOINT_FORMS) from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InputError("--endpoint", f"{quote(url)} is not an http(s) URL with a host", ENDPOINT_FORMS)
    if port == 0:
        raise InputError("--endpoint", f"{quote(url)} names port 0", ENDPOINT_FORMS)
    if parts.path not in ("", "/") or parts.query:   # the client adds /v1/...: a path would double it
        raise InputError("--endpoint", f"{quote(url)} has a path; the harvester adds the API paths", ENDPOINT_FORMS)


def _check_extra_args(extra: tuple[str, ...], argv: tuple[str, ...]) -> None:
    """An ``--engine-arg`` may add what the launch does not set, never restate a flag it
    sets: the engine would take the later value and measure a layout (or limit) other
    than the one the anchor is labelled with."""
    own = {_flag_name(arg) for arg in argv if arg.startswith("-")}
    for arg in extra:
        flag = _flag_name(arg)
        if arg.startswith("-") and (flag in own or flag in LEVER_FLAGS):
            raise InputError("--engine-arg", f"{quote(arg.split('=', 1)[0])} sets what the configuration decides "
                             "(a width, precision, cache, graph or prefix-caching flag)",
                             "an engine flag no lever decides (change the lever in --config instead)")


# Flags (dashes for underscores, no `--no-` prefix) that express a lever even when the
# launch leaves them out, on any engine: their aliases, the switches a default relies on
# (prefix caching off for a harvest, graphs, expert parallelism, quantization, KV dtype) and
# every flag an adapter writes for some lever value (a harvest of tp=8 with
# `--engine-arg=--attn-dp-size=2` measured attention DP under a DP1 label).
LEVER_FLAGS = frozenset({
    "-tp", "-pp", "-dp", "-ep", "-O", "--enable-prefix-caching", "--disable-radix-cache", "--enable-radix-cache",
    "--enforce-eager", "--enable-expert-parallel", "--quantization", "--quantization-config", "--kv-cache-dtype",
    "--dtype", "--cuda-graph-max-bs", "--cuda-graph-bs", "--disable-cuda-graph", "--compilation-config",
    "--cuda-graph-sizes", "--max-cudagraph-capture-size", "--cudagraph-capture-sizes",
    "--speculative-config", "--speculative-algorithm", "--speculative-num-steps", "--speculative-eagle-topk",
    "--speculative-num-draft-tokens", "--speculative-draft-model-path", "--method", "--enable-dp-attention",
    # widths
    "--tensor-parallel-size", "--pipeline-parallel-size", "--data-parallel-size", "--tp-size", "--pp-size",
    "--dp-size", "--ep-size", "--attn-dp-size", "--decode-context-parallel-size", "--dcp-size",
    # kernels, collectives, experts
    "--attention-backend", "--moe-backend", "--moe-runner-backend", "--all2all-backend", "--moe-a2a-backend",
    "--disable-custom-all-reduce", "--enable-flashinfer-allreduce-fusion", "--enable-eplb", "--eplb-config",
    "--ep-num-redundant-experts",
    # scheduler, cache and memory
    "--block-size", "--page-size", "--max-num-seqs", "--max-num-batched-tokens", "--long-prefill-token-threshold",
    "--max-running-requests", "--max-prefill-tokens", "--chunked-prefill-size", "--max-batch-size",
    "--max-num-tokens", "--gpu-memory-utilization", "--mem-fraction-static", "--kv-cache-free-gpu-memory-fraction",
    "--kv-offloading-backend", "--kv-offloading-size", "--enable-hierarchical-cache", "--hicache-size",
    "--extra-llm-api-options",
    # pools
    "--kv-transfer-config", "--disaggregation-mode", "--disaggregation-transfer-backend",
})


def _flag_name(arg: str) -> str:
    """``--enable_prefix_caching=1`` and ``--no-enable-prefix-caching`` name one flag."""
    name = arg.split("=", 1)[0]
    if name.startswith("-O") and not name.startswith("--"):     # vLLM's -O0..-O3 optimization level
        return "-O"
    if name.startswith("--"):
        name = "--" + name[2:].replace("_", "-")
        name = "--" + name[len("--no-"):] if name.startswith("--no-") else name
    return name


def _memory_note(memory: MemoryBreakdown, context: int) -> tuple[str, ...]:
    """A launch the memory model prices as not fitting is still run (a harvest measures
    rather than trust the model), but the plan says so before the GPUs are taken: the
    engine will likely fail to start or to hold the sweep's largest wave."""
    if memory.fits:
        return ()
    return (f"memory: the memory model prices this layout as not fitting at {context:,}-token context "
            f"({memory.reason}); the engine may not start (`inferasim memory` shows the breakdown)",)


def plan_harvest(request: HarvestRequest) -> HarvestPlan:
    """Validate the request and decide everything a harvest will do (module docstring)."""
    if request.endpoint is not None:
        check_endpoint(request.endpoint)
        unused = [flag for flag, given in (("--engine-arg", request.extra_args), ("--threads", request.threads))
                  if given]
        if unused:      # they shape a launch; an endpoint's engine was launched by someone else
            raise InputError(unused[0], "has no effect with --endpoint (the engine is already running)",
                             "--endpoint alone, or a launch without --endpoint")
    adapter = adapter_for(request.engine)
    engine = adapter.engine
    if request.threads is not None and engine is not Engine.LLAMACPP:
        raise InputError("--threads", f"sets llama.cpp's CPU threads; {engine} runs on GPUs and has no such flag",
                         "--threads with --engine llamacpp only")
    card, model_path, eos = _card_and_path(request, engine)
    cluster = _cluster(request.cluster, engine)
    partial = parse_config_text(request.config_text)
    engine_defaults = engine_only_values(engine, partial)
    config = from_partial({**engine_defaults, **partial})
    reasons = structural_reasons(config, engine, card, cluster)
    if reasons:
        raise InputError("--config", "; ".join(reasons), "a legal configuration (inferasim levers)")
    _refuse_reducible(request, card, cluster, engine, config)
    defaults = CPU_DEFAULTS if cluster.gpu.vendor == "cpu" else GPU_DEFAULTS
    sweep = _sweep(request, adapter, config, defaults)
    native = native_dtypes(card)
    longest = max(sweep.prefill_lengths + (sweep.prompt_tokens, sweep.second_prompt_tokens or 0)) + sweep.decode_tokens
    limit = getattr(card, "max_context", None) or longest
    if longest > limit:
        raise InputError("--prefill-lengths" if max(sweep.prefill_lengths) + sweep.decode_tokens > limit
                         else "--prompt-tokens", f"a {longest:,}-token sequence exceeds {card.name}'s context of "
                         f"{limit:,}", f"prompts up to {limit - sweep.decode_tokens:,} tokens")
    context = request.context_tokens or min(limit, max(defaults.context_tokens,
                                                       2 * max(sweep.prefill_lengths + (sweep.prompt_tokens,))))
    served = card.name
    launch_request = launch = None
    memory = memory_for(card, cluster, config, context)
    if request.endpoint is None:
        launch_request = LaunchRequest(model_path=model_path, served_name=served, port=request.port or free_port(),
                                       context_tokens=context, threads=request.threads, python=request.python,
                                       checkpoint_given=request.model_path is not None,
                                       memory_fraction=memory_flag(engine, memory),
                                       draft_model=request.draft_model, mla=card.uses_mla,
                                       fp4_compute=bool(cluster.gpu.fp4_tflops))
        launch = adapter.launch(config, launch_request, native)
        _check_extra_args(request.extra_args, launch.argv)
        launch = replace(launch, argv=launch.argv + tuple(request.extra_args))
    checks = (check_width(config, *width_limit(cluster, request.endpoint)), check_prefix_cache_lever(config, set(partial)),
              check_weights(request.endpoint is None, launch.argv if launch else ()))
    refused = refusals(checks)
    if refused:
        raise InputError("harvest", "refused: " + "; ".join(c.message for c in refused),
                         "an anchor layout with prefix caching off and real weights (METHOD §4)")
    signature = signature_for(card, cluster, engine, config).model_copy(
        update={"captured_sizes": adapter.captured_sizes(config)})
    notes = tuple(f"{k}={format_value(v)}: the only value {engine} accepts" for k, v in engine_defaults.items())
    if launch is not None:
        notes += _memory_note(memory, context)
    if request.model_path and any(getattr(config, name) for name in PRECISION_LEVERS):
        notes += (f"precisions as asked, from the checkpoint {request.model_path} (no online quantization "
                  "flags); the harvester cannot verify them",)
    return HarvestPlan(request=request, engine=engine, adapter=adapter, card=card, cluster=cluster, config=config,
                       explicit=frozenset(partial), engine_defaults=engine_defaults, served_name=served,
                       model_path=model_path, launch_request=launch_request, launch=launch, sweep=sweep,
                       signature=signature, checks=checks, eos_token_id=eos, notes=notes)
