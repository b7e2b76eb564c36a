"""Column readers for the three corpus formats (the name rules: `predictor.corpus.row`).

Each reader checks its required columns once (InputError naming what is missing) and maps
one CSV row to a `CorpusRow` or raises `MappingError` with the row's reason.

Parallel conventions mapped to PRODUCT.md §3 (SGLang: a replica uses `tp * pp` GPUs,
`attention_dp` divides `tp`, `ep` divides `tp`):
- **InferenceX colocated**: `tp` is the replica's GPU count; the boolean `dp_attention`
  means attention DP over every GPU (`attention_dp = tp`); `ep` as recorded;
  `replicas = total_gpus / tp`.
- **InferenceX disaggregated**: a pool's GPUs per worker `g = num_<pool>_gpu /
  <pool>_num_workers` is trusted, not its `tp` column (which is the worker's GPU count on
  TRT-LLM, the attention-TP of a TP x attention-DP product on SGLang/MI355X, or 1 on
  dynamo-sglang); the pool layout is `TPg/EPep/DP(g if dp_attention else 1)` with
  `<pool>_num_workers` replicas, and both pools must add up to `total_gpus`.
- **AIConfigurator**: a worker has `tp_size * attention_dp_size` GPUs per pipeline stage
  (`tp_size` is the attention-TP); `ep = moe_ep_size` when it divides them (otherwise 1,
  noted); empty or 0 sizes are 1; dense models have `ep = 1`. Concurrency is the
  `silicon_concurrency` of `silicon_data_source`, else `batch_size` (agg) or
  `decode_batch_size` per decode worker times the decode workers (disagg). Disaggregated rows
  without worker counts fail (their GPU count and per-replica batch are unknown).
- **Native**: already in these conventions.

Precision rule (`dtypes_for`): the label (or AIConfigurator's GEMM/MoE quant modes) names
the quantisation applied, and a weight class is never wider than the checkpoint ships it:
- MoE models: routed experts take the label (fp8, fp4; int4 is stored as a 4-bit format);
  the other weights take it too unless it is fp4 or weight-only int4 (those checkpoints
  quantise the experts; attention keeps the checkpoint's dtype). AIConfigurator's
  `gemm_quant_mode` / `moe_quant_mode` set the two classes directly when given (a
  weight-only int4 GEMM mode on a MoE model again means the experts only).
- Dense models: the weights take the label.
- Activations: fp8 for fp8 GEMMs; fp4 for FP4 GEMMs on GPUs with FP4 tensor cores (bf16
  elsewhere); bf16 for weight-only int4 and for bf16.
- KV cache: the checkpoint's (the engines' `auto`; the corpora do not record it), except
  InferenceX's DeepSeek-R1 SGLang recipes on B200 (`IX_SGLANG_RECIPES`: FP8) and
  AIConfigurator's TensorRT-LLM rows with FP8 or FP4 GEMMs, read with an FP8 cache
  (`_aic_kv_dtype`): their KV capacity is an FP8 cache's (Llama-3.1-70B at TP1, 1k/8k,
  queues from 64 clients on H200 and 128 on B200, where FP8 pools hold 40 and 65 requests
  of their final length and BF16 ones 20 and 32, which would have queued at 32 and 64).
  The step prices a quantized cache's reads as a BF16 one's (`predictor.step.operators`),
  so the reading moves capacity, not speed.
- Speculation: `mtp` without a recorded depth uses the checkpoint's MTP layer count
  (METHOD §3.8's MTP default), at least 1.
Metrics: seconds -> ms; throughput per GPU counts every GPU of the deployment (both
pools: InferenceX `total_*_tput / total_gpus`, i.e. `output_tput_per_total_gpu`).

Physical bounds (a row outside them fails with its reason, it is never priced): numbers
are ASCII and finite (`levers.inputs.parse_number`); counts are whole numbers up to
`MAX_COUNT`; metrics are positive and at most `MAX_METRIC`; ISL + OSL fit the model's
maximum context and the concurrency fits the concurrency lever's range; the prompt tokens
per second per GPU fit the GPU's peak dense FLOP/s (`_check_prompt_rate`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Mapping

from levers.catalog import Engine, format_layout, get_lever, parse_layout
from levers.configuration import Configuration
from levers.errors import InputError
from levers.inputs import parse_number, quote
from levers.precision import DTYPE_BITS
from predictor.cards.registry import ModelCard, load_card
from predictor.corpus.row import (
    CorpusRow,
    Format,
    MappingError,
    Measured,
    card_name_for,
    cluster_for,
    engine_for,
    gpu_name_for,
    running_cap,
)
from predictor.feasibility import memory_for
from predictor.hardware import load_gpu
from predictor.memory import lever_fraction_from_static
from predictor.units import MS_PER_S
from predictor.workload import Harness

Raw = Mapping[str, str]
MAX_COUNT = 16_777_216           # tokens, GPUs, clients: beyond every real run
MAX_METRIC = 1e9                 # ms or tokens/s: beyond every real run (11 days, 1e9 tok/s/GPU)
MIN_METRIC = 1e-3                # ms or tokens/s: below every real run (a TPOT of 1 us, one token in 17 minutes)
_MISSING = frozenset({"", "nan", "none"})   # an empty cell as CSV writers spell it (any case)
MAX_CONCURRENCY = 65_536         # the concurrency lever's range
_LABELS = {"": None, "none": None, "bf16": "bf16", "fp16": "bf16", "fp8": "fp8", "fp8_block": "fp8",
           "fp4": "fp4", "nvfp4": "fp4", "mxfp4": "fp4", "int4": "fp4", "int4_wo": "fp4"}
_WEIGHT_ONLY = frozenset({"int4", "int4_wo"})
_SPEC = {"": "none", "none": "none", "mtp": "mtp", "eagle": "eagle3", "eagle3": "eagle3", "ngram": "ngram",
         "dspark": "dspark"}


# --- small parsers -------------------------------------------------------------------------

def _int(raw: Raw, name: str, default: int | None = None) -> int:
    text = raw.get(name, "")
    if text.strip().lower() in _MISSING:
        if default is None:
            raise MappingError(f"{name} is empty")
        return default
    try:
        value = float(parse_number(text, name))
    except InputError:
        raise MappingError(f"{name}={quote(text, 60)} is not a number") from None
    if value != int(value) or not 0 <= value <= MAX_COUNT:
        raise MappingError(f"{name}={quote(text, 60)} is not a whole number from 0 to {MAX_COUNT:,}")
    return int(value)


def _width(raw: Raw, name: str) -> int:
    """A parallel width: empty or 0 means 1."""
    return _int(raw, name, 1) or 1


def _float(raw: Raw, name: str, scale: float = 1.0) -> float | None:
    text = raw.get(name, "")
    if text.strip().lower() in _MISSING:
        return None
    try:
        value = float(parse_number(text, name)) * scale
    except InputError:
        raise MappingError(f"{name}={quote(text, 60)} is not a number") from None
    if not math.isfinite(value) or not MIN_METRIC <= value <= MAX_METRIC:
        # a TPOT of 1e-12 s was scored (a p90 error of 3e11 %)
        unit = f" ({value:g} in ms or tokens/s)" if scale != 1.0 and math.isfinite(value) else ""
        raise MappingError(f"{name}={quote(text, 60)}{unit} is not a number from {MIN_METRIC:g} to {MAX_METRIC:g} "
                           "ms or tokens/s")
    return value


def _bool(raw: Raw, name: str) -> bool:
    text = raw.get(name, "").lower()
    if text in ("true", "1", "1.0", "yes"):
        return True
    if text in ("false", "0", "0.0", "no", ""):
        return False
    raise MappingError(f"{name}={quote(raw.get(name), 60)} is not true/false")


def _need(header: list[str], path: str, groups: tuple[tuple[str, ...], ...]) -> None:
    """Each group is satisfied by any one of its columns."""
    missing = [" or ".join(group) for group in groups if not any(col in header for col in group)]
    if missing:
        raise InputError(f"corpus {path}", f"missing required column(s): {', '.join(missing)}",
                         "see `inferasim score --help` for each format's columns")


# --- the rules shared by every format --------------------------------------------------------

def _narrower(a: str, b: str) -> str:
    return a if DTYPE_BITS[a] <= DTYPE_BITS[b] else b


def _label(text: str, what: str) -> str | None:
    key = text.strip().lower()
    if key not in _LABELS:
        raise MappingError(f"{what} '{text}' is not one of {', '.join(k for k in _LABELS if k)}")
    return _LABELS[key]


def dtypes_for(card: ModelCard, gpu: str, precision: str, gemm: str = "", moe: str = "") -> dict[str, str | None]:
    """weight/expert/activation/kv dtypes of a corpus row (module docstring: Precision)."""
    label = _label(precision, "precision")
    gemm_dtype, moe_dtype = _label(gemm, "gemm_quant_mode"), _label(moe, "moe_quant_mode")
    native = card.native_dtypes
    weight_only = precision.strip().lower() in _WEIGHT_ONLY or gemm.strip().lower() in _WEIGHT_ONLY
    if card.is_moe:
        expert = moe_dtype or label or native.expert.value
        dense = None if weight_only else gemm_dtype
        weight = dense or (label if label and label != "fp4" else None) or native.weight.value
        expert = _narrower(expert, native.expert.value)
    else:
        expert = None
        weight = gemm_dtype or label or native.weight.value
    weight = _narrower(weight, native.weight.value)
    quant = gemm_dtype or label or weight
    if weight_only or quant == "bf16":
        activation = "bf16"
    elif quant == "fp4":
        activation = "fp4" if load_gpu(gpu).fp4_tflops else "bf16"
    else:
        activation = "fp8"
    return {"weight_dtype": weight, "expert_dtype": expert, "activation_dtype": activation,
            "kv_cache_dtype": native.kv_cache.value}


def _aic_kv_dtype(engine: Engine, levers: dict) -> str:
    """An AIConfigurator row's KV cache (module docstring: Precision): FP8 for TensorRT-LLM
    with quantized GEMMs, the checkpoint's otherwise."""
    if engine is Engine.TRTLLM and levers.get("activation_dtype") in ("fp8", "fp4"):
        return "fp8"
    return levers["kv_cache_dtype"]


def spec_for(card: ModelCard, method: str, depth: int | None = None) -> tuple[str, int]:
    key = method.strip().lower()
    if key not in _SPEC:
        raise MappingError(f"speculative method '{method}' is not one of {', '.join(k for k in _SPEC if k)}")
    name = _SPEC[key]
    if name == "none":
        return "none", 0
    return name, depth if depth else max(1, card.mtp_layers if name == "mtp" else 1)


def _little_throughput(concurrency: int, isl: int, osl: int, ttft_ms: float | None, tpot_ms: float | None,
                       gpus: int) -> tuple[float | None, float | None]:
    """Output and total tokens/s per GPU of a closed loop by Little's law."""
    if ttft_ms is None or tpot_ms is None:
        return None, None
    e2e_s = (ttft_ms + (osl - 1) * tpot_ms) / MS_PER_S
    output = concurrency * osl / e2e_s / gpus
    return output, output * (isl + osl) / osl


def _disaggregated(prefill: tuple[int, int, int, int], decode: tuple[int, int, int, int]) -> dict:
    """Configuration fields of a split; each pool is (gpus per worker, ep, dp, workers)."""
    (pg, pep, pdp, pw), (dg, dep, ddp, dw) = prefill, decode
    return {"disaggregated": True, "prefill_layout": format_layout(pg, pep, pdp), "prefill_replicas": pw,
            "decode_layout": format_layout(dg, dep, ddp), "decode_replicas": dw, "tp": dg, "ep": dep,
            "attention_dp": ddp}


def _config(levers: dict, concurrency: int) -> Configuration:
    replicas = levers.get("decode_replicas", 1) if levers.get("disaggregated") else levers.get("replicas", 1)
    return Configuration(**levers, concurrency=concurrency,
                         max_running_requests=running_cap(concurrency / max(1, replicas)))


def _check_widths(card: ModelCard, gpus: int, ep: int, dp: int, what: str) -> None:
    if ep > 1 and not card.is_moe:
        raise MappingError(f"{what}: ep={ep} on a dense model")
    if gpus % ep or gpus % dp:
        raise MappingError(f"{what}: ep={ep} / attention_dp={dp} do not divide its {gpus} GPUs")


# --- InferenceX ----------------------------------------------------------------------------

def _ix_pool(raw: Raw, pool: str, card: ModelCard) -> tuple[int, int, int, int]:
    gpus, workers = _int(raw, f"num_{pool}_gpu"), _int(raw, f"{pool}_num_workers")
    if not workers or gpus % workers:
        raise MappingError(f"{pool}: {gpus} GPUs do not split into {workers} workers")
    per_worker = gpus // workers
    dp = per_worker if _bool(raw, f"{pool}_dp_attention") else 1
    ep = _width(raw, f"{pool}_ep") if card.is_moe else 1
    _check_widths(card, per_worker, ep, dp, f"{pool} pool")
    return per_worker, ep, dp, workers


def _ix_layout(raw: Raw, card: ModelCard, disaggregated: bool) -> tuple[dict, int]:
    total = _int(raw, "total_gpus")
    if disaggregated:
        prefill, decode = _ix_pool(raw, "prefill", card), _ix_pool(raw, "decode", card)
        counted = prefill[0] * prefill[3] + decode[0] * decode[3]
        if counted != total:
            raise MappingError(f"pools hold {counted} GPUs but total_gpus is {total}")
        return _disaggregated(prefill, decode), total
    tp = _int(raw, "tp")
    if not tp or total % tp:
        raise MappingError(f"total_gpus {total} is not a multiple of tp {tp}")
    ep = _width(raw, "ep") if card.is_moe else 1
    dp = tp if _bool(raw, "dp_attention") else 1
    _check_widths(card, tp, ep, dp, "replica")
    return {"tp": tp, "ep": ep, "attention_dp": dp, "replicas": total // tp}, total


# SGLang's own defaults where the launch leaves them (its server_args): a prompt chunk
# (`chunked_prefill_size`) tiered by GPU memory, 8,192 below 160 GiB (H100, H200) and
# 16,384 above (B200, GB200, GB300, MI300 class), and `max_prefill_tokens` 16,384. Under DP
# attention the chunk is the replica's, 1/dp per rank (`predictor.sim.scheduler.rank_chunk_tokens`).
SGLANG_LARGE_GPU_GB = 160 * 2 ** 30 / 1e9      # 160 GiB
SGLANG_CHUNK, SGLANG_LARGE_CHUNK = 8192, 16384
SGLANG_MAX_PREFILL_TOKENS = 16384


def sglang_default_chunk(gpu: str) -> int:
    """SGLang's `chunked_prefill_size` on ``gpu`` when the launch leaves it unset."""
    return SGLANG_LARGE_CHUNK if load_gpu(gpu).hbm_gb >= SGLANG_LARGE_GPU_GB else SGLANG_CHUNK


def inferencex_row(raw: Raw, row_id: str) -> CorpusRow:
    card = load_card(card_name_for(raw["model"]))
    gpu = gpu_name_for(raw.get("hardware") or raw.get("hw", ""))
    engine, implied = engine_for(raw["framework"])
    disaggregated = implied or _bool(raw, "disagg")
    levers, total = _ix_layout(raw, card, disaggregated)
    levers.update(dtypes_for(card, gpu, raw["precision"]))
    levers["spec_method"], levers["spec_depth"] = spec_for(card, raw.get("spec_decoding", ""))
    if str(engine) == "sglang":     # its recipes' chunk: SGLang's own default (dsr1_fp4_b200.sh: 16,384)
        levers.update(max_batched_tokens=SGLANG_MAX_PREFILL_TOKENS,
                      chunked_prefill_size=sglang_default_chunk(gpu))
        if not disaggregated and levers["attention_dp"] == 1 and levers["spec_method"] == "none":
            levers.update(_ix_sglang_recipe(card, gpu, levers, _int(raw, "conc")))     # the recipes: DP 1, no MTP
    isl, osl, conc = _int(raw, "isl"), _int(raw, "osl"), _int(raw, "conc")
    out = _float(raw, "total_output_tput")
    tot = _float(raw, "total_tput")
    measured = Measured(
        ttft_ms_mean=_float(raw, "mean_ttft", MS_PER_S), ttft_ms_median=_float(raw, "median_ttft", MS_PER_S),
        tpot_ms_mean=_float(raw, "mean_tpot", MS_PER_S), tpot_ms_median=_float(raw, "median_tpot", MS_PER_S),
        itl_ms_mean=_float(raw, "mean_itl", MS_PER_S), itl_ms_median=_float(raw, "median_itl", MS_PER_S),
        output_throughput_per_gpu=out / total if out else _float(raw, "output_tput_per_total_gpu"),
        throughput_per_gpu=tot / total if tot else None,
    )
    return _finish(row_id, Format.INFERENCEX, card, gpu, engine, raw.get("image", ""), raw["precision"],
                   levers, isl, osl, conc, measured, raw.get("run_date", ""),
                   harness=Harness(str(Format.INFERENCEX), recv_interval=_ix_recv_interval(engine, card.name, gpu, disaggregated, conc),
                                   ahead_steps=IX_ASYNC_STEPS if str(engine) == "vllm" and not disaggregated else 0))


# InferenceX's DeepSeek-R1 recipes for SGLang on B200 (SemiAnalysisAI/InferenceX
# benchmarks/dsr1_fp4_b200*.sh, dsr1_fp8_b200*.sh, their MTP variants: "recv every ~10
# requests; if CONC >= 16, relax to ~30") launch SGLang with `--scheduler-recv-interval`
# 10 below 16 clients and 30 from 16: its scheduler takes new requests only every that
# many decode steps, so an arrival waits half of that many steps on average
# (`predictor.analytical.steady_state`). Every B200 SGLang ladder of the dev corpus steps
# up exactly there (median TTFT at 8 -> 16 clients: 187 -> 322, 162 -> 363, 166 -> 310,
# 168 -> 303, 149 -> 339, 432 -> 808 ms); the recipes of the other GPUs, and its GLM-5
# recipe on B200, set no interval, and the other GPUs' ladders have no step.
IX_RECV_INTERVAL_STACKS = frozenset({("DeepSeek-R1", "B200")})
IX_RECV_INTERVAL_LOW, IX_RECV_INTERVAL_HIGH, IX_RECV_INTERVAL_FROM_CLIENTS = 10, 30, 16
# Its vLLM recipes (gpt-oss on H100, H200 and B200, Llama-3.1-70B on H200 and MI355X:
# benchmarks/gptoss_fp4_*.sh, 70b_fp8_*.sh) serve with `async-scheduling`: the scheduler
# plans the next step while the GPU runs this one, so an arrival joins a step later than
# it would (`predictor.analytical.steady_state`).
IX_ASYNC_STEPS = 1


# Its colocated DeepSeek-R1 recipes for SGLang on B200 (benchmarks/dsr1_fp8_b200.sh,
# dsr1_fp4_b200.sh) launch with `--kv-cache-dtype fp8_e4m3` and their own memory share and
# prefill sizes: FP8 at TP4 `--mem-fraction-static 0.95` with 8,192-token chunks and prefill
# budget (the weights take 169 GB of a GPU's 193: at the lever's 0.90 the pool would hold
# one 9k-token request, where the measured run decodes 32), FP8 at TP8 0.82 with 32,768,
# FP4 0.85 with a 16,384 chunk. SGLang's share holds weights and KV only
# (`predictor.memory.lever_fraction_from_static` carries it to the lever's). The recipes run
# one data-parallel rank and no MTP (`dsr1_fp8_b200_mtp.sh` is another recipe), so only such
# rows take them. Not carried: their `--max-running-requests` / `--cuda-graph-max-bs` (32 at
# TP4, 128 at TP8; no row runs more clients than that, and the 224 graph slots fewer than
# the lever's default hold ~0.9 GB).
IX_SGLANG_RECIPES = {
    ("DeepSeek-R1", "B200", "fp8", 4): (0.95, 8192, 8192),
    ("DeepSeek-R1", "B200", "fp8", 8): (0.82, 32768, 32768),
    ("DeepSeek-R1", "B200", "fp4", 4): (0.85, 16384, SGLANG_MAX_PREFILL_TOKENS),
    ("DeepSeek-R1", "B200", "fp4", 8): (0.85, 16384, SGLANG_MAX_PREFILL_TOKENS),
}


def _ix_sglang_recipe(card: ModelCard, gpu: str, levers: dict, concurrency: int) -> dict:
    """The levers one of `IX_SGLANG_RECIPES` sets (none for other stacks); the static share
    is carried to the lever's meaning on the memory model that prices the row."""
    recipe = IX_SGLANG_RECIPES.get((card.name, gpu, levers["expert_dtype"] or levers["weight_dtype"], levers["tp"]))
    if recipe is None:
        return {}
    static, chunk, budget = recipe
    recipe_levers = {"kv_cache_dtype": "fp8", "chunked_prefill_size": chunk, "max_batched_tokens": budget}
    config = _config({**levers, **recipe_levers}, concurrency)
    memory = memory_for(card, cluster_for(gpu, config.total_gpus), config)
    return {**recipe_levers, "kv_memory_fraction": round(lever_fraction_from_static(memory, static), 4)}


def _ix_recv_interval(engine, model: str, gpu: str, disaggregated: bool, conc: int) -> int:
    if str(engine) != "sglang" or disaggregated or (model, gpu) not in IX_RECV_INTERVAL_STACKS:
        return 1
    return IX_RECV_INTERVAL_HIGH if conc >= IX_RECV_INTERVAL_FROM_CLIENTS else IX_RECV_INTERVAL_LOW


def chart_precision(precision: str, card: ModelCard) -> str:
    """The precision label of a chart: synonyms merged (nvfp4/mxfp4 -> fp4, fp8_block ->
    fp8, int4_wo -> int4), weight-only int4 kept apart from fp4, empty -> the checkpoint's."""
    key = precision.strip().lower()
    if key in _WEIGHT_ONLY:
        return "int4"
    return _label(precision, "precision") or card.native_dtypes.weight.value


# The public corpora's client (InferenceX/InferenceMAX `benchmark_serving.py`) runs
# `--num-prompts CONC*10 --max-concurrency CONC`: ten requests per client, all clients
# starting together. The native format says so per row (`requests_per_client`).
# InferenceX draws random prompt and output lengths around the nominal ones, so its clients
# drift apart after the first round (the measured median TTFT barely grows with
# concurrency); AIConfigurator's silicon runs use exactly the nominal lengths, so on a
# prefill-first engine every round ends at one step and the next starts as a wave (its
# TTFT grows with concurrency several-fold). `fixed_lengths` records which
# (`predictor.benchmark`); the native format says so per row.
BENCHMARK_REQUESTS_PER_CLIENT = 10


def _check_prompt_rate(card: ModelCard, gpu: str, activation: str, isl: int, osl: int, measured: Measured) -> None:
    """The prompt tokens a row says each GPU prefilled per second must fit that GPU's peak
    dense FLOP/s at the row's activation precision, at 2 FLOPs per weight a token
    multiplies (embeddings aside; attention not counted, so the bound is loose). A row
    beyond it did not run what it names (AIConfigurator's Qwen3-32B FP4 at TP2 on GB200,
    15k/0.5k prompts at 448 clients: 444k prompt tokens/s per GPU, 2.8x the peak)."""
    total, output = measured.throughput_per_gpu, measured.output_throughput_per_gpu
    if output is not None:
        prompt_rate = total - output if total is not None and total > output else output * isl / osl
    elif total is not None:
        prompt_rate = total * isl / (isl + osl)
    else:
        return
    weights = card.active_params() - card.params_by_component().get("embeddings", 0)
    peak = load_gpu(gpu).peak_flops(activation)
    if prompt_rate * 2 * weights > peak:
        raise MappingError(f"its {prompt_rate:,.0f} prompt tokens/s per GPU need "
                           f"{prompt_rate * 2 * weights / peak:.1f}x the {gpu}'s peak {activation} FLOP/s")


def _finish(row_id: str, source: str, card: ModelCard, gpu: str, engine, version: str, precision: str,
            levers: dict, isl: int, osl: int, conc: int, measured: Measured, when: str,
            notes: tuple[str, ...] = (),
            requests_per_client: int | None = BENCHMARK_REQUESTS_PER_CLIENT, fixed_lengths: bool = False,
            harness: Harness | None = None) -> CorpusRow:
    if not isl or not osl or not conc:
        raise MappingError("isl, osl and concurrency must be positive")
    if isl + osl > card.max_context:
        raise MappingError(f"isl + osl = {isl + osl:,} tokens exceeds {card.name}'s maximum context of "
                           f"{card.max_context:,}")
    if conc > MAX_CONCURRENCY:
        raise MappingError(f"concurrency {conc:,} is over {MAX_CONCURRENCY:,} clients")
    if not measured.has_any():
        raise MappingError("no measured metric")
    _check_prompt_rate(card, gpu, levers.get("activation_dtype") or "bf16", isl, osl, measured)
    label = chart_precision(precision, card)
    return CorpusRow(id=row_id, source=str(source), model=card.name, gpu=gpu, engine=str(engine),
                     engine_version=version or "unknown", precision=label, config=_config(levers, conc),
                     isl=isl, osl=osl, measured=measured, measured_at=when[:10], notes=notes,
                     requests_per_client=requests_per_client, fixed_lengths=fixed_lengths,
                     harness=harness or Harness(name=str(source)))


# --- AIConfigurator ------------------------------------------------------------------------

# AIConfigurator's generator deploys SGLang aggregated workers with mixed chunked prefill
# (ai-dynamo/aiconfigurator, generator/rule_plugin/sglang.rule: `agg enable_mixed_chunk =
# true`, `max_prefill_tokens = isl + 1500`): prefill chunks ride in decode steps, so a
# fixed-length run's rounds stagger after the first, as vLLM's do, instead of meeting in
# waves. The rows of its separate gap-analysis collector (`source_file=.../aic-auto-gap-
# analysis/...`: SGLang 0.5.1-0.5.8 on H100/H200) ran SGLang's own default (prefill-first):
# at short outputs their TPOTs carry the prefill stall of synchronised waves, half that of
# mixed steps (Qwen3-32B 4k/128 on H100: mixed steps priced +70-97%, waves within 10%).
# Read as waves, the other rows' TTFT grows with concurrency several times as fast as
# measured (Qwen3.5-397B on four B300s at 8k/1k: 5.4 s priced at 128 clients, 1.6 s
# measured). `predictor.benchmark.runs_in_waves` reads the flag.
AIC_MIXED_CHUNK_ENGINES = frozenset({"sglang"})
AIC_DEFAULT_FLAGS_COLLECTOR = "aic-auto-gap-analysis"
# The same generator sizes an aggregated worker's token budget per step for one prompt
# plus the running batch: vLLM and TensorRT-LLM `max_num_tokens = max_batch_size + isl +
# 1500` (rule_plugin/vllm.rule, trtllm.rule; the batch is the run's concurrency), SGLang
# `max_prefill_tokens = isl + 1500` (its decodes ride outside that budget). A first wave
# of 1k prompts is then prefilled two or three a step, not eight (the lever default). The
# gap-analysis collector's rows keep the levers' defaults, as they keep SGLang's.
AIC_BUDGET_MARGIN_TOKENS = 1500
AIC_BUDGET_ENGINES = frozenset({"vllm", "trtllm", "sglang"})


def _aic_mixed_prefill(engine, mode: str, source_text: str) -> bool:
    return (str(engine) in AIC_MIXED_CHUNK_ENGINES and mode == "agg"
            and AIC_DEFAULT_FLAGS_COLLECTOR not in source_text)


def _aic_budget(engine, gpu: str, mode: str, source_text: str, isl: int, concurrency: int) -> dict:
    """The generator's token budget of an aggregated worker (above), as levers; SGLang's
    own defaults where the generator leaves them (its split workers, the gap-analysis
    collector's rows)."""
    sglang = str(engine) == "sglang"
    low, high = get_lever("max_batched_tokens").bounds
    generated = AIC_DEFAULT_FLAGS_COLLECTOR not in source_text and str(engine) in AIC_BUDGET_ENGINES
    if not generated or (sglang and mode != "agg"):
        return {"max_batched_tokens": SGLANG_MAX_PREFILL_TOKENS,
                "chunked_prefill_size": sglang_default_chunk(gpu)} if sglang else {}
    # a split's TensorRT-LLM and vLLM prefill workers: `prefill max_num_tokens` = isl + 1500
    # (trtllm.rule, vllm.rule; the decode pool's budget only bounds its own batch, which
    # its running cap bounds first). SGLang's split workers keep its chunk (above): the
    # rule's max_prefill_tokens = isl + 1500 would cap a DP rank's chunk of 1/dp of it
    # here (`rank_chunk_tokens`), where SGLang cuts 1/dp of its own 16,384.
    budget = isl + AIC_BUDGET_MARGIN_TOKENS + (0 if sglang or mode != "agg" else concurrency)
    budget = int(min(max(budget, low), high))
    return {"max_batched_tokens": budget,
            "chunked_prefill_size": min(budget, sglang_default_chunk(gpu)) if sglang else budget}


def _source_fields(text: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    for part in text.split(";"):
        key, sep, value = part.strip().partition("=")
        if sep:
            fields[key.strip()] = value.strip()
    return fields


def _aic_pool(raw: Raw, prefix: str, card: ModelCard, notes: list[str]) -> tuple[int, int, int, int]:
    """(GPUs per stage of a worker, ep, attention_dp, pp)."""
    tp, dp, pp = _width(raw, f"{prefix}tp_size"), _width(raw, f"{prefix}attention_dp_size"), _width(raw, f"{prefix}pp_size")
    gpus = tp * dp
    moe_tp, moe_ep = _int(raw, f"{prefix}moe_tp_size", 0), _int(raw, f"{prefix}moe_ep_size", 0)
    ep = moe_ep if card.is_moe and moe_ep >= 1 and gpus % moe_ep == 0 else 1
    if card.is_moe and moe_tp * moe_ep != gpus:
        notes.append(f"{prefix or 'replica '}moe {moe_tp}x{moe_ep} != {gpus} GPUs; ep={ep}")
    _check_widths(card, gpus, ep, dp, f"{prefix.rstrip('_') or 'replica'}")
    return gpus, ep, dp, pp


def _aic_concurrency(raw: Raw, source: Raw, levers: dict) -> int:
    """`silicon_concurrency`, else `batch_size` (agg) or `decode_batch_size` per decode worker."""
    concurrency = _int(source, "silicon_concurrency", 0)
    if not concurrency and levers.get("disaggregated"):
        concurrency = _int(raw, "decode_batch_size", 0) * levers["decode_replicas"]
    concurrency = concurrency or _int(raw, "batch_size", 0)
    if not concurrency:
        raise MappingError("no concurrency (silicon_concurrency, batch_size or decode_batch_size)")
    return concurrency


def aiconfigurator_row(raw: Raw, row_id: str) -> CorpusRow:
    card = load_card(card_name_for(raw["model_path"]))
    gpu = gpu_name_for(raw["system"])
    engine, implied = engine_for(raw["backend"])
    source = _source_fields(raw.get("silicon_data_source", ""))
    notes: list[str] = []
    mode = raw.get("mode", "agg").lower()
    if implied or mode == "disagg":
        workers = (_int(raw, "prefill_num_workers", 0), _int(raw, "decode_num_workers", 0))
        if not all(workers):
            raise MappingError("disaggregated row without prefill/decode worker counts: its GPU count and "
                               "per-replica batch are unknown")
        pg, pep, pdp, ppp = _aic_pool(raw, "prefill_", card, notes)
        dg, dep, ddp, dpp = _aic_pool(raw, "decode_", card, notes)
        if ppp != 1 or dpp != 1:
            raise MappingError("disaggregated pools with pipeline stages are not supported")
        levers = _disaggregated((pg, pep, pdp, workers[0]), (dg, dep, ddp, workers[1]))
    elif mode == "agg":
        gpus, ep, dp, pp = _aic_pool(raw, "", card, notes)
        levers = {"tp": gpus, "ep": ep, "attention_dp": dp, "pp": pp}
    else:
        raise MappingError(f"mode {quote(raw.get('mode'), 60)} is not agg or disagg")
    levers.update(dtypes_for(card, gpu, raw.get("precision", ""), raw.get("gemm_quant_mode", ""),
                             raw.get("moe_quant_mode", "")))
    levers["kv_cache_dtype"] = _aic_kv_dtype(engine, levers)
    levers["spec_method"], levers["spec_depth"] = "none", 0
    isl, osl = _int(raw, "isl"), _int(raw, "osl")
    conc = _aic_concurrency(raw, source, levers)
    ttft, tpot = _float(raw, "silicon_ttft_ms"), _float(raw, "silicon_tpot_ms")
    total = Configuration(**levers).total_gpus
    output, overall = _little_throughput(conc, isl, osl, ttft, tpot, total)
    measured = Measured(ttft_ms_mean=ttft, tpot_ms_mean=tpot, output_throughput_per_gpu=output,
                        throughput_per_gpu=overall, throughput_derived=output is not None)
    version = raw.get("backend_version") or source.get("image", "")
    if source.get("wip", "").lower() == "true":
        notes.append("work-in-progress run (wip=True)")
    deployed = raw.get("silicon_data_source", "")
    levers.update(_aic_budget(engine, gpu, mode, deployed, isl, conc))
    mixed = _aic_mixed_prefill(engine, mode, deployed)
    if mixed:
        notes.append("SGLang deployed with mixed chunked prefill (AIConfigurator's generator rule)")
    return _finish(row_id, Format.AICONFIGURATOR, card, gpu, engine, version, raw.get("precision", ""), levers,
                   isl, osl, conc, measured, source.get("measured", ""), tuple(notes), fixed_lengths=True,
                   harness=Harness(str(Format.AICONFIGURATOR), mixed_prefill=mixed))


# --- native --------------------------------------------------------------------------------

_NATIVE_METRICS = ("ttft_ms", "tpot_ms", "itl_ms", "output_throughput_per_gpu", "throughput_per_gpu",
                   "total_output_throughput", "total_throughput")


def _native_pool(raw: Raw, name: str) -> tuple[int, int, int]:
    try:
        return parse_layout(raw.get(name) or "", name)
    except InputError as error:
        raise MappingError(error.message) from None


def native_row(raw: Raw, row_id: str) -> CorpusRow:
    card = load_card(card_name_for(raw["model"]))
    gpu = gpu_name_for(raw["hardware"])
    engine, implied = engine_for(raw["engine"])
    if implied or _bool(raw, "disaggregated"):
        (ptp, pep, pdp), (dtp, dep, ddp) = _native_pool(raw, "prefill_layout"), _native_pool(raw, "decode_layout")
        levers = _disaggregated((ptp, pep, pdp, _int(raw, "prefill_replicas", 1)),
                                (dtp, dep, ddp, _int(raw, "decode_replicas", 1)))
        levers["pp"] = _width(raw, "pp")
    else:
        levers = {"tp": _int(raw, "tp"), "pp": _width(raw, "pp"), "ep": _width(raw, "ep"),
                  "attention_dp": _width(raw, "attention_dp"), "replicas": _width(raw, "replicas")}
    levers["dcp"] = _width(raw, "dcp")
    levers.update(dtypes_for(card, gpu, raw["precision"]))
    depth = _int(raw, "spec_depth", 0)
    levers["spec_method"], levers["spec_depth"] = spec_for(card, raw.get("spec_method", ""), depth)
    total = Configuration(**levers).total_gpus
    out, tot = _float(raw, "output_throughput_per_gpu"), _float(raw, "throughput_per_gpu")
    out = out or _per_gpu(_float(raw, "total_output_throughput"), total)
    tot = tot or _per_gpu(_float(raw, "total_throughput"), total)
    measured = Measured(
        ttft_ms_mean=_float(raw, "ttft_ms"), ttft_ms_median=_float(raw, "ttft_ms_median"),
        tpot_ms_mean=_float(raw, "tpot_ms"), tpot_ms_median=_float(raw, "tpot_ms_median"),
        itl_ms_mean=_float(raw, "itl_ms"), itl_ms_median=_float(raw, "itl_ms_median"),
        output_throughput_per_gpu=out, throughput_per_gpu=tot,
    )
    return _finish(row_id, Format.NATIVE, card, gpu, engine, raw.get("engine_version", ""), raw["precision"],
                   levers, _int(raw, "isl"), _int(raw, "osl"), _int(raw, "concurrency"), measured,
                   raw.get("measured_at", ""), requests_per_client=_int(raw, "requests_per_client", 0) or None,
                   fixed_lengths=_bool(raw, "fixed_lengths"))


def _per_gpu(total: float | None, gpus: int) -> float | None:
    return total / gpus if total is not None else None


@dataclass(frozen=True)
class Reader:
    required: tuple[tuple[str, ...], ...]
    row: Callable[[Raw, str], CorpusRow]

    def check_columns(self, header: list[str], path: str) -> None:
        _need(header, path, self.required)


READERS: dict[str, Reader] = {
    Format.INFERENCEX: Reader(
        (("hardware", "hw"), ("model",), ("framework",), ("precision",), ("isl",), ("osl",), ("conc",),
         ("tp",), ("total_gpus",), ("mean_ttft", "mean_tpot", "mean_itl", "total_output_tput")),
        inferencex_row),
    Format.AICONFIGURATOR: Reader(
        (("backend",), ("model_path",), ("system",), ("precision",), ("mode",), ("isl",), ("osl",),
         ("tp_size",), ("batch_size", "silicon_data_source"), ("silicon_ttft_ms", "silicon_tpot_ms")),
        aiconfigurator_row),
    Format.NATIVE: Reader(
        (("model",), ("hardware",), ("engine",), ("precision",), ("tp",), ("isl",), ("osl",), ("concurrency",),
         _NATIVE_METRICS),
        native_row),
}
