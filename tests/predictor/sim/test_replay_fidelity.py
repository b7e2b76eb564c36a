"""Replay fidelity on agentic traffic (METHOD §5; the AgentX replay rules): with ample KV
capacity the DES's prefix hit rate is the workload's theoretical reuse (each prompt's
longest prefix shared with an earlier request of its session) within 2 points, and the
synthetic profile's reuse is the corpus's within 2 points; hit rates fall and TTFTs
rise as capacity shrinks; think times, warm starts (25-75% of the way in, first
replayed turn uncached) and live-session concurrency follow the rules."""

from importlib import resources

import numpy as np
import pytest

from levers.configuration import Configuration
from predictor.sim import AgenticWorkload, SimOptions, load_profile, load_trace, simulate
from predictor.sim.replications import seed_sequence
from predictor.sim.trace_base import skip_into
from tests.predictor.sim.sim_fakes import fake_factory, fixed_capacity

TRACES = resources.files("predictor") / "data" / "traces"
SHIPPED = ("agentic_trace_0277.json", "agentic_trace_0291.json", "agentic_trace_0538.json")
POINTS = 0.02                  # "within 2 points"
AMPLE = 100_000_000            # KV tokens: nothing is ever evicted
CAPACITIES = (AMPLE, 2_000_000, 800_000, 300_000)   # the smallest holds one 262k-token context
IDLE_GAP_CAP_US = 300e6


def reuse_of(requests_by_session: dict[int, list], block_tokens: int, counted=None) -> float:
    """Token-weighted theoretical reuse: each prompt's longest prefix shared with an
    earlier request of its session (a block id names its whole prefix, so the prefix is
    shared up to the last id already seen), capped at prompt - 1 as the engines cap hits;
    over the (session, position) pairs in ``counted`` if given (the measured requests)."""
    hit = total = 0
    for session, specs in requests_by_session.items():
        seen: set[int] = set()
        for position, spec in enumerate(specs):
            if counted is not None and (session, position) not in counted:
                seen.update(int(x) for x in spec.block_ids)
                continue
            ids = [int(x) for x in spec.block_ids]
            low, high = 0, len(ids)
            while low < high:
                middle = (low + high + 1) // 2
                low, high = (middle, high) if ids[middle - 1] in seen else (low, middle - 1)
            hit += min(low * block_tokens, max(0, spec.prompt_tokens - 1))
            total += spec.prompt_tokens
            seen.update(ids)
    return hit / total


@pytest.fixture
def shipped(tmp_path):
    for name in SHIPPED:
        (tmp_path / name).write_bytes((TRACES / name).read_bytes())
    return load_trace(tmp_path)


def replay(target, workload, capacity, concurrency, warm=True, requests=None):
    return simulate(target, Configuration(concurrency=concurrency), workload, step_model_factory=fake_factory(),
                    capacity_model=fixed_capacity(capacity), num_requests=requests,
                    options=SimOptions(keep_rows=True, warm_start=warm))


def replayed_specs(result, sessions) -> dict[int, list]:
    """The specs the replay released, by live session, in session order."""
    by_session: dict[int, list] = {}
    for row in sorted(result.rows, key=lambda r: (r["session"], r["index_in_session"])):
        by_session.setdefault(row["session"], []).append(sessions[row["session"]].requests[row["index_in_session"]])
    return by_session


def measured_positions(result) -> set[tuple[int, int]]:
    """(session, position in `replayed_specs`) of the measured requests: a warm-started
    replay does not measure its warm-up."""
    positions, rank = set(), {}
    for row in sorted(result.rows, key=lambda r: (r["session"], r["index_in_session"])):
        position = rank[row["session"]] = rank.get(row["session"], -1) + 1
        if row["is_measured"]:
            positions.add((row["session"], position))
    return positions


def synthetic_sessions(workload, count):
    rng = np.random.default_rng(seed_sequence(0, 0).spawn(2)[0])       # the replay's workload generator
    stream = workload.sessions(rng)
    return [next(stream) for _ in range(count)]


@pytest.mark.parametrize("warm", [False, True])
def test_shipped_sessions_with_ample_capacity_hit_their_theoretical_reuse(target, shipped, warm):
    result = replay(target, shipped, AMPLE, concurrency=len(SHIPPED), warm=warm)
    sessions = [skip_into(s, f) for s, f in zip(shipped.trace_sessions, _fractions(shipped))] if warm \
        else list(shipped.trace_sessions)
    theoretical = reuse_of(replayed_specs(result, sessions), shipped.block_tokens, measured_positions(result))
    assert result.hit_rate["overall"] == pytest.approx(theoretical, abs=POINTS)
    if not warm:     # the whole corpus sample: every request replayed
        assert result.extra["requests_finished"] == shipped.num_requests
        assert theoretical == pytest.approx(reuse_of({i: s.requests for i, s in enumerate(shipped.trace_sessions)},
                                                     shipped.block_tokens), abs=1e-9)


def _fractions(trace):
    """The warm-start fractions the replay draws (the workload generator of seed 0)."""
    base = int(np.random.default_rng(seed_sequence(0, 0).spawn(2)[0]).integers(1 << 62))
    return [np.random.default_rng([base, i]).uniform(0.25, 0.75) for i in range(len(trace.trace_sessions))]


def test_warm_started_sessions_start_mid_way_with_their_first_replayed_turn_uncached(target, shipped):
    result = replay(target, shipped, AMPLE, concurrency=len(SHIPPED))
    for session, original in zip(sorted({r["session"] for r in result.rows}), shipped.trace_sessions):
        rows = sorted((r for r in result.rows if r["session"] == session), key=lambda r: r["index_in_session"])
        assert 0.25 * len(original.requests) - 1 <= len(original.requests) - len(rows) <= 0.75 * len(original.requests)
        assert rows[0]["cached_tokens"] == 0 and rows[0]["prompt_tokens"] > original.requests[0].prompt_tokens


def test_the_synthetic_profile_reproduces_the_corpus_reuse(target):
    profile = load_profile()
    cold = AgenticWorkload(profile, concurrency=8, max_context_tokens=profile.max_context_tokens, warm_start=False)
    corpus = profile.theoretical_reuse["token_weighted_same_stream_all"]
    sessions = synthetic_sessions(cold, 400)
    assert reuse_of({i: s.requests for i, s in enumerate(sessions)}, profile.block_tokens) == \
        pytest.approx(corpus, abs=POINTS)
    warm = AgenticWorkload(profile, concurrency=8, max_context_tokens=profile.max_context_tokens)
    result = replay(target, warm, AMPLE, concurrency=8, requests=1500)
    theoretical = reuse_of(replayed_specs(result, synthetic_sessions(warm, 200)), profile.block_tokens,
                           measured_positions(result))
    assert result.hit_rate["overall"] == pytest.approx(theoretical, abs=POINTS)


@pytest.mark.parametrize("source", ["shipped", "synthetic"])
def test_hits_fall_and_ttft_rises_as_capacity_shrinks(target, shipped, source):
    profile = load_profile()
    workload = shipped if source == "shipped" else \
        AgenticWorkload(profile, concurrency=6, max_context_tokens=profile.max_context_tokens)
    results = [replay(target, workload, capacity, concurrency=len(SHIPPED) if source == "shipped" else 6,
                      warm=False, requests=None if source == "shipped" else 600) for capacity in CAPACITIES]
    hits = [r.hit_rate["overall"] for r in results]
    ttfts = [r.metrics["ttft_ms_mean"] for r in results]
    assert all(later <= earlier + 0.005 for earlier, later in zip(hits, hits[1:])), hits
    assert hits[-1] < hits[0] - 0.01, hits
    assert ttfts[-1] > ttfts[0], ttfts


@pytest.mark.parametrize("source", ["shipped", "synthetic"])
def test_think_times_are_replayed_per_session_and_idle_gaps_capped(target, shipped, source):
    profile = load_profile()
    workload = shipped if source == "shipped" else \
        AgenticWorkload(profile, concurrency=4, max_context_tokens=profile.max_context_tokens)
    result = replay(target, workload, AMPLE, concurrency=len(SHIPPED) if source == "shipped" else 4, warm=False,
                    requests=None if source == "shipped" else 400)
    sessions = list(shipped.trace_sessions) if source == "shipped" else synthetic_sessions(workload, 100)
    rows = {(r["session"], r["index_in_session"]): r for r in result.rows}
    checked = 0
    for (session, index), row in rows.items():
        spec = sessions[session].requests[index]
        assert spec.think_us <= IDLE_GAP_CAP_US
        if spec.deps and all((session, d) in rows for d in spec.deps):
            ready_ms = max(rows[session, d]["finish_ms"] for d in spec.deps) + spec.think_us / 1e3
            assert row["arrival_ms"] == pytest.approx(ready_ms, abs=1e-3)
            checked += 1
    assert checked > 0.8 * len(rows)


def test_concurrency_counts_live_session_trees(target):
    """Subagents run inside their session's slot: live sessions never exceed the clients,
    while one session's sibling subagents run side by side (a fan-out counts once)."""
    profile = load_profile()
    workload = AgenticWorkload(profile, concurrency=3, max_context_tokens=profile.max_context_tokens)
    result = replay(target, workload, AMPLE, concurrency=3, requests=1500)
    for row in result.rows:
        start = row["arrival_ms"]
        assert len({r["session"] for r in result.rows if r["arrival_ms"] <= start < r["finish_ms"]}) <= 3
    streams: dict[tuple[int, int, str], list[float]] = {}    # (session, group, subagent) -> span
    group = 0
    for row in sorted(result.rows, key=lambda r: (r["session"], r["index_in_session"])):
        if row["label"].startswith("turn"):
            group += 1                      # a group follows the parent turn that opens it
            continue
        span = streams.setdefault((row["session"], group, row["label"].split(" turn")[0]), [row["arrival_ms"], 0.0])
        span[0], span[1] = min(span[0], row["arrival_ms"]), max(span[1], row["finish_ms"])
    side_by_side = [(a, b) for a in streams for b in streams if a < b and a[:2] == b[:2]
                    and streams[a][0] < streams[b][1] and streams[b][0] < streams[a][1]]
    assert side_by_side
