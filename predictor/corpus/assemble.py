"""Assemble anchors from the points of `predictor.corpus.anchors` (steps 1-5 and 7 of
its rule): signature, sweeps, host time, provenance with the source rows, and the
carried sweep of a layout seen in only one role. Layouts that are structurally illegal
for their model and GPU are not anchored; their rows fail with the reason.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter

from levers.catalog import Engine
from levers.legality import structural_reasons
from predictor.anchors.anchor import (DECODE_CARRIED, PREFILL_CARRIED, SPLIT_POOL, Anchor, DecodePoint, DecodeSweep,
                                      PrefillSweep, Provenance)
from predictor.anchors.store import anchor_id_for, signature_for
from predictor.cards.registry import load_card
from predictor.corpus.anchors import (
    CAPTURE_LADDER,
    RULE_VERSION,
    AnchorBuild,
    Group,
    GroupKey,
    decode_sweep,
    group_rows,
    layout_config,
    prefill_sweep,
)
from predictor.corpus.points import fill_points, simulate_marginal
from predictor.corpus.row import CorpusRow, RowFailure, cluster_for
from predictor.step.transfer import carry_decode_width

UNKNOWN_TIME = "unknown"


def layout_reasons(row: CorpusRow, key: GroupKey) -> list[str]:
    config = layout_config(row, key)
    cluster = cluster_for(row.gpu, config.total_gpus)
    return structural_reasons(config, Engine(row.engine), load_card(row.model), cluster)


def _rows_of(group: Group) -> list[CorpusRow]:
    return list(group.source_rows().values())


def _signature(group: Group):
    rows = _rows_of(group)
    row = rows[0]
    config = layout_config(row, group.key)
    version = Counter(r.engine_version for r in rows).most_common(1)[0][0]
    sig = signature_for(load_card(row.model), cluster_for(row.gpu, config.total_gpus), row.engine, config,
                        engine_version=version)
    return sig.model_copy(update={"captured_sizes": CAPTURE_LADDER})


def assemble(group: Group, decode: DecodeSweep, prefill: PrefillSweep, *, command_line: str) -> Anchor:
    rows = _rows_of(group)
    signature = _signature(group)
    used = sorted({i for ids in group.point_rows.values() for i in ids}
                  | {i for ids in group.prefill_rows.values() for i in ids}, key=_row_order)
    sources = sorted({r.source for r in rows})
    when = max((r.measured_at for r in rows if r.measured_at), default=UNKNOWN_TIME)
    versions = Counter(r.engine_version for r in rows)
    notes = (f"rule {RULE_VERSION} (predictor.corpus.anchors)",
             f"decode points (context, batch): {sorted(group.point_rows)}",
             "prefill marginal by prompt length: " + ", ".join(
                 f"{n}: {m:.1f} ms ({group.marginal_source.get(n, '?')})" for n, m in sorted(group.marginals.items())),
             "engine builds: " + ", ".join(f"{v} x{n}" for v, n in versions.most_common()))
    provenance = Provenance(source="+".join(sources), timestamp=when, real_weights=True, prefix_caching_off=True,
                            command_line=command_line, source_rows=tuple(used), notes=notes)
    points = tuple(DecodePoint(batch=b, context_tokens=ctx, step_ms=statistics.median(steps))
                   for (ctx, b), steps in sorted(group.decode_points.items()))
    roles = group.decode or group.prefill
    flags = [*group.flags, *([SPLIT_POOL] if roles and not any(r.colocated for r in roles) else [])]
    return Anchor(id=anchor_id_for(signature), signature=signature, decode_sweep=decode, prefill_sweep=prefill,
                  decode_points=points, host_time_ms=group.host_base_ms, host_us_per_prompt_token=group.host_per_token_us,
                  first_wave_stall_ms=group.first_wave_stall_ms,
                  first_wave_stall_per_client_ms=group.first_wave_stall_per_client_ms,
                  flags=tuple(dict.fromkeys(flags)), provenance=provenance)


def _row_order(row_id: str) -> tuple[str, int]:
    name, _, line = row_id.rpartition(":")
    return (name, int(line)) if line.isdigit() else (row_id, 0)


# --- step 7: a layout seen in one role ---------------------------------------------------------

def _distance(a: GroupKey, b: GroupKey) -> tuple:
    (tp, ep, dp, pp), (tp2, ep2, dp2, pp2) = a[1], b[1]
    return (abs(math.log2(tp / tp2)), tp2 > tp, abs(math.log2(ep / ep2)), dp != dp2, pp != pp2, b[1])


def _nearest(group: Group, others: list[Group]) -> Group | None:
    same = [g for g in others if g.key[0] == group.key[0] and g is not group]
    return min(same, key=lambda g: _distance(group.key, g.key)) if same else None


def carried_decode(sweep: DecodeSweep, from_tp: int, to_tp: int) -> DecodeSweep:
    """METHOD §3.1 Eq. 1 with the default rho."""
    fixed = min(sweep.itl_ms)
    rho = from_tp / to_tp
    carry = lambda values: tuple(carry_decode_width(v, fixed, rho) for v in values)  # noqa: E731
    return sweep.model_copy(update={"itl_ms": carry(sweep.itl_ms),
                                    "second_itl_ms": carry(sweep.second_itl_ms) if sweep.second_itl_ms else None})


def carried_prefill(sweep: PrefillSweep, from_tp: int, to_tp: int, fixed_ms: float) -> PrefillSweep:
    """METHOD §3.2: keep F, scale c1 and c2 by w / w'."""
    ratio = from_tp / to_tp
    c1, c2 = sweep.fit_c1_ms * ratio, sweep.fit_c2_ms * ratio
    values = tuple(fixed_ms + c1 * n + c2 * n * n for n in sweep.prompt_tokens)
    return PrefillSweep(prompt_tokens=sweep.prompt_tokens, ttft_ms=values, fit_f_ms=fixed_ms, fit_c1_ms=c1,
                        fit_c2_ms=c2)


# --- the whole build -------------------------------------------------------------------------

def build_anchors(rows: list[CorpusRow], *, command_line: str = "", groups: dict | None = None) -> AnchorBuild:
    """Rows -> anchors by the rule (closed form; `corpus_refine` adds step 6)."""
    failures: list[RowFailure] = []
    if groups is None:
        grouped, failures = group_rows(rows)
        groups = {}
        for key, group in grouped.items():
            members = _rows_of(group)
            reasons = layout_reasons(members[0], key)
            if reasons:
                tp, ep, dp, _ = key[1]
                failures += [RowFailure(r.id, f"layout TP{tp}/EP{ep}/DP{dp} cannot be anchored: {reasons[0]}")
                             for r in members]
                continue
            fill_points(group, simulate_marginal(group))
            groups[key] = group
    return _assemble_all(groups, failures, command_line)


def _assemble_all(groups: dict[GroupKey, Group], failures: list[RowFailure], command_line: str) -> AnchorBuild:
    decodes = {k: decode_sweep(g.decode_points) for k, g in groups.items() if g.decode_points}
    prefills = {k: prefill_sweep(g.prefill_points(), g.fixed_ms) for k, g in groups.items() if g.marginals}
    anchors, by_id = [], {}
    complete = [g for k, g in groups.items() if k in decodes and k in prefills]
    for key, group in groups.items():
        decode, prefill = decodes.get(key), prefills.get(key)
        if decode is None:
            donor = _nearest(group, [g for g in groups.values() if g.key in decodes])
            if donor is None:
                failures += [RowFailure(r.id, "no decode data for its prefill layout in this stack")
                             for r in _rows_of(group)]
                continue
            decode = carried_decode(decodes[donor.key], donor.key[1][0], key[1][0])
            group.flags.append(DECODE_CARRIED)
            prefill = prefill_sweep(group.prefill_points(), group.fixed_ms)
        if prefill is None:
            donor = _nearest(group, [g for g in groups.values() if g.key in prefills]) or (complete[0] if complete else None)
            if donor is None:
                failures += [RowFailure(r.id, "no prefill data in this stack") for r in _rows_of(group)]
                continue
            prefill = carried_prefill(prefills[donor.key], donor.key[1][0], key[1][0], group.fixed_ms)
            group.flags.append(PREFILL_CARRIED)
        anchor = assemble(group, decode, prefill, command_line=command_line)
        anchors.append(anchor)
        by_id[anchor.id] = group
    return AnchorBuild(tuple(anchors), tuple(failures), by_id)


def rebuild(build: AnchorBuild, command_line: str = "") -> AnchorBuild:
    """Re-assemble after the points of the groups changed (step 6)."""
    groups = {g.key: g for g in build.groups.values()}
    for group in groups.values():
        group.flags = [f for f in group.flags if f not in (DECODE_CARRIED, PREFILL_CARRIED)]
    return _assemble_all(groups, list(build.failures), command_line)
