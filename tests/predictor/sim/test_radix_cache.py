"""The run-length radix cache under random use: its invariants, and agreement with a
per-block reference of leaf-first residency (METHOD §5: a block is never dropped while
a resident block continues from it)."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from predictor.sim.radix_cache import LeafFirstCache

BRANCHES = 4           # prompts are paths in a 4-ary tree of depth <= 12: lots of sharing


def prompt(path: list[int]) -> np.ndarray:
    """Block ids of a tree path: each id names its whole prefix."""
    ids, key = [], 0
    for branch in path:
        key = key * BRANCHES + branch + 1
        ids.append(key)
    return np.array(ids, dtype=np.int64)


def check_invariants(cache: LeafFirstCache) -> None:
    hbm = dram = 0
    stack = [cache.root]
    while stack:
        node = stack.pop()
        if node is not cache.root:
            assert node.keys, "empty nodes are detached"
            assert all(cache.where[k] is node for k in node.keys)
            assert 0 <= node.hbm_len <= len(node.keys)
            hbm += node.hbm_len
            dram += len(node.keys) - node.hbm_len
        for first, child in node.children.items():
            assert child.parent is node and child.keys[0] == first
            assert child.depth == node.depth + len(node.keys)
            if child.hbm_len:      # HBM is prefix-closed: a child in HBM needs its parent in HBM
                assert node is cache.root or node.hbm_len == len(node.keys)
            stack.append(child)
        assert node.hbm_kids == sum(1 for c in node.children.values() if c.hbm_len)
    assert (hbm, dram) == (cache.num_hbm_blocks, cache.num_dram_blocks)
    assert len(cache.where) == hbm + dram
    assert cache.num_dram_blocks <= cache.dram_capacity_blocks


paths = st.lists(st.integers(0, BRANCHES - 1), min_size=1, max_size=12)
operations = st.lists(st.tuples(st.sampled_from(["use", "evict", "load"]), paths, st.integers(0, 20)),
                      min_size=1, max_size=60)


@settings(max_examples=150, deadline=None)
@given(operations, st.sampled_from([0, 5, 40]))
def test_random_use_keeps_the_tree_consistent(ops, dram_blocks):
    cache = LeafFirstCache(dram_capacity_blocks=dram_blocks)
    pinned: list[tuple[np.ndarray, int]] = []
    for op, path, amount in ops:
        ids = prompt(path)
        if op == "use":                     # admit: pin the hit, insert the rest, keep it pinned
            hit = cache.match(ids, len(ids))[0]
            cache.pin(ids, hit)
            cache.insert(ids, hit, len(ids))
            cache.pin(ids, len(ids))
            cache.unpin(ids, hit)
            pinned.append((ids, len(ids)))
            if len(pinned) > 3:             # a request finishes
                done, count = pinned.pop(0)
                cache.unpin(done, count)
        elif op == "evict":
            before = cache.num_hbm_blocks
            freed = cache.evict(amount)
            assert cache.num_hbm_blocks == before - freed
        else:
            hbm, resident = cache.match(ids, len(ids))
            cache.promote(ids, hbm, resident)
            assert cache.match(ids, len(ids)) == (resident, resident)
        check_invariants(cache)
        for ids, count in pinned:           # a pinned path never leaves HBM
            assert cache.match(ids, count)[0] == count


@settings(max_examples=100, deadline=None)
@given(st.lists(paths, min_size=1, max_size=30), st.integers(1, 30))
def test_hits_are_the_longest_resident_run(uses, evict_amount):
    cache = LeafFirstCache()
    for path in uses:
        ids = prompt(path)
        hit = cache.match(ids, len(ids))[0]
        cache.insert(ids, hit, len(ids))
    cache.evict(evict_amount)
    for path in uses:
        ids = prompt(path)
        resident = [int(k) in cache.where for k in ids]
        expected = resident.index(False) if False in resident else len(ids)
        assert cache.match(ids, len(ids)) == (expected, expected)
        assert all(not r for r in resident[expected:])   # nothing resident after a gap: leaf-first


def test_eviction_takes_the_least_recently_used_tail_first():
    cache = LeafFirstCache()
    old, new = prompt([0, 0, 0, 0]), prompt([0, 0, 1, 1])
    cache.insert(old, 0, 4)
    cache.insert(new, 2, 4)                 # shares the first two blocks
    assert cache.evict(1) == 1
    assert cache.match(old, 4) == (3, 3)    # the older tail shrinks first
    assert cache.evict(2) == 2
    assert cache.match(old, 4) == (2, 2) and cache.match(new, 4) == (3, 3)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.lists(st.integers(0, BRANCHES - 1), min_size=1, max_size=12), st.integers(0, 6)),
                min_size=1, max_size=40))
def test_continues_agrees_with_a_walk_of_the_whole_extended_prompt(steps):
    """`continues` (from the node holding the prefix's last block) answers as matching
    the prefix followed by the tail from the root, and partial matches of runs agree
    with a per-block comparison."""
    cache = LeafFirstCache()
    for path, evict in steps:
        ids = prompt(path)
        cache.insert(ids, cache.match(ids, len(ids))[1], len(ids))
        cache.evict(evict)
        for probe_path, _ in steps:
            probe = prompt(probe_path)
            hbm, _ = cache.match(probe, len(probe))
            expected = 0
            while expected < len(probe) and probe[expected] in cache.where:
                expected += 1
            assert hbm == expected
            for cut in range(1, hbm + 1):
                tail = [int(k) for k in probe[cut:]]
                assert cache.continues(probe, cut, tail) == (hbm == len(probe))


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(paths, st.integers(0, 6), st.integers(0, 13)), min_size=1, max_size=40),
       st.sampled_from([0, 8]))
def test_a_probed_walk_answers_as_a_walk_from_the_root(steps, dram_blocks):
    """`match` with a probe (a depth the caller expects resident: a shared pool's last
    lookup for the session) gives the root walk's answer whether the probed block is
    resident, evicted since, past the prompt or inside a run, and with a host tier (which
    ignores the probe); the walk may leave a hint behind, so both orders are compared."""
    cache = LeafFirstCache(dram_capacity_blocks=dram_blocks)
    for path, evict, probe in steps:
        ids = prompt(path)
        cache.insert(ids, cache.match(ids, len(ids))[1], len(ids))
        cache.evict(evict)
        for other, _, _ in steps:
            seen = prompt(other)
            for limit in {len(seen), max(1, len(seen) // 2)}:
                from_root = cache.match(seen, limit)
                assert cache.match(seen, limit, probe) == from_root
                assert cache.match(seen, limit, limit) == from_root
