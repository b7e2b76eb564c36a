"""Turn a Hugging Face config.json into a `ModelCard` (METHOD §3.9).

The same code builds the embedded cards (scripts/build_model_cards.py) and a user's own
card (`predictor.cards.registry.add_card_from_config`). Attention groups come from
`predictor.cards.attention`; this module reads the MLP/MoE shape, the small "other"
weights, MTP layers, context length and the checkpoint's native dtypes.

Native dtype rules (`native_dtypes`), read from `quantization_config`:
1. no quantization_config: every component in bf16 (the checkpoint's torch dtype; fp16
   checkpoints are sized like bf16);
2. `quant_method: fp8` (DeepSeek-V3/R1/V3.2/V4, Kimi-K2, MiniMax-M2.x): attention, dense
   MLP, shared and routed experts in fp8; a top-level `expert_dtype: fp4` (DeepSeek-V4)
   makes routed experts fp4;
3. `quant_method: mxfp4` (gpt-oss): routed experts fp4, the rest bf16
   (`modules_to_not_convert` lists attention, router, embeddings, LM head);
4. `quant_method: compressed-tensors` (Kimi-K2.5 INT4 group-32, Kimi-K3 MXFP4): the
   quantized groups' width (4 bits -> fp4, 8 bits -> fp8) for routed experts; attention,
   dense MLP and shared experts too unless the ignore list names `self_attn` (both Kimi
   checkpoints keep them bf16). INT4 weights are sized like a 4-bit format with scales;
   the format of 4-bit experts is kept (`NativeDtypes.expert_format`): integer weights
   are INT4, float weights in 32-value groups (or a format naming mxfp4) MXFP4, like the
   mxfp4 method's and a fp8 checkpoint's fp4 experts with ue8m0 scales (DeepSeek-V4);
5. embeddings and LM head are bf16 in every checkpoint above; the KV cache is bf16
   unless a `kv_cache_scheme` with 8 bits is present.
"""

from __future__ import annotations

import re

from predictor.cards.attention import attention_groups
from predictor.cards.config_reader import ConfigReader
from predictor.cards.model_card import CardSource, Dtype, ModelCard, NativeDtypes

_ACTIVE_SUFFIX = re.compile(r"-a\d+(?:\.\d+)?b$")


def card_aliases(name: str, hf_id: str, extra: tuple[str, ...] = ()) -> tuple[str, ...]:
    """Lower-case aliases: the name, the HF id, its repo part, and each without the
    active-parameter suffix (`qwen3.5-397b` for Qwen3.5-397B-A17B)."""
    names = [name, hf_id, hf_id.split("/")[-1], *extra]
    aliases: list[str] = []
    for alias in (a.lower() for a in names):
        for candidate in (alias, _ACTIVE_SUFFIX.sub("", alias)):
            if candidate not in aliases:
                aliases.append(candidate)
    return tuple(aliases)


def card_from_hf_config(config: dict, name: str, source: CardSource | dict, *, hf_id: str | None = None,
                        derived_total_params: int | None = None, extra_aliases: tuple[str, ...] = (),
                        origin: str | None = None) -> ModelCard:
    """A card from a config.json dict; `origin` names the file in error messages."""
    cfg = ConfigReader(config, origin or f"config.json of '{name}'")
    cfg.check_core()
    hf_id = hf_id or cfg.opt("_name_or_path", default=None) or name
    layers, hidden = cfg.need("num_hidden_layers"), cfg.need("hidden_size")
    hc_mult = cfg.opt("hc_mult", default=1)
    return ModelCard(
        name=name, hf_id=hf_id, aliases=card_aliases(name, hf_id, extra_aliases),
        source=CardSource.model_validate(source), architecture=str(cfg.opt("model_type", default="unknown")),
        hidden_size=hidden, vocab_size=cfg.need("vocab_size"), num_layers=layers,
        max_context=cfg.need("max_position_embeddings", "model_max_length"),
        tie_word_embeddings=bool(cfg.opt("tie_word_embeddings", default=False)),
        attention=attention_groups(cfg), **_mlp_fields(cfg, layers),
        norm_params_per_layer=hidden * (6 if cfg.has("attn_res_block_size") else 2),
        hyper_connection_params_per_layer=_hyper_connection_params(hidden, hc_mult),
        hyper_connection_mult=hc_mult, final_params=_final_params(cfg, hidden, hc_mult),
        mtp_layers=_mtp_layers(cfg), native_dtypes=native_dtypes(cfg),
        derived_total_params=derived_total_params,
    )


def _mlp_fields(cfg: ConfigReader, layers: int) -> dict:
    experts = cfg.opt("n_routed_experts", "num_local_experts", "num_experts", default=0)
    if not experts:
        return dict(dense_layers=layers, dense_intermediate_size=cfg.need("intermediate_size"))
    dense = _dense_layer_count(cfg, layers)
    moe_inner = cfg.need("moe_intermediate_size", "intermediate_size")
    shared = cfg.opt("n_shared_experts", "num_shared_experts", default=0)
    shared_inner = cfg.opt("shared_intermediate_size", "shared_expert_intermediate_size", default=None)
    if cfg.has("shared_expert_intermediate_size"):
        shared = max(shared, 1)                      # Qwen3-Next/3.5: one gated shared expert
    if shared and shared_inner == 0:
        shared = 0
    model_type = str(cfg.opt("model_type", default=""))
    return dict(
        dense_layers=dense,
        dense_intermediate_size=cfg.opt("dense_intermediate_size", "intermediate_size", default=0) if dense else 0,
        moe_layers=layers - dense, num_experts=experts,
        top_k=cfg.need("num_experts_per_tok", "num_experts_per_token", "experts_per_token"),
        num_shared_experts=shared, moe_intermediate_size=moe_inner,
        shared_intermediate_size=(shared_inner or moe_inner) if shared else 0,
        latent_moe_dim=cfg.opt("routed_expert_hidden_size", default=None) or None,
        expert_bias=model_type == "gpt_oss",
        router_bias=_has_router_bias(cfg, model_type),
        shared_expert_gate=cfg.has("shared_expert_intermediate_size"),
    )


def _dense_layer_count(cfg: ConfigReader, layers: int) -> int:
    """Leading dense layers of a MoE model, from whichever field the family uses."""
    kinds = cfg.opt("mlp_layer_types", default=None)            # GLM-5.2: "dense"/"sparse"
    if kinds:
        return sum(1 for kind in kinds[:layers] if kind == "dense")
    freq = cfg.opt("moe_layer_freq", default=None)              # MiniMax-M3: per-layer 0/1 list
    if isinstance(freq, list):
        return sum(1 for flag in freq[:layers] if not flag)
    only = cfg.opt("mlp_only_layers", default=None)              # Qwen3-MoE: explicit dense ids
    return cfg.opt("first_k_dense_replace", default=0) + len(only or [])


def _has_router_bias(cfg: ConfigReader, model_type: str) -> bool:
    return (model_type in ("gpt_oss", "glm4_moe") or cfg.opt("topk_method", default="") == "noaux_tc"
            or bool(cfg.opt("use_routing_bias", default=False))
            or cfg.opt("moe_router_activation_func", default="") == "sigmoid")


def _hyper_connection_params(hidden: int, hc_mult: int) -> int:
    """DeepSeek-V4 mHC: per layer two mixers (attention, FFN), each fn [(2+m)m, m*H],
    base [(2+m)m] and scale [3]."""
    if hc_mult <= 1:
        return 0
    mix = (2 + hc_mult) * hc_mult
    return 2 * (mix * hc_mult * hidden + mix + 3)


def _final_params(cfg: ConfigReader, hidden: int, hc_mult: int) -> int:
    """Final norm, plus the mHC output head (fn [m, m*H], base [m], scale [1]) or the
    attention-residual output norm and projection (Kimi-K3)."""
    params = hidden
    if hc_mult > 1:
        params += hc_mult * hc_mult * hidden + hc_mult + 1
    if cfg.has("attn_res_block_size"):
        params += 2 * hidden
    return params


def _mtp_layers(cfg: ConfigReader) -> int:
    if cfg.opt("model_type", default="") == "qwen3_next":
        return 1                                     # the checkpoint ships mtp.* though config.json has no key
    return int(cfg.opt("num_mtp_modules", "num_nextn_predict_layers", "mtp_num_hidden_layers", default=0))


def native_dtypes(cfg: ConfigReader) -> NativeDtypes:
    """The checkpoint's per-component dtypes (rules in the module docstring)."""
    quant = cfg.opt("quantization_config", default=None) or {}
    method = str(quant.get("quant_method", "")).lower()
    weight = expert = Dtype.BF16
    expert_format = None
    if method == "fp8":
        weight = expert = Dtype.FP8
        if str(cfg.opt("expert_dtype", default="")).lower() == "fp4":
            expert = Dtype.FP4
            expert_format = "mxfp4" if str(quant.get("scale_fmt", "")).lower() == "ue8m0" else None
    elif method == "mxfp4":
        expert, expert_format = Dtype.FP4, "mxfp4"
    elif method == "compressed-tensors":
        expert = _compressed_tensors_dtype(quant)
        expert_format = _compressed_tensors_format(quant) if expert is Dtype.FP4 else None
        ignored = " ".join(str(pattern) for pattern in quant.get("ignore", []))
        weight = Dtype.BF16 if "self_attn" in ignored else expert
    kv_scheme = quant.get("kv_cache_scheme") or {}
    kv_cache = Dtype.FP8 if kv_scheme.get("num_bits") == 8 else Dtype.BF16
    return NativeDtypes(weight=weight, expert=expert, kv_cache=kv_cache, embedding=Dtype.BF16,
                        expert_format=expert_format)


def _compressed_tensors_format(quant: dict) -> str | None:
    """The 4-bit groups' format (rule 4): INT4, MXFP4, or None (the platform's FP4)."""
    for group in (quant.get("config_groups") or {}).values():
        weights = group.get("weights") or {}
        if weights.get("num_bits") != 4:
            continue
        if str(weights.get("type", "")).lower() == "int":
            return "int4"
        named = f"{group.get('format', '')} {quant.get('format', '')}".lower()
        if "mxfp4" in named or weights.get("group_size") == 32:
            return "mxfp4"
    return None


def _compressed_tensors_dtype(quant: dict) -> Dtype:
    groups = quant.get("config_groups") or {}
    bits = [group.get("weights", {}).get("num_bits") for group in groups.values()]
    if 4 in bits:
        return Dtype.FP4
    if 8 in bits:
        return Dtype.FP8
    return Dtype.BF16
