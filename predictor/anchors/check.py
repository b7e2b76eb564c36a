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
from levers.configuration import Configuration
from levers.errors import InputError
from predictor.anchors.anchor import Anchor
from predictor.anchors.coverage import measured_batches, measured_contexts
from predictor.anchors.store import AnchorStore, anchor_id_for, load_anchor_file
from predictor.cards.registry import load_card
from predictor.hardware import load_gpu
from predictor.step.anchored import anchor_cluster

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
    """What an anchor measured, in one line (METHOD §4): the layout, batches and contexts
    it calibrates in-ladder; other layouts, loads and lengths it calibrates by transfer."""
    sig = anchor.signature
    low, high = measured_batches(anchor)
    ctx_low, ctx_high = measured_contexts(anchor)
    per = f" per PP{sig.pp} micro-batch" if sig.pp > 1 else ""
    contexts = f"context {ctx_low}" if ctx_low == ctx_high else f"contexts {ctx_low}..{ctx_high}"
    return (f"{sig.model} on {sig.accelerator}/{sig.engine}: TP{sig.tp}/EP{sig.ep}/DP{sig.attention_dp}"
            f"{f'/PP{sig.pp}' if sig.pp > 1 else ''}, decode batch{per} {math.ceil(low)}..{math.floor(high)}, "
            f"{contexts}")


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


@dataclass(frozen=True)
class PlainCoverage:
    """How many anchors calibrate their own plain configuration in-ladder (issue 12: a user
    who names only the model, cluster, engine and widths of a measured stack is anchored by
    it): the misses say which anchor was chosen instead, or which kinds remained."""

    total: int
    anchored: int
    misses: tuple[tuple[str, str], ...]

    def to_json(self) -> dict:
        return {"total": self.total, "anchored": self.anchored,
                "misses": [{"id": i, "why": why} for i, why in self.misses]}


def plain_configuration(anchor: Anchor) -> Configuration:
    """What a user types for the anchor's stack: its widths, the weight and expert precision
    that name the checkpoint (a corpus chart's "fp4" / "fp8"), its speculation, a load it
    measured; every other lever (activation and KV dtypes, backends) left unset."""
    sig = anchor.signature
    low, high = measured_batches(anchor)
    batch = max(1, round(math.sqrt(low * high))) * max(1, sig.pp)
    return Configuration(tp=sig.tp, ep=sig.ep, attention_dp=sig.attention_dp, pp=sig.pp, dcp=sig.dcp,
                         weight_dtype=sig.weight_dtype, expert_dtype=sig.expert_dtype,
                         spec_method=sig.spec_method, spec_depth=sig.spec_depth, graph_capture=sig.graph_capture,
                         concurrency=batch, max_running_requests=max(256, batch))


def plain_coverage(store: AnchorStore) -> PlainCoverage:
    """`PlainCoverage` of every anchor of ``store`` (speculation counts as part of the plain
    stack: a measured MTP stack is named with its method)."""
    misses, anchored, total = [], 0, 0
    for anchor in store.all():
        sig = anchor.signature
        if not (_known(load_gpu, sig.accelerator) and _known(load_card, sig.model)):
            continue
        total += 1
        card = load_card(sig.model)
        cluster = anchor_cluster(anchor, load_gpu(sig.accelerator))
        config = plain_configuration(anchor)
        context = float(measured_contexts(anchor)[0])
        selection = store.select(card, cluster, sig.engine, config, config.concurrency, context_tokens=context)
        if selection.anchor is not None and selection.anchor.id == anchor.id and selection.covered:
            anchored += 1
        elif selection.anchor is None or selection.anchor.id != anchor.id:
            misses.append((anchor.id, f"chose {selection.anchor.id if selection.anchor else 'no anchor'}"))
        else:
            misses.append((anchor.id, "transfer: " + ", ".join(selection.kinds)))
    return PlainCoverage(total, anchored, tuple(misses))
