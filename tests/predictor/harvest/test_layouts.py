"""Reduce, measure, restore (METHOD §3.14): a deployment's anchor layouts, the harvest
command of each (checked like `--dry-run`), and the harvester's own refusal of a layout
that is not one anchor, which names the reduced harvests."""

import pytest
from typer.testing import CliRunner

from agent.cli.main import app
from levers.configuration import Configuration, normalise
from predictor.harvest.layouts import reduced_harvests
from predictor.harvest.reduce import anchor_layouts, harvest_config_text
from predictor.target import resolve_target

runner = CliRunner()


def harvests(model, cluster, engine, **levers):
    target = resolve_target(model, cluster, engine)
    config = normalise(Configuration(**levers))
    return reduced_harvests(target.engine, target.card.name, target.card, target.cluster, config)


def dry_run(command):
    words = command.split()
    assert words[:2] == ["inferasim", "harvest"]
    result = runner.invoke(app, words[1:] + ["--dry-run"])
    assert result.exit_code == 0, (command, result.output)
    return result.output


def test_pp_replicas_and_width_are_reduced_in_method_order():
    (reduction,) = anchor_layouts(Configuration(tp=16, pp=2, ep=16, attention_dp=16, replicas=3), 8)
    assert (reduction.config.tp, reduction.config.ep, reduction.config.attention_dp) == (8, 8, 8)
    assert reduction.config.pp == 1 and reduction.config.replicas == 1
    assert [step.split()[0] for step in reduction.steps] == ["3", "PP2", "TP16->TP8", "attention", "EP16->EP8"]
    # attention TP is kept: TP8/DP2 (attention TP4) narrows to TP4/DP1
    (narrow,) = anchor_layouts(Configuration(tp=8, ep=8, attention_dp=2), 4)
    assert (narrow.config.tp, narrow.config.attention_dp, narrow.config.ep) == (4, 1, 4)
    (same,) = anchor_layouts(Configuration(tp=8, ep=8), 8)
    assert not same.is_reduced


def test_spec_depth_is_written_once_and_only_anchor_levers_survive():
    text = harvest_config_text(Configuration(tp=8, spec_method="ngram", spec_depth=2, concurrency=16,
                                             max_running_requests=32, fusions=("generic",), kv_cache_dtype="fp8"))
    assert text == "tp=8,pp=1,ep=1,attention_dp=1,kv_cache_dtype=fp8,spec_method=ngram,spec_depth=2"


def test_disaggregated_pools_get_one_checked_harvest_each():
    found = harvests("llama-3.1-70b", "h100x8x2", "vllm", disaggregated=True, prefill_layout="TP2/EP1/DP1",
                     decode_layout="TP4/EP1/DP1", prefill_replicas=3)
    assert [h.reduction.pool for h in found] == ["prefill", "decode"]
    assert [h.reduction.config.tp for h in found] == [2, 4]
    assert found[0].lines()[0].startswith("# prefill pool") and "3 replicas -> 1" in found[0].lines()[0]
    for harvest in found:
        dry_run(harvest.command)


def test_tp8_on_gb300_is_reduced_to_one_tray_or_measured_across_the_nvl72_domain():
    small = harvests("llama-3.1-70b", "gb300x4x4", "vllm", tp=8)[0]
    assert small.reduction.config.tp == 4 and "TP8->TP4 (one node of 4" in small.lines()[0]
    dry_run(small.command)
    # Kimi-K3 does not fit in one tray of four: TP8 over two trays of one NVLink domain
    big = harvests("kimi-k3", "gb300x4x4", "vllm", tp=16, ep=16)[0]
    assert big.reduction.config.tp == 8 and big.command.endswith("--endpoint http://HEAD_NODE:8000")
    assert any("spans 2 nodes of one 16-GPU scale-up domain" in line for line in big.lines())
    assert "endpoint" in dry_run(big.command)


def test_a_precision_no_launch_can_quantize_names_a_checkpoint():
    trt = harvests("deepseek-r1", "b200x8x2", "trtllm", tp=8, weight_dtype="fp4")[0]
    assert trt.command.endswith("--model-path QUANTIZED_CHECKPOINT")
    assert "precisions as asked, from the checkpoint" in dry_run(trt.command)
    # fp8 activations on Kimi-K3 (bf16 linear layers, fp4 experts): no GEMM runs W16A8, so the
    # linear layers keep bf16 and the experts run W4A8, which vLLM quantizes at launch
    w4a8 = harvests("kimi-k3", "mi355x", "vllm", tp=8, activation_dtype="fp8")[0]
    assert w4a8.problem is None and w4a8.command.endswith("activation_dtype=fp8")
    assert '"moe": {"activation": "mxfp8", "weight": null}' in dry_run(w4a8.command)


@pytest.mark.parametrize("config, reduced", [
    ("tp=8,pp=2", ["--config tp=8,pp=1,ep=1,attention_dp=1"]),
    ("tp=8,replicas=2", ["--config tp=8,pp=1,ep=1,attention_dp=1"]),
    ("disaggregated=true,prefill_layout=TP4,decode_layout=TP8", ["--config tp=4,pp=1", "--config tp=8,pp=1"]),
])
def test_the_harvester_refuses_a_non_anchor_layout_with_its_reduction(config, reduced):
    result = runner.invoke(app, ["harvest", "--engine", "vllm", "--model", "llama-3.1-70b", "--cluster", "h100x8x2",
                                 "--config", config, "--dry-run"])
    output = " ".join(result.output.split())
    assert result.exit_code == 2 and "Traceback" not in output
    assert "not an anchor layout" in output and "METHOD §3.14" in output
    for text in reduced:
        assert "inferasim harvest --engine vllm --model Llama-3.1-70B --cluster h100x8x2 " + text in output


def test_an_endpoint_may_span_one_scale_up_domain_a_launch_may_not():
    base = ["harvest", "--engine", "vllm", "--model", "kimi-k3", "--cluster", "gb300x4x4", "--config", "tp=8"]
    launched = runner.invoke(app, base + ["--dry-run"])
    assert launched.exit_code == 2 and "one node of 4" in launched.output
    assert "scale-up domain and pass --endpoint" in " ".join(launched.output.split())
    assert runner.invoke(app, base + ["--endpoint", "http://10.0.0.1:8000", "--dry-run"]).exit_code == 0


def test_a_launch_the_memory_model_prices_as_not_fitting_says_so_before_it_runs():
    """The harvest still measures it (a measurement outranks the model) but the plan warns
    before the GPUs are taken; a layout that fits carries no such note, nor an endpoint."""
    base = ["harvest", "--engine", "vllm", "--cluster", "h100x1", "--dry-run"]
    big = runner.invoke(app, base + ["--model", "kimi-k3"])
    output = " ".join(big.output.split())
    assert big.exit_code == 0 and "note: memory: the memory model prices this layout as not fitting" in output
    assert "exceed 90% of HBM" in output and "inferasim memory" in output
    assert "note: memory" not in runner.invoke(app, base + ["--model", "qwen3-32b"]).output
    endpoint = runner.invoke(app, base + ["--model", "kimi-k3", "--endpoint", "http://10.0.0.1:8000"])
    assert endpoint.exit_code == 0 and "note: memory" not in endpoint.output


@pytest.mark.parametrize("args, what, words", [
    (["--engine", "vllm", "--model", "qwen3-30b-a3b", "--config", "tp=2", "--engine-arg=--enforce-eager"],
     "--engine-arg", "sets what the configuration decides"),
    (["--engine", "vllm", "--model", "qwen3-30b-a3b", "--config", "tp=2", "--engine-arg=--enable_prefix_caching"],
     "--engine-arg", "sets what the configuration decides"),
    (["--engine", "vllm", "--model", "qwen3-30b-a3b", "--config", "tp=2", "--engine-arg=-tp=1"],
     "--engine-arg", "sets what the configuration decides"),
    # flags an adapter writes only for other lever values: the anchor would be measured on
    # another width, cache or kernel than its label
    (["--engine", "sglang", "--model", "qwen3-30b-a3b", "--config", "tp=2", "--engine-arg=--attn-dp-size=2"],
     "--engine-arg", "sets what the configuration decides"),
    (["--engine", "sglang", "--model", "qwen3-30b-a3b", "--config", "tp=2", "--engine-arg=--page-size=64"],
     "--engine-arg", "sets what the configuration decides"),
    (["--engine", "vllm", "--model", "qwen3-30b-a3b", "--config", "tp=2", "--engine-arg=--block-size=32"],
     "--engine-arg", "sets what the configuration decides"),
    (["--engine", "vllm", "--model", "qwen3-30b-a3b", "--config", "tp=2", "--engine-arg=-O0"],
     "--engine-arg", "sets what the configuration decides"),
    (["--engine", "vllm", "--model", "qwen3-30b-a3b", "--config", "tp=2", "--engine-arg=--all2all-backend=pplx"],
     "--engine-arg", "sets what the configuration decides"),
    (["--engine", "sglang", "--model", "qwen3-30b-a3b", "--config", "tp=2,ep=2,weight_dtype=fp8"],
     "--config weight_dtype", "would quantize its bf16 experts too"),
    (["--engine", "sglang", "--model", "gpt-oss-120b", "--config", "tp=8,weight_dtype=fp8"],
     "--config weight_dtype", "SGLang refuses a second method"),
    (["--engine", "vllm", "--model", "llama-3.1-70b", "--config", "tp=4", "--prefill-lengths", "200000"],
     "--prefill-lengths", "exceeds Llama-3.1-70B's context of 131,072"),
    (["--engine", "vllm", "--model", "llama-3.1-70b", "--config", "tp=4", "--endpoint", "http://10.0.0.1:8000/v1"],
     "--endpoint", "has a path"),
    (["--engine", "vllm", "--model", "deepseek-r1", "--config", "tp=8,ep=8,attention_dp=8", "--batches", "4096"],
     "--batches", "above the replica's 2048 running requests"),
    (["--engine", "vllm", "--model", "qwen3-32b", "--config", "tp=1", "--threads", "8"],
     "--threads", "vllm runs on GPUs"),
    (["--engine", "vllm", "--model", "qwen3-32b", "--endpoint", "http://10.0.0.1:8000",
      "--engine-arg=--trust-remote-code"], "--engine-arg", "has no effect with --endpoint"),
])
def test_a_harvest_the_engine_would_not_run_as_labelled_is_refused(args, what, words):
    result = runner.invoke(app, ["harvest", "--cluster", "b200", *args, "--dry-run"])
    output = " ".join(result.output.split())
    assert result.exit_code == 2 and f"error: {what}" in output and words in output, output


def test_the_replica_cap_under_attention_dp_admits_a_wide_wave():
    result = runner.invoke(app, ["harvest", "--engine", "vllm", "--model", "deepseek-r1", "--cluster", "b200",
                                 "--config", "tp=8,ep=8,attention_dp=8", "--batches", "512", "--dry-run"])
    assert result.exit_code == 0, result.output
