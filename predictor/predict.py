"""Price one configuration (METHOD §2, §4, §5): calibrate the step model (by the anchor of
its stack, else by the cross-model prior; `predictor.anchors.anchoring`), then the
analytical steady state (fixed-length traffic), the wave model of a fixed-count benchmark
(`predictor.benchmark`) or the DES (agentic traffic, traces, or whenever distributions
are needed); finally the mode and an 80% interval per metric from the measured error of
the prediction's transfer kinds (`predictor.uncertainty`).

`predict` is the one function every consumer calls: the CLI's `predict`, `score`, the
tuning agent's evaluation, the mix planner and the Pareto sweeps.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace

from levers.catalog import Engine
from levers.configuration import Configuration
from predictor.analytical import (
    Load,
    PoolLoad,
    benchmark_ttft_ms,
    disaggregated_benchmark_ttft_ms,
    disaggregated_state,
    host_time_ms,
    single_ttft_ms,
    steady_state,
)
from predictor.anchors.anchoring import Anchoring, default_store, recipe_text, step_model_for  # noqa: F401 - re-exported
from predictor.anchors.store import AnchorStore
from predictor.benchmark import Protocol, replay, runs_in_waves
from predictor.benchmark import metrics as benchmark_metrics
from predictor.feasibility import check_configuration, pool_configs
from predictor.memory import MemoryBreakdown
from predictor.prediction import Prediction, illegal
from predictor.sim import simulate
from predictor.sim.scheduler import PROFILES, rank_chunk_tokens, rank_prefill_budget
from predictor.step.cost import Mode, StepCost, StepModel
from predictor.step.fusions import fusion_opportunities
from predictor.step.handoff import DEFAULT_BACKEND, handoff_us, link_gbps
from predictor.step.priors import Priors
from predictor.target import Target
from predictor.uncertainty import ErrorBars, band_keys, ordered, shipped_error_bars, with_sampling_noise
from predictor.units import BYTES_PER_GB, MS_PER_S, US_PER_MS
from predictor.workload import WorkloadSpec


def uncontended_step_ms(model: StepModel, context_tokens: float) -> float:
    """The batch-1 decode step (an objective), priced without raising flags."""
    probe = getattr(model, "probe_decode_us", model.decode_us)
    return probe(1, context_tokens) / US_PER_MS


def _verify_tokens(model: StepModel) -> int:
    """Tokens per decoding request in a decode step: a speculative verify step carries the
    drafts too (its collectives move them all: DeepSeek-R1 MTP depth 3 reported the
    one-token step's 1.84 ms beside a step whose communication term is 2.24 ms)."""
    return getattr(model, "verify_tokens", 1)


def communication_ms(model: StepModel, step: StepCost, tokens: float) -> float:
    """The step's modelled communication. Anchored steps already contain theirs, so
    they report the target's modelled collectives instead of a term of the step."""
    modelled = getattr(model, "communication_us", None)
    if modelled is not None:
        return modelled(tokens) / US_PER_MS
    return step.get("communication") / US_PER_MS


def predict(target: Target, config: Configuration, workload: WorkloadSpec, *,
            store: AnchorStore | None = None, need_distribution: bool = False, seed: int = 0,
            num_requests: int | None = None, replications: int = 1, stop_rules: tuple = (),
            priors: Priors | None = None, error_bars: ErrorBars | None = None) -> Prediction:
    """Price ``config`` for ``target`` under ``workload``; illegal configurations come
    back with their reasons and ``metrics=None``. Unset precision and backend levers take
    the recipe of the anchor that calibrates the configuration. ``replications`` > 1 (DES
    only) replays independent draws: means with 90% ``seed_intervals``
    (predictor.sim.replications); ``stop_rules`` end a DES replay that has clearly missed a
    bound (predictor.sim.stop)."""
    started = time.perf_counter()
    anchoring = Anchoring.of(target, store, priors, workload.priced_context_tokens, workload.acceptance, workload.harness.name,
                             split=config.disaggregated)
    config, taken = anchoring.priced(config)
    feasibility = check_configuration(target.card, target.cluster, target.engine, config,
                                      workload.context_tokens)
    if not feasibility.legal:
        return illegal(feasibility.reasons, feasibility.memory)
    if workload.is_fixed and not need_distribution:
        prediction = _analytical(target, config, workload, anchoring, feasibility.memory)
    else:
        prediction = _des(target, config, workload, anchoring, feasibility.memory, seed, num_requests, replications,
                          stop_rules)
    prediction = _judged(prediction, anchoring, error_bars or shipped_error_bars(), workload.harness.name)
    if taken:   # every table, ledger and report that shows the configuration shows its flags
        prediction = replace(prediction, flags=(recipe_text(taken), *prediction.flags))
    if target.engine is Engine.TRTLLM and config.dcp > 1:
        prediction = replace(prediction, flags=(*prediction.flags, HELIX_FLAG))
    forced = getattr(workload.acceptance, "forced_al", None)
    if forced is not None and config.spec_depth and forced > config.spec_depth + 1:
        prediction = replace(prediction, flags=(*prediction.flags, (
            f"acceptance: al={forced:g} is beyond spec_depth={config.spec_depth}'s {config.spec_depth + 1} tokens a "
            f"verify step: priced at {config.spec_depth + 1}")))
    return replace(prediction, wall_ms=(time.perf_counter() - started) * MS_PER_S)


#: what the step and memory models do not yet price of TensorRT-LLM's Helix decode pool
HELIX_FLAG = ("helix: TensorRT-LLM keeps attention tp/dcp-wide on each CP rank (its QKV projections computed "
              "on every rank); priced with them tp-wide, as vLLM's and SGLang's DCP runs them")


def _judged(prediction: Prediction, anchoring: Anchoring, bars: ErrorBars, harness: str | None = None) -> Prediction:
    """Mode, transfer kinds and intervals (`predictor.uncertainty`; ``harness``: the
    workload's, for a prediction no anchor calibrates)."""
    kinds = anchoring.kinds
    calibration = anchoring.calibration_json()
    mode = bars.mode(kinds, anchoring.has_anchor)
    flags = (*prediction.flags, "rank-only") if mode is Mode.RANK_ONLY else prediction.flags
    metrics = prediction.metrics or {}
    intervals = ordered(with_sampling_noise(bars.intervals(metrics, kinds, band_keys(calibration, harness)), metrics,
                                            prediction.seed_intervals), metrics)
    return replace(prediction, mode=mode, anchor_id=anchoring.anchor_id, flags=tuple(dict.fromkeys(flags)),
                   transfer=bars.primary(kinds), transfer_kinds=kinds, intervals=intervals, calibration=calibration)


def _memory_metrics(memory: MemoryBreakdown, config: Configuration) -> dict[str, float]:
    return {
        "memory_per_gpu_gb": (memory.weights_bytes + memory.activations_bytes + memory.graph_bytes
                              + max(0, memory.kv_pool_bytes)) / BYTES_PER_GB,
        "kv_cache_per_gpu_gb": max(0, memory.kv_pool_bytes) / BYTES_PER_GB,
        "weights_per_gpu_gb": memory.weights_bytes / BYTES_PER_GB,
        "activations_per_gpu_gb": (memory.activations_bytes + memory.graph_bytes) / BYTES_PER_GB,
        "max_concurrency": float(memory.max_concurrency * max(1, config.replicas)),
        "gpus_per_replica": float(config.replica_gpus),
    }


def _running_cap(engine: Engine, config: Configuration, memory: MemoryBreakdown, workload: WorkloadSpec,
                 *, split: bool = False) -> int:
    """Running requests one (decode) replica holds in the steady state: the engine cap or
    the KV pool. A colocated on-demand engine's (`EngineProfile.on_demand_kv`: vLLM and
    SGLang allocate blocks as tokens are generated and preempt or retract when the pool runs
    out) staggered requests hold their current length, on average the prompt plus half the
    output, the workload's priced context; TensorRT-LLM's GUARANTEED_NO_EVICT reserves the
    final length, and so does a split's decode pool, which allocates a request's KV before
    the hand-off (measured on AIConfigurator's 1k/8k
    rows: priced at their final length, Llama-3.1-70B on two H100s under vLLM queued 7 of
    32 clients and its TTFT came out 180x the measured; SGLang's split decode pools at 288
    clients queue as measured only when priced at the final length).

    ``max_running_requests`` caps each scheduler rank (PRODUCT.md lever 23, as the DES's
    `predictor.sim.deployment` applies it): a replica of ``attention_dp`` ranks holds up to
    that many times the cap, while the KV pool (``memory``, the whole replica) still
    bounds it. Capped per replica instead, DeepSeek-R1's GB200 split at 12,000 clients
    (InferenceX, one DEP32 decode pool) ran 2,048 of them and queued the rest: TTFT 97 s
    against 20 s measured."""
    fitting = memory.max_concurrency
    if workload.is_fixed and not split and PROFILES[Engine(engine)].on_demand_kv:
        fitting = max(fitting, memory.sequences_at(math.ceil(workload.priced_context_tokens))[1])
    return max(1, min(config.max_running_requests * max(1, config.attention_dp), fitting))


def _steps(prefill_model: StepModel, decode_model: StepModel, workload: WorkloadSpec,
           running: float) -> tuple[int, StepCost, StepCost, dict[str, float]]:
    """(decode batch, decode step, prefill step, step metrics) of a priced steady state."""
    batch = max(1, round(running))
    decode_step = decode_model.decode(batch, workload.isl + workload.osl / 2.0)
    prefill_step = prefill_model.prefill(workload.isl, 1, 0.0)
    metrics = {
        "uncontended_step_ms": uncontended_step_ms(decode_model, workload.isl),
        "decode_comm_ms": communication_ms(decode_model, decode_step, batch * _verify_tokens(decode_model)),
        "prefill_comm_ms": communication_ms(prefill_model, prefill_step, workload.isl),
    }
    return batch, decode_step, prefill_step, metrics


def _analytical(target: Target, config: Configuration, workload: WorkloadSpec, anchoring: Anchoring,
                memory: MemoryBreakdown) -> Prediction:
    if config.disaggregated:
        return _analytical_disaggregated(target, config, workload, anchoring, memory)
    model = anchoring.model(config)
    replicas = max(1, config.replicas)
    busy = busy_replicas(config)
    host_ms = host_time_ms(model, workload.isl)
    load = Load(
        isl=workload.isl, osl=workload.osl, concurrency=config.concurrency / busy,
        arrival_rate=config.arrival_rate / replicas,
        running_cap=_running_cap(target.engine, config, memory, workload),
        chunk_tokens=rank_chunk_tokens(target.engine, config),
        gpus=config.replica_gpus, replicas=busy, idle_replicas=replicas - busy, host_us=host_ms * US_PER_MS,
        host_overlaps=target.cluster.gpu.vendor != "cpu", recv_interval=workload.harness.recv_interval,
        ahead_steps=workload.harness.ahead_steps, balanced_dp=PROFILES[target.engine].balances_attention_dp,
    )
    state = steady_state(model, load)
    source = "analytical"
    metrics = state.metrics(load, host_ms)
    metrics["ttft_single_ms"] = single_ttft_ms(model, workload.isl, load.chunk_tokens)
    if workload.requests_per_client and not runs_in_waves(target.engine, workload):
        metrics["ttft_ms_mean"] = benchmark_ttft_ms(model, load, state, workload.requests_per_client) + host_ms
    elif workload.requests_per_client:
        protocol = Protocol(workload.isl, workload.osl, max(1, math.ceil(load.concurrency)),
                            workload.requests_per_client, load.running_cap, config.max_batched_tokens,
                            load.chunk_tokens)
        metrics.update(benchmark_metrics(replay(model, protocol, target.engine), protocol,
                                         load.gpus * replicas / busy, busy))
        source = "benchmark"
    batch, decode_step, prefill_step, step_metrics = _steps(model, model, workload, state.running)
    metrics.update(_memory_metrics(memory, config))
    metrics.update(step_metrics)
    flags = list(model.flags)
    if state.queues_without_end(load):     # its TTFT and E2E left out (`SteadyState.metrics`)
        flags.append(f"overloaded: {load.arrival_rate * replicas:.3g} requests/s arrive, "
                     f"{state.requests_per_s * replicas:.3g} are served: the queue grows without end and TTFT from "
                     "arrival with it, so TTFT and E2E are not given (the other figures are the replicas full; "
                     "--json keeps the TTFT from admission)")
    elif state.overloaded:
        flags.append("overloaded")
    if load.concurrency > load.running_cap:
        flags.append(f"queueing: {load.running_cap} running per replica (cap or KV pool)")
    running = math.ceil(min(load.concurrency, load.running_cap))
    if load.arrival_rate <= 0 and running > memory.max_concurrency:
        flags.append(on_demand_flag(target.engine, running, memory.max_concurrency))
    return Prediction(
        legal=True, reasons=(), mode=model.mode, anchor_id=model.anchor_id, flags=tuple(flags),
        metrics=metrics, memory=memory,
        breakdown={"decode_step": decode_step.to_json(), "prefill_step": prefill_step.to_json(),
                   "decode_batch": batch},
        fusion_opportunities=_fusion_opportunities(target, config, decode_step, batch), source=source,
    )


def on_demand_flag(engine: Engine | str, running: int, fitting: int) -> str:
    """What a steady state running more requests than their final length fits says
    (`_running_cap`: an on-demand engine's staggered requests hold their mean length)."""
    return (f"KV paged on demand: {running} running per replica, more than the {fitting} whose final length its "
            f"KV pool holds (max_concurrency): priced at their mean length (prompt + output / 2), as {engine} "
            "allocates blocks while tokens are generated; requests reaching their final length together would be "
            "preempted")


def busy_replicas(config: Configuration) -> int:
    """Replicas a closed loop keeps busy: with fewer clients than replicas each client has
    a replica of its own and the rest stand idle (a request is not split across replicas:
    spreading one client over eight ran it at an eighth of a batch, faster than a batch of
    one); an open loop's Poisson arrivals reach every replica."""
    replicas = max(1, config.replicas)
    if config.arrival_rate > 0 or config.concurrency <= 0:
        return replicas
    return min(replicas, config.concurrency)


def _analytical_disaggregated(target: Target, config: Configuration, workload: WorkloadSpec,
                              anchoring: Anchoring, memory: MemoryBreakdown) -> Prediction:
    prefill_config, decode_config = pool_configs(config)
    prefill_model = anchoring.model(prefill_config)
    decode_model = anchoring.model(decode_config)
    backend = config.kv_transfer_backend or DEFAULT_BACKEND[target.engine]
    cluster = target.cluster
    link = link_gbps(config.total_gpus, cluster.scale_up_gpus(), cluster.gpu.intra_node_bw_gbps,
                     cluster.gpu.nic_bw_gbps)
    kv_bytes = workload.isl * memory.kv_bytes_per_token + memory.state_bytes_per_sequence
    # the request passes two engines' front ends: the prefill pool's (with its prompt's
    # tokens) and the decode pool's (METHOD §3.11)
    decode_host_ms = host_time_ms(decode_model, 0)
    host_ms = host_time_ms(prefill_model, workload.isl) + decode_host_ms
    pools = PoolLoad(
        prefill=Load(workload.isl, workload.osl, 0, gpus=prefill_config.replica_gpus,
                     replicas=prefill_config.replicas),     # a DWDP pool's ranks are replicas (pool_configs)
        decode=Load(workload.isl, workload.osl,     # clients per busy decode replica (`busy_replicas`)
                    config.concurrency / max(1, min(config.decode_replicas, config.concurrency)),
                    running_cap=_running_cap(target.engine, decode_config, memory, workload, split=True),
                    gpus=decode_config.replica_gpus, replicas=config.decode_replicas,
                    host_us=host_ms * US_PER_MS),
        prefill_budget_tokens=rank_prefill_budget(target.engine, prefill_config) * max(1, prefill_config.attention_dp),
        handoff_us=handoff_us(backend, kv_bytes, target.card.num_layers, link),
    )
    state, rate = disaggregated_state(prefill_model, decode_model, pools, config.concurrency)
    total_gpus = config.total_gpus
    fleet = Load(workload.isl, workload.osl, config.concurrency, gpus=total_gpus, replicas=1)
    fleet_state = replace(state, requests_per_s=rate)
    metrics = fleet_state.metrics(fleet, host_ms)
    if workload.requests_per_client:
        metrics["ttft_ms_mean"] = disaggregated_benchmark_ttft_ms(
            prefill_model, decode_model, pools, config.concurrency, state, workload.requests_per_client) + host_ms
    metrics["ttft_single_ms"] = (single_ttft_ms(prefill_model, workload.isl,
                                                rank_prefill_budget(target.engine, prefill_config))
                                 - host_time_ms(prefill_model, workload.isl) + host_ms)
    batch, decode_step, prefill_step, step_metrics = _steps(prefill_model, decode_model, workload, state.running)
    metrics.update(_memory_metrics(memory, decode_config))
    metrics["gpus_per_replica"] = float(total_gpus)
    metrics.update(step_metrics)
    mode, anchor_id = Mode.ANCHORED, anchoring.anchor_id
    flags = tuple(dict.fromkeys([*(f"prefill: {f}" for f in prefill_model.flags),
                                 *(f"decode: {f}" for f in decode_model.flags),
                                 *(["overloaded"] if state.overloaded else [])]))
    return Prediction(
        legal=True, reasons=(), mode=mode, anchor_id=anchor_id,
        flags=flags, metrics=metrics, memory=memory,
        breakdown={"decode_step": decode_step.to_json(), "prefill_step": prefill_step.to_json(),
                   "decode_batch": batch, "kv_handoff_us": round(pools.handoff_us, 3),
                   "kv_transfer_backend": backend, "decode_host_ms": decode_host_ms},
        fusion_opportunities=_fusion_opportunities(target, decode_config, decode_step, batch),
    )


def _fusion_opportunities(target: Target, config: Configuration, step: StepCost, batch: int) -> tuple:
    found = fusion_opportunities(target.card, target.cluster.gpu, config, step.total_us, batch)
    return tuple(found)


def _des_comm_metrics(config: Configuration, anchoring: Anchoring, extra: dict) -> dict[str, float]:
    """Communication per step at the DES's mean decode batch and prefill step (issue 13)."""
    prefill_config, decode_config = pool_configs(config) or (config, config)
    prefill_model, decode_model = anchoring.model(prefill_config), anchoring.model(decode_config)
    batch = max(1, round(extra["mean_decode_batch"]))
    tokens = max(1, round(extra["mean_prefill_tokens"]))
    context = extra.get("mean_decode_context_tokens", 0.0)
    return {"decode_comm_ms": communication_ms(decode_model, decode_model.decode(batch, context),
                                               batch * _verify_tokens(decode_model)),
            "prefill_comm_ms": communication_ms(prefill_model, prefill_model.prefill(tokens, 1, 0.0), tokens)}


def _des(target: Target, config: Configuration, workload: WorkloadSpec, anchoring: Anchoring,
         memory: MemoryBreakdown, seed: int, num_requests: int | None, replications: int = 1,
         stop_rules: tuple = ()) -> Prediction:
    result = simulate(target, config, workload, step_model_factory=anchoring.model,
                      num_requests=num_requests, seed=seed, replications=replications, stop_rules=stop_rules)
    metrics = dict(result.metrics)
    metrics.update(_memory_metrics(memory, config))
    metrics.update(_des_comm_metrics(config, anchoring, result.extra))
    flags = tuple(dict.fromkeys(f for m in anchoring.models() for f in m.flags)) + result.flags
    if "stopped_early" in result.extra:
        flags += (f"stopped early: {result.extra['stopped_early']['reason']}",)
    return Prediction(
        legal=True, reasons=(), mode=Mode.ANCHORED, anchor_id=anchoring.anchor_id,
        flags=flags, metrics=metrics, memory=memory, breakdown={"des": result.to_json()}, source="des",
        seed_intervals=dict(result.seed_intervals),
    )
