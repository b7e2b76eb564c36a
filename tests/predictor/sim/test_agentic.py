"""The synthetic agentic profile: sourced parameters, growing sessions, subagent joins."""

import itertools

import numpy as np
import pytest

from levers.configuration import Configuration
from predictor.sim import AgenticWorkload, as_workload, load_profile, simulate
from predictor.workload import AGENTIC
from tests.predictor.sim.sim_fakes import fake_factory, fixed_capacity


def sessions(count: int, seed: int = 0, warm: bool = False, context: int = 262144):
    workload = AgenticWorkload(load_profile(), concurrency=count, max_context_tokens=context, warm_start=warm)
    stream = workload.sessions(np.random.default_rng(seed))
    return [next(stream) for _ in range(count)]


def test_every_parameter_names_its_source():
    profile = load_profile()
    for name in ("turns_per_session", "first_prompt_tokens", "new_tokens_per_turn", "output_tokens", "think_time_s"):
        assert "shared/data/traces" in getattr(profile, name).source
    assert profile.think_time_s.cap == 300.0
    assert profile.subagents.group_probability_per_turn.value == pytest.approx(1697 / 56798, rel=1e-3)


def test_parent_turns_grow_and_reuse_the_previous_prompt():
    for session in sessions(20):
        parents = [s for s in session.requests if s.label.startswith("turn")]
        for before, after in itertools.pairwise(parents):
            assert after.prompt_tokens > before.prompt_tokens
            n = len(before.block_ids)
            assert np.array_equal(after.block_ids[:n], before.block_ids)
        assert all(s.prompt_tokens + s.output_tokens <= 262144 for s in session.requests)


def test_subagent_groups_fan_out_and_the_parent_joins_them():
    found = 0
    for session in sessions(200, seed=1):
        specs = session.requests
        for index, spec in enumerate(specs):
            if spec.label.startswith("turn") and len(spec.deps) > 1:
                found += 1
                assert all(specs[d].label.startswith("subagent") for d in spec.deps)
    assert found > 0


def test_median_statistics_follow_the_profile():
    specs = [s for session in sessions(300, seed=2) for s in session.requests]
    outputs = np.array([s.output_tokens for s in specs])
    assert np.median(outputs) == pytest.approx(216, rel=0.15)
    thinks = np.array([s.think_us for s in specs if s.deps]) / 1e6
    assert np.all(thinks <= 300.0)


def test_warm_start_skips_into_the_session():
    cold = sessions(30, seed=5)
    warm = sessions(30, seed=5, warm=True)
    assert np.mean([len(s.requests) for s in warm]) < np.mean([len(s.requests) for s in cold])
    assert np.mean([s.requests[0].prompt_tokens for s in warm]) > np.mean([s.requests[0].prompt_tokens for s in cold])


def test_the_named_agentic_workload_runs_with_a_high_hit_rate(target):
    config = Configuration(concurrency=4)
    assert isinstance(as_workload(AGENTIC, config, target), AgenticWorkload)
    result = simulate(target, config, AGENTIC, step_model_factory=fake_factory(),
                      capacity_model=fixed_capacity(4_000_000), num_requests=120)
    assert result.extra["requests_finished"] == 120
    assert result.hit_rate["overall"] > 0.8
    assert result.metrics["ttft_ms_p99"] > result.metrics["ttft_ms_p50"]


def test_block_ids_name_their_prefixes_and_a_parents_turns_are_ranges():
    """A block id names its whole prefix (what the prefix caches rely on) across a
    session's turns and subagents, ids never repeat across sessions, and a parent turn's
    ids come as a ``range`` (consecutive by construction: the caches store it as one run)."""
    owners: dict[int, int] = {}
    for index, session in enumerate(sessions(60, seed=3)):
        before: dict[int, int | None] = {}      # one predecessor per id: it names its prefix
        for spec in session.requests:
            ids = [int(k) for k in spec.block_ids]
            if spec.label.startswith("turn"):
                assert type(spec.block_ids) is range
            for previous, block in zip([None, *ids], ids):
                assert before.setdefault(block, previous) == previous
                assert owners.setdefault(block, index) == index
    assert len(owners) > 1000
