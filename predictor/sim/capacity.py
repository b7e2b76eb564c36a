"""Per-rank KV capacity of a pool from the memory model (METHOD §3.9).

``kv_pool_bytes / kv_bytes_per_token`` tokens per rank (both per GPU: every GPU of an
attention-DP rank holds its shard of the same tokens), plus the per-sequence fixed state
(linear attention, sliding windows) that each running request also takes; and what one
copy of a token's KV and of a sequence's state weighs over all shards (the layout at
TP1), which sizes a shared host pool. Tests and callers with their own memory numbers
pass a `CapacityModel` instead.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from levers.configuration import Configuration
from levers.errors import InputError
from predictor.feasibility import memory_for

if TYPE_CHECKING:
    from predictor.target import Target


@dataclass(frozen=True, slots=True)
class PoolCapacity:
    kv_capacity_tokens: int          # per rank
    kv_bytes_per_token: float        # per GPU
    state_bytes_per_sequence: float  # per GPU
    num_layers: int
    unique_kv_bytes_per_token: float = 0.0   # one copy of a token's KV over all shards (0: per GPU)
    unique_state_bytes: float = 0.0          # one copy of a sequence's state (0: per GPU)

    @property
    def copy_kv_bytes_per_token(self) -> float:
        """A token's KV stored once (a shared host pool holds one copy of each prefix)."""
        return self.unique_kv_bytes_per_token or self.kv_bytes_per_token

    @property
    def copy_state_bytes(self) -> float:
        return self.unique_state_bytes or self.state_bytes_per_sequence

    @property
    def state_tokens(self) -> int:
        if self.kv_bytes_per_token <= 0:
            return 0
        return -(-int(self.state_bytes_per_sequence) // int(self.kv_bytes_per_token))


CapacityModel = Callable[[Configuration], PoolCapacity]


def memory_capacity(target: Target) -> CapacityModel:
    """The memory model's pool sizes for each replica configuration of ``target``."""

    def capacity(config: Configuration) -> PoolCapacity:
        memory = memory_for(target.card, target.cluster, config)
        if memory.kv_pool_bytes <= 0 or memory.kv_bytes_per_token <= 0:
            raise InputError("--config", f"no room for a KV pool ({memory.reason or 'weights fill HBM'})",
                             "a wider layout, lower-precision weights or a larger kv_memory_fraction")
        whole = memory_for(target.card, target.cluster, replace(config, tp=1, ep=1, attention_dp=1, dcp=1, pp=1,
                                                                     prefill_layout=None, decode_layout=None))
        return PoolCapacity(int(memory.kv_pool_bytes // memory.cache_bytes_per_token),
                            float(memory.kv_bytes_per_token), float(memory.state_bytes_per_sequence),
                            target.card.num_layers, float(whole.kv_bytes_per_token),
                            float(whole.state_bytes_per_sequence))

    return capacity
