"""How a search trial's shorter DES replay ranks against the full default (METHOD §5, §6;
`predictor.sim.fidelity`): every distinct priced configuration of one concurrency in a
search's ledger is replayed at each requested length, same seed (the search's common
random numbers), and compared with the longest length of the list on that seed:

- levels: output throughput per GPU and p90 ITL, each replay / the reference - 1 (median
  and 5-95% range over the configurations);
- the SLO: how many configurations land on the other side of a p90 ITL bound;
- ranking: of the pairs whose reference throughputs differ by more than 2%, the share
  the shorter replay orders alike, and whether the reference's best SLO-meeting
  configuration is among the shorter replay's top 5 (what the confirm step re-prices).

The reference on one seed against the reference on another is printed too: the full
default's own seed-to-seed spread, the scale the others are read on.

Run: python benchmarks/bench_fidelity.py [--ledger PATH] --concurrency 16 \
         --requests 640,320 --seeds 0,1,2 [--as-concurrency 32 --limit 60] [--itl-slo 25]
(`--ledger` defaults to the newest in the ledgers directory, e.g. the README's main job.)
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import time
from pathlib import Path

from ledgers.store import list_ledgers
from levers.configuration import Configuration, configuration_from_dict
from predictor.predict import predict
from predictor.target import resolve_target
from predictor.workload import parse_workload

CLOSE = 0.02      # pairs whose reference throughputs are closer than this are not counted
TOP = 5           # the confirm step's pool (agent.fidelity.CONFIRM_TOP)


def configurations(ledger: dict, concurrency: int, as_concurrency: int, limit: int) -> list[Configuration]:
    """The ledger's distinct priced search configurations at ``concurrency``, moved to
    ``as_concurrency``, at most ``limit`` of them spread over the list."""
    seen, found = set(), []
    for trial in ledger["trials"]:
        config = trial["configuration"]
        if (not config or not trial["legal"] or trial["metrics"] is None or trial["confirm_of"] is not None
                or config["concurrency"] != concurrency):
            continue
        key = json.dumps(config, sort_keys=True)
        if key not in seen:
            seen.add(key)
            found.append(configuration_from_dict(dict(config, concurrency=as_concurrency)))
    return found[::max(1, len(found) // limit)][:limit]


def replay(ledger: dict, configs: list[Configuration], requests: int, seed: int) -> list[tuple[float, float]]:
    """(output throughput per GPU, p90 ITL ms) of each configuration."""
    target = resolve_target(ledger["model"], ledger["cluster"], ledger["engine"])
    workload = parse_workload(ledger["workload"])
    rows = []
    for config in configs:
        metrics = predict(target, config, workload, need_distribution=True, seed=seed, num_requests=requests).metrics
        rows.append((metrics["output_throughput_per_gpu"], metrics["itl_ms_p90"]))
    return rows


def quantile(values: list[float], q: float) -> float:
    return sorted(values)[round(q * (len(values) - 1))]


def compare(rows: list[tuple[float, float]], reference: list[tuple[float, float]], slo_ms: float) -> str:
    throughput = [r[0] / f[0] - 1.0 for r, f in zip(rows, reference)]
    itl = [r[1] / f[1] - 1.0 for r, f in zip(rows, reference)]
    across = sum((r[1] <= slo_ms) != (f[1] <= slo_ms) for r, f in zip(rows, reference))
    pairs = [(i, j) for i, j in itertools.combinations(range(len(reference)), 2)
             if abs(reference[i][0] / reference[j][0] - 1.0) > CLOSE]
    alike = sum((rows[i][0] > rows[j][0]) == (reference[i][0] > reference[j][0]) for i, j in pairs)
    meeting = [i for i, f in enumerate(reference) if f[1] <= slo_ms]
    best = max(meeting, key=lambda i: reference[i][0]) if meeting else None
    top = sorted(range(len(rows)), key=lambda i: (rows[i][1] > slo_ms, -rows[i][0]))[:TOP]
    return (f"throughput {statistics.median(throughput):+.1%} [{quantile(throughput, 0.05):+.1%}, "
            f"{quantile(throughput, 0.95):+.1%}], p90 ITL {statistics.median(itl):+.1%} "
            f"[{quantile(itl, 0.05):+.1%}, {quantile(itl, 0.95):+.1%}], across the SLO {across} of {len(rows)}, "
            f"pairs alike {alike / max(1, len(pairs)):.1%} of {len(pairs)}, "
            f"reference best in top {TOP}: {'-' if best is None else best in top}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ledger", type=Path, help="a tune ledger (default: the newest)")
    parser.add_argument("--concurrency", type=int, required=True)
    parser.add_argument("--as-concurrency", type=int, help="replay the configurations at this concurrency")
    parser.add_argument("--requests", required=True, help="comma-separated lengths; the first is the reference")
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--limit", type=int, default=10**6, help="at most this many configurations")
    parser.add_argument("--itl-slo", type=float, default=25.0, help="p90 ITL bound in ms")
    args = parser.parse_args()
    path = args.ledger or list_ledgers()[-1]
    ledger = json.loads(path.read_text())
    configs = configurations(ledger, args.concurrency, args.as_concurrency or args.concurrency, args.limit)
    lengths = [int(n) for n in args.requests.split(",")]
    seeds = [int(s) for s in args.seeds.split(",")]
    print(f"{path.name}: {len(configs)} configurations at {args.as_concurrency or args.concurrency} clients")
    results = {}
    for seed in seeds:
        for length in lengths:
            started = time.process_time()
            results[seed, length] = replay(ledger, configs, length, seed)
            print(f"seed {seed}, {length} requests: {time.process_time() - started:.2f} CPU-s")
    for seed in seeds:
        for length in lengths[1:]:
            print(f"seed {seed}, {length} against {lengths[0]}: "
                  f"{compare(results[seed, length], results[seed, lengths[0]], args.itl_slo)}")
    for first, second in itertools.combinations(seeds, 2):
        print(f"{lengths[0]} requests, seed {second} against seed {first}: "
              f"{compare(results[second, lengths[0]], results[first, lengths[0]], args.itl_slo)}")


if __name__ == "__main__":
    main()
