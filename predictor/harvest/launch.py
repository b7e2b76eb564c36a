"""What every engine adapter shares (METHOD §4): the launch request and command, the
adapter protocol, the captured-size ladders, and the GPU engines' common parts.

A `LaunchCommand` is an argument list (never a shell string), environment variables,
and any files the engine reads at start (TensorRT-LLM's YAML options): the plan only
describes them, `--dry-run` prints them, and the harvester writes them just before the
launch and removes them after (`predictor.harvest.harvester`).
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NamedTuple, Protocol, TypeVar

from levers.catalog import Engine
from levers.configuration import Configuration
from levers.errors import InputError
from predictor.cards.model_card import ModelCard

# Captured sizes the harvester asks for explicitly (so the anchor knows them): the
# engines' own default ladders, cut at `max_captured_batch` (METHOD §3.3).
CAPTURE_LADDER = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024)
EAGER_LADDER = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
SERIAL_LADDER = (1, 2, 4, 8)        # an engine serving one request at a time: enough to show it
DEFAULT_HOST = "127.0.0.1"
PREFILL, DECODE = "prefill", "decode"


@dataclass(frozen=True, slots=True)
class PoolRole:
    """Which pool of a disaggregated deployment a launch is, and how its KV moves."""

    role: str                     # PREFILL or DECODE
    kv_transfer_backend: str      # nixl, mooncake, mori (levers: kv_transfer_backend)

    @property
    def is_prefill(self) -> bool:
        return self.role == PREFILL


@dataclass(frozen=True, slots=True)
class LaunchRequest:
    """What a launch needs beyond the configuration."""

    model_path: str              # HF id / local checkpoint / GGUF file
    served_name: str             # the name requests use
    port: int
    context_tokens: int          # max model length / n_ctx
    host: str = DEFAULT_HOST
    threads: int | None = None   # CPU engines
    python: str = sys.executable
    files_dir: str | None = None  # where launch files go (default: the system temp folder)
    checkpoint_given: bool = False  # --model-path named the checkpoint: its precisions are the asked ones
    prefix_caching: bool = False    # a harvest measures with it off (METHOD §4); a deployment turns it on
    pool: PoolRole | None = None    # one pool of a disaggregated deployment (inferasim deploy)
    memory_fraction: float | None = None  # the engine's own memory flag for the lever's KV pool
                                          # (`predictor.memory.engine_memory_fraction`); None: the lever
    draft_model: str | None = None  # the draft checkpoint of EAGLE-3 / DSpark speculation (none: refused)
    mla: bool = False               # the model's attention is MLA: the engines name other kernels for it
    fp4_compute: bool = True        # the GPU has FP4 tensor cores (fp4 weights quantized online run W4A4)

    def memory_share(self, config: Configuration) -> float:
        """The value the engine's memory flag gets (`memory_fraction`, else the lever's)."""
        return self.memory_fraction if self.memory_fraction is not None else config.kv_memory_fraction

    def memory_flag(self, config: Configuration) -> str:
        """`memory_share` as a command-line argument."""
        return str(self.memory_share(config))


@dataclass(frozen=True, slots=True)
class LaunchCommand:
    argv: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    files: tuple[tuple[str, str], ...] = ()     # (path, text) written before the launch

    def display(self) -> str:
        """For provenance and --dry-run: quoted for reading, never executed by a shell."""
        prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items()))
        return (prefix + " " if prefix else "") + shlex.join(self.argv)


class EngineAdapter(Protocol):
    engine: Engine
    package: str                  # distribution whose version is the engine build
    health_path: str
    tokenize_path: str | None
    serves_one_request_at_a_time: bool
    launches_split_pools: bool    # its command line starts a disaggregated prefill / decode pool
    # `allreduce_algorithm` value -> what the launch sets for it (flags, or an option's
    # value); the values missing have no way onto its command line and are refused
    allreduce_choices: Mapping[str, Any]
    all_to_all_choices: Mapping[str, str]     # `all_to_all_backend` value -> the engine's name for it

    def captured_sizes(self, config: Configuration) -> tuple[int, ...]: ...

    def sweep_batches(self, config: Configuration) -> tuple[int, ...]: ...

    def launch(self, config: Configuration, request: LaunchRequest, native: dict[str, str]) -> LaunchCommand: ...

    def request_extras(self, eos_token_id: int | None) -> dict: ...

    def tokenize_body(self, text: str, model: str) -> dict: ...


ENDPOINT_HINT = "; or launch the engine yourself and pass --endpoint"   # a harvest's way out
DRAFT_METHODS = frozenset({"eagle3", "dspark"})   # speculation that runs a separate draft checkpoint
DRAFT_CHECKPOINT = "DRAFT_CHECKPOINT"             # its place in a printed command, to replace


def draft_for(engine: Engine, config: Configuration, request: LaunchRequest) -> str | None:
    """The draft checkpoint a drafting method needs, or an error naming it (the engine would
    refuse to start without one)."""
    if config.spec_method not in DRAFT_METHODS:
        return None
    if request.draft_model is None:
        raise refuse(engine, "spec_method", config.spec_method,
                     f"mtp or ngram, or {config.spec_method} with its draft checkpoint (--draft-model PATH)")
    return request.draft_model


def refuse(engine: Engine, lever: str, value: object, accepted: str) -> InputError:
    return InputError(f"--config {lever}", f"{lever}={value} cannot be set on the {engine} command line",
                      accepted + ENDPOINT_HINT)


def host_tier_gb(engine: Engine, config: Configuration) -> float:
    """The private host KV tier per GPU a launch asks its engine for (0: none). A tier
    shared by every node (``N:shared``) is a store outside the engine (Mooncake, LMCache),
    not written here: refused, never launched as a private tier or dropped."""
    if config.is_host_tier_shared:
        raise refuse(engine, "host_kv_tier_gb", config.host_kv_tier_gb,
                     "a private tier per GPU (host_kv_tier_gb=N): a pool shared over the nodes is a store outside "
                     "the engine, not written here; it stays a what-if for predict, tune and plan-mix")
    return config.host_tier_gb_per_gpu


T = TypeVar("T")


class Switch(NamedTuple):
    """What a launch sets for one value of a lever: command-line flags and environment
    variables (vLLM and SGLang turn ROCm's quick all-reduce on by environment only)."""

    flags: tuple[str, ...] = ()
    env: Mapping[str, str] = MappingProxyType({})


def allreduce_choice(engine: Engine, config: Configuration, choices: Mapping[str, T]) -> T | None:
    """What ``engine``'s launch sets for the `allreduce_algorithm` lever (``choices``: value
    -> a :class:`Switch` or an option's value; None when the lever is unset); a value the
    engine has no way to set is refused, not dropped (the lever changes the priced
    communication)."""
    value = config.allreduce_algorithm
    return None if value is None else _choice(engine, "allreduce_algorithm", value, choices, "unset")


def all_to_all_choice(engine: Engine, config: Configuration, choices: Mapping[str, T]) -> T | None:
    """What ``engine``'s launch sets for the `all_to_all_backend` lever (None: ``none``); a
    backend the engine has no way to set is refused, not dropped (TensorRT-LLM and ATOM
    pick their own dispatch, so a priced ``deepep`` / ``mori`` would not be what runs)."""
    value = config.all_to_all_backend
    return None if value == "none" else _choice(engine, "all_to_all_backend", value, choices, "none")


def _choice(engine: Engine, lever: str, value: str, choices: Mapping[str, T], default: str) -> T:
    if value not in choices:
        raise refuse(engine, lever, value, ", ".join([default, *sorted(choices)]) + " (the others have no flag on "
                     "this engine's command line: it picks its own)")
    return choices[value]


def ladder(config: Configuration, ladder: tuple[int, ...]) -> tuple[int, ...]:
    """``ladder`` cut at the largest batch the configuration captures and runs."""
    limit = min(config.max_captured_batch, config.max_running_requests)
    return tuple(b for b in ladder if b <= limit) or (1,)


def native_dtypes(card: ModelCard) -> dict[str, str | None]:
    """The checkpoint's own dtype per precision lever (what an unset lever means)."""
    return {"weight_dtype": card.native_dtypes.weight.value,
            "expert_dtype": card.native_dtypes.expert.value if card.is_moe else None,
            "activation_dtype": None, "kv_cache_dtype": card.native_dtypes.kv_cache.value,
            "expert_format": card.native_dtypes.expert_format if card.is_moe else None}


def changed_dtype(config: Configuration, native: dict[str, str], lever: str) -> str | None:
    """The lever's value when it differs from the checkpoint's native dtype, else None."""
    value = getattr(config, lever)
    return value if value is not None and value != native.get(lever) else None


class GpuAdapter:
    """Shared parts of the GPU engines."""

    engine: Engine
    package: str
    health_path = "/health"
    tokenize_path: str | None = "/tokenize"
    serves_one_request_at_a_time = False
    launches_split_pools = True
    allreduce_choices: Mapping[str, Any] = MappingProxyType({})
    all_to_all_choices: Mapping[str, str] = MappingProxyType({})

    def captured_sizes(self, config: Configuration) -> tuple[int, ...]:
        return () if config.graph_capture == "none" else ladder(config, CAPTURE_LADDER)

    def sweep_batches(self, config: Configuration) -> tuple[int, ...]:
        """METHOD §4: every captured size; an eager engine gets the doubling ladder."""
        return self.captured_sizes(config) or ladder(config, EAGER_LADDER)

    def request_extras(self, eos_token_id: int | None) -> dict:
        return {"ignore_eos": True}

    def tokenize_body(self, text: str, model: str) -> dict:
        return {"model": model, "prompt": text}

    def _check_dtypes(self, config: Configuration, request: LaunchRequest, native: dict[str, str]) -> str | None:
        """Weight dtype other than the checkpoint's: only online fp8 is expressible, unless
        --model-path names a checkpoint that holds the asked precisions (then it decides)."""
        if request.checkpoint_given:
            return None
        if changed_dtype(config, native, "expert_dtype"):
            raise refuse(self.engine, "expert_dtype", config.expert_dtype, "the checkpoint's own expert dtype")
        if changed_dtype(config, native, "activation_dtype"):
            raise refuse(self.engine, "activation_dtype", config.activation_dtype, "unset (follows the weights)")
        weight = changed_dtype(config, native, "weight_dtype")
        if weight not in (None, "fp8"):
            raise refuse(self.engine, "weight_dtype", weight, "the checkpoint's dtype, or fp8 (online)")
        return weight
