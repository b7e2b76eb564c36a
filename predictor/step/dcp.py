"""Decode context parallelism: how a decode batch's KV splits over the DCP ranks (METHOD §3.9).

Under DCP every request's KV is dealt over the ``d`` ranks of the group in chunks of
``interleave`` tokens (vLLM's ``dcp_kv_cache_interleave_size``, default 1), and each rank
attends over the chunks it holds; the step waits for the busiest rank. A request of ``c``
tokens puts ``floor(c / (I d))`` full rounds on every rank and its remainder on the ranks
the deal reaches first. Without balancing every deal starts at rank 0, so in a batch of
mixed lengths rank 0 collects every request's partial chunk; with per-request balancing
each chunk of a request's remainder goes to the rank holding least so far (greedy list
scheduling of items of at most one chunk), which keeps the busiest rank within one chunk
of the least loaded, hence of the mean.

`busiest_rank_tokens` deals a batch exactly (the reference); `excess_tokens_per_request`
is its expectation for a batch whose remainders are spread uniformly, which the step
model adds to the mean context a decode step attends (it sees a batch's mean context,
not each request's): balanced at most ``I (d-1) / d`` over the whole batch (the busiest
rank stays within one chunk of the mean; the bound is charged), unbalanced ``I (d-1) / (2 d)``
per request (rank 0 takes every remainder's first chunk).
"""

from __future__ import annotations

from collections.abc import Sequence

DEFAULT_INTERLEAVE_TOKENS = 1


def busiest_rank_tokens(contexts: Sequence[int], dcp: int, interleave_tokens: int = DEFAULT_INTERLEAVE_TOKENS,
                        balanced: bool = True) -> int:
    """Tokens on the busiest of ``dcp`` ranks after dealing each request's ``contexts`` in
    chunks of ``interleave_tokens`` (module docstring)."""
    held = [0] * max(1, dcp)
    chunk = max(1, interleave_tokens)
    for context in contexts:
        rounds, left = divmod(int(context), chunk * len(held))
        for rank in range(len(held)):
            held[rank] += rounds * chunk
        rank = 0
        while left > 0:
            if balanced:
                rank = min(range(len(held)), key=held.__getitem__)
            take = min(chunk, left)
            held[rank] += take
            left -= take
            rank += 1
    return max(held)


def excess_tokens_per_request(batch: int, dcp: int, interleave_tokens: int = DEFAULT_INTERLEAVE_TOKENS,
                              balanced: bool = True) -> float:
    """Expected tokens per request the busiest rank holds above an even split, in units of
    one request's context (multiply by ``dcp`` for the mean-context equivalent)."""
    if dcp <= 1 or batch <= 0:
        return 0.0
    if balanced:
        return interleave_tokens * (dcp - 1) / dcp / batch
    return interleave_tokens * (dcp - 1) / (2.0 * dcp)
