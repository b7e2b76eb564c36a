"""Measure the error of every transfer kind on the dev corpora and ship it
(`predictor/data/error_bars.json`, read by `predictor.uncertainty`), plus the protocol
report `docs/SCORES.md` quotes.

For each corpus (InferenceX and AIConfigurator dev, in the read-only `shared/` folder
beside the checkout) every protocol of `inferasim score --protocol` runs with the
product's own rule; the residuals ``log(measured / predicted)`` of its targets are pooled
over both corpora under the transfer kind the protocol measures:

| protocol | kind |
|---|---|
| in-ladder | in-ladder |
| cross-width, tp4-to-8 | width |
| cross-length | length |
| load | load |
| load-down | load-down |
| split | split |
| precision | precision |
| leave-model-out | cross-model |
| none | none, cross-model |

(`none` prices each model with the shipped priors of the others, as a user's model with no
anchor is priced: its predictions carry the cross-model kind, so its residuals count there
beside leave-model-out's, and under `none` for a configuration no prior covers.) The
`harness` kind has TTFT only: AIConfigurator's anchors pricing InferenceX's rows of the
same stacks as the product asks (the harness unnamed, the engine's front-end host time;
`predictor.corpus.cross_harness`), with every run of all protocols.

and their 10th / 90th percentiles and median APE per metric family (TPOT, TTFT,
throughput) are written, once per kind and once per kind and fit tier of the prediction's
anchor (`predictor.uncertainty.fit_tier`). Rerun after the anchors or the model change; `--report FILE`
writes every protocol's summary line per corpus (with the coverage of the intervals just
written, `--coverage` re-scores once with them; those bands pool both corpora, so that
coverage is in-sample, and each line also carries `cross_corpus_coverage`: the share of
its residuals inside the band the other corpus alone measured).

Usage: python scripts/build_error_bars.py [--report FILE] [--coverage] [--protocols LIST]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from collections import defaultdict
from pathlib import Path

from predictor.anchors.coverage import HARNESS
from predictor.corpus.cross_harness import USER, ttft_residuals
from predictor.corpus.metrics import quantile
from predictor.corpus.protocol_score import parse_protocols, score_protocols
from predictor.corpus.protocols import PROTOCOLS
from predictor.corpus.read import read_corpus
from predictor.uncertainty import shipped_error_bars

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "predictor" / "data" / "error_bars.json"
CORPORA = (("inferencex", SHARED_DATA / "inferencex" / "fixed_seq_runs_dev.csv"),
           ("aiconfigurator", SHARED_DATA / "aiconfigurator" / "silicon_sample_dev.csv"))
KIND_OF = {"in-ladder": ("in-ladder",), "cross-width": ("width",), "tp4-to-8": ("width",),
           "cross-length": ("length",), "load": ("load",), "load-down": ("load-down",), "split": ("split",),
           "precision": ("precision",), "leave-model-out": ("cross-model",), "none": ("none", "cross-model")}


def measure(protocols) -> tuple[dict, dict, dict, dict]:
    """Residuals pooled by transfer kind (and by fit tier and kind), every protocol's
    summary per corpus, and the residuals per corpus and protocol (for the out-of-sample
    coverage)."""
    pooled: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    tiers: dict[str, dict] = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    report, by_corpus, corpus_rows = {}, {}, {}
    for name, path in CORPORA:
        started = time.perf_counter()
        rows = corpus_rows[name] = list(read_corpus(path, name).rows)
        scored = score_protocols(rows, protocols)
        report[name], by_corpus[name] = scored["protocols"], scored["residuals"]
        for protocol, residuals in scored["residuals"].items():
            _pool(pooled, protocol, residuals)
        for protocol, by_tier in scored["tiered_residuals"].items():
            for tier, residuals in by_tier.items():
                _pool(tiers[tier], protocol, residuals)
        print(f"{name}: {len(rows)} rows, {len(protocols)} protocols in {time.perf_counter() - started:.0f} s")
    if tuple(protocols) == tuple(PROTOCOLS):
        found = ttft_residuals(corpus_rows["aiconfigurator"], corpus_rows["inferencex"])[USER]
        pooled[HARNESS]["ttft"].extend(x for xs in found.values() for x in xs)
    return pooled, tiers, report, by_corpus


def _kept_harness_band(kinds: dict) -> dict:
    """``kinds`` with the shipped harness band when this run did not measure it (a run of
    some protocols only): the band is measured by the run of all of them."""
    if HARNESS not in kinds and OUT.exists():
        shipped = json.loads(OUT.read_text("utf-8")).get("kinds", {}).get(HARNESS)
        if shipped:
            print(f"{HARNESS}: kept the shipped band (measured by a run of every protocol)")
            return {**kinds, HARNESS: shipped}
    return kinds


def _pool(into: dict, protocol: str, residuals: dict[str, list[float]]) -> None:
    """A protocol's residuals per family, under each transfer kind it measures."""
    for kind in KIND_OF[protocol]:
        for family, values in residuals.items():
            into[kind][family].extend(values)


def cross_corpus_coverage(by_corpus: dict) -> dict:
    """Out-of-sample coverage: each corpus's residuals against the 80% band measured on
    the *other* corpus alone (the shipped bars pool both, so their own coverage is
    in-sample by construction)."""
    out: dict = {}
    names = list(by_corpus)
    for name in names:
        others = [n for n in names if n != name]
        out[name] = {}
        for protocol, families in by_corpus[name].items():
            out[name][protocol] = {}
            for family, values in families.items():
                reference = [v for n in others for v in by_corpus[n].get(protocol, {}).get(family, [])]
                if len(values) < 5 or len(reference) < 5:
                    continue
                low, high = quantile(reference, 0.1), quantile(reference, 0.9)
                out[name][protocol][family] = sum(low <= v <= high for v in values) / len(values)
    return out


def _bands(pooled: dict) -> dict:
    kinds = {}
    for kind, families in pooled.items():
        kinds[kind] = {}
        for family, values in families.items():
            if not values:
                continue
            apes = [abs(math.exp(v) - 1.0) * 100.0 for v in values]   # |meas/pred - 1|, in %
            kinds[kind][family] = {"q10": quantile(values, 0.1), "q90": quantile(values, 0.9),
                                   "median_ape": statistics.median(apes), "rows": len(values)}
    return kinds


def error_bars(pooled: dict, tiers: dict) -> dict:
    return {"source": "scripts/build_error_bars.py on InferenceX and AIConfigurator dev corpora",
            "kinds": _kept_harness_band(_bands(pooled)),
            "tiers": {tier: _bands(kinds) for tier, kinds in sorted(tiers.items())}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--report", type=Path)
    parser.add_argument("--coverage", action="store_true", help="re-score with the new intervals for the report")
    parser.add_argument("--protocols", default="all")
    args = parser.parse_args()
    protocols = parse_protocols(args.protocols) if args.protocols != "all" else PROTOCOLS
    pooled, tiers, report, by_corpus = measure(protocols)
    OUT.write_text(json.dumps(error_bars(pooled, tiers), indent=1) + "\n", "utf-8")
    print(f"wrote {OUT}")
    if args.coverage:
        shipped_error_bars.cache_clear()
        _, _, report, _ = measure(protocols)
    if args.report:
        held_out_by_corpus = cross_corpus_coverage(by_corpus)
        for name, entries in report.items():
            held_out = held_out_by_corpus.get(name, {})
            for entry in entries:
                entry["cross_corpus_coverage"] = held_out.get(entry["protocol"], {})
        args.report.write_text(json.dumps(report, indent=1) + "\n", "utf-8")
        print(f"wrote {args.report}")


if __name__ == "__main__":
    main()
