"""Does an anchor cover a target, and which anchor is nearest (METHOD §2, §4)?

Pure functions on anchors and signatures; `predictor.anchors.store` applies them.

Matching (METHOD §2, §4; documented choices):
- an anchor of another GPU type or engine is refused: never selected, not even as the
  nearest rank-only anchor;
- kernel set: every anchor-defining field of `Signature.kernel_set()` must match, with
  three wildcards for what a signature cannot know: engine build `"unknown"` (either
  side) matches any build; backend `"auto"` (either side: the engine default, or not
  recorded) matches any backend; `expert_dtype None` (dense model) matches any;
- coverage: same kernel set; anchor TP equal to the target's or narrower (narrower only
  with a full batch sweep); anchor EP equal or narrower (a wider EP is restored by
  §3.5, a narrower one is not); the target's decode batch per forward (per replica,
  per pipeline micro-batch) within `[min_batch / 4, max_batch * 4]` of the sweep (the
  sweep's batches also per micro-batch of the anchor's own PP width). PP
  stages, replicas, disaggregated pools and the host KV tier never break coverage;
- preference: exact TP, then the nearest narrower; then the batch inside the sweep,
  then the same attention DP, the nearest EP, the same build, the newest harvest, the id.
  An attention-DP width other than the anchor's is covered but flagged
  `attention-dp-mismatch`: no transfer law of METHOD §3 carries it.
"""

from __future__ import annotations

import math

from predictor.anchors.anchor import Anchor, Signature

CONCURRENCY_REACH = 4          # METHOD §4: measured within 4x of the target's concurrency
WILDCARD_BACKEND = "auto"
WILDCARD_BUILD = "unknown"


def is_foreign(anchor: Anchor, accelerator: str, engine: str) -> bool:
    """Another GPU type or engine: refused outright (METHOD §4)."""
    sig = anchor.signature
    return sig.accelerator.lower() != accelerator.lower() or sig.engine.lower() != str(engine).lower()


# Values that match anything on either side (module docstring).
_KERNEL_FIELDS: tuple[tuple[str, tuple[object, ...]], ...] = (
    ("engine_version", (WILDCARD_BUILD,)), ("weight_dtype", ()), ("activation_dtype", ()),
    ("expert_dtype", (None,)), ("kv_cache_dtype", ()), ("attention_backend", (WILDCARD_BACKEND,)),
    ("moe_backend", (WILDCARD_BACKEND,)), ("graph_capture", ()), ("spec_method", ()), ("dcp", ()),
)


def _field_matches(a: object, b: object, wildcards: tuple[object, ...]) -> bool:
    if a in wildcards or b in wildcards:
        return True
    return str(a).lower() == str(b).lower()


def kernel_mismatches(anchor_sig: Signature, target_sig: Signature) -> list[str]:
    """Anchor-defining fields that differ, as "field anchor != target" (module
    docstring: wildcards)."""
    reasons = []
    for name, wildcards in _KERNEL_FIELDS:
        a, t = getattr(anchor_sig, name), getattr(target_sig, name)
        if not _field_matches(a, t, wildcards):
            reasons.append(f"{name} {a} != {t}")
    return reasons


def sweep_range(anchor: Anchor) -> tuple[float, float]:
    """The measured decode batches per forward: the sweep's replica batches over the
    anchor's PP width (its micro-batches, METHOD §3.6)."""
    batches, stages = anchor.decode_sweep.batch_sizes, max(1, anchor.signature.pp)
    return batches[0] / stages, batches[-1] / stages


def sweep_reach(anchor: Anchor) -> tuple[float, float]:
    """Target decode batches per forward an anchor covers: `[min / 4, max * 4]` of
    `sweep_range` (METHOD §4: measured within 4x of the target's concurrency)."""
    low, high = sweep_range(anchor)
    return low / CONCURRENCY_REACH, high * CONCURRENCY_REACH


def coverage_gaps(anchor: Anchor, target: Signature, batch: int) -> list[str]:
    """Why `anchor` does not cover the target (empty: it covers; METHOD §4)."""
    sig = anchor.signature
    gaps = kernel_mismatches(sig, target)
    if sig.tp > target.tp:
        gaps.append(f"anchor TP{sig.tp} is wider than the target's TP{target.tp}")
    elif sig.tp < target.tp and not anchor.decode_sweep.is_full_sweep:
        gaps.append(f"narrower anchor TP{sig.tp} is not a full batch sweep")
    if sig.ep > target.ep:
        gaps.append(f"anchor EP{sig.ep} is wider than the target's EP{target.ep}")
    low, high = sweep_reach(anchor)
    if not low <= batch <= high:
        first, last = sweep_range(anchor)
        gaps.append(f"target batch {batch} is not within 4x of the sweep ({first:g}..{last:g})")
    return gaps


def anchor_flags(anchor: Anchor, target: Signature, batch: int) -> tuple[str, ...]:
    """Flags a selection carries (METHOD §4, PRODUCT.md §6): never hidden."""
    sig = anchor.signature
    flags = list(anchor.flags)
    if abs(math.log2(target.tp / sig.tp)) > 1:
        flags.append("extrapolated-width")
    if _batch_outside(anchor, batch):
        flags.append("batch-outside-sweep")
    if anchor.packed_probe is not None and anchor.packed_probe.serialised:
        flags.append("serialised-probe")
    if sig.spec_method.lower() != target.spec_method.lower():
        flags.append("spec-mismatch")
    if sig.attention_dp != target.attention_dp:
        flags.append("attention-dp-mismatch")   # no transfer law carries attention DP
    if not anchor.provenance.real_weights:
        flags.append("random-weights")
    if not anchor.provenance.prefix_caching_off:
        flags.append("prefix-caching-on")
    return tuple(dict.fromkeys(flags))


def _log_distance(a: float, b: float) -> float:
    return abs(math.log2(max(a, 1e-9) / max(b, 1e-9)))


def _batch_outside(anchor: Anchor, batch: int) -> bool:
    low, high = sweep_range(anchor)
    return not low <= batch <= high


def cover_rank(anchor: Anchor, target: Signature, batch: int) -> tuple:
    sig = anchor.signature
    return (sig.tp != target.tp, target.tp - sig.tp, _batch_outside(anchor, batch),
            sig.attention_dp != target.attention_dp, _log_distance(sig.ep, target.ep),
            sig.engine_version.lower() != target.engine_version.lower())


def near_rank(anchor: Anchor, target: Signature, batch: int, gaps: list[str]) -> tuple:
    sig = anchor.signature
    low, high = sweep_range(anchor)
    batch_gap = 0.0 if low <= batch <= high else min(_log_distance(batch, low), _log_distance(batch, high))
    return (len(kernel_mismatches(sig, target)), _log_distance(sig.tp, target.tp), sig.tp > target.tp,
            batch_gap, _log_distance(sig.ep, target.ep), len(gaps))


