"""Engine adapters: how to launch each engine with an anchor's configuration, and the
few request details that differ between engines (METHOD §4; PRODUCT.md §6).

Every adapter builds an argument list (never a shell string) from validated lever
values: widths, dtypes, backends, graph capture and its captured sizes, speculative
settings, scheduler limits, and prefix caching OFF for a harvest (ON for a deployment:
`LaunchRequest.prefix_caching`, `inferasim deploy`), plus the KV-transfer flags of one
pool of a disaggregated deployment (`LaunchRequest.pool`). A lever an engine cannot
express on its command line is refused (`InputError`) rather than dropped: launch the
engine yourself and pass `--endpoint`.

Flag names are checked in tests against each engine's own argument definitions, parsed
from its released source (`tests/fixtures/engine_flags/`, `scripts/build_engine_flags.py`:
vLLM 0.33.0, SGLang 0.5.23, TensorRT-LLM and ATOM at the commits recorded there):
- vLLM (`vllm serve`): --tensor-parallel-size, --data-parallel-size,
  --enable-expert-parallel, --pipeline-parallel-size, --[no-]enable-prefix-caching,
  --enforce-eager, --compilation-config '{"cudagraph_mode", "cudagraph_capture_sizes"}',
  --kv-cache-dtype, --attention-backend, --moe-backend, --all2all-backend,
  --speculative-config, online quantization (`--quantization`, `--quantization-config`:
  `predictor.harvest.quantization`), --max-num-seqs, --max-num-batched-tokens,
  --gpu-memory-utilization, --block-size, --long-prefill-token-threshold (a prompt's chunk
  below the step's token budget), --kv-offloading-backend native --kv-offloading-size (a
  private host KV tier, GiB over the TP ranks); a pool: --kv-transfer-config (NIXL,
  Mooncake or MoRIIO connector, producer or consumer).
- SGLang (`python -m sglang.launch_server`): --tp-size, --ep-size, --attn-dp-size,
  --pp-size, --disable-radix-cache, --cuda-graph-max-bs-decode / --cuda-graph-bs-decode,
  or --cuda-graph-backend-{decode,prefill} disabled, --kv-cache-dtype fp8_e4m3,
  --attention-backend, --moe-runner-backend, --moe-a2a-backend,
  --speculative-algorithm/-num-steps/-eagle-topk/-num-draft-tokens,
  --max-running-requests, --max-prefill-tokens, --chunked-prefill-size,
  --mem-fraction-static, --page-size, --enable-hierarchical-cache --hicache-size (a private
  host KV tier, GB per rank); a pool: --disaggregation-mode, --disaggregation-transfer-backend.
- A host KV pool shared by every node (``host_kv_tier_gb=N:shared``) is a store outside the
  engines (`launch.host_tier_gb`): refused on every engine.
- `allreduce_algorithm` (`launch.allreduce_choice`): ``library`` is vLLM's and SGLang's
  --disable-custom-all-reduce, ``fused_rmsnorm`` SGLang's --enable-flashinfer-allreduce-fusion,
  ``quick_reduce`` (ROCm) vLLM's VLLM_ROCM_QUICK_REDUCE_QUANTIZATION=INT8 and SGLang's
  ROCM_QUICK_REDUCE_QUANTIZATION=INT8 (the int8 payload priced), TensorRT-LLM's
  `allreduce_strategy` NCCL / ONESHOT / TWOSHOT; the rest is refused.
- `all_to_all_backend` (`launch.all_to_all_choice`): vLLM's --all2all-backend and SGLang's
  --moe-a2a-backend; TensorRT-LLM and ATOM pick their own dispatch, so any backend but
  ``none`` is refused there (a priced ``deepep`` is not what they would run).
- ATOM (`python -m atom.entrypoints.openai_server`): --tensor-parallel-size,
  --data-parallel-size with --enable-dp-attention, --enable-expert-parallel,
  --kv_cache_dtype, --cudagraph-capture-sizes "[..]" / --enforce-eager, --method mtp
  --num-speculative-tokens, --max-num-seqs, --max-num-batched-tokens,
  --gpu-memory-utilization, --block-size, --server-port. ATOM leaves prefix caching off
  unless --enable_prefix_caching is given (the measured reuse probe verifies it).
- llama.cpp (`python -m llama_cpp.server`): --model FILE.gguf --model_alias NAME --host
  --port --n_ctx --n_threads --n_threads_batch (prefill threads), and
  --interrupt_requests False (by default a new request cuts the stream being served
  short; queued, the requests run one at a time). It keeps no prefix cache across
  requests except the previous prompt's tokens, which unique prompts defeat (`checks`).
- TensorRT-LLM (`trtllm-serve serve`, flags plus a YAML options file):
  `predictor.harvest.trtllm`.
- ATOM has no prefill/decode pool flags in the release checked: a disaggregated ATOM
  deployment is refused.

The shared records (launch request and command, protocol, ladders) live in
`predictor.harvest.launch` and are re-exported here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from levers.catalog import Engine
from levers.configuration import Configuration
from levers.errors import InputError, accepted_list
from predictor.harvest.launch import (  # noqa: F401 - re-exported: the adapters' public records
    CAPTURE_LADDER,
    DEFAULT_HOST,
    EAGER_LADDER,
    SERIAL_LADDER,
    EngineAdapter,
    GpuAdapter,
    LaunchCommand,
    LaunchRequest,
    PoolRole,
    Switch,
    all_to_all_choice,
    allreduce_choice,
    changed_dtype,
    draft_for,
    host_tier_gb,
    ladder,
    native_dtypes,
    refuse,
)
from predictor.harvest.quantization import vllm_quantization_args
from predictor.harvest.trtllm import TrtllmAdapter
from predictor.units import BYTES_PER_GB, BYTES_PER_GIB


def expert_parallel_flag(engine: Engine, config: Configuration) -> str:
    """vLLM's and ATOM's one expert-parallel switch: ``--enable-expert-parallel`` shards
    the experts over every tensor x data-parallel rank of the replica (EP = tp), and no
    flag sets a narrower EP group, so an ``ep`` between 1 and tp is priced but cannot be
    launched (it would run, and be measured, at EP = tp)."""
    if config.ep != config.tp:
        raise refuse(engine, "ep", config.ep, f"1 or {config.tp} (its --enable-expert-parallel spans every "
                                              "tensor x data-parallel rank of the replica)")
    return "--enable-expert-parallel"


class VllmAdapter(GpuAdapter):
    engine = Engine.VLLM
    package = "vllm"
    _ATTENTION = MappingProxyType({"triton": "TRITON_ATTN", "flashinfer": "FLASHINFER",
                                   "flash_attn": "FLASH_ATTN", "aiter": "ROCM_AITER_FA"})
    _MLA_ATTENTION = MappingProxyType({"triton": "TRITON_MLA", "flashinfer": "FLASHINFER_MLA", "flashmla": "FLASHMLA",
                                       "flash_attn": "FLASH_ATTN_MLA", "aiter": "ROCM_AITER_MLA"})
    _CAPTURE = MappingProxyType({"piecewise": "PIECEWISE", "full": "FULL_AND_PIECEWISE"})
    all_to_all_choices = MappingProxyType({"deepep": "deepep_low_latency", "pplx": "pplx", "mori": "mori_low_latency"})
    _MOE = MappingProxyType({"triton": "triton", "aiter": "aiter", "deepgemm": "deep_gemm", "cutlass": "cutlass",
                             "flashinfer": "flashinfer_cutlass"})
    _MOE_ENV = MappingProxyType({"aiter": {"VLLM_ROCM_USE_AITER": "1"}})
    # quick_reduce is priced on an int8 payload (`predictor.step.comm_cost`): INT8
    allreduce_choices = MappingProxyType({
        "library": Switch(("--disable-custom-all-reduce",)),
        "quick_reduce": Switch(env=MappingProxyType({"VLLM_ROCM_QUICK_REDUCE_QUANTIZATION": "INT8"}))})
    _CONNECTORS = MappingProxyType({"nixl": "NixlConnector", "mooncake": "MooncakeConnector",
                                    "mori": "MoRIIOConnector"})

    def launch(self, config: Configuration, request: LaunchRequest, native: dict[str, str]) -> LaunchCommand:
        quantization = [] if request.checkpoint_given else vllm_quantization_args(
            config.weight_dtype, config.expert_dtype, config.activation_dtype, native, request.fp4_compute)
        attention_tp = config.tp // config.attention_dp
        argv = ["vllm", "serve", request.model_path, "--served-model-name", request.served_name,
                "--host", request.host, "--port", str(request.port),
                "--tensor-parallel-size", str(attention_tp), "--data-parallel-size", str(config.attention_dp),
                "--pipeline-parallel-size", str(config.pp),
                "--enable-prefix-caching" if request.prefix_caching else "--no-enable-prefix-caching",
                "--max-model-len", str(request.context_tokens),
                "--max-num-seqs", str(config.max_running_requests),
                "--max-num-batched-tokens", str(config.max_batched_tokens),
                "--gpu-memory-utilization", request.memory_flag(config)]
        env: dict[str, str] = {}
        if config.chunked_prefill_size < config.max_batched_tokens:   # a prompt's chunk per step (V1 scheduler)
            argv += ["--long-prefill-token-threshold", str(config.chunked_prefill_size)]
        if switch := allreduce_choice(self.engine, config, self.allreduce_choices):
            argv += switch.flags
            env.update(switch.env)
        if config.ep > 1:
            argv.append(expert_parallel_flag(self.engine, config))
        if config.dcp > 1:
            argv += ["--decode-context-parallel-size", str(config.dcp)]
        if config.eplb_replicas:            # redundant hot-expert copies (Eq. 3)
            argv += ["--enable-eplb", "--eplb-config", json.dumps({"num_redundant_experts": config.eplb_replicas})]
        if config.graph_capture == "none":
            argv.append("--enforce-eager")
        else:       # vLLM captures by tokens: a verify step of b requests carries b * (1 + depth)
            tokens = 1 + (config.spec_depth if config.spec_method != "none" else 0)
            argv += ["--compilation-config", json.dumps({"cudagraph_mode": self._CAPTURE[config.graph_capture],
                                                         "cudagraph_capture_sizes": [size * tokens for size in
                                                                                     self.captured_sizes(config)]})]
        argv += quantization
        if config.kv_cache_dtype == "fp8":
            argv += ["--kv-cache-dtype", "fp8"]
        if config.attention_backend:      # vLLM's backends are per attention kind (MLA or not)
            names = self._MLA_ATTENTION if request.mla else self._ATTENTION
            if config.attention_backend not in names:
                raise refuse(self.engine, "attention_backend", config.attention_backend,
                             ", ".join(names) + (" (MLA kernels)" if request.mla else " (MHA/GQA kernels)"))
            argv += ["--attention-backend", names[config.attention_backend]]
        if config.moe_backend:
            argv += ["--moe-backend", self._MOE[config.moe_backend]]
            env.update(self._MOE_ENV.get(config.moe_backend, {}))
        if backend := all_to_all_choice(self.engine, config, self.all_to_all_choices):
            argv += ["--all2all-backend", backend]
        if config.kv_block_size:
            argv += ["--block-size", str(config.kv_block_size)]
        if config.spec_method != "none":
            draft = draft_for(self.engine, config, request)
            argv += ["--speculative-config", json.dumps({"method": config.spec_method,
                                                         "num_speculative_tokens": config.spec_depth,
                                                         **({"model": draft} if draft else {})})]
        if (host := host_tier_gb(self.engine, config)) > 0:   # GiB summed over the TP ranks (vLLM's unit)
            argv += ["--kv-offloading-backend", "native", "--kv-offloading-size",
                     f"{host * attention_tp * BYTES_PER_GB / BYTES_PER_GIB:.4g}"]
        if request.pool is not None:
            argv += ["--kv-transfer-config", json.dumps({
                "kv_connector": self._CONNECTORS[request.pool.kv_transfer_backend],
                "kv_role": "kv_producer" if request.pool.is_prefill else "kv_consumer"})]
        return LaunchCommand(tuple(argv), env)


class SglangAdapter(GpuAdapter):
    engine = Engine.SGLANG
    package = "sglang"
    _MOE = MappingProxyType({"triton": "triton", "deepgemm": "deep_gemm", "cutlass": "cutlass",
                             "flashinfer": "flashinfer_cutlass"})
    _SPEC = MappingProxyType({"mtp": "NEXTN", "eagle3": "EAGLE3", "ngram": "NGRAM"})
    all_to_all_choices = MappingProxyType({"deepep": "deepep", "mori": "mori"})
    allreduce_choices = MappingProxyType({
        "library": Switch(("--disable-custom-all-reduce",)),
        "fused_rmsnorm": Switch(("--enable-flashinfer-allreduce-fusion",)),
        "quick_reduce": Switch(env=MappingProxyType({"ROCM_QUICK_REDUCE_QUANTIZATION": "INT8"}))})

    def _check_fp8(self, config: Configuration, native: dict[str, str]) -> None:
        """SGLang's online ``--quantization fp8`` quantizes every linear and MoE layer of a
        BF16 checkpoint, and refuses a checkpoint quantized by another method: fp8 weights
        with bf16 experts, or on a partly quantized checkpoint, cannot be launched so."""
        experts = native.get("expert_dtype")
        if native.get("weight_dtype") not in (None, "bf16") or experts not in (None, "bf16"):
            raise refuse(self.engine, "weight_dtype", "fp8", "the checkpoint's own (it is quantized already; SGLang "
                         "refuses a second method), or --model-path to an fp8 checkpoint")
        if experts == "bf16":
            raise refuse(self.engine, "weight_dtype", "fp8", "the checkpoint's bf16 on this MoE model (SGLang's "
                         "online fp8 would quantize its bf16 experts too), or --model-path to an fp8 checkpoint")

    def launch(self, config: Configuration, request: LaunchRequest, native: dict[str, str]) -> LaunchCommand:
        weight = self._check_dtypes(config, request, native)
        argv = [request.python, "-m", "sglang.launch_server", "--model-path", request.model_path,
                "--served-model-name", request.served_name, "--host", request.host, "--port", str(request.port),
                "--tp-size", str(config.tp), "--ep-size", str(config.ep), "--pp-size", str(config.pp),
                *(() if request.prefix_caching else ("--disable-radix-cache",)),
                "--context-length", str(request.context_tokens),
                # SGLang splits its running cap over the attention-DP ranks; the lever is per rank
                "--max-running-requests", str(config.max_running_requests * config.attention_dp),
                "--max-prefill-tokens", str(config.max_batched_tokens),
                "--chunked-prefill-size", str(config.chunked_prefill_size),
                "--mem-fraction-static", request.memory_flag(config)]
        env: dict[str, str] = {}
        if switch := allreduce_choice(self.engine, config, self.allreduce_choices):
            argv += switch.flags
            env.update(switch.env)
        if config.attention_dp > 1:
            argv += ["--attn-dp-size", str(config.attention_dp)]
        if config.dcp > 1:
            argv += ["--dcp-size", str(config.dcp)]
        if config.eplb_replicas:
            argv += ["--enable-eplb", "--ep-num-redundant-experts", str(config.eplb_replicas)]
        sizes = self.captured_sizes(config)
        if config.graph_capture == "none":
            argv += ["--cuda-graph-backend-decode", "disabled", "--cuda-graph-backend-prefill", "disabled"]
        else:
            argv += ["--cuda-graph-max-bs-decode", str(sizes[-1]), "--cuda-graph-bs-decode", *map(str, sizes)]
        if weight == "fp8":
            self._check_fp8(config, native)
            argv += ["--quantization", "fp8"]
        if config.kv_cache_dtype == "fp8":
            argv += ["--kv-cache-dtype", "fp8_e4m3"]
        if config.attention_backend:
            trtllm = "trtllm_mla" if request.mla else "trtllm_mha"
            argv += ["--attention-backend", {"trtllm": trtllm}.get(config.attention_backend, config.attention_backend)]
        if config.moe_backend == "aiter":
            env["SGLANG_USE_AITER"] = "1"
        elif config.moe_backend:
            argv += ["--moe-runner-backend", self._MOE[config.moe_backend]]
        if backend := all_to_all_choice(self.engine, config, self.all_to_all_choices):
            argv += ["--moe-a2a-backend", backend]
        if config.kv_block_size:
            argv += ["--page-size", str(config.kv_block_size)]
        if config.spec_method != "none":
            draft = draft_for(self.engine, config, request)
            argv += ["--speculative-algorithm", self._SPEC[config.spec_method],
                     "--speculative-num-steps", str(config.spec_depth), "--speculative-eagle-topk", "1",
                     "--speculative-num-draft-tokens", str(config.spec_depth + 1),
                     *(("--speculative-draft-model-path", draft) if draft else ())]
        if (host := host_tier_gb(self.engine, config)) > 0:   # GB of host KV per rank
            argv += ["--enable-hierarchical-cache", "--hicache-size", f"{host:g}"]
        if request.pool is not None:
            argv += ["--disaggregation-mode", request.pool.role,
                     "--disaggregation-transfer-backend", request.pool.kv_transfer_backend]
        return LaunchCommand(tuple(argv), env)


class AtomAdapter(GpuAdapter):
    engine = Engine.ATOM
    package = "atom"
    tokenize_path = None
    launches_split_pools = False      # no prefill/decode pool flags (module docstring)

    def launch(self, config: Configuration, request: LaunchRequest, native: dict[str, str]) -> LaunchCommand:
        if config.pp > 1:
            raise refuse(self.engine, "pp", config.pp, "1")
        if config.eplb_replicas:
            raise refuse(self.engine, "eplb_replicas", config.eplb_replicas, "0 (no redundant-expert flag in the "
                         "release checked)")
        if host_tier_gb(self.engine, config) > 0:
            raise refuse(self.engine, "host_kv_tier_gb", config.host_kv_tier_gb, "0 (no host KV tier flag in the "
                         "release checked)")
        allreduce_choice(self.engine, config, self.allreduce_choices)   # none: any value is refused
        all_to_all_choice(self.engine, config, self.all_to_all_choices)   # ATOM picks its own dispatch
        if request.pool is not None:
            raise refuse(self.engine, "disaggregated", "true", "a colocated deployment (ATOM's command line "
                         "has no prefill/decode pool flags in the release checked)")
        weight = self._check_dtypes(config, request, native)
        if weight is not None:
            raise refuse(self.engine, "weight_dtype", weight,
                          "the checkpoint's dtype (ATOM has no online quantization)")
        argv = [request.python, "-m", "atom.entrypoints.openai_server", "--model", request.model_path,
                "--host", request.host, "--server-port", str(request.port),
                "--tensor-parallel-size", str(config.tp // config.attention_dp),
                "--max-model-len", str(request.context_tokens),
                "--max-num-seqs", str(config.max_running_requests),
                "--max-num-batched-tokens", str(config.max_batched_tokens),
                "--gpu-memory-utilization", request.memory_flag(config),
                "--kv_cache_dtype", config.kv_cache_dtype or native.get("kv_cache_dtype", "bf16")]
        if config.attention_dp > 1:
            argv += ["--data-parallel-size", str(config.attention_dp), "--enable-dp-attention"]
        if config.ep > 1:
            argv.append(expert_parallel_flag(self.engine, config))
        if config.graph_capture == "none":
            argv.append("--enforce-eager")
        else:
            argv += ["--cudagraph-capture-sizes", "[" + ",".join(map(str, self.captured_sizes(config))) + "]"]
        if config.kv_block_size:
            argv += ["--block-size", str(config.kv_block_size)]
        if config.spec_method != "none":
            argv += ["--method", config.spec_method, "--num-speculative-tokens", str(config.spec_depth)]
        if request.prefix_caching:
            argv.append("--enable_prefix_caching")
        return LaunchCommand(tuple(argv), {})


class LlamaCppAdapter:
    """llama-cpp-python's OpenAI-compatible server on a CPU."""

    engine = Engine.LLAMACPP
    package = "llama_cpp_python"
    health_path = "/v1/models"
    tokenize_path: str | None = "/extras/tokenize"
    serves_one_request_at_a_time = True
    launches_split_pools = False
    allreduce_choices: Mapping[str, Any] = MappingProxyType({})   # one process, no all-reduce
    all_to_all_choices: Mapping[str, str] = MappingProxyType({})

    def captured_sizes(self, config: Configuration) -> tuple[int, ...]:
        return ()

    def sweep_batches(self, config: Configuration) -> tuple[int, ...]:
        return tuple(b for b in SERIAL_LADDER if b <= config.max_running_requests) or (1,)

    def launch(self, config: Configuration, request: LaunchRequest, native: dict[str, str]) -> LaunchCommand:
        for lever in ("weight_dtype", "activation_dtype", "expert_dtype"):
            if changed_dtype(config, native, lever):
                raise refuse(self.engine, lever, getattr(config, lever), "the GGUF file's own quantisation")
        if config.kv_cache_dtype not in (None, "bf16"):
            raise refuse(self.engine, "kv_cache_dtype", config.kv_cache_dtype, "bf16 (llama.cpp's f16 cache)")
        if config.host_tier_gb_per_gpu > 0:
            raise refuse(self.engine, "host_kv_tier_gb", config.host_kv_tier_gb, "0 (no host KV tier)")
        argv = [request.python, "-m", "llama_cpp.server", "--model", request.model_path,
                "--model_alias", request.served_name, "--host", request.host, "--port", str(request.port),
                "--n_ctx", str(request.context_tokens), "--interrupt_requests", "False"]
        if request.threads:
            argv += ["--n_threads", str(request.threads), "--n_threads_batch", str(request.threads)]
        return LaunchCommand(tuple(argv), {})

    def request_extras(self, eos_token_id: int | None) -> dict:
        """No ignore_eos in llama-cpp-python: forbid EOS with a logit bias instead."""
        return {"logit_bias": {str(eos_token_id): -100.0}} if eos_token_id is not None else {}

    def tokenize_body(self, text: str, model: str) -> dict:
        return {"input": text, "model": model}


ADAPTERS: dict[Engine, EngineAdapter] = {
    Engine.VLLM: VllmAdapter(), Engine.SGLANG: SglangAdapter(), Engine.ATOM: AtomAdapter(),
    Engine.TRTLLM: TrtllmAdapter(), Engine.LLAMACPP: LlamaCppAdapter(),
}


def adapter_for(engine: Engine | str) -> EngineAdapter:
    try:
        return ADAPTERS[Engine(str(engine).strip().lower())]
    except (KeyError, ValueError):
        raise InputError("--engine", f"unknown engine '{engine}'", accepted_list(ADAPTERS)) from None
