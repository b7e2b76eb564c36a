"""METHOD §2: with no queueing and no cache effects, the DES and the analytical steady
state agree. Fixed-length closed-loop traffic, no prefix reuse, on a linear fake step
model: TPOT and throughput per GPU within 5% on a long replay (40 requests per client:
the DES's throughput includes the drain, which costs about 1/(2N) of a replay of N
requests per client, ~1% here).

Semantics both sides share (predictor/sim/api.py docstring): closed loop, zero think
time, each client sends its next request when the previous finishes; prompts prefilled
in chunks of min(chunked_prefill_size, max_batched_tokens) that ride in decode steps
(vLLM); L(k) tokens committed per verify step.
"""

import pytest

from levers.configuration import Configuration
from predictor.sim import simulate
from predictor.workload import WorkloadSpec
from tests.predictor.sim.sim_fakes import fake_factory, fixed_capacity

analytical = pytest.importorskip("predictor.analytical", reason="the analytical predictor has not landed")

TOLERANCE = 0.05
REQUESTS_PER_CLIENT = 40
BIG_POOL_TOKENS = 10_000_000

CASES = [
    # (label, isl, osl, concurrency, levers, tokens_per_step)
    ("TP1 C16 1k/1k", 1024, 1024, 16, {}, 1.0),
    ("TP1 C64 1k/1k", 1024, 1024, 64, {}, 1.0),
    ("TP1 C128 2k/256", 2048, 256, 128, {}, 1.0),
    ("TP2 C32 8k/1k chunk 2048", 8192, 1024, 32, {"tp": 2, "chunked_prefill_size": 2048}, 1.0),
    ("2 replicas C64 round robin", 1024, 1024, 64, {"replicas": 2, "router": "round_robin"}, 1.0),
    ("DP2 C48 least loaded", 1024, 512, 48, {"tp": 2, "attention_dp": 2}, 1.0),
    ("cap 32 under C64", 1024, 1024, 64, {"max_running_requests": 32}, 1.0),
    ("MTP L=2.5 C32", 1024, 1024, 32, {"spec_method": "mtp", "spec_depth": 3}, 2.5),
]


@pytest.mark.parametrize("label,isl,osl,concurrency,levers,tokens_per_step", CASES, ids=[c[0] for c in CASES])
def test_des_matches_the_analytical_steady_state(target, label, isl, osl, concurrency, levers, tokens_per_step):
    config = Configuration(concurrency=concurrency, **levers)
    factory = fake_factory(tokens_per_step)
    result = simulate(target, config, WorkloadSpec("fixed", isl, osl), step_model_factory=factory,
                      capacity_model=fixed_capacity(BIG_POOL_TOKENS), num_requests=REQUESTS_PER_CLIENT * concurrency)
    replicas = config.replicas
    load = analytical.Load(isl=isl, osl=osl, concurrency=concurrency / replicas,
                           running_cap=config.max_running_requests,
                           chunk_tokens=min(config.chunked_prefill_size, config.max_batched_tokens),
                           gpus=config.replica_gpus, replicas=replicas)
    model = next(iter(factory.models.values()))
    state = analytical.steady_state(model, load)
    expected = state.metrics(load, analytical.host_time_ms(model, isl))
    des = result.metrics
    assert des["tpot_ms_mean"] == pytest.approx(expected["tpot_ms_mean"], rel=TOLERANCE)
    assert des["throughput_per_gpu"] == pytest.approx(expected["throughput_per_gpu"], rel=TOLERANCE)
    assert des["output_throughput_per_gpu"] == pytest.approx(expected["output_throughput_per_gpu"], rel=TOLERANCE)


def test_an_on_demand_engines_kv_bound_replica_runs_what_the_analytical_steady_state_holds(target):
    """vLLM (the fixture's engine) takes KV pages as its requests grow: a pool of 100,000
    tokens holds 65 staggered 1k/1k requests at their average 1,536 tokens, 48 at their
    final 2,048. Reserving the whole output at admission (as before) ran 48 of 64 clients
    and queued the rest (DeepSeek-R1 TP4 on B200 under SGLang: 248 tok/s/GPU against the
    analytical 290); the steady state and the replay now hold all 64."""
    isl = osl = 1024
    concurrency, pool_tokens = 64, 100_000
    config = Configuration(concurrency=concurrency)
    factory = fake_factory()
    result = simulate(target, config, WorkloadSpec("fixed", isl, osl), step_model_factory=factory,
                      capacity_model=fixed_capacity(pool_tokens), num_requests=REQUESTS_PER_CLIENT * concurrency)
    running = min(config.max_running_requests, pool_tokens // (isl + osl // 2))
    assert running >= concurrency > pool_tokens // (isl + osl)
    load = analytical.Load(isl=isl, osl=osl, concurrency=concurrency, running_cap=running,
                           chunk_tokens=min(config.chunked_prefill_size, config.max_batched_tokens),
                           gpus=config.replica_gpus, replicas=1)
    model = next(iter(factory.models.values()))
    expected = analytical.steady_state(model, load).metrics(load, analytical.host_time_ms(model, isl))
    assert result.metrics["output_throughput_per_gpu"] == pytest.approx(expected["output_throughput_per_gpu"],
                                                                         rel=TOLERANCE)
