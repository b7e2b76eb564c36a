"""Storage precision per weight component of a configuration on a card (PRODUCT.md §3).

One resolution for the memory model and the step model, so both price every component at
the precision it is stored in: the card's native dtypes, then the recipe
`weight_dtype=recipe:NAME` selects (a published checkpoint the card lists), then the
lever's own items (a bare dtype for attention projections, dense MLP and shared experts;
``COMPONENT:DTYPE``), then ``expert_dtype`` for the routed experts (`levers.precision`).

The drafter's weights have no native dtype of their own: MTP and DSpark layers are
target layers and follow the target's components; an EAGLE-3 head ships in BF16.
``drafter:DTYPE`` (or a recipe's drafter) sets every drafter weight.

Bytes per value: bf16 2, fp8 1, fp4 the platform's format (NVFP4 4.5 bits on NVIDIA,
MXFP4 4.25 bits on AMD), ``nvfp4`` 4.5 and ``mxfp4`` 4.25 bits wherever they run (block
scales included, METHOD §3.9). Routed experts at ``fp4`` on a checkpoint whose experts are
MXFP4 (`NativeDtypes.expert_format`: gpt-oss, Kimi-K3, DeepSeek-V4) are that checkpoint's
MXFP4 on every GPU, whether the lever is unset, set to ``fp4`` or taken from an anchor or a
corpus row that ran the checkpoint: engines load its MXFP4 blocks as they are (Blackwell's
MoE kernels and Hopper's Marlin path alike), so one checkpoint is sized and read one way.
An NVFP4 requantization is a recipe the card lists (Kimi-K3's ``nvfp4``).
"""

from __future__ import annotations

from dataclasses import dataclass

from levers.configuration import Configuration
from levers.errors import InputError, accepted_list
from levers.precision import LEVER, base_dtype, parse_weight_spec, stored_expert_dtype
from predictor.cards.model_card import ModelCard
from predictor.hardware import FP4_BITS_PER_VALUE_BY_VENDOR

FORMAT_BITS = {"nvfp4": 4.5, "mxfp4": 4.25}
PLAIN_BYTES = {"bf16": 2.0, "fp8": 1.0}
EAGLE3_HEAD_DTYPE = "bf16"
WEIGHT_COMPONENTS = ("attention", "dense_mlp", "shared_experts", "routed_experts", "embeddings")


def stored_bytes(dtype: str, vendor: str) -> float:
    """Bytes per stored value of ``dtype`` (module docstring) on a ``vendor`` GPU."""
    if dtype in FORMAT_BITS:
        return FORMAT_BITS[dtype] / 8
    if dtype == "fp4":
        return FP4_BITS_PER_VALUE_BY_VENDOR[vendor] / 8
    return PLAIN_BYTES[dtype]


@dataclass(frozen=True, slots=True)
class ComponentDtypes:
    """The storage dtype of each weight component; ``drafter`` None = the method's default
    (target components for MTP/DSpark, bf16 for an EAGLE-3 head)."""

    attention: str
    dense_mlp: str
    shared_experts: str
    routed_experts: str
    embeddings: str
    drafter: str | None = None
    recipe: str | None = None

    def compute(self, component: str) -> str:
        """The compute dtype of a component (an explicit FP4 format computes as fp4)."""
        return base_dtype(getattr(self, component))

    def bytes_per_value(self, component: str, vendor: str) -> float:
        return stored_bytes(getattr(self, component), vendor)

    def drafter_dtype(self, method: str, component: str = "attention") -> str:
        """The dtype a drafter weight of the target's ``component`` kind is stored in."""
        if self.drafter is not None:
            return self.drafter
        return EAGLE3_HEAD_DTYPE if method == "eagle3" else getattr(self, component)

    def to_json(self) -> dict[str, str | None]:
        return {name: getattr(self, name) for name in (*WEIGHT_COMPONENTS, "drafter", "recipe")}


def component_dtypes(card: ModelCard, weight_dtype: str | None = None,
                     expert_dtype: str | None = None) -> ComponentDtypes:
    """Resolve the precision levers over the card's recipe and native dtypes."""
    spec = parse_weight_spec(weight_dtype)
    native = card.native_dtypes
    values = {"attention": native.weight.value, "dense_mlp": native.weight.value,
              "shared_experts": native.weight.value, "routed_experts": native.expert.value,
              "embeddings": native.embedding.value, "drafter": None}
    if spec.recipe:
        recipe = card.recipe(spec.recipe)
        if recipe is None:
            raise InputError(LEVER, f"{card.name} lists no recipe '{spec.recipe}'",
                             accepted_list(f"recipe:{name}" for name in card.recipe_names))
        values.update({name: getattr(recipe, name) for name in values if getattr(recipe, name) is not None})
    for name in ("attention", "dense_mlp", "shared_experts", "embeddings", "drafter"):
        own = spec.component(name)
        if own is not None:
            values[name] = own
    if expert_dtype is not None:
        values["routed_experts"] = expert_dtype
    values["routed_experts"] = stored_expert_dtype(values["routed_experts"], native.expert_format)
    return ComponentDtypes(**values, recipe=spec.recipe)


def config_dtypes(card: ModelCard, config: Configuration) -> ComponentDtypes:
    return component_dtypes(card, config.weight_dtype, config.expert_dtype)
