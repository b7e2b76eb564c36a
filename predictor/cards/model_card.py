"""The model card: one model's architecture, as the step-cost and memory models need it.

A card is a frozen pydantic record (a boundary schema: cards are files, embedded or
written by users). Parameter counts are *derived* from the architecture fields here, never
copied from a published figure; `derived_total_params` is kept only to check them.

Conventions (the same as the reference data in shared/data/models, README there):
- `embeddings` is the input embedding plus the LM head, counted once when tied;
- MTP/draft layers are excluded from every count (`mtp_layers` records them);
- routed experts are counted as parameters (FP4/INT4-packed checkpoints count values,
  not bytes);
- `shared_experts` holds every always-on weight of a MoE block: the shared experts, their
  gate (Qwen3-Next/3.5) and, for a latent MoE (Kimi-K3), the down/up projections into the
  latent space that feed the routed experts;
- `other` holds the small rest: layer norms, router gates and biases, hyper-connection
  mixers (DeepSeek-V4 mHC), attention-residual projections (Kimi-K3), the final norm.
"""

from __future__ import annotations

from enum import StrEnum
from functools import cached_property
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

COMPONENTS = ("attention", "dense_mlp", "shared_experts", "routed_experts", "embeddings", "other")


class Dtype(StrEnum):
    """Storage precision of a weight class or of the KV cache (PRODUCT.md §3)."""

    BF16 = "bf16"
    FP8 = "fp8"
    FP4 = "fp4"


class AttentionKind(StrEnum):
    """The attention families the memory and step-cost models distinguish."""

    GQA = "gqa"                # softmax MHA/GQA/MQA (optionally sliding-window, sparse-indexed)
    MLA = "mla"                # multi-head latent attention (DeepSeek/Kimi/GLM-5), optional DSA indexer
    KDA = "kda"                # Kimi Delta Attention (linear, fixed per-sequence state)
    GDN = "gdn"                # Gated DeltaNet (linear, Qwen3-Next / Qwen3.5)
    LIGHTNING = "lightning"    # MiniMax-M1 lightning attention (linear)
    COMPRESSED = "compressed"  # DeepSeek-V4: sliding window + 1/ratio compressed KV (+ indexer at ratio 4)

    @property
    def is_linear(self) -> bool:
        return self in (AttentionKind.KDA, AttentionKind.GDN, AttentionKind.LIGHTNING)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class CardSource(_Frozen):
    """Where the architecture came from (kept with the embedded data, README licence rule)."""

    repo: str
    commit: str | None = None
    path: str | None = None
    note: str | None = None


class NativeDtypes(_Frozen):
    """The checkpoint's per-component dtypes, used for any precision lever left unset.
    ``expert_format``: the 4-bit format of ``fp4`` routed experts when the checkpoint names
    one other than the platform's FP4 (NVFP4 on NVIDIA): MXFP4 (32-value blocks, e8m0
    scales: gpt-oss, Kimi-K3, DeepSeek-V4) or INT4 (Kimi-K2.5). Kernels that run only
    NVFP4 (TensorRT-LLM's DWDP) refuse such a checkpoint without a requantized recipe."""

    weight: Dtype = Dtype.BF16      # attention projections, dense MLP, shared experts
    expert: Dtype = Dtype.BF16      # routed experts
    kv_cache: Dtype = Dtype.BF16
    embedding: Dtype = Dtype.BF16   # input embedding and LM head
    expert_format: Literal["mxfp4", "int4"] | None = None


StoredDtype = Literal["bf16", "fp8", "fp4", "nvfp4", "mxfp4"]   # levers.precision.WEIGHT_DTYPES


class Recipe(_Frozen):
    """A published checkpoint of the model: its storage precision per component
    (`weight_dtype=recipe:NAME`, levers.precision). A component left None keeps the
    card's native dtype; ``nvfp4``/``mxfp4`` name the FP4 format the checkpoint stores."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]{0,39}$")
    description: str
    source: str                              # where the layout is published
    attention: StoredDtype | None = None
    dense_mlp: StoredDtype | None = None
    shared_experts: StoredDtype | None = None
    routed_experts: StoredDtype | None = None
    embeddings: StoredDtype | None = None
    drafter: StoredDtype | None = None


class AttentionGroup(_Frozen):
    """`num_layers` identical attention layers. Fields that do not apply are None."""

    kind: AttentionKind
    num_layers: int = Field(ge=1)
    num_heads: int = Field(ge=1)
    num_kv_heads: int = Field(ge=1)
    head_dim: int = Field(ge=1)
    v_head_dim: int | None = None
    q_lora_rank: int | None = None
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    qk_nope_head_dim: int | None = None
    window_tokens: int | None = None         # sliding window: KV kept for the last N tokens only
    compress_ratio: int | None = None        # DeepSeek-V4: one compressed KV entry per N tokens
    indexer_heads: int | None = None         # sparse-attention indexer (DSA / MSA / V4 CSA)
    indexer_head_dim: int | None = None
    indexer_topk: int | None = None          # tokens each query attends to after indexing
    linear_num_k_heads: int | None = None    # linear attention (KDA/GDN/lightning) state shape
    linear_num_v_heads: int | None = None
    linear_k_head_dim: int | None = None
    linear_v_head_dim: int | None = None
    conv_kernel: int | None = None
    params_per_layer: int = Field(ge=0)      # all weights of one layer's attention block
    # the part attention TP does not shard (LoRA down-projections, indexers, compressors)
    replicated_params_per_layer: int = Field(0, ge=0)


class ModelCard(_Frozen):
    """One model's architecture (see the module docstring for the counting conventions)."""

    name: str
    hf_id: str
    aliases: tuple[str, ...] = ()
    source: CardSource
    architecture: str                        # config.json model_type
    hidden_size: int = Field(ge=1)
    vocab_size: int = Field(ge=1)
    num_layers: int = Field(ge=1)
    max_context: int = Field(ge=1)
    tie_word_embeddings: bool = False
    attention: tuple[AttentionGroup, ...]
    dense_layers: int = Field(0, ge=0)
    dense_intermediate_size: int = Field(0, ge=0)
    moe_layers: int = Field(0, ge=0)
    num_experts: int = Field(0, ge=0)        # routed experts per MoE layer
    top_k: int = Field(0, ge=0)
    num_shared_experts: int = Field(0, ge=0)
    moe_intermediate_size: int = Field(0, ge=0)
    shared_intermediate_size: int = Field(0, ge=0)   # per shared expert
    latent_moe_dim: int | None = None        # routed experts run in this width (Kimi-K3 LatentMoE)
    expert_bias: bool = False                # gpt-oss experts carry biases
    router_bias: bool = False                # e_score_correction_bias / router bias
    shared_expert_gate: bool = False         # Qwen3-Next/3.5 sigmoid gate on the shared expert
    norm_params_per_layer: int = Field(0, ge=0)
    hyper_connection_params_per_layer: int = Field(0, ge=0)
    hyper_connection_mult: int = Field(1, ge=1)      # residual stream width multiplier (mHC)
    final_params: int = Field(0, ge=0)       # final norm (+ mHC output head, attention-residual head)
    mtp_layers: int = Field(0, ge=0)
    native_dtypes: NativeDtypes = NativeDtypes()
    recipes: tuple[Recipe, ...] = ()         # published checkpoints besides the native one
    derived_total_params: int | None = None  # published derivation, for checking only

    @model_validator(mode="after")
    def _consistent(self) -> ModelCard:
        """The counts that size weights and KV agree with each other (every embedded card,
        and every card built from a config.json, does): a hand-written card with 40 layers
        over attention groups of 32 was listed with 40 and sized with 32."""
        attention_layers = sum(group.num_layers for group in self.attention)
        if attention_layers != self.num_layers:
            raise ValueError(f"num_layers is {self.num_layers} but the attention groups hold {attention_layers} layers")
        if self.dense_layers + self.moe_layers != self.num_layers:
            raise ValueError(f"dense_layers {self.dense_layers} + moe_layers {self.moe_layers} is not num_layers "
                             f"{self.num_layers}")
        for group in self.attention:
            if group.num_kv_heads > group.num_heads:
                raise ValueError(f"an attention group has {group.num_kv_heads} KV heads for {group.num_heads} heads")
        return self

    # -- shape shortcuts ---------------------------------------------------------------
    @property
    def uses_mla(self) -> bool:
        """Whether its attention is MLA (latent KV): the engines' MLA kernels, not MHA/GQA ones."""
        return any(group.kind == AttentionKind.MLA for group in self.attention)

    @property
    def is_moe(self) -> bool:
        return self.moe_layers > 0 and self.num_experts > 0

    @property
    def num_attention_heads(self) -> int:
        """Query heads of the softmax attention layers (the first group if all are linear)."""
        softmax = [g for g in self.attention if not g.kind.is_linear]
        return (softmax or list(self.attention))[0].num_heads

    @property
    def attention_heads(self) -> int:
        """The smallest head count attention TP must divide (query heads of every group,
        and the key/value heads of linear-attention groups, which shard by head)."""
        counts = [g.num_heads for g in self.attention]
        counts += [n for g in self.attention for n in (g.linear_num_k_heads, g.linear_num_v_heads) if n]
        return min(counts)

    @property
    def num_kv_heads(self) -> int:
        """KV heads of the softmax attention layers (1 for latent/compressed caches)."""
        softmax = [g for g in self.attention if not g.kind.is_linear]
        return min(g.num_kv_heads for g in softmax) if softmax else 0

    @property
    def expert_hidden_size(self) -> int:
        """The width routed experts read and write: the latent width when there is one."""
        return self.latent_moe_dim or self.hidden_size

    @property
    def recipe_names(self) -> tuple[str, ...]:
        """Checkpoints `weight_dtype=recipe:NAME` may select ("native" is always one)."""
        return ("native", *(r.name for r in self.recipes))

    def recipe(self, name: str) -> Recipe | None:
        """The recipe called ``name`` ("native": the card's own dtypes); None if unknown."""
        if name == "native":
            return Recipe(name="native", description="the checkpoint the card describes", source="model card",
                          attention=self.native_dtypes.weight.value, dense_mlp=self.native_dtypes.weight.value,
                          shared_experts=self.native_dtypes.weight.value,
                          routed_experts=self.native_dtypes.expert.value,
                          embeddings=self.native_dtypes.embedding.value)
        return next((r for r in self.recipes if r.name == name), None)

    # -- parameter counts --------------------------------------------------------------
    def expert_params(self) -> int:
        """Weights of one routed expert (SwiGLU gate/up/down, plus biases if any)."""
        width, inner = self.expert_hidden_size, self.moe_intermediate_size
        return 3 * width * inner + ((2 * inner + width) if self.expert_bias else 0)

    def shared_params_per_moe_layer(self) -> int:
        """Always-on MoE-block weights: shared experts, their gate, latent projections."""
        params = self.num_shared_experts * 3 * self.hidden_size * self.shared_intermediate_size
        if self.shared_expert_gate:
            params += self.hidden_size
        if self.latent_moe_dim:
            params += 2 * self.hidden_size * self.latent_moe_dim + self.latent_moe_dim
        return params

    def router_params_per_moe_layer(self) -> int:
        return self.num_experts * self.hidden_size + (self.num_experts if self.router_bias else 0)

    def dense_mlp_params_per_layer(self) -> int:
        return 3 * self.hidden_size * self.dense_intermediate_size

    def embedding_matrices(self) -> int:
        """1 when the LM head shares the input embedding, else 2."""
        return 1 if self.tie_word_embeddings else 2

    def params_by_component(self) -> dict[str, int]:
        return dict(self._params_by_component)

    @cached_property
    def _params_by_component(self) -> dict[str, int]:
        return {
            "attention": sum(g.num_layers * g.params_per_layer for g in self.attention),
            "dense_mlp": self.dense_layers * self.dense_mlp_params_per_layer(),
            "shared_experts": self.moe_layers * self.shared_params_per_moe_layer(),
            "routed_experts": self.moe_layers * self.num_experts * self.expert_params(),
            "embeddings": self.embedding_matrices() * self.vocab_size * self.hidden_size,
            "other": (self.num_layers * (self.norm_params_per_layer + self.hyper_connection_params_per_layer)
                      + self.moe_layers * self.router_params_per_moe_layer() + self.final_params),
        }

    def total_params(self) -> int:
        return sum(self._params_by_component.values())

    def active_params(self) -> int:
        """Parameters one token touches: everything but the routed experts, plus top-k of
        them per MoE layer (embeddings included, as in the reference data)."""
        parts = self._params_by_component
        return self.total_params() - parts["routed_experts"] + self.moe_layers * self.top_k * self.expert_params()
