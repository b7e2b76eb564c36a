"""The closed loop on a real engine (marker `engine`): harvest an anchor from llama.cpp's
server on this CPU (SmolLM2-135M), predict four configurations the anchor did not
measure with the analytical model and the DES, run each for real with the harvester's
client, and compare (METHOD §2, §4, §5).

    INFERASIM_HARVEST_REPORT=/tmp/closed-loop.json \
        .venv/bin/python -m pytest -p no:xdist -m engine tests/predictor/harvest/test_engine_harvest.py -s

llama-cpp-python's server (0.3.36) has no parallel slots: it serves one request at a
time and queues the rest. The harvest shows it (the decode waves at batch 2..8 never
ran together and are flagged `serialised-decode`, so the anchor keeps batch 1), and the
predictions model it with the levers: `max_running_requests=1` (the engine's own cap,
which the DES's llamacpp profile also applies), prefix caching off (unique prompts).

Points (none measured by the harvest): a prompt length between the sweep's (384), an
output length 4x the sweep's (128), a closed loop of 4 clients, and 16 clients, twice
the widest decode wave. Every request decodes at least the harvest's 32-token wave: on
this guest the first gaps after a prefill can be slow (2026-12-05 02:26, one engine
thread, prompt 64, medians over 12 requests by position: 19.7, 19.5, 18.6, 17.2, 15.4 ms,
then 13-15 ms; at 02:48 every position measured 19.4-20.7 ms: the host's speed, not the
engine's), so a 16-token request's median gap can read that ramp where a wave's does not. A CI
run on e7eea89 failed on it: the own point (then 16 tokens) measured its TPOT 8-35% above
the anchor's on every try while the 32- and 128-token points matched it within 3% raw,
so its speed put the output-128 point's TPOT 23% high. Tolerances (bounds on predicted /
measured - 1) are stated below with their reasons; docs/SCORES.md keeps the measured table.

The machine's speed is not the harvest's: on a machine shared with other work it moves
by 20-40% within minutes (a CI run measured it, an idle machine too), and one request's
TPOT by +-15% from the next (2026-12-02: 9.5-20 ms over 120 requests in 106 s on an idle
EPYC guest). So the points run in rounds: a round runs the anchor's own point, then each
point followed by the own point again, so every point is bracketed by two own runs, and
each try of a point is compared at the machine's speed while it ran: TTFT and TPOT
predictions are scaled by the own point's measured / predicted TTFT and TPOT (the
geometric mean of the two runs), and throughput by a request's time at those speeds.
That cancels the machine's speed and leaves the model's transfer error, (predicted point
/ predicted own) / (measured point / measured own) - 1. A try is kept when its two own
runs agree (TPOT and TTFT within STABLE: the speed held while it ran); a point's error is
the median over its kept tries (ROUNDS rounds, more up to MAX_ROUNDS while a point has
fewer than HELD kept tries), so one try's noise (a CI run on 97087ce had one 4-client try
27% off while its two own runs agreed within 2%) is not the figure. When a point still
has too few, or a point misses its tolerance, the attempt is redone from a fresh harvest (at
most ATTEMPTS; each printed), and the last attempt is the one judged: a harvest's sweep is
measured on this machine too, and its noise carries into a point that extrapolates it (a CI
run on cfa4b3b: every point within tolerance but the prompt-384 TPOT, +14.6% raw, +28.3% at
the own point's speed, on the context slope of batch 1's two prompt lengths). The
own point's error itself (the drift) is reported, not bounded: it is the machine, not
the model (the anchor measured that point; the offline suite checks the fit). The raw
errors (at the harvest's speed) are kept in the report and the table beside the
compared ones.
Where it may (root, or a raised RLIMIT_NICE), the test runs at niceness PRIORITY, so the
engine and the client it starts take the cores ahead of other work for its few minutes.
Set INFERASIM_GGUF to another .gguf file (default: where `scripts/local_llm.sh setup`
puts it) and INFERASIM_HARVEST_REPORT to keep the figures (last attempt) as JSON.
"""

import json
import math
import os
import random
import statistics
from pathlib import Path

import pytest

from predictor.anchors.store import load_anchor_file
from predictor.harvest import harvester
from predictor.harvest.client import OpenAIStreamClient
from predictor.harvest.harvester import run_harvest
from predictor.harvest.loop import LoopFigures, LoopPoint, measure_loop, predict_loop
from predictor.harvest.plan import HarvestRequest, plan_harvest
from predictor.harvest.process import EngineProcess, group_alive
from predictor.harvest.prompts import PromptFactory
from predictor.target import Target

pytestmark = pytest.mark.engine

GGUF = Path(os.environ.get("INFERASIM_GGUF", Path(os.environ.get("INFERASIM_CACHE", "~/.cache/inferasim"))
                           / "SmolLM2-135M-Instruct.Q4_1.gguf")).expanduser()
THREADS = 1                          # one engine thread: the client and the OS keep the other core
# The harvest's decode waves: 32 tokens, five waves a batch (the CPU default is three).
# The prompt-384 point's TPOT is the context slope of batch 1's two prompt lengths carried
# 1.7x beyond the longer one, so their noise is its noise: with 16-token waves, three a
# batch, a CI run on 8898b8a priced it 24% high at the machine's speed (the other points
# within 10%), one of the runs before 18% low.
HARVEST_DECODE_TOKENS, HARVEST_WAVES = 32, 5
# Every request decodes at least a wave's 32 tokens: the first 5-10 gaps after a prefill can be
# slow here (module docstring), and a 16-token request's median gap reads them.
POINTS = (
    LoopPoint("prompt 384 (sweep 64, 256)", clients=1, requests_per_client=6, prompt_tokens=384, output_tokens=32),
    LoopPoint("output 128 (sweep 32)", clients=1, requests_per_client=4, prompt_tokens=64, output_tokens=128),
    LoopPoint("closed loop, 4 clients", clients=4, requests_per_client=3, prompt_tokens=128, output_tokens=32),
    LoopPoint("16 clients (waves to 8)", clients=16, requests_per_client=2, prompt_tokens=64, output_tokens=32),
)
# Bounds on the speed-matched error (module docstring), predicted / measured - 1 at the
# machine's speed while the point ran: the TPOT +-20% and TTFT +-30%; throughput
# the 20% below and 40% above, since a 32-token request's rate follows its TTFT
# and the model's error there was a TTFT low before a harvest's prefill sweep was carried
# between its lengths (the prompt-384 point: a TTFT 30% low is a rate 33% high;
# docs/SCORES.md). One long prefill on this VM varies by up to +-30%
# from request to request (a 256-token prompt: 2.6-4.9 s, 2026-12-01), so the prompt-384
# point runs six requests (five timed) a try. Throughput is matched through a request's
# time at the two speeds (`at_speed`).
TOLERANCE = {"tpot_ms": (-0.20, 0.20), "ttft_ms": (-0.30, 0.30), "output_tokens_per_s": (-0.20, 0.40)}
SPEED_KEYS = ("tpot_ms", "ttft_ms")  # the machine's speed, per latency (throughput follows from both)
COLUMNS = ("ttft_ms", "tpot_ms", "output_tokens_per_s")
STABLE = 0.20                        # the two own runs around a try agree within this (after / before - 1)
# Run first in a round and after each point: the anchor's own point again (module docstring), six
# requests (five timed: 155 decode gaps, five prefills) so that the speed it measures is not its noise;
# a wave's tokens, so that its TPOT is what the anchor measured (a wave's median gap).
OWN = LoopPoint("the anchor's own point", clients=1, requests_per_client=6, prompt_tokens=64,
                output_tokens=HARVEST_DECODE_TOKENS)
ROUNDS = 3                           # every point once a round, on one harvest
MAX_ROUNDS = 4                       # more rounds while a point has fewer than HELD kept tries
HELD = 2                             # kept tries (the speed held), per point, for its median error
ATTEMPTS = 2                         # harvests, 4.4-5.9 min each with the rounds on an idle 2-core EPYC guest
PRIORITY = -10                       # niceness: ~9x the CPU share of a default process


@pytest.fixture
def priority():
    """This thread (and every thread and process it starts) at niceness PRIORITY while
    the test runs, where the OS allows it (module docstring)."""
    before = os.getpriority(os.PRIO_PROCESS, 0)
    try:
        os.setpriority(os.PRIO_PROCESS, 0, PRIORITY)
    except PermissionError:
        yield before
        return
    try:
        yield PRIORITY
    finally:
        os.setpriority(os.PRIO_PROCESS, 0, before)


@pytest.fixture(scope="module")
def gguf():
    pytest.importorskip("llama_cpp.server", reason="install the local extra: scripts/local_llm.sh setup")
    if not GGUF.is_file():
        pytest.skip(f"{GGUF} not found (scripts/local_llm.sh setup fetches it)")
    return GGUF



def harvested(gguf, tmp_path, monkeypatch):
    plan = plan_harvest(HarvestRequest(
        engine="llamacpp", model=str(gguf), cluster="cpu", config_text="tp=1", threads=THREADS, prompt_tokens=64,
        second_prompt_tokens=256, decode_tokens=HARVEST_DECODE_TOKENS, waves_per_batch=HARVEST_WAVES,
        prefill_lengths=(32, 64, 128, 256, 512), repeats=3, probe_seqs=4, probe_tokens=128, ready_timeout_s=120.0))
    started = []

    class Recording(harvester.EngineProcess):
        def start(self) -> None:
            super().start()
            started.append(self)

    monkeypatch.setattr(harvester, "EngineProcess", Recording)
    report = run_harvest(plan, directory=tmp_path / "anchors", log_path=tmp_path / "harvest.log")
    assert len(started) == 1 and not group_alive(started[0].pid)
    return plan, report


def speed(own, runs) -> dict[str, float]:
    """Per latency, the anchor's own point's measured / predicted over its runs around a
    point (geometric mean): the machine's speed now against the harvest's, as a time
    ratio (above 1: slower than at the harvest)."""
    return {key: math.prod(getattr(run, key) for run in runs) ** (1.0 / len(runs)) / getattr(own, key)
            for key in SPEED_KEYS}


def at_speed(predicted: LoopFigures, now: dict[str, float], point: LoopPoint) -> LoopFigures:
    """``predicted`` at the machine's speed now: TTFT and TPOT scaled by their own speeds,
    throughput by a request's time, TTFT + (output - 1) TPOT, at those speeds. With
    clients queued, TTFT is mostly others' prefill and decode, all scaled at the prefill's
    speed: an approximation that holds while the two speeds agree (they differed by up
    to 0.3 around the queued points on 2026-12-01)."""
    ttft, tpot = predicted.ttft_ms * now["ttft_ms"], predicted.tpot_ms * now["tpot_ms"]
    decode = point.output_tokens - 1
    slower = (ttft + decode * tpot) / (predicted.ttft_ms + decode * predicted.tpot_ms)
    return LoopFigures(ttft, tpot, predicted.output_tokens_per_s / slower, predicted.mode)


def within(key, value) -> bool:
    low, high = TOLERANCE[key]
    return low <= value <= high


def swing(runs) -> float:
    """How far the own point's two runs around a point disagree (the larger of TPOT's and
    TTFT's |after / before - 1|): how far the speed moved while the point ran."""
    before, after = runs
    return max(abs(getattr(after, key) / getattr(before, key) - 1.0) for key in SPEED_KEYS)


def drifts(own, runs) -> list[dict[str, float]]:
    """The own point's TPOT and TTFT errors (predicted / measured - 1) before and after."""
    return [{key: round(error(own, run, key), 3) for key in SPEED_KEYS} for run in runs]


def kept(tries) -> list[dict]:
    """The tries whose speed held (their two own runs agree within STABLE)."""
    return [t for t in tries if t["swing"] <= STABLE]


def held(row) -> bool:
    """The point has HELD kept tries: its median error is not one try's noise."""
    return len(kept(row["tries"])) >= HELD


def rounds(client, factory):
    """Each point's tries, each a (figures, (own before, own after)): a round runs the own
    point, then every point followed by the own point (module docstring); ROUNDS rounds,
    more up to MAX_ROUNDS while a point has fewer than HELD tries whose speed held."""
    tries: list[list] = [[] for _ in POINTS]
    for done in range(MAX_ROUNDS):
        if done >= ROUNDS and all(sum(swing(runs) <= STABLE for _, runs in per) >= HELD for per in tries):
            break
        before = measure_loop(client, factory, OWN)
        for per, point in zip(tries, POINTS):
            figures, after = measure_loop(client, factory, point), measure_loop(client, factory, OWN)
            per.append((figures, (before, after)))
            before = after
    return tries


def measured_points(plan, tmp_path):
    base = f"http://{plan.launch_request.host}:{plan.launch_request.port}"
    client = OpenAIStreamClient(base, plan.served_name, extras=plan.adapter.request_extras(plan.eos_token_id),
                                tokenize_path=plan.adapter.tokenize_path, tokenize_body=plan.adapter.tokenize_body)
    with client, EngineProcess(plan.launch.argv, ready=lambda: client.is_up(plan.adapter.health_path),
                               timeout_s=120.0, log_path=tmp_path / "loop.log") as engine:
        factory = PromptFactory(random.Random(7), client.tokenize_count)
        client.stream(factory.make(64).text, 4)                                      # warm-up
        measured = rounds(client, factory)
    assert not group_alive(engine.pid)
    return measured


def error(predicted, measured, key):
    return getattr(predicted, key) / getattr(measured, key) - 1.0


def medians(tries, field) -> dict[str, float]:
    """Per numeric key, the median of ``field`` over ``tries``."""
    return {key: statistics.median(t[field][key] for t in tries) for key, value in tries[0][field].items()
            if isinstance(value, float)}


def table(rows):
    lines = ["| point | model | TTFT ms | TPOT ms | output tok/s | TTFT err | TPOT err | tok/s err | kept tries |",
             "|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        m, v = row["measured"], row["speed"]
        lines.append(f"| {row['point']['name']} | measured (speed {v['ttft_ms']:.2f} / {v['tpot_ms']:.2f}) | "
                     f"{m['ttft_ms']:.0f} | {m['tpot_ms']:.2f} | "
                     f"{m['output_tokens_per_s']:.2f} | | | | {len(kept(row['tries']))} of {len(row['tries'])} |")
        for model in ("analytical", "des"):
            p, e, r = row[model], row[f"{model}_error"], row[f"{model}_raw_error"]
            lines.append(f"| | {model} | {p['ttft_ms']:.0f} | {p['tpot_ms']:.2f} | {p['output_tokens_per_s']:.2f} | "
                         + " | ".join(f"{e[key]:+.1%} (raw {r[key]:+.1%})" for key in COLUMNS) + " | |")
    return "\n".join(lines)


def compared(point, predictions, own, tries) -> dict:
    """A point's row: each try at its own speed, and the medians over the kept tries
    (over every try when none was kept, for the report only: `held` fails the row)."""
    row = {"point": point.to_json(), "tries": []}
    for figures, runs in tries:
        now = speed(own, runs)
        one = {"measured": figures.to_json(), "own": [run.to_json() for run in runs],
               "speed": {key: round(value, 3) for key, value in now.items()}, "drift": drifts(own, runs),
               "swing": swing(runs)}
        for model, predicted in predictions.items():
            one[f"{model}_raw_error"] = {key: error(predicted, figures, key) for key in TOLERANCE}
            one[f"{model}_error"] = {key: error(at_speed(predicted, now, point), figures, key) for key in TOLERANCE}
        row["tries"].append(one)
    basis = kept(row["tries"]) or row["tries"]
    row["measured"], row["speed"] = medians(basis, "measured"), medians(basis, "speed")
    for model, predicted in predictions.items():
        row[model] = predicted.to_json()
        row[f"{model}_error"], row[f"{model}_raw_error"] = medians(basis, f"{model}_error"), \
            medians(basis, f"{model}_raw_error")
    return row


def closed_loop(gguf, tmp_path, monkeypatch):
    """One attempt: harvest, check the anchor, run and predict every point."""
    plan, report = harvested(gguf, tmp_path, monkeypatch)
    anchor = load_anchor_file(report.path)
    assert anchor == report.anchor
    # one request at a time: every wave above batch 1 serialised, flagged, left out
    assert {"serialised-decode", "serialised-probe"} <= set(anchor.flags)
    assert anchor.decode_sweep.batch_sizes == (1,) and not anchor.decode_sweep.is_full_sweep
    assert [w.batch for w in report.measurements.waves] == [1, 2, 4, 8]
    assert all(w.serialised for w in report.measurements.waves[1:])
    assert anchor.prefill_sweep.prompt_tokens == (32, 64, 128, 256, 512)
    assert anchor.signature.engine_version.startswith("llama_cpp_python==")
    assert anchor.provenance.real_weights and anchor.provenance.command_line.startswith(plan.launch.argv[0])

    target = Target(plan.card, plan.cluster, plan.engine)
    config = plan.config.with_changes({"max_running_requests": 1, "prefix_cache": "off"})
    own = predict_loop(target, config, anchor, OWN, des=False)
    rows = []
    for point, tries in zip(POINTS, measured_points(plan, tmp_path)):
        predictions = {model: predict_loop(target, config, anchor, point, des=des)
                       for model, des in (("analytical", False), ("des", True))}
        assert all(p.mode == "anchored" for p in predictions.values()), point.name
        rows.append(compared(point, predictions, own, tries))
    return anchor, rows


def test_harvest_predict_measure_compare(gguf, priority, tmp_path, monkeypatch):
    for attempt in range(1, ATTEMPTS + 1):
        anchor, rows = closed_loop(gguf, tmp_path / f"attempt-{attempt}", monkeypatch)
        summary = [(row["point"]["name"], [t["drift"] for t in row["tries"]]) for row in rows]
        print(f"\nattempt {attempt} of {ATTEMPTS} (niceness {priority}); per point, each try's own point's "
              f"error before/after {summary}; median errors over kept tries at the own point's speed, raw at "
              "the harvest's\n" + table(rows))
        if all(held(row) for row in rows) and not misses(rows):
            break
    if os.environ.get("INFERASIM_HARVEST_REPORT"):
        Path(os.environ["INFERASIM_HARVEST_REPORT"]).write_text(json.dumps(
            {"anchor": json.loads(anchor.model_dump_json()), "tolerance": TOLERANCE, "stable": STABLE,
             "held": HELD, "attempts": attempt, "points": rows}, indent=1))
    assert all(held(row) for row in rows), \
        f"fewer than {HELD} tries of a point had the machine's speed hold within {STABLE:.0%}, on each of " \
        f"{ATTEMPTS} harvests (at most {MAX_ROUNDS} rounds; each try's own point's error before and after: " \
        f"{summary}): rerun on a quieter machine"
    missed = misses(rows)
    assert not missed, \
        f"outside {TOLERANCE} at the own point's speed (median over kept tries), on each of {ATTEMPTS} " \
        f"harvests; the last: {missed} (each try's own point before/after: {summary})"


def misses(rows) -> list[tuple]:
    """(point, model, metric, error) of every compared error outside its `TOLERANCE`."""
    return [(row["point"]["name"], model, key, round(row[f"{model}_error"][key], 3))
            for row in rows for model in ("analytical", "des") for key in TOLERANCE
            if not within(key, row[f"{model}_error"][key])]
