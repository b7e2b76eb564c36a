"""The whole harvest path offline: the recorded llama.cpp streams replayed through
`measure` and `build_anchor`; refusals on constructed bad data; the CLI's dry run."""

import json
import random
import statistics
from dataclasses import replace
from itertools import pairwise

import pytest
from typer.testing import CliRunner

from agent.cli.main import app
from levers.errors import InputError
from predictor.anchors.store import load_anchor_file, save_anchor
from predictor.harvest.client import ReplayClient, RequestTrace
from predictor.harvest.harvester import Measurements, build_anchor, measure
from predictor.harvest.plan import HarvestRequest, plan_harvest
from predictor.harvest.sweeps import decode_wave, prefill_from_samples
from predictor.harvest.validate import predict_point, relative_error


def recorded_plan(gguf_file, recorded):
    sweep = recorded["sweep"]
    return plan_harvest(HarvestRequest(
        engine="llamacpp", model=str(gguf_file), cluster="cpu", config_text="tp=1", endpoint="http://127.0.0.1:1",
        prompt_tokens=sweep["prompt_tokens"], second_prompt_tokens=sweep["second_prompt_tokens"],
        batches=tuple(sweep["decode_batches"]),
        decode_tokens=sweep["decode_tokens"], prefill_lengths=tuple(sweep["prefill_lengths"]),
        waves_per_batch=sweep.get("waves_per_batch", 1),
        repeats=sweep["repeats"], probe_seqs=sweep["packed_probe"][0], probe_tokens=sweep["packed_probe"][1]))


def traces_of(recorded, phase=None):
    return [RequestTrace.from_json(r) for r in recorded["traces"] if phase is None or r["phase"] == phase]


def replayed(gguf_file, recorded):
    plan = recorded_plan(gguf_file, recorded)
    client = ReplayClient.from_records(recorded["traces"], token_counts=lambda text: len(text.split()))
    return plan, measure(plan, client, rng=random.Random(0))


def test_recorded_streams_give_the_recorded_sweep(gguf_file, recorded):
    plan, m = replayed(gguf_file, recorded)
    # decode b=1: the median over its waves of each wave's median gap
    wave_medians = [statistics.median(b - a for a, b in pairwise(t.token_times_s)) * 1000
                    for t in traces_of(recorded, "decode b=1 prompt=64")]
    assert len(wave_medians) == plan.sweep.waves_per_batch
    assert m.waves[0].itl_ms == pytest.approx(statistics.median(wave_medians), rel=1e-9)
    # llama.cpp serves one request at a time: the b=2 and b=4 waves never ran together
    assert [w.serialised for w in m.waves] == [False, True, True]
    # prefill: median TTFT per length, as the recorded streams say
    shortest = [RequestTrace.from_json(r).ttft_ms for r in recorded["traces"]
                if r["phase"] == "prefill" and r["prompt_words"] == 32]
    assert len(shortest) == plan.sweep.repeats
    assert m.prefill.ttft_ms[0] == pytest.approx(statistics.median(shortest), rel=1e-9)
    assert m.prefill.prompt_tokens == (32, 64, 128, 256, 512)
    assert m.probe is not None and m.probe.num_seqs == 4
    assert m.reuse_ms[1] < 0.1 * m.reuse_ms[0]          # llama.cpp reuses the previous prompt


def test_recorded_anchor_validates_and_is_flagged(gguf_file, recorded, tmp_path):
    plan, m = replayed(gguf_file, recorded)
    anchor, checks = build_anchor(plan, replace(m, engine_version="llama_cpp_python==0.3.36"),
                                  timestamp="2026-11-29T13:30:00+00:00", node="test")
    assert {"serialised-decode", "serialised-probe", "engine-reuses-prefixes"} <= set(anchor.flags)
    assert anchor.decode_sweep.batch_sizes == (1,) and not anchor.decode_sweep.is_full_sweep
    assert anchor.decode_sweep.second_prompt_tokens == 256 and anchor.decode_sweep.prompt_tokens == 64
    assert anchor.packed_probe.serialised and anchor.packed_probe.step_ms > 0
    assert anchor.signature.engine == "llamacpp" and anchor.signature.accelerator == "cpu"
    assert anchor.signature.engine_version == "llama_cpp_python==0.3.36"
    assert not anchor.provenance.prefix_caching_off
    path = save_anchor(anchor, tmp_path)
    assert load_anchor_file(path) == anchor
    assert json.loads(path.read_text())["id"] == anchor.id


def test_anchor_predicts_its_own_fit(gguf_file, recorded):
    """The calibrated step model reproduces the harvest it was fitted to: the decode
    points within 10%, the prefill sweep within 25% (a 135M model on two CPU cores: the
    physics prices a GEMM roofline the SIMD code reaches only a few percent of)."""
    plan, m = replayed(gguf_file, recorded)
    anchor, _ = build_anchor(plan, m, timestamp="2026-11-29T13:30:00+00:00", node="test")
    point, flags = predict_point(anchor, plan.card, plan.cluster, plan.engine, plan.config, 384, 16)
    sweep = anchor.prefill_sweep
    assert point.ttft_ms == pytest.approx(sweep.predict_ms(384), rel=0.25)
    s64, s256 = anchor.decode_sweep.itl_ms[0], anchor.decode_sweep.second_itl_ms[0]
    assert point.tpot_ms == pytest.approx((s64 + s256) / 2, rel=0.10)   # context 392: beyond both lengths
    assert "serialised-decode" in flags
    assert relative_error(110.0, 100.0) == pytest.approx(0.1)


def bad_measurements(shared_prompts: bool, reuse: tuple[float, float]) -> Measurements:
    a = RequestTrace(0.0, tuple(0.1 + 0.01 * i for i in range(10)), finish_reason="length")
    prefill = prefill_from_samples([32, 64, 128, 256, 512], [[10 + 0.1 * n] for n in (32, 64, 128, 256, 512)])
    texts = ("time year a b", "time year c d") if shared_prompts else ("time year a", "day man b")
    return Measurements(waves=(decode_wave([a], 64, [64]),), second_waves=(), prefill=prefill, probe=None,
                        reuse_ms=reuse, host_us_per_token=1.0, prompt_texts=texts, engine_version="x==1")


def test_build_anchor_refuses_prefix_reuse(gguf_file, recorded):
    plan = recorded_plan(gguf_file, recorded)
    with pytest.raises(InputError, match="share a 2-word prefix"):
        build_anchor(plan, bad_measurements(shared_prompts=True, reuse=(100.0, 10.0)))
    anchor, _ = build_anchor(plan, bad_measurements(shared_prompts=False, reuse=(100.0, 95.0)))
    assert anchor.provenance.prefix_caching_off and "engine-reuses-prefixes" not in anchor.flags


def test_build_anchor_refuses_wrong_prompt_length(gguf_file, recorded):
    plan = recorded_plan(gguf_file, recorded)
    m = bad_measurements(False, (100.0, 95.0))
    wrong = replace(m, waves=(replace(m.waves[0], counted_prompt_tokens=(200,)),))
    with pytest.raises(InputError, match="were 200 tokens, not the recorded 64"):
        build_anchor(plan, wrong)


runner = CliRunner()


def test_cli_dry_run_prints_argv_and_plan(gguf_file):
    result = runner.invoke(app, ["harvest", "--engine", "llamacpp", "--model", str(gguf_file), "--cluster", "cpu",
                                 "--config", "tp=1", "--threads", "2", "--dry-run", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    argv = data["launch_argv"]
    assert argv[1:3] == ["-m", "llama_cpp.server"] and "--interrupt_requests" in argv
    assert argv[argv.index("--n_threads") + 1] == "2"
    assert data["sweep"]["decode_batches"] == [1, 2, 4, 8]
    assert data["engine_defaults"] == {"graph_capture": "none"}
    assert data["signature"]["accelerator"] == "cpu"


@pytest.mark.parametrize("config, message", [
    ("tp=2", "tp=2 is not supported by llamacpp"),
    ("prefix_cache=on", "prefix_cache=on was asked for"),
])
def test_cli_refuses_in_one_line(gguf_file, config, message):
    result = runner.invoke(app, ["harvest", "--engine", "llamacpp", "--model", str(gguf_file), "--config", config,
                                 "--dry-run"])
    assert result.exit_code == 2
    assert message in result.output and "Traceback" not in result.output


def test_cli_refuses_random_weights_on_vllm():
    result = runner.invoke(app, ["harvest", "--engine", "vllm", "--model", "deepseek-r1", "--config", "tp=8",
                                 "--engine-arg=--load-format", "--engine-arg=dummy", "--dry-run"])
    assert result.exit_code == 2 and "dummy (random) weights" in result.output


def test_batch_one_alternates_its_two_prompt_lengths(gguf_file, recorded):
    """The context slope is the ratio of batch 1's steps at the two prompt lengths, so
    their waves alternate (a shared machine's speed drifts between them otherwise)."""
    plan = recorded_plan(gguf_file, recorded)
    asked = []

    class Recording(ReplayClient):
        def stream(self, prompt, max_tokens):
            asked.append((len(prompt.split()), max_tokens))
            return super().stream(prompt, max_tokens)

    client = Recording.from_records(recorded["traces"], token_counts=lambda text: len(text.split()))
    measured = measure(plan, client, rng=random.Random(0))
    sweep = plan.sweep
    lengths = {sweep.prompt_tokens, sweep.second_prompt_tokens}
    ones = [words for words, max_tokens in asked if max_tokens == sweep.decode_tokens and words in lengths]
    start = ones.index(sweep.second_prompt_tokens) - 1              # after the warm-up: batch 1's first wave
    assert ones[start:start + 2 * sweep.waves_per_batch] == \
        [sweep.prompt_tokens, sweep.second_prompt_tokens] * sweep.waves_per_batch
    assert ones.count(sweep.second_prompt_tokens) == sweep.waves_per_batch   # serialised batches: no second length
    assert measured.second_waves[0].batch == 1 and measured.second_waves[0].prompt_tokens == sweep.second_prompt_tokens
