"""Speed of the discrete-event simulator (METHOD §5; STYLE rule 11), with baselines
measured in the same run.

Cases:
1. Vidur's side-by-side: 1,000 requests of the splitwise_conv trace (lengths from the
   trace, Poisson 4 req/s), one replica, TP1, Llama-3.1-8B on H100, chunked prefill 512
   (512-token budget, Sarathi style), running cap 128. Target <= 0.3 s. (Vidur's own
   event loop takes ~2.7 s for this on this class of machine: shared/data/README.md.)
2. Fixed 1k/1k closed loop, C = 64 clients, 10 x C requests. Target <= 0.1 s.
3. The tuning agent's typical DES trials (`inferasim tune --model kimi-k3`, agentic
   workload, 8x MI355X, vLLM, TP8, simulate mode): 16 clients at the full default (640
   requests), 64 clients at the search's bound (1,024 requests, `agent.fidelity`) and
   1,024 clients at its per-client floor (4,096 requests). Targets 0.1 / 0.4 / 1.5 s.

Baselines, on the same machine and in the same process:
- `heap`: a pure-Python heap loop that pushes and pops one event per simulated engine
  step and does nothing else (the cost of a naive one-event-per-step DES skeleton);
- `token loop`: a naive token-by-token loop that visits every running request at every
  decode step (what skipping decode stretches in bulk avoids).

The step model is the predictor's (`predictor.predict.step_model_for`); if it cannot
be built, the fake linear model of the tests is used and the report says so.

Run: python benchmarks/bench_des.py [--repeats 5] [--json]
"""

from __future__ import annotations

import argparse
import heapq
import json
import statistics
import time
from importlib import resources

from levers.configuration import Configuration
from predictor.sim import load_trace, simulate
from predictor.target import resolve_target
from predictor.workload import WorkloadSpec

TARGET_S = {"vidur_splitwise_1000": 0.3, "fixed_1k1k_c64": 0.1, "agentic_kimi_c16_640": 0.1,
            "agentic_kimi_c64_1024": 0.4, "agentic_kimi_c1024_4096": 1.5}
AGENTIC_TARGET = ("kimi-k3", "mi355x", "vllm")
VIDUR_EVENT_LOOP_S = 2.7


def step_model_factory(target):
    try:
        from predictor.predict import step_model_for

        models = {}

        def factory(config):
            if config not in models:
                models[config] = step_model_for(target, config)
            return models[config]

        factory(Configuration())
        return factory, "predictor.predict.step_model_for"
    except Exception as error:   # noqa: BLE001 - report and fall back, this is a benchmark
        from tests.predictor.sim.sim_fakes import fake_factory

        return fake_factory(), f"fake linear model ({type(error).__name__}: {error})"


def cases():
    trace = load_trace(resources.files("predictor") / "data" / "traces" / "splitwise_conv.csv")
    vidur = Configuration(arrival_rate=4.0, chunked_prefill_size=512, max_batched_tokens=512,
                          max_running_requests=128)
    agentic = WorkloadSpec("agentic")
    return {
        "vidur_splitwise_1000": (vidur, trace, 1000),
        "fixed_1k1k_c64": (Configuration(concurrency=64), WorkloadSpec("fixed", 1024, 1024), 640),
        "agentic_kimi_c16_640": (Configuration(tp=8, concurrency=16), agentic, 640),
        "agentic_kimi_c64_1024": (Configuration(tp=8, concurrency=64), agentic, 1024),
        "agentic_kimi_c1024_4096": (Configuration(tp=8, concurrency=1024), agentic, 4096),
    }


def heap_baseline(num_events: int) -> float:
    started = time.perf_counter()
    heap: list[tuple[float, int]] = []
    clock = 0.0
    for index in range(num_events):
        heapq.heappush(heap, (clock + 1.0, index))
        clock, _ = heapq.heappop(heap)
    return time.perf_counter() - started


def token_loop_baseline(requests: list[tuple[int, int]], cap: int) -> float:
    """Every decode step visits every running request (no bulk skipping, no pricing)."""
    started = time.perf_counter()
    waiting = list(requests)
    running: list[list[int]] = []
    while waiting or running:
        while waiting and len(running) < cap:
            running.append([waiting.pop()[1]])
        for request in running:
            request[0] -= 1
        running = [r for r in running if r[0] > 0]
    return time.perf_counter() - started


def measure(name, target, factory, repeats):
    config, workload, requests = cases()[name]
    times, result = [], None
    for _ in range(repeats):
        started = time.perf_counter()
        result = simulate(target, config, workload, step_model_factory=factory, num_requests=requests)
        times.append(time.perf_counter() - started)
    steps = result.extra["steps"]
    lengths = _lengths(workload, requests, result)
    heap_s = min(heap_baseline(steps) for _ in range(repeats))
    token_s = min(token_loop_baseline(lengths, config.max_running_requests) for _ in range(repeats))
    best = min(times)
    return {
        "case": name, "requests": requests, "engine_steps": steps, "best_s": round(best, 4),
        "median_s": round(statistics.median(times), 4), "target_s": TARGET_S[name],
        "meets_target": best <= TARGET_S[name],
        "heap_baseline_s": round(heap_s, 4), "ratio_to_heap": round(best / heap_s, 2),
        "token_loop_baseline_s": round(token_s, 4), "ratio_to_token_loop": round(best / token_s, 3),
        "ttft_ms_mean": round(result.metrics["ttft_ms_mean"], 3),
        "tpot_ms_mean": round(result.metrics["tpot_ms_mean"], 3),
    }


def _lengths(workload, requests, result):
    if isinstance(workload, WorkloadSpec) and not workload.is_fixed:
        mean_output = result.metrics["output_throughput_fleet"] * result.sim_time_s / max(1, requests)
        return [(0, max(1, round(mean_output)))] * requests
    if isinstance(workload, WorkloadSpec):
        return [(workload.isl, workload.osl)] * requests
    specs = [s.requests[0] for s in workload.trace_sessions[:requests]]
    return [(s.prompt_tokens, s.output_tokens) for s in specs]


def main() -> None:
    parser = argparse.ArgumentParser(description="DES speed benchmark")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--cases", default=",".join(TARGET_S), help="comma-separated case names")
    args = parser.parse_args()
    target = resolve_target("llama-3.1-8b", "h100x1", "vllm")
    factory, model = step_model_factory(target)
    agentic = resolve_target(*AGENTIC_TARGET)
    agentic_factory, _ = step_model_factory(agentic)
    rows = [measure(name, agentic, agentic_factory, args.repeats) if name.startswith("agentic")
            else measure(name, target, factory, args.repeats) for name in args.cases.split(",")]
    report = {"step_model": model, "vidur_event_loop_s_published": VIDUR_EVENT_LOOP_S, "cases": rows}
    if args.json:
        print(json.dumps(report, indent=1))
        return
    print(f"step model: {model}")
    for row in rows:
        verdict = "OK" if row["meets_target"] else "SLOW"
        print(f"{row['case']:22s} best {row['best_s']:.4f} s (median {row['median_s']:.4f}, target "
              f"{row['target_s']} s: {verdict}); {row['engine_steps']} engine steps; heap baseline "
              f"{row['heap_baseline_s']:.4f} s (x{row['ratio_to_heap']}); token loop {row['token_loop_baseline_s']:.4f} s "
              f"(x{row['ratio_to_token_loop']})")
    vidur = next((row["best_s"] for row in rows if row["case"] == "vidur_splitwise_1000"), None)
    if vidur:
        print(f"vidur's published event loop for case 1: ~{VIDUR_EVENT_LOOP_S} s "
              f"(x{VIDUR_EVENT_LOOP_S / vidur:.0f} slower)")


if __name__ == "__main__":
    main()
