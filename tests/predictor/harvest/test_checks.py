"""Each harvest check fires on constructed bad data (METHOD §4) and passes good data."""

from levers.configuration import Configuration
from predictor.harvest.checks import (
    Outcome,
    check_decode_floor,
    check_decode_waves,
    check_engine_build,
    check_packed_probe,
    check_prefix_cache_lever,
    check_prefix_reuse,
    check_prompt_length,
    check_prompts_unique,
    check_weights,
    check_width,
    flags_of,
    loads_random_weights,
    probe_failures,
    refusals,
    serialised_batches,
)
from predictor.harvest.harvester import decode_floor_ms
from predictor.harvest.plan import HarvestRequest, plan_harvest
from predictor.harvest.sweeps import ProbeResult, WaveResult


def wave(batch, itl, serialised=False, spread=0.0):
    return WaveResult(batch=batch, prompt_tokens=128, itl_ms=itl, gaps=10 if itl else 0,
                      window_ms=-1.0 if serialised else 100.0, first_token_spread_ms=spread, serialised=serialised)


def test_prefix_caching_on_is_refused():
    config = Configuration(prefix_cache="on")
    assert check_prefix_cache_lever(config, {"prefix_cache"}).outcome is Outcome.REFUSE
    # the default "on" was not asked for: the launch turns caching off
    assert check_prefix_cache_lever(config, set()).outcome is Outcome.OK


def test_measured_prefix_reuse_refuses_or_flags():
    # a repeat 10x faster: the engine reuses prefixes
    shared = check_prefix_reuse(first_ms=500.0, repeat_ms=50.0, prompts_unique=False)
    assert shared.outcome is Outcome.REFUSE
    unique = check_prefix_reuse(first_ms=500.0, repeat_ms=50.0, prompts_unique=True)
    assert unique.outcome is Outcome.FLAG and unique.flag == "engine-reuses-prefixes"
    assert check_prefix_reuse(first_ms=500.0, repeat_ms=480.0, prompts_unique=False).outcome is Outcome.OK
    assert check_prompts_unique(2).outcome is Outcome.REFUSE
    assert check_prompts_unique(1).outcome is Outcome.OK


def test_random_weights_are_refused():
    assert loads_random_weights(["vllm", "serve", "m", "--load-format", "dummy"])
    assert loads_random_weights(["python", "-m", "atom.entrypoints.openai_server", "--load_dummy"])
    assert not loads_random_weights(["vllm", "serve", "dummy-model", "--load-format", "auto"])
    assert check_weights(True, ["sglang", "--load-format", "dummy"]).outcome is Outcome.REFUSE
    assert check_weights(True, ["sglang", "--model-path", "x"]).outcome is Outcome.OK
    endpoint = check_weights(False)
    assert endpoint.outcome is Outcome.FLAG and endpoint.flag == "weights-unverified"


def test_serialised_packing_is_flagged():
    # one at a time: 4 x 128 tokens arrive over 75% of the step, step 4x one 128-token prefill
    serial = ProbeResult(num_seqs=4, seq_tokens=128, step_ms=400.0, single_ms=310.0, fit_ms=300.0,
                         first_token_spread_ms=300.0)
    reasons = probe_failures(serial)
    assert len(reasons) == 1 and "one at a time" in reasons[0]   # the ratio checks alone pass (1.29x)
    check = check_packed_probe(serial)
    assert check.outcome is Outcome.FLAG and check.flag == "serialised-probe"
    # the 0.63-1.39x rule (METHOD §4): 2.0x one N-token sequence is serialisation
    slow = ProbeResult(4, 128, step_ms=620.0, single_ms=310.0, fit_ms=600.0, first_token_spread_ms=5.0)
    assert any("2.00x" in r for r in probe_failures(slow))
    # the fit must reproduce the widest step
    off_fit = ProbeResult(4, 128, step_ms=320.0, single_ms=310.0, fit_ms=150.0, first_token_spread_ms=5.0)
    assert any("fit predicts" in r for r in probe_failures(off_fit))
    packed = ProbeResult(4, 128, step_ms=320.0, single_ms=310.0, fit_ms=300.0, first_token_spread_ms=5.0)
    assert check_packed_probe(packed).outcome is Outcome.OK


def test_serialised_decode_waves_are_flagged():
    assert serialised_batches([wave(1, 10.0), wave(2, None, serialised=True), wave(4, None, serialised=True)]) == [2, 4]
    # not batched: the step grows like the batch (>= 0.9 b s(1))
    assert serialised_batches([wave(1, 10.0), wave(4, 38.0)]) == [4]
    assert serialised_batches([wave(1, 10.0), wave(4, 12.0), wave(8, 15.0)]) == []
    check = check_decode_waves([wave(1, 10.0), wave(2, None, serialised=True)])
    assert check.outcome is Outcome.FLAG and check.flag == "serialised-decode"


def test_prompt_length_must_be_the_recorded_one():
    assert check_prompt_length(128, [128, 128], []).outcome is Outcome.OK
    assert check_prompt_length(128, [], [130]).outcome is Outcome.OK              # usage, within 10%
    assert check_prompt_length(128, [300], []).outcome is Outcome.REFUSE
    unverified = check_prompt_length(128, [None], [None])
    assert unverified.outcome is Outcome.FLAG and unverified.flag == "prompt-length-unverified"


def test_width_and_build():
    assert check_width(Configuration(tp=8, ep=8), 8).outcome is Outcome.OK
    for bad in (Configuration(tp=8, pp=2), Configuration(replicas=2), Configuration(tp=16)):
        assert check_width(bad, 8).outcome is Outcome.REFUSE
    assert check_engine_build("unknown").flag == "engine-build-unknown"
    assert check_engine_build("vllm==0.11.0").outcome is Outcome.OK


def test_flags_and_refusals_collect():
    checks = [check_engine_build("unknown"), check_prompts_unique(3), check_weights(False)]
    assert flags_of(checks) == ("engine-build-unknown", "weights-unverified")
    assert [c.name for c in refusals(checks)] == ["unique-prompts"]


def test_a_decode_faster_than_reading_the_weights_is_refused():
    """A bursty endpoint gave Llama-3.1-8B on one H100 a 0.07 ms ITL where its weights alone
    take ~4.5 ms: refused; a real step above the floor passes; a CPU harvest has no floor."""
    plan = plan_harvest(HarvestRequest(engine="vllm", model="llama-3.1-8b", cluster="h100", config_text="tp=1",
                                       endpoint="http://127.0.0.1:1"))
    floor = decode_floor_ms(plan)
    assert 3.5 < floor < 5.5                    # 16 GB of BF16 weights at 3.35 TB/s: 4.8 ms
    assert check_decode_floor([wave(1, 0.0731), wave(2, 0.08)], floor).outcome is Outcome.REFUSE
    assert check_decode_floor([wave(1, 6.5)], floor).outcome is Outcome.OK
    assert check_decode_floor([wave(1, 0.0731)], None).outcome is Outcome.OK
    speculating = plan_harvest(HarvestRequest(engine="vllm", model="llama-3.1-8b", cluster="h100",
                                              config_text="tp=1,spec_method=ngram,spec_depth=3",
                                              endpoint="http://127.0.0.1:1"))
    assert decode_floor_ms(speculating) < floor / 3     # a token of a step that commits up to four
