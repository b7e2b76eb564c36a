"""The simulator's entry point: `simulate(target, config, workload, ...)` (METHOD §5).

Callers pass a step-model factory (one step model per replica configuration: the
predictor passes its own, tests a fake) and a workload: a `predictor.workload.WorkloadSpec`
(fixed ISL/OSL: closed loop at ``config.concurrency`` clients with zero think time, or
Poisson at ``config.arrival_rate``; or ``agentic``: the synthetic agentic profile over
``config.concurrency`` live sessions), or a richer `SyntheticWorkload`, `AgenticWorkload`
or trace (`load_trace`). The result is deterministic for a given seed: the workload
and the router draw from separate generators spawned from it; ``replications`` replays
independent draws (`predictor.sim.replications`).

Steady-state semantics (matched by `predictor.analytical`): closed loop, zero think time,
each client sends its next request the moment the previous one finishes; prompts are
prefilled in chunks of ``min(chunked_prefill_size, max_batched_tokens)`` that ride in
decode steps on mixing engines (vLLM, TRT-LLM); each client's first request is warm-up;
the window ends when the last request is released.
"""

from __future__ import annotations

import copy
import gc
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from levers.catalog import Engine
from levers.configuration import Configuration
from levers.errors import InputError
from predictor.sim.agentic import AgenticWorkload, load_profile
from predictor.sim.capacity import CapacityModel, memory_capacity
from predictor.sim.deployment import BuildInputs, StepModelFactory, build_deployment
from predictor.sim.prefix_cache import EvictionPolicy
from predictor.sim.replications import combine, seed_sequence
from predictor.sim.reuse import STORE, Bounds, Recording, fingerprint, workload_key
from predictor.sim.results import UNUSED_LOAD, Recorder, SimResult
from predictor.sim.router import Router
from predictor.sim.scheduler import ON_DEMAND_OUTPUT_SHARE, PROFILES
from predictor.sim.simulator import Progress, Simulation
from predictor.sim.source import SessionSource
from predictor.sim.stop import StopRule
from predictor.sim.trace_base import TraceWorkload
from predictor.sim.workloads import (
    ArrivalMode,
    LengthRange,
    SyntheticWorkload,
    Workload,
)
from predictor.workload import WorkloadSpec

if TYPE_CHECKING:
    from predictor.target import Target

MAX_REPLICATIONS = 32
YOUNG_COLLECTION_ALLOCATIONS = 5_000   # during a replay (default 700): most of its objects die young


@dataclass(frozen=True, slots=True)
class SimOptions:
    """Internal knobs (not levers): the eviction policy (to show why leaf-first matters),
    whether to keep the per-request table for a CSV, and exact step prices (no rounding,
    no merged runs: the reference the fast path is checked against)."""

    eviction: EvictionPolicy = EvictionPolicy.LEAF_FIRST
    keep_rows: bool = False
    exact_prices: bool = False
    warm_start: bool = True         # session traces: the AgentX warm start (trace_base.skip_into)


def as_workload(workload: WorkloadSpec | Workload, config: Configuration, target: Target | None,
                warm_start: bool = True) -> Workload:
    """Turn a named workload into a replayable one; pass richer workloads through."""
    if isinstance(workload, TraceWorkload):
        if workload.mode is ArrivalMode.OPEN:
            return workload.retimed(config.arrival_rate)
        return workload.warm_started(config.concurrency) if warm_start else workload
    if not isinstance(workload, WorkloadSpec):
        return workload
    if workload.is_fixed:
        open_loop = config.arrival_rate > 0
        return SyntheticWorkload(LengthRange.fixed(workload.isl), LengthRange.fixed(workload.osl),
                                 mode=ArrivalMode.OPEN if open_loop else ArrivalMode.CLOSED,
                                 arrival_rate=config.arrival_rate, warmup_sessions_per_slot=0 if open_loop else 1,
                                 name=workload.name, staggered_warmups=0 if open_loop else config.concurrency)
    profile = load_profile()
    card_limit = getattr(getattr(target, "card", None), "max_context", None) or profile.max_context_tokens
    return AgenticWorkload(profile, config.concurrency, min(profile.max_context_tokens, card_limit))


def simulate(target: Target, config: Configuration, workload: WorkloadSpec | Workload, *,
             step_model_factory: StepModelFactory, num_requests: int | None = None, seed: int = 0,
             progress: Progress | None = None, capacity_model: CapacityModel | None = None,
             options: SimOptions | None = None, replications: int = 1,
             stop_rules: tuple[StopRule, ...] = ()) -> SimResult:
    """Replay ``workload`` on ``config`` for ``target``; see the module docstring.

    ``capacity_model`` (default: the memory model of ``target``) gives each replica
    configuration's per-rank KV pool; ``num_requests`` caps the released requests
    (default: the workload's own: 10 per client for fixed closed loops, 1000 open loop,
    40 per session slot for agentic, every request of a trace). ``replications`` > 1
    replays independent draws and reports means with 90% intervals
    (`predictor.sim.replications`); ``stop_rules`` end a replay that has clearly missed a
    bound (`predictor.sim.stop`).
    """
    options = options or SimOptions()
    replayable = as_workload(workload, config, target, options.warm_start)
    requests = num_requests if num_requests is not None else replayable.default_num_requests(config.concurrency)
    if requests < 1:
        raise InputError("--requests", f"{requests} requests", "at least 1")
    if not 1 <= replications <= MAX_REPLICATIONS:
        raise InputError("--replications", f"{replications} replications", f"1 to {MAX_REPLICATIONS}")
    capacity = capacity_model or memory_capacity(target)
    with _older_objects_frozen():
        runs = [_replay(target, config, replayable, requests, seed_sequence(seed, r), step_model_factory,
                        capacity, options, _share(progress, r, replications), stop_rules)
                for r in range(replications)]
    result = combine(runs)
    unused = unused_load_levers(config, replayable)     # a new record: a kept replay's result is shared
    return replace(result, extra={**result.extra, UNUSED_LOAD: unused}) if unused else result


def unused_load_levers(config: Configuration, workload: Workload) -> str | None:
    """What a replay of ``workload`` could not honour of the load levers, said rather than
    echoed as if applied: sessions are a closed loop, so an arrival rate changed nothing
    (three agentic runs at 0.05, 1,000 requests/s and none were identical), and a session
    trace runs at most as many clients as it has sessions."""
    if getattr(workload, "mode", ArrivalMode.CLOSED) is not ArrivalMode.CLOSED:
        return None
    said = []
    if config.arrival_rate > 0 and not isinstance(workload, SyntheticWorkload):
        said.append(f"arrival_rate={config.arrival_rate:g}: unused: {getattr(workload, 'name', 'this workload')} "
                    f"is a closed loop of sessions (its load is the concurrency)")
    sessions = len(getattr(workload, "trace_sessions", ()) or ())
    if sessions and config.concurrency > sessions:
        said.append(f"concurrency={config.concurrency}: the trace has {sessions} session(s), so at most "
                    f"{sessions} client(s) ran")
    return "; ".join(said) or None


@contextmanager
def _older_objects_frozen() -> Iterator[None]:
    """The cyclic garbage collector skips what was alive before the replay (`gc.freeze`):
    a replay allocates hundreds of thousands of objects, and each full collection walked
    the whole process too (the session bank, the anchors, the kept replays: 14% of the
    main job's CPU was collection). Reference counting still frees them; cycles among
    them wait until the replay ends, when one collection over the replay's own objects
    (still without the frozen rest) frees its cycles: without it they were frozen by the
    next replay, and a search grew to 0.9 GB. A replay unlinks its prefix caches' trees and
    its event handlers when it ends (`Deployment.dispose`), so reference counting frees
    most of it first: the collection walked every radix node and block id (deployment B:
    0.7 of 13 CPU-s, now < 0.1). A process that froze objects itself is left alone."""
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    thresholds = gc.get_threshold()
    gc.set_threshold(YOUNG_COLLECTION_ALLOCATIONS, *thresholds[1:])
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        gc.collect()          # the replay's own cycles, before they would be frozen with the rest
        gc.unfreeze()


def _share(progress: Progress | None, replication: int, replications: int) -> Progress | None:
    """Progress of one replication as its share of them all."""
    if progress is None or replications == 1:
        return progress
    return lambda done, total: progress(replication * total + done, replications * total)


def on_demand_output_share(engine: Engine | str, workload: Workload) -> float:
    """The share of its output a colocated request holds KV pages for in the replay: half
    on an on-demand engine's synthetic (fixed-length) traffic, its steady state as the
    analytical model holds it (`predictor.predict._running_cap`), else the whole. Agentic
    and trace replays keep the whole: their outputs are short beside their prompts."""
    synthetic = isinstance(workload, SyntheticWorkload)
    return ON_DEMAND_OUTPUT_SHARE if synthetic and PROFILES[Engine(engine)].on_demand_kv else 1.0


def _replay(target: Target, config: Configuration, replayable: Workload, requests: int,
            root: np.random.SeedSequence, step_model_factory: StepModelFactory, capacity: CapacityModel,
            options: SimOptions, progress: Progress | None, stop_rules: tuple[StopRule, ...] = ()) -> SimResult:
    started = time.perf_counter()
    recording = Recording()
    recorder = Recorder()
    cluster = target.cluster
    inputs = BuildInputs(target.engine, recording.factory(step_model_factory), capacity, replayable.block_tokens,
                         options.eviction, cluster.gpu.host_link_gbps, recorder, options.exact_prices,
                         cluster.gpu.nic_bw_gbps, host_on_engine=cluster.gpu.vendor == "cpu",
                         output_share=on_demand_output_share(target.engine, replayable))
    deployment = build_deployment(config, inputs, scale_up_gpus=cluster.scale_up_gpus(),
                                  fabric_gbps=cluster.gpu.intra_node_bw_gbps, nic_gbps=cluster.gpu.nic_bw_gbps)
    key = _replay_key(deployment, config, replayable, requests, root, options, stop_rules)
    found = STORE.find(key, recording, Bounds.of(deployment).limits) if key is not None else None
    if found is not None:
        if progress is not None:
            progress(requests, requests)
        return replace(copy.deepcopy(found), sim_wall_s=time.perf_counter() - started)
    workload_rng, router_rng = (np.random.default_rng(s) for s in root.spawn(2))
    source = SessionSource(replayable, requests, config.concurrency, workload_rng)
    router = Router(config.router, router_rng, by_prefill_work=deployment.decode is not None)
    simulation = Simulation(deployment, source, router, recorder, progress,
                            keep_rows=options.keep_rows, stop_rules=stop_rules)
    result = simulation.run()
    deployment.dispose()
    if isinstance(replayable, TraceWorkload):
        result.extra["bad_lines_skipped"] = replayable.bad_lines
    if key is not None:
        # a run its stop rules did not stop is the run without them
        unstopped = () if stop_rules and "stopped_early" not in result.extra else None
        keys = (key,) if unstopped is None else (key, key[:-1] + (unstopped,))
        STORE.keep(keys, recording, copy.deepcopy(result), Bounds.of(deployment))
    return result


def _replay_key(deployment, config: Configuration, replayable: Workload, requests: int,
                root: np.random.SeedSequence, options: SimOptions, stop_rules: tuple[StopRule, ...]) -> tuple | None:
    """What a replay reads besides its step models' answers (`predictor.sim.reuse`); None
    for trace replays (their sessions are too many to compare cheaply)."""
    if not isinstance(replayable, (AgenticWorkload, SyntheticWorkload)):
        return None
    workload = workload_key(replayable)
    if workload is None:
        return None
    entropy = root.entropy if isinstance(root.entropy, int) else tuple(root.entropy)
    return (fingerprint(deployment), workload, config.concurrency, config.arrival_rate,
            str(config.router), requests, entropy, tuple(root.spawn_key), options, stop_rules)
