"""The `weight_dtype` lever's grammar: one dtype, a published recipe, per-component dtypes.

Real checkpoints do not ship one precision: Kimi-K3's NVFP4 checkpoint keeps routed
experts in NVFP4, attention projections in FP8 and shared experts in BF16 (PRODUCT.md §3
names the components). The lever keeps its name and its plain values (``bf16``, ``fp8``,
``fp4``: attention projections, dense MLP and shared experts, as before) and gains items
joined by ``+``:

- ``recipe:NAME``: a checkpoint the model card lists (``inferasim models``); every
  component, routed experts included, takes the recipe's dtype;
- ``COMPONENT:DTYPE`` for ``attention``, ``dense_mlp``, ``shared_experts``, ``embeddings``
  (input embedding and LM head) or ``drafter`` (the speculative drafter's own weights);
- a bare ``DTYPE``: attention projections, dense MLP and shared experts.

Later items override earlier ones and the recipe; ``expert_dtype`` overrides the recipe's
routed experts. DTYPE is ``bf16``, ``fp8``, ``fp4`` (the platform's FP4: NVFP4 on NVIDIA,
MXFP4 on AMD; routed experts at ``fp4`` on a checkpoint that ships them in MXFP4 are
that MXFP4, `predictor.cards.precision`), or an explicit FP4 format, ``nvfp4`` (4.5 bits
per value) or ``mxfp4`` (4.25). The canonical text is the recipe, then the bare dtype, then components in the
order above, so equal specs compare equal; a lone dtype stays the plain value it was.
This layer checks syntax only; whether a recipe exists is the card's question
(:mod:`levers.legality`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from levers.errors import InputError, accepted_list
from levers.inputs import quote

LEVER = "weight_dtype"
BASE_DTYPES = ("bf16", "fp8", "fp4")
DTYPE_BITS = {"bf16": 16, "fp8": 8, "fp4": 4}   # a compute dtype's width
FP4_FORMATS = ("nvfp4", "mxfp4")
WEIGHT_DTYPES = BASE_DTYPES + FP4_FORMATS
COMPONENT_NAMES = ("attention", "dense_mlp", "shared_experts", "embeddings", "drafter")
COMPONENT_ALIASES = {
    "attention": "attention", "attn": "attention",
    "dense_mlp": "dense_mlp", "dense": "dense_mlp", "mlp": "dense_mlp",
    "shared_experts": "shared_experts", "shared": "shared_experts", "shared_expert": "shared_experts",
    "embeddings": "embeddings", "embedding": "embeddings", "lm_head": "embeddings",
    "drafter": "drafter", "draft": "drafter",
}
BASE_COMPONENTS = ("attention", "dense_mlp", "shared_experts")   # what a bare dtype covers
RECIPE_PREFIX = "recipe:"
_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,39}$")
ACCEPTED = (f"{accepted_list(BASE_DTYPES)} (attention projections, dense MLP, shared experts), "
            "or items joined by '+': recipe:NAME (a checkpoint the model card lists), COMPONENT:DTYPE "
            f"for {', '.join(COMPONENT_NAMES)}, or a bare DTYPE; DTYPE is one of {', '.join(WEIGHT_DTYPES)} "
            "(e.g. recipe:nvfp4, fp8+shared_experts:bf16)")


@dataclass(frozen=True, slots=True)
class WeightSpec:
    """A parsed `weight_dtype`: the recipe, the bare dtype and per-component dtypes."""

    recipe: str | None = None
    base: str | None = None
    components: tuple[tuple[str, str], ...] = ()   # (component, dtype) in COMPONENT_NAMES order

    def component(self, name: str) -> str | None:
        """This spec's own dtype for ``name`` (None: the recipe's or the checkpoint's)."""
        for component, dtype in self.components:
            if component == name:
                return dtype
        return self.base if name in BASE_COMPONENTS else None

    @property
    def text(self) -> str | None:
        """The canonical lever value (None for an empty spec)."""
        items = [RECIPE_PREFIX + self.recipe] if self.recipe else []
        items += [self.base] if self.base else []
        items += [f"{component}:{dtype}" for component, dtype in self.components]
        return "+".join(items) or None


def parse_weight_spec(raw: Any) -> WeightSpec:
    """The spec of a `weight_dtype` value (text or a JSON list of items); None -> empty."""
    if raw is None:
        return WeightSpec()
    items = [str(x) for x in raw] if isinstance(raw, (list, tuple)) else str(raw).split("+")
    recipe, base, components = None, None, {}
    for item in (i.strip().lower() for i in items):
        if not item:
            raise InputError(LEVER, f"{quote(raw)} has an empty item", ACCEPTED)
        if item.startswith(RECIPE_PREFIX):
            _once(recipe is None, "a recipe", raw)
            recipe = _recipe_name(item[len(RECIPE_PREFIX):], raw)
        elif ":" in item:
            name, _, dtype = item.partition(":")
            component = _component(name.strip(), raw)
            _once(component not in components, f"component {quote(component)}", raw)
            components[component] = _dtype(dtype.strip(), raw)
        else:
            _once(base is None, "a bare dtype", raw)
            base = _dtype(item, raw)
    ordered = tuple((name, components[name]) for name in COMPONENT_NAMES if name in components)
    return WeightSpec(recipe, base, ordered)


def _once(first: bool, what: str, raw: Any) -> None:
    """An item kind given twice is refused, as a lever given twice is (never last-wins)."""
    if not first:
        raise InputError(LEVER, f"{quote(raw)} gives {what} twice", f"each at most once; {ACCEPTED}")


def canonical_weight_dtype(raw: Any) -> str | None:
    """The canonical text of a `weight_dtype` value (errors name the lever)."""
    return parse_weight_spec(raw).text


def base_dtype(dtype: str) -> str:
    """The compute dtype of a storage precision: an explicit FP4 format computes as fp4."""
    return "fp4" if dtype in FP4_FORMATS else dtype


def stored_expert_dtype(dtype: str, expert_format: str | None) -> str:
    """The routed experts' storage: ``fp4`` on a checkpoint that ships them in MXFP4
    (`NativeDtypes.expert_format`) is that checkpoint's MXFP4 on every GPU (engines load
    its blocks as they are); anything else stays as asked."""
    return "mxfp4" if dtype == "fp4" and expert_format == "mxfp4" else dtype


def unset_activation(weight: str, native: bool, fp4_compute: bool = True) -> str | None:
    """The activations a GEMM over ``weight`` (a compute dtype) runs when the activation
    lever is unset, where the weights decide them (None: the lever's default decides).
    fp8 weights run W8A8: engines quantise activations per token on the fly (vLLM's and
    SGLang's fp8 linear and MoE methods, TensorRT-LLM's FP8 recipe). fp4 weights the
    checkpoint does not ship (``native`` False: a BF16 checkpoint quantised online, which
    vLLM runs as MXFP4 W4A4, or an NVFP4 requantization, whose kernels take NVFP4
    activations) run W4A4 on a GPU with FP4 tensor cores (``fp4_compute``; elsewhere
    weight-only, as `activation_dtype=fp4` is illegal there); a checkpoint's own 4-bit
    weights (gpt-oss's MXFP4, Kimi's INT4 on Marlin) run at the lever's default."""
    if weight == "fp8":
        return "fp8"
    if weight == "fp4" and not native and fp4_compute:
        return "fp4"
    return None


def gemm_activation(activation: str, weight: str) -> str:
    """The activations a GEMM over ``weight`` (a compute dtype) runs when ``activation``
    is asked: the asked ones, or the weights' own width where that is wider. No kernel
    takes activations narrower than its weights (W8A4, W16A8), so an engine keeps those
    layers at their weights' width (vLLM's per-layer `--quantization-config`, a
    checkpoint's excluded modules): fp4 activations over fp8 attention projections and
    fp4 experts run W8A8 attention and W4A4 experts (METHOD §3.2a)."""
    return weight if DTYPE_BITS[weight] > DTYPE_BITS[activation] else activation


def _recipe_name(name: str, raw: Any) -> str:
    if not _NAME.match(name):
        raise InputError(LEVER, f"{quote(raw)} names no valid recipe",
                         "recipe:NAME, NAME as the model card lists it (letters, digits, '.', '_', '-')")
    return name


def _component(name: str, raw: Any) -> str:
    found = COMPONENT_ALIASES.get(name)
    if found is None:
        raise InputError(LEVER, f"{quote(raw)}: unknown component {quote(name)}",
                         f"components {accepted_list(COMPONENT_NAMES)} (routed experts: the expert_dtype lever)")
    return found


def _dtype(dtype: str, raw: Any) -> str:
    if dtype not in WEIGHT_DTYPES:
        raise InputError(LEVER, f"{quote(raw)}: unknown precision {quote(dtype)}", ACCEPTED)
    return dtype
