"""Speed work that must not change a replay (issue 17): each fast path against the
reference it replaces, on the same inputs (deterministic, offline).

- the step model's memoised forward body (`SimulateStepModel.body_raw`) answers as a
  fresh model does, in any order of questions, and its priced body (built without the raw
  step's rooflines) is the raw step priced, to the bit, under any calibration;
- the least-loaded and least-prefill-work routers pick what a min over indices picks;
- a shared pool's checkpoint check reads the ends of each span (`LeafFirstCache.continues`)
  and agrees with a full comparison under random stores and evictions;
- a shared pool storing each checkpoint as a range (never listed) answers and evicts as
  the same pool storing it as a list, block for block; an engine's cache storing runs of
  consecutive ids as ranges keeps the same tree as one listing every run, under pins,
  evictions to a host tier and promotions;
- a disposed cache is freed by reference counting alone (no collection needed);
- a stop check's ITL quantile told by a weighted count agrees with the sorted quantile;
- a mixed step priced at a reference context plus the decode step's difference
  (`StepPricer._mixed_us`) matches the step model at the step's own context, and a model
  for which it would not is priced at the step's context.
"""

import gc
import random

import numpy as np
import pytest

from levers.configuration import Configuration
from predictor.cards.registry import load_card
from predictor.feasibility import pool_configs
from predictor.hardware import parse_cluster
from predictor.sim.host_pool import (
    CHECKPOINT_TAG,
    PoolSize,
    SharedHostPool,
    _checkpoint_ids,
)
from predictor.sim.pricing import StepPricer
from predictor.sim.radix_cache import LeafFirstCache, _Node
from predictor.sim.request import Request, RequestSpec
from predictor.sim.results import Recorder, itl_quantile_exceeds, latency_distributions
from predictor.sim.reuse import Bounds
from predictor.sim.router import Router
from predictor.step.calibration import Calibration
from predictor.step.roofline import price
from predictor.step.simulate import SimulateStepModel

LAYOUTS = (   # (cluster, engine, levers): speculative, DWDP prefill, DEP decode
    ("mi355x", "vllm", {"tp": 8, "spec_method": "eagle3", "spec_depth": 3}),
    ("gb300x4x8", "trtllm", {"prefill_layout": "DWDP16", "spec_method": "eagle3", "spec_depth": 3,
                             "disaggregated": True, "decode_layout": "TP16/EP16/DP16"}),
    ("gb300x4x8", "vllm", {"tp": 8, "dcp": 8, "spec_method": "eagle3", "spec_depth": 4}),   # colocated DCP: vLLM
)


def step_model(cluster: str, engine: str, levers: dict, *, model: str = "Kimi-K3", pool: int = 0,
               calibration: Calibration | None = None) -> SimulateStepModel:
    """The layout's step model (a split: its ``pool``, 0 the prefill pool, -1 the decode)."""
    config = Configuration(**levers)
    pools = pool_configs(config)
    return SimulateStepModel(load_card(model), parse_cluster(cluster), engine,
                             config if pools is None else pools[pool],
                             **({} if calibration is None else {"calibration": calibration}))


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


CALIBRATED = Calibration(bandwidth=1.31, compute=0.87, moe=1.73, comm=1.21, launch_us=3.1, fixed_us=5.0)


@pytest.mark.parametrize("layout", LAYOUTS + (("h100x8", "vllm", {"tp": 4, "graph_capture": "piecewise"}),
                                              ("mi355x", "sglang", {"tp": 8, "ep": 8, "graph_capture": "none"})),
                         ids=lambda layout: layout[1] + "-" + str(sorted(layout[2])))
@pytest.mark.parametrize("calibration", (None, CALIBRATED), ids=("physics", "calibrated"))
def test_a_priced_body_is_its_raw_step_priced_to_the_bit(layout, calibration):
    """A mixed step's body is asked at a new row count almost every step of a replay;
    `_body_priced_now` prices it without building the raw step's rooflines, in the same
    arithmetic and order as `roofline.price` of `body_raw` (MoE and dense GEMMs, the
    expert term, fusions, eager issue, captured and not)."""
    model = step_model(*layout, calibration=calibration)
    for rank_rows in (1, 3, 64, 65, 257, 511, 4097, 12345):
        for stage_rows in (rank_rows, 8 * rank_rows):
            assert model._body_priced_now(rank_rows, stage_rows) == price(
                model.body_raw(rank_rows, stage_rows), model.calibration, model._launch_us)


MTP = ("gb300x4x8", "sglang", {"tp": 8, "spec_method": "mtp", "spec_depth": 2})   # drafts on target layers


@pytest.mark.parametrize("layout", LAYOUTS + (MTP,),
                         ids=lambda layout: layout[1] + "-" + str(sorted(layout[2])))
@pytest.mark.parametrize("calibration", (None, CALIBRATED), ids=("physics", "calibrated"))
def test_a_drafters_prefill_is_its_raw_steps_priced_to_the_bit(layout, calibration):
    """An EAGLE drafter's prompt pass is priced without building its raw step, as
    `roofline.price` sums it; a drafter that runs target layers keeps the raw path."""
    model = step_model(*layout, calibration=calibration)
    shapes = ((1, 1, 0.0), (300, 1, 0.0), (4097, 3, 1500.0), (8192, 2, 65536.0), (511, 7, 99.5))
    for rank_tokens, seqs, context in shapes:
        expected = sum(sum(model._priced(raw).values())
                       for raw in model._draft_prefill_raw(rank_tokens, rank_tokens * 2, seqs, context))
        assert model._draft_prefill_us(rank_tokens, rank_tokens * 2, seqs, context) == expected
        assert expected > 0


@pytest.mark.parametrize("model_name", ("Kimi-K3", "DeepSeek-R1", "gpt-oss-120b"))
@pytest.mark.parametrize("layout", LAYOUTS + (MTP,), ids=lambda layout: layout[1] + "-" + str(sorted(layout[2])))
@pytest.mark.parametrize("calibration", (None, CALIBRATED), ids=("physics", "calibrated"))
def test_a_drafters_decode_pass_is_its_raw_steps_priced_to_the_bit(model_name, layout, calibration):
    """An EAGLE drafter's decode pass is priced from its GEMM and attention sums, its
    collectives and kernels, as `roofline.price` prices `_draft_raw`; a drafter that runs
    target layers keeps the raw path."""
    model = step_model(*layout, model=model_name, pool=-1, calibration=calibration)
    for requests, micro, context in ((1, 1, 0.0), (3, 24, 1500.0), (64, 512, 65536.0), (511, 4088, 99.5)):
        expected = sum(sum(model._priced(raw).values()) for raw in model._draft_raw(requests, micro, context))
        assert model._draft_us(requests, micro, context) == expected
        assert expected > 0


class _Unit:
    def __init__(self, requests: int, tokens: int, prefill: int) -> None:
        self.num_requests, self.outstanding_tokens, self.outstanding_prefill_tokens = requests, tokens, prefill


def test_least_loaded_routers_pick_what_a_min_over_indices_picks():
    rng = random.Random(3)
    for _ in range(300):
        units = [_Unit(rng.randint(0, 3), rng.randint(0, 3), rng.randint(0, 3)) for _ in range(rng.randint(2, 9))]
        loaded = min(range(len(units)), key=lambda i: (units[i].num_requests, units[i].outstanding_tokens, i))
        work = min(range(len(units)), key=lambda i: (units[i].outstanding_prefill_tokens, units[i].num_requests, i))
        assert Router("least_loaded", np.random.default_rng(0)).choose(None, units) == loaded
        assert Router("least_loaded", np.random.default_rng(0), by_prefill_work=True).choose(None, units) == work


def reference_continues(cache: LeafFirstCache, ids, num_blocks: int, tail: list[int]) -> bool:
    """The full comparison the fast check replaces: every id of ``tail`` follows in HBM."""
    node = cache._node_at(ids, num_blocks)
    offset, done = num_blocks - node.depth, 0
    while done < len(tail):
        if offset < len(node.keys):
            n = min(len(node.keys) - offset, len(tail) - done)
            if offset + n > node.hbm_len or list(node.keys[offset:offset + n]) != tail[done:done + n]:
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


class ListingCache(LeafFirstCache):
    """The reference: every inserted run listed, as before runs were stored as ranges."""

    def insert_after(self, ids, start, seg):
        return super().insert_after(ids, start, [int(k) for k in seg])


def tree(cache: LeafFirstCache) -> list[tuple]:
    """Every node in a fixed order: its run as a list, depth, HBM length, pins and stamp."""
    out, stack = [], [cache.root]
    while stack:
        node = stack.pop()
        out.append((list(node.keys), node.depth, node.hbm_len, node.hbm_kids, node.pins, node.stamp))
        stack.extend(node.children.values())
    return out


@pytest.mark.parametrize("seed", range(8))
def test_runs_stored_as_ranges_keep_the_tree_a_listing_cache_keeps(seed):
    """Prompts on consecutive ids (sessions of growing turns, subagents whose prompt joins
    a shared stream and their own: two runs), used as an engine uses its cache (pin the
    hit, insert the rest, unpin when done), with evictions to a host tier and promotions."""
    rng = np.random.default_rng(200 + seed)
    dram = int(rng.choice([0, 30, 300]))
    caches = LeafFirstCache(dram), ListingCache(dram)
    streams = [np.arange(s << 20, (s << 20) + 400, dtype=np.int64) for s in range(8)]
    prompts = []
    for _ in range(120):
        s, draw = int(rng.integers(6)), rng.random()
        if draw < 0.3:            # a subagent: shared stream 6's start, then its own part of stream 7
            shared = int(rng.choice([20, 50, 80]))
            ids = np.concatenate([streams[6][:shared], streams[7][s * 50:s * 50 + int(rng.integers(1, 50))]])
        elif draw < 0.45:         # the shared part alone (a parent's turn)
            ids = streams[6][:int(rng.choice([20, 50, 80]))]
        else:
            ids = streams[s][:int(rng.integers(1, 400))]
        prompts.append(ids)
    pinned: list[tuple[np.ndarray, int]] = []
    ranges = 0
    for ids in prompts:
        op, amount = rng.choice(["use", "use", "evict", "load"]), int(rng.integers(1, 200))
        for cache in caches:
            if op == "use":
                hit = cache.match(ids, len(ids))[0]
                cache.pin(ids, hit)
                cache.insert(ids, hit, len(ids))
                cache.pin(ids, len(ids))
                cache.unpin(ids, hit)
            elif op == "evict":
                cache.evict(amount)
            else:
                hbm, resident = cache.match(ids, len(ids))
                cache.promote(ids, hbm, resident)
        if op == "use":
            pinned.append((ids, len(ids)))
            if len(pinned) > 3:
                done, count = pinned.pop(0)
                for cache in caches:
                    cache.unpin(done, count)
        assert tree(caches[0]) == tree(caches[1])
        assert caches[0].match(ids, len(ids)) == caches[1].match(ids, len(ids))
        ranges += any(type(node.keys) is range for node in set(caches[0].where.values()))
    assert ranges, "consecutive runs must be stored as ranges"


@pytest.mark.parametrize("seed", range(6))
def test_a_checkpoint_stored_as_a_range_behaves_as_a_listed_one(seed):
    """The same stores and lookups on two pools, one listing its checkpoints: the same
    hits, the same resident blocks in the same nodes' order, after evictions that cut
    checkpoints part-way (a range node re-sliced) and re-stores of evicted prompts."""
    rng = np.random.default_rng(100 + seed)
    checkpoint_blocks = int(rng.integers(3, 12))
    block_bytes = 1000.0
    size = PoolSize(int(rng.integers(60, 300)) * block_bytes, block_bytes / 4,
                    checkpoint_blocks * block_bytes - 1, 4)
    pools = SharedHostPool(size), SharedHostPool(size)
    pools[1].cache = ListingCache(0)
    streams = [np.arange(20 * s << 20, (20 * s << 20) + 200, dtype=np.int64) for s in range(6)]
    lengths = [0] * len(streams)
    ranges_seen = cut = 0
    for _ in range(400):
        s = int(rng.integers(len(streams)))
        lengths[s] = min(len(streams[s]), max(1, lengths[s] + int(rng.integers(-3, 12))))
        request = Request(0, RequestSpec(lengths[s] * 4, 10, streams[s][:lengths[s]]), s, 0, 0.0)
        assert pools[0].usable_blocks(request) == pools[1].usable_blocks(request)
        if rng.random() < 0.7:
            for pool in pools:
                pool.store(request)
        fast, listed = (pool.cache for pool in pools)
        assert fast.num_hbm_blocks == listed.num_hbm_blocks
        assert list(fast.where) == list(listed.where)
        nodes = [node for node in set(fast.where.values()) if type(node.keys) is range]
        ranges_seen += bool(nodes)
        cut += any(len(node.keys) < checkpoint_blocks for node in nodes)
    assert ranges_seen and cut, "the random walk must store checkpoints and cut one part-way"


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


@pytest.mark.parametrize("seed", range(5))
def test_the_stop_checks_count_agrees_with_the_sorted_quantile(seed):
    rng = np.random.default_rng(seed)
    recorder = Recorder()
    for value, weight in zip(rng.lognormal(3.0, 1.0, 3000) * 1000.0, rng.integers(1, 40, 3000)):
        recorder.itl(float(value), float(weight))
    recorder.itl(25_000.0, 5.0)           # a sample exactly at a threshold
    reported = latency_distributions([], recorder, ("itl_ms",))["itl_ms"]
    for stat in ("p50", "p90", "p99"):
        for threshold in (*np.quantile(list(reported.values()), [0.1, 0.5, 0.9]), reported[stat], 25.0,
                          np.nextafter(reported[stat], 0.0)):
            verdict = itl_quantile_exceeds(recorder, stat, float(threshold))
            if verdict is not None:
                assert verdict == (reported[stat] > threshold)
    assert itl_quantile_exceeds(recorder, "mean", 1.0) is None      # not a quantile: computed in full


@pytest.mark.parametrize("seed", range(3))
def test_the_stop_checks_count_carries_on_between_checks_and_still_agrees(seed):
    """A replay's checks come every 16th of it; each counts only the samples since the last."""
    rng = np.random.default_rng(seed)
    recorder, fresh = Recorder(), Recorder()
    for chunk in range(6):
        for value, weight in zip(rng.lognormal(3.0, 1.0, 500) * 1000.0, rng.integers(1, 40, 500)):
            recorder.itl(float(value), float(weight))
            fresh.itl(float(value), float(weight))
        reported = latency_distributions([], recorder, ("itl_ms",))["itl_ms"]
        for stat, threshold in (("p90", 25.0), ("p90", reported["p90"] * 0.999), ("p50", reported["p50"] * 1.001)):
            verdict = itl_quantile_exceeds(recorder, stat, threshold)
            assert verdict is None or verdict == (reported[stat] > threshold)
            fresh.itl_counts.clear()   # counted from scratch: the same verdict
            assert itl_quantile_exceeds(fresh, stat, threshold) == verdict
        assert recorder.itl_counts[25.0][0] == len(recorder.itl_values)


@pytest.mark.parametrize("layout", LAYOUTS[:1] + LAYOUTS[2:], ids=("tp8-eagle3", "dcp8-eagle3"))
def test_a_mixed_step_priced_at_a_reference_context_matches_the_step_model(layout):
    """`StepPricer._mixed_us` against the step model's own mixed price at the step's
    context, on the real step model of two layouts with drafters."""
    rng = random.Random(3)
    model = step_model(*layout)
    pricer = StepPricer(step_model(*layout))
    for _ in range(300):
        batch, tokens = rng.randint(1, 64), rng.randint(1, 8192)
        context, prior = rng.uniform(1_000, 400_000), rng.uniform(0, 200_000)
        fast = pricer._price(batch, context, tokens, 1, prior, True)
        assert fast == pytest.approx(model.mixed_us(tokens, batch, context, prior), rel=1e-9)
    assert pricer._separable


def test_a_step_model_that_is_not_separable_turns_the_decomposition_off():
    class Coupled:                       # the decode context changes the prefill part's price
        tokens_per_step = 1.0

        def decode_us(self, batch, context_tokens):
            return 1000.0 + batch * context_tokens * 1e-3

        def mixed_us(self, prefill_tokens, decode_batch, context_tokens, prefill_context_tokens=0.0):
            return self.decode_us(decode_batch, context_tokens) + prefill_tokens * (1.0 + context_tokens * 1e-6)

    pricer = StepPricer(Coupled())
    for step in range(20):
        context = 10_000.0 + 997.0 * step
        assert pricer._price(4, context, 512, 1, 0.0, True) == Coupled().mixed_us(512, 4, context)
    assert not pricer._separable


def test_a_replay_is_reused_under_a_cap_it_never_met_though_its_pool_was_full():
    """`Bounds.serve` compares each limit on its own: the same KV pool, full in both, and
    running caps of 256 or 64 the replay's 16 clients never reached give the same replay;
    a cap it did reach, or another pool it filled, do not."""
    kept = Bounds(((256, 1000),), ((16, 1200),))
    assert kept.serve(((64, 1000),))
    assert not kept.serve(((8, 1000),))          # the cap binds at 16 requests
    assert not kept.serve(((256, 999),))         # a full pool of another size
    assert Bounds(((256, 1000),), ((16, 500),)).serve(((64, 999),))     # a pool never filled
