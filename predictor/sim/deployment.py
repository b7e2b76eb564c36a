"""Build the simulated deployment: replicas, ranks, KV pools, caches, hand-off links.

Colocated: ``config.replicas`` replicas of the configuration's layout. Disaggregated
(METHOD §3.11): the pools of `predictor.feasibility.pool_configs`, each with its own
step model (from the caller's factory), its own KV budget per attention-DP rank and its
own running cap; prefill ranks keep a prefix cache, decode ranks do not. A shared host
pool (``host_kv_tier_gb=N:shared``, `host_pool`) replaces the per-rank host tiers: one
store over the deployment's GPUs that every entry-pool rank reaches over its NIC. Host time
(METHOD §3.12) is added to a colocated request's TTFT and end-to-end; a split's request
passes two engines' front ends (METHOD §3.11): half the prefill pool's host time is billed
on the prefill step that admits the prompt (later prompts queue behind it), the other half
and the decode pool's fixed host time are added to TTFT: in all, what the analytical
model bills (`predictor.predict`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from levers.catalog import Engine
from levers.configuration import Configuration
from predictor.analytical import host_time_ms
from predictor.feasibility import pool_configs
from predictor.sim.capacity import CapacityModel, PoolCapacity
from predictor.sim.handoff import HandoffLaw, HandoffLinks
from predictor.sim.host_pool import NetworkLink, SharedHostPool, pool_size
from predictor.sim.host_tier import HostLink, dram_capacity_blocks
from predictor.sim.kv_pool import KvPool, PoolShape
from predictor.sim.prefix_cache import CACHES, EvictionPolicy
from predictor.sim.pricing import StepPricer
from predictor.sim.rank import Rank
from predictor.sim.replica import Replica
from predictor.sim.request import Request
from predictor.sim.results import Recorder
from predictor.sim.scheduler import PROFILES, SCHEDULERS, Limits, rank_chunk_tokens
from predictor.step.cost import StepModel
from predictor.step.handoff import DEFAULT_BACKEND, link_gbps
from predictor.units import US_PER_MS

#: share of a split's prefill host time billed on the step that admits the prompt (METHOD
#: §3.11); the rest reaches the TTFT with the decode pool's own
PREFILL_STEP_HOST_SHARE = 0.5

StepModelFactory = Callable[[Configuration], StepModel]


@dataclass(frozen=True, slots=True)
class HostTimes:
    fixed_us: float
    per_token_us: float

    @staticmethod
    def of(model: StepModel) -> HostTimes:
        fixed = host_time_ms(model, 0) * US_PER_MS
        return HostTimes(fixed, host_time_ms(model, 1000) - fixed / US_PER_MS)

    def of_prompt(self, prompt_tokens: int) -> float:
        return self.fixed_us + self.per_token_us * prompt_tokens


@dataclass
class Pool:
    role: str                    # "colocated", "prefill" or "decode"
    replicas: list[Replica]
    units: list[Rank]
    model: StepModel
    capacity: PoolCapacity
    host: HostTimes
    ttft_host_share: float       # share of the host time added to TTFT / end-to-end

    def host_us(self, request: Request) -> float:
        return self.ttft_host_share * self.host.of_prompt(request.prompt_tokens)


@dataclass
class Deployment:
    entry: Pool                  # where requests arrive (colocated or prefill pool)
    decode: Pool | None          # disaggregated decode pool
    links: HandoffLinks | None
    total_gpus: int
    shared_pool: SharedHostPool | None = None   # host_kv_tier_gb=N:shared

    def dispose(self) -> None:
        """The replay is over: unlink the prefix caches' trees, so that reference counting
        frees them and the collection after the replay (`predictor.sim.api`) has little
        to walk."""
        for pool in (self.entry, self.decode):
            for unit in pool.units if pool is not None else ():
                if unit.pool.cache is not None:
                    unit.pool.cache.dispose()
        if self.shared_pool is not None:
            self.shared_pool.cache.dispose()


@dataclass(frozen=True, slots=True)
class BuildInputs:
    engine: Engine
    step_model_factory: StepModelFactory
    capacity_model: CapacityModel
    block_tokens: int
    eviction: EvictionPolicy
    host_link_gbps: float
    recorder: Recorder
    exact_prices: bool = False      # no price rounding or merged runs (predictor.sim.pricing)
    nic_gbps: float = 0.0           # per GPU, toward a shared host pool
    host_on_engine: bool = False    # host work runs on the cores that run the steps (a CPU engine)
    output_share: float = 1.0       # of its output a colocated request holds pages for (`KvPool`)


def build_deployment(config: Configuration, inputs: BuildInputs, *, scale_up_gpus: int,
                     fabric_gbps: float, nic_gbps: float) -> Deployment:
    pools = pool_configs(config)
    entry_config = config if pools is None else pools[0]
    shared = _shared_pool(config, inputs, entry_config)
    if pools is None:
        entry = _pool("colocated", config, inputs, host_billed=1.0 if inputs.host_on_engine else 0.0, shared=shared)
        return Deployment(entry, None, None, config.total_gpus, shared)
    prefill_config, decode_config = pools
    prefill = _pool("prefill", prefill_config, inputs, host_billed=PREFILL_STEP_HOST_SHARE, shared=shared)
    for replica in prefill.replicas:
        replica.admits_for_decode = True
    decode = _pool("decode", decode_config, inputs)      # bills its host time on TTFT in full
    # the rest of the prefill pool's host time, and the decode pool's own fixed part
    rest = 1.0 - PREFILL_STEP_HOST_SHARE
    decode.host = HostTimes(decode.host.fixed_us + rest * prefill.host.fixed_us, rest * prefill.host.per_token_us)
    backend = config.kv_transfer_backend or DEFAULT_BACKEND[inputs.engine]
    law = HandoffLaw(backend, link_gbps(config.total_gpus, scale_up_gpus, fabric_gbps, nic_gbps),
                     prefill.capacity.kv_bytes_per_token, prefill.capacity.state_bytes_per_sequence,
                     prefill.capacity.num_layers)
    return Deployment(prefill, decode, HandoffLinks(law, len(prefill.units)), config.total_gpus, shared)


def _shared_pool(config: Configuration, inputs: BuildInputs, entry_config: Configuration) -> SharedHostPool | None:
    """``host_kv_tier_gb=N:shared``: N GB per GPU over every GPU of the deployment, one copy
    of each prefix (and its state checkpoint) for every rank of the entry pool."""
    if not config.is_host_tier_shared or config.prefix_cache != "on" or config.host_tier_gb_per_gpu <= 0:
        return None
    capacity = inputs.capacity_model(entry_config)
    return SharedHostPool(pool_size(config.host_tier_gb_per_gpu, config.total_gpus, capacity.copy_kv_bytes_per_token,
                                    capacity.copy_state_bytes, inputs.block_tokens))


def _limits(config: Configuration, engine: Engine, role: str) -> Limits:
    profile = PROFILES[engine]
    cap = min(config.max_running_requests, profile.running_cap or config.max_running_requests)
    if role == "decode" and profile.decode_pool_cap is not None and config.attention_dp <= 1:
        cap = min(cap, profile.decode_pool_cap)
    speculating = config.spec_method != "none" and config.spec_depth > 0
    return Limits(cap, config.max_batched_tokens, rank_chunk_tokens(engine, config),
                  1 + (config.spec_depth if speculating else 0))


def _pool(role: str, config: Configuration, inputs: BuildInputs, host_billed: float = 0.0,
          shared: SharedHostPool | None = None) -> Pool:
    """One pool's replicas. ``host_billed``: the share of each request's host time billed on
    the step that admits its prompt (a split's prefill pool bills half; an engine whose
    host work shares the steps' cores bills all of it) instead of added to its TTFT."""
    model = inputs.step_model_factory(config)
    capacity = inputs.capacity_model(config)
    profile = PROFILES[inputs.engine]
    shape = PoolShape(capacity.kv_capacity_tokens, config.kv_block_size or profile.default_page_tokens,
                      inputs.block_tokens, capacity.state_tokens)
    caching = config.prefix_cache == "on" and role != "decode"
    private_gb = 0.0 if config.is_host_tier_shared else config.host_tier_gb_per_gpu
    dram_blocks = dram_capacity_blocks(private_gb, capacity.kv_bytes_per_token, inputs.block_tokens)
    limits = _limits(config, inputs.engine, role)
    host = HostTimes.of(model)
    pricer = StepPricer(model, exact=inputs.exact_prices)
    tokens_per_step = max(1.0, float(model.tokens_per_step))
    replicas, units = [], []
    for r in range(max(1, config.replicas)):
        ranks = []
        for _ in range(max(1, config.attention_dp)):
            cache = CACHES[inputs.eviction](dram_blocks) if caching else None
            link = HostLink(inputs.host_link_gbps) if caching and dram_blocks else None
            net = NetworkLink(inputs.nic_gbps) if caching and shared is not None else None
            pool = KvPool(shape, cache, holds_output=role != "prefill", shared=shared if caching else None,
                          output_share=inputs.output_share if role == "colocated" else 1.0)
            rank = Rank(len(units), r, pool, link, tokens_per_step, net)
            ranks.append(rank)
            units.append(rank)
        billed = (host_billed * host.fixed_us, host_billed * host.per_token_us)
        replicas.append(Replica(r, ranks, SCHEDULERS[inputs.engine], pricer, limits, inputs.recorder,
                                host_us_on_prefill=billed[0], host_us_per_prompt_token=billed[1]))
    share = 0.0 if host_billed else 1.0
    return Pool(role, replicas, units, model, capacity, host, share)
