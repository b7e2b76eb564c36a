"""What a simulation measured: latency distributions, throughput, hit rates (METHOD §5, §8).

Per request: TTFT from arrival (what users see) and from admission (what engine
benchmarks report), TPOT = (end - first token) / (output - 1), interactivity =
1000 / TPOT (its tail quantiles the slow tail: ``interactivity_p90`` is the speed 90% of
users reach), end-to-end; host time (METHOD §3.12) is added to TTFT and end-to-end.
ITL samples are step gaps weighted by the requests that waited them, so a stretch of
identical steps is one sample. Statistics: mean, p50, p90, p95, p99, p99.9.

Steady state: a closed loop measures the requests that are not warm-up, and throughput
from token counters over the window from the warm-up's end to the last completion (the
drain included, as a benchmark's clock runs until its last response); an open loop
measures everything from the first arrival. Warm-up: a fixed closed loop's first request
per client; a warm-started session replay's opening turns (AgentX: each client's first
session starts 25-75% of the way in, its long context uncached) and every request that
arrives before the last of them ends. Deployment B's opening turns are 512 prompts of
~100k uncached tokens: measured, they held the first 459 s of a 2,188 s replay at ~13
output tok/s/GPU against ~140 after, so the figure grew with the replay's length. Metric keys follow
`objectives.objectives.METRIC_KEYS` so objectives and SLOs read them directly.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from predictor.files import atomic_write
from predictor.sim.pricing import StepShape
from predictor.sim.request import Request
from predictor.units import MS_PER_S, US_PER_MS, US_PER_S

WARMUP_ONLY_FLAG = "warm-up only"   # the flag of a replay too short to measure past its warm-up
SHORT_REPLAY_FLAG = "short replay"   # the flag of a replay whose window after the warm-up missed most prompts
STATS = ("mean", "p50", "p90", "p95", "p99", "p999")
QUANTILES = {"p50": 50.0, "p90": 90.0, "p95": 95.0, "p99": 99.0, "p999": 99.9}
JSON_STATS = ("mean", "p50", "p90", "p99", "p999")


class Recorder:
    """Counters the replicas report into while the simulation runs."""

    def __init__(self) -> None:
        self.itl_values: list[float] = []
        self.itl_weights: list[float] = []
        # per ITL threshold (ms): [values counted, weight at or below it, all weight]
        self.itl_counts: dict[float, list] = {}
        self.input_tokens = 0.0
        self.output_tokens = 0.0
        self.decode_steps = 0
        self.decode_us = 0.0
        self.mixed_steps = 0            # steps that advanced decoders while prefilling
        self.stall_steps = 0            # prefill work while requests were decoding (mixed or not)
        self.stall_us = 0.0
        self.total_steps = 0
        self.decode_batch_steps = 0.0   # sum over decoding steps of the replica decode batch
        self.decoding_steps = 0
        self.decode_context_steps = 0.0  # ... and of its mean decode context
        self.prefill_tokens_steps = 0.0  # sum over prefill-carrying steps of the replica's prefill tokens
        self.prefill_steps = 0

    def itl(self, value_us: float, weight: float) -> None:
        self.itl_values.append(value_us)
        self.itl_weights.append(weight)

    def count_tokens(self, input_tokens: float, output_tokens: float) -> None:
        self.input_tokens += input_tokens
        self.output_tokens += output_tokens

    def step(self, kind: str, num_steps: int, duration_us: float, stalls_decoders: bool,
             shape: StepShape | None = None) -> None:
        self.total_steps += num_steps
        if kind == "decode":
            self.decode_steps += num_steps
            self.decode_us += duration_us
        elif stalls_decoders:
            self.stall_steps += num_steps
            self.stall_us += duration_us
            self.mixed_steps += num_steps if kind == "mixed" else 0
        if shape is not None:
            if shape.decode_batch and (kind != "prefill" or not shape.prefill_tokens):
                self.decode_batch_steps += shape.decode_batch * num_steps
                self.decode_context_steps += shape.context_tokens * num_steps
                self.decoding_steps += num_steps
            if shape.prefill_tokens:
                self.prefill_tokens_steps += shape.prefill_tokens * num_steps
                self.prefill_steps += num_steps

    def step_means(self) -> dict[str, float]:
        """Mean replica decode batch, decode context and prefill tokens per step (the
        communication metrics' load)."""
        decoding, prefilling = max(1, self.decoding_steps), max(1, self.prefill_steps)
        return {"mean_decode_batch": self.decode_batch_steps / decoding,
                "mean_decode_context_tokens": self.decode_context_steps / decoding,
                "mean_prefill_tokens": self.prefill_tokens_steps / prefilling}

    def snapshot(self, now_us: float) -> tuple[float, float, float]:
        return now_us, self.input_tokens, self.output_tokens


def _stats(values: np.ndarray, weights: np.ndarray | None = None) -> dict[str, float]:
    if values.size == 0:
        return {stat: float("nan") for stat in STATS}
    if weights is None:
        out = {"mean": float(values.mean())}
        points = np.percentile(values, list(QUANTILES.values()))
        out.update({k: float(v) for k, v in zip(QUANTILES, points)})
        return out
    order = np.argsort(values, kind="stable")
    sorted_values, cumulative = values[order], np.cumsum(weights[order])
    total = cumulative[-1]
    out = {"mean": float(np.dot(values, weights) / total)}
    for name, q in QUANTILES.items():
        index = min(int(np.searchsorted(cumulative, q / 100.0 * total)), len(order) - 1)
        out[name] = float(sorted_values[index])
    return out


WARMUP_ONLY = "warmup_only_replications"   # extra: replications whose finished requests were all warm-up
SHORT_REPLAY = "short_replay_replications"  # extra: replications whose window missed most prompts (`Simulation._short_replay`)
UNUSED_LOAD = "unused_load_levers"          # extra: load levers the workload could not honour (`api.unused_load_levers`)


@dataclass(frozen=True)
class SimResult:
    """Distributions (ms), throughputs (tok/s), hit rates, and the per-request table."""

    distributions: dict[str, dict[str, float]]
    scalars: dict[str, float]
    hit_rate: dict
    num_requests: int
    sim_wall_s: float
    sim_time_s: float
    extra: dict = field(default_factory=dict)
    rows: tuple[dict, ...] = ()
    replications: int = 1
    seed_intervals: dict[str, tuple[float, float]] = field(default_factory=dict)   # 90%, over replications

    @property
    def flags(self) -> tuple[str, ...]:
        """What the replay itself says about its figures: a replay too short to finish a
        request after its warm-up reports the warm-up's; one whose measured requests mostly
        had their first token before the warm-up ended has a window short of their prompts;
        load levers it could not honour."""
        count, short = self.extra.get(WARMUP_ONLY, 0), self.extra.get(SHORT_REPLAY, 0)
        said = (f"{WARMUP_ONLY_FLAG}: no request finished after the warm-up in {count} of {self.replications} "
                "replication(s), so their figures are the warm-up's, and ITL, recorded for measured requests only, "
                "is empty (replay more requests)",) if count else ()
        if short > 0:
            said += (f"{SHORT_REPLAY_FLAG}: most measured requests had their first token before the warm-up ended in "
                     f"{short} of {self.replications} replication(s), so the throughput window after it holds their "
                     "decodes and few of their prompts (replay more requests)",)
        unused = self.extra.get(UNUSED_LOAD)
        return (*said, unused) if unused else said

    @property
    def metrics(self) -> dict[str, float]:
        """Flat record in the project's metric-key convention."""
        flat = {f"{name}_{stat}": value for name, dist in self.distributions.items()
                for stat, value in dist.items()}
        flat.update(self.scalars)
        return flat

    def to_json(self) -> dict:
        data = {name: {s: _round(dist[s]) for s in JSON_STATS} for name, dist in self.distributions.items()}
        data.update({k: _round(v) for k, v in self.scalars.items()})
        data.update(hit_rate=self.hit_rate, num_requests=self.num_requests,
                    sim_wall_s=round(self.sim_wall_s, 4), sim_time_s=round(self.sim_time_s, 3))
        data.update(self.extra)
        data["replications"] = self.replications
        if self.seed_intervals:
            data["seed_intervals"] = {k: [_round(lo), _round(hi)] for k, (lo, hi) in self.seed_intervals.items()}
        return data

    def write_csv(self, path: str | Path) -> None:
        """One row per request, written atomically (its folder created if missing)."""
        fields = list(self.rows[0]) if self.rows else list(ROW_FIELDS)

        def write(temporary: str) -> None:
            with open(temporary, "w", newline="", encoding="utf-8") as handle:
                writer = csv.DictWriter(handle, fieldnames=fields)
                writer.writeheader()
                writer.writerows(self.rows)
        atomic_write(Path(path), write)


ROW_FIELDS = ("rid", "session", "index_in_session", "label", "unit", "entry_unit", "is_warmup", "is_measured", "prompt_tokens",
              "output_tokens", "cached_tokens", "dram_tokens", "arrival_ms", "admit_ms",
              "first_token_ms", "finish_ms", "ttft_ms", "ttft_admission_ms", "tpot_ms", "e2e_ms")


def _round(value: float) -> float | None:
    return None if math.isnan(value) else round(float(value), 4)


def request_rows(requests: list[Request], measured: set[int]) -> tuple[dict, ...]:
    rows = []
    for r in requests:
        tpot = (r.finish_us - r.first_token_us) / (r.output_tokens - 1) / US_PER_MS if r.output_tokens > 1 else ""
        rows.append({
            "rid": r.rid, "session": r.session, "index_in_session": r.local_index, "label": r.spec.label,
            "unit": r.unit, "entry_unit": r.entry_unit,
            "is_warmup": r.is_warmup, "is_measured": r.rid in measured,
            "prompt_tokens": r.prompt_tokens, "output_tokens": r.output_tokens,
            "cached_tokens": r.cached_tokens, "dram_tokens": r.dram_tokens,
            "arrival_ms": round(r.arrival_us / US_PER_MS, 4), "admit_ms": round(r.admit_us / US_PER_MS, 4),
            "first_token_ms": round(r.first_token_us / US_PER_MS, 4),
            "finish_ms": round(r.finish_us / US_PER_MS, 4),
            "ttft_ms": round((r.first_token_us - r.arrival_us + r.host_us) / US_PER_MS, 4),
            "ttft_admission_ms": round((r.first_token_us - r.admit_us + r.host_us) / US_PER_MS, 4),
            "tpot_ms": tpot if tpot == "" else round(tpot, 4),
            "e2e_ms": round((r.finish_us - r.arrival_us + r.host_us) / US_PER_MS, 4),
        })
    return tuple(rows)


LATENCY_NAMES = ("ttft_ms", "ttft_admission_ms", "tpot_ms", "itl_ms", "e2e_ms", "interactivity")


def latency_distributions(requests: list[Request], recorder: Recorder,
                          names: tuple[str, ...] = LATENCY_NAMES) -> dict[str, dict[str, float]]:
    """The statistics of each distribution in ``names`` (all by default; a stop check asks
    for the one its rule reads, as each check would otherwise sort every ITL so far)."""
    columns: dict[str, np.ndarray] = {}

    def column(attribute: str) -> np.ndarray:
        if attribute not in columns:
            columns[attribute] = np.fromiter((getattr(r, attribute) for r in requests), float, len(requests))
        return columns[attribute]

    def tpot() -> np.ndarray:
        first, finish, outputs = column("first_token_us"), column("finish_us"), column("output_tokens")
        decoding = outputs > 1
        return (finish[decoding] - first[decoding]) / (outputs[decoding] - 1) / US_PER_MS

    def itl() -> dict[str, float]:
        values = np.asarray(recorder.itl_values, float) / US_PER_MS
        return _stats(values, np.asarray(recorder.itl_weights, float)) if values.size else _stats(values)

    def between(start: str, end: str) -> dict[str, float]:
        return _stats((column(end) - column(start) + column("host_us")) / US_PER_MS)

    def interactivity() -> dict[str, float]:
        """Per-user speed 1000 / TPOT: its mean and median, and a tail quantile ``pN`` as a
        floor the slowest users see (the ``100 - N``th percentile: 1000 / ``tpot_ms_pN``), so
        a bound ``interactivity pN >= X`` holds for N% of users, as a latency quantile does."""
        values = tpot()
        speeds = MS_PER_S / values[values > 0]
        if not speeds.size:
            return _stats(speeds)
        points = np.percentile(speeds, [q if q <= 50 else 100 - q for q in QUANTILES.values()])
        return {"mean": float(speeds.mean()), **{name: float(v) for name, v in zip(QUANTILES, points)}}

    build = {"ttft_ms": lambda: between("arrival_us", "first_token_us"),
             "ttft_admission_ms": lambda: between("admit_us", "first_token_us"),
             "tpot_ms": lambda: _stats(tpot()), "itl_ms": itl,
             "e2e_ms": lambda: between("arrival_us", "finish_us"), "interactivity": interactivity}
    return {name: build[name]() for name in names}


def itl_quantile_exceeds(recorder: Recorder, stat: str, threshold_ms: float) -> bool | None:
    """Whether the ITL statistic ``stat`` (a quantile key) `latency_distributions` would
    report is above ``threshold_ms``, from one weighted count instead of a sort (a stop
    check asks this every 16th of a replay, with every ITL so far; the count carries on
    from the previous check's, `Recorder.itl_counts`): the weighted quantile is above it
    exactly when the weight at or below it is short of the quantile's share. None when
    the count is too close to call (a float summation-order margin) or the samples are
    unweighted: then sort as the report does."""
    if stat not in QUANTILES or not recorder.itl_values:
        return None
    count = recorder.itl_counts.setdefault(threshold_ms, [0, 0.0, 0.0])
    done, held = count[0], len(recorder.itl_values)
    if done < held:
        values = np.asarray(recorder.itl_values[done:], float) / US_PER_MS
        weights = np.asarray(recorder.itl_weights[done:], float)
        count[:] = held, count[1] + float(weights[values <= threshold_ms].sum()), count[2] + float(weights.sum())
    _, below, total = count
    target = QUANTILES[stat] / 100.0 * total
    if abs(below - target) <= 1e-9 * max(total, 1.0):
        return None
    return below < target


@dataclass(frozen=True, slots=True)
class Window:
    start: tuple[float, float, float]   # (time_us, input tokens, output tokens)
    end: tuple[float, float, float]

    @property
    def seconds(self) -> float:
        return (self.end[0] - self.start[0]) / US_PER_S


def throughput_scalars(window: Window, total_gpus: int, recorder: Recorder) -> dict[str, float]:
    seconds = max(window.seconds, 1e-12)
    input_rate = (window.end[1] - window.start[1]) / seconds
    output_rate = (window.end[2] - window.start[2]) / seconds
    advancing = recorder.decode_steps + recorder.mixed_steps
    decode_step_us = recorder.decode_us / recorder.decode_steps if recorder.decode_steps else float("nan")
    mean_step_us = (recorder.decode_us + recorder.stall_us) / advancing if advancing else float("nan")
    interfering = recorder.decode_steps + recorder.stall_steps
    # a prefill-only step that stalls decoders delays them by itself plus their next decode step
    prefill_only = recorder.stall_steps - recorder.mixed_steps
    stalled_us = recorder.stall_us + (prefill_only * decode_step_us if recorder.decode_steps else 0.0)
    return {
        "throughput_per_gpu": (input_rate + output_rate) / total_gpus,
        "output_throughput_per_gpu": output_rate / total_gpus,
        "input_throughput_per_gpu": input_rate / total_gpus,
        "throughput_fleet": input_rate + output_rate,
        "output_throughput_fleet": output_rate,
        "input_throughput_fleet": input_rate,
        "mixed_step_fraction": recorder.stall_steps / interfering if interfering else 0.0,
        "mixed_decode_step_ms": stalled_us / recorder.stall_steps / US_PER_MS
        if recorder.stall_steps else float("nan"),
        "tpot_pollution": mean_step_us / decode_step_us if recorder.decode_steps else 1.0,
    }
