"""Which anchor calibrates a target, how the target differs from it, and what the target
takes from it (METHOD §2, §4).

Pure functions on anchors, signatures and configurations; `predictor.anchors.store`
applies them.

- An anchor of another GPU type or engine is refused outright (never selected). Any anchor
  of the same model, GPU and engine calibrates the step model; the physics carries it to
  the target's layout, batch, context, precision and pool.
- **Recipe.** A precision or backend lever the user left unset is not a mismatch: it
  resolves to what the anchor ran (the measured stack's recipe), so the plain
  configuration of a measured stack is anchored by it (`recipe`). Set levers must match.
- **Preference**: fewest set levers that differ, then the nearest layout (TP, EP, attention
  DP, PP in log2 steps), then fewest unset levers where the anchor departs from the
  checkpoint's native dtypes, the batch and context nearest the measured ones, the same
  build, the newest harvest, the id.
- **Transfer kinds** say how the target differs from the chosen anchor: `precision` (a
  kernel set the anchor did not run), `split` (disaggregated pools from a colocated
  anchor; not the reverse, which no protocol measures: a colocated layout priced from an
  anchor measured in split pools carries that anchor's `split-pool` flag), `width`
  (another TP/EP/attention-DP/PP), `length` (a decode context outside 1.5x of the
  measured ones), `load` (a batch above the measured ones, by more than 1.25x),
  `load-down` (below them), else `in-ladder`; `predictor.anchors.anchoring` adds
  `harness` (a benchmark's anchor answering the user's own question). Each kind has a
  measured error (`predictor.uncertainty`).
"""

from __future__ import annotations

import math

from levers.configuration import Configuration
from levers.precision import DTYPE_BITS
from predictor.anchors.anchor import SPLIT_POOL, Anchor, Signature
from predictor.cards.model_card import ModelCard

WILDCARD_BACKEND = "auto"
WILDCARD_BUILD = "unknown"
CONTEXT_BAND = 1.5             # a context more than 1.5x from every measured one is a length transfer
BATCH_BAND = 1.25              # a batch beyond 1.25x of the measured range is a load transfer

# Levers a user may leave unset (None), and the signature field each resolves.
RECIPE_LEVERS = ("weight_dtype", "activation_dtype", "expert_dtype", "kv_cache_dtype", "attention_backend",
                 "moe_backend")
# Kernel-set fields always set on a configuration.
SET_KERNEL_FIELDS = ("graph_capture", "spec_method", "dcp")

IN_LADDER, WIDTH, LENGTH, LOAD, SPLIT, PRECISION, CROSS_MODEL, NONE = (
    "in-ladder", "width", "length", "load", "split", "precision", "cross-model", "none")
# A public benchmark's anchor answering a question about the user's own deployment, with
# its engine's front-end host time instead of its harness's (`predictor.step.anchored.
# with_engine_host`): moves TTFT only, measured by `predictor.corpus.cross_harness`.
HARNESS = "harness"
# A batch below the anchor's measured ones (a ladder read under load asked about a few
# clients): measured apart from `load` (the way up) by the `load-down` protocol, whose
# errors are larger (AIConfigurator TPOT 11.7% against 8.0%).
LOAD_DOWN = "load-down"
TRANSFER_KINDS = (IN_LADDER, WIDTH, LENGTH, LOAD, LOAD_DOWN, SPLIT, PRECISION, CROSS_MODEL, NONE, HARNESS)


def is_foreign(anchor: Anchor, accelerator: str, engine: str) -> bool:
    """Another GPU type or engine: refused outright (METHOD §4)."""
    sig = anchor.signature
    return sig.accelerator.lower() != accelerator.lower() or sig.engine.lower() != str(engine).lower()


def _anchor_value(sig: Signature, lever: str) -> str | None:
    value = getattr(sig, lever)
    return None if value in (None, WILDCARD_BACKEND) else str(value).lower()


def _native(card: ModelCard, lever: str) -> str | None:
    native = card.native_dtypes
    return {"weight_dtype": native.weight.value, "expert_dtype": native.expert.value if card.is_moe else None,
            "kv_cache_dtype": native.kv_cache.value}.get(lever)


def set_mismatches(sig: Signature, layout: Configuration) -> list[str]:
    """Levers the target sets that the anchor ran differently ("lever anchor != target")."""
    found = []
    for lever in RECIPE_LEVERS:
        wanted, ran = getattr(layout, lever), _anchor_value(sig, lever)
        if wanted is not None and ran is not None and str(wanted).lower() != ran:
            found.append(f"{lever} {ran} != {wanted}")
    for name in SET_KERNEL_FIELDS:
        if str(getattr(sig, name)).lower() != str(getattr(layout, name)).lower():
            found.append(f"{name} {getattr(sig, name)} != {getattr(layout, name)}")
    return found


def native_departures(sig: Signature, layout: Configuration, card: ModelCard) -> int:
    """Unset levers where the anchor ran something other than the checkpoint's dtype."""
    count = 0
    for lever in RECIPE_LEVERS:
        native, ran = _native(card, lever), _anchor_value(sig, lever)
        if getattr(layout, lever) is None and native is not None and ran is not None and ran != native:
            count += 1
    return count


def native_bits(sig: Signature, layout: Configuration, card: ModelCard) -> float:
    """How far the anchor's precisions sit from the checkpoint's over the unset levers, in
    octaves of width (fp8 on a BF16 checkpoint 1, fp4 2): a load-blind choice between
    anchors that both depart prefers the nearer checkpoint (`match_rank`)."""
    far = 0.0
    for lever in RECIPE_LEVERS:
        native, ran = _native(card, lever), _anchor_value(sig, lever)
        if getattr(layout, lever) is None and native in DTYPE_BITS and ran in DTYPE_BITS:
            far += abs(math.log2(DTYPE_BITS[native] / DTYPE_BITS[ran]))
    return far


def recipe(sig: Signature, config: Configuration) -> dict[str, str]:
    """What the unset levers take from the anchor (module docstring: Recipe)."""
    taken = {}
    for lever in RECIPE_LEVERS:
        ran = _anchor_value(sig, lever)
        if getattr(config, lever) is None and ran is not None:
            taken[lever] = ran
    return taken


def layout_of(sig: Signature) -> tuple[int, int, int, int]:
    return (sig.tp, sig.ep, sig.attention_dp, sig.pp)


def same_widths(sig: Signature, layout: Configuration) -> bool:
    """Whether ``layout`` has the anchor's widths (TP, EP, attention DP, PP and DCP)."""
    return (layout.tp, layout.ep, layout.attention_dp, layout.pp, layout.dcp) == (*layout_of(sig), sig.dcp)


def layout_distance(sig: Signature, layout: Configuration) -> float:
    pairs = zip(layout_of(sig), (layout.tp, layout.ep, layout.attention_dp, layout.pp))
    return sum(abs(math.log2(max(a, 1) / max(b, 1))) for a, b in pairs)


def measured_batches(anchor: Anchor) -> tuple[float, float]:
    """The measured decode batches per forward (per micro-batch of the anchor's PP)."""
    stages = max(1, anchor.signature.pp)
    batches = [p.batch for p in anchor.decode_points] or list(anchor.decode_sweep.batch_sizes)
    return min(batches) / stages, max(batches) / stages


def measured_contexts(anchor: Anchor) -> tuple[float, float]:
    sweep = anchor.decode_sweep
    contexts = [p.context_tokens for p in anchor.decode_points] or [sweep.prompt_tokens]
    if sweep.second_prompt_tokens:
        contexts.append(sweep.second_prompt_tokens)
    return min(contexts), max(contexts)


def _band_distance(value: float, low: float, high: float) -> float:
    if low <= value <= high:
        return 0.0
    return min(abs(math.log2(max(value, 1e-9) / low)), abs(math.log2(max(value, 1e-9) / high)))


def match_rank(anchor: Anchor, layout: Configuration, card: ModelCard, batch: int | None, context: float | None,
               engine_version: str) -> tuple:
    """Preference of anchors for a target (module docstring), lower first; ``batch`` None:
    blind to the load (`AnchorStore.select`'s ``load_blind``), the nearer checkpoint first."""
    sig = anchor.signature
    low, high = measured_batches(anchor)
    ctx_low, ctx_high = measured_contexts(anchor)
    context_gap = 0.0 if context is None else _band_distance(context, ctx_low, ctx_high)
    load = native_bits(sig, layout, card) if batch is None else _band_distance(batch, low, high)
    return (len(set_mismatches(sig, layout)), layout_distance(sig, layout), native_departures(sig, layout, card),
            load, context_gap,
            sig.engine_version.lower() != engine_version.lower() and WILDCARD_BUILD not in (
                sig.engine_version.lower(), engine_version.lower()))


def transfer_kinds(anchor: Anchor, layout: Configuration, batch: int, context: float | None,
                   disaggregated: bool) -> tuple[str, ...]:
    """How the target differs from the anchor (module docstring), `in-ladder` if not at all."""
    sig, kinds = anchor.signature, []
    if set_mismatches(sig, layout):
        kinds.append(PRECISION)
    if disaggregated and SPLIT_POOL not in anchor.flags:
        kinds.append(SPLIT)
    if layout_of(sig) != (layout.tp, layout.ep, layout.attention_dp, layout.pp):
        kinds.append(WIDTH)
    ctx_low, ctx_high = measured_contexts(anchor)
    if context is not None and not ctx_low / CONTEXT_BAND <= context <= ctx_high * CONTEXT_BAND:
        kinds.append(LENGTH)
    low, high = measured_batches(anchor)
    if batch < low / BATCH_BAND:
        kinds.append(LOAD_DOWN)
    elif batch > high * BATCH_BAND:
        kinds.append(LOAD)
    return tuple(kinds) or (IN_LADDER,)


def anchor_flags(anchor: Anchor, layout: Configuration, kinds: tuple[str, ...]) -> tuple[str, ...]:
    """Flags a selection carries (METHOD §4, PRODUCT.md §6): never hidden."""
    sig = anchor.signature
    flags = list(anchor.flags)
    if abs(math.log2(max(layout.tp, 1) / sig.tp)) > 1:
        flags.append("extrapolated-width")
    if LOAD in kinds or LOAD_DOWN in kinds:
        flags.append("batch-outside-sweep")
    if LENGTH in kinds:
        flags.append("context-outside-anchor")
    if PRECISION in kinds:
        flags.append("kernel-set-transfer: " + "; ".join(set_mismatches(sig, layout)))
    if anchor.packed_probe is not None and anchor.packed_probe.serialised:
        flags.append("serialised-probe")
    if not anchor.provenance.real_weights:
        flags.append("random-weights")
    if not anchor.provenance.prefix_caching_off:
        flags.append("prefix-caching-on")
    return tuple(dict.fromkeys(flags))
