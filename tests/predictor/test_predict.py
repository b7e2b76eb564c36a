"""`predict`: the step model choice (anchored / projected rank-only / simulate), the
honesty of its output, determinism, and the CLI contract of issue 3."""

import json
import math

import pytest
from typer.testing import CliRunner

from agent.cli.main import app
from levers.configuration import Configuration, parse_config_text
from predictor.predict import predict
from predictor.step.cost import Mode
from predictor.uncertainty import DECISION_GRADE_APE, MIN_TIER_ROWS, band_keys, shipped_error_bars
from predictor.target import resolve_target
from predictor.workload import Harness, WorkloadSpec, parse_workload

runner = CliRunner()
ONE_K = parse_workload("1k/1k")


def config(text: str) -> Configuration:
    return Configuration().with_changes(parse_config_text(text))


def gpt_oss_h100():
    return resolve_target("gpt-oss-120b", "h100", "vllm")


def test_a_covered_configuration_is_anchored_and_deterministic():
    target = gpt_oss_h100()
    first = predict(target, config("tp=2,concurrency=32"), ONE_K)
    again = predict(target, config("tp=2,concurrency=32"), ONE_K)
    assert first.mode is Mode.ANCHORED and first.anchor_id.startswith("h100-vllm-gpt-oss-120b")
    assert "rank-only" not in first.flags
    assert first.metrics == again.metrics and first.flags == again.flags
    # Little's law holds over the closed loop: 32 clients = rate x e2e.
    m = first.metrics
    rate = m["output_throughput_per_gpu"] * 2 / 1024
    assert rate * m["e2e_ms_mean"] / 1000 == pytest.approx(32, rel=0.02)


def test_another_width_is_a_width_transfer_whose_mode_follows_its_measured_error():
    prediction = predict(gpt_oss_h100(), config("tp=1,concurrency=16"), ONE_K)
    assert prediction.anchor_id is not None and prediction.transfer == "width"
    width = shipped_error_bars().error("width", "tpot")
    expected = Mode.ANCHORED if width.median_ape <= DECISION_GRADE_APE else Mode.RANK_ONLY
    assert prediction.mode is expected
    for key in ("tpot_ms_mean", "ttft_ms_mean", "output_throughput_per_gpu", "interactivity_mean"):
        low, high = prediction.intervals[key]
        assert low < prediction.metrics[key] < high
    assert "memory_per_gpu_gb" not in prediction.intervals      # exact arithmetic: no interval


def test_an_anchored_prediction_takes_the_band_of_its_anchors_source():
    prediction = predict(gpt_oss_h100(), config("tp=2,concurrency=32"), ONE_K)
    source = prediction.calibration["anchor_source"]
    assert source in ("inferencex", "aiconfigurator")
    keys = band_keys(prediction.calibration)
    assert keys[1] == source and keys[0].startswith(f"{source}/")
    bars = shipped_error_bars()
    low, high = prediction.intervals["tpot_ms_mean"]
    tpot = prediction.metrics["tpot_ms_mean"]
    errors = [e for k in prediction.transfer_kinds if (e := bars.error(k, "tpot", keys)) is not None]
    q10, q90 = min(e.q10 for e in errors), max(e.q90 for e in errors)   # the harness kind has TTFT only
    assert (low, high) == pytest.approx((tpot * math.exp(q10), tpot * math.exp(q90)))


def test_no_anchor_of_the_model_takes_the_cross_model_prior_rank_only():
    prediction = predict(resolve_target("kimi-k3", "mi355x", "vllm"), config("tp=8,concurrency=16"), ONE_K)
    assert prediction.mode is Mode.RANK_ONLY and prediction.anchor_id is None
    assert prediction.transfer == "cross-model" and "rank-only" in prediction.flags
    assert any(f.startswith("calibration: prior:") for f in prediction.flags)
    assert prediction.calibration["source"].startswith("prior:")
    assert "anchor_source" not in prediction.calibration
    assert set(prediction.breakdown["decode_step"]) >= {"gemm", "attention", "moe", "communication", "launch"}


def test_a_prior_priced_row_of_a_harness_takes_that_harness_band():
    """No anchor calibrates it, so the harness its workload names picks the band
    (`predictor.uncertainty.band_keys`); the product's own questions keep the pooled one."""
    target, chosen = resolve_target("kimi-k3", "mi355x", "vllm"), config("tp=8,concurrency=16")
    plain = predict(target, chosen, ONE_K)
    bars = shipped_error_bars()
    pooled = max((bars.error(k, "tpot") for k in plain.transfer_kinds), key=lambda e: e.q90 - e.q10)
    for harness in ("inferencex", "aiconfigurator"):
        spec = WorkloadSpec("fixed", 1024, 1024, harness=Harness(harness))
        named = predict(target, chosen, spec)
        tpot = named.metrics["tpot_ms_mean"]
        band = max((bars.error(k, "tpot", (harness,)) for k in named.transfer_kinds), key=lambda e: e.q90 - e.q10)
        assert band.rows >= MIN_TIER_ROWS and (band.q10, band.q90) != (pooled.q10, pooled.q90)
        assert named.intervals["tpot_ms_mean"] == pytest.approx((tpot * math.exp(band.q10), tpot * math.exp(band.q90)))
    tpot = plain.metrics["tpot_ms_mean"]
    assert plain.intervals["tpot_ms_mean"] == pytest.approx((tpot * math.exp(pooled.q10), tpot * math.exp(pooled.q90)))


def test_more_clients_raise_throughput_and_latency():
    target = gpt_oss_h100()
    low = predict(target, config("tp=2,concurrency=4"), ONE_K).metrics
    high = predict(target, config("tp=2,concurrency=64"), ONE_K).metrics
    assert high["output_throughput_per_gpu"] > 2 * low["output_throughput_per_gpu"]
    assert high["tpot_ms_mean"] > low["tpot_ms_mean"]


def test_a_fixed_count_benchmark_adds_the_first_wave_to_mean_ttft_only():
    target = gpt_oss_h100()
    steady = predict(target, config("tp=2,concurrency=64"), ONE_K).metrics
    run = predict(target, config("tp=2,concurrency=64"), WorkloadSpec("fixed", 1024, 1024, 10)).metrics
    assert run["ttft_ms_mean"] > steady["ttft_ms_mean"]
    assert run["ttft_ms_p50"] == steady["ttft_ms_p50"] and run["tpot_ms_mean"] == steady["tpot_ms_mean"]


def test_disaggregated_pools_count_every_gpu():
    target = resolve_target("deepseek-r1", "mi355x", "sglang")
    split = config("disaggregated=true,prefill_layout=TP4,decode_layout=TP4/EP4/DP4,"
                   "kv_transfer_backend=mori,concurrency=64")
    prediction = predict(target, split, ONE_K)
    assert prediction.legal and prediction.metrics["gpus_per_replica"] == 8
    assert prediction.breakdown["kv_transfer_backend"] == "mori" and prediction.breakdown["kv_handoff_us"] > 120


def test_a_split_priced_from_colocated_anchors_is_a_split_transfer():
    """Its pools reach the anchors as plain replicas; the prediction still says split (and
    so takes the split band and its mode), not the pools' in-ladder or width kinds."""
    prediction = predict(gpt_oss_h100(), config("disaggregated=true,prefill_layout=TP2,decode_layout=TP2,"
                                                "concurrency=64"), ONE_K)
    assert prediction.legal and prediction.anchor_id
    assert "split" in prediction.transfer_kinds
    colocated = predict(gpt_oss_h100(), config("tp=2,concurrency=64"), ONE_K)
    assert "split" not in colocated.transfer_kinds


def test_a_split_bills_the_decode_pools_host_time_in_full(monkeypatch):
    """METHOD §3.11: a split's request passes two engines' front ends, so the decode
    pool's fixed host time reaches its TTFT whole (not half, as one pass would)."""
    import predictor.predict as predict_module

    target = resolve_target("deepseek-r1", "mi355x", "sglang")
    split = config("disaggregated=true,prefill_layout=TP4,decode_layout=TP4/EP4/DP4,concurrency=8")
    real = predict_module.host_time_ms

    def ttft_single(decode_extra_ms):
        monkeypatch.setattr(predict_module, "host_time_ms",
                            lambda model, isl: real(model, isl) + (decode_extra_ms if isl == 0 else 0.0))
        return predict(target, split, ONE_K).metrics["ttft_single_ms"]

    assert ttft_single(50.0) - ttft_single(0.0) == pytest.approx(50.0)


def test_predict_json_contract_and_flags():
    result = runner.invoke(app, ["predict", "--model", "gpt-oss-120b", "--cluster", "h100", "--engine", "vllm",
                                 "--config", "tp=1", "--concurrency", "16", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["mode"] in ("anchored", "rank-only") and data["transfer"] == "width"
    for key in ("ttft_ms", "tpot_ms", "itl_ms", "throughput_per_gpu", "output_throughput_per_gpu", "interactivity"):
        assert data["metrics"][key] > 0
    for key in ("anchor_id", "memory", "breakdown", "fusion_opportunities", "intervals", "calibration"):
        assert key in data
    low, high = data["intervals"]["tpot_ms_mean"]
    assert low < data["all_metrics"]["tpot_ms_mean"] < high
    assert data["calibration"]["source"].startswith("anchor:") and data["calibration"]["points"]


def test_a_configuration_that_does_not_fit_prints_the_reason_and_exits_1():
    result = runner.invoke(app, ["predict", "--model", "kimi-k3", "--cluster", "mi355x1",
                                 "--config", "expert_dtype=bf16", "--json"])
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert data["metrics"] is None and data["memory"]["fits"] is False
    assert any(reason.startswith("memory") for reason in data["reasons"])


def test_an_on_demand_kv_pool_holds_requests_at_their_mean_length():
    """vLLM allocates KV as tokens come, so 24 staggered 1k/8k requests fit where 20 fit at
    their final length; TensorRT-LLM reserves the final length and queues the other 4 (both
    with a BF16 cache: TensorRT-LLM's anchor ran FP8, which holds all 24)."""
    from levers.configuration import Configuration
    from predictor.predict import predict
    from predictor.target import resolve_target
    from predictor.workload import WorkloadSpec

    found = {}
    for engine in ("vllm", "trtllm"):
        target = resolve_target("llama-3.1-70b", "h200x1", engine)
        found[engine] = predict(target, Configuration(tp=1, weight_dtype="fp8", kv_cache_dtype="bf16", concurrency=24),
                                WorkloadSpec("fixed", 1024, 8192, 10, False))
    assert found["vllm"].memory.max_concurrency == found["trtllm"].memory.max_concurrency < 24
    assert not any(f.startswith("queueing") for f in found["vllm"].flags)
    assert any(f.startswith("queueing") for f in found["trtllm"].flags)
    assert found["trtllm"].metrics["ttft_ms_mean"] > 10 * found["vllm"].metrics["ttft_ms_mean"]


def test_a_splits_single_prompt_ttft_prefills_in_the_pools_own_step(monkeypatch):
    """A split's `ttft_single_ms` prefills the prompt as its pool's prefill step does
    (`predictor.sim.scheduler.rank_prefill_budget`): an SGLang DP8 pool at a 8,192-token
    chunk takes 1,024 tokens per rank and step, not the token budget."""
    import predictor.predict as predict_module

    target = resolve_target("deepseek-r1", "mi355xx8x2", "sglang")
    split = config("disaggregated=true,prefill_layout=TP8/EP8/DP8,decode_layout=TP8/EP8/DP8,concurrency=8,"
                   "chunked_prefill_size=8192,max_batched_tokens=16384")
    seen, real = [], predict_module.single_ttft_ms

    def spy(model, isl, chunk_tokens):
        seen.append(chunk_tokens)
        return real(model, isl, chunk_tokens)

    monkeypatch.setattr(predict_module, "single_ttft_ms", spy)
    assert predict(target, split, ONE_K).legal
    assert seen == [1024]


def test_the_running_cap_holds_per_attention_dp_rank_as_in_the_simulator():
    """``max_running_requests`` caps each scheduler rank (lever 23; the DES's
    `predictor.sim.deployment` limits): 8 attention-DP ranks of 32 hold 256 clients, and
    the closed loop then runs all of them, where a replica-wide cap queued 224."""
    target = resolve_target("deepseek-r1", "b200", "sglang")
    dp = predict(target, config("tp=8,ep=8,attention_dp=8,max_running_requests=32,concurrency=256"), ONE_K)
    one = predict(target, config("tp=8,ep=8,attention_dp=1,max_running_requests=32,concurrency=256"), ONE_K)
    assert dp.legal and one.legal
    assert not any(f.startswith("queueing") for f in dp.flags)
    assert any(f.startswith("queueing") for f in one.flags)
    assert dp.breakdown["decode_batch"] > 32 * 4


def test_a_pipeline_reports_its_stage_to_stage_sends_as_communication():
    """PP's activation sends are communication (priced in the step's pipeline term): the
    comm-time objectives read 0 ms for pp=2 and pp=8 and ranked PP with layouts that
    communicate nothing (replicas)."""
    target = resolve_target("llama-3.1-8b", "h100x8", "vllm")
    comm = {text: predict(target, Configuration().with_changes(parse_config_text([text])),
                          parse_workload("1k/1k")).metrics
            for text in ("tp=1,replicas=8", "pp=2,replicas=4", "pp=8")}
    assert comm["tp=1,replicas=8"]["decode_comm_ms"] == 0.0
    assert 0.0 < comm["pp=2,replicas=4"]["decode_comm_ms"] < comm["pp=8"]["decode_comm_ms"]
    assert 0.0 < comm["pp=2,replicas=4"]["prefill_comm_ms"] < comm["pp=8"]["prefill_comm_ms"]


@pytest.mark.parametrize("engine, spec", [
    ("vllm", ONE_K),                                                               # the steady state
    ("sglang", WorkloadSpec("fixed", 1024, 1024, requests_per_client=4, fixed_lengths=True)),  # a replayed benchmark
])
def test_fewer_clients_than_replicas_leave_replicas_idle_not_batches_fractional(engine, spec):
    """One client on eight replicas runs as a batch of one on one replica: its TTFT and
    TPOT are one replica's at one client (they were faster, an eighth of a batch), and the
    per-GPU throughput counts the idle replicas' GPUs; an open loop reaches every replica."""
    target = resolve_target("llama-3.1-8b", "h100x8", engine)
    one = predict(target, config("tp=1,concurrency=1"), spec).metrics
    for text, busy in (("tp=1,replicas=8,concurrency=1", 1), ("tp=1,replicas=8,concurrency=4", 4)):
        spread = predict(target, config(text), spec).metrics
        for key in ("ttft_ms_mean", "tpot_ms_mean", "tpot_pollution"):
            assert spread[key] == pytest.approx(one[key], rel=1e-9), (text, key)
        assert spread["output_throughput_fleet"] == pytest.approx(busy * one["output_throughput_fleet"], rel=1e-9)
        assert spread["output_throughput_per_gpu"] == pytest.approx(busy * one["output_throughput_per_gpu"] / 8, rel=1e-9)
    assert one["tpot_pollution"] >= 1.0
    if spec.requests_per_client is None:    # a fixed-count benchmark is a closed loop
        open_loop = predict(target, config("tp=1,replicas=8,concurrency=4,arrival_rate=1"), spec).metrics
        assert open_loop["output_throughput_fleet"] == pytest.approx(spec.osl, rel=0.01)    # 1 request/s


def test_an_overloaded_open_loop_gives_no_ttft_from_arrival():
    """Past the replicas' rate the queue grows without end: TTFT and E2E from arrival have
    no mean (80 ms was printed beside a flag saying it grows without end); the replicas'
    throughput and the TTFT from admission stay, and a loop within the rate keeps its TTFT."""
    target = resolve_target("deepseek-r1", "mi355x", "sglang")
    over = predict(target, Configuration(tp=8, ep=8, arrival_rate=1e6), parse_workload("1k/1k"))
    assert over.legal and any(f.startswith("overloaded: ") for f in over.flags)
    assert not {"ttft_ms_mean", "ttft_ms_p50", "e2e_ms_mean", "e2e_ms_p50"} & set(over.metrics)
    assert over.metrics["ttft_admission_ms_mean"] > 0 and over.metrics["output_throughput_per_gpu"] > 0
    within = predict(target, Configuration(tp=8, ep=8, arrival_rate=1.0), parse_workload("1k/1k"))
    assert within.metrics["ttft_ms_mean"] > 0 and not any(f.startswith("overloaded") for f in within.flags)


def test_running_more_than_the_final_length_fits_is_said():
    """vLLM's staggered requests hold their mean length, so a replica runs more of them
    than `max_concurrency` (sized at the final length) says fit: priced so, and said, not
    left as a contradiction between the memory table and the clients priced."""
    prediction = predict(gpt_oss_h100(), config("replicas=8,concurrency=1024"), ONE_K)
    fitting = prediction.memory.max_concurrency
    assert 128 > fitting
    assert any(f.startswith(f"KV paged on demand: 128 running per replica, more than the {fitting} ")
               for f in prediction.flags)
    within = predict(gpt_oss_h100(), config(f"replicas=8,concurrency={8 * fitting}"), ONE_K)
    assert not any(f.startswith("KV paged on demand") for f in within.flags)


@pytest.mark.parametrize("spec", ["", ",spec_method=mtp,spec_depth=3"])
def test_decode_comm_is_the_decode_steps_own_collectives(spec):
    """`decode_comm_ms` (the comm-time objectives' figure) moves what the decode step
    moves: a verify step carries each request's drafts too (it reported the one-token
    step's collectives: 1.84 ms beside a step whose communication term is 2.24 ms)."""
    target = resolve_target("deepseek-r1", "b200x8", "sglang")
    prediction = predict(target, config("tp=8,ep=8,concurrency=64" + spec), ONE_K)
    step_comm_ms = prediction.breakdown["decode_step"]["communication"] / 1000.0
    assert prediction.metrics["decode_comm_ms"] == pytest.approx(step_comm_ms, rel=1e-3)
