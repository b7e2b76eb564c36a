"""What `inferasim anchors check` reports (METHOD §4): is each anchor usable, for what, and
what must be refused or flagged.

Per anchor: `refused` when nothing can use it (unknown GPU type, engine or model, or a
foreign GPU/engine when a target cluster/engine is given); `warning` when it is usable
with flags (random weights, prefix caching on, a serialised packing probe, a partial
sweep, an id not derived from its signature); else `ok`. Each carries a one-line
coverage summary: the targets it covers by the rules of `predictor.anchors.store`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from levers.catalog import ENGINES
from levers.errors import InputError
from predictor.anchors.anchor import Anchor
from predictor.anchors.coverage import sweep_reach
from predictor.anchors.store import AnchorStore, anchor_id_for, load_anchor_file
from predictor.cards.registry import load_card
from predictor.hardware import load_gpu

OK, WARNING, REFUSED, INVALID = "ok", "warning", "refused", "invalid"
SCHEMA_VERSION = 1
FOREIGN = "foreign:"


@dataclass(frozen=True)
class AnchorReport:
    anchor_id: str
    where: str            # "embedded" | "user" | a file path
    status: str           # ok | warning | refused | invalid
    reasons: tuple[str, ...]
    coverage: str

    def to_json(self) -> dict:
        return {"id": self.anchor_id, "where": self.where, "status": self.status,
                "reasons": list(self.reasons), "coverage": self.coverage}


def coverage_summary(anchor: Anchor) -> str:
    """The targets an anchor covers, in one line (METHOD §4)."""
    sig, sweep = anchor.signature, anchor.decode_sweep
    widths = f"TP>={sig.tp}" if sweep.is_full_sweep else f"TP={sig.tp} only (partial sweep)"
    low, high = sweep_reach(anchor)
    context = f"prompt {sweep.prompt_tokens}"
    if sweep.second_prompt_tokens:
        context += f" + {sweep.second_prompt_tokens} (context slope)"
    per = f" per PP{sig.pp} micro-batch" if sig.pp > 1 else ""
    return (f"{sig.model} on {sig.accelerator}/{sig.engine}: {widths}, EP>={sig.ep}, "
            f"decode batch{per} {math.ceil(low)}..{math.floor(high)}, {context}")


def _known(loader, name: str) -> bool:
    try:
        loader(name)
    except InputError:
        return False
    return True


def _refusals(anchor: Anchor, cluster_gpu: str | None, engine: str | None) -> list[str]:
    sig = anchor.signature
    reasons = []
    if anchor.schema_version != SCHEMA_VERSION:
        reasons.append(f"unknown schema version {anchor.schema_version} (this build reads {SCHEMA_VERSION})")
    if not _known(load_gpu, sig.accelerator):
        reasons.append(f"unknown GPU '{sig.accelerator}'")
    if sig.engine.lower() not in ENGINES:
        reasons.append(f"unknown engine '{sig.engine}'")
    if not _known(load_card, sig.model):
        reasons.append(f"unknown model '{sig.model}'")
    if cluster_gpu and sig.accelerator.lower() != cluster_gpu.lower():
        reasons.append(f"foreign: measured on {sig.accelerator}, target GPU {cluster_gpu}")
    if engine and sig.engine.lower() != engine.lower():
        reasons.append(f"foreign: measured with {sig.engine}, target engine {engine}")
    return reasons


def _warnings(anchor: Anchor) -> list[str]:
    sig, sweep, provenance = anchor.signature, anchor.decode_sweep, anchor.provenance
    warnings = [f"flag: {flag}" for flag in anchor.flags]
    if not provenance.real_weights:
        warnings.append("random weights (MoE tokens spread evenly: too fast)")
    if not provenance.prefix_caching_off:
        warnings.append("prefix caching was on (the length sweep reuses its prefix)")
    if anchor.packed_probe is not None and anchor.packed_probe.serialised:
        warnings.append("packed-prefill probe measured serialisation")
    if not sweep.is_full_sweep:
        warnings.append("partial batch sweep: covers its own TP only")
    missing = sorted(set(sig.captured_sizes) - set(sweep.batch_sizes))
    if missing and sweep.is_full_sweep:
        warnings.append(f"marked full sweep but captured sizes {missing[:6]} were not measured")
    expected_id = anchor_id_for(sig)
    if anchor.id != expected_id:
        warnings.append(f"id is not derived from the signature (expected {expected_id})")
    return warnings


def check_anchor(anchor: Anchor, where: str, cluster_gpu: str | None = None,
                 engine: str | None = None) -> AnchorReport:
    refusals = _refusals(anchor, cluster_gpu, engine)
    if refusals:
        return AnchorReport(anchor.id, where, REFUSED, tuple(refusals), coverage_summary(anchor))
    warnings = _warnings(anchor)
    return AnchorReport(anchor.id, where, WARNING if warnings else OK, tuple(warnings), coverage_summary(anchor))


def check_anchors(files: list[str] | None = None, store: AnchorStore | None = None,
                  cluster_gpu: str | None = None, engine: str | None = None) -> list[AnchorReport]:
    """Reports for the given files, else for every stored anchor and every stored file
    that failed to load (`invalid`)."""
    if files:
        reports = []
        for path in files:
            try:
                anchor = load_anchor_file(path)
            except InputError as error:
                reports.append(AnchorReport(Path(path).stem, str(path), INVALID, (error.message,), ""))
                continue
            reports.append(check_anchor(anchor, str(path), cluster_gpu, engine))
        return reports
    store = store if store is not None else AnchorStore.default()
    reports = [check_anchor(item.anchor, item.where, cluster_gpu, engine) for item in store.entries()]
    reports += [AnchorReport(Path(path).stem, path, INVALID, (message,), "") for path, message in store.problems]
    return reports
