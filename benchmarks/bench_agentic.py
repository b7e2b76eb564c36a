"""Benchmark: the DES on agentic traffic against the code before issue 13, in one run.

Three jobs, each run as a fresh subprocess (own imports, fresh INFERASIM_HOME, no LM)
alternately on the current checkout and on a *baseline checkout* of the old commit,
timed by wall clock and by the child's CPU seconds (user + system, from
``getrusage(RUSAGE_CHILDREN)``: what one core spends, whatever else the machine runs):

- main: the README's job, ``inferasim tune --model kimi-k3 --objective throughput
  --slo p90-itl=25 --no-llm --workers 1`` (300 trials, agentic DES per trial; target
  <= 30 CPU-s);
- disagg512: a 512-client agentic prediction of a 32-GPU disaggregated Kimi-K3 on
  gb300x4x8 (SGLang): 2 prefill replicas TP8/EP8 and one decode DEP16 pool (the
  stand-in for configuration B: four TP4 prefill replicas do not fit Kimi-K3's weights
  without DWDP), default fidelity, one replication (target <= 3 s on one core), and the
  current default of 3 replications;
- deployment_b: issue 13's deployment B as shipped in ``examples/`` (DWDP16 prefill,
  DEP16 decode, shared host pool, 512 clients), one and the default 3 replications; on
  the baseline too when its checkout ships the example (``fc2f303`` cannot express it:
  then its ratio is to the baseline's stand-in run);
- pareto: ``inferasim pareto --model kimi-k3 --workload agentic --max-points N
  --workers 2`` predictions per second (target >= 1 on 2 cores).

Then, on the current code only, the speed work's effect on results: the fast path
(merged runs, fitted and cached step prices) against its exact reference
(``SimOptions(exact_prices=True)``: one event per step, every step priced by the step
model) on a fixed set of configurations, as relative differences.

Make the baseline checkout once:  git worktree add /tmp/inferasim-base fc2f303

    python benchmarks/bench_agentic.py --baseline /tmp/inferasim-base [--repeats 1] [--json]
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

from bench_predict import machine  # noqa: I001  (same folder)

ROOT = Path(__file__).resolve().parent.parent
DISAGG = ("disaggregated=true,prefill_layout=TP8/EP8/DP1,prefill_replicas=2,"
          "decode_layout=TP16/EP16/DP16,decode_replicas=1,concurrency=512")
JOBS = {
    "main": ["tune", "--model", "kimi-k3", "--objective", "throughput", "--slo", "p90-itl=25", "--no-llm",
             "--workers", "1", "--json"],
    "disagg512": ["predict", "--model", "kimi-k3", "--cluster", "gb300x4x8", "--engine", "sglang",
                  "--config", DISAGG, "--workload", "agentic", "--json"],
}
ONE_REPLICATION = ["--replications", "1"]      # the current code's option (the baseline has one)
#: deployment B of issue 13 as shipped (examples/): the baseline cannot express DWDP, so
#: this job runs on the current checkout only (its ratio is to the stand-in above)
DEPLOYMENT_B = ROOT / "examples" / "kimi-k3-gb300-dwdp16-dep16.txt"
FIDELITY_CASES = (   # (model, cluster, engine, levers, requests)
    ("kimi-k3", "mi355x", "vllm", "tp=8,spec_method=ngram,spec_depth=2,concurrency=16", 640),
    ("kimi-k3", "mi355x", "vllm", "tp=8,concurrency=64", 1024),
    ("kimi-k3", "mi355x", "vllm", "tp=8,ep=8,concurrency=128", 1024),
    ("deepseek-r1", "mi355x", "sglang", "tp=8,concurrency=32", 1024),
    ("kimi-k3", "gb300x4x8", "sglang", DISAGG.replace("concurrency=512", "concurrency=128"), 2048),
)
FIDELITY_KEYS = ("output_throughput_per_gpu", "throughput_per_gpu", "ttft_ms_mean", "tpot_ms_mean",
                 "itl_ms_p90", "e2e_ms_mean")


def run(checkout: Path, args: list[str], timeout_s: float) -> dict:
    """One CLI run on ``checkout``: wall and CPU seconds, exit code, parsed JSON tail."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    env.pop("INFERASIM_LM", None)
    with tempfile.TemporaryDirectory() as home:
        env["INFERASIM_HOME"] = home
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        command = [sys.executable, "-c", "from agent.cli.main import main; main()", *args]
        try:
            done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout_s,
                                  cwd=checkout)
            code, out = done.returncode, done.stdout
        except subprocess.TimeoutExpired:
            code, out = None, ""
        wall = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    try:
        data = json.loads(out[out.index("{"):])
    except ValueError:
        data = {}
    return {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "exit": code, "data": data}


def summary(job: str, data: dict) -> dict:
    """The figures of a run's JSON worth showing next to its time."""
    if job == "main":
        best = data.get("best") or {}
        metrics = best.get("metrics") or {}
        return {"trials": data.get("num_trials"), "best_concurrency": (best.get("configuration") or {}).get("concurrency"),
                "output_tok_s_gpu": metrics.get("output_throughput_per_gpu"), "itl_p90_ms": metrics.get("itl_ms_p90")}
    if job.startswith("disagg") or job == "deployment_b":
        metrics = data.get("all_metrics") or {}
        return {k: metrics.get(k) for k in ("output_throughput_per_gpu", "ttft_ms_mean", "itl_ms_p90")}
    return {"points_per_s": data.get("points_per_s"), "num_priced": data.get("num_priced"),
            "wall_s": data.get("wall_s")}


def speed(baseline: Path, repeats: int, pareto_points: int, timeout_s: float, only: set[str] | None = None) -> dict:
    jobs = dict(JOBS)
    jobs["pareto"] = ["pareto", "--model", "kimi-k3", "--workload", "agentic", "--max-points", str(pareto_points),
                      "--workers", "2", "--no-plot", "--json"]
    if DEPLOYMENT_B.is_file():
        jobs["deployment_b"] = ["predict", *DEPLOYMENT_B.read_text().split(), "--json"]
    if only:
        jobs = {job: args for job, args in jobs.items() if job in only or (job == "disagg512" and "deployment_b" in only)}
    report: dict = {}
    # a baseline with --replications (after fc2f303) runs one replication too, like for like
    base_one = ONE_REPLICATION if "--replications" in (baseline / "agent" / "cli" / "predict.py").read_text() else []
    for job, args in jobs.items():
        replicated = job in ("disagg512", "deployment_b")
        variants = {"baseline": (baseline, args + (base_one if replicated else [])),
                    "current": (ROOT, args + (ONE_REPLICATION if replicated else []))}
        if job == "deployment_b":
            variants = {"current": variants["current"], "current_3_replications": (ROOT, args)}
            if (baseline / "examples" / DEPLOYMENT_B.name).is_file():      # a baseline that expresses B
                variants = {"baseline": (baseline, args + base_one), **variants}
        if replicated:
            variants["current_3_replications"] = (ROOT, args)
            if base_one and "baseline" in variants:
                variants["baseline_3_replications"] = (baseline, args)
        if job == "pareto":
            variants["current"] = (ROOT, args + ["--out", tempfile.mkdtemp()])
            variants["baseline"] = (baseline, args + ["--out", tempfile.mkdtemp()])
        runs: dict[str, list[dict]] = {name: [] for name in variants}
        for _ in range(repeats):
            for name, (checkout, command) in variants.items():   # alternate: the same background load
                runs[name].append(run(checkout, command, timeout_s))
        report[job] = {name: {"cpu_s": statistics.median(r["cpu_s"] for r in results),
                              "wall_s": statistics.median(r["wall_s"] for r in results),
                              "exit": [r["exit"] for r in results], "result": summary(job, results[-1]["data"])}
                       for name, results in runs.items()}
        for name, figures in report[job].items():
            base = report[job].get("baseline") or report["disagg512"]["baseline"]
            if name.endswith("_3_replications") and "baseline_3_replications" in report[job]:
                base = report[job]["baseline_3_replications"]      # like for like
            figures["cpu_ratio_to_baseline"] = round(figures["cpu_s"] / base["cpu_s"], 3) if base["cpu_s"] else None
    return report


def fidelity() -> list[dict]:
    """Fast path against the exact reference on fixed configurations (current code)."""
    sys.path.insert(0, str(ROOT))
    from levers.configuration import Configuration, parse_config_text
    from predictor.predict import step_model_for
    from predictor.sim import SimOptions, simulate
    from predictor.sim.reuse import STORE
    from predictor.target import resolve_target
    from predictor.workload import AGENTIC

    rows = []
    for model, cluster, engine, levers, requests in FIDELITY_CASES:
        target = resolve_target(model, cluster, engine)
        config = Configuration().with_changes(parse_config_text(levers))
        results = {}
        for exact in (True, False, True):          # the first run warms the process (sessions, imports)
            models: dict = {}

            def factory(replica_config, models=models):
                return models.setdefault(replica_config, step_model_for(target, replica_config))
            STORE.clear()                          # each run replayed, not reused (predictor.sim.reuse)
            started = time.process_time()
            result = simulate(target, config, AGENTIC, step_model_factory=factory, num_requests=requests,
                              options=SimOptions(exact_prices=exact))
            results[exact] = (result, time.process_time() - started)
        (fast, fast_s), (exact_result, exact_s) = results[False], results[True]
        differences = {key: round(fast.metrics[key] / exact_result.metrics[key] - 1.0, 5)
                       for key in FIDELITY_KEYS if exact_result.metrics.get(key)}
        rows.append({"case": f"{model} {cluster} {engine} {levers}", "requests": requests,
                     "relative_difference": differences,
                     "hit_rate_difference": round(fast.hit_rate["overall"] - exact_result.hit_rate["overall"], 5),
                     "engine_steps": [fast.extra["steps"], exact_result.extra["steps"]],
                     "cpu_s": [round(fast_s, 3), round(exact_s, 3)]})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, required=True, help="a checkout of the old commit (see above)")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--pareto-points", type=int, default=48)
    parser.add_argument("--timeout-s", type=float, default=3600.0)
    parser.add_argument("--skip-speed", action="store_true", help="only the fast-vs-exact result check")
    parser.add_argument("--jobs", help="comma-separated subset of main,disagg512,deployment_b,pareto")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    host = machine()
    report = {"machine": host, "baseline": str(args.baseline)}
    if not args.skip_speed:
        only = set(args.jobs.split(",")) if args.jobs else None
        report["speed"] = speed(args.baseline.resolve(), args.repeats, args.pareto_points, args.timeout_s, only)
    report["fidelity"] = fidelity()
    report["load_average_1min_end"] = round(os.getloadavg()[0], 2)
    if args.json:
        print(json.dumps(report, indent=1))
        return
    print(f"machine: {host['cpu']} ({host['cores']} cores), load {host['load_average_1min']} at start, "
          f"{report['load_average_1min_end']} at end")
    for job, variants in report.get("speed", {}).items():
        for name, figures in variants.items():
            print(f"{job:10s} {name:24s} cpu {figures['cpu_s']:8.2f} s  wall {figures['wall_s']:8.2f} s  "
                  f"ratio {figures['cpu_ratio_to_baseline']}  exit {figures['exit']}  {figures['result']}")
    for row in report["fidelity"]:
        print(f"fast vs exact  {row['case']}: {row['relative_difference']} hit {row['hit_rate_difference']:+} "
              f"steps {row['engine_steps']} cpu fast/exact {row['cpu_s']}")


if __name__ == "__main__":
    main()
