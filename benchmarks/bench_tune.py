"""Benchmark: wall time of a seed-only search, as a user runs it:

    inferasim tune --model kimi-k3 --objective throughput --slo p90-itl=25 --no-llm

Run as a subprocess with a fresh INFERASIM_HOME (no user cards, anchors or ledgers from
earlier runs) and no LM configured. Baseline, measured in the same run: the same
interpreter starting the CLI and printing `inferasim --help` (imports and start-up
only), so the ratio is the search's cost over the CLI's fixed start-up.

    /work/venv/bin/python benchmarks/bench_tune.py [--repeats 3] [--json] [-- extra tune args]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from bench_predict import machine  # noqa: I001  (same folder)

TUNE_ARGS = ["tune", "--model", "kimi-k3", "--objective", "throughput", "--slo", "p90-itl=25", "--no-llm"]


def cli() -> list[str]:
    """The installed `inferasim` script next to this interpreter, else `python -m`."""
    script = shutil.which("inferasim", path=os.path.dirname(sys.executable))
    return [script] if script else [sys.executable, "-c", "from agent.cli.main import main; main()"]


def timed(command: list[str], home: str, timeout_s: float) -> tuple[float, int | None, str]:
    """(wall seconds, exit code or None when it timed out, output tail)."""
    env = {**os.environ, "INFERASIM_HOME": home}
    env.pop("INFERASIM_LM", None)
    started = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return time.perf_counter() - started, None, f"timed out after {timeout_s:.0f} s"
    return time.perf_counter() - started, done.returncode, (done.stdout + done.stderr)[-600:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--timeout-s", type=float, default=1800.0, help="give up on one tune run after this")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("extra", nargs="*", help="extra arguments appended to the tune command")
    args = parser.parse_args()

    host = machine()   # before the work: its load average is the background load
    base = cli()
    tune, startup = [], []
    codes, tail = set(), ""
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory() as home:
            seconds, _, _ = timed([*base, "--help"], home, args.timeout_s)
            startup.append(seconds)
            seconds, code, tail = timed([*base, *TUNE_ARGS, *args.extra], home, args.timeout_s)
            tune.append(seconds)
            codes.add(code)
    report = {
        "machine": host, "command": "inferasim " + " ".join([*TUNE_ARGS, *args.extra]),
        "exit_codes": ["timeout" if c is None else c for c in sorted(codes, key=lambda c: -1 if c is None else c)],
        "tune_wall_s": [round(t, 2) for t in tune],
        "tune_median_s": round(statistics.median(tune), 2),
        "startup_median_s": round(statistics.median(startup), 2),
        "ratio_tune_vs_startup": round(statistics.median(tune) / statistics.median(startup), 1),
        "output_tail": tail,
    }
    if args.json:
        print(json.dumps(report, indent=1))
        return
    m = report["machine"]
    print(f"machine: {m['cpu']} ({m['cores']} cores), Python {m['python']}, load {m['load_average_1min']}")
    print(f"command: {report['command']}  (exit codes {report['exit_codes']})")
    print(f"tune wall: median {report['tune_median_s']} s over {args.repeats} runs {report['tune_wall_s']}")
    print(f"baseline `inferasim --help`: median {report['startup_median_s']} s; "
          f"tune = {report['ratio_tune_vs_startup']}x the CLI start-up")


if __name__ == "__main__":
    main()
