"""A replay is reused only when nothing it reads differs (predictor.sim.reuse): the
deployment it builds, its workload and seed, and every answer its step models gave."""

import pytest

from levers.configuration import Configuration
from predictor.sim import SimOptions, reuse, simulate
from predictor.sim.stop import StopRule
from predictor.workload import AGENTIC
from tests.predictor.sim.sim_fakes import FakeStepModel, fixed_capacity


class SlowerDecode(FakeStepModel):
    def decode_us(self, batch, context_tokens):
        return super().decode_us(batch, context_tokens) + 1.0


def factory_of(model_type):
    models: dict = {}

    def factory(config):
        return models.setdefault(config, model_type())
    factory.models = models
    return factory


def run(target, factory, config, **kwargs):
    return simulate(target, config, AGENTIC, step_model_factory=factory, num_requests=120,
                    capacity_model=fixed_capacity(3_000_000), **kwargs)


def fresh(target, factory, config, **kwargs):
    reuse.STORE.clear()
    return run(target, factory, config, **kwargs)


BASE = Configuration(concurrency=8)
UNSEEN = BASE.with_changes({"attention_backend": "triton"})   # the fake step model ignores it


def test_a_replay_whose_step_models_answer_alike_is_reused_and_equals_its_own_run(target):
    first = run(target, factory_of(FakeStepModel), BASE)
    second_factory = factory_of(FakeStepModel)
    reused = run(target, second_factory, UNSEEN)
    assert reuse.STORE.reused == 1
    assert second_factory.models[UNSEEN].calls > 0          # the check asked the new model
    own = fresh(target, factory_of(FakeStepModel), UNSEEN)
    assert reused.metrics == own.metrics == first.metrics and reused.extra == own.extra
    assert reused.hit_rate == own.hit_rate


def test_a_different_answer_or_deployment_or_seed_is_replayed(target):
    first = run(target, factory_of(FakeStepModel), BASE)
    slower = run(target, factory_of(SlowerDecode), UNSEEN)
    assert reuse.STORE.checked == 1 and reuse.STORE.reused == 0
    assert slower.metrics != first.metrics
    assert slower.metrics == fresh(target, factory_of(SlowerDecode), UNSEEN).metrics
    reuse.STORE.clear()
    run(target, factory_of(FakeStepModel), BASE)
    capped = run(target, factory_of(FakeStepModel), BASE.with_changes({"max_running_requests": 4}))
    other_seed = run(target, factory_of(FakeStepModel), BASE, seed=1)
    assert reuse.STORE.reused == 0 and capped.metrics != first.metrics and other_seed.metrics != first.metrics


def test_an_exact_replay_is_never_answered_by_a_fast_one(target):
    run(target, factory_of(FakeStepModel), BASE)
    run(target, factory_of(FakeStepModel), BASE, options=SimOptions(exact_prices=True))
    assert reuse.STORE.reused == 0


def test_a_run_its_stop_rules_did_not_stop_serves_the_run_without_them(target):
    loose = (StopRule("ttft_ms_mean", 1e12),)
    kept = run(target, factory_of(FakeStepModel), BASE, stop_rules=loose)
    assert "stopped_early" not in kept.extra
    plain = run(target, factory_of(FakeStepModel), BASE)
    assert reuse.STORE.reused == 1 and plain.metrics == kept.metrics
    tight = (StopRule("ttft_ms_mean", kept.metrics["ttft_ms_mean"] / 10),)
    stopped = run(target, factory_of(FakeStepModel), BASE, stop_rules=tight)
    assert "stopped_early" in stopped.extra
    again = run(target, factory_of(FakeStepModel), BASE, stop_rules=(StopRule("ttft_ms_mean", 2e12),))
    assert "stopped_early" not in again.extra and reuse.STORE.reused == 1   # other rules: replayed


def test_fingerprints_see_every_field_and_skip_only_node_ids():
    class Box:
        def __init__(self, value):
            self.value = value
            self.items = [value, {"k": value}]

    assert reuse.fingerprint(Box(1.0)) == reuse.fingerprint(Box(1.0))
    assert reuse.fingerprint(Box(1.0)) != reuse.fingerprint(Box(1.5))
    assert reuse.fingerprint(Box(1)) != reuse.fingerprint(Box(1.0))        # types count


def test_an_unknown_step_model_method_is_refused_loudly():
    recording = reuse.Recording()
    model = recording.factory(lambda config: FakeStepModel())(None)
    assert model.tokens_per_step == 1.0
    with pytest.raises(AttributeError, match="cannot check"):
        model.decode(1, 10.0)


def test_a_running_cap_or_kv_pool_the_replay_never_reached_is_the_same_replay(target):
    first = run(target, factory_of(FakeStepModel), BASE)
    bounds = next(iter(reuse.STORE._kept.values()))[1].bounds
    (demand, tokens), = bounds.peaks
    assert 0 < demand < BASE.max_running_requests and 0 < tokens < 3_000_000
    roomy = BASE.with_changes({"max_running_requests": demand})
    assert run(target, factory_of(FakeStepModel), roomy).metrics == first.metrics and reuse.STORE.reused == 1
    bigger_pool = simulate(target, BASE, AGENTIC, step_model_factory=factory_of(FakeStepModel), num_requests=120,
                           capacity_model=fixed_capacity(tokens))
    assert bigger_pool.metrics == first.metrics and reuse.STORE.reused == 2
    tight = BASE.with_changes({"max_running_requests": demand - 1})
    capped = run(target, factory_of(FakeStepModel), tight)
    assert reuse.STORE.reused == 2 and capped.metrics == fresh(target, factory_of(FakeStepModel), tight).metrics
    run(target, factory_of(FakeStepModel), BASE)
    small = simulate(target, BASE, AGENTIC, step_model_factory=factory_of(FakeStepModel), num_requests=120,
                     capacity_model=fixed_capacity(tokens - 1))
    assert reuse.STORE.reused == 2                 # one token short of its peak: replayed
