"""Attention groups of a model card, read from a Hugging Face config.json (METHOD §3.9).

One function per attention family turns the config into `AttentionGroup`s with their
weight counts. The tensor layouts follow the public modelling code of each family
(HF transformers / vLLM / the DeepSeek-V4 reference `inference/model.py`), and reproduce
the parameter derivations in shared/data/models. `replicated_params_per_layer` is the
part engines keep whole on every attention-TP rank (LoRA down-projections and their
norms, indexer key paths, V4 compressors).
"""

from __future__ import annotations

from collections import Counter

from predictor.cards.config_reader import ConfigReader
from predictor.cards.model_card import AttentionGroup, AttentionKind


def attention_groups(cfg: ConfigReader) -> tuple[AttentionGroup, ...]:
    """Dispatch on the fields that identify each family (not on model_type, so user
    configs of known families work)."""
    if cfg.has("compress_ratios"):
        return _compressed_groups(cfg)
    if cfg.has("linear_attn_config"):
        return _kda_groups(cfg)
    if cfg.has("linear_num_value_heads"):
        return _gdn_groups(cfg)
    if _has_lightning_layers(cfg.opt("attn_type_list", default=None)):
        return _lightning_groups(cfg)
    if cfg.has("kv_lora_rank"):
        return _mla_groups(cfg, cfg.need("num_hidden_layers"))
    return _gqa_groups(cfg)


def _has_lightning_layers(kinds) -> bool:
    """MiniMax attn_type_list: 0 = lightning (linear), 1 = softmax; the unverified M1
    record gives it as a sentence instead of a list."""
    if isinstance(kinds, list):
        return 0 in kinds
    return isinstance(kinds, str) and "lightning" in kinds


# -- softmax GQA / MHA ----------------------------------------------------------------
def _gqa_params(cfg: ConfigReader, *, gated: bool = False, bias: bool | None = None) -> int:
    hidden, heads = cfg.need("hidden_size"), cfg.need("num_attention_heads")
    kv_heads = cfg.opt("num_key_value_heads", default=heads)
    head_dim = cfg.opt("head_dim", default=None) or hidden // heads
    q_width, kv_width = heads * head_dim, kv_heads * head_dim
    params = hidden * (q_width * (2 if gated else 1) + 2 * kv_width) + q_width * hidden
    qkv_bias = cfg.opt("attention_bias", default=False) if bias is None else bias
    if qkv_bias:
        params += q_width + 2 * kv_width
    if cfg.opt("model_type", default="") == "gpt_oss":
        params += hidden + heads                      # o_proj bias and per-head attention sinks
    norm_type = cfg.opt("qk_norm_type", default="per_head")
    if cfg.opt("use_qk_norm", default=False) or cfg.opt("model_type", default="").startswith("qwen3"):
        params += (q_width + kv_width) if norm_type == "per_layer" else 2 * head_dim
    return params


def _gqa_group(cfg: ConfigReader, num_layers: int, params: int, **extra) -> AttentionGroup:
    heads = cfg.need("num_attention_heads")
    head_dim = cfg.opt("head_dim", default=None) or cfg.need("hidden_size") // heads
    return AttentionGroup(kind=AttentionKind.GQA, num_layers=num_layers, num_heads=heads,
                          num_kv_heads=cfg.opt("num_key_value_heads", default=heads),
                          head_dim=head_dim, v_head_dim=head_dim, params_per_layer=params, **extra)


def _gqa_groups(cfg: ConfigReader) -> tuple[AttentionGroup, ...]:
    layers = cfg.need("num_hidden_layers")
    params = _gqa_params(cfg)
    kinds = cfg.opt("layer_types", default=None)
    if kinds and "sliding_attention" in kinds:        # gpt-oss: alternating sliding/full
        window = cfg.need("sliding_window")
        sliding = sum(1 for kind in kinds[:layers] if kind == "sliding_attention")
        return (_gqa_group(cfg, sliding, params, window_tokens=window),
                _gqa_group(cfg, layers - sliding, params))
    sparse = cfg.opt("sparse_attention_config", default=None)
    if sparse and sparse.get("use_sparse_attention"):  # MiniMax-M3 block-sparse attention (MSA)
        return _minimax_sparse_groups(cfg, layers, params, sparse)
    window = cfg.opt("sliding_window", default=None) if cfg.opt("use_sliding_window", default=False) else None
    return (_gqa_group(cfg, layers, params, window_tokens=window),)


def _minimax_sparse_groups(cfg: ConfigReader, layers: int, params: int, sparse: dict) -> tuple[AttentionGroup, ...]:
    """Index query (index heads x index dim), one index key per token and its norm
    (weight + bias) on the sparse layers."""
    hidden = cfg.need("hidden_size")
    flags = sparse.get("sparse_attention_freq") or [1] * layers
    num_sparse = sum(1 for flag in flags[:layers] if flag)
    heads, dim = sparse["sparse_num_index_heads"], sparse["sparse_index_dim"]
    index_params = hidden * heads * dim + hidden * dim + 2 * dim
    topk = sparse["sparse_topk_blocks"] * sparse["sparse_block_size"]
    groups = [_gqa_group(cfg, num_sparse, params + index_params, indexer_heads=heads,
                         indexer_head_dim=dim, indexer_topk=topk, replicated_params_per_layer=index_params)]
    if layers > num_sparse:
        groups.insert(0, _gqa_group(cfg, layers - num_sparse, params))
    return tuple(groups)


# -- MLA (DeepSeek-V3 family, Kimi-K2, GLM-5) with the optional DSA indexer -------------
def _mla_params(cfg: ConfigReader) -> tuple[int, int]:
    """(all weights, replicated down-projection part) of one MLA layer."""
    hidden, heads = cfg.need("hidden_size"), cfg.need("num_attention_heads")
    q_rank, kv_rank = cfg.opt("q_lora_rank", default=None), cfg.need("kv_lora_rank")
    nope, rope, v_dim = cfg.need("qk_nope_head_dim"), cfg.need("qk_rope_head_dim"), cfg.need("v_head_dim")
    q_width = heads * (nope + rope)
    replicated = hidden * (kv_rank + rope) + kv_rank
    if q_rank:
        replicated += hidden * q_rank + q_rank
        sharded = q_rank * q_width
    else:
        sharded = hidden * q_width
    sharded += kv_rank * heads * (nope + v_dim) + heads * v_dim * hidden
    if cfg.opt("mla_use_output_gate", default=False):
        sharded += hidden * heads * v_dim
    return replicated + sharded, replicated


def _indexer_params(cfg: ConfigReader) -> int:
    """DSA lightning indexer: wq_b, wk, k LayerNorm (weight + bias), weights_proj."""
    hidden, heads, dim = cfg.need("hidden_size"), cfg.need("index_n_heads"), cfg.need("index_head_dim")
    q_rank = cfg.opt("q_lora_rank", default=None) or hidden
    return q_rank * heads * dim + hidden * dim + 2 * dim + hidden * heads


def _mla_group(cfg: ConfigReader, num_layers: int, *, indexed: bool) -> AttentionGroup:
    params, replicated = _mla_params(cfg)
    extra = {}
    if indexed:
        index = _indexer_params(cfg)
        params, replicated = params + index, replicated + index
        extra = dict(indexer_heads=cfg.need("index_n_heads"), indexer_head_dim=cfg.need("index_head_dim"),
                     indexer_topk=cfg.need("index_topk"))
    heads = cfg.need("num_attention_heads")
    return AttentionGroup(
        kind=AttentionKind.MLA, num_layers=num_layers, num_heads=heads, num_kv_heads=1,
        head_dim=cfg.need("qk_nope_head_dim") + cfg.need("qk_rope_head_dim"), v_head_dim=cfg.need("v_head_dim"),
        q_lora_rank=cfg.opt("q_lora_rank", default=None), kv_lora_rank=cfg.need("kv_lora_rank"),
        qk_rope_head_dim=cfg.need("qk_rope_head_dim"), qk_nope_head_dim=cfg.need("qk_nope_head_dim"),
        params_per_layer=params, replicated_params_per_layer=replicated, **extra)


def _mla_groups(cfg: ConfigReader, num_layers: int) -> tuple[AttentionGroup, ...]:
    if not cfg.has("index_n_heads"):
        return (_mla_group(cfg, num_layers, indexed=False),)
    kinds = cfg.opt("indexer_types", default=None)  # GLM-5.2: "shared" layers reuse the previous top-k
    shared = sum(1 for kind in (kinds or [])[:num_layers] if kind == "shared")
    groups = [_mla_group(cfg, num_layers - shared, indexed=True)]
    if shared:   # indexer weights counted as published; no index keys cached on these layers
        indexed = _mla_group(cfg, shared, indexed=True)
        groups.append(indexed.model_copy(update={"indexer_heads": None, "indexer_head_dim": None}))
    return tuple(groups)


# -- Kimi Delta Attention hybrids (Kimi-Linear, Kimi-K3) ---------------------------------
def _kda_params(cfg: ConfigReader, lin: dict) -> int:
    hidden, heads, dim = cfg.need("hidden_size"), lin["num_heads"], lin["head_dim"]
    kernel = lin["short_conv_kernel_size"]
    inner = heads * dim
    params = 3 * hidden * inner + 3 * inner * kernel           # q/k/v projections and short convs
    params += dim * hidden + inner * dim + inner + heads        # f_a, f_b, dt_bias, A_log
    params += heads * hidden + dim + inner * hidden             # b_proj (beta), o_norm, o_proj
    params += hidden * inner if lin.get("use_full_rank_gate") else dim * hidden + inner * dim
    return params


def _kda_groups(cfg: ConfigReader) -> tuple[AttentionGroup, ...]:
    lin = cfg.need("linear_attn_config")
    layers = cfg.need("num_hidden_layers")
    num_kda = len(lin["kda_layers"])
    heads, dim = lin["num_heads"], lin["head_dim"]
    kda = AttentionGroup(kind=AttentionKind.KDA, num_layers=num_kda, num_heads=heads, num_kv_heads=heads,
                         head_dim=dim, v_head_dim=dim, linear_num_k_heads=heads, linear_num_v_heads=heads,
                         linear_k_head_dim=dim, linear_v_head_dim=dim, conv_kernel=lin["short_conv_kernel_size"],
                         params_per_layer=_kda_params(cfg, lin))
    return (kda, *_mla_groups(cfg, layers - num_kda))


# -- Gated DeltaNet hybrids (Qwen3-Next, Qwen3.5) ----------------------------------------
def _gdn_groups(cfg: ConfigReader) -> tuple[AttentionGroup, ...]:
    hidden, layers = cfg.need("hidden_size"), cfg.need("num_hidden_layers")
    nk, dk = cfg.need("linear_num_key_heads"), cfg.need("linear_key_head_dim")
    nv, dv = cfg.need("linear_num_value_heads"), cfg.need("linear_value_head_dim")
    kernel = cfg.need("linear_conv_kernel_dim")
    kinds = cfg.opt("layer_types", default=None)
    if kinds:
        num_linear = sum(1 for kind in kinds[:layers] if kind == "linear_attention")
    else:
        interval = cfg.need("full_attention_interval")
        num_linear = layers - layers // interval
    conv_dim = 2 * nk * dk + nv * dv
    params = hidden * (conv_dim + nv * dv) + hidden * 2 * nv     # in_proj_qkvz, in_proj_ba
    params += conv_dim * kernel + 2 * nv + dv + nv * dv * hidden  # conv1d, dt_bias + A_log, norm, out_proj
    gdn = AttentionGroup(kind=AttentionKind.GDN, num_layers=num_linear, num_heads=nv, num_kv_heads=nk,
                         head_dim=dk, v_head_dim=dv, linear_num_k_heads=nk, linear_num_v_heads=nv,
                         linear_k_head_dim=dk, linear_v_head_dim=dv, conv_kernel=kernel, params_per_layer=params)
    gated = cfg.opt("attn_output_gate", default=True)             # Qwen3-Next/3.5 full attention is gated
    full = _gqa_group(cfg, layers - num_linear, _gqa_params(cfg, gated=gated))
    return (gdn, full)


# -- MiniMax-M1 lightning attention (7 linear : 1 softmax) --------------------------------
def _lightning_groups(cfg: ConfigReader) -> tuple[AttentionGroup, ...]:
    hidden, layers = cfg.need("hidden_size"), cfg.need("num_hidden_layers")
    heads, dim = cfg.need("num_attention_heads"), cfg.need("head_dim")
    kinds = cfg.need("attn_type_list")
    num_softmax = sum(1 for k in kinds[:layers] if k == 1) if isinstance(kinds, list) else layers // 8
    inner = heads * dim
    params = hidden * 3 * inner + hidden * inner + inner * hidden + inner   # qkv, output gate, out, norm
    linear = AttentionGroup(kind=AttentionKind.LIGHTNING, num_layers=layers - num_softmax, num_heads=heads,
                            num_kv_heads=heads, head_dim=dim, v_head_dim=dim, linear_num_k_heads=heads,
                            linear_num_v_heads=heads, linear_k_head_dim=dim, linear_v_head_dim=dim,
                            params_per_layer=params)
    return (linear, _gqa_group(cfg, num_softmax, _gqa_params(cfg)))


# -- DeepSeek-V4 hybrid compressed attention ---------------------------------------------
def _compressor_params(hidden: int, ratio: int, dim: int) -> int:
    coff = 2 if ratio == 4 else 1                                  # ratio 4 overlaps two windows
    return ratio * coff * dim + 2 * hidden * coff * dim + dim      # ape, wkv, wgate, norm


def _compressed_groups(cfg: ConfigReader) -> tuple[AttentionGroup, ...]:
    """One group per compress ratio (0 = sliding window only, 4 = CSA + indexer, 128 = HCA);
    the ratio list may carry a trailing MTP entry, so only the first num_layers count."""
    hidden, heads, dim = cfg.need("hidden_size"), cfg.need("num_attention_heads"), cfg.need("head_dim")
    q_rank, o_rank = cfg.need("q_lora_rank"), cfg.need("o_lora_rank")
    ratios = cfg.need("compress_ratios")[: cfg.need("num_hidden_layers")]
    replicated = hidden * q_rank + q_rank + hidden * dim + dim     # wq_a, q_norm, wkv, kv_norm
    sharded = q_rank * heads * dim + heads * dim * o_rank + cfg.need("o_groups") * o_rank * hidden + heads
    groups = []
    for ratio, count in sorted(Counter(ratios).items()):
        extra, rep = {}, replicated
        if ratio:
            rep += _compressor_params(hidden, ratio, dim)
        indexer = 0
        if ratio == 4:
            ih, ihd = cfg.need("index_n_heads"), cfg.need("index_head_dim")
            rep += _compressor_params(hidden, 4, ihd)
            indexer = q_rank * ih * ihd + hidden * ih
            extra = dict(indexer_heads=ih, indexer_head_dim=ihd, indexer_topk=cfg.need("index_topk"))
        groups.append(AttentionGroup(
            kind=AttentionKind.COMPRESSED, num_layers=count, num_heads=heads,
            num_kv_heads=cfg.opt("num_key_value_heads", default=1), head_dim=dim, v_head_dim=dim,
            q_lora_rank=q_rank, qk_rope_head_dim=cfg.need("qk_rope_head_dim"),
            window_tokens=cfg.need("sliding_window"), compress_ratio=ratio or None,
            params_per_layer=rep + sharded + indexer, replicated_params_per_layer=rep, **extra))
    return tuple(groups)
