"""What a fixed-count serving benchmark measures (METHOD §2, §8): the wave model.

Serving benchmarks (InferenceX, AIConfigurator's silicon runs: `--num-prompts 10 x C
--max-concurrency C`) start `C` clients together; each sends `N` requests of fixed
lengths one after another, no think time. Their mean TTFT and mean TPOT are not the
steady state of an endless run:
- all `C` prompts of the first round arrive at once, so their prefills queue (TTFT) and
  stall the decodes of the requests admitted first (TPOT);
- an engine that runs prefill before decode (SGLang, ATOM: prefill-first) finishes every
  request of a round at the same step, so every round is such a wave; an engine that
  mixes prefill chunks into decode steps (vLLM, TRT-LLM) staggers the rounds into a
  pipelined steady state after the first;
- throughput counts the ramp and the drain.

This module replays that protocol on one replica's step model, with requests that arrive
together moving together ("groups" waiting, "cohorts" decoding): prefill steps in the
engine's token budget and chunk size (`predictor.sim.scheduler.PROFILES`), mixed steps,
and decode stretches between events priced in bulk at their mean context. It replays the
first `ROUNDS_REPLAYED` rounds of every client and extrapolates the later ones from the
last replayed round (rounds after the first repeat). The DES replays the same protocol
request by request (`predictor.sim`); they agree where both apply (tests).

Host time (METHOD §3.12) delays a request's arrival at the scheduler and counts in its
TTFT and end-to-end latency, not in the GPU's work.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from levers.catalog import Engine
from predictor.analytical import chunks, host_time_ms
from predictor.sim.scheduler import PROFILES, EngineProfile
from predictor.step.cost import StepModel
from predictor.units import MS_PER_S, US_PER_MS, US_PER_S

ROUNDS_REPLAYED = 3
MAX_EVENTS = 200_000


@dataclass(frozen=True, slots=True)
class Protocol:
    """One replica's share of a fixed-count benchmark."""

    isl: int
    osl: int
    clients: int                  # per replica
    requests_per_client: int
    running_cap: int
    token_budget: int             # max_batched_tokens
    chunk_tokens: int             # chunked_prefill_size


@dataclass(frozen=True, slots=True)
class BenchmarkResult:
    ttft_ms: float                # mean over requests, from the client's send
    ttft_p50_ms: float            # median over requests
    tpot_ms: float                # mean over requests of (last - first token) / (osl - 1)
    e2e_ms: float
    duration_s: float             # first send to last token, all N rounds
    mean_decode_batch: float      # time-weighted decoding requests
    decode_step_ms: float         # pure decode step at that batch

    def output_tokens_per_s(self, protocol: Protocol) -> float:
        return protocol.clients * protocol.requests_per_client * protocol.osl / self.duration_s


@dataclass(slots=True)
class _Group:
    """Prompts sent together, waiting to be (fully) prefilled."""

    count: int
    sent_us: float
    arrives_us: float
    round: int
    done_tokens: int = 0          # tokens of the first prompt already prefilled


@dataclass(slots=True)
class _Cohort:
    """Requests whose prefill finished at the same step: they decode together."""

    count: int
    sent_us: float
    first_token_us: float
    round: int
    steps_left: int


class _Replay:
    def __init__(self, model: StepModel, protocol: Protocol, profile: EngineProfile, host_us: float) -> None:
        self.model, self.p, self.profile, self.host_us = model, protocol, profile, host_us
        self.tokens_per_step = max(1.0, model.tokens_per_step)
        self.osl_steps = max(1, math.ceil((protocol.osl - 1) / self.tokens_per_step))
        self.rounds = min(protocol.requests_per_client, ROUNDS_REPLAYED)
        self.now = 0.0
        self.waiting: deque[_Group] = deque([_Group(protocol.clients, 0.0, host_us, 1)])
        self.running: list[_Cohort] = []
        self.in_flight = 0            # prompts partly prefilled (hold a running slot)
        self.ttft: dict[int, list[tuple[int, float]]] = {}
        self.tpot: dict[int, list[tuple[int, float]]] = {}
        self.round_end: dict[int, float] = {}
        self.busy_batch_us = 0.0
        self.decode_time_us = 0.0

    # -- events ---------------------------------------------------------------------
    @property
    def decoding(self) -> int:
        return sum(c.count for c in self.running)

    def _arrived(self) -> bool:
        return bool(self.waiting) and self.waiting[0].arrives_us <= self.now + 1e-9

    def _slots(self) -> int:
        return self.p.running_cap - self.decoding - self.in_flight

    def _finish(self, cohort: _Cohort) -> None:
        self.tpot.setdefault(cohort.round, []).append(
            (cohort.count, (self.now - cohort.first_token_us) / max(1, self.p.osl - 1)))
        self.round_end[cohort.round] = max(self.round_end.get(cohort.round, 0.0), self.now)
        if cohort.round < self.rounds:
            self.waiting.append(_Group(cohort.count, self.now, self.now + self.host_us, cohort.round + 1))

    def _context(self) -> float:
        if not self.running:
            return float(self.p.isl)
        done = sum(c.count * (self.osl_steps - c.steps_left) for c in self.running) / self.decoding
        return self.p.isl + done * self.tokens_per_step

    # -- prefill ----------------------------------------------------------------------
    def _take_prefill(self, budget: int) -> tuple[int, int, list[tuple[_Group, int]]]:
        """Tokens and prompts this step prefills from the arrived groups (FCFS), and how
        many prompts each group completes. A new prompt needs a running slot; an engine
        that does not chunk takes whole prompts (one larger than the budget alone)."""
        isl, tokens, seqs, started, completed = self.p.isl, 0, 0, 0, []
        free = self._slots()
        whole = not self.profile.chunks_prefill
        for group in self.waiting:
            if group.arrives_us > self.now + 1e-9:
                break
            done, stop = 0, False
            while done < group.count:
                if tokens >= budget:
                    stop = True
                    break
                need = isl - group.done_tokens
                if group.done_tokens == 0:
                    if started >= free:
                        stop = True
                        break
                    started += 1
                if whole and need > budget - tokens and tokens > 0:
                    stop = True
                    break
                take = min(need, budget - tokens)
                tokens, seqs = tokens + take, seqs + 1
                if take < need:
                    group.done_tokens += take
                    stop = True
                    break
                group.done_tokens = 0
                done += 1
            completed.append((group, done))
            if stop or done < group.count:
                break
        return tokens, seqs, completed

    def _admit(self, completed: list[tuple[_Group, int]], end_us: float) -> None:
        for group, done in completed:
            if done:
                self.running.append(_Cohort(done, group.sent_us, end_us, group.round, self.osl_steps))
                self.ttft.setdefault(group.round, []).append((done, end_us - group.sent_us))
                group.count -= done
        while self.waiting and self.waiting[0].count <= 0:
            self.waiting.popleft()
        self.in_flight = 1 if self.waiting and self.waiting[0].done_tokens > 0 else 0

    def _prefill_step(self) -> bool:
        budget = self.p.chunk_tokens if self.profile.prefill_step_uses_chunk else self.p.token_budget
        decoders = self.decoding if self.profile.mixes_prefill else 0
        if self.profile.mixes_prefill:
            budget = max(0, self.p.token_budget - decoders * int(self.tokens_per_step))
        tokens, seqs, completed = self._take_prefill(budget)
        if tokens <= 0:
            return False
        if decoders:
            step_us = self.model.mixed_us(tokens, decoders, self._context(), 0.0)
        else:
            step_us = self.model.prefill_us(tokens, max(1, seqs), 0.0)
        self._advance_decoders(1, step_us, decoders)
        self._admit(completed, self.now)
        return True

    # -- decode ----------------------------------------------------------------------------
    def _advance_decoders(self, steps: int, step_us: float, decoders: int) -> None:
        self.now += steps * step_us
        if not decoders:
            return
        self.busy_batch_us += decoders * steps * step_us
        self.decode_time_us += steps * step_us
        for cohort in self.running:
            cohort.steps_left -= steps
        for cohort in [c for c in self.running if c.steps_left <= 0]:
            self.running.remove(cohort)
            self._finish(cohort)

    def _decode_stretch(self) -> None:
        batch = self.decoding
        steps = min(c.steps_left for c in self.running)
        context = self._context() + steps * self.tokens_per_step / 2.0
        step_us = self.model.decode_us(batch, context)
        if self.waiting and self._slots() > 0 and step_us > 0:
            until_arrival = self.waiting[0].arrives_us - self.now
            steps = max(1, min(steps, math.ceil(until_arrival / step_us)))
        self._advance_decoders(steps, step_us, batch)

    def run(self) -> None:
        for _ in range(MAX_EVENTS):
            if not self.waiting and not self.running:
                return
            if self._arrived() and self._slots() > 0 and self._prefill_step():
                continue
            if self.running:
                self._decode_stretch()
            elif self.waiting:
                self.now = max(self.now, self.waiting[0].arrives_us)
        raise RuntimeError("benchmark replay did not finish")

    # -- results ------------------------------------------------------------------------------
    def _mean(self, values: dict[int, list[tuple[int, float]]]) -> float:
        n = self.p.requests_per_client
        weights = {r: 1.0 if r == 1 or self.rounds == 1 else (n - 1) / (self.rounds - 1) for r in values}
        total = sum(weights[r] * c for r, items in values.items() for c, _ in items)
        return sum(weights[r] * c * v for r, items in values.items() for c, v in items) / total

    def _median(self, values: dict[int, list[tuple[int, float]]]) -> float:
        n = self.p.requests_per_client
        weighted = sorted((v, c * (1.0 if r == 1 or self.rounds == 1 else (n - 1) / (self.rounds - 1)))
                          for r, items in values.items() for c, v in items)
        half, seen = sum(w for _, w in weighted) / 2.0, 0.0
        for value, weight in weighted:
            seen += weight
            if seen >= half:
                return value
        return weighted[-1][0]

    def result(self) -> BenchmarkResult:
        last = self.round_end[self.rounds]
        later = self.p.requests_per_client - self.rounds
        per_round = (last - self.round_end[1]) / (self.rounds - 1) if self.rounds > 1 else last
        duration_us = last + later * per_round
        ttft_us, tpot_us = self._mean(self.ttft), self._mean(self.tpot)
        batch = self.busy_batch_us / self.decode_time_us if self.decode_time_us else 1.0
        step_ms = self.model.decode_us(max(1, round(batch)), self.p.isl + self.p.osl / 2.0) / US_PER_MS
        return BenchmarkResult(ttft_us / US_PER_MS, self._median(self.ttft) / US_PER_MS, tpot_us / US_PER_MS,
                               (ttft_us + tpot_us * (self.p.osl - 1)) / US_PER_MS, duration_us / US_PER_S,
                               batch, step_ms)


def runs_in_waves(engine: Engine | str, workload) -> bool:
    """A fixed-count benchmark of exactly fixed lengths on a prefill-first engine keeps its
    rounds synchronised (every request of a round ends at one step): replayed here. An
    engine that mixes prefill chunks into decode steps staggers them after the first
    round, as random lengths do: the analytical steady state plus the first wave
    (`predictor.analytical.benchmark_ttft_ms`) describes it. A prefill-first engine deployed
    with mixed chunked prefill (``workload.harness.mixed_prefill``: AIConfigurator's SGLang workers,
    `predictor.corpus.formats`) mixes as they do. Measured on AIConfigurator's corpus: the
    SGLang runs of its gap-analysis collector (SGLang's defaults) carry the waves' prefill
    stalls in their TPOT; its vLLM and TRT-LLM TTFTs grow as steady-state queueing does."""
    return bool(workload.requests_per_client and workload.fixed_lengths and not workload.harness.mixed_prefill
                and not PROFILES[Engine(engine)].mixes_prefill)


def replay(model: StepModel, protocol: Protocol, engine: Engine | str) -> BenchmarkResult:
    """The benchmark of ``protocol`` on one replica of ``model`` (module docstring)."""
    profile = PROFILES[Engine(engine)]
    host_us = host_time_ms(model, protocol.isl) * US_PER_MS
    run = _Replay(model, protocol, profile, host_us)
    run.run()
    return run.result()


def metrics(result: BenchmarkResult, protocol: Protocol, gpus: int, replicas: int) -> dict[str, float]:
    """The objectives' keys (`predictor.analytical.SteadyState.metrics`) of a benchmark."""
    out_rate = protocol.clients * protocol.requests_per_client * protocol.osl / result.duration_s
    in_rate = out_rate * protocol.isl / protocol.osl
    interactivity = MS_PER_S / result.tpot_ms
    return {
        "ttft_ms_mean": result.ttft_ms, "ttft_ms_p50": result.ttft_p50_ms, "tpot_ms_mean": result.tpot_ms, "itl_ms_mean": result.tpot_ms,
        "e2e_ms_mean": result.e2e_ms, "interactivity_mean": interactivity,
        "output_throughput_per_gpu": out_rate / gpus, "input_throughput_per_gpu": in_rate / gpus,
        "throughput_per_gpu": (out_rate + in_rate) / gpus, "output_throughput_fleet": out_rate * replicas,
        "input_throughput_fleet": in_rate * replicas, "throughput_fleet": (out_rate + in_rate) * replicas,
    }


__all__ = ["BenchmarkResult", "Protocol", "chunks", "metrics", "replay"]
