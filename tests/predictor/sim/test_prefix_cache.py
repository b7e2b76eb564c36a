"""The prefix cache: leaf-first LRU, pins, the host tier, and flat LRU for contrast."""

import numpy as np

from predictor.sim.kv_pool import KvPool, PoolShape
from predictor.sim.prefix_cache import FlatLruCache, LeafFirstCache
from predictor.sim.request import Request, RequestSpec


def ids(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def test_hit_is_the_longest_resident_leading_run():
    cache = LeafFirstCache()
    cache.insert(ids(1, 2, 3, 4), 0, 4)
    assert cache.match(ids(1, 2, 3, 4, 5), 5) == (4, 4)
    assert cache.match(ids(1, 2, 9, 10), 4) == (2, 2)
    assert cache.match(ids(7, 8), 2) == (0, 0)
    assert cache.num_hbm_blocks == 4


def test_leaf_first_eviction_keeps_the_shared_head():
    cache = LeafFirstCache()
    cache.insert(ids(1, 2, 3, 4), 0, 4)      # head 1,2 + tail 3,4
    cache.insert(ids(1, 2, 5, 6), 2, 4)      # same head, divergent tail 5,6
    cache.pin(ids(1, 2, 5, 6), 4)
    cache.unpin(ids(1, 2, 5, 6), 4)          # tail 5,6 used last
    assert cache.evict(3) == 3               # 4,3 (oldest tail), then 6 (leaf); never 1,2 first
    assert cache.match(ids(1, 2, 3, 4), 4) == (2, 2)
    assert cache.match(ids(1, 2, 5, 6), 4) == (3, 3)
    assert cache.evict(10) == 3              # everything left, leaves before their parents
    assert cache.num_hbm_blocks == 0


def test_a_pinned_path_is_never_evicted():
    cache = LeafFirstCache()
    cache.insert(ids(1, 2, 3), 0, 3)
    cache.pin(ids(1, 2, 3), 3)
    assert cache.evict(3) == 0
    cache.unpin(ids(1, 2, 3), 3)
    assert cache.evict(3) == 3


def test_host_tier_demotes_then_promotes():
    cache = LeafFirstCache(dram_capacity_blocks=2)
    cache.insert(ids(1, 2, 3, 4), 0, 4)
    assert cache.evict(3) == 3               # 4, 3, 2 -> DRAM (capacity 2: the deepest, 4, is dropped)
    assert (cache.num_hbm_blocks, cache.num_dram_blocks) == (1, 2)
    assert cache.match(ids(1, 2, 3, 4), 4) == (1, 3)
    assert cache.promote(ids(1, 2, 3, 4), 1, 3) == 2
    assert cache.match(ids(1, 2, 3, 4), 4) == (3, 3)


def test_flat_lru_drops_heads_and_loses_the_whole_prefix():
    flat = FlatLruCache()
    flat.insert(ids(1, 2, 3, 4), 0, 4)
    assert flat.evict(1) == 1                # block 1 (the head) is the least recently inserted
    assert flat.match(ids(1, 2, 3, 4), 4) == (0, 0)


def _request(prompt: int, output: int, blocks: np.ndarray) -> Request:
    return Request(0, RequestSpec(prompt, output, blocks), 0, 0, 0.0)


def test_pool_reserves_prompt_and_output_pages_and_reuses_the_cached_prefix():
    pool = KvPool(PoolShape(capacity_tokens=1000, page_tokens=16, block_tokens=64, state_tokens=0),
                  LeafFirstCache())
    first = _request(256, 100, ids(1, 2, 3, 4))
    assert pool.try_admit(first)
    assert first.private_tokens == 368      # 356 tokens rounded up to 16-token pages
    pool.commit_prompt(first)               # 4 blocks move into the cache
    pool.release(first)
    assert pool.used_tokens == 256
    second = _request(320, 100, ids(1, 2, 3, 4, 5))
    assert pool.try_admit(second)
    assert second.cached_tokens == 256 and second.hit_blocks == 4
    big = _request(900, 100, ids(9))
    assert not pool.try_admit(big)          # the running request's pages cannot be evicted
