"""Session bookkeeping: ranking (SLO-meeting first), duplicates, both stop rules."""

import math

from agent.ranking import nearest_misses
from agent.search import SearchSettings, run_search
from agent.session import STALE_FRACTION
from agent.trial import Phase
from tests.agent.tune_fakes import make_session


def test_an_slo_meeting_trial_beats_a_faster_one_that_misses():
    session = make_session(slos=("tpot<=14",))
    fast = session.propose({"concurrency": 1024}, Phase.SEED)   # load 128: tpot 18 ms, throughput 1000
    slow = session.propose({"concurrency": 256}, Phase.SEED)    # load 32: tpot 12 ms, throughput 500
    assert fast.objective_value > slow.objective_value
    assert fast.slo_met is False and slow.slo_met is True
    assert session.best() is slow and session.leader is slow


def test_when_nothing_meets_the_slos_best_is_none_and_misses_are_ranked_by_distance():
    session = make_session(slos=("tpot<=5",))
    far = session.propose({"concurrency": 1024}, Phase.SEED)    # tpot 18: miss 2.6
    near = session.propose({"concurrency": 8}, Phase.SEED)      # tpot 10.06: miss 1.0125
    assert session.best() is None
    assert [t.index for t in nearest_misses(session.trials, 5)] == [near.index, far.index]
    assert near.miss_distance < far.miss_distance


def test_a_duplicate_is_recorded_not_repriced():
    session = make_session()
    predictor = session.context.predict_fn
    first = session.propose({"kv_cache_dtype": "fp8"}, Phase.PLANNER)
    again = session.propose({"kv_cache_dtype": "fp8"}, Phase.INVESTIGATOR)
    assert again.duplicate_of == first.index and again.metrics == first.metrics
    assert len(predictor.calls) == 1 and len(session.trials) == 2


def test_budget_stop_rule():
    session = make_session(budget=12)
    outcome = run_search(session, SearchSettings(budget=12, no_llm=True), None)
    assert len(session.trials) == 12
    assert outcome.stop_reason == "budget: all 12 trials spent"


def test_stale_stop_rule_fires_after_70_percent_of_the_budget_without_a_new_best():
    session = make_session(budget=40, objective="gpus_per_replica")  # metric absent: nothing is priced
    outcome = run_search(session, SearchSettings(budget=40, no_llm=True), None)
    assert len(session.trials) == math.ceil(STALE_FRACTION * 40) == 28
    assert outcome.stop_reason.startswith("stale: the best trial has not changed for 28 trials")
    assert outcome.best is None


def test_stale_counts_from_the_last_change_of_the_leader():
    session = make_session(budget=10)
    session.propose({"concurrency": 512}, Phase.SEED)            # the leader: throughput 1000
    for concurrency in (8, 16, 24, 32, 40, 48):
        session.propose({"concurrency": concurrency}, Phase.SEED)  # all worse
    assert session.stop_reason() is None                          # 6 unchanged < 7
    session.propose({"concurrency": 56}, Phase.SEED)
    assert session.stop_reason().startswith("stale: the best trial has not changed for 7 trials")


def test_max_sustainable_concurrency_proposals_that_differ_in_concurrency_alone_are_one_trial():
    """The objective searches the concurrency itself (agent.sustainable): proposals at 1
    and at 4 clients of one configuration are the same trial (a duplicate of the first),
    so the confirm step replicates each configuration once."""
    from agent.sustainable import METRIC

    session = make_session(objective=METRIC)
    predictor = session.context.predict_fn
    first = session.propose({"concurrency": 1}, Phase.SEED)
    calls = len(predictor.calls)
    again = session.propose({"concurrency": 4}, Phase.SEED)
    assert again.duplicate_of == first.index and len(predictor.calls) == calls
    assert session.has_seen(first.config) and session.has_seen(first.config.with_changes({"concurrency": 64}))
    other = make_session()
    one = other.propose({"concurrency": 1}, Phase.SEED)
    assert other.propose({"concurrency": 4}, Phase.SEED).duplicate_of is None and one.duplicate_of is None


def test_equal_values_of_a_metric_no_replication_spreads_are_ties():
    """A deterministic metric (the GPUs a replica takes) or a single replication has no
    interval: equal values tie, different ones do not (a cost search listed eight
    trials at 8 GPUs as one best and seven '-')."""
    from agent.ranking import ties_with
    from agent.trial import Trial
    from levers.configuration import Configuration

    def trial(tp, gpus, intervals=None):
        return Trial(phase=Phase.SEED, config=Configuration(tp=tp), proposed=None, legal=True,
                     metrics={"gpus_per_replica": gpus}, slo_met=True, objective_value=gpus, seed_intervals=intervals)

    best, same, other = trial(8, 8.0), trial(4, 8.0), trial(2, 2.0)
    assert ties_with(best, [best, same, other], "gpus_per_replica") == [same]
    spread = trial(1, 7.9, {"gpus_per_replica": (7.5, 8.2)})
    assert ties_with(best, [spread], "gpus_per_replica") == [spread]     # a point inside an interval


def test_a_max_sustainable_concurrency_search_prices_each_configuration_once_and_resumes():
    """Round 0's concurrency ladder is one configuration for this objective (the
    evaluation searches the concurrency): priced once, not nine times as nine trials; and
    a resumed search replays its trials, whose recorded concurrency is the one found, not
    the one asked (it replayed none and diverged at trial 0)."""
    from agent.resume import Replay
    from agent.sustainable import METRIC

    session = make_session(objective=METRIC, budget=40)
    run_search(session, SearchSettings(budget=40, no_llm=True), None)
    keys = [session.key(t.config) for t in session.trials
            if t.config is not None and t.duplicate_of is None and t.phase is not Phase.CONFIRM]
    assert keys and len(keys) == len(set(keys))
    again = make_session(objective=METRIC, budget=40)
    replay = Replay(list(session.trials), None, 0)
    from agent.pricing import Pricer
    from agent.resume import ReplayPricer
    with ReplayPricer(Pricer(again.context), replay, again) as pricer:
        run_search(again, SearchSettings(budget=40, no_llm=True), None, pricer=pricer, replay=replay)
    assert replay.diverged_at is None and replay.num_replayed == len(session.trials)
    assert [t.config for t in again.trials] == [t.config for t in session.trials]
