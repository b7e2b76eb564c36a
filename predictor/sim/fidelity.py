"""How long a DES replay must be to rank candidates, not to report them (METHOD §5, §6).

A candidate that only has to be ranked against others (a search trial, a sweep's
speculative variants) replays

    bounded_requests(default, c) = min(default, max(SEARCH_MAX_REQUESTS, SEARCH_REQUESTS_PER_CLIENT * c))

requests: the predictor's full default up to 25 agentic clients (where it is cheap),
1,024 requests up to 256 clients and 4 per client beyond. Measured on Kimi-K3 / 8x
MI355X / vLLM / agentic against the full default, same seed: throughput per GPU within
-4.1%..+1.6% and p90 ITL within -1.2%..+3.9% at 32-1,024 clients (the default's own
seed-to-seed spread is ±6-10% at 16-32 clients). What is reported is priced again at the
full default (`agent.fidelity`: a search's confirm step; `predictor.sweep.executors`: a
sweep group's kept variant).
"""

from __future__ import annotations

SEARCH_MAX_REQUESTS = 1024        # DES requests of a bounded replay, at most (below the floor)
SEARCH_REQUESTS_PER_CLIENT = 4    # ... but at least this many per client


def bounded_requests(full: int, concurrency: int) -> int:
    """The ranking-time DES length for a replay whose full default is ``full`` requests."""
    return min(full, max(SEARCH_MAX_REQUESTS, SEARCH_REQUESTS_PER_CLIENT * max(1, concurrency)))
