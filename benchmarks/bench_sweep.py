"""Benchmark: a 10,000-point Pareto sweep, single-core sequential vs the local process
pool vs a local Ray instance, plus the DES-point rate of an agentic sweep.

Baseline, measured in the same run: the sequential sweep in this process (one core),
run *last* so that neither parallel backend inherits caches it warmed (the pool forks
this process). Every backend must return the same points and frontier (checked and
printed). Wall times include worker start-up and cold per-process caches (what a user
waits for); Ray's own start is reported apart.

    /work/venv/bin/python benchmarks/bench_sweep.py --model deepseek-r1 --points 10000
    /work/venv/bin/python benchmarks/bench_sweep.py --backends local,ray --des-points 24
"""

from __future__ import annotations

import argparse
import json
import os
import time

from bench_predict import machine  # noqa: I001  (same folder)

from predictor.sweep.executors import LocalPoolExecutor, RayExecutor, SerialExecutor
from predictor.sweep.run import SweepResult, run_sweep
from predictor.sweep.space import SpaceOptions
from predictor.target import resolve_target
from predictor.workload import parse_workload


def run_backend(name: str, target, workload, options: SpaceOptions, cores: int,
                num_requests: int | None = None) -> tuple[SweepResult, float]:
    """(result, seconds spent starting Ray, 0 otherwise)."""
    if name == "serial":
        return run_sweep(target, workload, options=options, executor=SerialExecutor(), num_requests=num_requests), 0.0
    if name == "local":
        return run_sweep(target, workload, options=options, executor=LocalPoolExecutor(cores),
                         num_requests=num_requests), 0.0
    import ray

    started = time.perf_counter()
    ray.init(num_cpus=cores, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    ray_start_s = time.perf_counter() - started
    try:
        result = run_sweep(target, workload, options=options, executor=RayExecutor(), num_requests=num_requests)
    finally:
        ray.shutdown()
    return result, ray_start_s


def row(name: str, result: SweepResult, ray_start_s: float) -> dict:
    return {"backend": name, "workers": result.workers, "predictions": result.num_priced,
            "points_kept": result.num_points, "frontier": len(result.frontier), "wall_s": round(result.wall_s, 2),
            "predictions_per_s": round(result.points_per_s, 1), "ray_start_s": round(ray_start_s, 2),
            "speedup_vs_serial": None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="deepseek-r1")
    parser.add_argument("--cluster", default=None)
    parser.add_argument("--engine", default="vllm")
    parser.add_argument("--points", type=int, default=10_000)
    parser.add_argument("--backends", default="local,ray,serial")
    parser.add_argument("--des-points", type=int, default=0,
                        help="also time an agentic (DES) sweep of this many points")
    parser.add_argument("--des-requests", type=int, default=None)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    host = machine()   # before the work: its load average is the background load
    cores = os.cpu_count() or 1
    target = resolve_target(args.model, args.cluster, args.engine)
    options = SpaceOptions(max_points=args.points)
    fixed = parse_workload("1k/1k")
    rows, results = [], {}
    for name in [b.strip() for b in args.backends.split(",") if b.strip()]:
        result, ray_start_s = run_backend(name, target, fixed, options, cores)
        results[name] = result
        rows.append(row(name, result, ray_start_s))
    if "serial" in results:
        for entry in rows:
            entry["speedup_vs_serial"] = round(results["serial"].wall_s / results[entry["backend"]].wall_s, 2)
    reference = next(iter(results.values()))
    identical = all(r.points == reference.points and r.frontier == reference.frontier for r in results.values())
    report = {"machine": host, "model": target.card.name, "cluster": target.cluster.spec,
              "engine": str(target.engine), "workload": fixed.name, "rows": rows, "identical_results": identical}
    if args.des_points:
        des_options = SpaceOptions(max_points=args.des_points, include_disaggregated=False, max_spec_depth=0)
        des, _ = run_backend("local", target, parse_workload("agentic"), des_options, cores, args.des_requests)
        report["des"] = row("local (agentic DES)", des, 0.0)
    print(json.dumps(report, indent=1) if args.json else render(report))


def render(report: dict) -> str:
    m = report["machine"]
    lines = [f"machine: {m['cpu']} ({m['cores']} cores), Python {m['python']}, load {m['load_average_1min']}",
             f"sweep: {report['model']} on {report['cluster']} ({report['engine']}), {report['workload']}",
             f"{'backend':<22}{'workers':>8}{'predictions':>12}{'kept':>7}{'frontier':>9}{'wall s':>9}"
             f"{'pred/s':>9}{'ray start s':>12}{'x serial':>9}"]
    for r in report["rows"] + ([report["des"]] if "des" in report else []):
        lines.append(f"{r['backend']:<22}{r['workers']:>8}{r['predictions']:>12}{r['points_kept']:>7}"
                     f"{r['frontier']:>9}{r['wall_s']:>9}{r['predictions_per_s']:>9}{r['ray_start_s']:>12}"
                     f"{r['speedup_vs_serial'] if r['speedup_vs_serial'] is not None else '-':>9}")
    lines.append(f"identical points and frontier across backends: {report['identical_results']}")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
