"""Engine command lines are argument lists built from validated lever values (METHOD §4,
PRODUCT.md §6); levers an engine cannot express are refused, not dropped."""

import json

import pytest

from levers.catalog import Engine
from levers.configuration import Configuration
from levers.errors import InputError
from predictor.harvest.adapters import ADAPTERS, LaunchRequest, adapter_for

REQUEST = LaunchRequest(model_path="deepseek-ai/DeepSeek-R1", served_name="DeepSeek-R1", port=8000,
                        context_tokens=16384, python="python")
FP8 = {"weight_dtype": "fp8", "expert_dtype": "fp8", "activation_dtype": None, "kv_cache_dtype": "bf16"}


def argv(engine, **levers):
    command = adapter_for(engine).launch(Configuration(**levers), REQUEST, FP8)
    assert isinstance(command.argv, tuple) and all(isinstance(a, str) for a in command.argv)
    return list(command.argv), command.env


def value(args, flag):
    return args[args.index(flag) + 1]


def test_registry_covers_every_engine():
    assert set(ADAPTERS) == set(Engine)
    with pytest.raises(InputError, match="unknown engine"):
        adapter_for("tgi")


def test_vllm_dep8_with_graphs_and_fp8_kv():
    args, env = argv("vllm", tp=8, ep=8, attention_dp=8, kv_cache_dtype="fp8", all_to_all_backend="mori",
                     max_captured_batch=64)
    assert args[:3] == ["vllm", "serve", "deepseek-ai/DeepSeek-R1"]
    assert value(args, "--tensor-parallel-size") == "1" and value(args, "--data-parallel-size") == "8"
    assert "--enable-expert-parallel" in args and "--no-enable-prefix-caching" in args
    compilation = json.loads(value(args, "--compilation-config"))
    assert compilation["cudagraph_capture_sizes"] == [1, 2, 4, 8, 16, 24, 32, 48, 64]
    assert value(args, "--kv-cache-dtype") == "fp8" and env == {"VLLM_ALL2ALL_BACKEND": "mori"}


def test_vllm_eager_and_speculation():
    args, _ = argv("vllm", tp=8, graph_capture="none", spec_method="mtp", spec_depth=3)
    assert "--enforce-eager" in args and "--compilation-config" not in args
    assert json.loads(value(args, "--speculative-config")) == {"method": "mtp", "num_speculative_tokens": 3}


def test_sglang_flags():
    args, env = argv("sglang", tp=8, ep=8, attention_dp=8, max_captured_batch=16, moe_backend="deepgemm",
                     attention_backend="flashmla", spec_method="eagle3", spec_depth=2, kv_block_size=64)
    assert args[1:3] == ["-m", "sglang.launch_server"]
    assert value(args, "--tp-size") == "8" and value(args, "--ep-size") == "8" and value(args, "--dp-size") == "8"
    assert "--enable-dp-attention" in args and "--disable-radix-cache" in args
    start = args.index("--cuda-graph-bs") + 1
    assert args[start:start + 5] == ["1", "2", "4", "8", "16"]
    assert value(args, "--moe-runner-backend") == "deep_gemm" and value(args, "--attention-backend") == "flashmla"
    assert value(args, "--speculative-algorithm") == "EAGLE3" and value(args, "--speculative-num-draft-tokens") == "3"
    assert value(args, "--page-size") == "64"
    eager, _ = argv("sglang", tp=8, graph_capture="none")
    assert "--disable-cuda-graph" in eager and "--cuda-graph-bs" not in eager


def test_atom_flags():
    args, _ = argv("atom", tp=8, ep=8, kv_cache_dtype="fp8", max_captured_batch=8, spec_method="mtp", spec_depth=1)
    assert args[1:3] == ["-m", "atom.entrypoints.openai_server"]
    assert value(args, "--server-port") == "8000" and value(args, "--kv_cache_dtype") == "fp8"
    assert value(args, "--cudagraph-capture-sizes") == "[1,2,4,8]" and "--enable-expert-parallel" in args
    assert value(args, "--method") == "mtp" and value(args, "--num-speculative-tokens") == "1"
    assert "--enable_prefix_caching" not in args


def test_inexpressible_levers_are_refused():
    with pytest.raises(InputError, match="expert_dtype=fp4 cannot be set on the vllm command line"):
        argv("vllm", tp=8, expert_dtype="fp4")
    with pytest.raises(InputError, match="weight_dtype=bf16"):
        argv("atom", tp=8, weight_dtype="bf16")
    with pytest.raises(InputError, match="does not launch trtllm"):
        argv("trtllm", tp=8)


def test_llamacpp_command_and_sweep():
    adapter = adapter_for("llamacpp")
    request = LaunchRequest(model_path="/m/x.gguf", served_name="x", port=9000, context_tokens=4096, threads=2,
                            python="python")
    config = Configuration(graph_capture="none")
    args = list(adapter.launch(config, request, {"weight_dtype": "fp4", "kv_cache_dtype": "bf16"}).argv)
    assert args == ["python", "-m", "llama_cpp.server", "--model", "/m/x.gguf", "--model_alias", "x",
                    "--host", "127.0.0.1", "--port", "9000", "--n_ctx", "4096", "--interrupt_requests", "False",
                    "--n_threads", "2", "--n_threads_batch", "2"]
    assert adapter.sweep_batches(config) == (1, 2, 4) and adapter.captured_sizes(config) == ()
    assert adapter.request_extras(2) == {"logit_bias": {"2": -100.0}}
    with pytest.raises(InputError, match="kv_cache_dtype=fp8"):
        adapter.launch(Configuration(graph_capture="none", kv_cache_dtype="fp8"), request, {"weight_dtype": "fp4"})
