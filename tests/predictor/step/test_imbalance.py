"""Expert imbalance under EP (METHOD §3.5): the uniform sampler, Eq. 3, coverage, few experts."""

from __future__ import annotations

import math

import pytest

from levers.configuration import Configuration
from predictor.cards.registry import load_card
from predictor.step.imbalance import (
    LARGEST_SAMPLED_TOKENS,
    NO_IMBALANCE,
    distinct_experts,
    eplb_bound,
    few_expert_bw_fraction,
    imbalance_factors,
    imbalance_ratio,
    independent_fraction,
    router_coverage,
    sample_factors,
    sampled_factors,
    shipped_tables,
    table_key,
    uniform_factors,
)

EXACT = 1e-12
DEEPSEEK_EXPERT_PARAMS = 3 * 7168 * 2048


def test_one_token_top1_is_exact():
    # One token picks one of 8 experts on 8 ranks: the busiest rank has 1 row and 1 expert,
    # the mean is 1/8 of each, so both factors are exactly 8.
    factors = sampled_factors(8, 1, 8, 1)
    assert factors.tokens_factor == pytest.approx(8.0, abs=EXACT)
    assert factors.experts_factor == pytest.approx(8.0, abs=EXACT)


def test_factors_exceed_one_and_fall_with_tokens():
    values = [uniform_factors(256, 8, 8, tokens).tokens_factor for tokens in (1, 16, 256, 4096)]
    assert all(v > 1.0 for v in values)
    assert values == sorted(values, reverse=True)
    assert values[0] > 2.0 and values[-1] < 1.05
    experts = [uniform_factors(256, 8, 8, tokens).experts_factor for tokens in (1, 16, 256)]
    assert experts[0] > experts[1] > 1.0
    assert experts[2] == pytest.approx(1.0, abs=0.01)  # every expert is touched by 256 tokens


def test_no_imbalance_without_ep():
    assert uniform_factors(256, 8, 1, 64) is NO_IMBALANCE
    assert imbalance_factors(256, 8, 1, 64, eplb_replicas=32) is NO_IMBALANCE


def test_sampler_is_deterministic():
    sampled_factors.cache_clear()
    first = sampled_factors(128, 4, 4, 32)
    sampled_factors.cache_clear()
    assert sampled_factors(128, 4, 4, 32) == first


def test_shipped_tables_are_the_sampler_and_cover_the_cards():
    # The package data is a cache of the sampler, not a second source: a few points
    # (small and large token counts) resampled give the shipped values exactly, and every
    # shipped MoE card's shape has its grid at a standard EP width.
    tables = shipped_tables()
    for key in ("256/8/8/1", "256/8/8/64", "128/8/4/512", "384/8/16/4096"):
        experts, top_k, ep, tokens = map(int, key.split("/"))
        fresh = sample_factors(experts, top_k, ep, tokens)
        assert tables[key] == (fresh.tokens_factor, fresh.experts_factor)
    for name in ("deepseek-r1", "kimi-k3", "qwen3-235b-a22b", "gpt-oss-120b"):
        card = load_card(name)
        assert table_key(card.num_experts, card.top_k, 8, LARGEST_SAMPLED_TOKENS) in tables


def test_interpolation_between_grid_points_and_beyond_the_largest():
    low, high = uniform_factors(256, 8, 8, 16), uniform_factors(256, 8, 8, 32)
    mid = uniform_factors(256, 8, 8, 16 * math.sqrt(2))
    assert mid.tokens_factor == pytest.approx((low.tokens_factor + high.tokens_factor) / 2, rel=EXACT)
    edge = uniform_factors(256, 8, 8, LARGEST_SAMPLED_TOKENS)
    beyond = uniform_factors(256, 8, 8, 4 * LARGEST_SAMPLED_TOKENS)
    assert beyond.tokens_factor - 1 == pytest.approx((edge.tokens_factor - 1) / 2, rel=EXACT)


def test_eplb_bound_is_equation_3():
    assert eplb_bound(1.5, 256, 32) == pytest.approx(1 + 0.5 * 256 / 288, abs=EXACT)
    assert eplb_bound(1.5, 256, 0) == 1.5
    raw = uniform_factors(256, 8, 8, 64)
    bounded = imbalance_factors(256, 8, 8, 64, eplb_replicas=32)
    assert bounded.tokens_factor == pytest.approx(eplb_bound(raw.tokens_factor, 256, 32), abs=EXACT)
    assert bounded.experts_factor == pytest.approx(eplb_bound(raw.experts_factor, 256, 32), abs=EXACT)


def test_distinct_experts_and_router_coverage():
    assert independent_fraction(10, 8, 256) == pytest.approx(1 - (1 - 8 / 256) ** 10, abs=EXACT)
    assert router_coverage(64, 8) == pytest.approx(0.89, abs=EXACT)    # METHOD §3.5, 256 experts top-8
    assert router_coverage(64, 4) == pytest.approx(0.78, abs=EXACT)    # 128 experts top-4
    assert router_coverage(1, 8) == 1.0
    assert router_coverage(65536, 8) > 0.99
    assert distinct_experts(1, 8, 256) == pytest.approx(8.0, abs=1e-9)
    assert distinct_experts(64, 8, 256) == pytest.approx(256 * (1 - (1 - 8 / 256) ** 64) * 0.89, rel=EXACT)
    assert distinct_experts(64, 8, 256, real_router=False) > distinct_experts(64, 8, 256)


def test_few_expert_bandwidth_shortfall():
    assert few_expert_bw_fraction(1, "fp8", DEEPSEEK_EXPERT_PARAMS) == pytest.approx(0.25, abs=EXACT)
    assert few_expert_bw_fraction(1, "fp4", DEEPSEEK_EXPERT_PARAMS) == pytest.approx(0.14, abs=EXACT)
    assert few_expert_bw_fraction(16, "fp8", DEEPSEEK_EXPERT_PARAMS) == 1.0
    assert few_expert_bw_fraction(16, "fp4", DEEPSEEK_EXPERT_PARAMS) == 1.0
    series = [few_expert_bw_fraction(g, "fp4", DEEPSEEK_EXPERT_PARAMS) for g in (1, 2, 4, 8, 16, 64)]
    assert series == sorted(series)
    # A group of two experts eight times larger streams like sixteen reference experts.
    assert few_expert_bw_fraction(2, "fp8", 8 * DEEPSEEK_EXPERT_PARAMS) == 1.0


def test_imbalance_ratio_evaluates_both_widths():
    card = load_card("DeepSeek-V3")
    target, anchor = Configuration(tp=8, ep=8), Configuration(tp=8, ep=1)
    ratio_n, ratio_d = imbalance_ratio(card, target, anchor, 64, "decode")
    expected = uniform_factors(256, 8, 8, 64)
    assert ratio_n == pytest.approx(expected.tokens_factor, abs=EXACT)
    assert ratio_d == pytest.approx(expected.experts_factor, abs=EXACT)
    assert ratio_n > 1.0
    same = imbalance_ratio(card, target, target, 64, "prefill")
    assert same == (1.0, 1.0)
    assert imbalance_ratio(load_card("Llama-3.1-8B"), Configuration(tp=8), Configuration(), 64) == (1.0, 1.0)
    with pytest.raises(ValueError):
        imbalance_ratio(card, target, anchor, 64, "training")
