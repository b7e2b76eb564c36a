"""Engine command lines are argument lists built from validated lever values (METHOD §4,
PRODUCT.md §6); levers an engine cannot express are refused, not dropped."""

import json
from dataclasses import replace

import pytest
import yaml

from levers.catalog import Engine, get_lever
from levers.configuration import Configuration
from levers.errors import InputError
from predictor.harvest.adapters import ADAPTERS, LaunchRequest, adapter_for
from predictor.harvest.launch import DECODE, PREFILL, PoolRole
from tests.agent.deploy.flags import argv_problems, env_problems

REQUEST = LaunchRequest(model_path="deepseek-ai/DeepSeek-R1", served_name="DeepSeek-R1", port=8000,
                        context_tokens=16384, python="python", draft_model="/ckpt/draft", mla=True)
FLAGS_START = 3   # after `vllm serve MODEL`, `python -m MODULE`, `trtllm-serve serve MODEL`
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
    assert value(args, "--kv-cache-dtype") == "fp8" and value(args, "--all2all-backend") == "mori_low_latency"
    assert env == {}


def test_vllm_eager_and_speculation():
    args, _ = argv("vllm", tp=8, graph_capture="none", spec_method="mtp", spec_depth=3)
    assert "--enforce-eager" in args and "--compilation-config" not in args
    assert json.loads(value(args, "--speculative-config")) == {"method": "mtp", "num_speculative_tokens": 3}


def test_sglang_flags():
    args, env = argv("sglang", tp=8, ep=8, attention_dp=8, max_captured_batch=16, moe_backend="deepgemm",
                     attention_backend="flashmla", spec_method="eagle3", spec_depth=2, kv_block_size=64)
    assert args[1:3] == ["-m", "sglang.launch_server"]
    assert value(args, "--tp-size") == "8" and value(args, "--ep-size") == "8" and value(args, "--attn-dp-size") == "8"
    assert "--disable-radix-cache" in args
    start = args.index("--cuda-graph-bs-decode") + 1
    assert args[start:start + 5] == ["1", "2", "4", "8", "16"]
    assert value(args, "--moe-runner-backend") == "deep_gemm" and value(args, "--attention-backend") == "flashmla"
    assert value(args, "--speculative-algorithm") == "EAGLE3" and value(args, "--speculative-num-draft-tokens") == "3"
    assert value(args, "--speculative-draft-model-path") == "/ckpt/draft"
    assert value(args, "--max-running-requests") == str(256 * 8)       # SGLang splits its cap over the 8 DP ranks
    assert value(args, "--page-size") == "64"
    eager, _ = argv("sglang", tp=8, graph_capture="none")
    assert value(eager, "--cuda-graph-backend-decode") == "disabled" and "--cuda-graph-bs-decode" not in eager


def test_atom_flags():
    args, _ = argv("atom", tp=8, ep=8, kv_cache_dtype="fp8", max_captured_batch=8, spec_method="mtp", spec_depth=1)
    assert args[1:3] == ["-m", "atom.entrypoints.openai_server"]
    assert value(args, "--server-port") == "8000" and value(args, "--kv_cache_dtype") == "fp8"
    assert value(args, "--cudagraph-capture-sizes") == "[1,2,4,8]" and "--enable-expert-parallel" in args
    assert value(args, "--method") == "mtp" and value(args, "--num-speculative-tokens") == "1"
    assert "--enable_prefix_caching" not in args


def test_inexpressible_levers_are_refused():
    with pytest.raises(InputError, match="the checkpoint holds them in fp8 and vLLM quantizes only BF16"):
        argv("vllm", tp=8, expert_dtype="fp4")
    with pytest.raises(InputError, match="weight_dtype=bf16"):
        argv("atom", tp=8, weight_dtype="bf16")
    with pytest.raises(InputError, match="weight_dtype=fp4 cannot be set on the trtllm command line"):
        argv("trtllm", tp=8, weight_dtype="fp4")
    with pytest.raises(InputError, match="attention_dp=2"):
        argv("trtllm", tp=8, attention_dp=2)
    # vLLM's and ATOM's --enable-expert-parallel is EP over the whole replica: EP2 of TP8
    # would be launched (and measured) as EP8
    for engine in ("vllm", "atom"):
        with pytest.raises(InputError, match=f"ep=2 cannot be set on the {engine} command line.*1 or 8"):
            argv(engine, tp=8, ep=2)
        assert "--enable-expert-parallel" in argv(engine, tp=8, ep=8)[0]
        assert "--enable-expert-parallel" not in argv(engine, tp=8, ep=1)[0]


KIMI = {"weight_dtype": "bf16", "expert_dtype": "fp4", "activation_dtype": None, "kv_cache_dtype": "bf16"}
DENSE_BF16 = {"weight_dtype": "bf16", "expert_dtype": None, "activation_dtype": None, "kv_cache_dtype": "bf16"}


def quantization(native, **levers):
    args = list(adapter_for("vllm").launch(Configuration(tp=8, **levers), REQUEST, native).argv)
    shorthand = value(args, "--quantization") if "--quantization" in args else None
    config = json.loads(value(args, "--quantization-config")) if "--quantization-config" in args else None
    return shorthand, config


def test_vllm_online_quantization_of_a_bf16_checkpoint():
    """BF16 checkpoints: `--quantization online` and each slot's method shorthand. vLLM
    0.33.0's online methods pick their own activations (fp8_per_block: W8A8, mxfp4: W4A4)
    and refuse an activation override (quantization/online/base.py), and its "mxfp4" key
    is the dynamic activation format, which no online weight table holds: a shorthand."""
    assert quantization(DENSE_BF16) == (None, None)
    shorthand, config = quantization(DENSE_BF16, weight_dtype="fp8")
    assert shorthand == "online" and config == {"linear": "fp8_per_block"}
    shorthand, config = quantization(DENSE_BF16, weight_dtype="fp4", activation_dtype="fp4")
    assert shorthand == "online" and config == {"linear": "mxfp4"}
    # unset activations: the online method's W4A4, as the step model prices it (Precisions.gemm_activation)
    assert quantization(DENSE_BF16, weight_dtype="fp4") == ("online", {"linear": "mxfp4"})
    with pytest.raises(InputError, match="online mxfp4 runs fp4 activations"):
        quantization(DENSE_BF16, weight_dtype="fp4", activation_dtype="bf16")   # W4A16: not an online method


def test_vllm_online_fp4_on_a_gpu_without_fp4_tensor_cores_is_refused_unless_activations_are_fp4():
    """Without FP4 tensor cores the step model prices fp4 weights weight-only (W4A16), which
    vLLM's online mxfp4 does not run: refused with the way out, never launched as W4A4."""
    hopper = replace(REQUEST, fp4_compute=False)
    args = list(adapter_for("vllm").launch(Configuration(tp=8), hopper, DENSE_BF16).argv)
    assert "--quantization" not in args
    with pytest.raises(InputError, match="online mxfp4 runs fp4 activations, which this GPU has no FP4"):
        adapter_for("vllm").launch(Configuration(tp=8, weight_dtype="fp4"), hopper, DENSE_BF16)
    with pytest.raises(InputError, match="W4A8.*Marlin, W4A16"):     # no MXFP4 x MXFP8 MoE kernel off Blackwell
        adapter_for("vllm").launch(Configuration(tp=8, activation_dtype="fp8"), hopper, KIMI)
    assert "mxfp8" in adapter_for("vllm").launch(Configuration(tp=8, activation_dtype="fp8"), REQUEST, KIMI).display()
    with pytest.raises(InputError) as fp8:     # an fp8 refusal does not blame FP4 tensor cores
        adapter_for("vllm").launch(Configuration(tp=8, weight_dtype="fp8", activation_dtype="bf16"), hopper, DENSE_BF16)
    assert "runs fp8 activations" in str(fp8.value) and "FP4" not in fp8.value.problem


def test_vllm_fp4_on_a_partly_quantized_checkpoint():
    """Kimi-K3 keeps its own fp4 experts: only the override is passed, never --quantization."""
    shorthand, config = quantization(KIMI, weight_dtype="fp4", activation_dtype="fp4")
    assert shorthand is None and config == {"linear": "mxfp4", "moe": {"weight": None, "activation": "mxfp4"}}
    shorthand, config = quantization(KIMI, weight_dtype="fp8", activation_dtype="fp8")
    assert shorthand is None and config["moe"] == {"weight": None, "activation": "mxfp8"}   # W4A8 experts
    assert config["linear"] == "fp8_per_block"
    # fp8 activations: no GEMM runs W16A8, so the bf16 linear layers keep bf16 (as priced) and only
    # the fp4 experts take them (W4A8)
    shorthand, config = quantization(KIMI, activation_dtype="fp8")
    assert shorthand is None and config == {"moe": {"weight": None, "activation": "mxfp8"}}
    # fp4 activations on fp8 linear weights: no W8A4 GEMM, so W8A8 linear layers, W4A4 experts
    shorthand, config = quantization(KIMI, weight_dtype="fp8", activation_dtype="fp4")
    assert config == {"linear": "fp8_per_block", "moe": {"weight": None, "activation": "mxfp4"}}
    with pytest.raises(InputError, match="holds them in fp4"):
        quantization(KIMI, expert_dtype="fp8")


def test_a_named_checkpoint_carries_its_own_precision():
    request = LaunchRequest(model_path="org/R1-FP4", served_name="DeepSeek-R1", port=8000, context_tokens=16384,
                            checkpoint_given=True)
    args = adapter_for("vllm").launch(Configuration(tp=8, expert_dtype="fp4"), request, FP8).argv
    assert "--quantization" not in args and "--quantization-config" not in args
    assert adapter_for("trtllm").launch(Configuration(tp=8, weight_dtype="fp4"), request, FP8).argv[2] == "org/R1-FP4"


def test_trtllm_serve_flags_and_options_file():
    """Flags from tensorrt_llm/commands/serve.py, options from llmapi/llm_args.py."""
    command = adapter_for("trtllm").launch(
        Configuration(tp=8, ep=8, attention_dp=8, kv_cache_dtype="fp8", moe_backend="deepgemm", spec_method="mtp",
                      spec_depth=3, max_captured_batch=16, kv_block_size=64), REQUEST, FP8)
    args = list(command.argv)
    assert args[:3] == ["trtllm-serve", "serve", "deepseek-ai/DeepSeek-R1"]
    assert value(args, "--backend") == "pytorch" and value(args, "--tp_size") == "8"
    assert value(args, "--ep_size") == "8" and value(args, "--max_seq_len") == "16384"
    # off by default: a prompt over max_num_tokens would be refused; the simulator chunks prompts
    assert "--enable_chunked_prefill" in args
    ((path, text),) = command.files
    assert value(args, "--extra_llm_api_options") == path and path.endswith(".yaml")
    options = yaml.safe_load(text)
    assert options["enable_attention_dp"] is True
    # balanced as its recipes run it and the simulator prices it (TensorRT-LLM's default: off)
    assert options["attention_dp_config"] == {"enable_balance": True, "batching_wait_iters": 0, "timeout_iters": 60}
    assert options["kv_cache_config"] == {"enable_block_reuse": False, "free_gpu_memory_fraction": 0.9,
                                          "dtype": "fp8", "tokens_per_block": 64}
    assert options["cuda_graph_config"] == {"batch_sizes": [1, 2, 4, 8, 16], "enable_padding": True}
    assert options["moe_config"] == {"backend": "DEEPGEMM"}
    assert options["speculative_config"] == {"decoding_type": "MTP", "num_nextn_predict_layers": 3}
    eager = yaml.safe_load(adapter_for("trtllm").launch(Configuration(tp=8, graph_capture="none"), REQUEST,
                                                        FP8).files[0][1])
    assert eager["cuda_graph_config"] is None and eager["enable_attention_dp"] is False
    assert "attention_dp_config" not in eager
    eagle = yaml.safe_load(adapter_for("trtllm").launch(Configuration(tp=8, spec_method="eagle3", spec_depth=2),
                                                        REQUEST, FP8).files[0][1])
    assert eagle["speculative_config"] == {"decoding_type": "Eagle3", "max_draft_len": 2,
                                           "speculative_model": "/ckpt/draft", "eagle3_one_model": True}
    with pytest.raises(InputError, match="draft checkpoint"):
        adapter_for("trtllm").launch(Configuration(tp=8, spec_method="eagle3", spec_depth=2),
                                     replace(REQUEST, draft_model=None), FP8)


def test_trtllm_runs_decode_context_parallelism_as_helix_on_a_decode_pool():
    """TensorRT-LLM's Helix (docs/source/features/helix.md): the CP ranks are the FFN's TP
    ranks, so a DCP8 replica of 8 GPUs is tp_size 1 x context_parallel_size 8, its block
    size in both places; the prefill pool runs a context server without CP; a colocated
    DCP replica cannot be launched."""
    adapter, config = adapter_for("trtllm"), Configuration(tp=8, ep=8, dcp=8)
    decode = adapter.launch(config, replace(REQUEST, pool=PoolRole(DECODE, "nixl")), FP8)
    options = yaml.safe_load(decode.files[0][1])
    assert value(list(decode.argv), "--tp_size") == "1" and value(list(decode.argv), "--ep_size") == "8"
    assert options["context_parallel_size"] == 8
    assert options["cp_config"] == {"cp_type": "HELIX", "tokens_per_block": 32}
    assert options["kv_cache_config"]["tokens_per_block"] == 32
    reused = adapter.launch(config, replace(REQUEST, pool=PoolRole(DECODE, "nixl"), prefix_caching=True), FP8)
    assert yaml.safe_load(reused.files[0][1])["kv_cache_config"]["enable_block_reuse"] is False
    prefill = adapter.launch(config, replace(REQUEST, pool=PoolRole(PREFILL, "nixl")), FP8)
    assert value(list(prefill.argv), "--tp_size") == "8" and "cp_config" not in yaml.safe_load(prefill.files[0][1])
    with pytest.raises(InputError, match="dcp=8.*decode pool"):
        adapter.launch(config, REQUEST, FP8)


def test_llamacpp_command_and_sweep():
    adapter = adapter_for("llamacpp")
    request = LaunchRequest(model_path="/m/x.gguf", served_name="x", port=9000, context_tokens=4096, threads=2,
                            python="python")
    config = Configuration(graph_capture="none")
    args = list(adapter.launch(config, request, {"weight_dtype": "fp4", "kv_cache_dtype": "bf16"}).argv)
    assert args == ["python", "-m", "llama_cpp.server", "--model", "/m/x.gguf", "--model_alias", "x",
                    "--host", "127.0.0.1", "--port", "9000", "--n_ctx", "4096", "--interrupt_requests", "False",
                    "--n_threads", "2", "--n_threads_batch", "2"]
    assert adapter.sweep_batches(config) == (1, 2, 4, 8) and adapter.captured_sizes(config) == ()
    assert adapter.request_extras(2) == {"logit_bias": {"2": -100.0}}
    with pytest.raises(InputError, match="kv_cache_dtype=fp8"):
        adapter.launch(Configuration(graph_capture="none", kv_cache_dtype="fp8"), request, {"weight_dtype": "fp4"})


@pytest.mark.parametrize("engine", ["vllm", "sglang", "atom", "trtllm"])
@pytest.mark.parametrize("levers", [
    {"tp": 8},
    {"tp": 8, "ep": 8, "attention_dp": 8, "kv_cache_dtype": "fp8", "max_captured_batch": 64, "kv_block_size": 64},
    {"tp": 4, "graph_capture": "none", "spec_method": "mtp", "spec_depth": 2},
    {"tp": 8, "ep": 8, "all_to_all_backend": "deepep", "moe_backend": "cutlass", "spec_method": "ngram",
     "spec_depth": 3},
    {"tp": 2, "pp": 2, "max_running_requests": 64, "max_batched_tokens": 4096, "chunked_prefill_size": 2048,
     "kv_memory_fraction": 0.8},
    {"tp": 2, "max_batched_tokens": 4096, "chunked_prefill_size": 4096, "host_kv_tier_gb": 100.0},
    {"tp": 8, "allreduce_algorithm": "library", "max_batched_tokens": 16384},
])
def test_harvest_commands_pass_the_engines_own_argument_definitions(engine, levers):
    """Every flag, value and environment variable is one the engine's released source
    defines (tests/fixtures/engine_flags, built by scripts/build_engine_flags.py)."""
    illegal = [name for name, v in levers.items() if get_lever(name).values is not None
               and v not in get_lever(name).legal_values(Engine(engine))]
    if illegal:
        pytest.skip(f"{', '.join(illegal)} not legal on {engine}")
    try:
        command = adapter_for(engine).launch(Configuration(**levers), REQUEST, FP8)
    except InputError:
        pytest.skip(f"{engine} refuses {levers} (tested above)")
    assert argv_problems(command.argv, engine, FLAGS_START) == []
    if engine in ("vllm", "sglang"):
        assert env_problems(command.env, engine) == []


def test_a_drafting_method_needs_its_draft_and_vllm_captures_verify_tokens():
    """EAGLE-3 runs a separate draft checkpoint: without one the launch is refused (the
    engine would not start). vLLM captures graphs by tokens: a verify step of b requests at
    depth k is b * (1 + k) tokens, so the captured sizes scale with it. DCP reaches both."""
    bare = LaunchRequest(model_path="m", served_name="m", port=8000, context_tokens=16384, python="python")
    for engine in ("vllm", "sglang"):
        with pytest.raises(InputError, match="draft checkpoint"):
            adapter_for(engine).launch(Configuration(tp=8, spec_method="eagle3", spec_depth=2), bare, FP8)
    args, _ = argv("vllm", tp=8, spec_method="eagle3", spec_depth=3, max_captured_batch=16)
    assert json.loads(value(args, "--speculative-config"))["model"] == "/ckpt/draft"
    assert json.loads(value(args, "--compilation-config"))["cudagraph_capture_sizes"] == [4, 8, 16, 32, 64]
    assert value(argv("vllm", tp=8, dcp=2)[0], "--decode-context-parallel-size") == "2"


def test_attention_kernels_are_named_for_the_models_attention():
    """vLLM and SGLang name MLA kernels apart (an MHA backend on an MLA model does not start)."""
    gqa = replace(REQUEST, mla=False)
    mla_args, _ = argv("vllm", tp=8, attention_backend="aiter")
    assert value(mla_args, "--attention-backend") == "ROCM_AITER_MLA"
    gqa_args = adapter_for("vllm").launch(Configuration(tp=8, attention_backend="aiter"), gqa, FP8).argv
    assert value(list(gqa_args), "--attention-backend") == "ROCM_AITER_FA"
    with pytest.raises(InputError, match="MHA/GQA"):
        adapter_for("vllm").launch(Configuration(tp=8, attention_backend="flashmla"), gqa, FP8)
    assert value(argv("sglang", tp=8, attention_backend="trtllm")[0], "--attention-backend") == "trtllm_mla"


def test_redundant_experts_reach_the_engines_that_have_them():
    args, _ = argv("vllm", tp=8, ep=8, eplb_replicas=32)
    assert "--enable-eplb" in args and json.loads(value(args, "--eplb-config")) == {"num_redundant_experts": 32}
    assert value(argv("sglang", tp=8, ep=8, eplb_replicas=32)[0], "--ep-num-redundant-experts") == "32"
    for engine in ("atom", "trtllm"):
        with pytest.raises(InputError, match="eplb_replicas"):
            argv(engine, tp=8, ep=8, eplb_replicas=32)


def test_vllm_refuses_a_recipe_it_cannot_make_online_instead_of_crashing():
    """A published recipe (or per-component dtypes) is a checkpoint's layout: plan-mix's
    deploy line of a vLLM pick with weight_dtype=recipe:nvfp4 crashed (KeyError)."""
    for spec in ("recipe:nvfp4", "fp8+shared_experts:bf16"):
        with pytest.raises(InputError, match="checkpoint's layout"):
            argv("vllm", tp=8, weight_dtype=spec)


def test_a_prompts_chunk_is_launched_where_the_engine_has_a_flag_for_it():
    """vLLM's V1 scheduler caps a prompt's tokens per step at --long-prefill-token-threshold
    (the launch carried no chunk size: 1,024 and 16,384 deployed byte-identical)."""
    args, _ = argv("vllm", tp=8, max_batched_tokens=16384, chunked_prefill_size=1024)
    assert value(args, "--long-prefill-token-threshold") == "1024"
    assert "--long-prefill-token-threshold" not in argv("vllm", tp=8)[0]


def test_a_private_host_kv_tier_is_launched_and_a_shared_one_refused():
    """host_kv_tier_gb (per GPU) changes the price by a factor (agentic Kimi-K3: 12 -> 62
    tok/s/GPU) and was dropped from every launch: vLLM's offloading buffer (GiB summed over
    the TP ranks), SGLang's hierarchical cache (GB per rank), TensorRT-LLM's host cache
    (bytes per rank); a pool shared by every node is a store outside the engine."""
    config = Configuration(tp=8, host_kv_tier_gb=200.0)
    vllm = list(adapter_for("vllm").launch(config, REQUEST, FP8).argv)
    assert value(vllm, "--kv-offloading-backend") == "native"
    assert float(value(vllm, "--kv-offloading-size")) == pytest.approx(200e9 * 8 / 2**30, rel=1e-3)
    sglang = list(adapter_for("sglang").launch(config, REQUEST, FP8).argv)
    assert "--enable-hierarchical-cache" in sglang and value(sglang, "--hicache-size") == "200"
    options = yaml.safe_load(adapter_for("trtllm").launch(config, REQUEST, FP8).files[0][1])
    assert options["kv_cache_config"]["host_cache_size"] == 200 * 10**9
    for engine in ("vllm", "sglang", "trtllm"):
        plain = adapter_for(engine).launch(Configuration(tp=8), REQUEST, FP8)
        assert "offloading" not in " ".join(plain.argv) and "hicache" not in " ".join(plain.argv)
        with pytest.raises(InputError, match="shared over the nodes"):
            adapter_for(engine).launch(Configuration(tp=8, host_kv_tier_gb="200:shared"), REQUEST, FP8)
    with pytest.raises(InputError, match="host_kv_tier_gb"):     # ATOM has no flag for it: refused, not dropped
        adapter_for("atom").launch(Configuration(tp=8, host_kv_tier_gb=100.0), REQUEST, FP8)


def test_the_all_to_all_backend_is_launched_or_refused_never_dropped():
    """TensorRT-LLM and ATOM pick their own EP dispatch: a priced deepep / mori was
    written nowhere in their launches (268.6 vs 271.3 tok/s/GPU priced on DeepSeek-R1)."""
    assert value(argv("vllm", tp=8, ep=8, all_to_all_backend="deepep")[0], "--all2all-backend") == "deepep_low_latency"
    assert value(argv("sglang", tp=8, ep=8, all_to_all_backend="deepep")[0], "--moe-a2a-backend") == "deepep"
    for engine, backend in (("trtllm", "deepep"), ("atom", "mori")):
        with pytest.raises(InputError, match="all_to_all_backend"):
            adapter_for(engine).launch(Configuration(tp=8, ep=8, all_to_all_backend=backend), REQUEST, FP8)
        adapter_for(engine).launch(Configuration(tp=8, ep=8), REQUEST, FP8)      # none: launched as before


def test_the_allreduce_algorithm_is_launched_or_refused_never_dropped():
    """The lever changes the priced communication; every launch dropped it."""
    assert "--disable-custom-all-reduce" in argv("vllm", tp=8, allreduce_algorithm="library")[0]
    sglang = list(adapter_for("sglang").launch(Configuration(tp=8, allreduce_algorithm="fused_rmsnorm"), REQUEST,
                                               FP8).argv)
    assert "--enable-flashinfer-allreduce-fusion" in sglang
    options = yaml.safe_load(adapter_for("trtllm").launch(Configuration(tp=8, allreduce_algorithm="custom_one_shot"),
                                                          REQUEST, FP8).files[0][1])
    assert options["allreduce_strategy"] == "ONESHOT"
    for engine, value in (("vllm", "custom_one_shot"), ("trtllm", "fused_rmsnorm"), ("atom", "library")):
        with pytest.raises(InputError, match="allreduce_algorithm"):
            adapter_for(engine).launch(Configuration(tp=8, allreduce_algorithm=value), REQUEST, FP8)
    assert "all-reduce" not in " ".join(argv("vllm", tp=8)[0])
    # ROCm's quick all-reduce, priced on an int8 payload, is an environment variable
    assert argv("vllm", tp=8, allreduce_algorithm="quick_reduce")[1]["VLLM_ROCM_QUICK_REDUCE_QUANTIZATION"] == "INT8"
    assert argv("sglang", tp=8, allreduce_algorithm="quick_reduce")[1]["ROCM_QUICK_REDUCE_QUANTIZATION"] == "INT8"
    assert not any("QUICK_REDUCE" in name for name in argv("vllm", tp=8)[1])


def test_vllm_refuses_fp4_experts_on_an_int4_checkpoint():
    """Kimi-K2.5 ships INT4 experts: expert_dtype=fp4 is their NVFP4 requantization (priced
    W4A4), which vLLM cannot make online; unset, the checkpoint's INT4 run as they are."""
    native = {"weight_dtype": "bf16", "expert_dtype": "fp4", "activation_dtype": None, "kv_cache_dtype": "bf16",
              "expert_format": "int4"}
    assert quantization(native) == (None, None)
    with pytest.raises(InputError, match="holds them in int4"):
        quantization(native, expert_dtype="fp4")
