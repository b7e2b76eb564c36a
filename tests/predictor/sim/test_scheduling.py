"""Engine scheduler models, tails, attention-DP lockstep, stretches, determinism, bad input."""

from dataclasses import replace

import numpy as np
import pytest

from levers.catalog import Engine
from levers.configuration import Configuration
from levers.errors import InputError
from predictor.sim import (
    AdmissionPolicy,
    ArrivalMode,
    LengthRange,
    SimOptions,
    SyntheticWorkload,
    simulate,
)
from predictor.sim.kv_pool import KvPool, PoolShape
from predictor.sim.prefix_cache import LeafFirstCache
from predictor.sim.rank import Rank
from predictor.sim.request import Request, RequestSpec
from predictor.sim import scheduler
from predictor.sim.scheduler import admission_order
from predictor.workload import WorkloadSpec
from tests.predictor.sim.sim_fakes import FakeTarget, fake_factory, fixed_capacity

BIG_POOL = 10_000_000
MIXED = SyntheticWorkload(LengthRange(2000, 8000), LengthRange(100, 300), mode=ArrivalMode.OPEN,
                          arrival_rate=20.0)


def run(target, config, workload, requests=400, **kwargs):
    return simulate(target, config, workload, step_model_factory=kwargs.pop("factory", fake_factory()),
                    capacity_model=kwargs.pop("capacity", fixed_capacity(BIG_POOL)), num_requests=requests,
                    **kwargs)


@pytest.mark.parametrize("engine", [Engine.VLLM, Engine.SGLANG, Engine.ATOM, Engine.TRTLLM])
def test_admitted_prefills_stall_decodes_into_the_itl_tail(h100, engine):
    result = run(FakeTarget(h100, engine), Configuration(), MIXED)
    metrics = result.metrics
    assert metrics["itl_ms_p99"] > 1.2 * metrics["itl_ms_p50"]
    assert metrics["mixed_step_fraction"] > 0.05
    assert metrics["mixed_decode_step_ms"] > metrics["itl_ms_p50"]


def test_decode_only_traffic_has_no_tail(target):
    quiet = SyntheticWorkload(LengthRange.fixed(16), LengthRange.fixed(512), warmup_sessions_per_slot=1)
    metrics = run(target, Configuration(concurrency=32), quiet, requests=320).metrics
    assert metrics["itl_ms_p99"] < 1.02 * metrics["itl_ms_p50"]


def test_prefill_first_engines_stall_decodes_more_than_mixing_ones(h100):
    vllm = run(FakeTarget(h100, Engine.VLLM), Configuration(), MIXED).metrics
    sglang = run(FakeTarget(h100, Engine.SGLANG), Configuration(), MIXED).metrics
    assert sglang["itl_ms_p99"] > vllm["itl_ms_p99"]


def test_lpm_orders_a_backlog_by_resident_prefix_and_fcfs_by_arrival():
    cache = LeafFirstCache()
    cache.insert(np.arange(1, 9, dtype=np.int64), 0, 8)
    rank = Rank(0, 0, KvPool(PoolShape(100_000, 16, 64, 0), cache), None, 1.0)
    cold = Request(0, RequestSpec(512, 8, np.arange(100, 108, dtype=np.int64)), 0, 0, 0.0)
    warm = Request(1, RequestSpec(512, 8, np.arange(1, 9, dtype=np.int64)), 1, 1, 0.0)
    rank.waiting.extend([cold, warm])
    assert admission_order(rank, AdmissionPolicy.LPM, 2) == [warm, cold]
    assert admission_order(rank, AdmissionPolicy.FCFS, 2) == [cold, warm]
    assert admission_order(rank, AdmissionPolicy.LPM, 1) == [warm]


def test_attention_dp_step_costs_the_slowest_rank(target):
    # 3 clients on 2 DP ranks: 2 + 1 requests; the step is priced at dp x max = 4
    tiny_prompts = SyntheticWorkload(LengthRange.fixed(16), LengthRange.fixed(2048), warmup_sessions_per_slot=1)
    config = Configuration(concurrency=3, tp=2, attention_dp=2)
    metrics = run(target, config, tiny_prompts, requests=30).metrics
    context = 16 + 2048 / 2
    expected_ms = (5000 + 20 * 4 + 0.001 * 4 * context) / 1000
    assert metrics["tpot_ms_mean"] == pytest.approx(expected_ms, rel=0.01)


def test_running_cap_and_token_budget_bound_a_step(target):
    config = Configuration(concurrency=16, max_running_requests=4, max_batched_tokens=1024,
                           chunked_prefill_size=1024)
    result = run(target, config, WorkloadSpec("fixed", 4096, 64), requests=64, options=SimOptions(keep_rows=True))
    rows = sorted(result.rows, key=lambda r: r["admit_ms"])
    for row in rows:       # never more than 4 requests between admission and finish
        live = sum(1 for r in rows if r["admit_ms"] <= row["admit_ms"] < r["finish_ms"])
        assert live <= 4
    # a 4096-token prompt needs 4 chunks of 1024: TTFT from admission spans >= 4 prefill steps
    assert min(r["ttft_admission_ms"] for r in rows) >= 4 * (1000 + 0.2 * 1024) / 1000 - 1e-3


def test_speculation_commits_tokens_per_step_per_verify_step(target):
    spec = Configuration(concurrency=8, spec_method="mtp", spec_depth=3)
    plain = run(target, Configuration(concurrency=8), WorkloadSpec("fixed", 64, 1025), requests=40,
                factory=fake_factory(1.0)).metrics
    fast = run(target, spec, WorkloadSpec("fixed", 64, 1025), requests=40, factory=fake_factory(2.0)).metrics
    assert fast["tpot_ms_mean"] == pytest.approx(plain["tpot_ms_mean"] / 2.0, rel=0.02)
    assert fast["itl_ms_p50"] == pytest.approx(plain["itl_ms_p50"], rel=0.02)   # one verify step per ITL


def test_decode_stretches_are_advanced_in_bulk(target):
    factory = fake_factory()
    result = run(target, Configuration(concurrency=64), WorkloadSpec("fixed", 1024, 1024), requests=640,
                 factory=factory)
    calls = next(iter(factory.models.values())).calls
    assert result.extra["steps"] > 10_000
    assert calls < result.extra["steps"] / 10


def test_same_seed_same_result_other_seed_other_result(h100):
    config = Configuration(replicas=2, router="random")
    first = run(FakeTarget(h100, Engine.VLLM), config, MIXED, requests=200, seed=3).metrics
    again = run(FakeTarget(h100, Engine.VLLM), config, MIXED, requests=200, seed=3).metrics
    other = run(FakeTarget(h100, Engine.VLLM), config, MIXED, requests=200, seed=4).metrics
    assert first == again
    assert first["ttft_ms_mean"] != other["ttft_ms_mean"]


def test_a_pool_that_cannot_hold_one_request_is_an_input_error(target):
    # (the request named may be a staggered warm-up, cut short: `SyntheticWorkload.staggered_warmups`)
    with pytest.raises(InputError, match=r"needs \d+ KV tokens but one colocated rank's pool holds 1000"):
        run(target, Configuration(), WorkloadSpec("fixed", 1024, 1024), capacity=fixed_capacity(1000))


def test_zero_requests_is_an_input_error(target):
    with pytest.raises(InputError, match="--requests"):
        run(target, Configuration(), WorkloadSpec("fixed", 1024, 1024), requests=0)


def test_linear_state_takes_pool_room_per_sequence(target):
    state_bytes = 1024 * 131072.0          # 1024 token-equivalents per sequence
    with pytest.raises(InputError, match=r"needs 30\d\d KV tokens but one colocated rank's pool holds 3000"):
        run(target, Configuration(), WorkloadSpec("fixed", 1024, 1024), capacity=fixed_capacity(3000, state_bytes))


def test_balanced_attention_dp_starts_prompts_together(h100, monkeypatch):
    # TensorRT-LLM's enable_balance: a prompt waits (at most BALANCE_TIMEOUT_STEPS steps)
    # until every rank has one, so fewer steps carry prefill and prompts wait longer.
    target, config = FakeTarget(h100, Engine.TRTLLM), Configuration(concurrency=64, tp=4, attention_dp=4)
    balanced = run(target, config, MIXED, requests=400).metrics
    profile = scheduler.PROFILES[Engine.TRTLLM]
    assert profile.balances_attention_dp
    monkeypatch.setitem(scheduler.SCHEDULERS, Engine.TRTLLM,
                        scheduler.MixedScheduler(replace(profile, balances_attention_dp=False)))
    free = run(target, config, MIXED, requests=400).metrics
    assert balanced["mixed_step_fraction"] < 0.8 * free["mixed_step_fraction"]
    assert balanced["ttft_ms_mean"] > free["ttft_ms_mean"]
    # nothing to balance on one rank: the same run with the hold on or off
    single = Configuration(concurrency=64, tp=4)
    unheld = run(target, single, MIXED, requests=400).metrics
    monkeypatch.setitem(scheduler.SCHEDULERS, Engine.TRTLLM, scheduler.MixedScheduler(profile))
    assert run(target, single, MIXED, requests=400).metrics == unheld


def test_sglang_divides_its_chunk_over_attention_dp_ranks():
    """SGLang reads chunked_prefill_size as the replica's under DP attention (its
    server_args divide it by dp_size): a DEP8 replica at 8,192 prefills 1,024 tokens of a
    prompt per rank and step; vLLM and TensorRT-LLM give each rank the whole chunk."""
    from predictor.sim.deployment import _limits
    from predictor.sim.scheduler import rank_chunk_tokens, rank_prefill_budget

    dep8 = Configuration(tp=8, ep=8, attention_dp=8, max_batched_tokens=8192, chunked_prefill_size=8192)
    tp8 = Configuration(tp=8, max_batched_tokens=8192, chunked_prefill_size=4096)
    assert rank_chunk_tokens(Engine.SGLANG, dep8) == 1024 == _limits(dep8, Engine.SGLANG, "prefill").chunk_tokens
    assert rank_chunk_tokens(Engine.SGLANG, tp8) == 4096 == rank_prefill_budget(Engine.SGLANG, tp8)
    for engine in (Engine.VLLM, Engine.TRTLLM):
        assert rank_chunk_tokens(engine, dep8) == 8192 == rank_prefill_budget(engine, dep8)
        assert rank_prefill_budget(engine, tp8) == 8192


@pytest.mark.parametrize("engine", [Engine.VLLM, Engine.SGLANG])
def test_fixed_length_clients_run_out_of_phase_after_their_warm_up(h100, engine):
    """A closed loop's warm-ups end after (k + 0.5) / C of their output, so the clients'
    measured requests arrive spread over a request's duration, as a served deployment's
    do; without it the identical requests that start together finish together, and each
    round's prompts met the prefill as one wave (SGLang: every measured request waited the
    same whole wave from admission)."""
    config = Configuration(concurrency=16)
    result = run(FakeTarget(h100, engine), config, WorkloadSpec("fixed", 1024, 256), requests=16 * 6,
                 options=SimOptions(keep_rows=True))
    rows = [row for row in result.rows if row["is_measured"]]
    arrivals = sorted({round(row["arrival_ms"], 3) for row in rows})
    assert len(arrivals) >= 0.75 * len(rows)          # hardly two arrive together
    waits = [row["ttft_admission_ms"] for row in rows]
    assert max(waits) < 2 * min(waits) + 1.0           # no request waits a whole wave


def test_tensorrt_llms_prompt_chunk_is_its_budget():
    """trtllm-serve has no chunk size of its own (its context chunk is max_num_tokens, the
    launch's): the lever priced 184 vs 134 ms TTFT for a chunk no launch could set."""
    from levers.catalog import Engine
    from levers.configuration import Configuration
    from predictor.sim.scheduler import rank_chunk_tokens
    config = Configuration(max_batched_tokens=16384, chunked_prefill_size=1024)
    assert rank_chunk_tokens(Engine.TRTLLM, config) == 16384
    assert rank_chunk_tokens(Engine.VLLM, config) == 1024
