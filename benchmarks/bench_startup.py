"""Benchmark: CLI start-up, as a user feels it (issue 15: `inferasim --help` <= 0.5 s and
`inferasim models` <= 1 s wall).

Each command runs as a fresh process (`python -c "from agent.cli.main import main;
main()" ARGS`) from this checkout and, in the same run, from a baseline checkout of an
earlier commit (`--baseline-ref`, default the commit before lazy command loading),
extracted with `git archive` into a temporary folder. Runs alternate between the two
trees so background load hits both alike; the report gives the median wall and CPU
seconds of each and the ratio new / baseline. The interpreter's own start-up
(`python -c pass`) is measured too, as the floor no change can beat.

    python benchmarks/bench_startup.py [--repeats 7] [--baseline-ref fc2f303] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_predict import extract, machine  # noqa: I001  (same folder)

REPO = Path(__file__).resolve().parents[1]
DEFAULT_BASELINE_REF = "fc2f303"   # main before lazy command loading (issue 15)
COMMANDS = {"--help": ["--help"], "models": ["models"],
            "levers": ["levers"], "anchors list": ["anchors", "list"]}
ENTRY = "from agent.cli.main import main; main()"
TIMEOUT_S = 120.0


def run_once(tree: Path | None, args: list[str], home: str) -> tuple[float, float]:
    """(wall s, CPU s) of one process; ``tree`` None runs the bare interpreter."""
    env = {**os.environ, "INFERASIM_HOME": home, "COLUMNS": "80"}
    env.pop("INFERASIM_LM", None)
    command = [sys.executable, "-c", "pass"] if tree is None else [sys.executable, "-c", ENTRY, *args]
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, env=env, cwd=tree or REPO, timeout=TIMEOUT_S)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{args} in {tree} exited {done.returncode}: {done.stderr[-400:]!r}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def measure(trees: dict[str, Path], repeats: int) -> dict:
    samples: dict[str, dict[str, list[tuple[float, float]]]] = {
        name: {label: [] for label in COMMANDS} for name in trees}
    floor = []
    with tempfile.TemporaryDirectory() as home:
        for _ in range(repeats):
            floor.append(run_once(None, [], home))
            for label, args in COMMANDS.items():
                for name, tree in trees.items():
                    samples[name][label].append(run_once(tree, args, home))
    return {"floor": _summary(floor), **{name: {label: _summary(runs) for label, runs in by.items()}
                                         for name, by in samples.items()}}


def _summary(runs: list[tuple[float, float]]) -> dict:
    return {"wall_s": round(statistics.median(w for w, _ in runs), 3),
            "cpu_s": round(statistics.median(c for _, c in runs), 3), "runs": len(runs)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--baseline-ref", default=DEFAULT_BASELINE_REF)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    host = machine()
    with tempfile.TemporaryDirectory() as scratch:
        trees = {"current": REPO, "baseline": extract(args.baseline_ref, Path(scratch))}
        figures = measure(trees, args.repeats)
    report = {"machine": host, "baseline_ref": args.baseline_ref, "figures": figures,
              "ratio_wall": {label: round(figures["current"][label]["wall_s"] / figures["baseline"][label]["wall_s"], 3)
                             for label in COMMANDS}}
    if args.json:
        print(json.dumps(report, indent=1))
        return
    m = host
    print(f"machine: {m['cpu']} ({m['cores']} cores), Python {m['python']}, load {m['load_average_1min']}")
    print(f"interpreter floor (python -c pass): {figures['floor']['wall_s']:.3f} s wall")
    print(f"{'command':<14} {'now wall s':>10} {'now CPU s':>10} {'base wall s':>11} {'base CPU s':>10} {'now/base':>9}")
    for label in COMMANDS:
        now, base = figures["current"][label], figures["baseline"][label]
        print(f"{label:<14} {now['wall_s']:>10.3f} {now['cpu_s']:>10.3f} {base['wall_s']:>11.3f} "
              f"{base['cpu_s']:>10.3f} {report['ratio_wall'][label]:>9.3f}")


if __name__ == "__main__":
    main()
