"""Synthetic workloads: ranged lengths, shared-prefix pools (uniform / Zipf), think time,
Poisson arrivals; and the engine cap of llama.cpp."""

import itertools

import numpy as np
import pytest

from levers.catalog import Engine
from levers.configuration import Configuration
from levers.errors import InputError
from predictor.sim import (
    ArrivalMode,
    LengthRange,
    Popularity,
    SimOptions,
    SyntheticWorkload,
    simulate,
)
from tests.predictor.sim.sim_fakes import FakeTarget, fake_factory, fixed_capacity


def first_sessions(workload, count, seed=0):
    stream = workload.sessions(np.random.default_rng(seed))
    return [next(stream).requests[0] for _ in range(count)]


def run(target, config, workload, requests, capacity=10_000_000):
    return simulate(target, config, workload, step_model_factory=fake_factory(),
                    capacity_model=fixed_capacity(capacity), num_requests=requests,
                    options=SimOptions(keep_rows=True))


def test_ranged_lengths_are_uniform_in_the_range():
    specs = first_sessions(SyntheticWorkload(LengthRange(100, 200), LengthRange(5, 5)), 2000)
    prompts = np.array([s.prompt_tokens for s in specs])
    assert prompts.min() >= 100 and prompts.max() <= 200
    assert prompts.mean() == pytest.approx(150, rel=0.02)
    assert {s.output_tokens for s in specs} == {5}
    with pytest.raises(InputError):
        LengthRange(10, 5)


def test_shared_prefixes_carry_block_ids_and_zipf_concentrates_them():
    uniform = SyntheticWorkload(LengthRange.fixed(256), LengthRange.fixed(8), num_prefixes=50, prefix_tokens=1024)
    zipf = SyntheticWorkload(LengthRange.fixed(256), LengthRange.fixed(8), num_prefixes=50, prefix_tokens=1024,
                             popularity=Popularity.ZIPF, zipf_exponent=1.2)
    heads_u = [int(s.block_ids[0]) for s in first_sessions(uniform, 3000)]
    heads_z = [int(s.block_ids[0]) for s in first_sessions(zipf, 3000)]
    spec = first_sessions(uniform, 1)[0]
    assert spec.prompt_tokens == 1280 and len(spec.block_ids) == 20
    top_u = max(heads_u.count(h) for h in set(heads_u)) / 3000
    top_z = max(heads_z.count(h) for h in set(heads_z)) / 3000
    assert top_u == pytest.approx(1 / 50, abs=0.015)
    assert top_z > 0.15


def test_zipf_popularity_hits_more_in_a_small_cache(target):
    common = {"prompt": LengthRange.fixed(128), "output": LengthRange.fixed(8), "num_prefixes": 200,
                  "prefix_tokens": 2048, "warmup_sessions_per_slot": 0}
    pool = 20 * 2048 + 4096                       # room for ~20 of the 200 prefixes
    uniform = run(target, Configuration(concurrency=2), SyntheticWorkload(**common), 600, pool)
    zipf = run(target, Configuration(concurrency=2),
               SyntheticWorkload(**common, popularity=Popularity.ZIPF, zipf_exponent=1.1), 600, pool)
    assert zipf.hit_rate["overall"] > uniform.hit_rate["overall"] + 0.2


def test_closed_loop_think_time_separates_a_clients_requests(target):
    workload = SyntheticWorkload(LengthRange.fixed(64), LengthRange.fixed(4), think_s=2.0)
    rows = run(target, Configuration(concurrency=1), workload, 5).rows
    for before, after in itertools.pairwise(rows):
        assert after["arrival_ms"] - before["finish_ms"] == pytest.approx(2000.0, abs=1e-3)


def test_poisson_arrivals_follow_the_rate(target):
    workload = SyntheticWorkload(LengthRange.fixed(64), LengthRange.fixed(4), mode=ArrivalMode.OPEN,
                                 arrival_rate=50.0)
    rows = run(target, Configuration(), workload, 2000).rows
    arrivals = sorted(r["arrival_ms"] for r in rows)
    assert len(arrivals) / (arrivals[-1] / 1e3) == pytest.approx(50.0, rel=0.06)


def test_llamacpp_serves_one_request_at_a_time(h100):
    workload = SyntheticWorkload(LengthRange.fixed(256), LengthRange.fixed(16))
    rows = run(FakeTarget(h100, Engine.LLAMACPP), Configuration(concurrency=4), workload, 12).rows
    spans = sorted((r["admit_ms"], r["finish_ms"]) for r in rows)
    assert all(end <= start + 1e-9 for (_, end), (start, _) in itertools.pairwise(spans))
