"""Build the embedded speculative-decoding acceptance curves (METHOD §3.8).

Copies the measured acceptance lengths AL(k), k = 1..8, of
`golden_acceptance_length_curves.csv` (SPEED-Bench coding category, B300 vLLM, from
InferenceX CI runs; Apache-2.0, SemiAnalysisAI/InferenceX) into
`predictor/data/acceptance.json`, one curve per (model card, method, thinking mode,
source file), keeping each curve's source run and file. The CSV's model names are
mapped to model-card names below; `primary` marks the curve used by default when a
model has several variants of one method (the plain recipe, not the GQA-head or
block-rejection variants).

Usage: python scripts/build_acceptance.py [CSV]
(CSV defaults to ../shared/data/acceptance/golden_acceptance_length_curves.csv.)
"""

from __future__ import annotations

import csv
import json
import sys
from collections import defaultdict
from pathlib import Path

# The public data folder laid beside the checkout (read-only; build time only).
SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"

REPO = Path(__file__).resolve().parents[1]
DEFAULT_SOURCE = SHARED_DATA / "acceptance" / "golden_acceptance_length_curves.csv"
OUT_PATH = REPO / "predictor" / "data" / "acceptance.json"

CARD_BY_CSV_MODEL = {
    "deepseek-v4-pro": "DeepSeek-V4-Pro",
    "deepseek-v4-pro-0813": "DeepSeek-V4-Pro",
    "glm-5.2-fp8": "GLM-5.2",
    "kimi-k2.5-nvfp4": "Kimi-K2.5",
    "kimi-k3": "Kimi-K3",
    "minimax-m3": "MiniMax-M3",
    "qwen3.5-397b-a17b-nvfp4": "Qwen3.5-397B-A17B",
}
METHOD_BY_CSV = {"MTP": "mtp", "EAGLE3": "eagle3", "DSpark": "dspark"}
VARIANT_FILES = {  # non-default recipes of a method already measured with its plain recipe
    "minimaxm3_eagle3_gqa.yaml",
    "kimik3_dspark_probabilistic_sample_method_block_rejection_sample_method.yaml",
}


def build(source: Path) -> dict:
    points: dict[tuple, dict[int, float]] = defaultdict(dict)
    meta: dict[tuple, dict] = {}
    with source.open(newline="", encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            card = CARD_BY_CSV_MODEL[row["model"]]
            key = (card, METHOD_BY_CSV[row["spec_method"]], row["thinking_mode"].removeprefix("thinking_"),
                   row["file"])
            points[key][int(row["num_speculative_tokens"])] = float(row["golden_acceptance_length"])
            meta[key] = {"csv_model": row["model"], "source_run_id": row["source_run_id"],
                         "measured_on": row["measured_on"]}
    curves = []
    for key in sorted(points):
        card, method, thinking, file = key
        depths = sorted(points[key])
        if depths != list(range(1, len(depths) + 1)):
            raise ValueError(f"{file}: depths {depths} are not 1..n")
        curves.append({"model": card, "method": method, "thinking": thinking, "file": file,
                       "primary": file not in VARIANT_FILES,
                       "acceptance_length": [points[key][d] for d in depths], **meta[key]})
    return {
        "source": ("shared/data/acceptance/golden_acceptance_length_curves.csv: SPEED-Bench 'coding' "
                   "acceptance lengths from InferenceX CI (https://github.com/SemiAnalysisAI/InferenceX "
                   "actions runs named per curve), Apache-2.0"),
        "convention": "acceptance_length[k-1] = AL(k) = committed tokens per verify step at depth k",
        "curves": curves,
    }


def main(argv: list[str]) -> int:
    source = Path(argv[1]) if len(argv) > 1 else DEFAULT_SOURCE
    data = build(source)
    OUT_PATH.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {len(data['curves'])} curves to {OUT_PATH}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
