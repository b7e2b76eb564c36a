"""Steps 3-5 of the corpus rule (`predictor.corpus.anchors`): the GPU prefill marginal, the
host time and the decode points of one group, in closed form.

Per prompt length `n` of the group's prefill role (runs at its lowest clients per replica):
- **M(n)**, the GPU work a prompt adds (METHOD §3.2): from the prefill interference of the
  group's per-token-streaming runs at `n` when it is visible
  (`M = (1 - median ITL / mean TPOT) / lambda`, `predictor.corpus.host`); otherwise the
  simulate-mode prefill marginal of the layout (`sim(n) - sim(1)`, METHOD §2), never more
  than the lowest-concurrency TTFT leaves after the engine's default host time and the
  decode step(s) the prompt rides;
- **host time** (METHOD §3.12), the rest of that TTFT: colocated
  `H(n) = TTFT - k s(b) - M(n)` (`k` chunks, each riding a decode step); split
  `H(n) = TTFT - F_gpu - M(n) - s_dec / 2 - h n` read as `2 H0` (a split's request
  passes both pools' front ends: it bills `H0 + h n` and `H0`, METHOD §3.11). `h` is the engine's per-token host cost
  (`corpus_host`); `H0` is the median over prompt lengths, at least 0. An engine whose
  host time was measured apart from the prefill over many layouts
  (`predictor.corpus.host.ANCHORING_HOSTS`) gives its `H0` instead, and the anchor is
  flagged `host-per-engine` (its fit holds it close: `predictor.step.anchored`).
Decode points: `s(b) = L * TPOT * (1 - lambda * M(isl))` colocated, `L * TPOT` in a
decode pool, at Little's-law batch `b` and context `isl + osl / 2`.
"""

from __future__ import annotations

import statistics
from typing import Callable

from levers.catalog import Engine
from predictor.analytical import chunks
from predictor.anchors.anchor import HOST_PER_ENGINE
from predictor.corpus.anchors import Group, Role, context_of, decode_batch, layout_config, tokens_per_step
from predictor.corpus.host import (
    ANCHORING_HOSTS,
    host_for,
    interference_marginal,
    is_per_token_stream,
    request_rate_per_ms,
    ttft_typical,
)
from predictor.sim.scheduler import rank_chunk_tokens
from predictor.step.simulate import SimulateStepModel
from predictor.units import US_PER_MS

MIN_BUSY_SHARE_LEFT = 0.2        # a decode step keeps at least this share of L * TPOT
MIN_MARGINAL_SHARE = 0.02        # M(n) keeps at least this share of the TTFT

SimMarginal = Callable[[int], float | None]   # n -> simulate-mode prefill marginal (ms)


def rate_per_ms(role: Role) -> float:
    """Requests per ms per replica by Little's law (median TTFT when given)."""
    return request_rate_per_ms(role.row, role.clients)


def _step(role: Role) -> float:
    return role.row.measured.tpot_ms_mean * tokens_per_step(role.row)


def _chunks(role: Role) -> int:
    config = role.row.config
    return len(chunks(role.row.isl, rank_chunk_tokens(Engine(role.row.engine), config)))


def itl_marginal(group: Group, isl: int) -> float | None:
    """M(n) from the prefill interference of per-token-streaming runs."""
    found = [m for role in group.decode
             if role.colocated and role.row.isl == isl and is_per_token_stream(role.row)
             and (m := interference_marginal(role.row, role.clients)) is not None]
    return statistics.median(found) if len(found) >= 2 else None


def _residual_cap(role: Role) -> float:
    """The most M(n) can be: the TTFT after the default host time and the decode step(s)."""
    row, ttft, step = role.row, ttft_typical(role.row), _step(role)
    host = host_for(row.engine)
    if role.colocated:
        k = _chunks(role)
        return (ttft - host.ms(row.isl) - k * step) / max(1e-6, 1.0 - k * rate_per_ms(role) * step)
    return ttft - host.ms(row.isl) - host.base_ms - step / 2


def _host_residual(role: Role, marginal: float, floor_ms: float, per_token_us: float) -> float:
    """H0 implied by one lowest-concurrency run given M(n)."""
    row, ttft, step = role.row, ttft_typical(role.row), _step(role)
    if role.colocated:
        settled = step * (1.0 - rate_per_ms(role) * marginal)
        return ttft - _chunks(role) * settled - marginal - per_token_us * row.isl / US_PER_MS
    return (ttft - floor_ms - marginal - step / 2 - per_token_us * row.isl / US_PER_MS) / 2.0


def fill_points(group: Group, sim_marginal: SimMarginal | None = None) -> None:
    """Steps 3-5 in closed form (module docstring)."""
    lowest = _lowest_rows(group.prefill)
    group.marginals, group.marginal_source, group.prefill_rows = {}, {}, {}
    for isl, roles in lowest.items():
        cap = statistics.median(_residual_cap(r) for r in roles)
        floor = MIN_MARGINAL_SHARE * statistics.median(ttft_typical(r.row) for r in roles)
        marginal, source = itl_marginal(group, isl), "itl"
        if marginal is None:
            simulated = sim_marginal(isl) if sim_marginal else None
            marginal, source = (min(simulated, cap), "simulate") if simulated is not None else (cap, "ttft")
        group.marginals[isl] = max(marginal, floor)
        group.marginal_source[isl] = source
        group.prefill_rows[isl] = [r.row.id for r in roles]
    _decode_points(group)
    host = host_for(group.key[0][1])
    group.host_per_token_us = host.per_token_us
    if Engine(group.key[0][1]) in ANCHORING_HOSTS and any(is_per_token_stream(r.row) for r in group.decode):
        # The engine's host time, measured apart from the prefill on runs like these, is
        # the anchor's: its own TTFTs cannot split the two at one width.
        group.host_base_ms = host.base_ms
        group.flags.append(HOST_PER_ENGINE)
        return
    residuals = [_host_residual(r, group.marginals[isl], group.floor_ms, host.per_token_us)
                 for isl, roles in lowest.items() for r in roles]
    group.host_base_ms = max(0.0, statistics.median(residuals)) if residuals else host.base_ms


def _decode_points(group: Group) -> None:
    group.decode_points, group.point_rows = {}, {}
    for role in group.decode:
        row = role.row
        step = _step(role)
        if role.colocated:
            marginal = group.marginals.get(row.isl, _nearest(group.marginals, row.isl))
            step *= max(MIN_BUSY_SHARE_LEFT, 1.0 - rate_per_ms(role) * marginal)
        key = (context_of(row), decode_batch(role))
        group.decode_points.setdefault(key, []).append(step)
        group.point_rows.setdefault(key, []).append(row.id)
    group.floor_ms = min((min(v) for v in group.decode_points.values()), default=0.0)


def _lowest_rows(roles: list[Role]) -> dict[int, list[Role]]:
    """Per prompt length, the roles at the lowest clients per replica."""
    by_isl: dict[int, list[Role]] = {}
    for role in roles:
        by_isl.setdefault(role.row.isl, []).append(role)
    lowest = {isl: min(r.clients for r in found) for isl, found in by_isl.items()}
    return {isl: [r for r in found if r.clients == lowest[isl]] for isl, found in by_isl.items()}


def _nearest(values: dict[int, float], key: int) -> float:
    """M at another prompt length: the nearest measured one, scaled per token."""
    if not values:
        return 0.0
    best = min(values, key=lambda k: abs(k - key))
    return values[best] * key / best


def simulate_marginal(group: Group) -> SimMarginal:
    """`sim(n) - sim(1)` of the group's layout (METHOD §2), None when simulate mode fails."""
    role = (group.prefill or group.decode)[0]
    row = role.row
    config = layout_config(row, group.key)
    try:
        model = SimulateStepModel(row.card(), row.cluster(), Engine(row.engine), config)
    except (ValueError, KeyError, ZeroDivisionError):
        return lambda n: None

    def marginal(n: int) -> float | None:
        try:
            return (model.prefill_us(n) - model.prefill_us(1)) / US_PER_MS
        except (ValueError, KeyError, ZeroDivisionError):
            return None

    return marginal
