"""The DES's fast paths against its exact reference (predictor.sim.pricing): merged runs of
repeated prefill/mixed steps and step prices cached on rounded contexts change the
numbers by far less than the model's own error; the throughput window includes the
drain; every candidate of a search replays the same agentic sessions (common random
numbers)."""

import numpy as np
import pytest

from levers.configuration import Configuration
from predictor.sim import AgenticWorkload, SimOptions, load_profile, simulate
from predictor.sim.pricing import StepPricer, StepShape, rounded
from predictor.workload import AGENTIC, WorkloadSpec
from tests.predictor.sim.sim_fakes import FakeStepModel, fake_factory, fixed_capacity

RESULT_TOLERANCE = 0.01     # fast vs exact: relative, on means and throughput
P90_TOLERANCE = 0.03        # ... on tails (a run's ITLs are priced at its segments' middles)
KEYS = ("throughput_per_gpu", "output_throughput_per_gpu", "tpot_ms_mean", "ttft_ms_mean", "e2e_ms_mean",
        "itl_ms_mean")


class CurvedStepModel(FakeStepModel):
    """The fake with attention that grows with the prefill's prior context, as real steps do."""

    def mixed_us(self, prefill_tokens, decode_batch, context_tokens, prefill_context_tokens=0.0):
        self.calls += 1
        return (self.decode_us(decode_batch, context_tokens) + 0.2 * prefill_tokens
                + 2e-5 * prefill_tokens * prefill_context_tokens)

    def prefill_us(self, num_tokens, num_seqs=1, context_tokens=0.0):
        self.calls += 1
        return 1000.0 + 0.2 * num_tokens + 2e-5 * num_tokens * context_tokens


def curved_factory():
    models: dict = {}

    def factory(config):
        return models.setdefault(config, CurvedStepModel())
    factory.models = models
    return factory


def replay(target, config, workload, exact, requests):
    factory = curved_factory()
    result = simulate(target, config, workload, step_model_factory=factory, num_requests=requests,
                      capacity_model=fixed_capacity(3_000_000), options=SimOptions(exact_prices=exact))
    return result, sum(m.calls for m in factory.models.values())


@pytest.mark.parametrize("levers", [{"concurrency": 8}, {"concurrency": 16, "chunked_prefill_size": 2048},
                                    {"concurrency": 12, "tp": 2, "attention_dp": 2}])
def test_fast_agentic_replay_matches_the_exact_reference(target, levers):
    config = Configuration(**levers)
    fast, fast_calls = replay(target, config, AGENTIC, exact=False, requests=200)
    exact, exact_calls = replay(target, config, AGENTIC, exact=True, requests=200)
    for key in KEYS:
        assert fast.metrics[key] == pytest.approx(exact.metrics[key], rel=RESULT_TOLERANCE), key
    assert fast.metrics["itl_ms_p90"] == pytest.approx(exact.metrics["itl_ms_p90"], rel=P90_TOLERANCE)
    assert fast.hit_rate["overall"] == pytest.approx(exact.hit_rate["overall"], abs=0.005)
    assert fast.extra["steps"] == pytest.approx(exact.extra["steps"], rel=1e-3)   # the same steps, fewer events
    assert fast_calls < 0.7 * exact_calls


def test_rounding_keeps_128_steps_per_doubling():
    assert rounded(100.4) == 100.0
    for tokens in (1_000.0, 37_777.0, 262_143.0):
        assert abs(rounded(tokens) - tokens) <= tokens / 256



def decode_shape(context: float) -> StepShape:
    return StepShape(8, context, 1.0, 0, 0, 0.0, 0.0, False)


def test_affine_fits_answer_for_the_model_and_retire_when_it_is_not_affine():
    model = FakeStepModel()
    pricer = StepPricer(model)
    for context in (1_000.0, 2_000.0, 3_000.0, 4_000.0, 5_000.0):   # learned from real answers
        assert pricer.step_us(decode_shape(context)) == pytest.approx(model.decode_us(8, context), rel=1e-12)
    before = model.calls
    for context in np.linspace(10_000, 200_000, 50):
        assert pricer.step_us(decode_shape(context)) == pytest.approx(model.decode_us(8, context), rel=1e-9)
    made = model.calls - before - 50           # less the 50 reference calls here
    assert made <= 15                          # a real call only to reach 25% past the known range

    class Curved(FakeStepModel):
        def decode_us(self, batch, context_tokens):
            return super().decode_us(batch, context_tokens) + 1e-6 * context_tokens ** 2

    curved = Curved()
    pricer = StepPricer(curved)
    for context in np.linspace(1_000, 300_000, 40):
        assert pricer.step_us(decode_shape(context)) == pytest.approx(curved.decode_us(8, context), rel=0.01)
    assert next(iter(pricer._fits.values())).retired        # no affine function explains it: rounded calls


def test_flags_are_raised_at_the_extreme_contexts_a_fit_answered_for():
    class Flagging(FakeStepModel):
        def __init__(self):
            super().__init__()
            self.flags = ()

        def decode_us(self, batch, context_tokens):
            if context_tokens > 110_000:
                self.flags = ("prompt-length-mismatch",)
            return super().decode_us(batch, context_tokens)

    model = Flagging()
    pricer = StepPricer(model)
    for context in (1_000.0, 2_000.0, 3_000.0, 4_000.0, 100_000.0, 115_000.0):
        pricer.step_us(decode_shape(context))
    assert model.flags == ()                  # 115,000 was answered by the fit (within 25% of 100,000)
    pricer.settle_flags()
    assert model.flags == ("prompt-length-mismatch",)


def test_a_run_bills_host_time_once_and_prices_segments_at_their_middle():
    pricer = StepPricer(CurvedStepModel(), exact=True)
    shape = StepShape(4, 10_000.0, 1.0, 4096, 1, 0.0, 4096.0, True)
    segments = pricer.segments(shape, 10, first_extra_us=500.0)
    assert sum(count for count, _ in segments) == 10
    assert segments[0] == (1, pricer.step_us(shape) + 500.0)
    exact = sum(pricer.step_us(shape, step) for step in range(1, 10))
    assert sum(count * us for count, us in segments[1:]) == pytest.approx(exact, rel=1e-9)  # linear: exact


def test_throughput_includes_the_drain(target):
    cold = AgenticWorkload(load_profile(), 6, 262144, warm_start=False)      # no warm-up: measured from 0
    result = simulate(target, Configuration(concurrency=6), cold, step_model_factory=fake_factory(),
                      capacity_model=fixed_capacity(3_000_000), num_requests=150, options=SimOptions(keep_rows=True))
    produced = sum(row["output_tokens"] for row in result.rows)
    last = max(row["finish_ms"] for row in result.rows) / 1000.0
    assert result.metrics["output_throughput_fleet"] * last == pytest.approx(produced, rel=1e-6)


def test_a_warm_started_replay_measures_from_the_end_of_its_warm_up_to_its_last_response(target):
    """The warm-up (each client's opening turn, long and uncached, and whatever arrives
    before the last of them ends) is served but not measured; the window runs from its
    end through the drain."""
    result = simulate(target, Configuration(concurrency=6), AGENTIC, step_model_factory=fake_factory(),
                      capacity_model=fixed_capacity(3_000_000), num_requests=150, options=SimOptions(keep_rows=True))
    rows = result.rows
    opening = [r for r in rows if r["is_warmup"] and r["arrival_ms"] == 0.0]
    assert len(opening) == 6 and all(r["cached_tokens"] == 0 for r in opening)
    start = max(r["finish_ms"] for r in opening)
    assert all(r["is_warmup"] == (r["arrival_ms"] < start) for r in rows)
    assert all(r["is_measured"] != r["is_warmup"] for r in rows)
    assert result.num_requests == sum(not r["is_warmup"] for r in rows)
    end = max(r["finish_ms"] for r in rows)
    counted = result.metrics["output_throughput_fleet"] * (end - start) / 1000.0
    after = sum(r["output_tokens"] for r in rows if r["first_token_ms"] >= start)
    spanning = sum(r["output_tokens"] for r in rows if r["finish_ms"] > start)
    assert after <= counted * (1 + 1e-9) and counted <= spanning * (1 + 1e-9)
    measured = [r for r in rows if r["is_measured"]]
    hit = sum(r["cached_tokens"] for r in measured) / sum(r["prompt_tokens"] for r in measured)
    assert result.hit_rate["overall"] == pytest.approx(hit, abs=1e-6)


def test_a_session_replay_counts_requests_sent_so_its_drain_never_waits_on_think_time(target):
    """A turn still thinking when the budget's last request is sent is never sent (a
    benchmark counts what it sends): from the last arrival to the last response some
    request is always in service."""
    result = simulate(target, Configuration(concurrency=6), AGENTIC, step_model_factory=fake_factory(),
                      capacity_model=fixed_capacity(3_000_000), num_requests=150, options=SimOptions(keep_rows=True))
    rows = result.rows
    assert len(rows) == 150 == result.extra["requests_finished"]
    last_arrival = max(r["arrival_ms"] for r in rows)
    covered = last_arrival
    for row in sorted(rows, key=lambda r: r["arrival_ms"]):
        if row["finish_ms"] > covered:
            assert row["arrival_ms"] <= covered + 1e-6, "an idle gap in the drain"
            covered = row["finish_ms"]
    assert covered == max(r["finish_ms"] for r in rows)


def sessions(concurrency: int, count: int, seed: int = 0) -> dict[str, tuple]:
    """The first ``count`` non-empty sessions by label ("session k")."""
    workload = AgenticWorkload(load_profile(), concurrency, 262144)
    stream = workload.sessions(np.random.default_rng(seed))
    return {s.label: s.requests for s in (next(stream) for _ in range(count))}


def lengths(specs) -> list[tuple[int, int]]:
    return [(s.prompt_tokens, s.output_tokens) for s in specs]


def test_every_candidate_replays_the_same_sessions():
    few, many = sessions(4, 40), sessions(16, 40)
    assert few.keys() == many.keys()
    for label, cold in few.items():
        index, warm = int(label.split()[1]), many[label]
        if index < 4 or index >= 16:             # warm in both, or cold in both
            assert lengths(cold) == lengths(warm)
        else:                                    # cold for 4 clients, warm-started (mid-way) for 16
            assert 0 < len(warm) < len(cold) or len(cold) == 1
            assert lengths(cold)[len(cold) - len(warm):] == lengths(warm)
    other = sessions(4, 5, seed=1)
    assert [lengths(s) for s in other.values()] != [lengths(few[k]) for k in list(few)[:5]]


def test_fixed_length_replays_agree_fast_and_exact(target):
    config = Configuration(concurrency=32, chunked_prefill_size=1024)
    fast, _ = replay(target, config, WorkloadSpec("fixed", 8192, 256), exact=False, requests=320)
    exact, _ = replay(target, config, WorkloadSpec("fixed", 8192, 256), exact=True, requests=320)
    for key in KEYS:
        assert fast.metrics[key] == pytest.approx(exact.metrics[key], rel=RESULT_TOLERANCE), key


def test_a_prefill_asked_twice_is_priced_once_and_exactly():
    """The shared-pool fetch's overlap prices the prefill the rank later runs at the same
    shape (`simulator._network_load`): the second ask is the kept exact answer."""
    model = CurvedStepModel()
    pricer = StepPricer(model, exact=True)
    first = pricer.prefill_us(5_000, 1, 12_000.0)
    shape = StepShape(0, 0.0, 0.0, 5_000, 1, 12_000.0, 0.0, False)
    assert pricer.step_us(shape) == first == model.prefill_us(5_000, 1, 12_000.0)
    assert model.calls == 2 and pricer.calls == 1          # the direct check above is the second
