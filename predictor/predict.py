"""Price one configuration: choose the step model (anchored, projected rank-only, or
simulate mode), then the analytical steady state (fixed-length traffic) or the DES
(agentic traffic, traces, or whenever distributions are needed). METHOD §2, §4, §5.

`predict` is the one function every consumer calls: the CLI's `predict`, `score`, the
tuning agent's evaluation, the mix planner and the Pareto sweeps.
"""

from __future__ import annotations

import time
from dataclasses import replace
from functools import lru_cache

from levers.configuration import Configuration
from predictor.analytical import (
    Load,
    PoolLoad,
    benchmark_ttft_ms,
    disaggregated_state,
    host_time_ms,
    steady_state,
)
from predictor.anchors.store import AnchorStore
from predictor.feasibility import check_configuration, pool_configs
from predictor.memory import MemoryBreakdown
from predictor.prediction import Prediction, illegal
from predictor.step.anchored import AnchoredStepModel
from predictor.step.cost import Mode, StepCost, StepModel
from predictor.step.fusions import fusion_opportunities
from predictor.step.handoff import DEFAULT_BACKEND, handoff_us, link_gbps
from predictor.step.simulate import SimulateStepModel
from predictor.target import Target
from predictor.units import BYTES_PER_GB, MS_PER_S, US_PER_MS
from predictor.workload import WorkloadSpec


@lru_cache(maxsize=1)
def default_store() -> AnchorStore:
    return AnchorStore.default()


class ProjectedStepModel:
    """An anchored step model used outside its coverage: same numbers, rank-only."""

    mode = Mode.RANK_ONLY

    def __init__(self, inner: StepModel, reason: str) -> None:
        self.inner = inner
        self.reason = reason
        self.anchor_id = inner.anchor_id
        self.tokens_per_step = inner.tokens_per_step
        self.host_time_ms = getattr(inner, "host_time_ms", None)
        self.host_us_per_prompt_token = getattr(inner, "host_us_per_prompt_token", None)
        self.first_wave_stall_ms = getattr(inner, "first_wave_stall_ms", 0.0)
        self.decode, self.prefill, self.mixed = inner.decode, inner.prefill, inner.mixed
        self.decode_us, self.prefill_us, self.mixed_us = inner.decode_us, inner.prefill_us, inner.mixed_us
        self.communication_us = getattr(inner, "communication_us", None)
        self.probe_decode_us = getattr(inner, "probe_decode_us", inner.decode_us)

    @property
    def flags(self) -> tuple[str, ...]:
        """Read after pricing: the inner model adds flags as calls reveal them."""
        return tuple(dict.fromkeys((*self.inner.flags, "rank-only", f"not-covered: {self.reason}")))


def uncontended_step_ms(model: StepModel, context_tokens: float) -> float:
    """The batch-1 decode step (an objective), priced without raising flags."""
    probe = getattr(model, "probe_decode_us", model.decode_us)
    return probe(1, context_tokens) / US_PER_MS


def communication_ms(model: StepModel, step: StepCost, tokens: float) -> float:
    """The step's modelled communication. Anchored steps already contain theirs, so
    they report the target's modelled collectives instead of a term of the step."""
    modelled = getattr(model, "communication_us", None)
    if modelled is not None:
        return modelled(tokens) / US_PER_MS
    return step.get("communication") / US_PER_MS


def step_model_for(target: Target, config: Configuration, store: AnchorStore | None = None) -> StepModel:
    """The anchor of the configuration's parallel shape, else simulate mode (METHOD §4)."""
    store = store if store is not None else default_store()
    selection = store.select(target.card, target.cluster, target.engine, config, config.concurrency)
    if selection.anchor is None:
        return SimulateStepModel(target.card, target.cluster, target.engine, config)
    model = AnchoredStepModel(selection.anchor, target.card, target.cluster, target.engine, config,
                              sibling=selection.sibling, flags=selection.flags)
    return model if selection.covered else ProjectedStepModel(model, selection.reason)


def predict(target: Target, config: Configuration, workload: WorkloadSpec, *,
            store: AnchorStore | None = None, need_distribution: bool = False, seed: int = 0,
            num_requests: int | None = None, replications: int = 1, stop_rules: tuple = ()) -> Prediction:
    """Price ``config`` for ``target`` under ``workload``; illegal configurations come
    back with their reasons and ``metrics=None``. ``replications`` > 1 (DES only) replays
    independent draws: means with 90% ``seed_intervals`` (predictor.sim.replications);
    ``stop_rules`` end a DES replay that has clearly missed a bound (predictor.sim.stop)."""
    started = time.perf_counter()
    feasibility = check_configuration(target.card, target.cluster, target.engine, config,
                                      workload.context_tokens)
    if not feasibility.legal:
        return illegal(feasibility.reasons, feasibility.memory)
    if workload.is_fixed and not need_distribution:
        prediction = _analytical(target, config, workload, store, feasibility.memory)
    else:
        prediction = _des(target, config, workload, store, feasibility.memory, seed, num_requests, replications,
                          stop_rules)
    return replace(prediction, wall_ms=(time.perf_counter() - started) * MS_PER_S)


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


def _running_cap(config: Configuration, memory: MemoryBreakdown) -> int:
    """Running requests one (decode) replica holds: the engine cap or the KV pool."""
    return max(1, min(config.max_running_requests, memory.max_concurrency))


def _steps(prefill_model: StepModel, decode_model: StepModel, workload: WorkloadSpec,
           running: float) -> tuple[int, StepCost, StepCost, dict[str, float]]:
    """(decode batch, decode step, prefill step, step metrics) of a priced steady state."""
    batch = max(1, round(running))
    decode_step = decode_model.decode(batch, workload.isl + workload.osl / 2.0)
    prefill_step = prefill_model.prefill(workload.isl, 1, 0.0)
    metrics = {
        "uncontended_step_ms": uncontended_step_ms(decode_model, workload.isl),
        "decode_comm_ms": communication_ms(decode_model, decode_step, batch),
        "prefill_comm_ms": communication_ms(prefill_model, prefill_step, workload.isl),
    }
    return batch, decode_step, prefill_step, metrics


def _combined(models: list[StepModel]) -> tuple[Mode, str | None]:
    """Anchored only when every model is; the distinct anchor ids, comma-joined."""
    mode = Mode.ANCHORED if {m.mode for m in models} == {Mode.ANCHORED} else Mode.RANK_ONLY
    anchors = [m.anchor_id for m in models if m.anchor_id]
    return mode, ",".join(dict.fromkeys(anchors)) or None


def _analytical(target: Target, config: Configuration, workload: WorkloadSpec,
                store: AnchorStore | None, memory: MemoryBreakdown) -> Prediction:
    if config.disaggregated:
        return _analytical_disaggregated(target, config, workload, store, memory)
    model = step_model_for(target, config, store)
    replicas = max(1, config.replicas)
    load = Load(
        isl=workload.isl, osl=workload.osl, concurrency=config.concurrency / replicas,
        arrival_rate=config.arrival_rate / replicas,
        running_cap=_running_cap(config, memory),
        chunk_tokens=min(config.chunked_prefill_size, config.max_batched_tokens),
        gpus=config.replica_gpus, replicas=replicas,
    )
    state = steady_state(model, load)
    host_ms = host_time_ms(model, workload.isl)
    metrics = state.metrics(load, host_ms)
    if workload.requests_per_client:
        metrics["ttft_ms_mean"] = benchmark_ttft_ms(model, load, state, workload.requests_per_client) + host_ms
    batch, decode_step, prefill_step, step_metrics = _steps(model, model, workload, state.running)
    metrics.update(_memory_metrics(memory, config))
    metrics.update(step_metrics)
    flags = list(model.flags)
    if state.overloaded:
        flags.append("overloaded")
    if config.concurrency / replicas > load.running_cap:
        flags.append(f"queueing: {load.running_cap} running per replica (cap or KV pool)")
    return Prediction(
        legal=True, reasons=(), mode=model.mode, anchor_id=model.anchor_id, flags=tuple(flags),
        metrics=metrics, memory=memory,
        breakdown={"decode_step": decode_step.to_json(), "prefill_step": prefill_step.to_json(),
                   "decode_batch": batch},
        fusion_opportunities=_fusion_opportunities(target, config, decode_step, batch),
    )


def _analytical_disaggregated(target: Target, config: Configuration, workload: WorkloadSpec,
                              store: AnchorStore | None, memory: MemoryBreakdown) -> Prediction:
    prefill_config, decode_config = pool_configs(config)
    prefill_model = step_model_for(target, prefill_config, store)
    decode_model = step_model_for(target, decode_config, store)
    backend = config.kv_transfer_backend or DEFAULT_BACKEND[target.engine]
    cluster = target.cluster
    link = link_gbps(config.total_gpus, cluster.scale_up_gpus(), cluster.gpu.intra_node_bw_gbps,
                     cluster.gpu.nic_bw_gbps)
    kv_bytes = workload.isl * memory.kv_bytes_per_token + memory.state_bytes_per_sequence
    pools = PoolLoad(
        prefill=Load(workload.isl, workload.osl, 0, gpus=prefill_config.replica_gpus,
                     replicas=config.prefill_replicas),
        decode=Load(workload.isl, workload.osl, config.concurrency / config.decode_replicas,
                    running_cap=_running_cap(config, memory),
                    gpus=decode_config.replica_gpus, replicas=config.decode_replicas),
        prefill_budget_tokens=config.max_batched_tokens * max(1, prefill_config.attention_dp),
        handoff_us=handoff_us(backend, kv_bytes, target.card.num_layers, link),
    )
    state, rate = disaggregated_state(prefill_model, decode_model, pools, config.concurrency)
    total_gpus = config.total_gpus
    fleet = Load(workload.isl, workload.osl, config.concurrency, gpus=total_gpus, replicas=1)
    fleet_state = replace(state, requests_per_s=rate)
    host_ms = host_time_ms(prefill_model, workload.isl) / 2.0 + host_time_ms(decode_model, 0) / 2.0
    metrics = fleet_state.metrics(fleet, host_ms)
    batch, decode_step, prefill_step, step_metrics = _steps(prefill_model, decode_model, workload, state.running)
    metrics.update(_memory_metrics(memory, decode_config))
    metrics["gpus_per_replica"] = float(total_gpus)
    metrics.update(step_metrics)
    mode, anchor_id = _combined([prefill_model, decode_model])
    flags = tuple(dict.fromkeys([*(f"prefill: {f}" for f in prefill_model.flags),
                                 *(f"decode: {f}" for f in decode_model.flags),
                                 *(["overloaded"] if state.overloaded else [])]))
    return Prediction(
        legal=True, reasons=(), mode=mode, anchor_id=anchor_id,
        flags=flags, metrics=metrics, memory=memory,
        breakdown={"decode_step": decode_step.to_json(), "prefill_step": prefill_step.to_json(),
                   "decode_batch": batch, "kv_handoff_us": round(pools.handoff_us, 3),
                   "kv_transfer_backend": backend},
        fusion_opportunities=_fusion_opportunities(target, decode_config, decode_step, batch),
    )


def _fusion_opportunities(target: Target, config: Configuration, step: StepCost, batch: int) -> tuple:
    found = fusion_opportunities(target.card, target.cluster.gpu, config, step.total_us, batch)
    return tuple(found)


def _des_comm_metrics(config: Configuration, models: dict[Configuration, StepModel],
                      extra: dict) -> dict[str, float]:
    """Communication per step at the DES's mean decode batch and prefill step (issue 13)."""
    prefill_config, decode_config = pool_configs(config) or (config, config)
    prefill_model, decode_model = models[prefill_config], models[decode_config]
    batch = max(1, round(extra["mean_decode_batch"]))
    tokens = max(1, round(extra["mean_prefill_tokens"]))
    context = extra.get("mean_decode_context_tokens", 0.0)
    return {"decode_comm_ms": communication_ms(decode_model, decode_model.decode(batch, context), batch),
            "prefill_comm_ms": communication_ms(prefill_model, prefill_model.prefill(tokens, 1, 0.0), tokens)}


def _des(target: Target, config: Configuration, workload: WorkloadSpec, store: AnchorStore | None,
         memory: MemoryBreakdown, seed: int, num_requests: int | None, replications: int = 1,
         stop_rules: tuple = ()) -> Prediction:
    from predictor.sim import simulate

    models: dict[Configuration, StepModel] = {}

    def factory(replica_config: Configuration) -> StepModel:
        if replica_config not in models:
            models[replica_config] = step_model_for(target, replica_config, store)
        return models[replica_config]

    result = simulate(target, config, workload, step_model_factory=factory,
                      num_requests=num_requests, seed=seed, replications=replications, stop_rules=stop_rules)
    metrics = dict(result.metrics)
    metrics.update(_memory_metrics(memory, config))
    metrics.update(_des_comm_metrics(config, models, result.extra))
    chosen = list(models.values())
    mode, anchor_id = _combined(chosen)
    flags = tuple(dict.fromkeys(f for m in chosen for f in m.flags))
    if "stopped_early" in result.extra:
        flags += (f"stopped early: {result.extra['stopped_early']['reason']}",)
    return Prediction(
        legal=True, reasons=(), mode=mode, anchor_id=anchor_id,
        flags=flags, metrics=metrics, memory=memory, breakdown={"des": result.to_json()}, source="des",
        seed_intervals=dict(result.seed_intervals),
    )
