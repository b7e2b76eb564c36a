"""The shared host KV pool (predictor.sim.host_pool, host_kv_tier_gb=N:shared) and
independent prefill/decode admission with work-balanced routing on a disaggregated
deployment (METHOD §3.10, §3.11; issue 13)."""

from dataclasses import dataclass

import numpy as np
import pytest

from levers.configuration import Configuration, parse_config_text
from levers.errors import InputError
from predictor.sim import SimOptions, load_profile, simulate
from predictor.sim.agentic import AgenticWorkload
from predictor.sim.host_pool import SharedHostPool, exposed_us, pool_size
from predictor.sim.request import Request, RequestSpec
from predictor.sim.workloads import ArrivalMode, Session
from predictor.workload import WorkloadSpec
from tests.predictor.sim.sim_fakes import FakeStepModel, fake_factory, fixed_capacity

FOUR_PREFILL = {"disaggregated": True, "prefill_layout": "TP1", "prefill_replicas": 4, "decode_layout": "TP1",
                "decode_replicas": 2}
RANK_TOKENS = 600_000          # per rank: about two agentic contexts, so HBM alone cannot keep every session


def agentic(concurrency):
    profile = load_profile()
    return AgenticWorkload(profile, concurrency, profile.max_context_tokens)


def run(target, levers, workload, requests=800, capacity=RANK_TOKENS, **kwargs):
    return simulate(target, Configuration(**{**FOUR_PREFILL, "concurrency": 8, **levers}), workload,
                    step_model_factory=fake_factory(), capacity_model=fixed_capacity(capacity), num_requests=requests,
                    options=SimOptions(keep_rows=True), **kwargs)


def test_the_lever_takes_a_shared_form():
    assert parse_config_text("host_kv_tier_gb=512:shared") == {"host_kv_tier_gb": "512:shared"}
    config = Configuration().with_changes(parse_config_text("host_kv_tier_gb=512:SHARED"))
    assert config.is_host_tier_shared and config.host_tier_gb_per_gpu == 512.0
    private = Configuration(host_kv_tier_gb=64.0)
    assert not private.is_host_tier_shared and private.host_tier_gb_per_gpu == 64.0
    with pytest.raises(InputError, match="N:shared"):
        parse_config_text("host_kv_tier_gb=lots:shared")


def test_shared_pool_hits_do_not_depend_on_the_prefill_rank(target):
    """Round robin scatters every session's turns over four prefill ranks: without a pool a
    rank rarely holds the previous turn, per-rank tiers do no better; a shared pool serves
    each turn's prefix whichever rank computed it, as one rank would."""
    workload = agentic(8)
    scattered = {"router": "round_robin"}
    alone = run(target, {"prefill_replicas": 1, "decode_replicas": 1, "host_kv_tier_gb": 64.0}, workload,
                capacity=100_000_000)   # one rank that holds everything: the ideal
    none = run(target, scattered, workload)
    per_rank = run(target, {**scattered, "host_kv_tier_gb": 64.0}, workload)
    shared = run(target, {**scattered, "host_kv_tier_gb": "64:shared"}, workload)
    ideal = alone.hit_rate["overall"]
    assert none.hit_rate["overall"] < ideal - 0.15 and per_rank.hit_rate["overall"] < ideal - 0.15
    assert shared.hit_rate["overall"] == pytest.approx(ideal, abs=0.03)
    assert shared.hit_rate["host_tier"] == "shared" and shared.hit_rate["per_tier"]["dram"] > 0.3
    replicas = shared.hit_rate["per_replica"]
    assert len(replicas) == 4 and max(replicas) - min(replicas) < 0.05
    ranks_per_session: dict[int, set[int]] = {}
    for row in shared.rows:       # each session's turns are spread over the prefill ranks
        ranks_per_session.setdefault(row["session"], set()).add(row["entry_unit"])
    assert sum(len(ranks) >= 3 for ranks in ranks_per_session.values()) >= len(ranks_per_session) // 2


def test_a_small_shared_pool_hits_less(target):
    workload = agentic(8)
    big = run(target, {"router": "round_robin", "host_kv_tier_gb": "64:shared"}, workload)
    # 0.05 GB per GPU over 6 GPUs: room for ~36 agentic blocks of 64 tokens at 8 MB each
    small = run(target, {"router": "round_robin", "host_kv_tier_gb": "2:shared"}, workload)
    assert small.hit_rate["overall"] < big.hit_rate["overall"] - 0.05


def request_of(ids, prompt_tokens):
    return Request(0, RequestSpec(prompt_tokens, 10, np.asarray(ids, dtype=np.int64)), 0, 0, 0.0)


def test_state_checkpoints_are_stored_with_their_prefix_and_bound_the_hit():
    size = pool_size(1.0, 1, 1000.0, 64_000.0, 64)         # a checkpoint weighs one block (64,000 bytes)
    pool = SharedHostPool(size)
    assert size.checkpoint_blocks == 1
    first = request_of(range(10), 640)
    pool.store(first)
    assert pool.cache.num_hbm_blocks == 11                  # ten blocks and the checkpoint
    assert pool.usable_blocks(request_of(range(14), 896)) == 10        # the next turn resumes at its end
    sibling = request_of([0, 1, 2, 3, 100, 101], 384)                  # diverges inside: no state there
    assert pool.usable_blocks(sibling) == 0
    stateless = SharedHostPool(pool_size(1.0, 1, 1000.0, 0.0, 64))
    stateless.store(first)
    assert stateless.usable_blocks(sibling) == 4


def test_loads_overlap_the_prefill_layer_by_layer():
    assert exposed_us(1000.0, 0.0, 10) == 1000.0            # nothing to hide it under
    assert exposed_us(1000.0, 5000.0, 10) == 100.0          # the first layer's share only
    assert exposed_us(1000.0, 400.0, 10) == 600.0


@dataclass(frozen=True)
class AtOnce:
    """Open-loop requests all arriving at t=0 (prompt sizes given)."""

    prompts: tuple[int, ...]
    output_tokens: int = 64
    name: str = "at-once"
    mode: ArrivalMode = ArrivalMode.OPEN
    block_tokens: int = 64
    warmup_sessions_per_slot: int = 0

    def default_num_requests(self, concurrency):
        return len(self.prompts)

    def sessions(self, rng):
        for prompt in self.prompts:
            yield Session((RequestSpec(prompt, self.output_tokens, arrival_us=0.0),))


def test_prefill_routing_balances_outstanding_prefill_tokens(target):
    """One long prompt and five short ones at once on two prefill ranks: by work, the short
    ones all go to the other rank (their 5,000 tokens never reach the long one's 60,000);
    by request count (colocated least-loaded) they would alternate."""
    workload = AtOnce((60_000, 1_000, 1_000, 1_000, 1_000, 1_000))
    result = run(target, {"prefill_replicas": 2, "decode_replicas": 1}, workload, requests=6, capacity=1_000_000)
    by_release = sorted(result.rows, key=lambda r: r["rid"])
    long_rank = by_release[0]["entry_unit"]
    assert {row["entry_unit"] for row in by_release[1:]} == {1 - long_rank}


def test_prefill_runs_before_decode_has_room_and_the_hand_off_waits_for_both(target):
    """A decode rank that holds one request at a time: the next prompt is prefilled while the
    first decodes, and reaches decode only once the first has finished."""
    workload = AtOnce((1_000, 1_000, 1_000), output_tokens=200)
    result = run(target, {"prefill_replicas": 1, "decode_replicas": 1}, workload, requests=3, capacity=1_300)
    rows = sorted(result.rows, key=lambda r: r["first_token_ms"])
    for before, after in zip(rows, rows[1:]):
        assert after["admit_ms"] < before["finish_ms"]          # prefilled meanwhile
        assert after["first_token_ms"] >= before["finish_ms"]   # decode reserved only once room freed


def test_a_shared_pool_on_a_colocated_deployment_serves_every_replica(target):
    workload = agentic(8)
    levers = {"disaggregated": False, "prefill_layout": None, "decode_layout": None, "prefill_replicas": 1,
              "decode_replicas": 1, "replicas": 4, "router": "round_robin"}
    none = run(target, levers, workload)
    shared = run(target, {**levers, "host_kv_tier_gb": "64:shared"}, workload)
    assert shared.hit_rate["overall"] > none.hit_rate["overall"] + 0.1



class StepFloorPrefill(FakeStepModel):
    """A prefill step with a large fixed cost (DWDP's exposed weight fetch): batching
    prompts is what keeps such a pool ahead of its queue."""

    def prefill_us(self, num_tokens, num_seqs=1, context_tokens=0.0):
        self.calls += 1
        return 200_000.0 + 0.2 * num_tokens


def test_a_rank_fetches_ahead_and_batches_the_prompts_whose_prefixes_arrived(target):
    """SGLang's HiCache prefetches a queued request's prefix and skips the request until it
    lands (the queue does not wait): a prefill rank with a 200 ms step floor under 48
    sessions admits several prompts loaded from the shared pool in one step. Fetching one
    prefix at a time (the queue waiting for its head) admitted one per step. How far a rank
    fetches ahead is bounded by the HBM it can free for the loads (`KvPool.reserve_fetch`)."""
    models: dict = {}
    result = simulate(target, Configuration(**{**FOUR_PREFILL, "prefill_replicas": 1, "decode_replicas": 1,
                                               "concurrency": 48, "host_kv_tier_gb": "4096:shared"}),
                      agentic(48), step_model_factory=lambda config: models.setdefault(config, StepFloorPrefill()),
                      capacity_model=fixed_capacity(RANK_TOKENS), num_requests=600, options=SimOptions(keep_rows=True))
    loaded_per_admission: dict[float, int] = {}
    for row in result.rows:
        if row["dram_tokens"] > 0:
            loaded_per_admission[row["admit_ms"]] = loaded_per_admission.get(row["admit_ms"], 0) + 1
    assert result.hit_rate["per_tier"]["dram"] > 0.3
    assert max(loaded_per_admission.values()) >= 2      # one fetch at a time: never more than 1
    assert sum(n >= 2 for n in loaded_per_admission.values()) >= 3
