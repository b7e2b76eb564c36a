"""Is a configuration legal? Structure (levers.legality) then memory (METHOD §3.9).

One entry point, :func:`check_configuration`, used by `inferasim check`, `predict` and
every phase of the search: the agent's guards and the user's CLI apply the same rules.
A disaggregated deployment is checked pool by pool, each with its own layout.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from levers.catalog import Engine, parse_layout_options
from levers.configuration import Configuration
from levers.legality import context_reasons, effective_activation_dtype, structural_reasons
from predictor.cards.registry import ModelCard
from predictor.hardware import Cluster
from predictor.memory import MemoryBreakdown, engine_memory_fraction, memory_breakdown
from predictor.units import BYTES_PER_GB

DEFAULT_CONTEXT_TOKENS = 2048


@dataclass(frozen=True, slots=True)
class Feasibility:
    legal: bool
    reasons: tuple[str, ...]
    memory: MemoryBreakdown | None            # colocated replica, or the decode pool
    prefill_memory: MemoryBreakdown | None = None  # disaggregated only

    def to_json(self) -> dict:
        data = {"legal": self.legal, "reasons": list(self.reasons),
                "memory": self.memory.to_json() if self.memory else None}
        if self.prefill_memory is not None:
            data["prefill_memory"] = self.prefill_memory.to_json()
        return data


def memory_for(card: ModelCard, cluster: Cluster, config: Configuration,
               context_tokens: int = DEFAULT_CONTEXT_TOKENS) -> MemoryBreakdown:
    """The memory model for the configuration's (decode/colocated) replica layout."""
    return memory_breakdown(
        card, hbm_bytes=int(cluster.gpu.hbm_gb * BYTES_PER_GB), vendor=cluster.gpu.vendor,
        tp=config.tp, pp=config.pp, ep=config.ep, attention_dp=config.attention_dp, dcp=config.dcp,
        weight_dtype=config.weight_dtype, expert_dtype=config.expert_dtype,
        activation_dtype=effective_activation_dtype(config, card), kv_cache_dtype=config.kv_cache_dtype,
        kv_memory_fraction=config.kv_memory_fraction, max_batched_tokens=config.max_batched_tokens,
        max_captured_batch=config.max_captured_batch, graph_capture=config.graph_capture,
        context_tokens=context_tokens, spec_method=config.spec_method if config.spec_depth > 0 else "none",
        tp_subgroup=config.tp_subgroup, dwdp=config.dwdp_ranks, eplb_replicas=config.eplb_replicas,
    )


def engine_memory_flag(card: ModelCard, cluster: Cluster, engine: Engine | str, config: Configuration,
                       context_tokens: int = DEFAULT_CONTEXT_TOKENS) -> float | None:
    """What ``engine``'s own memory flag must say for the KV pool the lever prices
    (`predictor.memory.engine_memory_fraction`); None (the launch passes the lever) where
    the flag counts what the lever counts (vLLM, ATOM), the engine has none, or the memory
    model prices no pool at all: a harvest measures such a layout rather than trust the
    model, and a flag asking for no pool would only stop the engine from starting."""
    return memory_flag(engine, memory_for(card, cluster, config, context_tokens))


def memory_flag(engine: Engine | str, memory: MemoryBreakdown) -> float | None:
    """`engine_memory_flag` of a breakdown already computed."""
    return engine_memory_fraction(engine, memory) if memory.kv_pool_bytes > 0 else None


def pool_configs(config: Configuration) -> tuple[Configuration, Configuration] | None:
    """(prefill, decode) replica configurations of a disaggregated deployment. A layout
    with options keeps its text on its pool's configuration (`Configuration.layout_options`);
    a DWDP prefill pool of ``n`` ranks is ``n`` single-GPU replicas per prefill replica
    (each rank runs whole layers on its own batch, no lockstep). Decode context
    parallelism is the decode pool's: the prefill pool runs without it (TensorRT-LLM's
    Helix context servers do; the other engines' prefill pools are launched so)."""
    if config.pool_layouts() is None:
        return None
    prefill_options = parse_layout_options(config.prefill_layout)
    decode_options = parse_layout_options(config.decode_layout)
    (ptp, pep, pdp), (dtp, dep, ddp) = prefill_options.widths, decode_options.widths
    plain = dict(disaggregated=False, prefill_layout=None, decode_layout=None, kv_transfer_backend=None,
                 prefill_replicas=1, decode_replicas=1)
    if prefill_options.dwdp > 1:
        prefill = replace(config, **plain, tp=1, ep=1, attention_dp=1, dcp=1,
                          replicas=config.prefill_replicas * prefill_options.dwdp)
        prefill = replace(prefill, prefill_layout=prefill_options.text)
    else:
        prefill = replace(config, **plain, tp=ptp, ep=pep, attention_dp=pdp, dcp=1, replicas=config.prefill_replicas)
        if prefill_options.subgroup > 1:
            prefill = replace(prefill, prefill_layout=prefill_options.text)
    decode = replace(config, **plain, tp=dtp, ep=dep, attention_dp=ddp, replicas=config.decode_replicas)
    if decode_options.subgroup > 1:
        decode = replace(decode, decode_layout=decode_options.text)
    return prefill, decode


def check_configuration(card: ModelCard, cluster: Cluster, engine: Engine | str,
                        config: Configuration,
                        context_tokens: int = DEFAULT_CONTEXT_TOKENS) -> Feasibility:
    """Structural reasons (and the model's maximum context) first; memory only for a
    structurally legal layout."""
    reasons = structural_reasons(config, engine, card, cluster) + context_reasons(context_tokens, card)
    if reasons:
        return Feasibility(False, tuple(reasons), None)
    pools = pool_configs(config)
    if pools is None:
        memory = memory_for(card, cluster, config, context_tokens)
        reasons = [] if memory.fits else [f"memory: {memory.reason}"]
        return Feasibility(not reasons, tuple(reasons), memory)
    prefill, decode = pools
    prefill_memory = memory_for(card, cluster, prefill, context_tokens)
    decode_memory = memory_for(card, cluster, decode, context_tokens)
    for label, memory in (("prefill pool", prefill_memory), ("decode pool", decode_memory)):
        if not memory.fits:
            reasons.append(f"memory ({label}): {memory.reason}")
    return Feasibility(not reasons, tuple(reasons), decode_memory, prefill_memory)
