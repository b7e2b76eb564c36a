"""Where a sweep's predictions run: in process, on a local process pool, or on Ray.

Only small picklable things cross processes (PRODUCT.md §2 `pareto`): a `SweepJob`
naming the model, cluster and engine, the workload and the space options, plus a range
of group indices. Each worker rebuilds the target and the plan from those names once
per process (the plan is deterministic) and returns one compact `GroupResult` per
group, so the result of a sweep does not depend on the backend, the number of workers
or the chunking: the same seed gives the same points in the same order.

A group (one family at one concurrency) prices every speculative variant and keeps the
one with the highest output throughput per GPU (METHOD §3.8: the most committed tokens per unit
of time at that load; ties keep the shallower variant). On DES traffic (agentic) a group
of several variants ranks them on bounded replays (`predictor.sim.fidelity`) and prices
the kept one again at the full default, which is what its point reports: at 256 clients
and beyond a variant's ranking replay is a tenth of the default.

Backends are a registry keyed by :class:`Backend`. Ray is an optional extra
(`inferasim[ray]`), imported only when asked for; it schedules one task per chunk with
its own scheduler (`ray.wait` drives the progress callback).
"""

from __future__ import annotations

import math
import os
import socket
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from enum import StrEnum
from functools import lru_cache
from typing import Any, Callable, Protocol

from levers.configuration import Configuration
from levers.errors import InputError
from levers.inputs import quote
from predictor.predict import predict
from predictor.sim.api import as_workload
from predictor.sim.fidelity import bounded_requests
from predictor.sweep.space import SpaceOptions, SweepPlan, build_plan
from predictor.target import Target, resolve_target
from predictor.workload import WorkloadSpec

# What a point keeps of a prediction, in this order (NaN when not predicted); `_lo` / `_hi`
# are the bounds of the metric's 80% interval (predictor.uncertainty).
INTERVAL_METRICS = ("throughput_per_gpu", "output_throughput_per_gpu", "interactivity_p50", "ttft_ms_mean")
POINT_METRICS: tuple[str, ...] = (
    "throughput_per_gpu", "interactivity_p50", "interactivity_mean", "output_throughput_per_gpu",
    "ttft_ms_mean", "tpot_ms_mean", "tpot_ms_p50", "itl_ms_mean", "e2e_ms_mean", "ttft_ms_p90", "itl_ms_p90",
    "max_concurrency", "memory_per_gpu_gb",
    *(f"{key}_{bound}" for key in INTERVAL_METRICS for bound in ("lo", "hi")),
)
# The frontier's throughput, and what a group's speculative variants are chosen on: output
# tok/s per GPU over every GPU (issue 13: `throughput` means output tokens for every
# workload; on agentic traffic input + output is mostly cached prompt tokens). The total
# stays in each point's metrics (`throughput_per_gpu`).
THROUGHPUT_KEY = "output_throughput_per_gpu"
CHUNKS_PER_WORKER = 8        # enough chunks to balance uneven groups and move the progress bar
MAX_CHUNK_GROUPS = 512       # bounds the work lost per chunk and the size of one reply
RAY_INSTALL_HINT = "pip install 'inferasim[ray]'"

PredictFn = Callable[..., Any]   # predict(target, config, workload, *, seed=, num_requests=) -> Prediction
ProgressFn = Callable[[int, int], None]   # (groups done, groups total)


@dataclass(frozen=True, slots=True)
class SweepJob:
    """Everything a worker needs, by name. ``predict_fn`` None = `predictor.predict.predict`."""

    model: str
    cluster: str
    engine: str
    workload: WorkloadSpec
    options: SpaceOptions = field(default_factory=SpaceOptions)
    seed: int = 0
    num_requests: int | None = None
    predict_fn: PredictFn | None = None

    @staticmethod
    def for_target(target: Target, workload: WorkloadSpec, options: SpaceOptions, *, seed: int = 0,
                   num_requests: int | None = None, predict_fn: PredictFn | None = None) -> "SweepJob":
        return SweepJob(target.card.name, target.cluster.spec, str(target.engine), workload, options,
                        seed, num_requests, predict_fn)


@dataclass(frozen=True, slots=True)
class GroupResult:
    """The kept variant of one group; ``variant`` None when no variant was legal."""

    group: int
    variant: tuple[str, int] | None
    mode: str | None
    source: str | None
    metrics: tuple[float, ...]
    num_priced: int
    reason: str | None = None


# -- the worker side ------------------------------------------------------------------
@lru_cache(maxsize=4)
def prepared(job: SweepJob) -> tuple[Target, SweepPlan]:
    """The target and plan of a job, rebuilt once per process."""
    target = resolve_target(job.model, job.cluster, job.engine)
    return target, build_plan(target, job.workload, job.options)


def run_chunk(job: SweepJob, start: int, stop: int) -> list[GroupResult]:
    """Price groups ``start .. stop - 1`` of the job's plan."""
    target, plan = prepared(job)
    predict_fn = job.predict_fn or predict
    return [price_group(target, plan, index, job, predict_fn) for index in range(start, stop)]


def price_group(target: Target, plan: SweepPlan, index: int, job: SweepJob, predict_fn: PredictFn) -> GroupResult:
    best: tuple[float, tuple[str, int], Any] | None = None
    reason = None
    variants = plan.families[plan.groups[index].family].variants
    bounded = _bounded_ranking(target, plan.configuration(index, variants[0]), job, len(variants))
    ranking = job.num_requests if bounded is None else bounded
    for variant in variants:
        config: Configuration = plan.configuration(index, variant)
        prediction = predict_fn(target, config, job.workload, seed=job.seed, num_requests=ranking)
        if prediction.metrics is None:
            reason = reason or (prediction.reasons[0] if prediction.reasons else "illegal")
            continue
        score = _finite_or(prediction.metrics.get(THROUGHPUT_KEY), -math.inf)
        if best is None or score > best[0]:
            best = (score, variant, prediction)
    if best is None:
        return GroupResult(index, None, None, None, (), len(variants), reason)
    _, variant, prediction = best
    priced = len(variants)
    if bounded is not None:
        # The kept variant's point is priced at the full default, as a lone variant is.
        prediction = predict_fn(target, plan.configuration(index, variant), job.workload, seed=job.seed,
                                num_requests=job.num_requests)
        priced += 1
    metrics = tuple(_finite_or(_point_value(prediction, key), math.nan) for key in POINT_METRICS)
    mode = str(prediction.mode) if prediction.mode is not None else None
    return GroupResult(index, variant, mode, prediction.source, metrics, priced)


def _bounded_ranking(target: Target, config: Configuration, job: SweepJob, num_variants: int) -> int | None:
    """The DES requests a group's variants are ranked on when that is fewer than the full
    default: on DES traffic, with several variants and no ``--num-requests`` (module
    docstring); None otherwise."""
    if job.num_requests is not None or job.workload.is_fixed or num_variants < 2:
        return None
    full = as_workload(job.workload, config, target).default_num_requests(config.concurrency)
    bounded = bounded_requests(full, config.concurrency)
    return bounded if bounded < full else None


def _point_value(prediction: Any, key: str) -> Any:
    """A metric, or a bound of its 80% interval (``..._lo`` / ``..._hi``)."""
    base, _, bound = key.rpartition("_")
    if bound in ("lo", "hi") and base in INTERVAL_METRICS:
        interval = getattr(prediction, "intervals", {}).get(base)
        return None if interval is None else interval[0 if bound == "lo" else 1]
    return prediction.metrics.get(key)


def _finite_or(value: Any, default: float) -> float:
    return float(value) if value is not None and math.isfinite(float(value)) else default


# -- chunking and backends ------------------------------------------------------------
def chunk_ranges(num_groups: int, workers: int) -> list[tuple[int, int]]:
    """Contiguous (start, stop) ranges, about CHUNKS_PER_WORKER per worker."""
    if num_groups <= 0:
        return []
    size = max(1, min(MAX_CHUNK_GROUPS, math.ceil(num_groups / (max(1, workers) * CHUNKS_PER_WORKER))))
    return [(start, min(num_groups, start + size)) for start in range(0, num_groups, size)]


def pool_chunks(job: SweepJob, num_groups: int, workers: int) -> list[tuple[int, tuple[int, int]]]:
    """(chunk index, range) in the order a pool should start them. On agentic traffic
    each group is its own chunk, the dearest first (longest processing time first): a
    group's DES replays 40 requests per client, so its cost grows with its concurrency
    (and its speculative variants), and a 1,024-client group started last ran alone for
    a third of a 48-point sweep. Fixed-length sweeps keep contiguous chunks in order."""
    if job.workload.is_fixed or num_groups <= 0:
        return list(enumerate(chunk_ranges(num_groups, workers)))
    _, plan = prepared(job)

    def cost(index: int) -> int:
        group = plan.groups[index]
        return group.concurrency * len(plan.families[group.family].variants)
    order = sorted(range(num_groups), key=lambda index: (-cost(index), index))
    return [(index, (index, index + 1)) for index in order]


class Backend(StrEnum):
    SERIAL = "serial"
    LOCAL = "local"
    RAY = "ray"


class Executor(Protocol):
    backend: Backend
    workers: int

    def run(self, job: SweepJob, num_groups: int, on_progress: ProgressFn | None = None) -> list[GroupResult]: ...


@dataclass
class SerialExecutor:
    """In this process, one group after another (the single-core baseline)."""

    backend: Backend = Backend.SERIAL
    workers: int = 1

    def run(self, job: SweepJob, num_groups: int, on_progress: ProgressFn | None = None) -> list[GroupResult]:
        results: list[GroupResult] = []
        for start, stop in chunk_ranges(num_groups, 1):
            results.extend(run_chunk(job, start, stop))
            if on_progress:
                on_progress(len(results), num_groups)
        return results


@dataclass
class LocalPoolExecutor:
    """A process pool on this machine (default: every core)."""

    workers: int = field(default_factory=lambda: os.cpu_count() or 1)
    backend: Backend = Backend.LOCAL

    def run(self, job: SweepJob, num_groups: int, on_progress: ProgressFn | None = None) -> list[GroupResult]:
        if self.workers <= 1:
            return SerialExecutor().run(job, num_groups, on_progress)
        chunks = pool_chunks(job, num_groups, self.workers)
        by_chunk: dict[int, list[GroupResult]] = {}
        with ProcessPoolExecutor(max_workers=self.workers) as pool:
            futures = {pool.submit(run_chunk, job, start, stop): i for i, (start, stop) in chunks}
            done = 0
            for future in as_completed(futures):
                by_chunk[futures[future]] = future.result()
                done += len(by_chunk[futures[future]])
                if on_progress:
                    on_progress(done, num_groups)
        return [result for i in sorted(by_chunk) for result in by_chunk[i]]


@dataclass
class RayExecutor:
    """Ray tasks over chunks. ``address`` None/"auto"/"local": Ray's own default (the
    cluster in RAY_ADDRESS or a running local one, else a new local instance); otherwise
    the address of a running cluster. An already initialised Ray is used as it is."""

    address: str | None = None
    workers: int = 0          # 0: the cluster's CPU count
    backend: Backend = Backend.RAY

    def run(self, job: SweepJob, num_groups: int, on_progress: ProgressFn | None = None) -> list[GroupResult]:
        ray = import_ray()
        started = not ray.is_initialized()
        if started:
            address = None if self.address in (None, "auto", "local") else self.address
            if address is not None:
                check_reachable(address)
            ray.init(address=address, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
        try:
            return self._run(ray, job, num_groups, on_progress)
        finally:
            if started:
                ray.shutdown()

    def _run(self, ray: Any, job: SweepJob, num_groups: int, on_progress: ProgressFn | None) -> list[GroupResult]:
        self.workers = self.workers or int(ray.cluster_resources().get("CPU", 1))
        task = ray.remote(num_cpus=1)(run_chunk)
        job_ref = ray.put(job)
        chunks = chunk_ranges(num_groups, self.workers)
        refs = {task.remote(job_ref, start, stop): i for i, (start, stop) in enumerate(chunks)}
        by_chunk: dict[int, list[GroupResult]] = {}
        pending, done = list(refs), 0
        while pending:
            finished, pending = ray.wait(pending, num_returns=1)
            for ref in finished:
                by_chunk[refs[ref]] = ray.get(ref)
                done += len(by_chunk[refs[ref]])
            if on_progress:
                on_progress(done, num_groups)
        return [result for i in range(len(chunks)) for result in by_chunk[i]]


RAY_CONNECT_TIMEOUT_S = 10.0     # a cluster's head must accept a connection within this
RAY_ADDRESS_FORMS = "auto, or HOST:PORT (or ray://HOST:PORT) of a running Ray cluster's head, reachable from here"


# HTTP/2's client connection preface and an empty SETTINGS frame: a Ray head (its GCS, or
# the Ray Client server behind ray://) is a gRPC server, which answers with a SETTINGS
# frame of its own (measured on a `ray start --head` GCS: at once).
HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes.fromhex("000000040000000000")
HTTP2_SETTINGS = 0x04


def check_reachable(address: str, timeout_s: float = RAY_CONNECT_TIMEOUT_S) -> None:
    """Refuse a Ray address whose head does not accept a TCP connection, or does not
    answer as a gRPC server, within ``timeout_s`` in all: Ray itself retries such a head
    without end (a port that accepted and never replied held `pareto --ray` past 6
    minutes, deaf to SIGTERM). With ``RAY_USE_TLS`` set the head speaks TLS first, so
    only its port accepting is checked."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise InputError("--ray", f"{quote(address)} is not an address", RAY_ADDRESS_FORMS)
    deadline = time.monotonic() + timeout_s
    tls = os.environ.get("RAY_USE_TLS", "").strip().lower() in ("1", "true", "yes")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s) as connection:
            if tls:         # a TLS head answers no plain preface: its port accepting is what is checked
                return
            connection.sendall(HTTP2_PREFACE)
            header = b""
            while len(header) < 4:      # a frame's type is its 4th byte; TCP may deliver less at once
                connection.settimeout(max(0.001, deadline - time.monotonic()))
                got = connection.recv(9 - len(header))
                if not got:
                    break
                header += got
    except OSError as error:
        reason = "timed out" if isinstance(error, TimeoutError) else (error.strerror or type(error).__name__)
        raise InputError("--ray", f"cannot reach {quote(address)} as a Ray head ({reason})",
                         RAY_ADDRESS_FORMS) from None
    if len(header) < 4 or header[3] != HTTP2_SETTINGS:
        raise InputError("--ray", f"{quote(address)} answered, but not as a Ray head (a gRPC server)",
                         RAY_ADDRESS_FORMS)


def import_ray() -> Any:
    """Ray, or a one-line error naming the extra to install."""
    try:
        import ray
    except ImportError:
        raise InputError("--ray", "Ray is not installed", RAY_INSTALL_HINT) from None
    return ray


EXECUTORS: dict[Backend, Callable[..., Executor]] = {
    Backend.SERIAL: SerialExecutor,
    Backend.LOCAL: LocalPoolExecutor,
    Backend.RAY: RayExecutor,
}


def make_executor(ray: str | None = None, workers: int | None = None) -> Executor:
    """``ray`` set: Ray at that address ("auto" for Ray's default); else the local pool."""
    if ray is not None:
        import_ray()
        return RayExecutor(address=ray, workers=workers or 0)
    return LocalPoolExecutor(workers=workers or os.cpu_count() or 1)
