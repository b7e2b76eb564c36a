"""The 36 levers of PRODUCT.md §3: name, kind, legal values per engine, description.

One table, one convention (SGLang's parallel semantics, PRODUCT.md §3). A lever is
either *discrete* (a finite legal set per engine) or *ranged* (an inclusive numeric
range); `parse` turns user/LLM text or JSON into the lever's Python value and raises
:class:`InputError` naming the lever and the accepted values.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache
from typing import Any

from levers.errors import InputError, accepted_list, did_you_mean
from levers.inputs import parse_number, quote
from levers.precision import ACCEPTED as WEIGHT_SPEC_ACCEPTED
from levers.precision import LEVER as WEIGHT_LEVER
from levers.precision import canonical_weight_dtype


class Engine(StrEnum):
    VLLM = "vllm"
    SGLANG = "sglang"
    ATOM = "atom"
    TRTLLM = "trtllm"
    LLAMACPP = "llamacpp"  # llama.cpp's server on a CPU: one device, one request at a time


class LeverKind(StrEnum):
    ANCHOR_DEFINING = "anchor-defining"
    TRANSFERABLE = "transferable"
    DES = "DES"
    PRICED = "priced"
    MEMORY = "memory + DES"


ENGINES: tuple[Engine, ...] = tuple(Engine)
# The platforms (GPU vendors, or "cpu") each engine runs on: TensorRT-LLM is NVIDIA's,
# ATOM AMD's; llama.cpp here is the CPU engine of `harvest --cluster cpu`.
ENGINE_VENDORS: dict[Engine, tuple[str, ...]] = {
    Engine.VLLM: ("nvidia", "amd"), Engine.SGLANG: ("nvidia", "amd"), Engine.ATOM: ("amd",),
    Engine.TRTLLM: ("nvidia",), Engine.LLAMACPP: ("cpu",),
}
# Kernel and transport values written for one GPU vendor's hardware (a lever value not
# listed here runs on both): AITER and MoRI are ROCm's; FlashInfer, FlashMLA, FlashAttention
# (vLLM's FLASH_ATTN, SGLang's fa3), DeepGEMM, CUTLASS, TensorRT-LLM's kernels and
# pplx-kernels are CUDA's; QuickReduce is vLLM's ROCm all-reduce. DeepEP runs on both (vLLM
# and SGLang carry ROCm ports).
VENDOR_VALUES: dict[str, dict[str, str]] = {
    "attention_backend": {"aiter": "amd", "flashinfer": "nvidia", "flashmla": "nvidia", "flash_attn": "nvidia",
                          "fa3": "nvidia", "trtllm": "nvidia"},
    "moe_backend": {"aiter": "amd", "deepgemm": "nvidia", "cutlass": "nvidia", "flashinfer": "nvidia",
                    "trtllm": "nvidia"},
    "all_to_all_backend": {"mori": "amd", "pplx": "nvidia"},
    "kv_transfer_backend": {"mori": "amd"},
    "allreduce_algorithm": {"quick_reduce": "amd"},
}
FUSIONS: tuple[str, ...] = (
    "norm_quant", "add_rmsnorm", "moe_expert", "moe_routing", "act_quant", "rope_kvstore",
)
QUANT_FED_FUSIONS = frozenset({"norm_quant", "act_quant"})
MOE_FUSIONS = frozenset({"moe_expert", "moe_routing"})
DTYPES = ("bf16", "fp8", "fp4")
HOST_TIER_LEVER = "host_kv_tier_gb"
SHARED_SUFFIX = ":shared"     # host_kv_tier_gb=N:shared: one host KV pool across the deployment's nodes
ARRIVAL_RATE_LEVER = "arrival_rate"
# The slowest open loop: one request in ~17 minutes. A rate of 1e-16 requests/s ran the
# simulator's clock to 2.4e17 us, where a step no longer advanced it (TPOT 0 ms).
MIN_ARRIVAL_RATE = 1e-3
AUTO = "auto"
MAX_WIDTH = 4096   # a layout width beyond any cluster (legality then says why)


@dataclass(frozen=True, slots=True)
class Lever:
    """One lever. ``values`` maps engine -> legal values (discrete levers);
    ``bounds`` is an inclusive (low, high) for ranged levers; ``number`` is a Python
    type for ranged levers (int or float)."""

    index: int
    name: str
    kind: LeverKind
    description: str
    values: dict[Engine, tuple[Any, ...]] | None = None
    bounds: tuple[float, float] | None = None
    number: type | None = None
    optional: bool = False  # None is accepted ("engine default" / "checkpoint dtype")

    @property
    def is_ranged(self) -> bool:
        return self.bounds is not None

    def legal_values(self, engine: Engine | str) -> tuple[Any, ...]:
        """Discrete legal set on ``engine`` (empty for ranged levers)."""
        if self.values is None:
            return ()
        return self.values.get(Engine(engine), ())

    def accepted_text(self, engine: Engine | str | None = None) -> str:
        if self.name == HOST_TIER_LEVER:
            low, high = self.bounds
            return (f"GB per GPU from {_fmt(low)} to {_fmt(high)}: a private tier per scheduler rank; or "
                    f"N{SHARED_SUFFIX} for N GB per GPU pooled across every node of the deployment, which every "
                    "prefill rank reaches over the NIC (e.g. 256:shared)")
        if self.name == ARRIVAL_RATE_LEVER:
            return f"0 (a closed loop), or requests/s from {_fmt(MIN_ARRIVAL_RATE)} to {_fmt(self.bounds[1])}"
        if self.is_ranged:
            low, high = self.bounds
            kind = "integer" if self.number is int else "number"
            return f"{kind} from {_fmt(low)} to {_fmt(high)}"
        if self.name == "fusions":
            return f"'generic', 'none' or names joined by '+': {', '.join(FUSIONS)}"
        if self.name == WEIGHT_LEVER:
            return WEIGHT_SPEC_ACCEPTED
        if self.name in ("prefill_layout", "decode_layout"):
            return LAYOUT_ACCEPTED
        values = self.legal_values(engine) if engine else _union(self.values)
        return accepted_list(_show(v) for v in values)

    def parse(self, raw: Any) -> Any:
        """Convert text or JSON to this lever's value; engine legality is checked later."""
        if raw is None or (isinstance(raw, str) and raw.strip().lower() in ("", AUTO, "default")):
            if self.optional:
                return None
            raise InputError(self.name, "a value is required", self.accepted_text())
        if self.name == HOST_TIER_LEVER:
            return self._parse_host_tier(raw)
        if self.is_ranged:
            return self._parse_number(raw)
        if self.name == "fusions":
            return parse_fusions(raw)
        if self.name == WEIGHT_LEVER:
            return canonical_weight_dtype(raw)
        if self.name in ("prefill_layout", "decode_layout"):
            return parse_layout_options(raw, self.name).text
        return self._parse_choice(raw)

    def _parse_number(self, raw: Any) -> int | float:
        """ASCII digits, finite, whole for an integer lever, inside the lever's range
        (:func:`levers.inputs.parse_number`)."""
        low, high = self.bounds
        try:
            value = parse_number(raw, self.name, integer=self.number is int, low=low, high=high)
        except InputError as error:
            problem = error.problem if "out of range" in error.problem else f"{quote(raw)} is not a valid value"
            raise InputError(self.name, problem, self.accepted_text()) from None
        if self.name == ARRIVAL_RATE_LEVER and 0 < value < MIN_ARRIVAL_RATE:
            raise InputError(self.name, f"{_fmt(value)} requests/s is one request every {1 / value:,.0f} s: a replay "
                             "that long loses its clock's precision", self.accepted_text())
        return float(value) if self.number is float else value

    def _parse_host_tier(self, raw: Any) -> float | str:
        """``N`` (a float: a private tier) or ``N:shared`` (kept as canonical text)."""
        text = str(raw).strip().lower() if isinstance(raw, str) else raw
        if isinstance(text, str) and text.endswith(SHARED_SUFFIX):
            try:
                value = self._parse_number(text[: -len(SHARED_SUFFIX)])
            except InputError:
                raise InputError(self.name, f"{quote(raw)} is not a valid value", self.accepted_text()) from None
            return f"{_fmt(value)}{SHARED_SUFFIX}" if value > 0 else 0.0
        try:
            return self._parse_number(raw)
        except InputError as error:
            raise InputError(self.name, error.problem, self.accepted_text()) from None

    def _parse_choice(self, raw: Any) -> Any:
        for value in _union(self.values):
            if _matches(value, raw):
                return value
        raise InputError(self.name, f"{quote(raw)} is not a legal value"
                         + did_you_mean(raw, _union(self.values)), self.accepted_text())


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def _show(v: Any) -> str:
    if isinstance(v, bool):
        return str(v).lower()
    return str(v)


def _union(values: dict[Engine, tuple[Any, ...]] | None) -> tuple[Any, ...]:
    seen: list[Any] = []
    for engine_values in (values or {}).values():
        seen.extend(v for v in engine_values if v not in seen)
    return tuple(seen)


def _matches(value: Any, raw: Any) -> bool:
    if isinstance(value, bool):
        if isinstance(raw, bool):
            return raw is value
        return str(raw).strip().lower() in (("true", "1", "yes", "on") if value else ("false", "0", "no", "off"))
    if isinstance(value, int):
        if isinstance(raw, bool):
            return False
        try:
            return parse_number(raw, "", integer=True) == value
        except InputError:
            return False
    if isinstance(raw, bool) and value in ("on", "off"):
        return raw is (value == "on")   # YAML reads a bare on / off as a boolean
    return str(raw).strip().lower() == str(value)


def parse_fusions(raw: Any) -> tuple[str, ...]:
    """``generic``, ``none`` / empty, or fusion names joined by ``+`` (or a JSON list).

    Repeats and generic-mixed-with-named are kept here and rejected by legality with
    their reason (METHOD §3.13), so the ledger records why.
    """
    if isinstance(raw, (list, tuple)):
        items = [str(x).strip().lower() for x in raw]
    else:
        text = str(raw).strip().lower()
        items = [] if text in ("", "none") else [x.strip() for x in text.replace(",", "+").split("+")]
    for item in items:
        if item != "generic" and item not in FUSIONS:
            raise InputError("fusions", f"unknown fusion {quote(item)}", accepted_list(("generic",) + FUSIONS))
    return tuple(items)


@dataclass(frozen=True, slots=True)
class LayoutOptions:
    """A pool layout (``TPx/EPy/DPz``) and its options: ``/TSt`` runs the selected
    projections, shared experts and dense MLP tensor-parallel over subgroups of ``t``
    attention-DP ranks (DEP with TP subgroups); ``DWDPn`` is ``n`` independent
    single-GPU data-parallel ranks sharing expert-weight storage (prefill pools only)."""

    tp: int
    ep: int
    dp: int
    subgroup: int = 1
    dwdp: int = 1

    @property
    def widths(self) -> tuple[int, int, int]:
        return self.tp, self.ep, self.dp

    @property
    def text(self) -> str:
        if self.dwdp > 1:
            return f"DWDP{self.dwdp}"
        return format_layout(self.tp, self.ep, self.dp) + (f"/TS{self.subgroup}" if self.subgroup > 1 else "")


LAYOUT_ACCEPTED = ("TPx/EPy/DPz[/TSt], e.g. TP8/EP8/DP8 or TP16/EP16/DP16/TS4 (TP subgroups of t DP ranks), "
                   "or DWDPn (n data-parallel ranks sharing expert weights; prefill_layout only)")
_LAYOUT_TOKEN = re.compile(r"^(TP|EP|DP|TS|DWDP)(\d{1,5})$")


def parse_layout_options(raw: Any, what: str = "layout") -> LayoutOptions:
    """``TPx/EPy/DPz[/TSt]`` or ``DWDPn`` (EP, DP and TS default to 1)."""
    if isinstance(raw, str):
        return _parse_layout_text(raw, what)   # a configuration's pools are read per prediction
    return _parse_layout_options(raw, what)


@lru_cache(maxsize=4096)
def _parse_layout_text(raw: str, what: str) -> LayoutOptions:
    return _parse_layout_options(raw, what)


def _parse_layout_options(raw: Any, what: str) -> LayoutOptions:
    text = str(raw).strip().upper().replace(" ", "")
    parts: dict[str, int] = {}
    try:
        for token in text.split("/"):
            match = _LAYOUT_TOKEN.match(token)
            if match is None or match.group(1) in parts:
                raise ValueError
            number = parse_number(match.group(2), what, integer=True, low=1, high=MAX_WIDTH)
            parts[match.group(1)] = number
        if "DWDP" in parts:
            if len(parts) != 1:
                raise ValueError
            ranks = parts["DWDP"]
            return LayoutOptions(ranks, ranks, ranks, 1, ranks)
        if "TP" not in parts:
            raise ValueError
    except (ValueError, InputError):
        raise InputError(what, f"cannot parse {quote(raw)}", LAYOUT_ACCEPTED) from None
    return LayoutOptions(parts["TP"], parts.get("EP", 1), parts.get("DP", 1), parts.get("TS", 1))


def parse_layout(raw: Any, what: str = "layout") -> tuple[int, int, int]:
    """``TPx/EPy/DPz`` -> (tp, ep, attention_dp); EP and DP default to 1 (options:
    :func:`parse_layout_options`; ``DWDPn`` counts as ``n`` GPUs of ``n`` ranks)."""
    return parse_layout_options(raw, what).widths


def format_layout(tp: int, ep: int, dp: int) -> str:
    return f"TP{tp}/EP{ep}/DP{dp}"


def _each(values: tuple[Any, ...]) -> dict[Engine, tuple[Any, ...]]:
    return {engine: values for engine in ENGINES}


def _per(**by_engine: tuple[Any, ...]) -> dict[Engine, tuple[Any, ...]]:
    return {Engine(name): values for name, values in by_engine.items()}


# PRODUCT.md §3 lists 1-16; 32 and 64 admit the wide-EP layouts measured on NVL72
# domains and across nodes (DEP32, TP64 MoE), legal only with the cross-domain rules.
_WIDTHS = (1, 2, 4, 8, 16, 32, 64)
_LLAMACPP_ONE = {Engine.LLAMACPP: (1,)}  # llama.cpp: one device, no parallel layouts
_A, _T, _D, _P, _M = (
    LeverKind.ANCHOR_DEFINING, LeverKind.TRANSFERABLE, LeverKind.DES, LeverKind.PRICED, LeverKind.MEMORY,
)

LEVERS: tuple[Lever, ...] = (
    Lever(1, "tp", _T, "GPUs per pipeline stage; attention heads must divide it", _each(_WIDTHS) | _LLAMACPP_ONE),
    Lever(2, "pp", _T, "pipeline stages; must divide the layers", _each((1, 2, 4, 8)) | _LLAMACPP_ONE),
    Lever(3, "ep", _T, "expert-parallel width; divides tp and the routed experts", _each(_WIDTHS) | _LLAMACPP_ONE),
    Lever(4, "attention_dp", _T, "attention data-parallel ranks; divides tp", _each(_WIDTHS) | _LLAMACPP_ONE),
    Lever(5, "dcp", _A, "decode context parallel; divides the attention-TP group",
          _per(vllm=(1, 2, 4, 8), sglang=(1, 2, 4, 8), atom=(1,), trtllm=(1, 2, 4, 8), llamacpp=(1,))),
    Lever(6, "replicas", _T, "independent copies of the replica layout", bounds=(1, 4096), number=int),
    Lever(7, "disaggregated", _T, "separate prefill and decode pools",
          _each((False, True)) | {Engine.LLAMACPP: (False,)}),
    Lever(8, "prefill_layout", _T, "prefill pool replica layout TPx/EPy/DPz[/TSt] or DWDPn (disaggregated only)",
          optional=True),
    Lever(9, "prefill_replicas", _T, "prefill pool replicas (disaggregated only)", bounds=(1, 512), number=int),
    Lever(10, "decode_layout", _T, "decode pool replica layout TPx/EPy/DPz[/TSt] (disaggregated only)",
          optional=True),
    Lever(11, "decode_replicas", _T, "decode pool replicas (disaggregated only)", bounds=(1, 512), number=int),
    Lever(12, "kv_transfer_backend", _P, "KV hand-off between pools (disaggregated only)",
          _per(vllm=("nixl", "mooncake"), sglang=("mooncake", "nixl", "mori"), atom=("mori",),
               trtllm=("nixl",), llamacpp=()), optional=True),
    Lever(13, "weight_dtype", _A, "attention projections, dense MLP, shared experts (unset: as a measured anchor of the stack "
          "ran, the one nearest the checkpoint; else the checkpoint's); or "
          "recipe:NAME (a published checkpoint of the card) and COMPONENT:DTYPE items joined by '+' "
          "(attention, dense_mlp, shared_experts, embeddings, drafter; levers.precision)",
          _each(DTYPES), optional=True),
    Lever(14, "activation_dtype", _A, "GEMM activation precision; a GEMM whose weights are wider keeps their "
          "width (no W8A4 or W16A8 kernel) (unset: a measured anchor's as for weight_dtype; else each GEMM's "
          "weights decide: fp8 ones run W8A8, fp4 ones the checkpoint does not ship W4A4 on GPUs with FP4 "
          "tensor cores, the rest fp8 with fp8 attention weights, else bf16)",
          _each(DTYPES), optional=True),
    Lever(15, "expert_dtype", _A, "routed experts (unset: a measured anchor's as for weight_dtype, else the "
          "checkpoint's; fp4 on an MXFP4 checkpoint is its own MXFP4)", _each(DTYPES), optional=True),
    Lever(16, "kv_cache_dtype", _A, "KV cache precision; also sizes the pool", _each(("bf16", "fp8")),
          optional=True),
    Lever(17, "attention_backend", _A, "attention kernels (unset: engine default)",
          _per(vllm=("triton", "flashinfer", "flashmla", "flash_attn", "aiter"),
               sglang=("triton", "flashinfer", "flashmla", "fa3", "aiter", "trtllm"),
               atom=("aiter",), trtllm=("trtllm",), llamacpp=()), optional=True),
    Lever(18, "moe_backend", _A, "MoE GEMM kernels (unset: engine default)",
          _per(vllm=("triton", "aiter", "deepgemm", "cutlass", "flashinfer"),
               sglang=("triton", "aiter", "deepgemm", "cutlass", "flashinfer"),
               atom=("aiter",), trtllm=("trtllm", "cutlass", "deepgemm"), llamacpp=()), optional=True),
    Lever(19, "all_to_all_backend", _A, "EP dispatch/combine; none = all-reduce combine",
          _per(vllm=("none", "deepep", "pplx", "mori"), sglang=("none", "deepep", "mori"),
               atom=("none", "mori"), trtllm=("none", "deepep"), llamacpp=("none",))),
    Lever(20, "graph_capture", _A, "CUDA/HIP graph capture mode",
          _per(vllm=("none", "piecewise", "full"), sglang=("none", "full"), atom=("none", "full"),
               trtllm=("none", "full"), llamacpp=("none",))),
    Lever(21, "max_captured_batch", _T, "largest captured decode batch (staircase, METHOD §3.3)",
          _each((8, 16, 32, 64, 128, 256, 512, 1024))),
    Lever(22, "allreduce_algorithm", _P, "TP all-reduce implementation (unset: engine default)",
          _each(("custom_one_shot", "custom_two_shot", "quick_reduce", "fused_rmsnorm", "library")),
          optional=True),
    Lever(23, "max_running_requests", _D, "running-request cap per scheduler", bounds=(1, 2048), number=int),
    Lever(24, "max_batched_tokens", _D, "token budget per step", bounds=(256, 131072), number=int),
    Lever(25, "chunked_prefill_size", _D, "tokens per prefill chunk (SGLang under attention DP: the replica's, "
          "1/dp per rank; TensorRT-LLM and ATOM have none: their chunk is max_batched_tokens)", bounds=(256, 131072), number=int),
    Lever(26, "kv_memory_fraction", _M, "share of HBM for weights + activations + KV (cap 0.90; a launch "
          "passes each engine the value of its own flag for that pool: SGLang's static share leaves "
          "activations out, TensorRT-LLM's is a share of the memory left free)",
          bounds=(0.5, 0.9), number=float),
    Lever(27, "kv_block_size", _M, "tokens per KV page",
          _per(vllm=(16, 32, 64, 128), sglang=(1, 16, 32, 64, 128), atom=(16, 32, 64, 128),
               trtllm=(32, 64, 128), llamacpp=()), optional=True),
    Lever(28, "spec_method", _A, "speculative decoding method",
          _per(vllm=("none", "mtp", "eagle3", "dspark", "ngram"), sglang=("none", "mtp", "eagle3", "ngram"),
               atom=("none", "mtp"), trtllm=("none", "mtp", "eagle3", "ngram"), llamacpp=("none",))),
    Lever(29, "spec_depth", _T, "draft tokens per verify step (Eq. 2)", bounds=(0, 8), number=int),
    Lever(30, "host_kv_tier_gb", _D, "host DRAM KV tier per GPU, GB (0 = off; N:shared = one pool over the "
          "deployment's nodes, reached over the NIC)", bounds=(0, 4096), number=float),
    Lever(31, "prefix_cache", _D, "content-addressed prefix cache", _each(("on", "off"))),
    Lever(32, "eplb_replicas", _T, "redundant hot-expert copies (Eq. 3)", bounds=(0, 4096), number=int),
    Lever(33, "fusions", _P, "named kernel fusions or generic (METHOD §3.13)"),
    Lever(34, "concurrency", _D, "clients / sessions per deployment", bounds=(1, 65536), number=int),
    Lever(35, "arrival_rate", _D, "0 = closed loop, else requests/s (Poisson)", bounds=(0, 1e6), number=float),
    Lever(36, "router", _D, "request routing across replicas",
          _each(("least_loaded", "kv_aware", "prefix_hash", "round_robin", "random"))),
)

LEVERS_BY_NAME: dict[str, Lever] = {lever.name: lever for lever in LEVERS}
LEVER_NAMES: tuple[str, ...] = tuple(LEVERS_BY_NAME)


def get_lever(name: str) -> Lever:
    key = str(name).strip().lower().replace("-", "_")
    try:
        return LEVERS_BY_NAME[key]
    except KeyError:
        raise InputError("--config", f"unknown lever {quote(name)}" + did_you_mean(key, LEVER_NAMES),
                         accepted_list(LEVER_NAMES, limit=40)) from None


def parse_engine(name: str) -> Engine:
    try:
        return Engine(str(name).strip().lower())
    except ValueError:
        raise InputError("--engine", f"unknown engine {quote(name)}" + did_you_mean(name, ENGINES),
                         accepted_list(ENGINES)) from None
