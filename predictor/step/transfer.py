"""The transfer laws of anchored mode (METHOD §3.1-§3.7), as small pure functions.

Each function restates one law and cites its section; none reads files, hardware
profiles or model cards. Times are unit-agnostic unless a name says otherwise (a
function returns the unit it was given). `predictor.step.anchored` composes them into a
step model; tests check each against a worked number.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from enum import StrEnum
from itertools import combinations
from typing import Callable, Sequence

import numpy as np

# METHOD §3.1: a batch's excess must be at least this long (ms) to measure rho from it.
MIN_EXCESS_FOR_RHO_MS = 1.0
# METHOD §3.1: the per-doubling shrink is clamped to [0.5, 1] (ideal halving .. no gain).
SHRINK_PER_DOUBLING_MIN = 0.5
SHRINK_PER_DOUBLING_MAX = 1.0
# METHOD §3.6 / §3.15 (MI355X, measured): host time PP stops overlapping, per step.
PP_HOST_BASE_US = 330.0
PP_HOST_PER_SEQUENCE_US = 6.3


# --- §3.1 decode across TP width -------------------------------------------------------

def fixed_step(steps: Sequence[float]) -> float:
    """`f = s_w(1)`: the cheapest step of the sweep (METHOD §3.1)."""
    return min(steps)


def tp_doublings(anchor_tp: int, target_tp: int) -> float:
    """Number of TP doublings from the anchor's width to the target's (negative when
    narrowing)."""
    return math.log2(target_tp / anchor_tp)


def default_rho(anchor_tp: int, target_tp: int) -> float:
    """Default excess shrink `rho = w / w'` (METHOD §3.1)."""
    return anchor_tp / target_tp


def carry_decode_width(step: float, fixed: float, rho: float) -> float:
    """Eq. 1 (METHOD §3.1): `s_{w'}(b) = f + (s_w(b) - f) * rho`; only the excess above
    the fixed per-step cost shrinks with width."""
    return fixed + (step - fixed) * rho


def carry_decode_width_split(step: float, fixed: float, rho: float, weight_read: float,
                             width_ratio: float) -> float:
    """The METHOD §3.1 refinement: split `f` into the modelled weight-read time (sharded
    by TP, so it scales by `width_ratio = w / w'`) and the true fixed cost (launches,
    sync, sampling, scheduling; kept). `weight_read` is clamped to `[0, f]`."""
    read = min(max(weight_read, 0.0), fixed)
    return (fixed - read) + read * width_ratio + (step - fixed) * rho


def shrink_points(batches: Sequence[int], steps: Sequence[float],
                  half_batches: Sequence[int], half_steps: Sequence[float],
                  min_excess: float = MIN_EXCESS_FOR_RHO_MS) -> tuple[tuple[float, float], ...]:
    """Measured per-doubling shrink (METHOD §3.1) as `(log b, shrink)` points.

    At each batch `b > 1` both sweeps measured whose excess `s(b) - s(1)` is at least
    `min_excess` at both widths (same unit as the steps), the shrink is
    `excess_w(b) / excess_{w/2}(b)`, clamped to [0.5, 1]."""
    fixed_w, fixed_half = fixed_step(steps), fixed_step(half_steps)
    half = dict(zip(half_batches, half_steps))
    points = []
    for batch, step in zip(batches, steps):
        if batch <= 1 or batch not in half:
            continue
        excess_w, excess_half = step - fixed_w, half[batch] - fixed_half
        if excess_w < min_excess or excess_half < min_excess:
            continue
        shrink = min(max(excess_w / excess_half, SHRINK_PER_DOUBLING_MIN), SHRINK_PER_DOUBLING_MAX)
        points.append((math.log(batch), shrink))
    return tuple(points)


def measured_rho(batch: float, points: Sequence[tuple[float, float]], doublings: float) -> float:
    """`rho(b) = shrink(b) ** doublings`, the shrink interpolated linearly in `log b`
    between measured points and held at the end values outside them (METHOD §3.1)."""
    xs = [x for x, _ in points]
    ys = [y for _, y in points]
    shrink = float(np.interp(math.log(max(batch, 1.0)), xs, ys))
    return shrink ** doublings


# --- §3.2 prefill across TP width ------------------------------------------------------

def fit_prefill(lengths: Sequence[float], ttfts: Sequence[float]) -> tuple[float, float, float]:
    """Least-squares `T(n) = F + c1 n + c2 n^2` with every coefficient non-negative
    (METHOD §3.2, §4).

    Every subset of the three terms is fitted and the best non-negative fit kept (an
    exact non-negative least squares for three unknowns). Fewer than three points fit a
    line `F + c1 n`; a single point is billed per token (`F = 0`, `c1 = T / n`)."""
    n = np.asarray(lengths, dtype=float)
    t = np.asarray(ttfts, dtype=float)
    if n.size == 0 or n.size != t.size:
        raise ValueError("fit_prefill needs as many TTFTs as prompt lengths, at least one")
    if n.size == 1:
        return 0.0, float(t[0] / n[0]), 0.0
    columns = [np.ones_like(n), n, n * n] if n.size >= 3 else [np.ones_like(n), n]
    best: tuple[float, tuple[float, float, float]] | None = None
    for size in range(len(columns), 0, -1):
        for chosen in combinations(range(len(columns)), size):
            design = np.stack([columns[i] for i in chosen], axis=1)
            solution, *_ = np.linalg.lstsq(design, t, rcond=None)
            if np.any(solution < 0):
                continue
            residual = float(np.sum((design @ solution - t) ** 2))
            coefficients = [0.0, 0.0, 0.0]
            for index, value in zip(chosen, solution):
                coefficients[index] = float(value)
            if best is None or residual < best[0] - 1e-12:
                best = (residual, tuple(coefficients))
    assert best is not None  # a single non-negative column always fits non-negative data
    return best[1]


def carry_prefill(fit: tuple[float, float, float], anchor_tp: int, target_tp: int) -> tuple[float, float, float]:
    """METHOD §3.2: keep `F`, scale `c1` and `c2` by `w / w'`."""
    fixed, c1, c2 = fit
    ratio = anchor_tp / target_tp
    return fixed, c1 * ratio, c2 * ratio


def prefill_time(fit: tuple[float, float, float], num_tokens: float, num_seqs: int = 1,
                 context_tokens: float = 0.0) -> float:
    """`F + c1 n + c2 n^2` generalised to a packed step (METHOD §3.2, §4).

    `num_seqs` equal sequences share the step (the quadratic attention term is per
    sequence); each attends to `context_tokens` earlier tokens already in its cache, so
    its quadratic term is `(ctx + n_s)^2 - ctx^2` for `n_s` new tokens."""
    fixed, c1, c2 = fit
    seqs = max(1, num_seqs)
    per_seq = num_tokens / seqs
    quadratic = ((context_tokens + per_seq) ** 2 - context_tokens ** 2) * seqs
    return fixed + c1 * num_tokens + c2 * quadratic


# --- §3.3 graph-capture staircase ------------------------------------------------------

class CaptureMode(StrEnum):
    NONE = "none"
    PIECEWISE = "piecewise"
    FULL = "full"


def padded_batch(batch: int, captured_sizes: Sequence[int]) -> int | None:
    """The captured size a batch is padded up to (METHOD §3.3: batch 33 runs as 40 when
    40 is the next captured size); None above the largest captured size (not padded)."""
    index = bisect_left(captured_sizes, batch)
    return captured_sizes[index] if index < len(captured_sizes) else None


def interpolate_linear(batch: float, batches: Sequence[float], steps: Sequence[float]) -> float:
    """Linear in `b` between measured points; linear extrapolation from the two last
    points above them (METHOD §3.3, eager mode). Below the smallest measured batch the
    step is held at that point's value: a line through two large batches can reach zero
    or below long before batch 1, and a step never gets cheaper than the cheapest one
    measured (the caller flags the batch as outside the sweep)."""
    if len(batches) == 1 or batch <= batches[0]:
        return steps[0]
    index = bisect_left(batches, batch)
    low = min(max(index - 1, 0), len(batches) - 2)
    x0, x1, y0, y1 = batches[low], batches[low + 1], steps[low], steps[low + 1]
    return y0 + (y1 - y0) * (batch - x0) / (x1 - x0)


def staircase_step(batch: int, batches: Sequence[int], steps: Sequence[float],
                   captured_sizes: Sequence[int], mode: CaptureMode | str,
                   attention_share: Callable[[float], float] | None = None) -> float:
    """Decode step at `batch` read off a sweep under graph capture (METHOD §3.3).

    - full: pad up to the next captured size and read the step there (the sweep is
      interpolated only when that captured size itself was not measured);
    - none (eager), or above the largest captured size: linear in `b`;
    - piecewise: attention runs eagerly at the real batch, the rest is padded:
      `(1 - a(p)) s(p) + a(b) s_lin(b)`, `a` the attention share of the step (from the
      simulate-mode breakdown; 0 without one, which keeps the full staircase).
    """
    linear = interpolate_linear(batch, batches, steps)
    if mode == CaptureMode.NONE:
        return linear
    padded = padded_batch(batch, captured_sizes)
    if padded is None or padded == batch:
        return linear
    at_padded = interpolate_linear(padded, batches, steps)
    if mode == CaptureMode.FULL or attention_share is None:
        return at_padded
    return (1.0 - attention_share(padded)) * at_padded + attention_share(batch) * linear


# --- §3.4 context length ---------------------------------------------------------------

def context_slopes(steps: Sequence[float], second_steps: Sequence[float], prompt_tokens: float,
                   second_prompt_tokens: float) -> tuple[float, ...]:
    """Per-batch decode slope per token of context from two prompt lengths (METHOD §3.4);
    negative slopes (noise) are clamped to 0."""
    span = second_prompt_tokens - prompt_tokens
    return tuple(max(0.0, (second - first) / span) for first, second in zip(steps, second_steps))


def context_term(slope: float, context_tokens: float, anchor_context_tokens: float) -> float:
    """What a context other than the anchor's adds to a decode step (METHOD §3.4)."""
    return slope * (context_tokens - anchor_context_tokens)


# --- §3.5 expert imbalance under EP ----------------------------------------------------

def ep_imbalance_term(step: float, moe_share: float, factor_target: float, factor_anchor: float) -> float:
    """METHOD §3.5: only the expert-GEMM/permutation share of the step scales, by the
    ratio of the imbalance factor at the target's EP to the factor at the anchor's EP
    (both evaluated: one value on both sides would cancel)."""
    return step * moe_share * (factor_target / factor_anchor - 1.0)


# --- §3.6 pipeline parallelism (Eq. 4) -------------------------------------------------

def micro_batch(clients: int, stages: int) -> int:
    """`ceil(C / p)`: requests per micro-batch (METHOD §3.6)."""
    return -(-clients // stages)


def pipeline_host_us(micro_batch_size: int) -> float:
    """`H(b) = 0.33 ms + 6.3 us * b` (METHOD §3.6, §3.15)."""
    return PP_HOST_BASE_US + PP_HOST_PER_SEQUENCE_US * micro_batch_size


def micro_batches_in_flight(clients: int, stages: int) -> int:
    """`m = p` with a full pipeline (`C >= p`), else `min(C, p)` (METHOD §3.6)."""
    return min(clients, stages)


def pipeline_hops_us(stages: int, nodes_spanned: int, p2p_us: float, p2p_inter_us: float) -> float:
    """Send/recv time of the `p` hops of one step (METHOD §3.6, §3.7): stages are placed
    contiguously, so a pipeline over `n > 1` nodes has `n - 1` forward boundaries on the
    network plus the token return; the other hops stay in the fast domain."""
    if stages <= 1:
        return 0.0
    network_hops = nodes_spanned if nodes_spanned > 1 else 0
    return (stages - network_hops) * p2p_us + network_hops * p2p_inter_us


def pipeline_overhead_us(clients: int, stages: int, hops_us: float, hop_overhead_us: float) -> float:
    """Eq. 4 without its first term: `p * (t_p2p + o) + m * H(ceil(C/p))`, with
    `hops_us` the send/recv time of all `p` hops (`pipeline_hops_us`)."""
    if stages <= 1:
        return 0.0
    size = micro_batch(max(clients, 1), stages)
    return hops_us + stages * hop_overhead_us + micro_batches_in_flight(max(clients, 1), stages) * pipeline_host_us(size)


# --- §3.7 communication ----------------------------------------------------------------

def communication_delta(anchor_comm: float, target_comm: float) -> float:
    """METHOD §3.7: the anchor already contains its own communication; price only what
    the target adds (positive) or removes (negative)."""
    return target_comm - anchor_comm
