"""The paged KV pool of one scheduler rank (METHOD §3.9, §5).

Capacity comes from the memory model: ``kv_pool_bytes / kv_bytes_per_token`` tokens per
rank, with each sequence's fixed linear-attention state counted as token equivalents.
The pool holds the prefix cache's HBM blocks (trace-sized blocks: 512 tokens in Mooncake
traces, 64 in agentic ones) and every running request's private pages (``kv_block_size``
pages). Admission reserves a request's KV (prompt + output pages) and there is no
preemption: the whole output under TRT-LLM's GUARANTEED_NO_EVICT and on a split's decode
pool; half of it on an on-demand engine's colocated replica under synthetic fixed-length
traffic (vLLM allocates a block at a time and preempts, SGLang reserves a decaying share
and retracts: their staggered requests hold half their output on average, as the
analytical steady state holds them, `KvPool.output_share`). The preemptions and
recomputation of a synchronised first wave that outgrows the pool are not modelled.

Order of one admission: match, pin the HBM hit (so making room cannot evict it), evict
cached leaves until the reservation fits, or give up and leave the request waiting.
After prefill the prompt's blocks move from private pages into the cache (duplicates
inserted meanwhile by another request are freed) and, with a shared host pool, are
written through to it. A disaggregated decode rank reserves a request's KV before it
arrives (`reserve`); a prefill pool holds prompts only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from predictor.sim.host_pool import SharedHostPool
from predictor.sim.prefix_cache import PrefixCache
from predictor.sim.request import Request


@dataclass(frozen=True, slots=True)
class PoolShape:
    """Per-rank sizes in tokens."""

    capacity_tokens: int
    page_tokens: int            # kv_block_size
    block_tokens: int           # prefix-cache block (the trace's block size)
    state_tokens: int           # per-sequence fixed state, in token equivalents


def pages(tokens: int, page_tokens: int) -> int:
    """Tokens rounded up to whole pages."""
    return -(-tokens // page_tokens) * page_tokens


class KvPool:
    def __init__(self, shape: PoolShape, cache: PrefixCache | None, holds_output: bool = True,
                 shared: SharedHostPool | None = None, output_share: float = 1.0) -> None:
        self.shape = shape
        self.cache = cache
        self.holds_output = holds_output    # False on a disaggregated prefill pool (its requests leave)
        # the share of its output a request holds pages for: 1 reserves the whole (TRT-LLM's
        # GUARANTEED_NO_EVICT, a split's decode pool); 0.5 is an on-demand engine's fixed-length
        # steady state (`EngineProfile.on_demand_kv`), whose staggered requests hold half their
        # output on average. Reserving the whole there queued DeepSeek-R1 TP4 on B200 under
        # SGLang at 24 of 32 clients a replica (TTFT 8.7 s from arrival, 248 tok/s/GPU) where
        # the analytical steady state holds all 32 (80 ms, 290).
        self.output_share = output_share
        self.shared = shared                # the deployment's shared host pool: written through
        # Admission fetches a prefix from a host tier first: the shared pool, or this rank's
        # own DRAM tier (METHOD §3.10; `predictor.sim.scheduler.fill_prefill`).
        self.fetches = shared is not None or bool(getattr(cache, "dram_capacity_blocks", 0))
        self.private_tokens = 0
        self.peak_tokens = 0                # the most tokens any check compared with the capacity

    @property
    def used_tokens(self) -> int:
        cached = self.cache.num_hbm_blocks * self.shape.block_tokens if self.cache else 0
        return self.private_tokens + cached

    def free_tokens(self) -> int:
        return self.shape.capacity_tokens - self.used_tokens

    def fits_alone(self, tokens: int) -> bool:
        """Whether one request's ``tokens`` fit in the empty pool."""
        self.peak_tokens = max(self.peak_tokens, tokens)
        return tokens <= self.shape.capacity_tokens

    def _overflow(self, need: int = 0) -> int:
        """Tokens by which the pool would pass its capacity with ``need`` more (<= 0: fits)."""
        demand = self.used_tokens + need
        if demand > self.peak_tokens:
            self.peak_tokens = demand
        return demand - self.shape.capacity_tokens

    def footprint_tokens(self, request: Request) -> int:
        """KV one request needs with no cache hit, at its full length (an on-demand pool
        reserves less at admission, but the request still grows to this)."""
        return self._private_need(request, 0, 1.0)

    def match(self, request: Request) -> tuple[int, int]:
        if self.cache is None or not request.num_blocks:
            return 0, 0
        return self.cache.match(request.block_ids, request.num_blocks)

    # -- admission -------------------------------------------------------------------
    def prefill_need(self, request: Request) -> int:
        """Tokens the request would compute if admitted now."""
        hit = self.match(request)[0]
        return request.prompt_tokens - min(hit * self.shape.block_tokens, max(0, request.prompt_tokens - 1))

    def try_admit(self, request: Request) -> bool:
        """Reserve the request's KV; set its hit and private pages. False: no room now."""
        shape, cache = self.shape, self.cache
        hit = 0
        if cache is not None and request.num_blocks and not request.is_kv_ready:
            hit = cache.match(request.block_ids, request.num_blocks)[0]
        hit_tokens = min(hit * shape.block_tokens, max(0, request.prompt_tokens - 1))
        need = self._private_need(request, hit * shape.block_tokens)
        if not self._hold(request, hit, need):
            return False
        request.private_tokens = need
        request.pinned_blocks = hit
        if request.landed_blocks:           # its own pin on the hit replaces the landing's
            cache.unpin(request.block_ids, request.landed_blocks)
            request.landed_blocks = 0
        if not request.is_kv_ready:
            request.hit_blocks = hit
            request.cached_tokens = hit_tokens
        return True

    def reserve(self, request: Request) -> bool:
        """A disaggregated decode rank reserves the request's whole KV before it arrives."""
        need = self._private_need(request, 0)
        if self._overflow(need) > 0:
            return False
        self.private_tokens += need
        request.reserved_tokens = need
        return True

    def _private_need(self, request: Request, cached_tokens: int, output_share: float | None = None) -> int:
        prompt = max(request.prompt_tokens, request.num_blocks * self.shape.block_tokens)
        share = self.output_share if output_share is None else output_share
        total = prompt + (math.ceil(request.output_tokens * share) if self.holds_output else 0)
        uncached = max(0, total - cached_tokens)
        return pages(uncached, self.shape.page_tokens) + self.shape.state_tokens

    # -- after prefill / at the end --------------------------------------------------
    def commit_prompt(self, request: Request) -> None:
        """Move the prompt's computed blocks into the cache and pin the whole prompt."""
        cache = self.cache
        if cache is None or not request.num_blocks or request.is_kv_ready:
            return
        if self.shared is not None:
            self.shared.store(request)
        start, stop = request.hit_blocks, request.num_blocks
        cache.insert(request.block_ids, start, stop)
        moved = min(request.private_tokens, (stop - start) * self.shape.block_tokens)
        request.private_tokens -= moved
        self.private_tokens -= moved
        cache.pin(request.block_ids, stop)
        cache.unpin(request.block_ids, request.pinned_blocks)
        request.pinned_blocks = stop

    def release(self, request: Request) -> None:
        self.private_tokens -= request.private_tokens
        request.private_tokens = 0
        if self.cache is not None and request.pinned_blocks:
            self.cache.unpin(request.block_ids, request.pinned_blocks)
            request.pinned_blocks = 0

    # -- host tiers -------------------------------------------------------------------
    def fetchable(self, request: Request) -> int:
        """Leading blocks a fetch from a host tier would make HBM-resident, beyond what HBM
        holds (0: none): what the shared host pool stores, or what this rank's DRAM tier
        holds past its HBM blocks."""
        hbm, resident = self.match(request)
        if self.shared is not None:
            resident = self.shared.usable_blocks(request)
        return resident if resident > hbm else 0

    def reserve_fetch(self, request: Request, stop: int) -> bool:
        """Make room in HBM for a fetch of ids[:stop] (the blocks HBM lacks) by evicting
        unpinned cache, and hold it apart like a request's own pages until the fetch lands
        (`land`): an engine allocates a load's device pages before it starts it. False:
        running requests' KV and the prefixes they and landed fetches hold leave no room
        now. Counting only running requests' own pages let fetch-ahead land prefixes over
        HBM that running prompts held, up to 1.96x the pool (Kimi-K3 TP8 at 128 agentic
        sessions, shared pool: decode batch 9.3, 50.8 output tok/s/GPU)."""
        hbm = self.match(request)[0]
        tokens = max(0, stop - hbm) * self.shape.block_tokens
        if not self._hold(request, hbm, tokens):   # its own HBM prefix stays while it loads
            return False
        request.fetch_tokens = tokens
        request.landed_blocks = hbm
        return True

    def _hold(self, request: Request, pinned: int, tokens: int) -> bool:
        """Hold ``tokens`` of pages with the request's first ``pinned`` cached blocks pinned
        (making room cannot evict them): evict cached leaves until they fit, or unpin and
        give up (False: no room now)."""
        cache = self.cache
        if cache is not None:
            cache.pin(request.block_ids, pinned)
        shortfall = self._overflow(tokens)
        if shortfall > 0 and cache is not None:
            cache.evict(-(-shortfall // self.shape.block_tokens))
            shortfall = tokens - self.free_tokens()
        if shortfall > 0:
            if cache is not None:
                cache.unpin(request.block_ids, pinned)
            return False
        self.private_tokens += tokens
        return True

    def land(self, request: Request, stop: int) -> int:
        """A fetch of ids[:stop] has arrived: its reserved room becomes those blocks, in
        HBM, held pinned until the request is admitted (`try_admit`), as an engine locks a
        loaded prefix for its request: another landing fetch evicted them before the next
        step boundary admitted it (half of the queued requests missed). Returns how many
        blocks were added (from the shared pool: those not resident any more or yet; from
        the DRAM tier: those it still holds)."""
        self.private_tokens -= request.fetch_tokens
        request.fetch_tokens = 0
        if self.shared is not None:
            added = self.load_from_host(request, stop)
        else:
            added = self.promote(request, self.match(request)[0], stop)
        cache = self.cache
        if cache is not None:
            held, request.landed_blocks = request.landed_blocks, self.match(request)[0]
            cache.pin(request.block_ids, request.landed_blocks)
            cache.unpin(request.block_ids, held)
        return added

    def load_from_host(self, request: Request, stop: int) -> int:
        """Blocks ids[:stop] fetched from the shared host pool into HBM (those not resident
        any more or yet), making room; returns how many were added."""
        cache = self.cache
        start = self.match(request)[0]
        if cache is None or stop <= start:
            return 0
        if start:
            cache.pin(request.block_ids, start)
        added = cache.insert(request.block_ids, start, stop)
        cache.pin(request.block_ids, stop)
        overflow = self._overflow()
        if overflow > 0:
            cache.evict(-(-overflow // self.shape.block_tokens))
        cache.unpin(request.block_ids, stop)
        if start:
            cache.unpin(request.block_ids, start)
        return added

    def promote(self, request: Request, start: int, stop: int) -> int:
        """Load ids[start:stop] from the host tier into HBM, making room (METHOD §3.10)."""
        cache = self.cache
        if cache is None or stop <= start:
            return 0
        cache.pin(request.block_ids, start)
        promoted = cache.promote(request.block_ids, start, stop)
        cache.pin(request.block_ids, start + promoted)
        overflow = self._overflow()
        if overflow > 0:
            cache.evict(-(-overflow // self.shape.block_tokens))
        cache.unpin(request.block_ids, start + promoted)
        cache.unpin(request.block_ids, start)
        return promoted
