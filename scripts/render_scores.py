"""Render the protocol tables of `docs/SCORES.md` from the report `scripts/build_error_bars.py
--report FILE --coverage` writes, so the figures the document quotes are the figures measured.

The tables replace what lies between the `<!-- protocols:begin -->` and
`<!-- protocols:end -->` markers of the document; the rest of it is left alone.

Usage: python scripts/render_scores.py REPORT.json [--doc docs/SCORES.md]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BEGIN, END = "<!-- protocols:begin -->", "<!-- protocols:end -->"
TITLES = {"inferencex": "InferenceX dev (fixed_seq_runs_dev.csv)",
          "aiconfigurator": "AIConfigurator dev (silicon_sample_dev.csv)"}
# METHOD §8 / issue 12's targets: median TPOT, throughput, TTFT, p90 TPOT (percent); pair accuracy.
TARGETS = {"in-ladder": "3 / 7 / 15", "cross-width": "10 / 10 / 20, p90 30", "tp4-to-8": "10 / 10 / 20, p90 30",
           "cross-length": "10 / 10 / 20, p90 30", "load": "10 / 10 / 20, p90 30", "load-down": "",
           "split": "15 / 15 / 30",
           "none": "12 / 12 / 30, pairs 93%", "leave-model-out": "12 / 12 / 30, pairs 93%", "precision": ""}


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _cover(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}"


def _absurd(absurd: dict, contradicting: dict, metric: str) -> str:
    """An absurd count, with how many sit on rows contradicting their chart (or, for TTFT, whose
    mean a stalled tail holds) when any do."""
    on = contradicting.get(metric, 0)
    return f"{absurd.get(metric, 0)}" + (f" ({on})" if on else "")


def table(entries: list[dict]) -> list[str]:
    lines = ["| protocol | targets (anchors) / not expressible | TPOT median (p90) | throughput median | "
             "TTFT median | pair accuracy | 80% coverage TPOT / tput / TTFT | held-out coverage | "
             "absurd TPOT / tput / TTFT (on rows contradicting their chart or stalled) | target |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for e in entries:
        cover, absurd = e.get("interval_coverage", {}), e.get("absurd", {})
        odd = e.get("absurd_on_contradicting_rows", {})
        held = e.get("cross_corpus_coverage", {})
        pair = "-" if e.get("pair_accuracy") is None else f"{100 * e['pair_accuracy']:.1f}%"
        lines.append(
            f"| {e['protocol']} | {e['n']} ({e.get('n_anchors', 0)}) / {e.get('n_unexpressed', 0)} | "
            f"{_pct(e.get('tpot_median_ape'))} ({_pct(e.get('tpot_p90_ape'))}) | {_pct(e.get('throughput_median_ape'))} | "
            f"{_pct(e.get('ttft_median_ape'))} | {pair} | "
            f"{_cover(cover.get('tpot'))} / {_cover(cover.get('throughput'))} / {_cover(cover.get('ttft'))} | "
            f"{_cover(held.get('tpot'))} / {_cover(held.get('throughput'))} / {_cover(held.get('ttft'))} | "
            f"{_absurd(absurd, odd, 'tpot')} / {_absurd(absurd, odd, 'throughput')} / {_absurd(absurd, odd, 'ttft')} | "
            f"{TARGETS.get(e['protocol'], '')} |")
    return lines


def render(report: dict) -> str:
    out = [BEGIN, ""]
    for corpus, entries in report.items():
        out += [f"### {TITLES.get(corpus, corpus)}", ""] + table(entries) + [""]
    return "\n".join(out + [END])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("report", type=Path)
    parser.add_argument("--doc", type=Path, default=ROOT / "docs" / "SCORES.md")
    args = parser.parse_args()
    text = args.doc.read_text("utf-8")
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{args.doc}: no {BEGIN} ... {END} markers to replace")
    head, rest = text.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    args.doc.write_text(head + render(json.loads(args.report.read_text("utf-8"))) + tail, "utf-8")
    print(f"wrote the protocol tables of {args.doc}")


if __name__ == "__main__":
    main()
