"""The content-addressed prefix cache of one scheduler rank (METHOD §5, §3.10).

A block id names a whole prefix (the trace readers check this), so the resident blocks
form a forest (a radix cache at block granularity). **Leaf-first LRU**: a block is only
dropped when no resident block continues from it, so shared heads survive and only
divergent tails are reclaimed. Two consequences make the hot paths cheap:

- residency is prefix-closed along every prompt, so a request's hit (the longest
  leading run of resident blocks) is found by binary search, O(log n) lookups;
- a leaf's recency is the most recent use of any path through it, so a use stamps only
  the deepest block it touched, a pin on the deepest block protects its whole path, and
  an evicted leaf hands its stamp to its parent (O(1) per use, not O(path)).

With a host tier, HBM eviction demotes blocks to DRAM (still leaf-first with respect to
HBM children) and DRAM drops its own least recently used leaves when full.
:class:`FlatLruCache` evicts the least recently used block wherever it sits; it exists
to show why leaf-first matters (a sweep over long contexts makes flat LRU evict every
block just before its reuse) and is selectable only through `SimOptions`.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from enum import StrEnum
from typing import Protocol, Sequence

HBM, DRAM = 1, 2


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


class _Block:
    __slots__ = ("parent", "tier", "stamp", "pins", "kids", "hbm_kids")

    def __init__(self, parent: int | None, stamp: int) -> None:
        self.parent = parent
        self.tier = HBM
        self.stamp = stamp
        self.pins = 0
        self.kids = 0       # resident children (any tier)
        self.hbm_kids = 0   # HBM-resident children


class LeafFirstCache:
    """Leaf-first LRU over HBM, with an optional DRAM tier of ``dram_capacity_blocks``."""

    def __init__(self, dram_capacity_blocks: int = 0) -> None:
        self.blocks: dict[int, _Block] = {}
        self.dram_capacity_blocks = max(0, dram_capacity_blocks)
        self.num_hbm_blocks = 0
        self.num_dram_blocks = 0
        self._tick = 0
        self._hbm_heap: list[tuple[int, int]] = []
        self._dram_heap: list[tuple[int, int]] = []

    # -- lookups -------------------------------------------------------------------
    def match(self, ids: Sequence[int], num_blocks: int) -> tuple[int, int]:
        blocks = self.blocks
        lo, hi = 0, num_blocks
        while lo < hi:
            mid = (lo + hi + 1) >> 1
            if int(ids[mid - 1]) in blocks:
                lo = mid
            else:
                hi = mid - 1
        resident = lo
        if not self.num_dram_blocks or not resident or blocks[int(ids[resident - 1])].tier == HBM:
            return resident, resident
        lo, hi = 0, resident
        while lo < hi:
            mid = (lo + hi + 1) >> 1
            if blocks[int(ids[mid - 1])].tier == HBM:
                lo = mid
            else:
                hi = mid - 1
        return lo, resident

    # -- use -----------------------------------------------------------------------
    def _stamp(self, block: _Block) -> None:
        self._tick += 1
        block.stamp = self._tick

    def pin(self, ids: Sequence[int], num_blocks: int) -> None:
        if num_blocks:
            block = self.blocks[int(ids[num_blocks - 1])]
            block.pins += 1
            self._stamp(block)

    def unpin(self, ids: Sequence[int], num_blocks: int) -> None:
        if not num_blocks:
            return
        key = int(ids[num_blocks - 1])
        block = self.blocks[key]
        block.pins -= 1
        self._stamp(block)
        if block.pins == 0 and block.hbm_kids == 0 and block.tier == HBM:
            heapq.heappush(self._hbm_heap, (block.stamp, key))

    def insert(self, ids: Sequence[int], start: int, stop: int) -> int:
        blocks = self.blocks
        added = 0
        parent_key = int(ids[start - 1]) if start else None
        for key in ids[start:stop].tolist() if hasattr(ids, "tolist") else ids[start:stop]:
            block = blocks.get(key)
            if block is None:
                block = _Block(parent_key, self._tick)
                blocks[key] = block
                self.num_hbm_blocks += 1
                added += 1
                if parent_key is not None:
                    parent = blocks[parent_key]
                    parent.kids += 1
                    parent.hbm_kids += 1
            elif block.tier == DRAM:
                self._raise_tier(block)
                added += 1
            parent_key = key
        if parent_key is not None and stop > start:
            last = blocks[parent_key]
            self._stamp(last)
            self._push_hbm_candidate(parent_key, last)
        return added

    def promote(self, ids: Sequence[int], start: int, stop: int) -> int:
        promoted = 0
        for index in range(start, stop):
            block = self.blocks.get(int(ids[index]))
            if block is None:
                break
            if block.tier == DRAM:
                self._raise_tier(block)
                promoted += 1
        if promoted:
            last = int(ids[start + promoted - 1])
            self._stamp(self.blocks[last])
            self._push_hbm_candidate(last, self.blocks[last])
        return promoted

    def _raise_tier(self, block: _Block) -> None:
        block.tier = HBM
        self.num_dram_blocks -= 1
        self.num_hbm_blocks += 1
        if block.parent is not None:
            self.blocks[block.parent].hbm_kids += 1

    # -- eviction ------------------------------------------------------------------
    def _push_hbm_candidate(self, key: int, block: _Block) -> None:
        if block.tier == HBM and not block.pins and not block.hbm_kids:
            heapq.heappush(self._hbm_heap, (block.stamp, key))

    def evict(self, num_blocks: int) -> int:
        freed = 0
        heap, blocks = self._hbm_heap, self.blocks
        key = None
        while freed < num_blocks:
            if key is None:
                if not heap:
                    break
                stamp, key = heapq.heappop(heap)
                block = blocks.get(key)
                if (block is None or block.stamp != stamp or block.tier != HBM or block.pins
                        or block.hbm_kids):
                    key = None
                    continue
            block = blocks[key]
            parent_key = block.parent
            self._drop_from_hbm(key, block)
            freed += 1
            key = self._next_in_chain(parent_key, block.stamp)
        if key is not None:                      # a candidate taken from the chain, not used
            heapq.heappush(heap, (blocks[key].stamp, key))
        if self.num_dram_blocks > self.dram_capacity_blocks:
            self._evict_dram(self.num_dram_blocks - self.dram_capacity_blocks)
        return freed

    def _next_in_chain(self, parent_key: int | None, child_stamp: int) -> int | None:
        """Hand the evicted leaf's recency to its parent; continue with the parent at once
        when it is now the least recently used candidate (no heap round trip)."""
        if parent_key is None:
            return None
        parent = self.blocks[parent_key]
        if child_stamp > parent.stamp:
            parent.stamp = child_stamp
        if parent.tier != HBM or parent.pins or parent.hbm_kids:
            return None
        heap = self._hbm_heap
        if not heap or parent.stamp <= heap[0][0]:
            return parent_key
        heapq.heappush(heap, (parent.stamp, parent_key))
        return None

    def _drop_from_hbm(self, key: int, block: _Block) -> None:
        parent = self.blocks[block.parent] if block.parent is not None else None
        self.num_hbm_blocks -= 1
        if parent is not None:
            parent.hbm_kids -= 1
        if self.dram_capacity_blocks:
            block.tier = DRAM
            self.num_dram_blocks += 1
            if not block.kids:
                heapq.heappush(self._dram_heap, (block.stamp, key))
            return
        del self.blocks[key]
        if parent is not None:
            parent.kids -= 1

    def _evict_dram(self, num_blocks: int) -> None:
        heap, blocks = self._dram_heap, self.blocks
        dropped = 0
        while dropped < num_blocks and heap:
            stamp, key = heapq.heappop(heap)
            block = blocks.get(key)
            if block is None or block.tier != DRAM or block.kids or block.stamp != stamp:
                continue
            del blocks[key]
            self.num_dram_blocks -= 1
            dropped += 1
            if block.parent is None:
                continue
            parent = blocks[block.parent]
            parent.kids -= 1
            parent.stamp = max(parent.stamp, block.stamp)
            if parent.tier == DRAM and not parent.kids:
                heapq.heappush(heap, (parent.stamp, block.parent))


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


CACHES: dict[EvictionPolicy, type] = {
    EvictionPolicy.LEAF_FIRST: LeafFirstCache,
    EvictionPolicy.FLAT_LRU: FlatLruCache,
}
