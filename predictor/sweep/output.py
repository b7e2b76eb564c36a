"""The files a Pareto sweep writes (PRODUCT.md §2 `pareto`): `points.csv` (every kept
point), `frontier.csv` (the frontier, same columns), `sweep.json` (counts, timing and the
frontier) and `pareto.png` (`predictor.sweep.plot`).

Each file is written to a temporary name in the output folder and renamed, so an
interrupted run never leaves a half-written file (PRODUCT.md §6). Unset precision levers
are written as `auto` (the checkpoint's dtype), as the lever grammar spells them.
"""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from typing import Any, Sequence

from levers.configuration import format_value
from predictor.files import atomic_write_text
from predictor.sweep.executors import POINT_METRICS
from predictor.sweep.plot import plot_frontier
from predictor.sweep.run import SweepPoint, SweepResult

CONFIG_COLUMNS = (
    "concurrency", "tp", "pp", "ep", "attention_dp", "replicas", "disaggregated", "prefill_layout",
    "prefill_replicas", "decode_layout", "decode_replicas", "weight_dtype", "expert_dtype",
    "kv_cache_dtype", "spec_method", "spec_depth",
)
COLUMNS = ("on_frontier", "eligible", "mode", "source", *POINT_METRICS, "total_gpus", *CONFIG_COLUMNS,
           "configuration")
FILES = {"points": "points.csv", "frontier": "frontier.csv", "sweep": "sweep.json", "plot": "pareto.png"}


def write_sweep(result: SweepResult, out_dir: str | Path, *, plot: bool = True) -> dict[str, Path]:
    """Write the sweep's files into ``out_dir``; returns name -> path."""
    folder = Path(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    paths = {name: folder / file for name, file in FILES.items() if plot or name != "plot"}
    atomic_write_text(paths["points"], points_csv(result.points))
    atomic_write_text(paths["frontier"], points_csv(result.frontier))
    if plot:
        plot_frontier(result.points, paths["plot"], plot_title(result), result.rule)
    else:   # an earlier sweep's figure in the folder would describe another sweep than its files
        (folder / FILES["plot"]).unlink(missing_ok=True)
    atomic_write_text(paths["sweep"], json.dumps(sweep_json(result, paths), indent=1) + "\n")
    return paths


def sweep_json(result: SweepResult, paths: dict[str, Path]) -> dict[str, Any]:
    """`sweep.json` (and `pareto --json`): the result with the files written."""
    return {**result.to_json(), "files": {name: str(path) for name, path in paths.items()}}


def points_csv(points: Sequence[SweepPoint]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(COLUMNS)
    for point in points:
        writer.writerow(point_row(point))
    return buffer.getvalue()


def point_row(point: SweepPoint) -> list[Any]:
    config = point.config
    metrics = [_number(point.metrics.get(key)) for key in POINT_METRICS]
    levers = [format_value(getattr(config, name)) for name in CONFIG_COLUMNS]
    return [str(point.on_frontier).lower(), str(point.is_eligible).lower(), str(point.mode), point.source,
            *metrics, config.total_gpus,
            *levers, config.describe()]


def plot_title(result: SweepResult) -> str:
    target = result.target
    return (f"{target['model']} on {target['cluster']} ({target['engine']}), {result.workload.name}: "
            f"{result.num_points} points, {len(result.frontier)} on the frontier")


def _number(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return ""
    return f"{value:.6g}"


