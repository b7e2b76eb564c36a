"""TTFT of the user's own deployment, checked across benchmark harnesses
(`predictor.corpus.cross_harness`): anchors from AIConfigurator's colocated runs of every
stack InferenceX measured too, InferenceX's rows of those stacks priced as a product
question (their own launch, the harness unnamed: the engine's front-end host time) and
with the anchors' own fitted host time (what every question paid before), against
InferenceX's median TTFT. Nothing is fitted to the scored rows.

    python scripts/cross_harness_ttft.py ../shared/data/aiconfigurator/silicon_sample_dev.csv \\
        ../shared/data/inferencex/fixed_seq_runs_dev.csv
"""

from __future__ import annotations

import argparse
import math
import statistics

from predictor.corpus.cross_harness import ANCHORS_OWN, USER, ttft_residuals
from predictor.corpus.read import read_corpus

WAYS = {USER: "user (engine front end)", ANCHORS_OWN: "anchor's harness"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("aiconfigurator_csv")
    parser.add_argument("inferencex_csv")
    args = parser.parse_args()
    found = ttft_residuals(read_corpus(args.aiconfigurator_csv, "aiconfigurator").rows,
                           read_corpus(args.inferencex_csv, "inferencex").rows)
    for way, by_stack in found.items():
        logs = [x for xs in by_stack.values() for x in xs]     # log(measured / predicted)
        print(f"{WAYS[way]}: {len(logs)} rows, median |error| {100 * statistics.median(abs(math.expm1(-x)) for x in logs):.1f}%,"
              f" median signed {100 * math.expm1(-statistics.median(logs)):+.1f}% (predicted over measured)")
        for stack, xs in sorted(by_stack.items()):
            print(f"    {' / '.join(stack)}: {len(xs)} rows, median signed {100 * math.expm1(-statistics.median(xs)):+.1f}%")


if __name__ == "__main__":
    main()
