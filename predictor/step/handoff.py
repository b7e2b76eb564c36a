"""KV hand-off between disaggregated pools (METHOD §3.11).

Hand-off = floor + exposed bytes over each prefill GPU's link. MoRI streams layer by
layer during prefill, so only the last layer is exposed; NIXL and Mooncake move the
whole cache after prefill. Every rate is capped by the link actually crossed: the
scale-up fabric when both pools sit in one scale-up domain, else the NIC.
"""

from __future__ import annotations

from dataclasses import dataclass

from levers.catalog import Engine
from predictor.units import BYTES_PER_GB, US_PER_S


@dataclass(frozen=True, slots=True)
class HandoffBackend:
    floor_us: float
    bandwidth_gbps: float
    last_layer_only: bool
    source: str


BACKENDS: dict[str, HandoffBackend] = {
    "mori": HandoffBackend(120.0, 47.9, True, "METHOD §3.11 / §3.15 (measured on MI355X)"),
    "nixl": HandoffBackend(5.0, 400.0, False, "METHOD §3.11"),
    "mooncake": HandoffBackend(10.0, 200.0, False, "METHOD §3.11"),
}

DEFAULT_BACKEND: dict[Engine, str] = {
    Engine.VLLM: "nixl", Engine.SGLANG: "mooncake", Engine.ATOM: "mori", Engine.TRTLLM: "nixl",
}


def handoff_us(backend: str, bytes_per_gpu: float, num_layers: int, link_gbps: float) -> float:
    """Time to hand one request's KV from a prefill GPU to the decode pool."""
    spec = BACKENDS[backend]
    exposed = bytes_per_gpu / max(1, num_layers) if spec.last_layer_only else bytes_per_gpu
    rate_gbps = min(spec.bandwidth_gbps, link_gbps)
    return spec.floor_us + exposed / (rate_gbps * BYTES_PER_GB) * US_PER_S


def link_gbps(total_gpus: int, scale_up_gpus: int, fabric_gbps: float, nic_gbps: float) -> float:
    """The link a hand-off crosses: the fabric inside one scale-up domain, else the NIC."""
    return fabric_gbps if total_gpus <= scale_up_gpus else nic_gbps
