"""One scheduler rank: its queues, its decoding batch and its KV pool (METHOD §5).

A replica has one rank, or one per attention-DP rank (each DP rank is its own scheduler
with its own KV pool, prefix cache and token budget; the replica steps them in
lockstep). Decode progress is kept in aggregate so that a stretch of identical decode
steps advances in O(1): a shared step counter, each decoder's finish step in a heap, and
the context sum as ``ctx_base + decoders * step * L``. Request state changes are made by
the scheduler (`predictor.sim.scheduler`) through the methods here.
"""

from __future__ import annotations

import heapq
import math
from collections import deque

from predictor.sim.host_pool import NetworkLink
from predictor.sim.host_tier import HostLink
from predictor.sim.kv_pool import KvPool
from predictor.sim.request import Request


class Rank:
    def __init__(self, index: int, replica_index: int, pool: KvPool, host_link: HostLink | None,
                 tokens_per_step: float, net_link: NetworkLink | None = None) -> None:
        self.index = index                  # unit index across the pool (router's view)
        self.replica_index = replica_index
        self.pool = pool
        self.host_link = host_link
        self.net_link = net_link            # toward the shared host pool (its NIC)
        self.tokens_per_step = tokens_per_step
        self.waiting: deque[Request] = deque()
        self.prefilling: list[Request] = []
        self.num_loading = 0
        self.peak_demand = 0                # most running + waiting a running cap was checked against
        self.step = 0                       # decode steps this rank has run
        self.num_decoders = 0
        self.num_measured = 0               # decoders whose ITLs are recorded
        self.ctx_base = 0.0
        self.finish_heap: list[tuple[int, int, Request]] = []
        self.fresh: list[Request] = []      # decoders that have not run a decode step yet
        self.last_decode_end_us = 0.0
        self.outstanding_tokens = 0         # prompt + output of every request routed here
        self.outstanding_prefill_tokens = 0  # tokens still to compute of the prompts routed here
        self.reserving: deque[Request] = deque()   # decode rank: requests waiting for a KV reservation
        self.admitted: list[Request] = []   # prefill rank: admitted since the simulator last looked
        self.fetching: list[Request] = []   # ... to fetch from a host tier (not yet started)
        self.num_reserved = 0               # ... reserved, KV not arrived yet
        self.prompt_tokens = 0              # admitted prompt tokens (hit-rate denominator)
        self.cached_tokens = 0
        self.dram_tokens = 0

    # -- load (router's view) ----------------------------------------------------------
    @property
    def num_running(self) -> int:
        return len(self.prefilling) + self.num_decoders

    @property
    def num_requests(self) -> int:
        return len(self.waiting) + self.num_running + self.num_loading + len(self.reserving) + self.num_reserved

    # -- decode bookkeeping ----------------------------------------------------------------
    def add_decoder(self, request: Request, now_us: float) -> None:
        """The request has its first token; it decodes from the next step on."""
        steps = math.ceil((request.output_tokens - 1) / self.tokens_per_step - 1e-9)
        request.first_token_us = now_us
        request.start_step = self.step
        request.steps_needed = steps
        request.finish_step = self.step + steps
        heapq.heappush(self.finish_heap, (request.finish_step, request.rid, request))
        self.ctx_base += request.prompt_tokens + 1 - self.step * self.tokens_per_step
        self.num_decoders += 1
        if not request.is_warmup:
            self.num_measured += 1
            self.fresh.append(request)

    def context_sum(self) -> float:
        return self.ctx_base + self.num_decoders * self.step * self.tokens_per_step

    def steps_to_next_finish(self) -> int:
        return self.finish_heap[0][0] - self.step if self.finish_heap else 0

    def pop_finished(self) -> list[Request]:
        done = []
        heap = self.finish_heap
        while heap and heap[0][0] <= self.step:
            request = heapq.heappop(heap)[2]
            self.ctx_base -= request.prompt_tokens + 1 - request.start_step * self.tokens_per_step
            self.num_decoders -= 1
            if not request.is_warmup:
                self.num_measured -= 1
            done.append(request)
        return done

    # -- accounting ------------------------------------------------------------------------
    def record_admission(self, request: Request) -> None:
        if request.is_kv_ready:
            return
        self.prompt_tokens += request.prompt_tokens
        self.cached_tokens += request.cached_tokens
        self.dram_tokens += request.dram_tokens

    def forget(self, request: Request) -> None:
        self.outstanding_tokens -= request.prompt_tokens + request.output_tokens
        self.pool.release(request)
