"""Speed work that must not change a replay (issue 17): each fast path against the
reference it replaces, on the same inputs (deterministic, offline).

- the step model's memoised forward body (`SimulateStepModel.body_raw`) answers as a
  fresh model does, in any order of questions;
- a shared pool's checkpoint check reads the ends of each span (`LeafFirstCache.continues`)
  and agrees with a full comparison under random stores and evictions;
- a disposed cache is freed by reference counting alone (no collection needed).
"""

import gc
import random

import numpy as np
import pytest

from levers.configuration import Configuration
from predictor.cards.registry import load_card
from predictor.feasibility import pool_configs
from predictor.hardware import parse_cluster
from predictor.sim.host_pool import CHECKPOINT_TAG, PoolSize, SharedHostPool, _checkpoint_ids
from predictor.sim.radix_cache import LeafFirstCache, _Node
from predictor.sim.request import Request, RequestSpec
from predictor.step.simulate import SimulateStepModel

LAYOUTS = (   # (cluster, engine, levers): speculative, DWDP prefill, DEP decode
    ("mi355x", "vllm", {"tp": 8, "spec_method": "eagle3", "spec_depth": 3}),
    ("gb300x4x8", "trtllm", {"prefill_layout": "DWDP16", "spec_method": "eagle3", "spec_depth": 3,
                             "disaggregated": True, "decode_layout": "TP16/EP16/DP16"}),
    ("gb300x4x8", "trtllm", {"tp": 8, "dcp": 8, "spec_method": "eagle3", "spec_depth": 4}),
)


def step_model(cluster: str, engine: str, levers: dict) -> SimulateStepModel:
    config = Configuration(**levers)
    pools = pool_configs(config)
    return SimulateStepModel(load_card("Kimi-K3"), parse_cluster(cluster), engine,
                             config if pools is None else pools[0])   # a split: its prefill pool


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda layout: layout[1] + "-" + str(sorted(layout[2])))
def test_memoised_body_prices_as_a_fresh_model(layout):
    rng = random.Random(17)
    shapes = [(rng.choice((1, 7, 64, 512, 3000, 9000)), rng.randint(1, 64), rng.uniform(0, 200_000),
               rng.uniform(0, 200_000)) for _ in range(40)]
    warm = step_model(*layout)
    for _ in range(2):        # twice, shuffled: the second pass answers from the memos
        rng.shuffle(shapes)
        for tokens, batch, context, prior in shapes:
            fresh = step_model(*layout)
            assert warm.prefill_us(tokens, 1, prior) == fresh.prefill_us(tokens, 1, prior)
            assert warm.mixed_us(tokens, batch, context, prior) == fresh.mixed_us(tokens, batch, context, prior)
            assert warm.decode_us(batch, context) == fresh.decode_us(batch, context)


def reference_continues(cache: LeafFirstCache, ids, num_blocks: int, tail: list[int]) -> bool:
    """The full comparison the fast check replaces: every id of ``tail`` follows in HBM."""
    node = cache._node_at(ids, num_blocks)
    offset, done = num_blocks - node.depth, 0
    while done < len(tail):
        if offset < len(node.keys):
            n = min(len(node.keys) - offset, len(tail) - done)
            if offset + n > node.hbm_len or node.keys[offset:offset + n] != tail[done:done + n]:
                return False
            done, offset = done + n, offset + n
            continue
        node = node.children.get(tail[done])
        if node is None:
            return False
        offset = 0
    return True


@pytest.mark.parametrize("seed", range(6))
def test_checkpoint_check_agrees_with_a_full_comparison(seed):
    """Sessions of growing prompts on consecutive block ids (as the agentic builder draws
    them: a checkpoint's ids then overlap later prompts' ids shifted by the tag), a pool
    small enough to cut checkpoints part-way."""
    rng = np.random.default_rng(seed)
    checkpoint_blocks = int(rng.integers(2, 9))
    block_bytes = 1000.0      # 4 tokens of 250 bytes
    shared = SharedHostPool(PoolSize(int(rng.integers(60, 400)) * block_bytes, block_bytes / 4,
                                     checkpoint_blocks * block_bytes - 1, 4))
    assert shared.checkpoint_blocks == checkpoint_blocks
    streams = [np.arange(20 * s << 20, (20 * s << 20) + 200, dtype=np.int64) for s in range(5)]
    lengths = [0] * len(streams)
    asked = []
    for _ in range(300):
        s = int(rng.integers(len(streams)))
        lengths[s] = min(len(streams[s]), lengths[s] + int(rng.integers(1, 12)))
        request = Request(0, RequestSpec(lengths[s] * 4, 10, streams[s][:lengths[s]]), 0, 0, 0.0)
        asked.append(request)
        if rng.random() < 0.7:
            shared.store(request)
        for old in asked[-30:]:
            resident = shared.cache.match(old.block_ids, old.num_blocks)[0]
            if not resident:
                continue
            tail = _checkpoint_ids(old.block_ids, resident, checkpoint_blocks)
            assert tail[0] & CHECKPOINT_TAG
            assert shared.cache.continues(old.block_ids, resident, tail) == \
                reference_continues(shared.cache, old.block_ids, resident, list(tail))


def live_nodes() -> int:
    return sum(1 for o in gc.get_objects() if type(o) is _Node)


def test_a_disposed_cache_is_freed_without_a_collection():
    gc.collect()
    gc.disable()
    try:
        before = live_nodes()
        cache = LeafFirstCache(8)
        for s in range(20):
            ids = np.arange(s << 20, (s << 20) + 50, dtype=np.int64)
            cache.insert(ids, 0, 30)
            cache.insert(ids, 30, 50)
        assert live_nodes() > before
        cache.dispose()
        del cache
        assert live_nodes() == before
    finally:
        gc.enable()
