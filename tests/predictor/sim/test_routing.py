"""Routing across replicas (five policies) and disaggregated pools with the KV hand-off."""

from importlib import resources

import pytest

from levers.catalog import Engine
from levers.configuration import Configuration
from predictor.hardware import parse_cluster
from predictor.sim import SimOptions, load_trace, simulate
from predictor.sim.handoff import HandoffLaw
from predictor.sim.router import PREFIX_HASH_TOKENS
from predictor.workload import WorkloadSpec
from tests.predictor.sim.sim_fakes import (
    KV_BYTES_PER_TOKEN,
    NUM_LAYERS,
    FakeTarget,
    fake_factory,
    fixed_capacity,
)

TRACES = resources.files("predictor") / "data" / "traces"
BIG_POOL = 10_000_000
PREFIX_HASH_DEPTH = PREFIX_HASH_TOKENS // 64     # agentic traces: 64-token blocks
POLICIES = ("least_loaded", "kv_aware", "prefix_hash", "round_robin", "random")


def two_sessions(folder):
    """Both sessions read as one trace, so each gets its own block-id namespace."""
    for name in ("agentic_trace_0277.json", "agentic_trace_0291.json"):
        (folder / name).write_bytes((TRACES / name).read_bytes())
    return load_trace(folder)


def run(target, config, workload, **kwargs):
    return simulate(target, config, workload, step_model_factory=kwargs.pop("factory", fake_factory()),
                    capacity_model=kwargs.pop("capacity", fixed_capacity(BIG_POOL)),
                    options=SimOptions(keep_rows=True), **kwargs)


@pytest.mark.parametrize("policy", POLICIES)
def test_every_policy_serves_every_request(target, policy):
    trace = load_trace(TRACES / "mooncake_conversation_2000.jsonl")
    result = run(target, Configuration(replicas=3, router=policy), trace, num_requests=300)
    assert result.extra["requests_finished"] == 300
    assert len(result.hit_rate["per_replica"]) == 3
    units = [row["unit"] for row in result.rows]
    # every Mooncake conversation prompt starts with the same system block: hashing only
    # that block sent every request to one replica; every policy spreads the load
    assert set(units) == {0, 1, 2}
    assert max(units.count(u) for u in range(3)) < 0.6 * len(units)


def test_prefix_hash_colocates_requests_that_share_the_hashed_prefix(target):
    trace = load_trace(TRACES / "mooncake_conversation_2000.jsonl")
    result = run(target, Configuration(replicas=4, router="prefix_hash"), trace, num_requests=400)
    depth = PREFIX_HASH_TOKENS // trace.block_tokens
    specs = [spec for session in trace.trace_sessions for spec in session.requests]
    by_prefix: dict[int, set[int]] = {}
    for row in result.rows:
        ids = specs[row["rid"]].block_ids
        by_prefix.setdefault(int(ids[min(depth, len(ids)) - 1]), set()).add(row["unit"])
    assert all(len(units) == 1 for units in by_prefix.values())
    assert len({u for units in by_prefix.values() for u in units}) == 4


@pytest.mark.parametrize("replicas", [2, 3, 4, 8])
def test_prefix_hash_spreads_agentic_sessions_over_any_number_of_replicas(target, replicas):
    """Agentic block ids differ between sessions in their high bits only (the session and
    stream), so the hash must pick the unit from the product's high bits: the low bits sent
    every Kimi-K3 session to one of 2 or 4 replicas (hit 0, TTFT 967 s)."""
    result = run(target, Configuration(replicas=replicas, concurrency=8 * replicas, router="prefix_hash"),
                 WorkloadSpec("agentic", 0, 0), num_requests=40 * replicas)
    units = [row["unit"] for row in result.rows]
    assert set(units) == set(range(replicas))
    assert max(units.count(u) for u in range(replicas)) < 2.5 * len(units) / replicas


def test_round_robin_cycles_over_the_replicas(target):
    result = run(target, Configuration(replicas=3, router="round_robin"), WorkloadSpec("fixed", 256, 16),
                 num_requests=30)
    by_release = sorted(result.rows, key=lambda r: r["rid"])
    assert [r["unit"] for r in by_release[:3]] == [0, 1, 2]
    assert sorted(r["unit"] for r in by_release).count(0) == 10


def test_prefix_routing_keeps_each_session_on_one_replica_and_its_hits(target, tmp_path):
    both = two_sessions(tmp_path)
    scattered = run(target, Configuration(replicas=4, concurrency=2, router="round_robin"), both)
    specs = {f"{s.label}#{i}": spec for s in both.trace_sessions for i, spec in enumerate(s.requests)}
    for policy in ("prefix_hash", "kv_aware"):
        sticky = run(target, Configuration(replicas=4, concurrency=2, router=policy), both)
        by_head: dict[int, set[int]] = {}
        for row in sticky.rows:       # requests that share the hashed prefix share a replica
            ids = specs[row["label"]].block_ids
            by_head.setdefault(int(ids[min(PREFIX_HASH_DEPTH, len(ids)) - 1]), set()).add(row["unit"])
        if policy == "prefix_hash":  # kv_aware may trade a hit for load, by design
            assert all(len(units) == 1 for units in by_head.values())
        assert sticky.hit_rate["overall"] > scattered.hit_rate["overall"] + 0.1


def test_random_routing_is_seeded(target):
    config = Configuration(replicas=4, router="random")
    first = run(target, config, WorkloadSpec("fixed", 256, 16), num_requests=40, seed=7)
    again = run(target, config, WorkloadSpec("fixed", 256, 16), num_requests=40, seed=7)
    assert [r["unit"] for r in first.rows] == [r["unit"] for r in again.rows]


SPLIT = {"disaggregated": True, "prefill_layout": "TP1", "decode_layout": "TP1", "concurrency": 1}


@pytest.mark.parametrize("backend", ["nixl", "mooncake", "mori"])
def test_disaggregated_ttft_includes_the_backends_handoff(backend):
    cluster = parse_cluster("h100x8")                  # both pools inside one NVLink domain
    target = FakeTarget(cluster, Engine.SGLANG)
    config = Configuration(**SPLIT, kv_transfer_backend=backend)
    result = run(target, config, WorkloadSpec("fixed", 1024, 64), num_requests=10)
    law = HandoffLaw(backend, cluster.gpu.intra_node_bw_gbps, KV_BYTES_PER_TOKEN, 0.0, NUM_LAYERS)
    prefill_us = 1000 + 0.2 * 1024
    host_ms = 0.0
    for row in result.rows:
        expected_ms = (prefill_us + law.duration_us(1024)) / 1e3 + host_ms
        assert row["ttft_admission_ms"] == pytest.approx(expected_ms, rel=1e-3)
    assert result.metrics["throughput_per_gpu"] == pytest.approx(result.metrics["throughput_fleet"] / 2)


def test_a_split_request_pays_both_pools_host_time(h100):
    """METHOD §3.11: the request passes the prefill pool's front end, then the decode
    pool's; its TTFT carries both host times (half the prefill's billed on the step that
    admits it), as the analytical model bills them."""
    config = Configuration(**SPLIT, kv_transfer_backend="nixl")
    workload = WorkloadSpec("fixed", 1024, 16)

    def ttfts(host_ms):
        result = run(FakeTarget(h100, Engine.SGLANG), config, workload, num_requests=5,
                     factory=fake_factory(host_time_ms=host_ms))
        return [row["ttft_ms"] for row in result.rows]

    for without, with_host in zip(ttfts(0.0), ttfts(40.0)):
        assert with_host - without == pytest.approx(2 * 40.0, rel=1e-6)


def test_handoff_laws_follow_method_3_11():
    fabric = HandoffLaw("nixl", 450.0, KV_BYTES_PER_TOKEN, 0.0, NUM_LAYERS)
    nic = HandoffLaw("nixl", 50.0, KV_BYTES_PER_TOKEN, 0.0, NUM_LAYERS)
    mori = HandoffLaw("mori", 450.0, KV_BYTES_PER_TOKEN, 0.0, NUM_LAYERS)
    bytes_1k = 1024 * KV_BYTES_PER_TOKEN
    assert fabric.duration_us(1024) == pytest.approx(5 + bytes_1k / 400e9 * 1e6)        # NIXL's own rate
    assert nic.duration_us(1024) == pytest.approx(5 + bytes_1k / 50e9 * 1e6)            # capped by the NIC
    assert mori.duration_us(1024) == pytest.approx(120 + bytes_1k / NUM_LAYERS / 47.9e9 * 1e6)


def test_a_split_across_nodes_crosses_the_nic():
    inside = parse_cluster("h100x8")
    across = parse_cluster("h100x1x2")                 # one GPU per node: the pools sit on two nodes
    config = Configuration(**SPLIT, kv_transfer_backend="nixl")
    near = run(FakeTarget(inside, Engine.VLLM), config, WorkloadSpec("fixed", 4096, 16), num_requests=5)
    far = run(FakeTarget(across, Engine.VLLM), config, WorkloadSpec("fixed", 4096, 16), num_requests=5)
    gap_ms = near.metrics["ttft_ms_mean"] and far.metrics["ttft_ms_mean"] - near.metrics["ttft_ms_mean"]
    bytes_4k = 4096 * KV_BYTES_PER_TOKEN
    assert gap_ms == pytest.approx((bytes_4k / 50e9 - bytes_4k / 400e9) * 1e3, rel=0.01)


def test_decode_pool_admission_is_capped_per_engine():
    target = FakeTarget(parse_cluster("h100x8"), Engine.SGLANG)
    config = Configuration(disaggregated=True, prefill_layout="TP1", decode_layout="TP1", concurrency=200,
                           max_running_requests=256)
    result = run(target, config, WorkloadSpec("fixed", 128, 256), num_requests=400)
    rows = result.rows
    for row in rows[::25]:
        decoding = sum(1 for r in rows if r["first_token_ms"] <= row["first_token_ms"] < r["finish_ms"])
        assert decoding <= 128                          # SGLang decode pool without attention DP
