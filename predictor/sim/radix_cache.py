"""Leaf-first LRU prefix cache as a radix tree of block runs (METHOD §5, §3.10).

A block id names a whole prefix (the trace readers check this), so resident blocks form
a tree. Nodes hold *runs* of blocks, as in SGLang's radix cache, so a prompt of a few
thousand blocks costs O(runs) Python work, not O(blocks): a lookup walks from the root
along the prompt, one child per run (the run's last block decides whether the whole run
matches, since it names its prefix), and inserting or evicting a run only slices lists
(no per-block index to keep). Invariants:

- leaf-first: a block leaves HBM only when no HBM block continues from it (HBM
  residency is prefix-closed along every path), and leaves the host tier only when no
  resident block continues from it; so a request's hit (its longest resident leading
  run, and the HBM part of it) is where the walk stops;
- a pinned path ends at a node end (`pin` splits the node there); a pin on the last
  node protects the whole path, since its ancestors are never leaves;
- a node's stamp is its last use; an evicted leaf hands its stamp to its parent, which
  is then the least recently used candidate when its other children are older;
- paths are compressed: an unpinned, wholly HBM-resident node with a single child absorbs
  it, so a session of many turns is one or two nodes, not one per turn.
Eviction truncates a leaf's tail by exactly the blocks needed (block-accurate).
A run of consecutive ids is stored as a ``range``, never listed (a shared pool's state
checkpoint; a prompt's blocks drawn as consecutive ids, as the agentic sessions draw
them): slicing, indexing, comparing and truncating it cost O(1), and path compression
joins two adjoining ranges into one.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from itertools import count

import numpy as np

_ids = count()
HINTS_LIMIT = 1 << 16   # remembered block -> node hints (a cleared hint only costs a walk)
RANGE_MIN = 64          # runs this long are checked in numpy, shorter ones once listed


class _Node:
    __slots__ = ("children", "depth", "hbm_kids", "hbm_len", "keys", "parent", "pins", "stamp", "uid")

    def __init__(self, keys: list[int] | range, depth: int, parent: _Node | None, hbm_len: int, stamp: int) -> None:
        self.keys = keys
        self.depth = depth                  # prompt position of keys[0]
        self.parent = parent
        self.children: dict[int, _Node] = {}
        self.hbm_len = hbm_len              # leading keys resident in HBM (the rest: host tier)
        self.hbm_kids = 0                   # children with HBM blocks
        self.stamp = stamp
        self.pins = 0
        self.uid = next(_ids)


def _run(ids: Sequence[int], start: int, stop: int) -> list[int] | range:
    """``ids[start:stop]`` as a node's run: a range when they are consecutive (checked
    exactly: in numpy for runs of at least `RANGE_MIN`, on the listed ids below), else a
    list of Python ints."""
    seg = ids[start:stop]
    if type(seg) is range or type(seg) is list:
        return seg
    if type(seg) is np.ndarray:
        n = len(seg)
        if not n:
            return []
        first = seg.item(0)
        if seg.item(n - 1) - first != n - 1:
            return seg.tolist()
        if n >= RANGE_MIN:
            return range(first, first + n) if (np.diff(seg) == 1).all() else seg.tolist()
        listed = seg.tolist()
        return range(first, first + n) if listed == list(range(first, first + n)) else listed
    return [int(k) for k in seg]


def _getter(ids: Sequence[int]) -> Callable[[int], int]:
    """Element access returning Python ints (``ndarray.item`` avoids numpy scalars and a
    conversion of the whole prompt, most of which a walk never reads)."""
    if type(ids) is list or type(ids) is range:
        return ids.__getitem__
    return ids.item if hasattr(ids, "item") else (lambda i: int(ids[i]))


def _common(keys: list[int] | range, a: int, seg: list[int] | range, b: int) -> int:
    """Length of the common run of keys[a:] and seg[b:] (a range compares equal to a list
    of the same ids only once listed)."""
    n = min(len(keys) - a, len(seg) - b)
    if type(keys) is not type(seg):
        keys, a, seg, b = list(keys[a:a + n]), 0, list(seg[b:b + n]), 0
    if keys[a:a + n] == seg[b:b + n]:
        return n
    lo, hi = 0, n - 1
    while lo < hi:
        mid = (lo + hi + 1) >> 1
        if keys[a:a + mid] == seg[b:b + mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _matched(keys: list[int] | range, key: Callable[[int], int], pos: int, take: int) -> int:
    """Leading keys of a run that match the prompt from ``pos``, knowing the first does and
    key ``take - 1`` does not. A block id names its whole prefix, so the matching keys are
    a leading run: a binary search reads O(log n) ids instead of converting the slice."""
    lo, hi = 1, take - 1            # keys[:lo] match; keys[hi:] do not
    while lo < hi:
        mid = (lo + hi + 1) >> 1
        if keys[mid - 1] == key(pos + mid - 1):
            lo = mid
        else:
            hi = mid - 1
    return lo


def _truncate(node: _Node, keep: int) -> None:
    """Keep the node's first ``keep`` keys (a stored range is re-sliced, not listed)."""
    if type(node.keys) is range:
        node.keys = node.keys[:keep]
    else:
        del node.keys[keep:]


def _extend(node: _Node, keys: list[int] | range) -> None:
    """Append a child's run to the node's (two adjoining ranges stay one range)."""
    if type(node.keys) is range:
        if type(keys) is range and keys.start == node.keys.stop:
            node.keys = range(node.keys.start, keys.stop)
            return
        node.keys = list(node.keys)
    node.keys.extend(keys)


class LeafFirstCache:
    """Leaf-first LRU over HBM, with an optional host tier of ``dram_capacity_blocks``."""

    def __init__(self, dram_capacity_blocks: int = 0) -> None:
        self.root = _Node([], 0, None, 0, 0)
        self.dram_capacity_blocks = max(0, dram_capacity_blocks)
        self.num_hbm_blocks = 0
        self.num_dram_blocks = 0
        self._tick = 0
        self._hbm_heap: list[tuple[int, int, _Node]] = []
        self._dram_heap: list[tuple[int, int, _Node]] = []
        self._hints: dict[int, _Node] = {}   # block -> a node that held it (checked on use)

    @property
    def where(self) -> dict[int, _Node]:
        """Every resident block -> its node, built on demand (tests and debugging)."""
        index: dict[int, _Node] = {}
        stack = list(self.root.children.values())
        while stack:
            node = stack.pop()
            index.update(dict.fromkeys(node.keys, node))
            stack.extend(node.children.values())
        return index

    # -- lookups -------------------------------------------------------------------------
    def _walk(self, ids: Sequence[int], limit: int, probe: int = 0) -> tuple[_Node, int, int]:
        """Follow ``ids[:limit]`` from the root: (the node holding the last resident
        block, leading blocks resident in any tier, leading blocks resident in HBM).
        ``probe``: a depth the caller expects resident (`_resumed`)."""
        key = _getter(ids)
        node, pos, hbm, in_hbm = self.root, 0, 0, True
        resumed = self._resumed(ids, key, min(probe, limit)) if probe else None
        if resumed is not None:
            node, pos = resumed
            keys, offset = node.keys, pos - node.depth
            if offset < len(keys):       # the rest of the probed node's run
                take = min(len(keys) - offset, limit - pos)
                if take <= 0:
                    return node, pos, pos
                run = keys[offset:offset + take]
                if run[-1] != key(pos + take - 1):
                    take = _matched(run, key, pos, take) if run[0] == key(pos) else 0
                    return node, pos + take, pos + take
                pos += take
                if offset + take < len(keys):
                    return node, pos, pos
            hbm = pos
        while pos < limit:
            child = node.children.get(key(pos))
            if child is None:
                break
            keys = child.keys
            take = min(len(keys), limit - pos)
            if keys[take - 1] != key(pos + take - 1):
                take = _matched(keys, key, pos, take)
            if in_hbm:
                in_hbm = take <= child.hbm_len
                hbm = pos + (take if in_hbm else child.hbm_len)
            node, pos = child, pos + take
            if take < len(keys):
                break
        return node, pos, hbm

    def _resumed(self, ids: Sequence[int], key: Callable[[int], int], probe: int) -> tuple[_Node, int] | None:
        """(the node holding block ``probe - 1``, ``probe``) when that block is resident, by
        its hint, in a cache without a host tier; else None (the walk starts at the root).
        Residency is prefix-closed along a path and a block id names its prefix, so every
        block before it is resident too and the walk may go on from there: the same answer
        as from the root, without visiting a session's chain of turns (a shared host pool's
        stored prompts each keep their node: their state checkpoints hang under them)."""
        if probe <= 0 or self.dram_capacity_blocks:
            return None
        block = key(probe - 1)
        node = self._hints.get(block)
        if node is None:
            return None
        offset = probe - 1 - node.depth
        if 0 <= offset < len(node.keys) and node.keys[offset] == block:
            return node, probe
        return None

    def match(self, ids: Sequence[int], num_blocks: int, probe: int = 0) -> tuple[int, int]:
        node, resident, hbm = self._walk(ids, num_blocks, probe)
        if resident:
            self._hint(node.keys[resident - 1 - node.depth], node)
        return hbm, resident

    def continues(self, ids: Sequence[int], num_blocks: int, tail: Sequence[int]) -> bool:
        """Whether ``tail`` follows ``ids[:num_blocks]`` (all resident in HBM) in HBM: the
        walk starts at the node holding block ``num_blocks - 1``, not at the root. ``tail``
        is a run stored as one (a shared pool's state checkpoint: consecutive ids hung
        under the prompt's last block, nothing ever stored under them), so within a node
        only the ends of the compared span are read: a span starting with the run's first
        id at that position is the stored run, cut where eviction cut it."""
        node = self._node_at(ids, num_blocks)
        offset, done = num_blocks - node.depth, 0
        while done < len(tail):
            if offset < len(node.keys):
                n = min(len(node.keys) - offset, len(tail) - done)
                keys = node.keys
                if offset + n > node.hbm_len or keys[offset] != tail[done] \
                        or keys[offset + n - 1] != tail[done + n - 1]:
                    return False
                done, offset = done + n, offset + n
                continue
            node = node.children.get(tail[done])
            if node is None:
                return False
            offset = 0
        return True

    def _hint(self, key: int, node: _Node) -> None:
        hints = self._hints
        if len(hints) >= HINTS_LIMIT:
            hints.clear()
        hints[key] = node

    def _node_at(self, ids: Sequence[int], num_blocks: int) -> _Node:
        """The node holding block ``num_blocks - 1`` (resident). A hint is trusted only
        if its node still holds the block at that position: a node's keys only ever
        shrink, a detached node has none, and a block id lives in one node at a time."""
        key = _getter(ids)(num_blocks - 1)
        node = self._hints.get(key)
        if node is not None:
            offset = num_blocks - 1 - node.depth
            if 0 <= offset < len(node.keys) and node.keys[offset] == key:
                return node
        node, resident, _ = self._walk(ids, num_blocks)
        if resident < num_blocks:
            raise KeyError(key)
        self._hint(key, node)
        return node

    def _node_ending_at(self, ids: Sequence[int], num_blocks: int) -> _Node:
        """The node whose run ends with block ``num_blocks - 1`` (split there if needed)."""
        node = self._node_at(ids, num_blocks)
        end = num_blocks - node.depth
        if end < len(node.keys):
            self._split(node, end)
        return node

    # -- use -------------------------------------------------------------------------------
    def _stamp(self, node: _Node) -> None:
        self._tick += 1
        node.stamp = self._tick

    def pin(self, ids: Sequence[int], num_blocks: int) -> None:
        if num_blocks:
            node = self._node_ending_at(ids, num_blocks)
            node.pins += 1
            self._stamp(node)

    def unpin(self, ids: Sequence[int], num_blocks: int) -> None:
        if num_blocks:
            node = self._node_at(ids, num_blocks)
            node.pins -= 1
            self._stamp(node)
            if not node.pins:
                self._absorb_child(node)
            self._push_hbm(node)

    def _absorb_child(self, node: _Node) -> None:
        """Path compression: an unpinned, wholly HBM-resident node with one child takes the
        child's run (and its children, pins and stamp). A session's turns would otherwise
        leave a chain of one node per turn that every lookup walks; eviction order is
        unchanged (the child's tail went first, then the node's, at the later stamp)."""
        if len(node.children) != 1 or node.parent is None or node.hbm_len != len(node.keys):
            return
        (child,) = node.children.values()
        _extend(node, child.keys)
        node.hbm_len += child.hbm_len
        node.children, node.hbm_kids, node.pins = child.children, child.hbm_kids, child.pins
        for grandchild in node.children.values():
            grandchild.parent = node
        node.stamp = max(node.stamp, child.stamp)
        child.keys, child.children, child.parent, child.hbm_len, child.pins = [], {}, None, 0, 0
        self._hint(node.keys[-1], node)
        self._push_dram(node)

    def insert(self, ids: Sequence[int], start: int, stop: int) -> int:
        if stop <= start:
            return 0
        return self.insert_after(ids, start, _run(ids, start, stop))

    def insert_after(self, ids: Sequence[int], start: int, seg: list[int] | range) -> int:
        """Make ``ids[:start] + seg`` resident in HBM (``ids[:start]`` already is; ``seg``
        need not be part of ``ids``: a shared pool's state checkpoint after its prompt, a
        ``range`` stored as one, never listed); return how many blocks became HBM-resident."""
        if not seg:
            return 0
        node = self._node_ending_at(ids, start) if start else self.root
        pos, raised = 0, 0                   # pos indexes seg; the prompt position is start + pos
        stop = len(seg)
        while pos < stop:
            child = node.children.get(seg[pos])
            if child is None:
                run = seg[pos:stop]
                child = _Node(run, start + pos, node, len(run), self._tick)
                node.children[run[0]] = child
                node.hbm_kids += 1
                self._hint(run[-1], child)
                self.num_hbm_blocks += len(run)
                raised += len(run)
                node, pos = child, stop
                break
            common = _common(child.keys, 0, seg, pos)
            if common < len(child.keys):
                self._split(child, common)
            raised += self._raise(child, common)
            node, pos = child, pos + common
        self._stamp(node)
        self._push_hbm(node)
        return raised

    def promote(self, ids: Sequence[int], start: int, stop: int) -> int:
        node, path = self._walk(ids, stop)[0], []
        while node is not self.root:         # the nodes holding ids[:stop] (resident ones)
            path.append(node)
            node = node.parent
        path.reverse()
        promoted, pos = 0, start
        for node in path:
            if pos >= stop:
                break
            if node.depth + len(node.keys) <= pos:
                continue
            upto = min(len(node.keys), stop - node.depth)
            promoted += self._raise(node, upto)
            pos = node.depth + upto
        if promoted:
            at = start + promoted - 1
            last = next(n for n in path if n.depth <= at < n.depth + len(n.keys))
            self._stamp(last)
            self._push_hbm(last)
        return promoted

    def _raise(self, node: _Node, upto: int) -> int:
        """Host tier -> HBM for the node's first ``upto`` keys; returns how many moved."""
        moved = upto - node.hbm_len
        if moved <= 0:
            return 0
        if node.hbm_len == 0 and node.parent is not None:
            node.parent.hbm_kids += 1
        node.hbm_len = upto
        self.num_hbm_blocks += moved
        self.num_dram_blocks -= moved
        return moved

    def _split(self, node: _Node, at: int) -> None:
        """Keep keys[:at] in ``node``; move keys[at:] into a new child that takes over
        the node's children and pins (a pinned path ends at the tail's end)."""
        tail = _Node(node.keys[at:], node.depth + at, node, max(0, node.hbm_len - at), node.stamp)
        tail.children, tail.hbm_kids, tail.pins = node.children, node.hbm_kids, node.pins
        for child in tail.children.values():
            child.parent = tail
        _truncate(node, at)
        node.hbm_len = min(node.hbm_len, at)
        node.children, node.pins = {tail.keys[0]: tail}, 0
        node.hbm_kids = 1 if tail.hbm_len else 0
        self._push_hbm(tail)
        self._push_dram(tail)

    def dispose(self) -> None:
        """Unlink every node (the tree's parent/child cycles) so that reference counting
        frees a finished replay's cache: the collector would otherwise walk every node and
        every block id of it (`predictor.sim.api`: ~6% of a 20k-request replay)."""
        stack = [self.root]
        while stack:
            node = stack.pop()
            stack.extend(node.children.values())
            node.children, node.parent = {}, None
        self._hbm_heap, self._dram_heap, self._hints = [], [], {}

    # -- eviction ----------------------------------------------------------------------------
    def _push_hbm(self, node: _Node) -> None:
        if node.hbm_len and not node.pins and not node.hbm_kids and node.parent is not None:
            heapq.heappush(self._hbm_heap, (node.stamp, node.uid, node))

    def _push_dram(self, node: _Node) -> None:
        if not node.children and len(node.keys) > node.hbm_len and node.parent is not None:
            heapq.heappush(self._dram_heap, (node.stamp, node.uid, node))

    def evict(self, num_blocks: int) -> int:
        freed, heap = 0, self._hbm_heap
        while freed < num_blocks and heap:
            stamp, _, node = heapq.heappop(heap)
            if node.stamp != stamp or not node.hbm_len or node.pins or node.hbm_kids or node.parent is None:
                continue
            take = min(num_blocks - freed, node.hbm_len)
            freed += take
            self._drop_hbm_tail(node, take)
            if node.hbm_len:
                heapq.heappush(heap, (node.stamp, node.uid, node))
        if self.num_dram_blocks > self.dram_capacity_blocks:
            self._evict_dram(self.num_dram_blocks - self.dram_capacity_blocks)
        return freed

    def _drop_hbm_tail(self, node: _Node, take: int) -> None:
        self.num_hbm_blocks -= take
        if self.dram_capacity_blocks:
            node.hbm_len -= take
            self.num_dram_blocks += take
            self._push_dram(node)
        else:
            first = node.keys[0]
            _truncate(node, len(node.keys) - take)
            node.hbm_len -= take
            if not node.keys:
                del node.parent.children[first]
        if not node.hbm_len:
            self._orphan(node)

    def _orphan(self, node: _Node) -> None:
        """``node`` has no HBM block left: hand its stamp up (and detach it if empty)."""
        parent = node.parent
        parent.hbm_kids -= 1
        parent.stamp = max(parent.stamp, node.stamp)
        if not node.keys:
            node.parent = None
        self._push_hbm(parent)
        self._push_dram(parent)

    def _evict_dram(self, num_blocks: int) -> None:
        dropped, heap = 0, self._dram_heap
        while dropped < num_blocks and heap:
            stamp, _, node = heapq.heappop(heap)
            dram = len(node.keys) - node.hbm_len
            if node.stamp != stamp or node.children or not dram or node.parent is None:
                continue
            take = min(num_blocks - dropped, dram)
            first = node.keys[0]
            _truncate(node, len(node.keys) - take)
            self.num_dram_blocks -= take
            dropped += take
            if node.keys:
                heapq.heappush(heap, (node.stamp, node.uid, node))
                continue
            parent = node.parent
            del parent.children[first]
            node.parent = None
            parent.stamp = max(parent.stamp, node.stamp)
            self._push_dram(parent)
            self._push_hbm(parent)
