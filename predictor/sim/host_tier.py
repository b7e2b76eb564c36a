"""The host-DRAM KV tier below HBM (METHOD §3.10).

Tier size: the DRAM handed to the engine per GPU (``config.host_kv_tier_gb``), counted
in prefix-cache blocks of the rank's per-GPU KV bytes (every GPU of a rank holds its
shard of the same tokens, so per-GPU bytes give per-rank tokens). A request whose prefix
is DRAM-resident has it loaded when the scheduler reaches it in its queue, as far ahead
as the HBM its running requests leave (SGLang HiCache's load-back; loading at arrival
let a long queue evict the blocks again before admission): the load is queued on its
rank's host link (``gpu.host_link_gbps``, GB/s host-to-device), adds to that request's
TTFT only and does not stall the others; loads started together queue.
"""

from __future__ import annotations

from dataclasses import dataclass

from predictor.units import BYTES_PER_GB, US_PER_S


def dram_capacity_blocks(host_kv_tier_gb: float, kv_bytes_per_token: float, block_tokens: int) -> int:
    """Blocks the host tier of one rank holds (0 = no tier)."""
    if host_kv_tier_gb <= 0 or kv_bytes_per_token <= 0:
        return 0
    return int(host_kv_tier_gb * BYTES_PER_GB // (kv_bytes_per_token * block_tokens))


@dataclass(slots=True)
class HostLink:
    """One rank's host-to-device link: a FIFO of loads."""

    bandwidth_gbps: float
    free_at_us: float = 0.0

    def load(self, now_us: float, num_bytes: float) -> float:
        """Queue a load of ``num_bytes``; return when it completes."""
        start = max(now_us, self.free_at_us)
        self.free_at_us = start + num_bytes / (self.bandwidth_gbps * BYTES_PER_GB) * US_PER_S
        return self.free_at_us
