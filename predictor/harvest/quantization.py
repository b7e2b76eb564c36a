"""vLLM's online quantization, from the three precision levers (METHOD §2: precision is
anchor-defining, so the anchor must be measured with the kernels the target runs).

vLLM quantizes a BF16 checkpoint while it loads (docs/features/quantization/online.md):
`--quantization online` with `--quantization-config JSON` sets each layer kind apart,
`{"linear": SHORTHAND, "moe": {...}}` (checked against the vLLM 0.33.0 wheel,
vllm/config/quantization.py and quantization/online/base.py): a slot quantized online
names the method's shorthand (`fp8_per_block`: W8A8 with dynamic fp8 activations,
`mxfp4`: W4A4), whose activations vLLM picks and refuses to override; an activation-only
override of a checkpoint's quantized slot is `{"weight": null, "activation": K}` with K
from `QUANT_KEY_NAMES` (`fp8_per_block_dynamic`, `mxfp8`, `mxfp4`); `null` leaves a slot as
the checkpoint has it.
For a checkpoint already quantized in part (Kimi-K3's fp4 experts) only the config is
passed: the checkpoint's method stays, its other slots are overridden (vLLM documents
this for activations of MXFP4 MoE checkpoints).

Our levers map as: `weight_dtype` -> the linear (attention, dense MLP, shared expert)
weights, `expert_dtype` -> the MoE weights, `activation_dtype` -> the activations of
both (unset: W8A8 for fp8 weights, W4A4 for fp4 weights quantized online on a GPU with
FP4 tensor cores, else bf16;
`levers.precision.unset_activation`), where the slot's weights
are no wider: a slot whose weights are wider keeps their width, as the step model prices
it (`levers.precision.gemm_activation`: no GEMM runs W16A8 or W8A4), so fp8 activations
on Kimi-K3 leave its BF16 linear layers alone and run its fp4 experts W4A8. fp4 is MXFP4,
the format vLLM quantizes online on both AMD (MI355X) and NVIDIA Blackwell. Refused: a new
weight precision for a slot the checkpoint already holds quantized (online quantization
starts from BF16; serve a checkpoint with the asked precision instead, `--model-path`), and
fp8 activations for fp4 experts on a GPU without FP4 tensor cores (vLLM gates its MXFP4 x
MXFP8 MoE backends to Blackwell; on Hopper only Marlin's W4A16 runs them).
"""

from __future__ import annotations

import json

from levers.errors import InputError
from levers.precision import DTYPE_BITS, gemm_activation, unset_activation

ONLINE_SHORTHANDS = {"fp8": "fp8_per_block", "fp4": "mxfp4"}   # vLLM's online methods, per weight dtype
ONLINE_ACTIVATION = {"fp8": "fp8", "fp4": "fp4"}     # ... and the activations each runs (W8A8, W4A4)
ACTIVATION_KEYS = {"bf16": None, "fp8": "fp8_per_block_dynamic", "fp4": "mxfp4"}
FP4_MOE_FP8_ACTIVATION = "mxfp8"          # vLLM's W4A8 MoE path (MXFP4 weights, MXFP8 activations)


def _effective_activation(weight: str, activation: str | None, native_weight: str | None,
                          fp4_compute: bool) -> str:
    """The asked activations, else what the step model prices with the lever unset
    (`levers.precision.unset_activation`: W8A8 for fp8 weights, W4A4 for fp4 weights
    quantized online on a GPU with FP4 tensor cores, else the default)."""
    return activation or unset_activation(weight, weight == native_weight, fp4_compute) or "bf16"


def _slot(kind: str, weight: str, native_weight: str | None, activation: str,
          native_activation: str, fp4_compute: bool = True) -> dict | str | None:
    """One layer kind's entry: an online method's shorthand (a new weight precision: vLLM
    0.33 picks its activations itself and refuses an override, so the asked activations must
    be the method's), an activation-only override of a checkpoint's quantized slot, or None
    when it stays as the checkpoint has it."""
    lever = f"--config {'weight' if kind == 'linear' else 'expert'}_dtype"
    activation = gemm_activation(activation, weight)
    if weight == native_weight and activation == native_activation:
        return None
    if native_weight not in (None, "bf16") and weight != native_weight:
        raise InputError(lever, f"{weight} {kind} weights: the checkpoint holds them in {native_weight} and vLLM "
                         "quantizes only BF16 weights online",
                         f"{native_weight}, or --model-path to a checkpoint that holds {weight}")
    if weight != native_weight:
        runs = ONLINE_ACTIVATION[weight]
        if activation != runs:
            checkpoint = (f"--model-path to a checkpoint that holds W{weight[2:] if weight != 'bf16' else 16}"
                          f"A{activation[2:] if activation != 'bf16' else 16} weights")
            way_out = ("a GPU with FP4 tensor cores" if runs == "fp4" and not fp4_compute
                       else f"activation_dtype={runs}, or {checkpoint}")
            raise InputError(lever, f"{weight} {kind} weights with {activation} activations: vLLM's online "
                             f"{ONLINE_SHORTHANDS[weight]} runs {runs} activations"
                             + ("" if fp4_compute or runs != "fp4" else ", which this GPU has no FP4 tensor cores for"),
                             way_out)
        return ONLINE_SHORTHANDS[weight]
    activation_key = ACTIVATION_KEYS[activation]
    if kind == "moe" and weight == "fp4" and activation == "fp8":
        if not fp4_compute:     # vLLM gates its MXFP4 x MXFP8 MoE backends to Blackwell (SM100/120)
            raise InputError("--config activation_dtype", "fp8 activations for fp4 experts (W4A8): vLLM runs MXFP4 "
                             "experts weight-only (Marlin, W4A16) on a GPU without FP4 tensor cores",
                             "activation_dtype=bf16 (the W4A16 it runs), or a GPU with FP4 tensor cores")
        activation_key = FP4_MOE_FP8_ACTIVATION
    return {"weight": None, "activation": activation_key}


def vllm_quantization_args(weight: str | None, expert: str | None, activation: str | None,
                           native: dict[str, str | None], fp4_compute: bool = True) -> list[str]:
    """`--quantization` / `--quantization-config` for the asked precisions (module
    docstring); empty when every slot is the checkpoint's own. A published recipe or
    per-component dtypes (`levers.precision`) are a checkpoint's layout, which vLLM loads
    rather than makes: they need the checkpoint (``--model-path``)."""
    if weight is not None and weight not in DTYPE_BITS:
        raise InputError("--config weight_dtype", f"weight_dtype={weight} is a checkpoint's layout; vLLM quantizes "
                         "a whole BF16 checkpoint online to one dtype, not into a recipe or per component",
                         "one dtype (bf16, fp8, fp4) for vLLM to quantize online")
    native_weight = str(native.get("weight_dtype") or "bf16")
    native_expert = native.get("expert_dtype")
    held = native.get("expert_format")
    if expert == "fp4" and native_expert == "fp4" and held not in (None, "mxfp4"):
        # Kimi-K2.5's INT4 experts: fp4 asks for their requantization (priced W4A4), not them
        raise InputError("--config expert_dtype", f"fp4 moe weights: the checkpoint holds them in {held} and vLLM "
                         "quantizes only BF16 weights online", f"expert_dtype unset (its {held}), or --model-path "
                         "to a checkpoint that holds fp4 experts")
    linear_weight = weight or native_weight
    linear_activation = _effective_activation(linear_weight, activation, native_weight, fp4_compute)
    config: dict[str, dict] = {}
    linear = _slot("linear", linear_weight, native_weight, linear_activation,
                   _effective_activation(native_weight, None, native_weight, fp4_compute), fp4_compute)
    if linear:
        config["linear"] = linear
    if native_expert is not None:
        moe_weight = expert or str(native_expert)
        moe_activation = _effective_activation(moe_weight, activation, str(native_expert), fp4_compute)
        moe = _slot("moe", moe_weight, str(native_expert), moe_activation,
                    _effective_activation(str(native_expert), None, str(native_expert), fp4_compute), fp4_compute)
        if moe:
            config["moe"] = moe
    if not config:
        return []
    args = []
    prequantized = native_weight != "bf16" or (native_expert not in (None, "bf16"))
    if not prequantized:
        args += ["--quantization", "online"]        # the per-slot config decides (vLLM's `online` name)
        for kind in ("linear", "moe"):
            if kind not in config and (kind == "linear" or native_expert is not None):
                config[kind] = {"weight": None, "activation": None}     # leave it unquantized
    return args + ["--quantization-config", json.dumps(config, sort_keys=True)]
