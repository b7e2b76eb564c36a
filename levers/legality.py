"""Structural legality of a configuration (PRODUCT.md §3), before memory.

Every rejection carries a reason a user (or the tuning agent's ledger) can read. The
model and the cluster are seen through two small protocols so this bottom layer does
not import the predictor: any object with these attributes will do.
"""

from __future__ import annotations

from typing import Protocol

from levers.catalog import (
    ENGINE_VENDORS,
    VENDOR_VALUES,
    LEVERS,
    MOE_FUSIONS,
    QUANT_FED_FUSIONS,
    Engine,
    parse_layout,
    parse_layout_options,
)
from levers.configuration import Configuration
from levers.precision import base_dtype, parse_weight_spec, stored_expert_dtype, unset_activation


class ModelShape(Protocol):
    name: str
    num_layers: int
    num_experts: int
    mtp_layers: int
    max_context: int

    @property
    def attention_heads(self) -> int: ...

    @property
    def is_moe(self) -> bool: ...


class GpuShape(Protocol):
    vendor: str
    fp4_tflops: float | None


class ClusterShape(Protocol):
    gpu: GpuShape

    @property
    def total_gpus(self) -> int: ...

    def scale_up_gpus(self) -> int: ...


def structural_reasons(config: Configuration, engine: Engine | str, model: ModelShape,
                       cluster: ClusterShape) -> list[str]:
    """Every reason ``config`` is structurally illegal (empty list = legal)."""
    engine = Engine(engine)
    reasons = platform_reasons(engine, cluster)
    reasons += _engine_support(config, engine)
    reasons += _vendor_values(config, cluster)
    reasons += _host_tier(config, cluster)
    if config.attention_backend == "flashmla" and getattr(model, "uses_mla", True) is False:
        reasons.append(f"attention_backend=flashmla runs MLA attention only; {model.name} has MHA/GQA attention")
    reasons += _expert_parallel(config, engine)
    reasons += _helix(config, engine, cluster)
    reasons += _all_rank_attention_dp(config, engine)
    reasons += _parallel(config, model, cluster)
    reasons += _disaggregation(config, engine, model, cluster)
    reasons += _precision_and_kernels(config, model, cluster)
    reasons += _vllm_fp4_experts(config, engine, model, cluster)
    reasons += _recipe_reasons(config, model)
    reasons += _scheduler(config)
    reasons += fusion_reasons(config.fusions, quantized_activation(config, model, bool(cluster.gpu.fp4_tflops)),
                              model.is_moe)
    return reasons


def _helix(config: Configuration, engine: Engine, cluster: ClusterShape) -> list[str]:
    """TensorRT-LLM runs decode context parallelism as Helix, a decode-only feature of a
    split's generation servers on Blackwell (its Helix blog: the prefill server runs without
    CP; "designed for Blackwell systems"): a colocated replica cannot run it."""
    if engine is not Engine.TRTLLM or config.dcp <= 1:
        return []
    reasons = []
    if not config.disaggregated:
        reasons.append(f"dcp={config.dcp} on trtllm runs on a split's decode pool only (Helix is decode-only: "
                       "disaggregated=true, or vllm / sglang for a colocated DCP replica)")
    if cluster.gpu.vendor == "nvidia" and not cluster.gpu.fp4_tflops:
        reasons.append(f"dcp={config.dcp} on trtllm (Helix) needs Blackwell GPUs")
    return reasons


def _all_rank_attention_dp(config: Configuration, engine: Engine) -> list[str]:
    """TensorRT-LLM's attention DP is every TP rank or none (`enable_attention_dp`): an
    attention_dp between 1 and tp has no launch, and a search that priced one picked a
    deployment its deploy line refused (a DeepSeek-R1 tune's seed at tp=8, attention_dp=2)."""
    if engine is not Engine.TRTLLM:
        return []
    layouts = [("", (config.tp, config.ep, config.attention_dp))]
    if config.disaggregated and config.prefill_layout:
        layouts.append(("prefill_layout ", parse_layout(config.prefill_layout, "prefill_layout")))
    return [f"{prefix}attention_dp={dp} on trtllm: its attention DP spans every TP rank or none (1 or {tp})"
            for prefix, (tp, _, dp) in layouts if 1 < dp < tp]


def platform_reasons(engine: Engine | str, cluster: ClusterShape) -> list[str]:
    """An engine runs only on its platforms (:data:`levers.catalog.ENGINE_VENDORS`)."""
    engine = Engine(engine)
    vendors = ENGINE_VENDORS[engine]
    vendor = cluster.gpu.vendor
    if vendor in vendors:
        return []
    return [f"{engine} does not run on {vendor.upper() if vendor != 'cpu' else 'a CPU'} "
            f"({getattr(cluster.gpu, 'name', vendor)}); it runs on {' or '.join(v.upper() if v != 'cpu' else 'CPU' for v in vendors)}"]


def context_reasons(context_tokens: int, model: ModelShape) -> list[str]:
    """A sequence longer than the model's maximum context cannot be served."""
    limit = getattr(model, "max_context", None)
    if limit and context_tokens > limit:
        return [f"a context of {context_tokens:,} tokens exceeds {model.name}'s maximum of {limit:,}"]
    return []


def effective_activation_dtype(config: Configuration, model: ModelShape) -> str:
    """An unset activation dtype follows fp8 weights, else bf16 (PRODUCT.md §3); unset
    weights take the checkpoint's dtype."""
    if config.activation_dtype:
        return config.activation_dtype
    return "fp8" if attention_weight_dtype(config, model) == "fp8" else "bf16"


LINEAR_COMPONENTS = ("attention", "dense_mlp", "shared_experts")   # the `weight_dtype` lever's components


def quantized_activation(config: Configuration, model: ModelShape, fp4_compute: bool) -> str:
    """The activations a quant-fed fusion sees: the lever's; unset, fp8 or fp4 when some
    GEMM's weights quantise their own (`levers.precision.unset_activation`, as the step
    model prices them: `Precisions.quantized_sites`), else the lever's default."""
    default = effective_activation_dtype(config, model)
    if config.activation_dtype or default != "bf16":
        return default
    stored = {c: component_weight_dtype(config, model, c) for c in LINEAR_COMPONENTS}
    if getattr(model, "is_moe", False):
        stored["routed_experts"] = routed_expert_dtype(config, model)
    requantized = requantized_components(config, model)
    runs = {unset_activation(base_dtype(str(dtype)), c not in requantized, fp4_compute) for c, dtype in stored.items()}
    return "fp4" if "fp4" in runs else "fp8" if "fp8" in runs else default


def requantized_components(config: Configuration, model: ModelShape) -> frozenset[str]:
    """The weight components ``config`` does not store as the checkpoint ships them (online
    quantisation, a recipe): the linear ones by dtype, the routed experts by their format
    (`routed_expert_dtype`: ``fp4`` is Kimi-K2.5's INT4 checkpoint requantized, Kimi-K3's
    own MXFP4)."""
    native = getattr(model, "native_dtypes", None)
    shipped = str(native.weight) if native is not None else "bf16"
    found = {c for c in LINEAR_COMPONENTS if component_weight_dtype(config, model, c) != shipped}
    if getattr(model, "is_moe", False) and routed_expert_dtype(config, model) != routed_expert_dtype(Configuration(),
                                                                                                      model):
        found.add("routed_experts")
    return frozenset(found)


def attention_weight_dtype(config: Configuration, model: ModelShape) -> str:
    """The attention projections' stored dtype (`component_weight_dtype`)."""
    return component_weight_dtype(config, model, "attention")


def component_weight_dtype(config: Configuration, model: ModelShape, component: str) -> str:
    """A linear weight component's stored dtype (attention, dense_mlp, shared_experts): the
    lever's own item, else its recipe's (a card's `recipe(name)`), else the checkpoint's
    (levers.precision)."""
    own = parse_weight_spec(config.weight_dtype).component(component)
    if own is not None:
        return own
    recipe = _recipe_dtype(config, model, component)
    if recipe is not None:
        return recipe
    native = getattr(model, "native_dtypes", None)
    return str(native.weight) if native is not None else "bf16"


def _recipe_dtype(config: Configuration, model: ModelShape, component: str) -> str | None:
    """The dtype the `weight_dtype` lever's recipe stores ``component`` in (None: no recipe,
    or it keeps the checkpoint's, as `recipe:native` does: the caller reads the checkpoint,
    with its 4-bit format)."""
    spec = parse_weight_spec(config.weight_dtype)
    named = spec.recipe if spec.recipe != "native" else None
    recipe = model.recipe(named) if named and hasattr(model, "recipe") else None
    found = getattr(recipe, component, None) if recipe is not None else None
    return str(found) if found else None


def routed_expert_dtype(config: Configuration, model: ModelShape) -> str | None:
    """The routed experts' stored dtype: the `expert_dtype` lever, else the recipe's, else
    the checkpoint's (None on a dense model), a 4-bit checkpoint's by its format when it
    names one other than the platform's FP4 (`NativeDtypes.expert_format`: mxfp4, int4);
    ``fp4`` on an MXFP4 checkpoint is its own MXFP4 (`predictor.cards.precision`)."""
    native = getattr(model, "native_dtypes", None)
    expert_format = getattr(native, "expert_format", None)
    chosen = config.expert_dtype or _recipe_dtype(config, model, "routed_experts")
    if chosen is not None:
        return stored_expert_dtype(chosen, expert_format)
    expert = getattr(native, "expert", None)
    if expert is None:
        return None
    return expert_format or str(expert)


def _nvfp4_expert_options(model: ModelShape) -> str:
    """How to give ``model`` NVFP4 routed experts: its recipes that store them so, or a
    requantized checkpoint (`expert_dtype=fp4`, the platform's FP4: NVFP4 on NVIDIA; on an
    MXFP4 checkpoint fp4 is its own MXFP4, so only a recipe)."""
    options = [f"weight_dtype=recipe:{r.name}" for r in getattr(model, "recipes", ())
               if r.routed_experts in DWDP_EXPERT_DTYPES]
    if getattr(getattr(model, "native_dtypes", None), "expert_format", None) != "mxfp4":
        options.append("expert_dtype=fp4 (an NVFP4 requantization)")
    return " or ".join(options) or "an NVFP4 checkpoint (this card lists none: `inferasim models`)"


def _engine_support(config: Configuration, engine: Engine) -> list[str]:
    reasons = []
    for lever in LEVERS:
        if lever.values is None or lever.is_ranged:
            continue
        value = getattr(config, lever.name)
        if value is None and lever.optional:
            continue
        if lever.name == "weight_dtype" and value not in lever.legal_values(engine):
            reasons += _weight_spec_support(value, lever.legal_values(engine), engine)
            continue
        legal = lever.legal_values(engine)
        if value not in legal:
            shown = ", ".join(str(v).lower() if isinstance(v, bool) else str(v) for v in legal)
            reasons.append(f"{lever.name}={value} is not supported by {engine} (legal: {shown})")
    return reasons


def _vendor_values(config: Configuration, cluster: ClusterShape) -> list[str]:
    """A kernel or transport written for one vendor's GPUs (:data:`VENDOR_VALUES`)."""
    vendor = cluster.gpu.vendor
    reasons = []
    for lever, values in VENDOR_VALUES.items():
        value = getattr(config, lever)
        needed = values.get(value) if isinstance(value, str) else None
        if needed is not None and needed != vendor:
            reasons.append(f"{lever}={value} runs on {needed.upper()} GPUs only, not {vendor.upper()} "
                           f"({getattr(cluster.gpu, 'name', vendor)})")
    return reasons


def _host_tier(config: Configuration, cluster: ClusterShape) -> list[str]:
    """A host KV tier (private or shared) holds at most the host DRAM behind each GPU."""
    dram = getattr(cluster.gpu, "host_dram_per_gpu_gb", None)
    if dram and config.host_tier_gb_per_gpu > dram:
        return [f"host_kv_tier_gb={config.host_tier_gb_per_gpu:g} exceeds the {dram:g} GB of host DRAM per GPU "
                f"of {getattr(cluster.gpu, 'name', 'this GPU')}"]
    return []


def _expert_parallel(config: Configuration, engine: Engine) -> list[str]:
    """vLLM's and ATOM's one expert-parallel switch shards the experts over every rank of the
    replica: EP is 1 or the replica's width, nothing between (it would run at EP = tp)."""
    if engine not in (Engine.VLLM, Engine.ATOM):
        return []
    layouts = [] if config.disaggregated else [("", (config.tp, config.ep))]   # a split: its pools' own
    if config.disaggregated:
        for name in ("prefill_layout", "decode_layout"):
            text = getattr(config, name)
            if text and not str(text).upper().startswith("DWDP"):
                try:
                    tp, ep, _ = parse_layout(text, name)
                except ValueError:
                    continue        # the layout's own error is `_disaggregation`'s
                layouts.append((f"{name} ", (tp, ep)))
    return [f"{where}ep={ep} cannot run on {engine}: its --enable-expert-parallel spans every rank of the replica "
            f"(ep = 1 or {tp})" for where, (tp, ep) in layouts if 1 < ep < tp and tp % ep == 0]


def _weight_spec_support(value: str, legal: tuple, engine: Engine) -> list[str]:
    """A compound `weight_dtype`: every dtype it names must compute on the engine."""
    spec = parse_weight_spec(value)
    named = [spec.base] if spec.base else []
    named += [dtype for _, dtype in spec.components]
    return [f"weight_dtype {dtype} is not supported by {engine}" for dtype in dict.fromkeys(named)
            if base_dtype(dtype) not in legal]


def _recipe_reasons(config: Configuration, model: ModelShape) -> list[str]:
    spec = parse_weight_spec(config.weight_dtype)
    names = tuple(getattr(model, "recipe_names", ("native",)))
    if spec.recipe and spec.recipe not in names:
        return [f"weight_dtype recipe:{spec.recipe}: {model.name} lists no such checkpoint "
                f"(recipes: {', '.join(names)})"]
    return []


def _kv_duplication(attention_tp: int, model: ModelShape) -> int:
    """How many attention-TP ranks hold the same KV heads (1 when TP shards distinct heads);
    a model that does not say its KV heads is not bounded here."""
    kv_heads = getattr(model, "num_kv_heads", 0)
    return max(1, attention_tp // kv_heads) if kv_heads else attention_tp


def _parallel(config: Configuration, model: ModelShape, cluster: ClusterShape) -> list[str]:
    reasons = _width_reasons("", config.tp, config.ep, config.attention_dp, model)
    # engines split the layers unevenly when pp does not divide them (vLLM's and SGLang's
    # partitions give the remainder to some stages; the memory model sizes the fullest
    # stage): DeepSeek-R1's 61 layers run TP8 x PP2 on two H100 nodes
    if config.pp > model.num_layers:
        reasons.append(f"pp={config.pp} exceeds the {model.num_layers} layers")
    if config.dcp > 1 and config.attention_tp % config.dcp:
        reasons.append(f"dcp={config.dcp} does not divide attention-TP {config.attention_tp}")
    elif config.dcp > (duplicated := _kv_duplication(config.attention_tp, model)):
        # DCP shards the copies of the KV that attention TP duplicates: dcp <= tp / kv_heads
        # (vLLM's bound); beyond it a GPU would hold less than its share of the heads
        reasons.append(f"dcp={config.dcp} exceeds the {duplicated}x KV duplication of attention-TP "
                       f"{config.attention_tp} over {model.name}'s {getattr(model, 'num_kv_heads', 0)} KV heads "
                       f"(dcp at most attention-TP / KV heads; a latent cache, MLA, has one)")
    if config.eplb_replicas and not model.is_moe:
        reasons.append("eplb_replicas needs a MoE model")
    if config.eplb_replicas > model.num_experts:
        reasons.append(f"eplb_replicas={config.eplb_replicas} exceeds the {model.num_experts} experts")
    if config.all_to_all_backend != "none" and config.ep == 1:
        reasons.append(f"all_to_all_backend={config.all_to_all_backend} needs ep > 1")
    if config.total_gpus > cluster.total_gpus:
        reasons.append(f"needs {config.total_gpus} GPUs; the cluster has {cluster.total_gpus}")
    reasons += _domain_reasons("", config.tp, config.ep, config.attention_dp, cluster)
    return reasons


def _domain_reasons(prefix: str, tp: int, ep: int, dp: int, cluster: ClusterShape) -> list[str]:
    """A layout fits one scale-up domain unless its MoE spans domains with EP = tp while
    each attention group stays inside one (PRODUCT.md §3)."""
    domain = cluster.scale_up_gpus()
    if tp <= domain or (ep == tp and tp // dp <= domain):
        return []
    return [f"{prefix}tp={tp} exceeds the {domain}-GPU scale-up domain "
            "(use pp, or an EP that spans domains with attention inside one)"]


def _width_reasons(prefix: str, tp: int, ep: int, dp: int, model: ModelShape) -> list[str]:
    reasons = []
    if tp % dp:
        reasons.append(f"{prefix}attention_dp={dp} does not divide tp={tp}")
    elif model.attention_heads % (tp // dp):
        reasons.append(f"{prefix}attention-TP {tp // dp} does not divide the "
                       f"{model.attention_heads} attention heads")
    if ep > 1:
        if not model.is_moe:
            reasons.append(f"{prefix}ep={ep} needs a MoE model")
        elif tp % ep or model.num_experts % ep:
            reasons.append(f"{prefix}ep={ep} must divide tp={tp} and the {model.num_experts} routed experts")
    return reasons


def _disaggregation(config: Configuration, engine: Engine, model: ModelShape,
                    cluster: ClusterShape) -> list[str]:
    pool_levers = {"prefill_layout": config.prefill_layout, "decode_layout": config.decode_layout,
                   "kv_transfer_backend": config.kv_transfer_backend}
    if not config.disaggregated:
        set_levers = [k for k, v in pool_levers.items() if v is not None]
        set_levers += [k for k in ("prefill_replicas", "decode_replicas") if getattr(config, k) != 1]
        return [f"{name} is only legal when disaggregated=true" for name in set_levers]
    reasons = []
    if not config.prefill_layout or not config.decode_layout:
        return ["disaggregated=true needs prefill_layout and decode_layout"]
    if config.replicas != 1:
        reasons.append("replicas must be 1 when disaggregated (use prefill_replicas/decode_replicas)")
    for name in ("prefill_layout", "decode_layout"):
        tp, ep, dp = parse_layout(getattr(config, name), name)
        reasons += _width_reasons(f"{name} ", tp, ep, dp, model)
        reasons += _domain_reasons(f"{name} ", tp, ep, dp, cluster)
        reasons += _layout_option_reasons(name, config, engine, model, cluster)
    return reasons


DWDP_ENGINES = (Engine.TRTLLM,)   # TensorRT-LLM's DWDP (arXiv 2604.01621)
#: its routed experts' dtypes: "DWDP only supports the CuteDSL MoE backend with NVFP4"
#: (TensorRT-LLM's DWDP blog, "Current Code-Level Constraints"); fp4 is NVFP4 on NVIDIA
#: (a checkpoint's MXFP4 or INT4 experts are not: `routed_expert_dtype` names them)
DWDP_EXPERT_DTYPES = ("fp4", "nvfp4")


def _layout_option_reasons(name: str, config: Configuration, engine: Engine, model: ModelShape,
                           cluster: ClusterShape) -> list[str]:
    """TP subgroups split attention-DP ranks; DWDP is a prefill pool of single-GPU ranks
    inside one scale-up domain (its expert fetches ride the scale-up link)."""
    options = parse_layout_options(getattr(config, name), name)
    reasons = []
    if options.subgroup > 1 and (options.dp <= 1 or options.dp % options.subgroup):
        reasons.append(f"{name} TS{options.subgroup} must divide the attention-DP ranks (DP{options.dp})")
    if options.dwdp <= 1:
        return reasons
    if name != "prefill_layout":
        reasons.append("DWDP is a prefill-pool layout (prefill_layout=DWDPn)")
    if engine not in DWDP_ENGINES:
        reasons.append(f"{name}=DWDP{options.dwdp} needs {' or '.join(DWDP_ENGINES)} (DWDP is not in {engine})")
    if not model.is_moe:
        reasons.append(f"{name}=DWDP{options.dwdp} needs a MoE model (it shares routed-expert storage)")
    elif (experts := routed_expert_dtype(config, model)) not in DWDP_EXPERT_DTYPES:
        reasons.append(f"{name}=DWDP{options.dwdp} needs NVFP4 routed experts (TensorRT-LLM's DWDP runs only its "
                       f"CuteDSL NVFP4 MoE path), not {experts}: {_nvfp4_expert_options(model)}")
    if config.pp > 1:
        reasons.append(f"{name}=DWDP{options.dwdp} runs whole layers per rank; pp must be 1")
    if options.dwdp > cluster.scale_up_gpus():
        reasons.append(f"{name}=DWDP{options.dwdp} exceeds the {cluster.scale_up_gpus()}-GPU scale-up domain "
                       "its expert fetches need")
    return reasons


def _precision_and_kernels(config: Configuration, model: ModelShape, cluster: ClusterShape) -> list[str]:
    reasons = []
    if config.activation_dtype == "fp4" and not cluster.gpu.fp4_tflops:
        reasons.append("activation_dtype=fp4 needs FP4 tensor cores, which this GPU lacks")
    if config.spec_method == "none" and config.spec_depth:
        reasons.append("spec_depth > 0 needs a spec_method")
    if config.spec_method != "none" and not config.spec_depth:
        reasons.append(f"spec_method={config.spec_method} needs spec_depth >= 1")
    if config.spec_method == "mtp" and not model.mtp_layers:
        reasons.append(f"spec_method=mtp needs MTP layers; {model.name} has none")
    if config.allreduce_algorithm == "quick_reduce" and cluster.gpu.vendor != "amd":
        reasons.append("allreduce_algorithm=quick_reduce exists only on AMD GPUs")
    if config.expert_dtype and not model.is_moe:
        reasons.append("expert_dtype needs a MoE model")
    return reasons


FP4_EXPERT_FORMATS = ("fp4", "mxfp4", "nvfp4")


def _vllm_fp4_experts(config: Configuration, engine: Engine, model: ModelShape, cluster: ClusterShape) -> list[str]:
    """vLLM runs 4-bit float experts weight-only (Marlin, W4A16) on a GPU without FP4 tensor
    cores: it gates its MXFP4 x MXFP8 MoE backends to Blackwell, so fp8 activations for
    them (W4A8) have no kernel there and its launch refuses them
    (`predictor.harvest.quantization`); priced as W4A8, a search offered a deployment
    nothing could launch."""
    if engine is not Engine.VLLM or config.activation_dtype != "fp8" or cluster.gpu.fp4_tflops \
            or not getattr(model, "is_moe", False) or routed_expert_dtype(config, model) not in FP4_EXPERT_FORMATS:
        return []
    return ["activation_dtype=fp8 with fp4 experts (W4A8): vLLM runs them weight-only (W4A16) on a GPU without FP4 "
            "tensor cores; activation_dtype=bf16, or a GPU with FP4 tensor cores"]


def _scheduler(config: Configuration) -> list[str]:
    reasons = []
    if config.chunked_prefill_size > config.max_batched_tokens:
        reasons.append(f"chunked_prefill_size={config.chunked_prefill_size} exceeds "
                       f"max_batched_tokens={config.max_batched_tokens}")
    if config.arrival_rate == 0 and config.concurrency < 1:
        reasons.append("a closed loop needs concurrency >= 1")
    return reasons


def fusion_reasons(fusions: tuple[str, ...], activation_dtype: str | None, is_moe: bool) -> list[str]:
    """METHOD §3.13: quant-fed patterns only with low-precision activations, MoE
    patterns only on MoE models, no repeats, no generic mixed with named fusions."""
    reasons = []
    if len(set(fusions)) != len(fusions):
        reasons.append("fusions may not repeat a fusion")
    if "generic" in fusions and len(fusions) > 1:
        reasons.append("fusions may not mix 'generic' with named fusions")
    low_precision = activation_dtype in ("fp8", "fp4")
    for name in fusions:
        if name in QUANT_FED_FUSIONS and not low_precision:
            reasons.append(f"fusion {name} needs fp8 or fp4 activations")
        if name in MOE_FUSIONS and not is_moe:
            reasons.append(f"fusion {name} needs a MoE model")
    return reasons
