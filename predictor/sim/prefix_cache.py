"""Prefix caches of one scheduler rank (METHOD §5, §3.10): a protocol and a registry.

`LeafFirstCache` (in `radix_cache`) is the cache the engines run: content-addressed,
leaf-first LRU (a block is never dropped while a resident block continues from it, so
shared heads survive and only divergent tails are reclaimed), with an optional host
tier. :class:`FlatLruCache` evicts the least recently used block wherever it sits; it
exists to show why leaf-first matters (a sweep over long contexts makes flat LRU evict
every block just before its reuse) and is selectable only through `SimOptions`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from enum import StrEnum
from typing import Protocol

from predictor.sim.radix_cache import LeafFirstCache

__all__ = ["CACHES", "EvictionPolicy", "FlatLruCache", "LeafFirstCache", "PrefixCache"]


class EvictionPolicy(StrEnum):
    LEAF_FIRST = "leaf_first"
    FLAT_LRU = "flat_lru"


class PrefixCache(Protocol):
    """What the KV pool needs from a cache; ``ids`` are a prompt's block ids."""

    num_hbm_blocks: int
    num_dram_blocks: int

    def match(self, ids: Sequence[int], num_blocks: int) -> tuple[int, int]:
        """(leading blocks resident in HBM, leading blocks resident in any tier)."""

    def pin(self, ids: Sequence[int], num_blocks: int) -> None: ...

    def unpin(self, ids: Sequence[int], num_blocks: int) -> None: ...

    def insert(self, ids: Sequence[int], start: int, stop: int) -> int:
        """Make ids[start:stop] HBM-resident; return how many blocks became HBM-resident."""

    def promote(self, ids: Sequence[int], start: int, stop: int) -> int:
        """Host tier -> HBM for ids[start:stop]; return the number promoted."""

    def evict(self, num_blocks: int) -> int:
        """Free up to ``num_blocks`` HBM blocks; return how many were freed."""

    def dispose(self) -> None:
        """The replay is over: drop what reference counting alone would not free."""


class FlatLruCache:
    """Per-block LRU that ignores the prefix structure (HBM only; see module docstring)."""

    def __init__(self, dram_capacity_blocks: int = 0) -> None:
        self.order: OrderedDict[int, int] = OrderedDict()   # block -> pins
        self.num_hbm_blocks = 0
        self.num_dram_blocks = 0

    def match(self, ids: Sequence[int], num_blocks: int) -> tuple[int, int]:
        count = 0
        for key in ids[:num_blocks]:
            if int(key) not in self.order:
                break
            count += 1
        return count, count

    def _touch(self, ids: Sequence[int], num_blocks: int, delta: int) -> None:
        for key in ids[:num_blocks]:
            key = int(key)
            self.order[key] += delta
            self.order.move_to_end(key)

    def pin(self, ids: Sequence[int], num_blocks: int) -> None:
        self._touch(ids, num_blocks, 1)

    def unpin(self, ids: Sequence[int], num_blocks: int) -> None:
        self._touch(ids, num_blocks, -1)

    def insert(self, ids: Sequence[int], start: int, stop: int) -> int:
        added = 0
        for key in ids[start:stop]:
            key = int(key)
            if key not in self.order:
                self.order[key] = 0
                self.num_hbm_blocks += 1
                added += 1
            self.order.move_to_end(key)
        return added

    def promote(self, ids: Sequence[int], start: int, stop: int) -> int:
        return 0

    def evict(self, num_blocks: int) -> int:
        victims = []
        for key, pins in self.order.items():
            if len(victims) >= num_blocks:
                break
            if not pins:
                victims.append(key)
        for key in victims:
            del self.order[key]
        self.num_hbm_blocks -= len(victims)
        return len(victims)

    def dispose(self) -> None:
        """No cycles to break."""


CACHES: dict[EvictionPolicy, type] = {
    EvictionPolicy.LEAF_FIRST: LeafFirstCache,
    EvictionPolicy.FLAT_LRU: FlatLruCache,
}
