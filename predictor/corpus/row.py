"""A measured serving run in PRODUCT.md's conventions, and the name rules that map corpus
strings to the product's names (METHOD §8, PRODUCT.md §3). The readers of each format
live in `predictor.corpus.formats`; `predictor.corpus.read` reads files.

Name rules (documented here, applied to every format):
- **Model**: the last path component of a checkpoint name or local path, lower-cased, is
  looked up as a card alias; if it is not one, one trailing checkpoint tag is stripped at
  a time (`-fp4`, `-fp8`, `-nvfp4`, `-mxfp4`, `-int4`, `-bf16`, `-instruct`, `-chat`,
  `-preview`, `-vN`, a four-digit date such as `-0528`) and the lookup retried. So
  `/mnt/lustre01/models/deepseek-r1-0528-fp4-v2`, `nvidia/DeepSeek-R1-0528-FP4-V2` and
  `deepseek-ai/DeepSeek-R1-0528` are all DeepSeek-R1 (a re-release of the same
  architecture), `Qwen/Qwen3-235B-A22B-FP8` is Qwen3-235B-A22B.
- **GPU**: the text before the first `-` or `_`, lower-cased, is a GPU profile name
  (`mi355x-amd_0` -> MI355X, `h200_sxm` -> H200, `b200-trt` -> B200).
- **Engine**: `trt`/`trt-llm`/`tensorrt-llm` -> trtllm; an orchestrator prefix
  `dynamo-` is dropped; a `-disagg` suffix means disaggregated serving
  (`sglang-disagg` -> sglang, disaggregated).

The row's deployment is a `Configuration` (PRODUCT.md §3, SGLang convention); its
concurrency is the corpus concurrency and its running-request cap admits every client of
a replica (benchmark recipes size the cap to the load), within the lever's range.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from enum import StrEnum
from functools import lru_cache

from levers.catalog import Engine, get_lever
from levers.configuration import Configuration
from levers.errors import InputError, accepted_list
from levers.inputs import quote
from predictor.cards.registry import ModelCard, load_card
from predictor.hardware import Cluster, load_gpu, parse_cluster
from predictor.workload import NO_HARNESS, Harness


class MappingError(ValueError):
    """A corpus value that cannot be mapped to PRODUCT.md's conventions (row failure)."""


class Format(StrEnum):
    INFERENCEX = "inferencex"
    AICONFIGURATOR = "aiconfigurator"
    NATIVE = "native"


FORMATS: tuple[Format, ...] = tuple(Format)
METRIC_NAMES = ("ttft_ms_mean", "ttft_ms_median", "tpot_ms_mean", "tpot_ms_median", "itl_ms_mean",
                "itl_ms_median", "output_throughput_per_gpu", "throughput_per_gpu")
_CHECKPOINT_TAG = re.compile(r"-(?:fp4|fp8|nvfp4|mxfp4|int4|bf16|fp16|instruct|chat|preview|v\d+|\d{4})$")
_ENGINE_ALIASES = {"vllm": Engine.VLLM, "sglang": Engine.SGLANG, "atom": Engine.ATOM, "trt": Engine.TRTLLM,
                   "trtllm": Engine.TRTLLM, "trt-llm": Engine.TRTLLM, "tensorrt-llm": Engine.TRTLLM}
_MAX_RUNNING = int(get_lever("max_running_requests").bounds[1])
MAX_NAME_CHARS = 256   # a checkpoint path or name; longer is not a model name
_DEFAULT_RUNNING = Configuration().max_running_requests


@dataclass(frozen=True, slots=True)
class Measured:
    """What the run measured (ms, tokens/s per GPU of the whole deployment); None = not
    given. `throughput_derived` marks throughput computed by Little's law from the mean
    TTFT/TPOT (AIConfigurator rows carry no throughput)."""

    ttft_ms_mean: float | None = None
    ttft_ms_median: float | None = None
    tpot_ms_mean: float | None = None
    tpot_ms_median: float | None = None
    itl_ms_mean: float | None = None
    itl_ms_median: float | None = None
    output_throughput_per_gpu: float | None = None
    throughput_per_gpu: float | None = None
    throughput_derived: bool = False

    def get(self, name: str) -> float | None:
        return getattr(self, name)

    def has_any(self) -> bool:
        return any(self.get(name) is not None for name in METRIC_NAMES)


@dataclass(frozen=True, slots=True)
class ChartKey:
    """One chart of a corpus: a stack at one prompt/output length."""

    model: str
    gpu: str
    engine: str
    precision: str
    spec: str
    isl: int
    osl: int

    @property
    def name(self) -> str:
        return f"{self.model}/{self.gpu}/{self.engine}/{self.precision}/{self.spec}/{self.isl}x{self.osl}"


@dataclass(frozen=True)
class CorpusRow:
    """One measured run in PRODUCT.md's conventions."""

    id: str                      # "file.csv:LINE" (LINE counts the header as line 1)
    source: str                  # inferencex | aiconfigurator | native
    model: str                   # model card name
    gpu: str                     # GPU profile name
    engine: str                  # Engine value
    engine_version: str
    precision: str               # the corpus precision label (fp4, fp8, int4, bf16)
    config: Configuration        # levers: layout, dtypes, speculation, concurrency
    isl: int
    osl: int
    measured: Measured
    measured_at: str = ""        # ISO date of the run when known
    notes: tuple[str, ...] = ()  # how ambiguous columns were read
    # The benchmark protocol: each client sends this many requests, all clients start
    # together (None: an endless steady-state run). InferenceX / AIConfigurator: 10.
    requests_per_client: int | None = None
    fixed_lengths: bool = False  # every request exactly isl/osl tokens (`predictor.corpus.formats`)
    harness: Harness = NO_HARNESS   # what the run's harness did (`predictor.workload.Harness`)

    @property
    def concurrency(self) -> int:
        return self.config.concurrency

    @property
    def spec(self) -> str:
        c = self.config
        return "none" if c.spec_method == "none" else f"{c.spec_method}{c.spec_depth}"

    @property
    def stack(self) -> tuple[str, str, str, str, str]:
        """(GPU, engine, model, precision, speculation): what a kernel set is built from."""
        return (self.gpu, self.engine, self.model, self.precision, self.spec)

    @property
    def chart(self) -> ChartKey:
        return ChartKey(self.model, self.gpu, self.engine, self.precision, self.spec, self.isl, self.osl)

    @property
    def total_gpus(self) -> int:
        return self.config.total_gpus

    @property
    def layout_name(self) -> str:
        c = self.config
        if c.disaggregated:
            return f"P{c.prefill_replicas}x{c.prefill_layout}+D{c.decode_replicas}x{c.decode_layout}"
        name = f"TP{c.tp}/EP{c.ep}/DP{c.attention_dp}" + (f"/PP{c.pp}" if c.pp > 1 else "")
        return name + (f"x{c.replicas}" if c.replicas > 1 else "")

    def card(self) -> ModelCard:
        return load_card(self.model)

    def cluster(self) -> Cluster:
        return cluster_for(self.gpu, self.total_gpus)

    def field_value(self, name: str) -> object:
        """A field for `--anchor-where` (row attributes, then Configuration levers)."""
        if name in _ROW_FIELDS:
            return getattr(self, name)
        if hasattr(self.config, name):
            return getattr(self.config, name)
        raise InputError("--anchor-where", f"unknown field '{name}'",
                         accepted_list(sorted(_ROW_FIELDS) + ["any lever, e.g. tp, pp, ep"], limit=40))


_ROW_FIELDS = frozenset({"id", "source", "model", "gpu", "engine", "engine_version", "precision", "isl", "osl",
                         "concurrency", "spec", "total_gpus", "layout_name", "measured_at"})


@dataclass(frozen=True, slots=True)
class RowFailure:
    id: str
    reason: str

    def to_json(self) -> dict:
        return {"id": self.id, "reason": self.reason}


@dataclass(frozen=True)
class CorpusRead:
    path: str
    format: str
    rows: tuple[CorpusRow, ...]
    failures: tuple[RowFailure, ...] = field(default=())

    @property
    def n_rows(self) -> int:
        return len(self.rows) + len(self.failures)


# --- name rules --------------------------------------------------------------------------

@lru_cache(maxsize=256)
def card_name_for(raw: str) -> str:
    """The card name of a corpus model string (module docstring: Model rule)."""
    text = str(raw).strip().rstrip("/")
    if not text:
        raise MappingError("empty model name")
    if len(text) > MAX_NAME_CHARS:
        raise MappingError(f"model name of {len(text):,} characters (at most {MAX_NAME_CHARS})")
    candidate = text.split("/")[-1].lower()
    for alias in (text.lower(), candidate):
        name = _try_card(alias)
        if name:
            return name
    while _CHECKPOINT_TAG.search(candidate):
        candidate = _CHECKPOINT_TAG.sub("", candidate)
        name = _try_card(candidate)
        if name:
            return name
    raise MappingError(f"model {quote(raw, 80)} matches no model card")


def _try_card(alias: str) -> str | None:
    try:
        return load_card(alias).name
    except InputError:
        return None


@lru_cache(maxsize=64)
def gpu_name_for(raw: str) -> str:
    """The GPU profile name of a corpus hardware string (module docstring: GPU rule)."""
    head = re.split(r"[-_]", str(raw).strip().lower(), maxsplit=1)[0]
    try:
        return load_gpu(head).name
    except InputError:
        raise MappingError(f"hardware {quote(raw, 80)} matches no GPU profile") from None


def engine_for(raw: str) -> tuple[Engine, bool]:
    """(engine, implied disaggregated) of a corpus framework string (Engine rule)."""
    text = str(raw).strip().lower()
    disaggregated = text.endswith("-disagg")
    text = text.removesuffix("-disagg").removeprefix("dynamo-")
    engine = _ENGINE_ALIASES.get(text)
    if engine is None:
        raise MappingError(f"engine {quote(raw, 80)} is not one of {', '.join(sorted(_ENGINE_ALIASES))} "
                           "(optionally dynamo-... or ...-disagg)")
    return engine, disaggregated


@lru_cache(maxsize=64)
def cluster_for(gpu: str, total_gpus: int) -> Cluster:
    """The smallest cluster of whole nodes of `gpu` holding `total_gpus`."""
    profile = load_gpu(gpu)
    per_node = profile.gpus_per_node
    nodes = max(1, math.ceil(total_gpus / per_node))
    if total_gpus < per_node:
        return parse_cluster(f"{profile.name.lower()}x{total_gpus}")
    return parse_cluster(f"{profile.name.lower()}x{per_node}x{nodes}")


def running_cap(per_replica_clients: float) -> int:
    """Running-request cap that admits every client of a replica (module docstring)."""
    return int(min(_MAX_RUNNING, max(_DEFAULT_RUNNING, math.ceil(per_replica_clients))))
