"""Expert imbalance under expert parallelism (METHOD §3.5).

With EP an MoE layer ends when its busiest rank ends. Two factors, each the expectation
of a per-layer maximum over ranks:
- ``I_n = E[max_r n_r] / mean(n)``: the busiest rank's routed tokens over the mean;
- ``I_d = E[max_r d_r] / mean(d)``: the busiest rank's distinct experts over the mean.

Without a routing recording they come from a **uniform top-k router** (chance only, no
skew) sampled with a fixed seed: every sample is one layer; experts sit on ranks in
contiguous blocks. Tables are cached per (experts, top_k, ep) on a power-of-two token
grid and interpolated in ``log2(tokens)``; above the largest sampled count the excess
``I - 1`` shrinks as ``1/sqrt(tokens)`` (the law of large numbers the samples follow).
Sampling one grid point takes up to ~0.2 s, so the tables of every shipped model card
at the standard EP widths ship precomputed (``predictor/data/imbalance_tables.json``,
built by ``scripts/build_imbalance_tables.py`` with this sampler and seed: the same
numbers); other shapes are sampled on first use.

Also here, because anchored mode needs them too:
- the EPLB bound ``I' = 1 + (I - 1) * E / (E + R)`` (Eq. 3), applied to both factors;
- the distinct experts ``t`` tokens touch, ``1 - (1 - k/E)^t`` of them, with the
  real-router coverage correction (see :func:`router_coverage`);
- the few-expert bandwidth shortfall of grouped GEMMs (see :func:`few_expert_bw_fraction`);
- :func:`imbalance_ratio`, the target-over-anchor ratio anchored mode multiplies the
  expert-GEMM and permutation share by (both widths evaluated, never one value for both).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

import numpy as np

from levers.configuration import Configuration
from predictor.cards.model_card import ModelCard

SAMPLER_SEED = 20_250_305
"""Fixed seed of the uniform router sampler: tables are deterministic."""
MAX_SAMPLED_ASSIGNMENTS = 2_000_000
"""Token-expert assignments drawn per table point (samples = this / (tokens * top_k))."""
MIN_SAMPLES, MAX_SAMPLES = 8, 512
LARGEST_SAMPLED_TOKENS = 32_768
"""Largest token count sampled; above it ``I - 1`` scales as ``1/sqrt(tokens)``."""
PHASES = ("decode", "prefill")

# METHOD §3.5 coverage: real routers touch fewer distinct experts than independent
# routing, bottoming at 0.89 of independent at 64 tokens for a top-8 model (256 experts)
# and 0.78 for a top-4 model (128 experts). The shortfall 1 - floor is 0.88 / top_k
# through both points; it is a bump in log2(tokens) centred at 64 tokens (one token
# always touches exactly k experts; very many touch them all).
COVERAGE_TROUGH_TOKENS = 64
COVERAGE_SHORTFALL_TIMES_TOP_K = 0.88
COVERAGE_MIN_FLOOR = 0.5
COVERAGE_WIDTH_OCTAVES = 2.5

# METHOD §3.5 few experts: at one row per expert a grouped GEMM over one expert reaches
# 25% of peak HBM bandwidth with an FP8 kernel, 14% with MXFP4; both saturate by ~16
# experts. BF16 kernels are not measured: they take the FP8 value. The group is counted
# in reference experts (DeepSeek-V3-size experts, 7168 x 2048 SwiGLU, the model those
# figures come from), so a group of a few huge experts (Mixtral) is not charged as if
# each were small: a kernel's parallelism comes from the bytes it streams.
SINGLE_EXPERT_BW_FRACTION = {"fp8": 0.25, "fp4": 0.14, "bf16": 0.25}
SATURATING_EXPERTS = 16
REFERENCE_EXPERT_PARAMS = 3 * 7168 * 2048


@dataclass(frozen=True, slots=True)
class ImbalanceFactors:
    """``I_n`` (busiest rank's rows over the mean) and ``I_d`` (its distinct experts)."""

    tokens_factor: float
    experts_factor: float


NO_IMBALANCE = ImbalanceFactors(1.0, 1.0)


# -- sampling ---------------------------------------------------------------------------
def _distinct_picks(rng: np.random.Generator, rows: int, num_experts: int, top_k: int) -> np.ndarray:
    """``rows`` uniform top-k choices (k distinct experts each), shape (rows, top_k)."""
    if 2 * top_k > num_experts:
        return np.argpartition(rng.random((rows, num_experts)), top_k - 1, axis=1)[:, :top_k]
    picks = rng.integers(0, num_experts, size=(rows, top_k))
    while True:  # rejection: resample rows with a repeat (uniform over distinct k-sets)
        ordered = np.sort(picks, axis=1)
        repeated = (ordered[:, 1:] == ordered[:, :-1]).any(axis=1)
        count = int(repeated.sum())
        if count == 0:
            return picks
        picks[repeated] = rng.integers(0, num_experts, size=(count, top_k))


TABLE_FILE = "imbalance_tables.json"
TABLE_EP_WIDTHS = (2, 4, 8, 16, 32, 64)


def table_key(num_experts: int, top_k: int, ep: int, tokens: int) -> str:
    return f"{num_experts}/{top_k}/{ep}/{tokens}"


@lru_cache(maxsize=1)
def shipped_tables() -> dict[str, tuple[float, float]]:
    """The precomputed grid points (``table_key`` -> ``(I_n, I_d)``); empty if absent."""
    path = resources.files("predictor") / "data" / TABLE_FILE
    if not path.is_file():
        return {}
    return {key: (float(a), float(b)) for key, (a, b) in json.loads(path.read_text())["factors"].items()}


@lru_cache(maxsize=4096)
def sampled_factors(num_experts: int, top_k: int, ep: int, tokens: int) -> ImbalanceFactors:
    """``I_n, I_d`` of a uniform top-k router at exactly ``tokens`` tokens (METHOD §3.5):
    the shipped table's value when it holds the point, else :func:`sample_factors`."""
    if ep <= 1 or tokens < 1:
        return NO_IMBALANCE
    shipped = shipped_tables().get(table_key(num_experts, top_k, ep, tokens))
    if shipped is not None:
        return ImbalanceFactors(*shipped)
    return sample_factors(num_experts, top_k, ep, tokens)


def sample_factors(num_experts: int, top_k: int, ep: int, tokens: int) -> ImbalanceFactors:
    """Sample ``I_n, I_d`` at ``tokens`` tokens with the fixed seed (deterministic)."""
    if ep <= 1 or tokens < 1:
        return NO_IMBALANCE
    if num_experts % ep:
        raise ValueError(f"ep={ep} does not divide {num_experts} experts")
    samples = int(min(MAX_SAMPLES, max(MIN_SAMPLES, MAX_SAMPLED_ASSIGNMENTS // (tokens * top_k))))
    rng = np.random.default_rng([SAMPLER_SEED, num_experts, top_k, ep, tokens])
    picks = _distinct_picks(rng, samples * tokens, num_experts, top_k)
    layer = np.repeat(np.arange(samples), tokens * top_k)
    counts = np.bincount(layer * num_experts + picks.ravel(), minlength=samples * num_experts)
    per_rank = counts.reshape(samples, ep, num_experts // ep)
    rows = per_rank.sum(axis=2)
    distinct = (per_rank > 0).sum(axis=2)
    tokens_factor = rows.max(axis=1).mean() / (tokens * top_k / ep)
    experts_factor = distinct.max(axis=1).mean() / distinct.mean()
    return ImbalanceFactors(float(tokens_factor), float(experts_factor))


def uniform_factors(num_experts: int, top_k: int, ep: int, tokens: float) -> ImbalanceFactors:
    """The sampled table interpolated in ``log2(tokens)`` (grid: powers of two)."""
    if ep <= 1 or num_experts <= 0 or top_k <= 0:
        return NO_IMBALANCE
    tokens = max(1.0, float(tokens))
    if tokens > LARGEST_SAMPLED_TOKENS:
        edge = sampled_factors(num_experts, top_k, ep, LARGEST_SAMPLED_TOKENS)
        shrink = math.sqrt(LARGEST_SAMPLED_TOKENS / tokens)
        return ImbalanceFactors(1 + (edge.tokens_factor - 1) * shrink, 1 + (edge.experts_factor - 1) * shrink)
    position = math.log2(tokens)
    low = math.floor(position)
    below = sampled_factors(num_experts, top_k, ep, 2 ** low)
    weight = position - low
    if weight < 1e-9:
        return below
    above = sampled_factors(num_experts, top_k, ep, 2 ** (low + 1))
    return ImbalanceFactors(below.tokens_factor + weight * (above.tokens_factor - below.tokens_factor),
                            below.experts_factor + weight * (above.experts_factor - below.experts_factor))


# -- laws ---------------------------------------------------------------------------------
def eplb_bound(factor: float, num_experts: int, replicas: int) -> float:
    """Eq. 3 (METHOD §3.5): ``I' = 1 + (I - 1) * E / (E + R)`` with ``R`` extra copies."""
    if replicas <= 0:
        return factor
    return 1.0 + (factor - 1.0) * num_experts / (num_experts + replicas)


def imbalance_factors(num_experts: int, top_k: int, ep: int, tokens: float,
                      eplb_replicas: int = 0) -> ImbalanceFactors:
    """``I_n, I_d`` at EP ``ep`` for ``tokens`` MoE tokens, with the EPLB bound."""
    raw = uniform_factors(num_experts, top_k, ep, tokens)
    if eplb_replicas <= 0 or raw is NO_IMBALANCE:
        return raw
    return ImbalanceFactors(eplb_bound(raw.tokens_factor, num_experts, eplb_replicas),
                            eplb_bound(raw.experts_factor, num_experts, eplb_replicas))


def independent_fraction(tokens: float, top_k: int, num_experts: int) -> float:
    """Share of experts touched by ``tokens`` independent top-k choices: ``1-(1-k/E)^t``."""
    if num_experts <= 0 or tokens <= 0:
        return 0.0
    return 1.0 - (1.0 - min(1.0, top_k / num_experts)) ** tokens


def router_coverage(tokens: float, top_k: int) -> float:
    """Real routers' distinct experts over independent routing's (METHOD §3.5): a trough
    of ``1 - 0.88/top_k`` at 64 tokens (0.89 top-8, 0.78 top-4; floor 0.5), 1 at the ends."""
    if tokens <= 1 or top_k <= 0:
        return 1.0
    floor = max(COVERAGE_MIN_FLOOR, 1.0 - COVERAGE_SHORTFALL_TIMES_TOP_K / top_k)
    octaves = math.log2(tokens / COVERAGE_TROUGH_TOKENS)
    return 1.0 - (1.0 - floor) * math.exp(-octaves * octaves / (2 * COVERAGE_WIDTH_OCTAVES ** 2))


def distinct_experts(tokens: float, top_k: int, num_experts: int, real_router: bool = True) -> float:
    """Expected distinct experts ``tokens`` tokens touch (of ``num_experts``), at least
    ``top_k`` once there is a token."""
    touched = num_experts * independent_fraction(tokens, top_k, num_experts)
    if real_router:
        touched *= router_coverage(tokens, top_k)
    return max(touched, min(top_k, num_experts) if tokens >= 1 else 0.0)


def few_expert_bw_fraction(group_experts: float, expert_dtype: str, expert_params: int) -> float:
    """Share of peak HBM bandwidth a grouped GEMM over ``group_experts`` experts reaches
    (METHOD §3.5): the single-expert fraction, rising linearly in ``log2`` of the group
    (counted in reference experts) to 1 at 16. TP sharding cuts bytes, not the group."""
    single = SINGLE_EXPERT_BW_FRACTION.get(str(expert_dtype), SINGLE_EXPERT_BW_FRACTION["fp8"])
    group = group_experts * max(1.0, expert_params / REFERENCE_EXPERT_PARAMS)
    if group <= 1.0:
        return single
    return min(1.0, single + (1.0 - single) * math.log2(group) / math.log2(SATURATING_EXPERTS))


# -- anchored mode ---------------------------------------------------------------------------
def config_factors(card: ModelCard, config: Configuration, tokens: float) -> ImbalanceFactors:
    """The factors of one configuration's layout (EP width, EPLB replicas)."""
    if not card.is_moe:
        return NO_IMBALANCE
    return imbalance_factors(card.num_experts, card.top_k, config.ep, tokens, config.eplb_replicas)


def imbalance_ratio(card: ModelCard, config_target: Configuration, config_anchor: Configuration,
                    tokens: float, phase: str = "decode") -> tuple[float, float]:
    """``(I_n target / I_n anchor, I_d target / I_d anchor)`` at ``tokens`` MoE tokens per
    step (METHOD §3.5: evaluate imbalance at both widths). ``phase`` selects a recorded
    routing when one exists; the uniform router has no phase dependence."""
    if phase not in PHASES:
        raise ValueError(f"unknown phase {phase!r}; accepted: {PHASES}")
    target = config_factors(card, config_target, tokens)
    anchor = config_factors(card, config_anchor, tokens)
    return target.tokens_factor / anchor.tokens_factor, target.experts_factor / anchor.experts_factor
