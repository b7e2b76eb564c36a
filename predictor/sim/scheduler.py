"""Engine scheduler models: how each engine fills a step (METHOD §5).

Every engine has a running-request cap (``max_running_requests`` per scheduler rank), a
token budget (``max_batched_tokens``), a prefill chunk (``chunked_prefill_size``), paged
KV and an admission policy. They differ in whether prefill rides in decode steps:

| engine | steps | chunking | admission | page | source |
|---|---|---|---|---|---|
| vllm | mixed: decodes first, then prefill chunks in the leftover budget | yes | fcfs | 16 | vLLM V1 scheduler |
| trtllm | mixed (in-flight batching, max tokens per step) | chunked context | fcfs | 32 | TRT-LLM IFB, GUARANTEED_NO_EVICT |
| sglang | prefill-first: an extend batch of at most ``chunked_prefill_size`` tokens runs alone, decodes wait | yes | lpm | 1 | SGLang, enable_mixed_chunk=False |
| atom | prefill-first, prefill-only steps of whole prompts | only a prompt larger than the budget | fcfs | 16 | ATOM scheduling guide |
| llamacpp | one request at a time (running cap 1), whole prompts | as atom | fcfs | 1 | llama.cpp server |

``lpm`` (longest prefix match) orders a backlog of 2..128 waiting requests by resident
prefix (SGLang falls back to FCFS above 128); FCFS keeps arrival order. Both stop at the
first request that does not fit (head-of-line). TensorRT-LLM balances attention DP as its
recipes configure it (`holds_prompts`): new prompts wait until every rank has one, or 60
steps. SGLang caps a decode pool without
attention DP at 128 running requests (METHOD §3.11). Only this module and the KV pool
change request state (STYLE rule 2): `schedule` admits and picks chunks, `advance`
applies a priced step.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from itertools import islice
from typing import TYPE_CHECKING, NamedTuple, Protocol, Sequence

from levers.catalog import Engine
from predictor.sim.rank import Rank
from predictor.sim.request import Request

if TYPE_CHECKING:
    from levers.configuration import Configuration

LPM_MAX_QUEUE = 128                 # SGLang: lpm only while <= 128 requests wait
SGLANG_DECODE_POOL_CAP = 128        # SGLang decode pool without attention DP (METHOD §3.11)
BALANCE_TIMEOUT_STEPS = 60          # TRT-LLM attention_dp_config.timeout_iters in its recipes


class AdmissionPolicy(StrEnum):
    FCFS = "fcfs"
    LPM = "lpm"


@dataclass(frozen=True, slots=True)
class EngineProfile:
    engine: Engine
    mixes_prefill: bool             # prefill chunks ride in decode steps
    chunks_prefill: bool            # a prompt may be split across steps at any size
    prefill_step_uses_chunk: bool   # a prefill-only batch holds at most one chunk's tokens
    policy: AdmissionPolicy
    default_page_tokens: int
    decode_pool_cap: int | None = None      # engine cap on a disaggregated decode pool
    running_cap: int | None = None          # engine cap on any pool
    balances_attention_dp: bool = False     # attention-DP prompts start together, one per rank
    splits_chunk_over_dp: bool = False      # the chunk size is engine-wide: each DP rank gets 1/dp
    chunk_is_budget: bool = False           # no chunk size of its own: a prompt's chunk is the step's budget
    # a colocated replica's requests take KV pages as they grow (vLLM allocates a block at a
    # time and preempts; SGLang reserves a decaying share of the output and retracts): in a
    # fixed-length steady state each holds its prompt plus `ON_DEMAND_OUTPUT_SHARE` of its
    # output on average (`predictor.predict._running_cap`, `predictor.sim.kv_pool.KvPool`)
    on_demand_kv: bool = False


ON_DEMAND_OUTPUT_SHARE = 0.5   # a staggered request's average share of its output (`EngineProfile.on_demand_kv`)


PROFILES: dict[Engine, EngineProfile] = {
    Engine.VLLM: EngineProfile(Engine.VLLM, mixes_prefill=True, chunks_prefill=True, prefill_step_uses_chunk=False,
                               policy=AdmissionPolicy.FCFS, default_page_tokens=16, on_demand_kv=True),
    # TRT-LLM's attention-DP deployments (its DeepSeek recipes, InferenceX's and
    # AIConfigurator's launch scripts) set ``attention_dp_config.enable_balance``.
    # trtllm-serve has no chunk size: a context chunk is max_num_tokens (the launch's)
    Engine.TRTLLM: EngineProfile(Engine.TRTLLM, mixes_prefill=True, chunks_prefill=True,
                                 prefill_step_uses_chunk=False, policy=AdmissionPolicy.FCFS, default_page_tokens=32,
                                 balances_attention_dp=True, chunk_is_budget=True),
    Engine.SGLANG: EngineProfile(Engine.SGLANG, mixes_prefill=False, chunks_prefill=True,
                                 prefill_step_uses_chunk=True, policy=AdmissionPolicy.LPM, default_page_tokens=1,
                                 decode_pool_cap=SGLANG_DECODE_POOL_CAP, splits_chunk_over_dp=True,
                                 on_demand_kv=True),
    # ATOM's launch has no chunk size either (`predictor.harvest.adapters`): the lever moved
    # its price (3,185 vs 3,259 tok/s/GPU at 8,192 and 512) and launched nothing
    Engine.ATOM: EngineProfile(Engine.ATOM, mixes_prefill=False, chunks_prefill=False, prefill_step_uses_chunk=False,
                               policy=AdmissionPolicy.FCFS, default_page_tokens=16, chunk_is_budget=True),
    # llama.cpp's server (predictor.harvest): one request at a time, whole prompts, no paging.
    Engine.LLAMACPP: EngineProfile(Engine.LLAMACPP, mixes_prefill=False, chunks_prefill=False,
                                   prefill_step_uses_chunk=False, policy=AdmissionPolicy.FCFS,
                                   default_page_tokens=1, running_cap=1),
}


def rank_chunk_tokens(engine: Engine, config: Configuration) -> int:
    """The prompt chunk one attention-DP rank prefills per step: ``min(chunked_prefill_size,
    max_batched_tokens)``, except where the engine reads ``chunked_prefill_size`` as the
    replica's: SGLang divides it by ``dp_size`` when DP attention is on (its
    ``server_args``: "The chunked prefill size is adjusted to ... to avoid MoE kernel
    issues"), so a DEP8 replica at 8,192 prefills 1,024 tokens of a prompt per rank and step;
    and where the engine has no chunk size at all (TensorRT-LLM: its context chunk is
    ``max_num_tokens``, what its launch sets; ATOM's launch sets none), so the lever prices
    what runs."""
    if PROFILES[engine].chunk_is_budget:
        return config.max_batched_tokens
    chunk = config.chunked_prefill_size
    if PROFILES[engine].splits_chunk_over_dp and config.attention_dp > 1:
        chunk = max(1, chunk // config.attention_dp)
    return min(chunk, config.max_batched_tokens)


def rank_prefill_budget(engine: Engine, config: Configuration) -> int:
    """Prompt tokens one attention-DP rank prefills in a prefill-only step: its chunk where
    the engine caps such a step at one chunk (SGLang), else the token budget."""
    if PROFILES[engine].prefill_step_uses_chunk:
        return rank_chunk_tokens(engine, config)
    return config.max_batched_tokens


@dataclass(frozen=True, slots=True)
class Limits:
    """Per-rank scheduler limits of one replica."""

    running_cap: int
    token_budget: int
    chunk_tokens: int
    decode_tokens: int              # budget tokens one decoder takes: 1 + draft depth


# The per-step values below are NamedTuples, not frozen dataclasses: one of each is built
# per engine step, and a frozen dataclass's __init__ (a guarded setattr per field) costs
# 3x a tuple's (0.9 against 0.3 us for eight fields, measured).
class RankWork(NamedTuple):
    rank: Rank
    chunks: tuple[tuple[Request, int], ...]
    decodes: bool


class Batch(NamedTuple):
    work: tuple[RankWork, ...]
    max_steps: int                  # steps the batch repeats unchanged (a run advanced as one event)


class StepOutcome(NamedTuple):
    finished: tuple[Request, ...]
    prefilled: tuple[Request, ...]  # prefill done on a prefill pool: ready for hand-off


class Recorder(Protocol):
    """Where `advance` reports what happened (implemented by `results.Recorder`)."""

    def itl(self, value_us: float, weight: float) -> None: ...

    def count_tokens(self, input_tokens: float, output_tokens: float) -> None: ...

    def step(self, kind: str, num_steps: int, duration_us: float, stalls_decoders: bool,
             shape: object | None = None) -> None: ...


class ReplicaView(Protocol):
    """What a scheduler reads of its replica (the replica owns the step loop)."""

    limits: Limits
    ranks: Sequence[Rank]
    merges_runs: bool               # repeated prefill/mixed steps may run as one event
    steps_run: int                  # engine steps this replica has run
    hold_from: int | None           # `steps_run` when a balanced admission hold began


class EngineScheduler(Protocol):
    profile: EngineProfile

    def schedule(self, replica: ReplicaView, now_us: float) -> Batch | None: ...


def admission_order(rank: Rank, policy: AdmissionPolicy, slots: int) -> list[Request]:
    """The next waiting requests to try, at most ``slots`` of them."""
    if slots <= 0 or not rank.waiting:
        return []
    if policy is AdmissionPolicy.LPM and 1 < len(rank.waiting) <= LPM_MAX_QUEUE:
        return sorted(rank.waiting, key=lambda r: -rank.pool.match(r)[0])[:slots]
    return list(islice(rank.waiting, slots))


def fill_prefill(rank: Rank, profile: EngineProfile, limits: Limits, budget: int,
                 now_us: float, admits: bool = True) -> list[tuple[Request, int]]:
    """Continue admitted prompts, then (``admits``) admit waiting requests while budget,
    cap and KV allow."""
    chunks: list[tuple[Request, int]] = []
    if not rank.prefilling and not rank.waiting:
        return chunks               # a decode-only rank (most of a wide attention-DP pool)
    for request in rank.prefilling:
        limit = limits.chunk_tokens if profile.chunks_prefill else budget
        take = min(request.prefill_target - request.prefilled, limit, budget)
        if take <= 0:
            break
        chunks.append((request, take))
        budget -= take
    if rank.waiting:            # what a running cap could bind on (predictor.sim.reuse)
        rank.peak_demand = max(rank.peak_demand, rank.num_running + len(rank.waiting))
    if not admits:
        return chunks
    for request in admission_order(rank, profile.policy, limits.running_cap - rank.num_running):
        if not request.is_kv_ready:
            if budget <= 0:
                break
            if not profile.chunks_prefill and chunks and rank.pool.prefill_need(request) > budget:
                break
        if not request.is_kv_ready and not request.is_fetched and rank.pool.fetches:
            target = rank.pool.fetchable(request)
            if target:                      # fetch its prefix first; skip it while it loads
                if not rank.pool.reserve_fetch(request, target):
                    break                   # no HBM room to fetch into: the queue waits
                request.is_fetched, request.load_target = True, target
                rank.waiting.remove(request)
                rank.fetching.append(request)
                continue
            request.is_fetched = True
        if not request.is_kv_ready and not rank.pool.try_admit(request):
            break
        admit(rank, request, now_us)
        if request.is_kv_ready:
            continue
        limit = limits.chunk_tokens if profile.chunks_prefill else budget
        take = min(request.prefill_target, limit, budget)
        chunks.append((request, take))
        budget -= take
    return chunks


def admit(rank: Rank, request: Request, now_us: float) -> None:
    """Waiting -> running. A disaggregated decode admission (its KV reserved and arrived)
    stamps the first token."""
    rank.waiting.remove(request)
    if request.is_kv_ready:
        rank.add_decoder(request, now_us)
        return
    request.admit_us = now_us
    block_tokens = rank.pool.shape.block_tokens
    loaded_hit = max(0, min(request.loaded_blocks, request.hit_blocks - request.route_hbm_blocks))
    request.dram_tokens = min(request.cached_tokens, loaded_hit * block_tokens)
    rank.record_admission(request)
    request.prefill_target = request.prompt_tokens - request.cached_tokens
    request.prefilled = 0
    rank.prefilling.append(request)
    if not request.decodes_here:
        rank.admitted.append(request)       # a prefill pool's admission: its decode side may reserve


def _batch(work: list[RankWork], merges_runs: bool) -> Batch | None:
    """The step's batch (None: no rank has work) and how many times it repeats unchanged:
    until a decoder finishes, or a chunked prompt reaches its last (shorter) chunk or
    completes. Nothing else changes a scheduled batch: what could not be admitted this
    step (no budget, running cap, KV full) stays so until a finish, and an arrival or a
    freed hand-off cuts the run (`Replica.truncate`)."""
    steps: int | None = None
    chunked = False
    for w in work:
        if w.decodes:
            heap = w.rank.finish_heap       # Rank.steps_to_next_finish, inlined (the hottest loop)
            left = heap[0][0] - w.rank.step if heap else 0
            if steps is None or left < steps:
                steps = left
        for request, take in w.chunks:
            chunked = True
            left = (request.prefill_target - request.prefilled) // take
            if steps is None or left < steps:
                steps = left
    if steps is None:
        return None                 # no rank has work
    if chunked and not merges_runs:
        steps = 1
    return Batch(tuple(work), max(1, steps or 1))


class MixedScheduler:
    """vLLM / TRT-LLM: decodes first, prefill chunks fill the rest of the budget."""

    def __init__(self, profile: EngineProfile) -> None:
        self.profile = profile

    def schedule(self, replica: ReplicaView, now_us: float) -> Batch | None:
        limits, work = replica.limits, []
        held = self.profile.balances_attention_dp and len(replica.ranks) > 1 and holds_prompts(replica)
        for rank in replica.ranks:
            budget = limits.token_budget - rank.num_decoders * limits.decode_tokens
            chunks = fill_prefill(rank, self.profile, limits, budget, now_us, admits=not held)
            if chunks or rank.num_decoders:     # an idle rank adds nothing to the step
                work.append(RankWork(rank, tuple(chunks), rank.num_decoders > 0))
        batch = _batch(work, replica.merges_runs)
        if held and batch is not None:          # the run ends when the hold times out
            left = BALANCE_TIMEOUT_STEPS - (replica.steps_run - replica.hold_from)
            batch = Batch(batch.work, max(1, min(batch.max_steps, left)))
        return batch


def holds_prompts(replica: ReplicaView) -> bool:
    """TensorRT-LLM's balanced attention DP (``attention_dp_config.enable_balance``, set by
    its recipes): new prompts wait until every rank has one, or for at most
    :data:`BALANCE_TIMEOUT_STEPS` steps while the replica runs, then start together
    (`predictor.analytical` prices the same). Only prompts wait: a decode pool's arrivals
    (their KV ready) are admitted as they come."""
    ranks = replica.ranks
    with_prompts = sum(1 for rank in ranks if rank.waiting and not rank.waiting[0].is_kv_ready)
    busy = with_prompts and any(rank.num_decoders or rank.prefilling for rank in ranks)
    if not busy or with_prompts == len(ranks):
        replica.hold_from = None
        return False
    if replica.hold_from is None:
        replica.hold_from = replica.steps_run
    if replica.steps_run - replica.hold_from >= BALANCE_TIMEOUT_STEPS:
        replica.hold_from = None
        return False
    return True


class PrefillFirstScheduler:
    """SGLang / ATOM: a rank with prefill work runs a prefill-only step; decodes wait."""

    def __init__(self, profile: EngineProfile) -> None:
        self.profile = profile

    def schedule(self, replica: ReplicaView, now_us: float) -> Batch | None:
        limits, work = replica.limits, []
        budget = limits.token_budget
        if self.profile.prefill_step_uses_chunk:
            budget = min(budget, limits.chunk_tokens)
        for rank in replica.ranks:
            chunks = fill_prefill(rank, self.profile, limits, budget, now_us)
            if chunks or rank.num_decoders:
                work.append(RankWork(rank, tuple(chunks), not chunks and rank.num_decoders > 0))
        return _batch(work, replica.merges_runs)


SCHEDULERS: dict[Engine, EngineScheduler] = {
    engine: (MixedScheduler if profile.mixes_prefill else PrefillFirstScheduler)(profile)
    for engine, profile in PROFILES.items()
}


def advance(work: tuple[RankWork, ...], start_us: float, first_step_us: float,
            segments: tuple[tuple[int, float], ...], recorder: Recorder) -> StepOutcome:
    """Apply a priced step (or run) that ran from ``start_us``: decoders emit tokens,
    chunks progress, finished prompts get their first token, finished requests leave."""
    end_us, num_steps = start_us, 0
    for count, step_us in segments:
        end_us += count * step_us
        num_steps += count
    finished: list[Request] = []
    prefilled: list[Request] = []
    decoding = [w.rank for w in work if w.decodes]
    if decoding:
        finished.extend(_advance_decoders(decoding, start_us + first_step_us, end_us, segments, num_steps, recorder))
    for w in work:
        rank = w.rank
        for request, take in w.chunks:
            request.prefilled += take * num_steps
            if request.prefilled < request.prefill_target:
                continue
            rank.prefilling.remove(request)
            rank.outstanding_prefill_tokens -= request.prefill_work
            rank.pool.commit_prompt(request)
            recorder.count_tokens(request.prompt_tokens, 0.0)
            if not request.decodes_here:
                prefilled.append(request)
            elif request.output_tokens <= 1:
                request.first_token_us = end_us
                recorder.count_tokens(0.0, request.output_tokens)
                finished.append(request)
            else:
                recorder.count_tokens(0.0, 1.0)
                rank.add_decoder(request, end_us)
    for request in finished:
        request.finish_us = end_us
    return StepOutcome(tuple(finished), tuple(prefilled))


def _advance_decoders(ranks: list[Rank], first_end_us: float, end_us: float,
                      segments: tuple[tuple[int, float], ...], num_steps: int, recorder: Recorder) -> list[Request]:
    """Every decoding rank emits ``num_steps`` steps' tokens. ITL samples are (gap, weight):
    the lockstep ranks' identical gaps are recorded once with their summed weight."""
    gaps: dict[float, float] = {}
    measured = tokens = 0.0
    done: list[Request] = []
    for rank in ranks:
        established = rank.num_measured - len(rank.fresh)
        if established:
            gap = first_end_us - rank.last_decode_end_us
            gaps[gap] = gaps.get(gap, 0.0) + established
        for request in rank.fresh:
            recorder.itl(first_end_us - request.first_token_us, 1)
        rank.fresh.clear()
        measured += rank.num_measured
        tokens_per_step = rank.tokens_per_step
        tokens += num_steps * tokens_per_step * rank.num_decoders
        rank.step += num_steps
        rank.last_decode_end_us = end_us
        for request in rank.pop_finished():
            tokens -= request.steps_needed * tokens_per_step - (request.output_tokens - 1)
            done.append(request)
    for gap, weight in gaps.items():
        recorder.itl(gap, weight)
    if measured:
        for index, (count, step_us) in enumerate(segments):
            later = count - 1 if index == 0 else count
            if later:
                recorder.itl(step_us, later * measured)
    recorder.count_tokens(0.0, tokens)
    return done
