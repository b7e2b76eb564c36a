"""Benchmark: analytical predictions per second on one core, and DES runs per second
for the agentic workload (STYLE.md rule 11: performance is measured by a script with a
stated baseline, not by timed unit tests).

Measured in one process on one core:
- analytical, *sweep-like*: N distinct points spread over the model's Pareto space
  (layouts, precisions, splits, concurrency, draft depths), each predicted once: what `pareto` and the search see;
- analytical, *repeated*: one default configuration predicted N times (issue-3 figure:
  median time of one analytical prediction, target <= 1 ms);
- DES: agentic runs of a few points of the same space.
Baselines, measured in the same run: a trivial Python loop building the same number of
metric dicts as the predictions return (the floor of "doing anything per point"); for the
DES the analytical prediction of the same points; and, with ``--baseline-ref``, the same
analytical figures of an earlier commit (extracted with ``git archive``, run in a
subprocess with this interpreter): issue 12 asks for the median against the step model
before v2 (``fc2f303``).

    python benchmarks/bench_predict.py --model deepseek-r1 --points 2000 --des-runs 4 --baseline-ref fc2f303
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from levers.configuration import Configuration
from predictor.predict import predict
from predictor.sweep.space import SpaceOptions, build_plan
from predictor.target import resolve_target
from predictor.workload import parse_workload

ISSUE3_TARGET_MS = 1.0
REPO = Path(__file__).resolve().parents[1]
BASELINE_TIMEOUT_S = 1800.0


def machine() -> dict:
    """CPU model and cores from lscpu (Linux), else the platform module, and the 1-minute
    load average at the start (other work on the machine slows every figure)."""
    info = {"python": platform.python_version(), "platform": platform.platform(),
            "load_average_1min": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None}
    try:
        text = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
        info["cpu"] = fields.get("Model name", "").strip()
        info["cores"] = int(fields.get("CPU(s)", "0").strip() or 0)
    except (OSError, subprocess.CalledProcessError, ValueError):
        info["cpu"], info["cores"] = platform.processor(), None
    return info


def extract(ref: str, folder: Path) -> Path:
    """The tree of ``ref`` (git archive) in ``folder``."""
    archive = folder / "tree.tar"
    with archive.open("wb") as out:
        subprocess.run(["git", "-C", str(REPO), "archive", ref], stdout=out, check=True, timeout=120)
    tree = folder / "tree"
    with tarfile.open(archive) as tar:
        tar.extractall(tree, filter="data")
    return tree


def baseline_figures(ref: str, args: argparse.Namespace) -> dict:
    """The analytical figures of commit ``ref``'s own benchmark, same options, no DES."""
    with tempfile.TemporaryDirectory(prefix="bench-predict-") as folder:
        tree = extract(ref, Path(folder))
        command = [sys.executable, "benchmarks/bench_predict.py", "--model", args.model, "--engine", args.engine,
                   "--points", str(args.points), "--repeats", str(args.repeats), "--des-runs", "0", "--json"]
        if args.cluster:
            command += ["--cluster", args.cluster]
        env = {**os.environ, "PYTHONPATH": str(tree), "INFERASIM_HOME": str(Path(folder) / "home")}
        done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True, timeout=BASELINE_TIMEOUT_S)
        if done.returncode:
            raise SystemExit(f"baseline {ref} failed: {done.stderr[-2000:]}")
        report = json.loads(done.stdout)
    return {"ref": ref, "analytical_sweep_like": report["analytical_sweep_like"],
            "analytical_repeated": report["analytical_repeated"]}


def sweep_points(target, workload, count: int) -> list[Configuration]:
    """``count`` points spread evenly over the model's Pareto space, in sweep order (each
    group's draft variants together, as a sweep prices them)."""
    plan = build_plan(target, workload, SpaceOptions())
    every = [plan.configuration(index, variant) for index, group in enumerate(plan.groups)
             for variant in plan.families[group.family].variants]
    stride = max(1, len(every) // count)
    return every[::stride][:count]


def time_each(fn, items) -> list[float]:
    """Wall seconds of ``fn(item)`` for each item."""
    times = []
    for item in items:
        started = time.perf_counter()
        fn(item)
        times.append(time.perf_counter() - started)
    return times


def dict_baseline(count: int, keys: int) -> float:
    """Seconds for a trivial loop building ``count`` dicts of ``keys`` float entries."""
    names = [f"metric_{i}" for i in range(keys)]
    started = time.perf_counter()
    for n in range(count):
        _ = {name: float(n) * 1.5 for name in names}
    return time.perf_counter() - started


def summary(times: list[float]) -> dict:
    total = sum(times)
    return {"runs": len(times), "total_s": round(total, 3), "per_s": round(len(times) / total, 1) if total else None,
            "median_ms": round(1000 * statistics.median(times), 4),
            "p90_ms": round(1000 * statistics.quantiles(times, n=10)[-1], 4) if len(times) >= 10 else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="deepseek-r1")
    parser.add_argument("--cluster", default=None)
    parser.add_argument("--engine", default="vllm")
    parser.add_argument("--points", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=2000)
    parser.add_argument("--des-runs", type=int, default=4)
    parser.add_argument("--des-requests", type=int, default=None, help="requests per DES run (default: the workload's)")
    parser.add_argument("--baseline-ref", default=None, help="also measure this commit (e.g. fc2f303)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    host = machine()   # before the work: its load average is the background load
    target = resolve_target(args.model, args.cluster, args.engine)
    fixed = parse_workload("1k/1k")
    points = sweep_points(target, fixed, args.points)
    sweep = time_each(lambda c: predict(target, c, fixed), points)
    example = predict(target, points[0], fixed)
    keys = len(example.metrics or {})
    baseline_s = dict_baseline(len(points), keys)
    default = Configuration(tp=8 if target.cluster.total_gpus >= 8 else target.cluster.total_gpus)
    repeated = time_each(lambda _: predict(target, default, fixed), range(args.repeats))
    report = {
        "machine": host, "model": target.card.name, "cluster": target.cluster.spec,
        "engine": str(target.engine),
        "analytical_sweep_like": summary(sweep),
        "analytical_repeated": {**summary(repeated), "config": default.describe(),
                                "issue3_target_ms": ISSUE3_TARGET_MS,
                                "issue3_met": statistics.median(repeated) * 1000 <= ISSUE3_TARGET_MS},
        "baseline_dict_loop": {"dicts": len(points), "keys": keys, "total_s": round(baseline_s, 4)},
        "ratio_sweep_like_vs_dict_loop": round(sum(sweep) / baseline_s, 1) if baseline_s else None,
    }
    if args.des_runs:
        report.update(des_report(target, points, args.des_runs, args.des_requests))
    if args.baseline_ref:
        base = report["baseline_commit"] = baseline_figures(args.baseline_ref, args)
        report["ratio_repeated_median_vs_commit"] = round(
            report["analytical_repeated"]["median_ms"] / base["analytical_repeated"]["median_ms"], 3)
        report["ratio_sweep_like_median_vs_commit"] = round(
            report["analytical_sweep_like"]["median_ms"] / base["analytical_sweep_like"]["median_ms"], 3)
    print(json.dumps(report, indent=1) if args.json else render(report))


def des_report(target, points: list[Configuration], runs: int, num_requests: int | None) -> dict:
    agentic = parse_workload("agentic")
    fixed = parse_workload("1k/1k")
    chosen = [c for c in points if c.spec_depth == 0][:: max(1, len(points) // (4 * runs))][:runs]
    results = []
    des = time_each(lambda c: results.append(predict(target, c, agentic, num_requests=num_requests)), chosen)
    analytical = time_each(lambda c: predict(target, c, fixed), chosen)
    return {"des_agentic": {**summary(des), "legal": sum(r.metrics is not None for r in results)},
            "des_configs": [c.describe() for c in chosen],
            "ratio_des_vs_analytical_same_points": round(sum(des) / sum(analytical), 1)}


def render(report: dict) -> str:
    m = report["machine"]
    lines = [f"machine: {m['cpu']} ({m['cores']} cores), Python {m['python']}, load {m['load_average_1min']}",
             f"target: {report['model']} on {report['cluster']} ({report['engine']})"]
    s, r = report["analytical_sweep_like"], report["analytical_repeated"]
    b = report["baseline_dict_loop"]
    lines.append(f"analytical, sweep-like: {s['runs']} points in {s['total_s']} s = {s['per_s']}/s on one core, "
                 f"median {s['median_ms']} ms, p90 {s['p90_ms']} ms")
    lines.append(f"analytical, repeated ({r['config']}): median {r['median_ms']} ms "
                 f"(issue-3 target <= {r['issue3_target_ms']} ms: {'met' if r['issue3_met'] else 'NOT met'}), "
                 f"{r['per_s']}/s")
    lines.append(f"baseline: {b['dicts']} dicts of {b['keys']} keys in {b['total_s']} s; "
                 f"sweep-like predictions cost {report['ratio_sweep_like_vs_dict_loop']}x that")
    if "baseline_commit" in report:
        c = report["baseline_commit"]
        lines.append(f"commit {c['ref']}: repeated median {c['analytical_repeated']['median_ms']} ms, sweep-like "
                     f"median {c['analytical_sweep_like']['median_ms']} ms; this tree / that commit: repeated "
                     f"{report['ratio_repeated_median_vs_commit']}x, sweep-like "
                     f"{report['ratio_sweep_like_median_vs_commit']}x")
    if "des_agentic" in report:
        d = report["des_agentic"]
        lines.append(f"DES agentic: {d['runs']} runs ({d['legal']} legal) in {d['total_s']} s = {d['per_s']}/s, "
                     f"median {d['median_ms']} ms; "
                     f"{report['ratio_des_vs_analytical_same_points']}x the analytical prediction of the same points")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
