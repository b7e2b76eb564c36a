"""GPU profiles and the `--cluster` grammar (PRODUCT §2; METHOD §3.6, §3.7, §3.10,
§3.11, §3.15).

A profile is read-only data embedded in `predictor/data/hardware.json`, built offline
by `scripts/build_hardware.py` from public specs and measured collective points; every
number keeps a source (in `sources`, or in its `CollectiveFit.source`). Nothing here
measures or reads outside the package.

The scale-up domain is what a layout may span at fabric speed: one 8-GPU node on HGX
and AMD xGMI platforms, a 72-GPU NVLink rack (18 trays of 4) on GB200/GB300 NVL72.
Beyond it, traffic crosses the NICs (the `*_inter` collectives).
"""

from __future__ import annotations

import json
import math
import re
from functools import lru_cache
from importlib import resources
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from levers.errors import InputError, accepted_list, did_you_mean
from levers.inputs import quote
from predictor.step.comm import Collective, CollectiveFit, bus_factor, nearest_group_fit

__all__ = [
    "DEFAULT_CLUSTER",
    "Cluster",
    "Collective",
    "CollectiveFit",
    "GpuProfile",
    "list_gpus",
    "load_gpu",
    "parse_cluster",
]

DEFAULT_CLUSTER = "mi355x"
CLUSTER_GRAMMAR = "GPU[xPER_NODE[xNODES]], e.g. mi355x, h100x1, b200x8x2"
FP4_BITS_PER_VALUE_BY_VENDOR = {"nvidia": 4.5, "amd": 4.25, "cpu": 5.0}  # NVFP4 / MXFP4 / GGUF Q4_1, PRODUCT §3
DTYPE_ALIASES = {"bf16": "bf16", "fp16": "bf16", "fp8": "fp8", "fp4": "fp4",
                 "nvfp4": "fp4", "mxfp4": "fp4"}


class GpuProfile(BaseModel):
    """One GPU type: specs, link tiers, fitted collectives, platform constants."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    vendor: Literal["nvidia", "amd", "cpu"]  # "cpu": predictor.harvest.cpu (llama.cpp harvests)
    hbm_gb: float = Field(gt=0)
    hbm_bandwidth_gbps: float = Field(gt=0)
    bf16_tflops: float = Field(gt=0)
    fp8_tflops: float = Field(gt=0)
    fp4_tflops: float | None = Field(default=None, gt=0)
    gpus_per_node: int = Field(ge=1)
    scale_up_domain: int = Field(ge=1)
    fabric: Literal["mesh", "switched"]
    intra_node_bw_gbps: float = Field(gt=0)
    nic_bw_gbps: float = Field(gt=0)
    host_link_gbps: float = Field(gt=0)
    host_dram_per_gpu_gb: float = Field(gt=0)
    kernel_launch_us: float = Field(gt=0)
    pp_hop_overhead_us: float = Field(ge=0)
    custom_allreduce_switch_bytes: int = Field(gt=0)
    # Rows a GEMM's compute tile holds (tensor-core tiles: 64; a CPU's SIMD GEMM: 1): compute
    # efficiency at M rows is M / (M + tile) of the peak (predictor.step.operators).
    gemm_tile_rows: float = Field(default=64.0, gt=0)
    large_collective_eta: dict[str, float]
    """Efficiency eta of large in-node collectives (bus bandwidth / link bandwidth)."""
    collectives: dict[str, dict[int, CollectiveFit]]
    sources: dict[str, str]

    @field_validator("collectives", "large_collective_eta")
    @classmethod
    def _known_collectives(cls, value: dict) -> dict:
        unknown = sorted(set(value) - {c.value for c in Collective})
        if unknown:
            raise ValueError(f"unknown collectives {unknown}")
        return value

    @model_validator(mode="after")
    def _domain_covers_node(self) -> GpuProfile:
        if self.scale_up_domain % self.gpus_per_node:
            raise ValueError("scale_up_domain must be a multiple of gpus_per_node")
        return self

    @property
    def fp4_bits_per_value(self) -> float:
        """Stored bits per FP4 value with its scales: NVFP4 4.5, MXFP4 4.25."""
        return FP4_BITS_PER_VALUE_BY_VENDOR[self.vendor]

    def peak_flops(self, dtype: str) -> float:
        """Dense tensor-core peak in FLOP/s for "bf16" | "fp8" | "fp4".

        A GPU without FP4 tensor cores (Hopper, CDNA3) runs FP4 weights through its
        FP8 path, so "fp4" falls back to the FP8 rate there.
        """
        canonical = DTYPE_ALIASES.get(dtype.lower())
        if canonical is None:
            raise ValueError(f"unknown dtype {dtype!r}; accepted: {sorted(DTYPE_ALIASES)}")
        tflops = {"bf16": self.bf16_tflops, "fp8": self.fp8_tflops,
                  "fp4": self.fp4_tflops or self.fp8_tflops}[canonical]
        return tflops * 1e12

    def collective_us(self, name: str, group: int, message_bytes: float,
                      include_alpha: bool = True) -> float:
        """Time of collective `name` over `group` GPUs (METHOD §3.7).

        Uses the nearest measured group size at or above `group`, else the largest;
        a group of one communicates nothing.
        """
        if group <= 1:
            return 0.0
        fits = self.collectives.get(str(name))
        if fits is None:
            raise ValueError(f"no collective {name!r} on {self.name}; "
                             f"known: {sorted(self.collectives)}")
        return nearest_group_fit(fits, group).time_us(message_bytes, include_alpha)

    def large_collective_bw_gbps(self, group: int, collective: str = "allreduce") -> float:
        """Per-GPU bus bandwidth of a large in-node collective over `group` GPUs.

        METHOD §3.7: on a full mesh of N GPUs a group of g uses g-1 of each GPU's N-1
        links, `B(g) = B_node * eta * (g-1)/(N-1)`; on a switched fabric every GPU
        reaches its link bandwidth, `B(g) = B_link * eta`. Bus bandwidth follows the
        nccl-tests convention (see `comm.bus_factor` to convert to the `m / B` form).
        Groups beyond the scale-up domain are clamped to it (price the NIC part with
        the `*_inter` collectives); a group of one moves nothing (infinite bandwidth).
        """
        if group <= 1:
            return math.inf
        eta = self.large_collective_eta[str(collective)]
        if self.fabric == "switched":
            return self.intra_node_bw_gbps * eta
        in_mesh = min(group, self.gpus_per_node)
        return self.intra_node_bw_gbps * eta * (in_mesh - 1) / (self.gpus_per_node - 1)

    def large_collective_algbw_gbps(self, group: int, collective: str = "allreduce") -> float:
        """`large_collective_bw_gbps` in the `t = alpha + m / B` (algorithm) form."""
        if group <= 1:
            return math.inf
        return self.large_collective_bw_gbps(group, collective) / bus_factor(collective, group)


@lru_cache(maxsize=1)
def _profiles_by_key() -> dict[str, GpuProfile]:
    text = (resources.files("predictor") / "data" / "hardware.json").read_text("utf-8")
    raw = json.loads(text)["gpus"]
    return {name.lower(): GpuProfile.model_validate(body) for name, body in raw.items()}


def list_gpus() -> list[GpuProfile]:
    """Every embedded GPU profile, in file order."""
    return list(_profiles_by_key().values())


def has_gpu_profile(name: str) -> bool:
    """Whether the registry holds a profile named ``name`` (a CPU harvest's does not)."""
    return name.strip().lower() in _profiles_by_key()


def load_gpu(name: str, what: str = "--cluster") -> GpuProfile:
    """The profile named `name`, case-insensitive ("mi355x", "H100", "gb200"); ``what``:
    the input that named it, for the error."""
    profile = _profiles_by_key().get(name.strip().lower())
    if profile is None:
        raise InputError(what, f"unknown GPU {quote(name)}" + did_you_mean(name, _profiles_by_key()),
                         accepted_list(p.name.lower() for p in list_gpus()))
    return profile


class Cluster(BaseModel):
    """`num_nodes` nodes of `gpus_per_node` GPUs of one type."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    gpu: GpuProfile
    gpus_per_node: int = Field(ge=1)
    num_nodes: int = Field(ge=1)

    @model_validator(mode="after")
    def _fits_node(self) -> Cluster:
        if self.gpus_per_node > self.gpu.gpus_per_node:
            raise ValueError(f"{self.gpu.name} nodes hold {self.gpu.gpus_per_node} GPUs")
        return self

    @property
    def total_gpus(self) -> int:
        return self.gpus_per_node * self.num_nodes

    @property
    def spec(self) -> str:
        """Canonical `--cluster` text: "mi355x", "h100x1", "b200x8x2", "mi355x8x2"."""
        name = self.gpu.name.lower()
        separator = "" if name.endswith("x") else "x"
        if self.num_nodes == 1 and self.gpus_per_node == self.gpu.gpus_per_node:
            return name
        if self.num_nodes == 1:
            return f"{name}{separator}{self.gpus_per_node}"
        return f"{name}{separator}{self.gpus_per_node}x{self.num_nodes}"

    def scale_up_gpus(self) -> int:
        """GPUs of this cluster one GPU reaches over the fast fabric.

        A domain spans `scale_up_domain / gpu.gpus_per_node` nodes (1 on HGX and AMD
        nodes, 18 trays of 4 on NVL72), so it holds this cluster's GPUs on that many
        nodes: `min(scale_up_domain, total_gpus)` when nodes are full.
        """
        nodes_per_domain = self.gpu.scale_up_domain // self.gpu.gpus_per_node
        return self.gpus_per_node * min(self.num_nodes, nodes_per_domain)


_COUNTS = re.compile(r"(?:x(\d+)(?:x(\d+))?)?", re.ASCII)
_COUNTS_AFTER_X = re.compile(r"(\d+)(?:x(\d+))?", re.ASCII)  # "mi355x8x2": the name's x separates
MAX_NODES = 1024            # a cluster of more nodes is not one deployment's (PRODUCT.md §2 grammar)


def _cluster_error(problem: str) -> InputError:
    gpus = accepted_list((p.name.lower() for p in list_gpus()), limit=20)
    return InputError("--cluster", problem, f"{CLUSTER_GRAMMAR}; GPUs: {gpus}")


def _split_counts(text: str) -> tuple[GpuProfile, str | None, str | None]:
    """The GPU named at the start of `text` and its PER_NODE / NODES digits."""
    for profile in sorted(list_gpus(), key=lambda p: -len(p.name)):
        name = profile.name.lower()
        if not text.startswith(name):
            continue
        rest = text[len(name):]
        match = _COUNTS.fullmatch(rest)
        if match is None and name.endswith("x"):
            match = _COUNTS_AFTER_X.fullmatch(rest)
        if match is None:
            raise _cluster_error(f"cannot read {quote(text)} after GPU '{name}'")
        return profile, match.group(1), match.group(2)
    head = re.match(r"[a-z0-9]*?(?=x\d|$)", text)
    unknown = (head and head.group(0)) or text
    raise _cluster_error(f"unknown GPU {quote(unknown)}" + did_you_mean(unknown, _profiles_by_key()))


MAX_COUNT_DIGITS = 9        # a count of more digits is beyond any range: never converted


def _significant(digits: str | None) -> str:
    return (digits or "").lstrip("0") or "0"


def _count(digits: str | None, default: int) -> int:
    """A count's digits as a number (past `MAX_COUNT_DIGITS`: beyond any range)."""
    if not digits:
        return default
    digits = _significant(digits)
    return int(digits) if len(digits) <= MAX_COUNT_DIGITS else 10 ** MAX_COUNT_DIGITS


def _shown(digits: str | None) -> str:
    digits = _significant(digits)
    if len(digits) <= MAX_COUNT_DIGITS:
        return f"{int(digits):,}"
    return f"{digits[:12]}{'...' if len(digits) > 12 else ''} ({len(digits)} digits)"


def parse_cluster(text: str) -> Cluster:
    """Read `GPU[xPER_NODE[xNODES]]` ("mi355x", "h100x1", "b200x8x2", "gb300x4x4").

    PER_NODE defaults to a full node (the GPU's `gpus_per_node`), NODES to 1.
    """
    cleaned = text.strip().lower()
    if not cleaned:
        raise _cluster_error("empty cluster")
    profile, per_node_digits, nodes_digits = _split_counts(cleaned)
    per_node = _count(per_node_digits, profile.gpus_per_node)
    num_nodes = _count(nodes_digits, 1)
    if not 1 <= per_node <= profile.gpus_per_node:
        raise _cluster_error(f"PER_NODE {_shown(per_node_digits)} is not in 1..{profile.gpus_per_node} "
                             f"for {profile.name}")
    if not 1 <= num_nodes <= MAX_NODES:
        raise _cluster_error(f"NODES {_shown(nodes_digits)} is not in 1..{MAX_NODES:,}")
    return Cluster(gpu=profile, gpus_per_node=per_node, num_nodes=num_nodes)
