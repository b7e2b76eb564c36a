"""Memory per GPU by component, as `inferasim predict` prints it (issue 13).

What an operator sizes a deployment by: the stored weights of each component at the
precision it is stored in (a checkpoint recipe mixes NVFP4 experts, FP8 attention and BF16
shared experts), the drafter, activations and captured graphs, the KV pool left, and what
one long agentic request (`REQUEST_TOKENS`) costs in KV + state on each GPU holding it,
with how many such requests fit. One column per pool: the replica, or a disaggregated
deployment's decode and prefill pools (the pools differ: DWDP's staging buffers and its
whole non-expert copy live only in the prefill pool).

The decode (or replica) column is the prediction's own breakdown; the prefill column is
`predictor.feasibility.memory_for` on the prefill pool of the configuration resolved as the
prediction resolved it (unset precisions from the anchor's recipe).
"""

from __future__ import annotations

from levers.configuration import Configuration
from predictor.anchors.anchoring import as_priced
from predictor.feasibility import memory_for, pool_configs
from predictor.memory import MemoryBreakdown
from predictor.target import Target
from predictor.units import BYTES_PER_GB

from agent.cli.render import MISSING, number, table

REQUEST_TOKENS = 200_000      # one long agentic request (the sizing unit)
LABELS = {"attention": "attention projections", "dense_mlp": "dense MLP", "shared_experts": "shared experts",
          "routed_experts": "routed experts", "embeddings": "embeddings + LM head", "other": "norms, router, other",
          "drafter": "drafter", "dwdp_staging": "DWDP staging buffers (2)"}


def memory_pools(target: Target, configuration: Configuration, memory: MemoryBreakdown,
                 priced_context: float | None = None) -> list[tuple[str, MemoryBreakdown, int]]:
    """(label, breakdown, replicas of that pool) per pool; ``memory`` is the prediction's,
    ``priced_context`` the context it chose its anchor at (`WorkloadSpec.priced_context_tokens`)."""
    pools = pool_configs(configuration)
    if pools is not None:     # the prefill pool's unset precisions as the prediction took them
        pools = pool_configs(as_priced(target, configuration, context_tokens=priced_context)[0])
    if pools is None:
        return [("per GPU of a replica", memory, max(1, configuration.replicas))]
    prefill, decode = pools
    prefill_memory = memory_for(target.card, target.cluster, prefill, memory.context_tokens or REQUEST_TOKENS)
    return [("decode pool", memory, max(1, decode.replicas)), ("prefill pool", prefill_memory, max(1, prefill.replicas))]


def _gb(value: float) -> str:
    return number(value / BYTES_PER_GB)


def sizing(card) -> tuple[int, str]:
    """(the long request the table sizes: 200k tokens, or the model's context when shorter;
    what its fixed per-request state is: linear-attention state or sliding windows)."""
    linear = sorted({g.kind.value.upper() for g in card.attention if g.kind.is_linear})
    windows = any(g.window_tokens or g.compress_ratio for g in card.attention)
    state = "/".join(linear) or ("sliding windows" if windows else "none")
    return min(REQUEST_TOKENS, card.max_context), state


def _tokens(value: int) -> str:
    return f"{value // 1000}k" if value % 1000 == 0 else number(value)


def memory_table(pools: list[tuple[str, MemoryBreakdown, int]], request_tokens: int = REQUEST_TOKENS,
                 state: str = "KDA/GDN"):
    """The per-GPU table (GB unless the row says otherwise), one column per pool; a long
    request of ``request_tokens`` and the fixed state's kind as `sizing` says them."""
    grid = table("memory per GPU (GB)", [("component", "left"), *((label, "right") for label, _, _ in pools)],
                 wrap=(0,))
    keys = list(dict.fromkeys(key for _, m, _ in pools for key in m.weights_by_component_bytes))

    def cell(m: MemoryBreakdown, key: str) -> str:
        stored = m.weights_by_component_bytes.get(key)
        return f"{_gb(stored)} {m.dtypes_by_component.get(key, '')}".rstrip() if stored else MISSING

    for key in keys:
        grid.add_row(LABELS.get(key, key.replace("_", " ")), *(cell(m, key) for _, m, _ in pools))
    grid.add_row("weights, total", *(_gb(m.weights_bytes) for _, m, _ in pools))
    grid.add_row("activations + graphs", *(_gb(m.activations_bytes + m.graph_bytes) for _, m, _ in pools))
    grid.add_row("KV pool", *(f"{_gb(max(0, m.kv_pool_bytes))} {m.kv_cache_dtype}" for _, m, _ in pools))
    grid.add_row("KV per token (bytes, drafter incl.)", *(number(m.cache_bytes_per_token) for _, m, _ in pools))
    grid.add_row(f"state per request ({state}, MB)",
                 *(number((m.state_bytes_per_sequence + m.drafter_bytes_per_sequence) / 1e6) for _, m, _ in pools))
    grid.add_row(f"KV + state per {_tokens(request_tokens)}-token request",
                 *(_gb(m.sequences_at(request_tokens)[0]) for _, m, _ in pools))
    grid.add_row(f"{_tokens(request_tokens)}-token requests that fit (per replica / all replicas)",
                 *(f"{number(fit)} / {number(fit * replicas)}"
                   for _, m, replicas in pools for fit in (m.sequences_at(request_tokens)[1],)))
    grid.add_row(f"max concurrency at {number(pools[0][1].context_tokens)} tokens (per replica)",
                 *(number(m.max_concurrency) for _, m, _ in pools))
    return grid
