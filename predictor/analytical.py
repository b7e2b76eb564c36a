"""The analytical predictor for fixed-length traffic (METHOD §2): the steady state of
continuous batching on one step cost model, solved by a short fixed-point iteration.

Semantics (the DES reproduces them when queueing and cache effects are absent):
- Closed loop (``arrival_rate == 0``): ``C`` clients per replica, zero think time; a
  finished request is replaced at once by a new one with ``isl`` prompt tokens.
  Open loop: Poisson arrivals at ``arrival_rate`` requests/s over the fleet.
- Running requests are capped by ``max_running_requests`` and by the KV pool
  (METHOD §3.9: never report throughput at a concurrency HBM cannot hold); clients
  beyond the cap wait in the queue, which adds to TTFT from arrival (Little's law).
- A prompt is prefilled in chunks of ``min(chunked_prefill_size, max_batched_tokens)``
  tokens, each chunk riding in a decode step of the running batch (a mixed step).
  Prefill work is charged to the steps as marginal cost: ``mixed - decode``. When more
  than one prompt arrives per step, one mixed step carries as many of them as its token
  budget holds, priced once (`prefill_marginal_us`: ``n`` prompts a step are steps of
  ``floor(n)`` and ``floor(n) + 1`` in the proportion that averages ``n``, so the price is
  continuous in the load and the fixed point settles): a sum of one-prompt marginals prices
  many short prompts below the compute roofline (Qwen3-32B at 128 clients, 100/10: 156%
  of the H200's peak FLOP/s) and charges a batch past the captured sizes its eager
  launch once per prompt instead of once per step (Llama-3.1-8B, 100/10: ITL 4.8 -> 50 ms
  from 128 to 200 clients).
- Under attention DP a prompt's chunks run on its own rank (the others wait at the MoE
  layers' collectives), and the prompts arriving in one step land on ranks at random: the
  step carries the busiest rank's, ``E[max_r N_r]`` of ``dp`` Poisson counts of mean
  ``k / dp`` for ``k`` prompts per step (``k`` when ``dp = 1``; ``k / dp`` when every
  rank has several), grouped in one mixed step as one rank groups them, the MoE layers
  carrying every rank's prompt tokens. An engine that balances attention DP (TRT-LLM's
  ``attention_dp_config.enable_balance``) holds prompts until every rank has one and
  starts them together: ``k / dp`` one-prompt steps per step.
- A rank starts at most the prompts its chunk holds a step (a share of one that takes
  several chunks). A closed loop asking more is prefill-bound: every step carries a full
  chunk on every rank, the rate is that budget's, and the other clients wait (Little's
  law), as the DES has them; charging the excess prompts to the same step priced
  DeepSeek-R1 DEP8 on H200 at 100/10 and 1,024 clients at 137 ms a step (DES: 103 ms).
- A decode step commits ``tokens_per_step`` (L(k), METHOD §3.8) tokens per request.
- Mean decode context = ``isl + osl/2`` (decode cost is linear in context).

Disaggregated deployments (METHOD §3.11) price each pool with its own step model: the
prefill pool runs prefill-only steps, the KV is handed off, the decode pool runs pure
decode steps; throughput per GPU counts both pools.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache

from predictor.step.cost import StepModel
from predictor.units import MS_PER_S, US_PER_MS, US_PER_S

ITERATIONS = 12
BUSY_CEILING = 0.95           # an open loop's share of time in prefill work past which it is overloaded
TOKENIZE_US_PER_TOKEN = 8.0   # METHOD §3.12: 5-11 us per prompt token (midpoint)
HOST_BASE_MS = 1.0            # HTTP + scheduling + detokenisation per request (rank-only default)


@dataclass(frozen=True, slots=True)
class Load:
    """What one replica (or one pool) sees."""

    isl: int
    osl: int
    concurrency: float            # clients per replica (closed loop)
    arrival_rate: float = 0.0     # requests/s per replica (open loop); 0 = closed loop
    running_cap: int = 256        # min(max_running_requests, KV-pool capacity)
    chunk_tokens: int = 8192
    gpus: int = 1                 # GPUs of one replica
    replicas: int = 1             # replicas carrying this load
    idle_replicas: int = 0        # replicas with no client (a closed loop of fewer clients than replicas)
    host_us: float = 0.0          # per-request host time a closed-loop client waits out (METHOD §3.12)
    host_overlaps: bool = True    # host work overlaps the steps (False: it shares their cores, a CPU engine)
    recv_interval: int = 1        # decode steps between the scheduler's polls for new requests
    ahead_steps: int = 0          # steps the scheduler plans ahead of the GPU (vLLM --async-scheduling: 1)
    balanced_dp: bool = False     # attention-DP prompts start together, one per rank (TRT-LLM enable_balance)


@dataclass(frozen=True, slots=True)
class SteadyState:
    ttft_ms: float                # from arrival (queueing included)
    ttft_admission_ms: float      # from admission (engine benchmarks)
    tpot_ms: float
    itl_ms: float
    e2e_ms: float
    step_ms: float                # mean decode step, prefill marginal spread over steps
    decode_step_ms: float         # pure decode step at the running batch
    mixed_step_ms: float          # a decode step carrying one prefill chunk (or the prompts a step takes together)
    running: float                # mean decoding requests per replica
    requests_per_s: float         # per replica
    mixed_step_fraction: float
    overloaded: bool

    def metrics(self, load: Load, host_ms: float) -> dict[str, float]:
        out_rate = self.requests_per_s * load.osl
        in_rate = self.requests_per_s * load.isl
        gpus = load.gpus * (load.replicas + load.idle_replicas) / load.replicas   # idle replicas' GPUs count too
        ttft = self.ttft_ms + host_ms
        e2e = self.e2e_ms + host_ms
        tokens_per_s = MS_PER_S / self.tpot_ms
        metrics = {
            "ttft_ms_mean": ttft, "ttft_ms_p50": ttft,
            "ttft_admission_ms_mean": self.ttft_admission_ms + host_ms,
            "tpot_ms_mean": self.tpot_ms, "tpot_ms_p50": self.tpot_ms,
            "itl_ms_mean": self.itl_ms, "itl_ms_p50": self.itl_ms,
            "e2e_ms_mean": e2e, "e2e_ms_p50": e2e,
            "interactivity_mean": tokens_per_s, "interactivity_p50": tokens_per_s,
            "generation_rate": tokens_per_s,
            "output_throughput_per_gpu": out_rate / gpus,
            "input_throughput_per_gpu": in_rate / gpus,
            "throughput_per_gpu": (out_rate + in_rate) / gpus,
            "output_throughput_fleet": out_rate * load.replicas,
            "input_throughput_fleet": in_rate * load.replicas,
            "throughput_fleet": (out_rate + in_rate) * load.replicas,
            "mixed_step_fraction": self.mixed_step_fraction,
            "mixed_decode_step_ms": self.mixed_step_ms,
            "tpot_pollution": self.step_ms / self.decode_step_ms if self.decode_step_ms else 1.0,
        }
        if load.osl <= 1:       # one output token: no decode step, so no TPOT, ITL or per-user speed
            for key in SINGLE_TOKEN_UNDEFINED:
                metrics.pop(key)
        if self.queues_without_end(load):       # no TTFT or E2E from arrival
            for key in UNBOUNDED_WHEN_OVERLOADED:  # (80 ms was printed beside the overloaded flag)
                metrics.pop(key)
        return metrics

    def queues_without_end(self, load: Load) -> bool:
        """An open loop whose arrivals pass what the replicas serve: its queue grows without end."""
        return self.overloaded and load.arrival_rate > 0


SINGLE_TOKEN_UNDEFINED = ("tpot_ms_mean", "tpot_ms_p50", "itl_ms_mean", "itl_ms_p50", "interactivity_mean",
                          "interactivity_p50", "generation_rate")
#: figures from arrival an open loop past its replicas' rate has none of (the TTFT from admission stays)
UNBOUNDED_WHEN_OVERLOADED = ("ttft_ms_mean", "ttft_ms_p50", "e2e_ms_mean", "e2e_ms_p50")


def chunks(isl: int, chunk_tokens: int) -> list[tuple[int, int]]:
    """(tokens, prior context) of each prefill chunk of one prompt."""
    size = max(1, chunk_tokens)
    return [(min(size, isl - start), start) for start in range(0, isl, size)]


@lru_cache(maxsize=4096)
def busiest_rank_prompts(prompts_per_step: float, ranks: int) -> float:
    """``E[max_r N_r]`` over ``ranks`` Poisson counts of mean ``prompts_per_step / ranks``:
    the prompts the busiest attention-DP rank carries in a step (module docstring)."""
    if ranks <= 1 or prompts_per_step <= 0:
        return max(0.0, prompts_per_step)
    mean = prompts_per_step / ranks
    if mean > 50.0:   # normal limit: the largest of `ranks` draws
        return mean + math.sqrt(mean * 2.0 * math.log(ranks))
    total, pmf, cdf = 0.0, math.exp(-mean), 0.0
    for m in range(int(mean + 12.0 * math.sqrt(mean) + 20.0)):
        cdf += pmf
        total += 1.0 - min(1.0, cdf) ** ranks
        pmf *= mean / (m + 1)
    return total


def prompts_together(per_step: float, isl: int, chunk_tokens: int) -> float:
    """How many prompts a mixed step carries on average (module docstring): those arriving
    per step, at most as many as its token budget holds (a last one partly: the budget is
    filled); 1 when at most one arrives per step or a prompt fills the budget."""
    if per_step <= 1.0 or isl >= chunk_tokens:
        return 1.0
    return min(per_step, chunk_tokens / max(1, isl))


def prefill_marginal_us(model: StepModel, isl: int, chunk_tokens: int, batch: int, ctx: float,
                        together: float = 1.0, step_prompts: float = 0.0) -> tuple[float, float]:
    """(sum over chunks of the mixed-step time, sum of marginal cost over decode) of one
    prompt (on one attention-DP rank); ``together`` (`prompts_together`) single-chunk
    prompts share a mixed step on average: steps of ``floor`` and ``floor + 1`` of them in
    the proportion that averages it, each priced once and split between its prompts. Under
    attention DP ``together`` is what the busiest rank carries and ``step_prompts`` the
    prompts of its step over every rank (their MoE tokens)."""
    base = model.decode_us(batch, ctx) if batch > 0 else 0.0
    if together > 1.0:
        low = int(together)
        share = together - low              # of steps carrying one prompt more
        mixed = mixed_marginal = 0.0
        for count, weight in ((low, 1.0 - share), (low + 1, share)):
            if weight <= 0.0:
                continue
            step = (_on_ranks_us(model, count * isl, count, batch, ctx, 0.0, step_prompts) if batch > 0
                    else model.prefill_us(count * isl, count, 0.0))
            mixed += weight * step
            mixed_marginal += weight * (step - base)
        return mixed, mixed_marginal / together
    pieces = chunks(isl, chunk_tokens)
    mixed_total = 0.0
    for tokens, prior in pieces:
        if batch > 0:
            mixed_total += _on_ranks_us(model, tokens, 1, batch, ctx, prior, step_prompts)
        else:
            mixed_total += model.prefill_us(tokens, 1, prior)
    return mixed_total, mixed_total - base * len(pieces)


def _on_ranks_us(model: StepModel, rank_tokens: int, rank_prompts: int, batch: int, ctx: float, prior: float,
                 step_prompts: float) -> float:
    """A mixed step whose busiest attention-DP rank carries ``rank_prompts`` prompts'
    ``rank_tokens`` and whose ranks carry ``step_prompts`` such prompts in all (their MoE
    tokens; between whole counts in proportion, so the price is continuous in the load).
    Without attention DP every prompt is on the one rank; with no more prompts than the
    rank's, the step is the rank's alone."""
    if model.attention_dp <= 1:
        return model.mixed_us(rank_tokens, batch, ctx, prior, prompts=rank_prompts)
    if step_prompts <= rank_prompts:
        return model.mixed_us(rank_tokens, batch, ctx, prior, prompts=rank_prompts, rank_prompts=rank_prompts)
    per_prompt = rank_tokens / rank_prompts
    low = int(step_prompts)
    share = step_prompts - low
    total = 0.0
    for prompts, weight in ((low, 1.0 - share), (low + 1, share)):
        if weight > 0.0:
            prompts = max(prompts, rank_prompts)
            total += weight * model.mixed_us(round(prompts * per_prompt), batch, ctx, prior, prompts=prompts,
                                             rank_prompts=rank_prompts)
    return total


def steady_state(model: StepModel, load: Load) -> SteadyState:
    """Colocated replica in steady state (closed or open loop). An open loop that arrives
    faster than the replica serves is overloaded: its queue grows without end, and what it
    serves is the replica full, a closed loop at its running cap (reporting the offered
    load priced Llama-3.1-70B TP2 on H100 at 500 requests/s at 256,000 tok/s/GPU, 36x
    the FP8 peak)."""
    state = _steady_state(model, load)
    if load.arrival_rate <= 0 or not state.overloaded:
        return state
    full = _steady_state(model, replace(load, arrival_rate=0.0, concurrency=float(max(1, load.running_cap))))
    if full.requests_per_s >= load.arrival_rate:
        return state
    return replace(full, overloaded=True)


def _steady_state(model: StepModel, load: Load) -> SteadyState:
    L = max(1.0, model.tokens_per_step)
    osl_steps = max(0.0, (load.osl - 1) / L)
    ctx = load.isl + load.osl / 2.0
    num_chunks = len(chunks(load.isl, load.chunk_tokens))
    cap = max(1, load.running_cap)
    closed = load.arrival_rate <= 0
    in_system = min(load.concurrency, cap) if closed else 1.0
    running = max(1.0, in_system * osl_steps / (osl_steps + num_chunks)) if osl_steps else 0.0
    rate_per_s = load.arrival_rate
    ranks = model.attention_dp
    # the prompts a rank can start a step: its chunk's worth (a share of one that takes
    # several chunks); every attention-DP rank has its own budget
    rank_capacity = load.chunk_tokens / max(1, load.isl)
    prefill_bound = False
    step_us = model.decode_us(max(1, round(running)), ctx)
    for _ in range(ITERATIONS):
        overloaded = False      # the last iteration's verdict, not a latch of the first guesses'

        batch = max(1, round(running))
        # A request's own prefill never stalls its own decode: each request sees the
        # prefills of the others only ((C-1)/C of the running set in a closed loop).
        others = running * (in_system - 1) / in_system if closed else running
        decode_us = model.decode_us(batch, ctx)
        per_step = others / osl_steps if closed and osl_steps else rate_per_s * step_us / US_PER_S
        # prompts arriving in one step overlap on different ranks (module docstring): the
        # step carries the busiest rank's, grouped as one rank's mixed step groups them
        if ranks <= 1:
            busiest = per_step
        elif load.balanced_dp:
            busiest = per_step / ranks
        else:
            per_step = round(per_step, 3)
            busiest = busiest_rank_prompts(per_step, ranks)
        # A rank's step holds its chunk's worth: its prompts beyond wait a step (the rate is
        # capped below, so a loop asking more than every rank's budget queues). The step
        # that carries the busiest rank's prompts carries the others' too: every prompt of
        # the step, or of the steps that carry any when fewer than one arrives on it.
        carried = min(busiest, rank_capacity)
        step_prompts = min(per_step / min(1.0, busiest), rank_capacity * ranks) if busiest > 0 else 0.0
        if closed:      # ... but no more prompts than requests: 2 clients never fill 8 balanced ranks
            step_prompts = min(step_prompts, in_system)
        together = prompts_together(carried, load.isl, load.chunk_tokens)
        mixed_total_us, marginal_us = prefill_marginal_us(model, load.isl, load.chunk_tokens, round(others), ctx,
                                                          together, step_prompts)
        # per prompt arriving a step, so that `_step_us` adds the busiest rank's work
        if per_step > 0:
            marginal_us *= carried / per_step
        if closed:
            busy_share = None
        else:
            busy_share = rate_per_s * marginal_us / US_PER_S
            if busy_share >= BUSY_CEILING:
                overloaded, busy_share = True, BUSY_CEILING
        step_us = _step_us(decode_us, marginal_us, others, osl_steps, busy_share, per_step)
        # An arrival waits for the running step to end: open loop by definition, closed
        # loop because a client's next request reaches the engine after its host
        # turnaround, at no particular phase of the other clients' step; a scheduler that
        # polls for new requests every `recv_interval` steps makes it wait half of those,
        # and one that plans `ahead_steps` steps ahead of the GPU (vLLM's async
        # scheduling) admits it that many steps later.
        wait_us = ((load.recv_interval / 2.0 + load.ahead_steps) * step_us
                   * (min(1.0, others) if closed else 1.0))
        admission_ttft_us = mixed_total_us
        e2e_us = admission_ttft_us + wait_us + osl_steps * step_us
        if closed:
            # A client's cycle is its request's engine time plus the host time it waits
            # out (HTTP, tokenising, detokenising); clients queued beyond the running cap
            # hide the others' host time, so a saturated engine runs at cap / e2e (unless
            # the host work runs on the steps' own cores).
            busy_us = e2e_us if load.host_overlaps else e2e_us + load.host_us
            rate_per_s = min(load.concurrency / max(e2e_us + load.host_us, 1e-9), in_system / max(busy_us, 1e-9)) * US_PER_S
            prefill_limit = rank_capacity * ranks / step_us * US_PER_S
            prefill_bound = rate_per_s > prefill_limit
            rate_per_s = min(rate_per_s, prefill_limit)
            running = rate_per_s * osl_steps * step_us / US_PER_S
        else:
            running = min(cap, rate_per_s * osl_steps * step_us / US_PER_S)
            if running >= cap:
                overloaded = True
    queue_us = wait_us
    if closed and (load.concurrency > cap or prefill_bound) and rate_per_s:
        # Little's law over the whole closed loop: clients beyond the cap, or beyond what
        # the prefill budget starts, wait.
        queue_us += max(0.0, load.concurrency / rate_per_s * US_PER_S - e2e_us - load.host_us)
    mixed_one_us = _on_ranks_us(model, min(load.chunk_tokens, round(together) * load.isl), round(together),
                                max(1, round(running)), ctx, 0.0, 0.0)
    steps_per_s = US_PER_S / step_us
    mixed_fraction = min(1.0, rate_per_s * num_chunks / together / steps_per_s) if steps_per_s else 0.0
    return SteadyState(
        ttft_ms=(admission_ttft_us + queue_us) / US_PER_MS, ttft_admission_ms=admission_ttft_us / US_PER_MS,
        tpot_ms=step_us / L / US_PER_MS, itl_ms=step_us / US_PER_MS,
        e2e_ms=(admission_ttft_us + queue_us + osl_steps * step_us) / US_PER_MS,
        step_ms=step_us / US_PER_MS, decode_step_ms=decode_us / US_PER_MS, mixed_step_ms=mixed_one_us / US_PER_MS,
        running=running, requests_per_s=rate_per_s, mixed_step_fraction=mixed_fraction, overloaded=overloaded,
    )


MAX_WAVE_STEPS = 4096


def first_wave_ttft_us(model: StepModel, load: Load, decodes_here: bool = True) -> float:
    """Mean TTFT from admission of ``C`` prompts arriving together at an idle replica
    (the start of a fixed-count benchmark): prompts are prefilled in arrival order,
    ``chunk_tokens`` per step, and each admitted request decodes in the later steps
    (``decodes_here``; a prefill pool's requests decode elsewhere, so its steps stay pure
    prefill)."""
    clients = int(min(load.concurrency, load.running_cap))
    if clients <= 0:
        return 0.0
    budget = max(1, load.chunk_tokens)
    total_tokens = clients * load.isl
    clock_us, done_tokens, decoding, total_ttft_us = 0.0, 0, 0, 0.0
    for _ in range(MAX_WAVE_STEPS):
        step_tokens = min(budget, total_tokens - done_tokens)
        if step_tokens <= 0:
            break
        if decoding and decodes_here:
            clock_us += model.mixed_us(step_tokens, decoding, load.isl, prompts=-(-step_tokens // max(1, load.isl)))
        else:
            clock_us += model.prefill_us(step_tokens, max(1, step_tokens // max(1, load.isl)))
        done_tokens += step_tokens
        finished = min(clients, done_tokens // load.isl) - decoding
        total_ttft_us += finished * clock_us
        decoding += finished
    return total_ttft_us / max(1, decoding)


def wave_tokenize_ms(model: StepModel, load: Load) -> float:
    """Mean extra TTFT of the first wave's prompts from their serial tokenisation: the
    server's front end (one process in vLLM, SGLang and TensorRT-LLM's OpenAI servers)
    tokenises the ``C`` prompts that arrive together one after another, so the k-th waits
    for the k-1 before it; the per-prompt-token host time (METHOD §3.12) is that work.
    Measured on the dev corpora: mean TTFT of the in-ladder protocol 18.4% -> 15.5%
    (InferenceX), 21.6% -> 18.2% (AIConfigurator)."""
    clients = min(load.concurrency, load.running_cap)
    return max(0.0, clients - 1) / 2.0 * _host_parts(model)[1] * load.isl / US_PER_MS


def stall_ms(model: StepModel, clients: float) -> float:
    """The one-off start-up stall a run's first wave pays at ``clients`` per replica (0
    with no anchor): the anchor's ``S0 + S1 x clients`` (`predictor.corpus.refine`)."""
    return getattr(model, "first_wave_stall_ms", 0.0) + getattr(model, "first_wave_stall_per_client_ms", 0.0) * clients


def benchmark_ttft_ms(model: StepModel, load: Load, state: SteadyState, requests_per_client: int) -> float:
    """Mean TTFT of a run of ``requests_per_client`` requests per client: the first
    request of each client meets the first wave (and any one-off start-up stall its
    anchor measured), the others the steady state."""
    wave_ms = (first_wave_ttft_us(model, load) / US_PER_MS + stall_ms(model, load.concurrency)
               + wave_tokenize_ms(model, load))
    return _with_first_wave(wave_ms, state, requests_per_client)


def _with_first_wave(wave_ms: float, state: SteadyState, requests_per_client: int) -> float:
    """Mean TTFT when one request in ``requests_per_client`` meets the first wave (no
    sooner than its own admission) and the others the steady state."""
    wave_share = 1.0 / max(1, requests_per_client)
    return wave_share * max(wave_ms, state.ttft_admission_ms) + (1.0 - wave_share) * state.ttft_ms


def _step_us(decode_us: float, marginal_us: float, running: float, osl_steps: float,
             busy_share: float | None, per_step: float = 1.0) -> float:
    """Mean step time with each finishing request's prefill spread over the steps.

    Closed loop: per step, ``running / osl_steps`` requests finish and are replaced,
    each bringing ``marginal_us`` of prefill work; with one output token (no decode) the
    steps are the prompts' own, ``per_step`` of them each (at least one). Open loop: the
    prefill work takes a ``busy_share`` of wall time.
    """
    if busy_share is not None:
        return decode_us / (1.0 - busy_share)
    if osl_steps <= 0:
        return decode_us + marginal_us * max(1.0, per_step)
    return decode_us + marginal_us * running / osl_steps


def single_ttft_ms(model: StepModel, isl: int, chunk_tokens: int) -> float:
    """TTFT of one prompt on an idle replica (what a concurrency-1 harvest measures):
    its prefill in chunks plus host time (METHOD §3.12, §4)."""
    prefill_us = sum(model.prefill_us(n, 1, prior) for n, prior in chunks(isl, chunk_tokens))
    return prefill_us / US_PER_MS + host_time_ms(model, isl)


def host_time_ms(model: StepModel, isl: int) -> float:
    """Per-request host time added to TTFT and end-to-end only (METHOD §3.12).

    Anchored models carry the host time fitted from their anchor (``host_time_ms`` and
    ``host_us_per_prompt_token``); otherwise a documented default: 1 ms plus
    tokenisation at 8 us per prompt token (the midpoint of 5-11 us).
    """
    fixed_ms, per_token_us = _host_parts(model)
    return fixed_ms + per_token_us * isl / US_PER_MS


def _host_parts(model: StepModel) -> tuple[float, float]:
    """(fixed ms, us per prompt token) of ``model``'s host time (`host_time_ms`)."""
    fixed = getattr(model, "host_time_ms", None)
    if fixed is None:
        return HOST_BASE_MS, TOKENIZE_US_PER_TOKEN
    return fixed, getattr(model, "host_us_per_prompt_token", None) or 0.0


@dataclass(frozen=True, slots=True)
class PoolLoad:
    """A disaggregated deployment's two pools (METHOD §3.11)."""

    prefill: Load                 # per prefill replica; its running_cap unused
    decode: Load                  # per decode replica
    prefill_budget_tokens: int    # token budget of one prefill replica (summed over DP ranks)
    handoff_us: float             # KV hand-off of one request


def disaggregated_state(prefill_model: StepModel, decode_model: StepModel, pools: PoolLoad,
                        total_concurrency: float) -> tuple[SteadyState, float]:
    """Closed loop over both pools; returns the state and the fleet request rate."""
    isl, osl = pools.decode.isl, pools.decode.osl
    L = max(1.0, decode_model.tokens_per_step)
    osl_steps = max(0.0, (osl - 1) / L)
    ctx = isl + osl / 2.0
    prompts_per_step = max(1, pools.prefill_budget_tokens // max(1, isl))
    if isl <= pools.prefill_budget_tokens:
        service_us = prefill_model.prefill_us(prompts_per_step * isl, prompts_per_step)
        single_us = prefill_model.prefill_us(isl, 1)
    else:
        single_us = sum(prefill_model.prefill_us(n, 1, prior)
                        for n, prior in chunks(isl, pools.prefill_budget_tokens))
        service_us, prompts_per_step = single_us, 1
    prefill_capacity = pools.prefill.replicas * prompts_per_step / (service_us / US_PER_S)
    per_replica_cap = max(1, pools.decode.running_cap)
    decode_cap = per_replica_cap * pools.decode.replicas
    running = min(total_concurrency / pools.decode.replicas, per_replica_cap)
    for _ in range(ITERATIONS * 2):
        step_us = decode_model.decode_us(max(1, round(running)), ctx)
        utilisation = min(rate_guess(running, osl_steps, step_us, pools) / prefill_capacity, 0.98)
        wait_us = utilisation / (2 * (1 - utilisation)) * service_us
        ttft_us = wait_us + single_us + pools.handoff_us + step_us / 2.0
        e2e_us = ttft_us + osl_steps * step_us
        rate = min(total_concurrency / ((e2e_us + pools.decode.host_us) / US_PER_S), prefill_capacity * 0.98,
                   decode_cap / (max(osl_steps, 1e-9) * step_us / US_PER_S))
        target = min(per_replica_cap, max(1.0, rate * osl_steps * step_us / US_PER_S / pools.decode.replicas))
        running = 0.5 * running + 0.5 * target  # damped: the step depends on the batch
    overloaded = rate >= prefill_capacity * 0.97
    queue_us = 0.0
    if total_concurrency > decode_cap or overloaded:
        # Little's law over the closed loop: clients beyond what the decode pool runs, or
        # than the prefill pool starts, wait (DeepSeek-R1 8k/1k on two B200 nodes, prefill
        # bound: TTFT stayed 6.6 s from 256 to 1,024 clients while the rate did not move)
        queue_us = max(0.0, total_concurrency / rate * US_PER_S - e2e_us - pools.decode.host_us)
    state = SteadyState(
        ttft_ms=(ttft_us + queue_us) / US_PER_MS, ttft_admission_ms=ttft_us / US_PER_MS,
        tpot_ms=step_us / L / US_PER_MS, itl_ms=step_us / US_PER_MS, e2e_ms=(e2e_us + queue_us) / US_PER_MS,
        step_ms=step_us / US_PER_MS, decode_step_ms=step_us / US_PER_MS, mixed_step_ms=step_us / US_PER_MS,
        running=running, requests_per_s=rate, mixed_step_fraction=0.0, overloaded=overloaded,
    )
    return state, rate


def disaggregated_benchmark_ttft_ms(prefill_model: StepModel, decode_model: StepModel, pools: PoolLoad,
                                    total_concurrency: float, state: SteadyState,
                                    requests_per_client: int) -> float:
    """Mean TTFT of a fixed-count run on a split deployment (METHOD §3.11): the first
    request of each client meets the first wave, the others the steady state. The wave is
    the ``C`` prompts arriving together, spread over the prefill replicas, each replica
    prefilling its share in arrival order at its token budget; then the hand-off and the
    decode pool's pick-up, and any one-off start-up stall the pools' anchors measured (half
    of each, as the steady state bills host time). Measured on InferenceX's Dynamo rows:
    the mean TTFT exceeds the median by ~1/10 of this wave (gpt-oss-120b, one TP1 prefill
    worker, 128 clients: mean 153 ms, median 71 ms)."""
    replicas = max(1, pools.prefill.replicas)
    wave = Load(pools.decode.isl, pools.decode.osl, math.ceil(total_concurrency / replicas),
                running_cap=max(1, math.ceil(total_concurrency)), chunk_tokens=pools.prefill_budget_tokens)
    wave_us = first_wave_ttft_us(prefill_model, wave, decodes_here=False) + pools.handoff_us + state.step_ms * US_PER_MS / 2.0
    clients = pools.decode.concurrency
    stall = (stall_ms(prefill_model, clients) + stall_ms(decode_model, clients)) / 2.0
    front_end = Load(pools.decode.isl, pools.decode.osl, total_concurrency, running_cap=max(1, math.ceil(total_concurrency)))
    wave_ms = wave_us / US_PER_MS + stall + wave_tokenize_ms(prefill_model, front_end)
    return _with_first_wave(wave_ms, state, requests_per_client)


def rate_guess(running: float, osl_steps: float, step_us: float, pools: PoolLoad) -> float:
    """Fleet request rate implied by ``running`` decoding requests per decode replica."""
    return running * pools.decode.replicas / max(osl_steps * step_us / US_PER_S, 1e-9)
