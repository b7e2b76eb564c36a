"""TTFT of the user's own deployment, checked across benchmark harnesses.

A product question names no harness, so an anchor built from a public benchmark prices
it with its engine's front-end host time, not the host time that benchmark's client
added (`predictor.step.anchored`, "engine_host"). The one measurement of that choice the
dev corpora allow: anchors from AIConfigurator's colocated runs of every stack InferenceX
measured too, then InferenceX's rows of those stacks priced three ways: as a product
question (the row's launch, its harness unnamed), and with the anchors' own host time (the rows named as
AIConfigurator's; what every question paid before), against InferenceX's median TTFT
(its mean carries start-up stalls). Nothing is fitted to the scored rows.

    python scripts/cross_harness_ttft.py ../shared/data/aiconfigurator/silicon_sample_dev.csv \\
        ../shared/data/inferencex/fixed_seq_runs_dev.csv
"""

from __future__ import annotations

import argparse
import math
import statistics
from collections import defaultdict
from dataclasses import replace

from predictor.anchors.anchoring import store_priors
from predictor.corpus.protocol_score import REFINE_ROUNDS, _store_and_priors
from predictor.corpus.read import read_corpus
from predictor.corpus.refine import predict_row


def _stack(row) -> tuple[str, str, str]:
    return row.card().name, row.gpu.upper(), str(row.engine)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("aiconfigurator_csv")
    parser.add_argument("inferencex_csv")
    args = parser.parse_args()
    anchor_rows = read_corpus(args.aiconfigurator_csv, "aiconfigurator").rows
    scored_rows = read_corpus(args.inferencex_csv, "inferencex").rows
    shared = {_stack(r) for r in anchor_rows} & {_stack(r) for r in scored_rows}
    store, _ = _store_and_priors([r for r in anchor_rows if _stack(r) in shared and not r.config.disaggregated],
                                 REFINE_ROUNDS, predict_row)
    priors = store_priors(store)
    errors: dict[str, dict[tuple, list[float]]] = defaultdict(lambda: defaultdict(list))
    for row in scored_rows:
        measured = row.measured.ttft_ms_median
        if _stack(row) not in shared or row.config.disaggregated or not measured:
            continue
        # the row's launch (scheduler intervals, mixed prefill) kept, only its harness unnamed
        ways = {"user (engine front end)": replace(row, harness=replace(row.harness, name=None)),
                "anchor's harness": replace(row, harness=replace(row.harness, name="aiconfigurator"))}
        for way, asked in ways.items():
            prediction = predict_row(asked, store, priors)
            ttft = (prediction.metrics or {}).get("ttft_ms_mean") if prediction.legal else None
            if ttft and prediction.anchor_id:
                errors[way][_stack(row)].append(math.log(ttft / measured))
    for way, by_stack in errors.items():
        logs = [x for xs in by_stack.values() for x in xs]
        print(f"{way}: {len(logs)} rows, median |error| {100 * statistics.median(abs(math.expm1(x)) for x in logs):.1f}%,"
              f" median signed {100 * math.expm1(statistics.median(logs)):+.1f}%")
        for stack, xs in sorted(by_stack.items()):
            print(f"    {' / '.join(stack)}: {len(xs)} rows, median signed {100 * math.expm1(statistics.median(xs)):+.1f}%")


if __name__ == "__main__":
    main()
