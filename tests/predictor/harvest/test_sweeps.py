"""TTFT and ITL extraction, the single-wave median, the prefill fit and the probe, on
constructed streams with known numbers (times in seconds, as the client records them)."""

import random

import pytest

from predictor.harvest.client import ReplayClient, RequestTrace, run_wave
from predictor.harvest.prompts import PromptFactory, shared_prefix_words
from predictor.harvest.sweeps import (
    decode_wave,
    host_time_ms,
    prefill_from_samples,
    probe_from_traces,
    wave_gaps_s,
)


def trace(sent, first, gap, tokens, finish="length"):
    return RequestTrace(sent_s=sent, token_times_s=tuple(first + i * gap for i in range(tokens)),
                        finish_reason=finish)


def test_ttft_and_gaps_of_one_stream():
    t = trace(sent=10.0, first=10.25, gap=0.02, tokens=5)
    assert t.ttft_ms == pytest.approx(250.0)
    result = decode_wave([t], prompt_tokens=64)
    assert result.itl_ms == pytest.approx(20.0) and result.gaps == 4 and not result.serialised


def test_single_wave_reads_gaps_only_while_all_requests_run():
    # request A starts at 0.1 s; B's prefill stalls A (a 0.2 s gap), B's first token at 0.4 s;
    # then both decode at 30 ms until A ends at 0.61 s
    a = RequestTrace(0.0, (0.1, 0.13, 0.16, 0.19, 0.39, 0.42, 0.45, 0.48, 0.51, 0.54, 0.57, 0.60),
                     finish_reason="length")
    b = RequestTrace(0.0, (0.40, 0.43, 0.46, 0.49, 0.52, 0.55, 0.58, 0.61, 0.64), finish_reason="length")
    gaps, start, end = wave_gaps_s([a, b])
    assert start == pytest.approx(0.40) and end == pytest.approx(0.60)
    assert all(g == pytest.approx(0.03) for g in gaps)          # the 0.2 s prefill stall is excluded
    result = decode_wave([a, b], prompt_tokens=64)
    assert result.itl_ms == pytest.approx(30.0) and result.first_token_spread_ms == pytest.approx(300.0)


def test_a_serialised_wave_has_an_empty_window():
    # one at a time: B starts after A finished
    a = trace(0.0, 0.1, 0.02, 10)
    b = trace(0.0, 0.35, 0.02, 10)
    result = decode_wave([a, b], prompt_tokens=64)
    assert result.serialised and result.itl_ms is None and result.window_ms < 0


def test_median_is_robust_to_one_slow_gap():
    times = [0.0, 0.01, 0.02, 0.03, 0.5, 0.51, 0.52]
    t = RequestTrace(0.0, tuple(times), finish_reason="length")
    assert decode_wave([t], 64).itl_ms == pytest.approx(10.0)


def test_prefill_fit_recovers_known_coefficients():
    lengths = [64, 128, 256, 512, 1024]
    f, c1, c2 = 20.0, 0.5, 2e-4
    samples = [[f + c1 * n + c2 * n * n + noise for noise in (-0.1, 0.0, 0.1)] for n in lengths]
    result = prefill_from_samples(lengths, samples)
    assert result.ttft_ms[2] == pytest.approx(f + c1 * 256 + c2 * 256 ** 2)
    assert result.fit[0] == pytest.approx(f, abs=0.2)
    assert result.fit[1] == pytest.approx(c1, rel=0.01)
    assert result.fit[2] == pytest.approx(c2, rel=0.02)
    assert result.predict_ms(768) == pytest.approx(f + c1 * 768 + c2 * 768 ** 2, rel=0.005)
    # host time: the intercept beyond one decode step (METHOD §3.12), never negative
    assert host_time_ms(result.fit, decode_step_ms=5.0) == pytest.approx(15.0, abs=0.2)
    assert host_time_ms(result.fit, decode_step_ms=50.0) == 0.0


def test_packed_probe_timing():
    fit = (20.0, 0.5, 0.0)
    packed = [trace(1.0, 1.0 + 0.1 * (i + 1), 0.01, 1) for i in range(4)]   # one at a time
    single = trace(5.0, 5.3, 0.01, 1)
    probe = probe_from_traces(packed, single, 128, fit)
    assert probe.step_ms == pytest.approx(400.0) and probe.single_ms == pytest.approx(300.0)
    assert probe.first_token_spread_ms == pytest.approx(300.0)
    assert probe.fit_ms == pytest.approx(20.0 + 0.5 * 512)


def test_wave_sends_every_prompt_and_keeps_order():
    traces = [trace(0.0, 0.1 * i, 0.01, 3) for i in range(1, 5)]
    client = ReplayClient(traces)
    got = run_wave(client, ["a", "b", "c", "d"], 3)
    assert sorted(client.prompts) == ["a", "b", "c", "d"] and len(got) == 4


def test_prompts_are_unique_and_counted():
    factory = PromptFactory(random.Random(3), lambda text: len(text.split()) + 1)   # a tokenizer adding BOS
    prompts = factory.batch(64, 50)
    assert all(p.counted_tokens == 64 for p in prompts)
    assert shared_prefix_words([p.text for p in prompts]) < 2
    assert factory.prompts_made == 50
    # no tokenizer: the target is kept, the count unknown
    blind = PromptFactory(random.Random(3), lambda text: None).make(32)
    assert blind.counted_tokens is None and len(blind.text.split()) == 32
