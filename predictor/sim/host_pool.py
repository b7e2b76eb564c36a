"""A host-memory KV pool shared by every node of a deployment (issue 13; METHOD §3.10).

``host_kv_tier_gb=N:shared`` pools ``N`` GB of host DRAM per GPU over every GPU the
deployment spans (Mooncake Store, LMCache or HiCache with a shared backend) into one
content-addressed store. Every prompt a prefill rank computes is written through to it
with its linear-attention state checkpoint (KDA, Gated DeltaNet: a hybrid model can
resume only from a prefix whose recurrent state was saved, so a hit ends at a stored
prompt's end); any rank of the entry pool, whichever computed the prefix, finds it.

Capacity counts blocks of the model's KV for one copy of the prefix (per-GPU bytes times
the attention-TP shards, as `unique_kv_bytes_per_token` gives them) plus each stored
checkpoint, as ``ceil(state / block bytes)`` extra blocks hung under the prompt's last
block: leaf-first eviction drops stale checkpoints (a turn's is superseded by the next
turn's) before shared prefixes. A hit is the longest stored prefix that ends at a
checkpoint when the model keeps per-sequence state, else the longest stored prefix.

A load travels over the rank's NIC (each GPU fetches its own shard at the NIC's rate; a
rank's loads queue) layer by layer while the prefill computes the uncached suffix, so
only what the compute does not hide is exposed: at least one layer's share, at most the
whole load (``exposed_us``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from predictor.sim.radix_cache import LeafFirstCache
from predictor.sim.request import Request
from predictor.units import BYTES_PER_GB, US_PER_S

CHECKPOINT_TAG = 1 << 62          # a checkpoint block id: the prompt's last block id, tagged
NIC_EFFICIENCY = 0.8              # METHOD §3.7: the NIC datasheet rate at 0.8 across nodes


@dataclass(frozen=True, slots=True)
class PoolSize:
    """What sizes the shared pool (all bytes for one copy of the KV)."""

    capacity_bytes: float
    kv_bytes_per_token: float     # unique (all shards), for capacity
    state_bytes: float            # one per-sequence state checkpoint, unique
    block_tokens: int

    @property
    def block_bytes(self) -> float:
        return self.kv_bytes_per_token * self.block_tokens

    @property
    def capacity_blocks(self) -> int:
        return int(self.capacity_bytes // self.block_bytes) if self.block_bytes > 0 else 0

    @property
    def checkpoint_blocks(self) -> int:
        return -(-int(self.state_bytes) // int(self.block_bytes)) if self.state_bytes and self.block_bytes else 0


def pool_size(gb_per_gpu: float, total_gpus: int, kv_bytes_per_token: float, state_bytes: float,
              block_tokens: int) -> PoolSize:
    return PoolSize(gb_per_gpu * BYTES_PER_GB * total_gpus, kv_bytes_per_token, state_bytes, block_tokens)


class SharedHostPool:
    """One store for the whole deployment (see the module docstring)."""

    def __init__(self, size: PoolSize) -> None:
        self.size = size
        self.cache = LeafFirstCache(0)
        self.checkpoint_blocks = size.checkpoint_blocks
        self.num_stored = 0
        self._depths: dict[int, int] = {}    # session -> stored prefix its last lookup found

    def _match(self, request: Request) -> int:
        """Leading blocks stored (any checkpoint aside). The walk starts where the session's
        last lookup ended when that block is still stored (`LeafFirstCache.match`'s probe:
        the same answer as from the root; a session's turns are a chain of nodes here)."""
        session = request.session
        resident = self.cache.match(request.block_ids, request.num_blocks, self._depths.get(session, 0))[0]
        self._depths[session] = resident
        return resident

    def usable_blocks(self, request: Request) -> int:
        """Leading blocks a rank could load: the longest stored prefix (ending at a
        checkpoint when the model has per-sequence state)."""
        if not request.num_blocks:
            return 0
        resident = self._match(request)
        if not resident or not self.checkpoint_blocks:
            return resident
        tail = _checkpoint_ids(request.block_ids, resident, self.checkpoint_blocks)
        return resident if self.cache.continues(request.block_ids, resident, tail) else 0

    def store(self, request: Request) -> None:
        """Write a computed prompt (and its checkpoint) through; evict leaves to capacity."""
        blocks = request.num_blocks
        if not blocks:
            return
        stored = self._match(request)
        self.cache.insert(request.block_ids, stored, blocks)      # only what the pool lacks
        if self.checkpoint_blocks:         # its own node: a later prompt branches off the prompt, not it
            self.cache.insert_after(request.block_ids, blocks,
                                    _checkpoint_ids(request.block_ids, blocks, self.checkpoint_blocks))
        self._depths[request.session] = blocks
        self.num_stored += 1
        overflow = self.cache.num_hbm_blocks - self.size.capacity_blocks
        if overflow > 0:
            self.cache.evict(overflow)


def _checkpoint_ids(ids: Sequence[int], blocks: int, checkpoint_blocks: int) -> range:
    """The ids of the checkpoint stored with ``ids[:blocks]`` (derived from its last block);
    a range, never listed: a lookup reads a few of them (`LeafFirstCache.continues`), a
    store keeps the range as its node's run."""
    tag = (int(ids[blocks - 1]) & (CHECKPOINT_TAG - 1)) | CHECKPOINT_TAG
    return range(tag, tag + checkpoint_blocks)


@dataclass(slots=True)
class NetworkLink:
    """One rank's NIC toward the shared pool: loads queue (a FIFO), each GPU at
    ``nic_gbps`` (GB/s per direction, at METHOD §3.7's 0.8 efficiency) for its own shard."""

    nic_gbps: float
    free_at_us: float = 0.0

    def transfer_us(self, per_gpu_bytes: float) -> float:
        return per_gpu_bytes / (NIC_EFFICIENCY * self.nic_gbps * BYTES_PER_GB) * US_PER_S

    def load(self, now_us: float, per_gpu_bytes: float, hidden_us: float, num_layers: int) -> float:
        """Queue a load; return when the request may be scheduled (``exposed_us`` after
        the link is free: the rest streams in under the prefill's compute)."""
        start = max(now_us, self.free_at_us)
        duration = self.transfer_us(per_gpu_bytes)
        self.free_at_us = start + duration
        return start + exposed_us(duration, hidden_us, num_layers)


def exposed_us(load_us: float, compute_us: float, num_layers: int) -> float:
    """Layer-by-layer overlap: layer ``l``'s KV arrives while layer ``l - 1`` computes, so
    the first layer's share is always exposed and compute hides the rest up to its length."""
    first_layer = load_us / max(1, num_layers)
    return min(load_us, max(first_layer, load_us - compute_us))
