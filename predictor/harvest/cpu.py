"""A `cpu` hardware profile, so an engine harvested on a CPU (llama.cpp) can be predicted
by the same step model as a GPU (METHOD §2, §4).

The profile is a `GpuProfile` of vendor "cpu": one device per node, no fabric. Its
numbers are read from the machine (`/proc/cpuinfo`, `os.cpu_count()` / the scheduler
affinity, `/proc/meminfo`) or given (keyword arguments, or the environment variables
`INFERASIM_CPU_BANDWIDTH_GBPS`, `INFERASIM_CPU_TFLOPS`):

- memory bandwidth: not readable from the OS; the documented default is
  `DEFAULT_BANDWIDTH_GBPS` (one DDR4/DDR5 channel's order of magnitude, what a small
  VM slice sees); give the measured STREAM figure for anything better;
- peak rate: cores x clock x FLOP per cycle per core, with FLOP/cycle from the vector
  extensions (`_FLOPS_PER_CYCLE`: two FMA pipes of the widest vector, fp32; bf16 doubles
  it when `avx512_bf16` / `amx_bf16` is present); the clock from "cpu MHz" or
  `DEFAULT_CLOCK_GHZ`. No CPU has fp8 units: the fp8 rate is the bf16 rate;
- memory: MemTotal (the "HBM" a CPU engine uses for weights and KV);
- collectives: a CPU anchor has width 1 and communicates nothing; every collective is
  listed (the step model precomputes them) as a memory copy at the memory bandwidth
  with no latency, so a width-1 target prices zero communication.

A CPU anchor's accelerator is "cpu"; the CPU model and thread count are kept in the
anchor's provenance (`CpuFacts.describe`).
"""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from pathlib import Path

from levers.errors import InputError
from predictor.hardware import Cluster, GpuProfile
from predictor.step.comm import Collective, CollectiveFit
from predictor.units import BYTES_PER_GB

CPU_PROFILE_NAME = "cpu"
DEFAULT_BANDWIDTH_GBPS = 20.0     # documented default (module docstring); override when measured
DEFAULT_CLOCK_GHZ = 2.5
DEFAULT_MEMORY_GB = 8.0
KIB_PER_GB = BYTES_PER_GB / 1024
# Small nonzero stand-ins where the schema needs positive numbers a CPU does not have.
CPU_KERNEL_LAUNCH_US = 1.0        # llama.cpp graph-node dispatch, order of magnitude
CPU_NIC_GBPS = 1.25               # nominal 10 GbE; a CPU anchor never spans nodes
BANDWIDTH_ENV = "INFERASIM_CPU_BANDWIDTH_GBPS"
TFLOPS_ENV = "INFERASIM_CPU_TFLOPS"
# fp32 FLOP per cycle per core: 2 FMA pipes x lanes x 2 (multiply + add).
_FLOPS_PER_CYCLE = (("avx512f", 2 * 16 * 2), ("avx2", 2 * 8 * 2), ("avx", 2 * 8), ("sse2", 2 * 4 * 2))
_FALLBACK_FLOPS_PER_CYCLE = 8
_BF16_FLAGS = ("avx512_bf16", "amx_bf16")


@dataclass(frozen=True, slots=True)
class CpuFacts:
    """What the machine says about itself."""

    model_name: str
    cores: int
    clock_ghz: float
    flags: frozenset[str]
    memory_gb: float

    @property
    def fp32_flops_per_cycle(self) -> int:
        for flag, flops in _FLOPS_PER_CYCLE:
            if flag in self.flags:
                return flops
        return _FALLBACK_FLOPS_PER_CYCLE

    @property
    def has_bf16(self) -> bool:
        return any(flag in self.flags for flag in _BF16_FLAGS)

    def peak_tflops(self) -> float:
        """bf16 peak: cores x GHz x FLOP/cycle (x2 with bf16 dot products)."""
        per_cycle = self.fp32_flops_per_cycle * (2 if self.has_bf16 else 1)
        return self.cores * self.clock_ghz * per_cycle / 1e3

    def describe(self) -> str:
        widest = next((flag for flag, _ in _FLOPS_PER_CYCLE if flag in self.flags), "scalar")
        return f"{self.model_name}, {self.cores} cores, {widest}{'+bf16' if self.has_bf16 else ''}"


def parse_cpuinfo(text: str) -> tuple[str, float | None, frozenset[str]]:
    """(model name, clock GHz or None, flags) from /proc/cpuinfo text (first processor)."""
    model: str | None = None
    clock: float | None = None
    flags: frozenset[str] = frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if key == "model name" and model is None:
            model = value
        elif key == "cpu MHz" and clock is None:
            try:
                clock = float(value) / 1e3
            except ValueError:
                clock = None
        elif key == "flags" and not flags:
            flags = frozenset(value.split())
    return model or platform.processor() or "unknown CPU", clock, flags


def parse_meminfo_gb(text: str) -> float | None:
    for line in text.splitlines():
        if line.startswith("MemTotal:"):
            parts = line.split()
            if len(parts) >= 2 and parts[1].isdigit():
                return int(parts[1]) / KIB_PER_GB
    return None


def usable_cores() -> int:
    """Cores this process may run on (the affinity mask, as `nproc` reports)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _read(path: str) -> str:
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return ""


def read_cpu_facts(cpuinfo: str | None = None, meminfo: str | None = None, cores: int | None = None) -> CpuFacts:
    """Facts of this machine; the texts and core count may be given (tests)."""
    model, clock, flags = parse_cpuinfo(_read("/proc/cpuinfo") if cpuinfo is None else cpuinfo)
    memory = parse_meminfo_gb(_read("/proc/meminfo") if meminfo is None else meminfo)
    return CpuFacts(model_name=model, cores=cores or usable_cores(), clock_ghz=clock or DEFAULT_CLOCK_GHZ,
                    flags=flags, memory_gb=memory or DEFAULT_MEMORY_GB)


def _env_number(name: str) -> float | None:
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return None
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if value <= 0:
        raise InputError(name, f"'{raw}' is not a positive number", "e.g. 25.6")
    return value


def _memory_copy_collectives(bandwidth_gbps: float) -> dict[str, dict[int, CollectiveFit]]:
    fit = CollectiveFit(alpha_us=0.0, bandwidth_gbps=bandwidth_gbps, source="cpu: a memory copy (no interconnect)")
    return {c.value: {2: fit} for c in Collective}


CPU_GEMM_TILE_ROWS = 1.0   # SIMD GEMMs: no tensor-core tile to fill


def cpu_profile(facts: CpuFacts | None = None, *, bandwidth_gbps: float | None = None,
                peak_tflops: float | None = None) -> GpuProfile:
    """The `cpu` profile (module docstring); given numbers beat the environment, which
    beats what is read from the machine and the documented defaults."""
    facts = facts or read_cpu_facts()
    bandwidth = bandwidth_gbps or _env_number(BANDWIDTH_ENV)
    tflops = peak_tflops or _env_number(TFLOPS_ENV)
    bandwidth_source = "given" if bandwidth else f"documented default {DEFAULT_BANDWIDTH_GBPS} GB/s"
    bandwidth = bandwidth or DEFAULT_BANDWIDTH_GBPS
    tflops_source = "given" if tflops else f"{facts.cores} cores x {facts.clock_ghz:.2f} GHz x FLOP/cycle"
    tflops = tflops or facts.peak_tflops()
    return GpuProfile(
        name=CPU_PROFILE_NAME, vendor="cpu", hbm_gb=facts.memory_gb, hbm_bandwidth_gbps=bandwidth,
        bf16_tflops=tflops, fp8_tflops=tflops, fp4_tflops=None, gpus_per_node=1, scale_up_domain=1,
        fabric="switched", intra_node_bw_gbps=bandwidth, nic_bw_gbps=CPU_NIC_GBPS, host_link_gbps=bandwidth,
        host_dram_per_gpu_gb=facts.memory_gb, kernel_launch_us=CPU_KERNEL_LAUNCH_US, pp_hop_overhead_us=0.0,
        custom_allreduce_switch_bytes=1, gemm_tile_rows=CPU_GEMM_TILE_ROWS, large_collective_eta={},
        collectives=_memory_copy_collectives(bandwidth),
        sources={"cpu": facts.describe(), "memory_bandwidth": bandwidth_source, "peak_tflops": tflops_source,
                 "memory": "/proc/meminfo MemTotal"},
    )


def is_cpu_cluster(text: str | None) -> bool:
    return (text or "").strip().lower() in (CPU_PROFILE_NAME, f"{CPU_PROFILE_NAME}x1")


def cpu_cluster(profile: GpuProfile | None = None) -> Cluster:
    """One CPU "device" on one node."""
    return Cluster(gpu=profile or cpu_profile(), gpus_per_node=1, num_nodes=1)
