"""Build the cross-model priors shipped as package data
(`predictor/data/calibration_priors.json`, METHOD §2) from the embedded anchors.

Every embedded anchor (`predictor/data/anchors`, built by `scripts/build_default_anchors.py`)
is fitted around the physics defaults and then around its group's prior
(`predictor.step.priors.learn_from_anchors`); the priors are the medians of the fitted
factors per (GPU, engine, dtype class) and its fallbacks. Rerun after rebuilding the
anchors.

Usage: python scripts/build_priors.py [--out FILE]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from predictor.anchors.store import AnchorStore
from predictor.cards.registry import load_card
from predictor.step.priors import learn_from_anchors

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "predictor" / "data" / "calibration_priors.json")
    args = parser.parse_args()
    anchors = [entry.anchor for entry in AnchorStore.default().entries() if entry.where == "embedded"]
    priors = learn_from_anchors(anchors, load_card)
    data = {"source": f"scripts/build_priors.py from {len(anchors)} embedded anchors", **priors.to_json()}
    args.out.write_text(json.dumps(data, indent=1) + "\n", "utf-8")
    print(f"wrote {len(priors.by_key)} priors from {len(anchors)} anchors to {args.out}")


if __name__ == "__main__":
    main()
