"""Routing a request to a scheduler rank, chosen before its hit is resolved (METHOD §5).

The units are every (replica, attention-DP rank) of a pool: the replica router and a
replica's DP load balancer use the same policy. Five policies (`config.router`):

- ``least_loaded``: fewest requests queued or running; ties by outstanding tokens, then
  index (SGLang's shortest-queue balancing). On a disaggregated prefill pool it is the
  least outstanding prefill work: tokens still to compute of the prompts routed there
  (prompt minus the hit expected when routed); the decode pool balances by load.
- ``kv_aware``: minimise tokens to prefill plus tokens already outstanding, i.e. prefix
  overlap traded against load (the cost function of Dynamo's KV router with unit
  overlap weight).
- ``prefix_hash``: hash of the prompt's prefix up to :data:`PREFIX_HASH_TOKENS` tokens
  (the id of the block ending there, since a block id names its whole prefix; shorter
  prompts hash their last block). Requests sharing that prefix colocate, so a session
  whose turns extend one another sticks to one rank, while traces whose every prompt
  opens with the same system block (Mooncake) still spread: hashing the first block
  alone sent all of them to one replica. Prompts without blocks hash their session.
- ``round_robin``: cycle over the units.
- ``random``: uniform, from the simulation's seeded generator.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from enum import StrEnum

import numpy as np

from levers.errors import InputError, accepted_list
from predictor.sim.rank import Rank
from predictor.sim.request import Request

# Fibonacci hashing spreads consecutive ids: the product's *high* bits pick the unit (its
# low bits follow the key's low bits alone, and an agentic block id's low bits are the
# block's position, the same in every session: taken modulo 2 or 4 units, they sent every
# session to one replica).
HASH_MULTIPLIER = 0x9E3779B97F4A7C15
HASH_BITS = 64
HASH_MASK = (1 << HASH_BITS) - 1
PREFIX_HASH_TOKENS = 4096              # the prefix prefix_hash routes on (8 Mooncake blocks, 64 agentic ones)


class RouterPolicy(StrEnum):
    LEAST_LOADED = "least_loaded"
    KV_AWARE = "kv_aware"
    PREFIX_HASH = "prefix_hash"
    ROUND_ROBIN = "round_robin"
    RANDOM = "random"


class Router:
    """Picks a unit index for each request; stateful only for round robin."""

    def __init__(self, policy: RouterPolicy | str, rng: np.random.Generator, by_prefill_work: bool = False) -> None:
        try:
            self.policy = RouterPolicy(policy)
        except ValueError:
            raise InputError("router", f"unknown policy '{policy}'", accepted_list(RouterPolicy)) from None
        self.rng = rng
        self.by_prefill_work = by_prefill_work
        self._next = 0
        self._choose: Callable[[Request, Sequence[Rank]], int] = {
            RouterPolicy.LEAST_LOADED: self._least_work if by_prefill_work else self._least_loaded,
            RouterPolicy.KV_AWARE: self._kv_aware,
            RouterPolicy.PREFIX_HASH: self._prefix_hash,
            RouterPolicy.ROUND_ROBIN: self._round_robin,
            RouterPolicy.RANDOM: self._random,
        }[self.policy]

    def choose(self, request: Request, units: Sequence[Rank]) -> int:
        return 0 if len(units) == 1 else self._choose(request, units)

    @staticmethod
    def _least_loaded(request: Request, units: Sequence[Rank]) -> int:
        # the index is the tuples' last key: ties go to the lowest, as a min over indices does
        return min([(u.num_requests, u.outstanding_tokens, i) for i, u in enumerate(units)])[2]

    @staticmethod
    def _least_work(request: Request, units: Sequence[Rank]) -> int:
        return min([(u.outstanding_prefill_tokens, u.num_requests, i) for i, u in enumerate(units)])[2]

    @staticmethod
    def _kv_aware(request: Request, units: Sequence[Rank]) -> int:
        def cost(i: int) -> tuple[float, int]:
            unit = units[i]
            hit_tokens = unit.pool.match(request)[1] * unit.pool.shape.block_tokens
            return max(0, request.prompt_tokens - hit_tokens) + unit.outstanding_tokens, i
        return min(range(len(units)), key=cost)

    @staticmethod
    def _prefix_hash(request: Request, units: Sequence[Rank]) -> int:
        if request.num_blocks:
            depth = max(1, PREFIX_HASH_TOKENS // units[0].pool.shape.block_tokens)
            key = int(request.block_ids[min(depth, request.num_blocks) - 1])
        else:
            key = request.session
        return ((key * HASH_MULTIPLIER) & HASH_MASK) * len(units) >> HASH_BITS

    def _round_robin(self, request: Request, units: Sequence[Rank]) -> int:
        index = self._next % len(units)
        self._next += 1
        return index

    def _random(self, request: Request, units: Sequence[Rank]) -> int:
        return int(self.rng.integers(len(units)))
