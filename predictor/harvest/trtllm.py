"""TensorRT-LLM's `trtllm-serve` (PyTorch backend) as a harvest launch (METHOD §4).

Flags and options checked against TensorRT-LLM's source (`tensorrt_llm/commands/serve.py`,
`tensorrt_llm/llmapi/llm_args.py`): `trtllm-serve serve MODEL --host --port --backend
pytorch --tp_size --pp_size --ep_size --max_batch_size --max_num_tokens --max_seq_len
--kv_cache_free_gpu_memory_fraction --enable_chunked_prefill --extra_llm_api_options FILE.yaml`
(chunked prefill is off by default: a prompt longer than ``max_num_tokens`` is then refused,
and the simulator chunks TensorRT-LLM's prompts, `predictor.sim.scheduler.PROFILES`; the release checked,
`tests/fixtures/engine_flags/trtllm.json`, names the file option so; later releases
accept `--config` as an alias of it). What has no flag goes into the YAML options file
(LLM API arguments): `enable_attention_dp`, `kv_cache_config` (`enable_block_reuse`:
false for a harvest, true for a deployment; `dtype: fp8`; `tokens_per_block`;
`host_cache_size`, bytes per rank, for a private host KV tier), a context chunk is
`max_num_tokens` (trtllm-serve has no chunk size of its own: `chunked_prefill_size` is not
launched; the seed planner moves `max_batched_tokens` alone, so refusing it would leave
such a pick undeployable),
`cache_transceiver_config` (`backend: NIXL`) for one pool of a disaggregated deployment,
`cuda_graph_config` (`batch_sizes`, `enable_padding`; null: eager), `moe_config.backend`
(CUTLASS, TRTLLM, DEEPGEMM), `attn_backend`, and `speculative_config` with
`decoding_type` MTP (`num_nextn_predict_layers`), NGram (`max_draft_len`) or Eagle3
(`max_draft_len`, `speculative_model`: the draft checkpoint `--draft-model` names, refused
without one; `eagle3_one_model`, the draft as a submodule of the target).

Decode context parallelism is TensorRT-LLM's Helix (`docs/source/features/helix.md`:
`context_parallel_size`, `cp_config: {cp_type: HELIX, tokens_per_block}` matching
`kv_cache_config.tokens_per_block`), documented for the generation servers of a
disaggregated deployment: each CP rank keeps a slice of every request's KV and the CP
ranks serve as TP ranks for the FFN/MoE layers, so a replica of ``tp`` GPUs with ``dcp``
runs `--tp_size tp/dcp` and `context_parallel_size dcp` (world ``tp``). A decode pool
runs it, without block reuse; its prefill pool runs a context server of ``tp`` GPUs
without CP (the KV moves to the CP ranks in the transfer, as TensorRT-LLM's Helix example
pairs them); a colocated replica with ``dcp > 1`` is refused (no Helix context phase).

`trtllm-serve` quantizes nothing online: precisions come from the checkpoint (ModelOpt
FP8/NVFP4 exports). A precision other than the card's checkpoint's is accepted only when
`--model-path` names the checkpoint to serve (the plan notes that the precisions are
the checkpoint's, unverified by the harvester). Attention DP in TensorRT-LLM spans
every TP rank (`enable_attention_dp`): 1 < attention_dp < tp is refused. With it the
launch writes the balancing its recipes run and the simulator prices
(`attention_dp_config: {enable_balance: true, batching_wait_iters: 0, timeout_iters: 60}`,
`predictor.sim.scheduler.holds_prompts`); TensorRT-LLM's own default is no balancing.
"""

from __future__ import annotations

import os
import tempfile
from types import MappingProxyType

import yaml

from levers.catalog import Engine
from levers.configuration import Configuration
from predictor.harvest.launch import (GpuAdapter, LaunchCommand, LaunchRequest, all_to_all_choice, allreduce_choice,
                                      changed_dtype, draft_for, host_tier_gb, refuse)
from predictor.sim.scheduler import BALANCE_TIMEOUT_STEPS
from predictor.units import BYTES_PER_GB

PRECISION_LEVERS = ("weight_dtype", "activation_dtype", "expert_dtype")


class TrtllmAdapter(GpuAdapter):
    engine = Engine.TRTLLM
    package = "tensorrt_llm"
    tokenize_path = None
    _MOE = MappingProxyType({"trtllm": "TRTLLM", "cutlass": "CUTLASS", "deepgemm": "DEEPGEMM"})
    _SPEC = MappingProxyType({"mtp": "MTP", "ngram": "NGram"})
    # the LLM API's allreduce_strategy (fused_rmsnorm and quick_reduce have no strategy of their own)
    allreduce_choices = MappingProxyType({"library": "NCCL", "custom_one_shot": "ONESHOT",
                                          "custom_two_shot": "TWOSHOT"})
    HELIX_BLOCK_TOKENS = 32       # the block size TensorRT-LLM's Helix example runs, when the lever is unset

    def launch(self, config: Configuration, request: LaunchRequest, native: dict[str, str]) -> LaunchCommand:
        for lever in PRECISION_LEVERS:
            if changed_dtype(config, native, lever) and not request.checkpoint_given:
                raise refuse(self.engine, lever, getattr(config, lever),
                             "the checkpoint's own precision (trtllm-serve does not quantize online: pass "
                             "--model-path to a ModelOpt checkpoint quantized to it)")
        if config.attention_dp not in (1, config.tp):
            raise refuse(self.engine, "attention_dp", config.attention_dp, f"1 or tp={config.tp}")
        if config.dcp > 1 and request.pool is None:
            raise refuse(self.engine, "dcp", config.dcp, "1 on a colocated replica (TensorRT-LLM runs decode "
                         "context parallelism, Helix, on a disaggregated deployment's decode pool only)")
        draft = draft_for(self.engine, config, request)
        if config.eplb_replicas:
            raise refuse(self.engine, "eplb_replicas", config.eplb_replicas, "0 (its MoE load balancer's slots "
                         "are not written here)")
        path = os.path.join(request.files_dir or tempfile.gettempdir(),
                            f"inferasim-trtllm-{request.served_name}-{request.port}.yaml")
        argv = ("trtllm-serve", "serve", request.model_path, "--host", request.host, "--port", str(request.port),
                "--backend", "pytorch", "--tp_size", str(config.tp // self._helix(config, request)), "--pp_size", str(config.pp),
                "--ep_size", str(config.ep), "--max_batch_size", str(config.max_running_requests),
                "--max_num_tokens", str(config.max_batched_tokens), "--max_seq_len", str(request.context_tokens),
                "--kv_cache_free_gpu_memory_fraction", request.memory_flag(config),
                "--enable_chunked_prefill", "--extra_llm_api_options", path)
        text = yaml.safe_dump(self.options(config, request, draft), sort_keys=False)
        return LaunchCommand(argv, {}, ((path, text),))

    @staticmethod
    def _helix(config: Configuration, request: LaunchRequest) -> int:
        """The Helix CP ranks of this launch: ``dcp`` on a decode pool, else 1 (module docstring)."""
        return config.dcp if request.pool is not None and not request.pool.is_prefill else 1

    def options(self, config: Configuration, request: LaunchRequest, draft: str | None = None) -> dict:
        """The LLM API options written to the YAML file (module docstring)."""
        helix = self._helix(config, request)
        # a Helix pool runs without block reuse: TensorRT-LLM's Helix tests turn it off on
        # both servers and its cache transceiver refuses reused blocks at a Helix peer (the
        # prefix cache of a split lives in its prefill pool)
        kv_cache: dict = {"enable_block_reuse": request.prefix_caching and helix <= 1,
                          "free_gpu_memory_fraction": request.memory_share(config)}
        if config.kv_cache_dtype == "fp8":
            kv_cache["dtype"] = "fp8"
        if (host := host_tier_gb(self.engine, config)) > 0:    # bytes of host KV per rank
            kv_cache["host_cache_size"] = int(host * BYTES_PER_GB)
        block = config.kv_block_size or (self.HELIX_BLOCK_TOKENS if helix > 1 else None)
        if block:
            kv_cache["tokens_per_block"] = block
        sizes = self.captured_sizes(config)
        options: dict = {
            "enable_attention_dp": config.attention_dp > 1, "kv_cache_config": kv_cache,
            "cuda_graph_config": {"batch_sizes": list(sizes), "enable_padding": True} if sizes else None,
        }
        if config.attention_dp > 1:     # balanced as priced (module docstring), not the engine's default
            options["attention_dp_config"] = {"enable_balance": True, "batching_wait_iters": 0,
                                              "timeout_iters": BALANCE_TIMEOUT_STEPS}
        if strategy := allreduce_choice(self.engine, config, self.allreduce_choices):
            options["allreduce_strategy"] = strategy
        all_to_all_choice(self.engine, config, self.all_to_all_choices)   # it picks its own dispatch (MNNVL, DeepEP)
        if config.moe_backend:
            options["moe_config"] = {"backend": self._MOE[config.moe_backend]}
        if config.attention_backend:
            options["attn_backend"] = "TRTLLM"
        if config.spec_method == "mtp":
            options["speculative_config"] = {"decoding_type": "MTP", "num_nextn_predict_layers": config.spec_depth}
        elif config.spec_method == "ngram":
            options["speculative_config"] = {"decoding_type": "NGram", "max_draft_len": config.spec_depth}
        elif config.spec_method == "eagle3":
            options["speculative_config"] = {"decoding_type": "Eagle3", "max_draft_len": config.spec_depth,
                                             "speculative_model": draft, "eagle3_one_model": True}
        if helix > 1:
            options["context_parallel_size"] = helix
            options["cp_config"] = {"cp_type": "HELIX", "tokens_per_block": block}
        if request.pool is not None:
            options["cache_transceiver_config"] = {"backend": request.pool.kv_transfer_backend.upper()}
        return options
