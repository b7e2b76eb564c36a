"""Build the default anchors shipped as package data (`predictor/data/anchors/*.json`) from
the measured corpora, by the corpus rule (`predictor.corpus.anchors`, RULE_VERSION).

Sources (read here, never by package code at run time; both Apache-2.0):
- InferenceX fixed-sequence runs (SemiAnalysisAI/InferenceX CI artifacts, Dec 2025 - Jan
  2026): ../shared/data/inferencex/fixed_seq_runs_dev.csv
- AIConfigurator's silicon sample (ai-dynamo/aiconfigurator, InferenceX database dump of
  2026-04): ../shared/data/aiconfigurator/silicon_sample_dev.csv

Every mappable row is an anchor row. One anchor per (stack, replica layout) and corpus;
when both corpora anchor the same kernel set and layout, the one with more decode points
is kept (then the newer). Each anchor records its source rows ("file:line") and the
licence of its corpus. Host time and first-wave stall are fitted within METHOD §3.12's
range (at most 1 s and 10 s; an anchor whose fit reached a bound is flagged
`host-time-at-bound` / `stall-at-bound`; one at its host bound prices its own layout only,
`predictor.anchors.store`, as does one whose fit left the physical range,
`fit-beyond-physics`, at its own precisions too); one outside it would be left out of the defaults
(listed in the report). Files this script wrote before are replaced; other anchors in the folder
are left alone.

Usage: python scripts/build_default_anchors.py [--out DIR] [--report FILE] [--fit-host]
  --report writes the reproduction check (every source row predicted with the shipped
  anchors) and the per-stack coverage as JSON; --fit-host prints the per-engine host-time
  fit of `predictor.corpus.host` next to the frozen constants.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import Counter, defaultdict
from pathlib import Path

from predictor.anchors.anchor import Anchor
from predictor.anchors.store import AnchorStore, load_anchor_file
from predictor.corpus.assemble import build_anchors
from predictor.corpus.host import HOST_BY_ENGINE, fit_host_constants
from predictor.corpus.metrics import ape
from predictor.corpus.read import read_corpus
from predictor.corpus.refine import MAX_STALL_MS, predict_row, refine
from predictor.step.calibration import HOST_MAX_MS

# The public data folder laid beside the checkout (read-only; build time only).
SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"

ROOT = Path(__file__).resolve().parents[1]
CORPORA = (
    (SHARED_DATA / "inferencex" / "fixed_seq_runs_dev.csv", "inferencex",
     "InferenceX results, Apache-2.0 (SemiAnalysisAI/InferenceX)"),
    (SHARED_DATA / "aiconfigurator" / "silicon_sample_dev.csv", "aiconfigurator",
     "aiconfigurator silicon data, Apache-2.0 (ai-dynamo/aiconfigurator)"),
)
COMMAND = "scripts/build_default_anchors.py"


def _licensed(anchor: Anchor, licence: str) -> Anchor:
    provenance = anchor.provenance.model_copy(update={"command_line": COMMAND,
                                                      "notes": (*anchor.provenance.notes, licence)})
    return anchor.model_copy(update={"provenance": provenance})


def _kernel_layout(anchor: Anchor) -> str:
    return anchor.signature.model_dump_json(exclude={"engine_version"})


def _dedupe(anchors: list[Anchor]) -> list[Anchor]:
    best: dict[str, Anchor] = {}
    for anchor in anchors:
        key = _kernel_layout(anchor)
        rank = (len(anchor.decode_points), len(anchor.decode_sweep.batch_sizes), anchor.provenance.timestamp)
        held = best.get(key)
        if held is None or rank > (len(held.decode_points), len(held.decode_sweep.batch_sizes),
                                   held.provenance.timestamp):
            best[key] = anchor
    return sorted(best.values(), key=lambda a: a.id)


def out_of_range(anchor: Anchor) -> str | None:
    """Why an anchor may not be a default (METHOD §3.12 physical range), None when it may."""
    if anchor.host_time_ms > HOST_MAX_MS:
        return f"host time {anchor.host_time_ms:.0f} ms > {HOST_MAX_MS:.0f} ms"
    if anchor.first_wave_stall_ms > MAX_STALL_MS:
        return f"first-wave stall {anchor.first_wave_stall_ms:.0f} ms > {MAX_STALL_MS:.0f} ms"
    return None


def build(out: Path) -> tuple[list[Anchor], dict]:
    anchors, rows, failures = [], [], []
    for path, fmt, licence in CORPORA:
        corpus = read_corpus(path, fmt)
        built = refine(build_anchors(list(corpus.rows), command_line=COMMAND))
        anchors += [_licensed(a, licence) for a in built.anchors]
        rows += corpus.rows
        failures += [*corpus.failures, *built.failures]
        print(f"{fmt}: {corpus.n_rows} rows, {len(corpus.rows)} mapped, {len(built.anchors)} anchors, "
              f"{len(built.failures)} rows not anchorable")
    kept = _dedupe(anchors)
    excluded = {a.id: why for a in kept if (why := out_of_range(a))}
    shipped = [a for a in kept if a.id not in excluded]
    for anchor_id, why in excluded.items():
        print(f"left out of the defaults: {anchor_id}: {why}")
    _write(shipped, out)
    return shipped, {"rows": rows, "failures": failures, "excluded": excluded}


def _write(anchors: list[Anchor], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.json"):
        try:
            if load_anchor_file(old).provenance.command_line == COMMAND:
                old.unlink()
        except Exception:  # noqa: BLE001 - someone else's file: leave it
            continue
    for anchor in anchors:
        (out / f"{anchor.id}.json").write_text(anchor.model_dump_json(exclude_none=False) + "\n", "utf-8")
    size = sum((out / f"{a.id}.json").stat().st_size for a in anchors)
    print(f"wrote {len(anchors)} anchors to {out} ({size / 1e6:.2f} MB)")


def report(anchors: list[Anchor], rows, failures, excluded) -> dict:
    """Reproduction of every source row with the shipped anchors, and stack coverage."""
    store = AnchorStore.from_anchors(anchors)
    used = {i for a in anchors for i in a.provenance.source_rows}
    apes: dict[str, list[float]] = defaultdict(list)
    modes = Counter()
    for row in rows:
        if row.id not in used:
            continue
        prediction = predict_row(row, store)
        modes[str(prediction.mode)] += 1
        if prediction.metrics is None or prediction.anchor_id is None:
            continue
        m = row.measured
        for name, measured, key in (("tpot", m.tpot_ms_mean, "tpot_ms_mean"),
                                    ("ttft_vs_median", m.ttft_ms_median or m.ttft_ms_mean, "ttft_ms_mean"),
                                    ("throughput", m.output_throughput_per_gpu, "output_throughput_per_gpu")):
            if measured:
                apes[name].append(ape(prediction.metrics[key], measured))
    stacks = Counter(r.stack for r in rows)
    anchored = {r.stack for r in rows if r.id in used}
    missing = sorted("/".join(s) for s in stacks if s not in anchored)
    return {"modes": dict(modes), "excluded": excluded,
            "ape": {k: {"n": len(v), "median": round(statistics.median(v), 2),
                        "p90": round(sorted(v)[int(0.9 * (len(v) - 1))], 2)} for k, v in apes.items()},
            "stacks": len(stacks), "stacks_without_anchor": missing,
            "failures_by_reason": dict(Counter(f.reason[:120] for f in failures).most_common())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "predictor" / "data" / "anchors")
    parser.add_argument("--report", type=Path)
    parser.add_argument("--fit-host", action="store_true")
    args = parser.parse_args()
    if args.fit_host:
        corpus = read_corpus(CORPORA[0][0], CORPORA[0][1])
        for engine, host in fit_host_constants(list(corpus.rows)).items():
            frozen = HOST_BY_ENGINE.get(engine)
            print(f"{engine}: fit H0={host.base_ms:.2f} ms h={host.per_token_us:.2f} us/token ({host.source}); "
                  f"frozen {frozen}")
        return
    anchors, data = build(args.out)
    if args.report:
        summary = report(anchors, data["rows"], data["failures"], data["excluded"])
        args.report.write_text(json.dumps(summary, indent=2) + "\n", "utf-8")
        print(json.dumps({k: v for k, v in summary.items() if k != "failures_by_reason"}, indent=2))


if __name__ == "__main__":
    main()
