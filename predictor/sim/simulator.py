"""The event loop of the discrete-event simulator (METHOD §5, timed simulation).

The simulator owns the virtual clock (microseconds), the heap and the seeded
generators; handlers return new events. A request arrives, is routed to a scheduler
rank (`router`), queues, has its host-resident prefix fetched when the scheduler reaches
it if it has one (over the rank's host link from its DRAM tier: `host_tier`, or over
the NIC from a shared pool: `host_pool`), is admitted and prefilled and
decoded by its replica's engine steps (`replica`: schedule -> price -> advance), and on
completion tells its workload source, which may release the next turn. Under
disaggregation the two sides are admitted independently: once a prefill rank admits the
prompt, it is routed to a decode rank by load, which reserves its KV when it fits; the
prefill runs meanwhile, and the KV hand-off (`handoff`) starts once both the prompt is
computed and the reservation is made (SGLang's pre-allocated decode queue, Dynamo's
bootstrap). A replay that has clearly missed
a latency bound it was given stops early (`stop`).
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable
from typing import NamedTuple

from levers.errors import InputError
from predictor.sim.deployment import Deployment, Pool
from predictor.sim.events import (
    PRIORITY,
    Arrival,
    Event,
    HandoffDone,
    Kick,
    LoadDone,
    StepEnd,
)
from predictor.sim.rank import Rank
from predictor.sim.replica import Replica
from predictor.sim.request import Request
from predictor.sim.results import (
    LATENCY_NAMES,
    SHORT_REPLAY,
    WARMUP_ONLY,
    Recorder,
    SimResult,
    Window,
    itl_quantile_exceeds,
    latency_distributions,
    request_rows,
    throughput_scalars,
)
from predictor.sim.router import Router, RouterPolicy
from predictor.sim.source import SessionSource
from predictor.sim.stop import CHECKS, MIN_REQUESTS, MIN_SHARE, StopRule
from predictor.sim.workloads import ArrivalMode
from predictor.units import US_PER_MS, US_PER_S

Progress = Callable[[int, int], None]


class _Tally(NamedTuple):
    """One measured request's prompt and hits, shaped like a rank's counters."""

    prompt_tokens: int
    cached_tokens: int
    dram_tokens: int
    replica_index: int


PROGRESS_STEPS = 100


class Simulation:
    def __init__(self, deployment: Deployment, source: SessionSource, router: Router,
                 recorder: Recorder, progress: Progress | None = None, keep_rows: bool = False,
                 stop_rules: tuple[StopRule, ...] = ()) -> None:
        self.deployment = deployment
        self.source = source
        self.router = router
        self.decode_router = Router(RouterPolicy.LEAST_LOADED, router.rng)
        self.recorder = recorder
        self.progress = progress
        self.keep_rows = keep_rows
        self.now_us = 0.0
        self.finished: list[Request] = []
        self._heap: list[tuple[float, int, int, Event]] = []
        self._seq = 0
        self._warmup_left = 0                 # the warm-up requests whose end opens the window
        self._warmup_rids: set[int] = set()
        self._window_start: tuple[float, float, float] | None = None
        self.stop_rules = stop_rules
        self.stopped: dict | None = None
        self._check_every = max(1, source.budget // CHECKS)
        self._handlers = {Arrival: self._on_arrival, LoadDone: self._on_load_done,
                          HandoffDone: self._on_handoff_done, StepEnd: self._on_step_end, Kick: self._on_kick}

    # -- loop ------------------------------------------------------------------------------
    def _push(self, at_us: float, event: Event) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (at_us, PRIORITY[type(event)], self._seq, event))

    def run(self) -> SimResult:
        started = time.perf_counter()
        starts = self.source.start()
        for at_us, request in starts:
            self._push(at_us, Arrival(request))
        if not any(request.is_warmup for _, request in starts):
            self._window_start = (0.0, 0.0, 0.0)
        heap, handlers, sends = self._heap, self._handlers, self.source.sends
        pop, push, priority = heapq.heappop, heapq.heappush, PRIORITY
        while heap and self.stopped is None:
            at_us, _, _, event = pop(heap)
            kind = event.__class__
            if kind is Arrival and not sends():
                continue                    # the budget was sent: this turn never is
            self.now_us = at_us
            for when, new in handlers[kind](event):
                self._seq += 1              # `_push`, inlined
                push(heap, (when, priority[new.__class__], self._seq, new))
        result = self._result(time.perf_counter() - started)
        self._handlers = {}                 # its bound methods: a cycle through the whole replay
        return result

    def _check_stop(self) -> None:
        """Stop once a rule is clearly missed (`predictor.sim.stop`)."""
        done = len(self.finished)
        if done % self._check_every or done < MIN_SHARE * self.source.budget:
            return
        # steady requests only (`predictor.sim.stop`)
        measured = [r for r in self.finished if not r.is_warmup]
        if len(measured) < MIN_REQUESTS:
            return
        rules = [rule for rule in self.stop_rules if not self._surely_met(rule)]
        names = tuple(dict.fromkeys(rule.key.rsplit("_", 1)[0] for rule in rules))
        flat = {f"{name}_{stat}": value for name, dist in
                latency_distributions(measured, self.recorder, tuple(n for n in names if n in LATENCY_NAMES)).items()
                for stat, value in dist.items()} if rules else {}
        for rule in rules:
            value = flat.get(rule.key)
            if rule.clearly_missed(value, flat.get(rule.median_key)):
                self.stopped = {"reason": rule.describe(value), "after_requests": done,
                                "of_budget": self.source.budget, "at_s": round(self.now_us / US_PER_S, 3)}
                return

    def _surely_met(self, rule: StopRule) -> bool:
        """An upper bound on an ITL quantile that is not clearly missed, told by a count
        (`results.itl_quantile_exceeds`); anything else is computed in full."""
        name, _, stat = rule.key.rpartition("_")
        if name != "itl_ms" or not rule.is_upper:
            return False
        return itl_quantile_exceeds(self.recorder, stat, rule.limit) is False

    # -- handlers ----------------------------------------------------------------------------
    def _on_arrival(self, event: Arrival) -> list[tuple[float, Event]]:
        request, deployment = event.request, self.deployment
        pool, decode = deployment.entry, deployment.decode
        if request.is_warmup:               # the warm-up the window waits for (as sent)
            self._warmup_left += 1
            self._warmup_rids.add(request.rid)
        elif self._window_start is None and self.source.warms_up_first_turns:
            request.is_warmup = True        # arrived during the warm-up: served, not measured
        request.decodes_here = decode is None
        request.host_us = pool.host_us(request) + (decode.host_us(request) if decode is not None else 0.0)
        rank = pool.units[self.router.choose(request, pool.units)]
        self._check_fits(request, rank, pool)
        self._assign(request, rank)
        request.entry_unit = rank.index
        hbm, resident = rank.pool.match(request)
        request.route_hbm_blocks = hbm
        stored = deployment.shared_pool.usable_blocks(request) if deployment.shared_pool is not None else 0
        request.prefill_work = request.prompt_tokens - max(hbm, stored, resident) * rank.pool.shape.block_tokens
        rank.outstanding_prefill_tokens += request.prefill_work
        return self._enqueue(request, rank, pool)

    def _fetches(self, replica: Replica) -> list[tuple[float, Event]]:
        """Start the host-tier fetches the scheduler asked for: for the requests it reaches
        in its queue, as far ahead as the HBM its running requests leave, each skipped
        until its prefix lands (SGLang's HiCache load-back and prefetch; a rank's loads
        share its link in order). Loading at arrival would see a long queue evict the
        blocks again before admission: fetching one at a time kept a prefill-bound rank
        to one loaded prompt per step (deployment B's DWDP ranks: 6,200 prefill tokens per
        step, 50 s mean TTFT), and a private DRAM tier loading at arrival held a 0.94 hit
        rate at 32 agentic sessions but 0.49 at 64 (Kimi-K3 TP8, SGLang, two GB300 trays,
        200 GB per GPU; 0.94 fetched here)."""
        out: list[tuple[float, Event]] = []
        for rank in replica.ranks:
            for request in rank.fetching:
                load = self._network_load if rank.pool.shared is not None else self._host_load
                out.append((load(request, rank, self.deployment.entry), LoadDone(request, rank)))
            rank.fetching.clear()
        return out

    def _host_load(self, request: Request, rank: Rank, pool: Pool) -> float:
        """Queue a load of the request's DRAM-resident prefix (the blocks its reservation made
        room for) on the rank's host link; return when it is in HBM (the load adds to that
        request's TTFT only, METHOD §3.10)."""
        rank.num_loading += 1
        return rank.host_link.load(self.now_us, request.fetch_tokens * pool.capacity.kv_bytes_per_token)

    def _network_load(self, request: Request, rank: Rank, pool: Pool) -> float:
        """Queue a load of the request's missing prefix (and its state checkpoint) from the
        shared host pool; return when it may be scheduled (layer-by-layer overlap, `host_pool`)."""
        capacity = pool.capacity
        per_gpu = request.fetch_tokens * capacity.kv_bytes_per_token     # the blocks its reservation made room for
        per_gpu += capacity.state_bytes_per_sequence if self.deployment.shared_pool.checkpoint_blocks else 0.0
        cached = request.load_target * rank.pool.shape.block_tokens
        hidden_us = pool.replicas[rank.replica_index].pricer.prefill_us(max(1, request.prompt_tokens - cached), 1, cached)
        rank.num_loading += 1
        return rank.net_link.load(self.now_us, per_gpu, hidden_us, capacity.num_layers)

    def _on_load_done(self, event: LoadDone) -> list[tuple[float, Event]]:
        """A fetch landed: the request goes back to the head of its queue, prefix in HBM."""
        request, rank = event.request, event.rank
        rank.num_loading -= 1
        request.loaded_blocks = rank.pool.land(request, request.load_target)
        rank.waiting.appendleft(request)
        return self._wake(rank, self.deployment.entry)

    # -- disaggregated admission: the prefill and the decode reservation are independent ----
    def _reserve_admitted(self, replica: Replica) -> list[tuple[float, Event]]:
        out: list[tuple[float, Event]] = []
        for rank in replica.ranks:
            for request in rank.admitted:
                out.extend(self._reserve(request))
            rank.admitted.clear()
        return out

    def _reserve(self, request: Request) -> list[tuple[float, Event]]:
        """Route a prompt the prefill pool has admitted to a decode rank by load and queue its
        KV reservation (METHOD §3.11). Reserving only for admitted prompts keeps the two
        sides from waiting on each other: every reservation's prompt is being computed."""
        decode = self.deployment.decode
        rank = decode.units[self.decode_router.choose(request, decode.units)]
        self._check_fits(request, rank, decode)
        request.decode_rank = rank
        rank.outstanding_tokens += request.prompt_tokens + request.output_tokens
        rank.reserving.append(request)
        return self._grant(rank)

    def _grant(self, rank: Rank) -> list[tuple[float, Event]]:
        """Reserve KV for the decode rank's queue in order while it fits; a reserved request
        whose prompt is computed starts its hand-off."""
        out: list[tuple[float, Event]] = []
        while rank.reserving and rank.pool.reserve(rank.reserving[0]):
            request = rank.reserving.popleft()
            request.is_reserved = True
            rank.num_reserved += 1
            if request.is_prefilled:
                out.append(self._handoff(request))
        return out

    def _handoff(self, request: Request) -> tuple[float, Event]:
        """Both sides ready: the KV crosses (`handoff`)."""
        return self.deployment.links.schedule(request.rank.index, self.now_us, request.prompt_tokens), \
            HandoffDone(request)

    def _on_handoff_done(self, event: HandoffDone) -> list[tuple[float, Event]]:
        request, decode = event.request, self.deployment.decode
        prefill_rank, rank = request.rank, request.decode_rank
        prefill_rank.forget(request)
        request.private_tokens, request.reserved_tokens = request.reserved_tokens, 0   # the decode rank's now
        request.is_kv_ready = True
        request.decodes_here = True
        request.rank, request.unit = rank, rank.index
        rank.num_reserved -= 1
        return self._enqueue(request, rank, decode) + self._wake(prefill_rank, self.deployment.entry)

    def _on_kick(self, event: Kick) -> list[tuple[float, Event]]:
        replica = event.replica
        replica.kick_pending = False
        if replica.plan is not None:
            return []
        return self._begin(replica)

    def _begin(self, replica: Replica) -> list[tuple[float, Event]]:
        plan = replica.begin_step(self.now_us)
        out = self._reserve_admitted(replica) if replica.admits_for_decode else []
        if replica.fetches:
            out += self._fetches(replica)
        return out if plan is None else out + [(plan.end_us, StepEnd(replica, replica.stamp))]

    def _on_step_end(self, event: StepEnd) -> list[tuple[float, Event]]:
        replica = event.replica
        if event.stamp != replica.stamp or replica.plan is None:
            return []
        outcome = replica.end_step()
        out: list[tuple[float, Event]] = []
        for request in outcome.finished:
            out.extend(self._finish(request))
        for request in outcome.prefilled:
            request.is_prefilled = True
            if request.is_reserved:
                out.append(self._handoff(request))
        now, heap = self.now_us, self._heap
        if (not heap or heap[0][0] > now) and all(when > now for when, _ in out):
            return out + self._begin(replica)      # nothing else happens now: no kick needed
        replica.kick_pending = True
        out.append((now, Kick(replica)))
        return out

    # -- helpers ---------------------------------------------------------------------------
    def _assign(self, request: Request, rank: Rank) -> None:
        request.rank = rank
        request.unit = rank.index
        rank.outstanding_tokens += request.prompt_tokens + request.output_tokens

    def _enqueue(self, request: Request, rank: Rank, pool: Pool) -> list[tuple[float, Event]]:
        rank.waiting.append(request)
        replica = pool.replicas[rank.replica_index]
        if replica.plan is not None:
            rank.peak_demand = max(rank.peak_demand, rank.num_running + 1)
            if rank.num_running >= replica.limits.running_cap:
                return []
        return self._nudge(replica)

    def _wake(self, rank: Rank, pool: Pool) -> list[tuple[float, Event]]:
        """KV freed on ``rank``: let its replica retry what waits."""
        if not rank.waiting:
            return []
        return self._nudge(pool.replicas[rank.replica_index])

    def _nudge(self, replica) -> list[tuple[float, Event]]:
        """Make ``replica`` look at its queue: kick it if idle (once), else cut its running
        step at the next boundary."""
        if replica.plan is None:
            if replica.kick_pending:
                return []
            replica.kick_pending = True
            return [(self.now_us, Kick(replica))]
        plan = replica.truncate(self.now_us)
        return [] if plan is None else [(plan.end_us, StepEnd(replica, replica.stamp))]

    def _finish(self, request: Request) -> list[tuple[float, Event]]:
        rank = request.rank
        rank.forget(request)
        self.finished.append(request)
        granted = self._grant(rank) if rank.reserving else []
        if request.rid in self._warmup_rids:
            self._warmup_left -= 1
            if self._warmup_left == 0:
                self._window_start = self.recorder.snapshot(self.now_us)
        # The client has the answer once the host time it waits out has passed (METHOD
        # §3.12): its next request or think time starts then.
        releases = self.source.on_finish(request, self.now_us + request.host_us)
        if self.progress is not None:
            done, total = len(self.finished), self.source.budget
            if done % max(1, total // PROGRESS_STEPS) == 0 or done == total:
                self.progress(done, total)
        if self.stop_rules:
            self._check_stop()
        return granted + [(at_us, Arrival(new)) for at_us, new in releases]

    def _check_fits(self, request: Request, rank: Rank, pool: Pool) -> None:
        need = rank.pool.footprint_tokens(request)
        capacity = rank.pool.shape.capacity_tokens
        if not rank.pool.fits_alone(need):
            raise InputError("--config", f"request {request.rid} ({request.prompt_tokens} prompt + "
                             f"{request.output_tokens} output tokens) needs {need} KV tokens but one "
                             f"{pool.role} rank's pool holds {capacity}",
                             "a layout, KV dtype or memory fraction with a larger KV pool, or shorter requests")

    # -- result ----------------------------------------------------------------------------
    def _window(self, warmup_only: bool) -> Window:
        """From the end of the warm-up (a closed loop; an open loop: the first arrival) to
        the last completion: the drain is included, as a benchmark's clock runs until
        its last response. A replay whose every finished request is warm-up
        (``warmup_only``) is measured over all of it, as its latencies are (`_measured`):
        its window after the warm-up held the last decodes and no prompt, so it read input
        0 tok/s and a total throughput 100x below a slightly shorter replay's."""
        end = self.recorder.snapshot(self.now_us)
        if self.source.mode is ArrivalMode.CLOSED and self._window_start is not None \
                and self._window_start[0] < end[0] and not warmup_only:
            return Window(self._window_start, end)
        first_arrival = min((r.arrival_us for r in self.finished), default=0.0)
        return Window((first_arrival, 0.0, 0.0), end)

    def _short_replay(self, measured: list[Request]) -> bool:
        """Whether most ``measured`` requests (past the warm-up) of a closed loop had their
        first token before its warm-up ended, so the window after it (`_window`) holds
        their decodes and not their prompts (100 requests at 64 clients with 8k prompts:
        input 0 tok/s, an output a tenth of the engine's): flagged (`SHORT_REPLAY`), not
        re-measured, since a window over the warm-up would count its staggered first
        turns' shortened outputs."""
        if self._window_start is None or self._window_start[0] >= self.now_us:
            return False                    # no window after the warm-up: `_window` measures it all
        opened = self._window_start[0]
        return 2 * sum(r.first_token_us >= opened for r in measured) < len(measured)

    def _measured(self) -> list[Request]:
        """The requests after the warm-up; all of them when none finished after it (a
        replay too short for its warm-up: `WARMUP_ONLY` counts it in ``extra``)."""
        return [r for r in self.finished if not r.is_warmup] or self.finished

    def _result(self, wall_s: float) -> SimResult:
        if not self.finished:
            raise InputError("workload", "no request was served", "a workload with at least one request")
        for pool in (self.deployment.entry, self.deployment.decode):
            if pool is not None:
                pool.replicas[0].pricer.settle_flags()
        measured = self._measured()
        warmup_only = all(r.is_warmup for r in measured)
        recorder, deployment = self.recorder, self.deployment
        scalars = throughput_scalars(self._window(warmup_only), deployment.total_gpus, recorder)
        distributions = latency_distributions(measured, recorder)
        decode_pool = deployment.decode or deployment.entry
        mean_prompt = sum(r.prompt_tokens for r in measured) / len(measured)
        scalars["uncontended_step_ms"] = decode_pool.model.decode_us(1, mean_prompt) / US_PER_MS
        scalars["generation_rate"] = distributions["interactivity"]["mean"]
        rows = request_rows(self.finished, {r.rid for r in measured}) if self.keep_rows else ()
        extra = {"steps": recorder.total_steps, "requests_finished": len(self.finished), **recorder.step_means()}
        if self.stopped is not None:
            extra["stopped_early"] = self.stopped
        if warmup_only:
            extra[WARMUP_ONLY] = 1              # replications sum it
        elif self.source.mode is ArrivalMode.CLOSED and self._short_replay(measured):
            extra[SHORT_REPLAY] = 1
        hits = hit_rates(deployment, measured if self.source.warms_up_first_turns else None)
        return SimResult(distributions, scalars, hits, len(measured), wall_s,
                         self.now_us / US_PER_S, extra, rows)


def hit_rates(deployment: Deployment, measured: list[Request] | None = None) -> dict:
    """Token-weighted prefix hit rate: overall, per replica of the entry pool, per tier
    (``dram``: loaded from host memory, the rank's own tier or the shared pool, as
    ``host_tier`` says). Over every admitted prompt (the ranks' counters), or over the
    ``measured`` requests: a warm-started session replay does not measure its warm-up,
    whose opening turns are uncached by construction."""
    units = deployment.entry.units
    counted = units if measured is None else \
        [_Tally(r.prompt_tokens, r.cached_tokens, r.dram_tokens, units[r.entry_unit].replica_index) for r in measured]
    prompt = sum(u.prompt_tokens for u in counted)
    cached = sum(u.cached_tokens for u in counted)
    dram = sum(u.dram_tokens for u in counted)
    per_replica: dict[int, list[int]] = {unit.replica_index: [0, 0] for unit in units}
    for unit in counted:
        tally = per_replica[unit.replica_index]
        tally[0] += unit.cached_tokens
        tally[1] += unit.prompt_tokens
    ratio = lambda a, b: round(a / b, 6) if b else 0.0
    tier = "shared" if deployment.shared_pool is not None else \
        "per-rank" if any(u.host_link is not None for u in units) else "none"
    return {"overall": ratio(cached, prompt),
            "per_replica": [ratio(c, p) for _, (c, p) in sorted(per_replica.items())],
            "per_tier": {"hbm": ratio(cached - dram, prompt), "dram": ratio(dram, prompt)}, "host_tier": tier}
