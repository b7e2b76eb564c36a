"""Kernel fusions (METHOD §3.13): savings, legality, opportunities, and the step they shrink."""

from __future__ import annotations

import pytest

from levers.catalog import FUSIONS
from levers.configuration import Configuration
from predictor.cards.registry import load_card
from predictor.hardware import load_gpu, parse_cluster
from predictor.step.fusions import (
    GENERIC_REALISED_FRACTION,
    NAMED_REALISED_FRACTION,
    OPPORTUNITY_MIN_SHARE,
    fusion_opportunities,
    fusion_savings_us,
)
from predictor.step.operators import ELEMENTWISE_BW_EFFICIENCY
from predictor.step.simulate import SimulateStepModel

REL = 1e-9


def _bytes_per_us(gpu):
    return gpu.hbm_bandwidth_gbps * 1e3 * ELEMENTWISE_BW_EFFICIENCY   # elementwise kernels reach 0.7 of HBM


def test_add_rmsnorm_saving_is_launches_plus_bytes():
    card, gpu = load_card("Llama-3.1-8B"), load_gpu("h100")
    tokens = 64
    saved = fusion_savings_us(card, gpu, Configuration(fusions=("add_rmsnorm",)), tokens)
    launches = 2 * card.num_layers * gpu.kernel_launch_us
    moved = 2 * card.num_layers * card.hidden_size * 2 * tokens / _bytes_per_us(gpu)
    assert saved == pytest.approx(NAMED_REALISED_FRACTION * (launches + moved), rel=REL)
    assert fusion_savings_us(card, gpu, Configuration(), tokens) == 0.0


def test_illegal_fusions_save_nothing_and_are_never_offered():
    card, gpu = load_card("Llama-3.1-8B"), load_gpu("h100")
    assert fusion_savings_us(card, gpu, Configuration(fusions=("norm_quant",)), 64) == 0.0   # bf16 activations
    assert fusion_savings_us(card, gpu, Configuration(fusions=("moe_expert",)), 64) == 0.0   # dense model
    offered = {o["name"] for o in fusion_opportunities(card, gpu, Configuration(), 1000.0, 64)}
    assert offered and not offered & {"norm_quant", "act_quant", "moe_expert", "moe_routing"}
    fp8 = {o["name"] for o in fusion_opportunities(card, gpu, Configuration(activation_dtype="fp8",
                                                                             weight_dtype="fp8"), 1000.0, 64)}
    assert "norm_quant" in fp8


def test_opportunities_are_sorted_filtered_and_not_enabled():
    card, gpu = load_card("DeepSeek-V3"), load_gpu("mi355x")
    config = Configuration(tp=8, ep=8, fusions=("add_rmsnorm",))
    step = SimulateStepModel(card, parse_cluster("mi355x"), "sglang", config).decode_us(64, 2048)
    found = fusion_opportunities(card, gpu, config, step, 64)
    names = [o["name"] for o in found]
    assert "add_rmsnorm" not in names and set(names) <= set(FUSIONS)
    assert {"moe_expert", "moe_routing", "norm_quant"} <= set(names)  # fp8 checkpoint: fp8 activations
    savings = [o["saving_us"] for o in found]
    assert savings == sorted(savings, reverse=True)
    assert all(o["share"] >= OPPORTUNITY_MIN_SHARE for o in found)
    assert all(o["share"] == pytest.approx(o["saving_us"] / step, abs=1e-4) for o in found)
    assert fusion_opportunities(card, gpu, config, 1e12, 64) == []   # nothing is worth 2% of a huge step


def test_generic_pass_covers_elementwise_fusions_at_a_lower_fraction():
    card, gpu = load_card("DeepSeek-V3"), load_gpu("mi355x")
    generic = fusion_savings_us(card, gpu, Configuration(tp=8, fusions=("generic",)), 64)
    named = fusion_savings_us(card, gpu, Configuration(tp=8, fusions=("add_rmsnorm", "norm_quant", "act_quant")), 64)
    assert generic == pytest.approx(named * GENERIC_REALISED_FRACTION / NAMED_REALISED_FRACTION, rel=REL)
    assert fusion_opportunities(card, gpu, Configuration(tp=8, fusions=("generic",)), 1000.0, 64) == []


def test_enabled_fusions_shrink_the_simulated_step_by_their_saving():
    card, cluster = load_card("Llama-3.1-8B"), parse_cluster("h100x1")
    fused = Configuration(fusions=("add_rmsnorm", "rope_kvstore"))
    plain_us = SimulateStepModel(card, cluster, "vllm", Configuration()).decode_us(16, 1024)
    fused_us = SimulateStepModel(card, cluster, "vllm", fused).decode_us(16, 1024)
    assert plain_us - fused_us == pytest.approx(fusion_savings_us(card, cluster.gpu, fused, 16), rel=1e-6)
