"""The mix planner (METHOD §7): qualification at half the TTFT cap, the 5% band with the
headroom tie-break, unmet tiers with their nearest miss, disaggregated and colocated
candidates in one slot, one evaluation shared by every tier, the seed planner's spread,
and the plan's ledgers.

The predictor is a fake with hand-set metrics (the planner's logic is under test, not
the DES); the integration run with the real predictor is in test_mix_cli.py.
"""

import json

import pytest

from agent.mix.candidates import (
    AUTO_QUOTAS,
    MAX_AUTO_CONCURRENCY,
    CandidateTask,
    EvalSettings,
    auto_candidates,
    search_context,
    spread,
)
from agent.mix.config import DEFAULT_TIERS, parse_mix_text
from agent.mix.planner import plan_mix
from agent.mix.selection import choose, score
from agent.seed_planner import is_legal
from agent.trial import Phase, Trial
from ledgers.model import Ledger
from levers.configuration import Configuration
from levers.errors import InputError
from predictor.prediction import Prediction
from predictor.step.cost import Mode
from predictor.target import resolve_target
from predictor.workload import AGENTIC, parse_workload

TOLERANCE = 1e-9

# (disaggregated, concurrency) -> (throughput per GPU, interactivity p50 tok/s, mean TTFT ms)
FAKE_METRICS = {
    (False, 4): (400.0, 180.0, 300.0),    # realtime: 180 >= 150 and 0.3 s <= 0.5 s
    (True, 4): (450.0, 160.0, 600.0),     # realtime only under the full cap: 0.6 s > 0.5 s
    (True, 16): (1500.0, 90.0, 1000.0),   # interactive winner (1.0 s <= 1.25 s)
    (False, 64): (2000.0, 60.0, 900.0),   # too slow per user for interactive; best for bulk
}


def fake_predict(target, config, workload, *, store=None, need_distribution=False, seed=0, num_requests=None,
                 replications=1):
    """Hand-set metrics by (disaggregated, concurrency); asserts the planner asks for the DES
    with 40 requests per client, at most 1024."""
    assert need_distribution and workload.kind == "agentic"
    assert num_requests == min(1024, 40 * config.concurrency)
    throughput, interactivity, ttft_ms = FAKE_METRICS[(config.disaggregated, config.concurrency)]
    metrics = {"output_throughput_per_gpu": throughput, "throughput_per_gpu": 50 * throughput,
               "interactivity_p50": interactivity, "ttft_ms_mean": ttft_ms, "interactivity_mean": interactivity}
    intervals = {k: (0.99 * v, 1.01 * v) for k, v in metrics.items()} if replications > 1 else {}
    return Prediction(True, (), Mode.RANK_ONLY, None, ("rank-only",), metrics, None, source="des",
                      seed_intervals=intervals)


class CountingPredict:
    def __init__(self):
        self.calls = []

    def __call__(self, target, config, workload, **options):
        self.calls.append((target.card.name, config))
        return fake_predict(target, config, workload, **options)


GPT_OSS_CANDIDATES = """
models:
  - name: gpt-oss-120b
    max_gpus: 8
    candidates:
      - {tp: 2, replicas: 4, concurrency: 4}
      - {tp: 2, replicas: 4, concurrency: 64}
      - {disaggregated: true, prefill_layout: TP2, decode_layout: TP2/EP2/DP2, concurrency: 4}
      - {disaggregated: true, prefill_layout: TP2, decode_layout: TP2/EP2/DP2, concurrency: 16}
      - {tp: 8, concurrency: 4}
"""


# -- selection on constructed sets ------------------------------------------------------------


def trial(throughput, interactivity=None, ttft_ms=None):
    metrics = {"output_throughput_per_gpu": throughput}
    if interactivity is not None:
        metrics["interactivity_p50"] = interactivity
    if ttft_ms is not None:
        metrics["ttft_ms_mean"] = ttft_ms
    return Trial(phase=Phase.SEED, config=Configuration(), proposed=None, legal=True, mode="anchored",
                 metrics=metrics, objective_value=throughput, score=throughput, source="des")


def task(concurrency):
    return CandidateTask("gpt-oss-120b", "mi355x", "vllm", "agentic", Configuration(concurrency=concurrency))


def test_qualification_uses_half_the_ttft_cap():
    realtime = DEFAULT_TIERS["realtime"]  # >= 150 tok/s, TTFT cap 1 s -> qualify at <= 0.5 s
    under_full_cap = score(realtime, task(1), trial(100.0, 200.0, 600.0))
    under_half_cap = score(realtime, task(2), trial(100.0, 200.0, 450.0))
    assert not under_full_cap.qualifies
    assert under_full_cap.miss == pytest.approx(600.0 / 500.0 - 1.0, abs=TOLERANCE)
    assert under_half_cap.qualifies
    # headroom = min(200/150 - 1, 1 - 0.45/0.5) = min(0.333, 0.1)
    assert under_half_cap.headroom == pytest.approx(0.1, abs=TOLERANCE)


def test_five_percent_band_picks_the_most_headroom():
    interactive = DEFAULT_TIERS["interactive"]  # >= 70 tok/s, qualify at TTFT <= 1.25 s
    candidates = [
        (task(1), trial(1000.0, 73.5, 500.0)),    # best throughput, headroom 0.05
        (task(2), trial(960.0, 91.0, 500.0)),     # 4% below the best, headroom 0.30: the pick
        (task(3), trial(940.0, 140.0, 125.0)),    # 6% below: outside the band despite headroom 0.9
        (task(4), trial(3000.0, 50.0, 100.0)),    # fastest, but misses the floor
        (task(5), trial(500.0, 80.0, 1200.0)),
        (task(6), trial(450.0, 80.0, 1200.0)),
        (task(7), trial(400.0, 80.0, 1200.0)),
    ]
    choice = choose(interactive, candidates)
    assert choice.met and choice.pick.task.config.concurrency == 2
    assert choice.pick.headroom == pytest.approx(min(91.0 / 70.0 - 1.0, 1.0 - 0.5 / 1.25), abs=TOLERANCE)
    # short list: the pick, then the other qualifiers by throughput, five in all
    assert [s.task.config.concurrency for s in choice.short_list] == [2, 1, 3, 5, 6]
    assert (choice.num_priced, choice.num_qualified) == (7, 6)


def test_bulk_has_no_bound_and_picks_the_best_throughput():
    choice = choose(DEFAULT_TIERS["bulk"], [(task(1), trial(900.0, 5.0, 9e5)), (task(2), trial(1000.0))])
    assert choice.pick.task.config.concurrency == 2 and choice.pick.headroom is None


def test_a_tier_nothing_meets_reports_the_nearest_miss():
    realtime = DEFAULT_TIERS["realtime"]
    choice = choose(realtime, [
        (task(1), trial(900.0, 100.0, 400.0)),    # 33% short of the floor
        (task(2), trial(500.0, 140.0, 550.0)),    # 6.7% short + 10% over half the cap: nearest
        (task(3), trial(800.0)),                  # statistics not predicted: never qualifies
    ])
    assert not choice.met and choice.pick is None and choice.short_list == ()
    assert choice.nearest_miss.task.config.concurrency == 2
    assert choice.nearest_miss.miss == pytest.approx((1 - 140 / 150) + (550 / 500 - 1), abs=TOLERANCE)


def test_illegal_candidates_are_never_chosen():
    illegal = Trial(phase=Phase.SEED, config=Configuration(), proposed=None, legal=False, reasons=("memory",))
    assert choose(DEFAULT_TIERS["bulk"], [(task(1), illegal)]).nearest_miss is None


# -- the planner with a fake predictor -----------------------------------------------------


def picks(report):
    return {(s.entry.name, s.tier.name): s.choice for s in report.slots}


def test_disaggregated_and_colocated_compete_in_one_slot_across_worker_processes():
    spec = parse_mix_text(GPT_OSS_CANDIDATES.replace("      - {tp: 8, concurrency: 4}\n", ""))
    report = plan_mix(spec, predict_fn=fake_predict, workers=2, write_ledger=False)
    chosen = picks(report)
    realtime, interactive = chosen["gpt-oss-120b", "realtime"], chosen["gpt-oss-120b", "interactive"]
    # realtime: the split's 0.6 s TTFT is under the 1 s cap but not under half of it
    assert [s.task.config.disaggregated for s in realtime.short_list] == [False]
    assert interactive.pick.task.config.disaggregated and interactive.pick.task.config.concurrency == 16
    assert [(s.task.config.disaggregated, s.task.config.concurrency) for s in interactive.short_list] == [
        (True, 16), (True, 4), (False, 4)]
    responsive = chosen["gpt-oss-120b", "responsive"]
    assert not responsive.pick.task.config.disaggregated  # colocated at 64 beats the splits
    assert {s.task.config.disaggregated for s in responsive.short_list} == {False, True}
    assert report.candidates_evaluated == 4


def test_tiers_and_repeated_entries_share_one_evaluation():
    text = GPT_OSS_CANDIDATES + "  - name: openai/gpt-oss-120b\n    tiers: [bulk]\n    candidates:\n" \
                                "      - {tp: 2, replicas: 4, concurrency: 64}\n"
    counting = CountingPredict()
    report = plan_mix(parse_mix_text(text), predict_fn=counting, workers=1, write_ledger=False)
    assert len(counting.calls) == 5 == report.candidates_evaluated
    assert len(report.slots) == 4 + 1
    bulk_alone = next(s for s in report.slots if s.entry.index == 1)
    assert bulk_alone.choice.pick.throughput_per_gpu == pytest.approx(2000.0, abs=TOLERANCE)


def test_max_gpus_excludes_larger_candidates_before_pricing():
    text = GPT_OSS_CANDIDATES.replace("max_gpus: 8", "max_gpus: 4")
    counting = CountingPredict()
    report = plan_mix(parse_mix_text(text), predict_fn=counting, workers=1, write_ledger=False)
    # tp=2 x 4 replicas and tp=8 use 8 GPUs; the TP2+TP2 splits use 4
    assert report.to_json()["excluded_by_max_gpus"] == 3
    assert {config.total_gpus for _, config in counting.calls} == {4}


def test_a_model_that_fits_nowhere_on_its_cluster_is_a_clear_input_error():
    with pytest.raises(InputError) as caught:
        plan_mix(parse_mix_text("models: [{name: gpt-oss-120b}, {name: kimi-k3, cluster: h100x1}]"),
                 predict_fn=fake_predict, workers=1, write_ledger=False)
    assert caught.value.message.startswith("models.yaml: models[1]: Kimi-K3 does not fit on h100x1")
    assert "(accepted: a larger cluster: for this model" in caught.value.message


def test_report_json_and_ledgers(isolated_home):
    report = plan_mix(parse_mix_text(GPT_OSS_CANDIDATES), predict_fn=fake_predict, workers=1,
                      command_line=["inferasim", "plan-mix", "models.yaml"])
    data = json.loads(json.dumps(report.to_json()))
    assert {"slots", "candidates_evaluated", "wall_s", "ledgers"} <= set(data)
    assert [(s["model"], s["tier"], s["met"]) for s in data["slots"]] == [
        ("gpt-oss-120b", "realtime", True), ("gpt-oss-120b", "interactive", True),
        ("gpt-oss-120b", "responsive", True), ("gpt-oss-120b", "bulk", True)]
    realtime = data["slots"][0]
    # two colocated qualifiers at 400 tok/s/GPU tie on headroom too: the first listed wins
    assert realtime["pick"]["configuration_text"] == "tp=2,replicas=4,concurrency=4"
    assert realtime["pick"]["ttft_s"] == pytest.approx(0.3, abs=TOLERANCE)
    assert realtime["pick"]["headroom"] == pytest.approx(0.2, abs=TOLERANCE)
    (path,) = report.ledger_paths
    assert path.parent == isolated_home / "ledgers"
    ledger = Ledger.model_validate(json.loads(path.read_text()))
    assert ledger.model == "gpt-oss-120b" and len(ledger.trials) == 5 == data["candidates_evaluated"]
    assert ledger.best.objective_value == pytest.approx(2000.0, abs=TOLERANCE)
    assert ledger.trials[2].proposed["disaggregated"] is True
    # its own candidates' pricing time, not the whole run's
    assert ledger.stats.wall_s == pytest.approx(sum(t.wall_ms for t in ledger.trials) / 1000, abs=1e-3)


def test_des_requests_follow_the_clients_up_to_the_cap():
    settings = EvalSettings(fake_predict, max_requests=1000)
    assert [settings.requests_for(task(c)) for c in (1, 16, 25, 64)] == [40, 640, 1000, 1000]
    fixed = CandidateTask("gpt-oss-120b", "mi355x", "vllm", "1k/1k", Configuration(concurrency=16))
    assert settings.requests_for(fixed) == 160  # the DES's fixed-length default, 10 per client


# -- auto candidates -----------------------------------------------------------------------


def test_spread_keeps_first_and_last_evenly():
    assert spread([1, 4, 16, 32, 128, 256], 4) == [1, 16, 32, 256]
    assert spread([1, 4, 16, 32, 128, 256], 5) == [1, 4, 16, 128, 256]
    assert spread([1, 2], 4) == [1, 2] and spread([1, 2, 3], 1) == [1] and spread([], 3) == []


def test_auto_candidates_span_layouts_loads_and_disaggregation_within_the_budget():
    target = resolve_target("gpt-oss-120b", "mi355x", "vllm")
    configs = auto_candidates(target, AGENTIC, max_gpus=8)
    assert configs == auto_candidates(target, AGENTIC, max_gpus=8)  # deterministic
    assert 8 <= len(configs) <= sum(AUTO_QUOTAS.values())
    assert len(set(configs)) == len(configs)
    assert all(c.total_gpus <= 8 and c.concurrency <= MAX_AUTO_CONCURRENCY for c in configs)
    assert {c.disaggregated for c in configs} == {False, True}
    assert len({c.tp for c in configs if not c.disaggregated}) >= 3
    assert len({c.concurrency for c in configs}) >= 4
    small = auto_candidates(target, AGENTIC, max_gpus=2)
    assert small and all(c.total_gpus <= 2 for c in small)


def test_every_reported_metric_carries_its_replication_interval_and_overlaps_are_ties():
    report = plan_mix(parse_mix_text(GPT_OSS_CANDIDATES), predict_fn=fake_predict, workers=1, write_ledger=False)
    data = json.loads(json.dumps(report.to_json()))
    responsive = data["slots"][2]
    for entry in [responsive["pick"], *responsive["short_list"]]:
        assert entry["replications"] == 3
        low, high = entry["intervals"]["output_throughput_per_gpu"]
        assert low < entry["output_throughput_per_gpu"] < high      # the fake's +-1%
        assert set(entry["intervals"]) >= {"output_throughput_per_gpu", "interactivity", "ttft_s"}
    pick = responsive["pick"]["output_throughput_per_gpu"]
    for entry in responsive["short_list"][1:]:
        assert entry["ties_pick"] == (entry["output_throughput_per_gpu"] * 1.01 >= pick * 0.99)


def test_candidates_that_are_one_deployment_as_priced_are_priced_once():
    """Llama-3.1-70B on H100 under vLLM: its anchor ran fp8, so `tp=2` (unset precisions
    take the anchor's recipe) and `tp=2, weight_dtype=fp8` are one deployment; they were
    priced twice and filled two places of a short list with the same numbers."""
    from agent.mix.config import parse_mix_text
    from agent.mix.planner import build_tasks
    from predictor.predict import default_store

    spec = parse_mix_text("models:\n  - name: llama-3.1-70b\n    cluster: h100x8\n    engines: [vllm]\n"
                          "    workload: 1k/1k\n    candidates:\n"
                          "      - {tp: 2, replicas: 4, concurrency: 64}\n"
                          "      - {tp: 2, replicas: 4, weight_dtype: fp8, concurrency: 64}\n"
                          "      - {tp: 4, replicas: 2, concurrency: 64}\n")
    per_entry, excluded, merged = build_tasks(spec, default_store().has_anchor)
    assert merged == {0: 1} and excluded == {0: 0}
    assert [task.config.weight_dtype for task in per_entry[0]] == [None, None]
    assert [task.config.tp for task in per_entry[0]] == [2, 4]


def test_candidates_are_sized_at_the_precisions_they_are_priced_at():
    """plan-mix's seeds and listed candidates pass the memory check a search uses: Llama-3.1-70B
    on H100 under vLLM at its anchors' FP8 recipe, not its checkpoint's BF16."""
    context = search_context(resolve_target("llama-3.1-70b", "h100x8", "vllm"), parse_workload("2k/256"))
    assert is_legal(context, Configuration(replicas=8))
    assert is_legal(context, Configuration(tp=2, replicas=4, kv_memory_fraction=0.8))
