"""Replay the public agentic coding sessions in the DES at several concurrencies and KV
pool sizes; print the simulated prefix hit rate next to the trace's theoretical reuse,
and p50/p99 TTFT and ITL (METHOD §5, §7).

Theoretical reuse, token-weighted over requests:
- same stream: the longest common prefix with the previous request of the same stream
  (parent or subagent), the statistic of agentic-coding-stats.json;
- any earlier block: the longest leading run of blocks seen earlier in the session (an
  infinite cache: the ceiling for the simulated hit rate).

Run: python scripts/report_agentic_des.py [--sessions DIR] [--model M] [--cluster C]
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import replace
from pathlib import Path

from levers.configuration import Configuration
from predictor.predict import step_model_for
from predictor.sim import load_trace, memory_capacity, simulate
from predictor.target import resolve_target

# The public data folder laid beside the checkout (read-only; build time only).
SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"

DEFAULT_SESSIONS = os.environ.get("INFERASIM_SHARED_TRACES", str(SHARED_DATA / "traces")) + "/agentic-coding"
CONCURRENCIES = (4, 16)
POOL_TOKENS = (1_000_000, 2_000_000, 4_000_000, None)     # None: the memory model's pool


def theoretical_reuse(trace) -> dict[str, float]:
    same = any_block = total = 0
    for session in trace.trace_sessions:
        seen: set[int] = set()
        for spec in session.requests:
            ids = spec.block_ids.tolist()
            if len(spec.deps) == 1:          # the previous request of its stream
                parent = session.requests[spec.deps[0]].block_ids.tolist()
                n = min(len(parent), len(ids))
                common = next((i for i in range(n) if parent[i] != ids[i]), n)
                same += min(common * trace.block_tokens, spec.prompt_tokens)
            run = 0
            while run < len(ids) and ids[run] in seen:
                run += 1
            any_block += min(run * trace.block_tokens, spec.prompt_tokens)
            seen.update(ids)
            total += spec.prompt_tokens
    return {"same_stream": same / total, "any_earlier_block": any_block / total}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", default=DEFAULT_SESSIONS)
    parser.add_argument("--model", default="kimi-linear-48b-a3b")
    parser.add_argument("--cluster", default="mi355x1")
    parser.add_argument("--engine", default="vllm")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    trace = load_trace(Path(args.sessions))
    target = resolve_target(args.model, args.cluster, args.engine)
    memory = memory_capacity(target)
    models = {}

    def factory(config):
        return models.setdefault(config, step_model_for(target, config))

    rows = []
    for pool in POOL_TOKENS:
        def capacity(config, pool=pool):
            full = memory(config)
            return full if pool is None else replace(full, kv_capacity_tokens=pool)
        for concurrency in CONCURRENCIES:
            config = Configuration(concurrency=concurrency)
            result = simulate(target, config, trace, step_model_factory=factory, capacity_model=capacity)
            m = result.metrics
            rows.append({"pool_tokens": capacity(config).kv_capacity_tokens, "concurrency": concurrency,
                         "hit_rate": result.hit_rate["overall"], "ttft_ms_p50": m["ttft_ms_p50"],
                         "ttft_ms_p99": m["ttft_ms_p99"], "itl_ms_p50": m["itl_ms_p50"],
                         "itl_ms_p99": m["itl_ms_p99"], "requests": result.extra["requests_finished"],
                         "sim_wall_s": result.sim_wall_s})
    step_modes = sorted({f"{type(m).__name__} ({m.mode})" for m in models.values()})
    report = {"sessions": len(trace.trace_sessions), "requests": trace.num_requests,
              "target": target.to_json(), "step_model": step_modes,
              "theoretical_reuse": theoretical_reuse(trace), "runs": rows}
    if args.json:
        print(json.dumps(report, indent=1))
        return
    print(f"{report['sessions']} sessions, {report['requests']} requests; {target.to_json()}; step model {step_modes}")
    print(f"theoretical reuse: {json.dumps({k: round(v, 4) for k, v in report['theoretical_reuse'].items()})}")
    print(f"{'pool tokens':>12} {'C':>3} {'hit':>6} {'TTFT p50':>9} {'TTFT p99':>9} {'ITL p50':>8} {'ITL p99':>8} {'wall s':>7}")
    for r in rows:
        print(f"{r['pool_tokens']:>12,} {r['concurrency']:>3} {r['hit_rate']:>6.3f} {r['ttft_ms_p50']:>9.1f} "
              f"{r['ttft_ms_p99']:>9.1f} {r['itl_ms_p50']:>8.2f} {r['itl_ms_p99']:>8.2f} {r['sim_wall_s']:>7.2f}")


if __name__ == "__main__":
    main()
