"""DWDP prefill exposure (issue 13): the block formula against a two-buffer pipeline, the
fetch time, and the step model's prefill."""

from __future__ import annotations

import random

import pytest

from levers.configuration import Configuration, parse_config_text
from predictor.cards.registry import load_card
from predictor.feasibility import pool_configs
from predictor.hardware import parse_cluster
from predictor.step.dwdp import DWDP_FETCH_EFFICIENCY, LayerCosts, block_exposure_us, dwdp_plan, fetch_us, layer_blocks
from predictor.step.calibration import PHYSICS, Calibration
from predictor.step.roofline import ATTENTION, RawStep, Roofline
from predictor.step.simulate import SimulateStepModel


@pytest.fixture(autouse=True)
def isolated_home(tmp_path, monkeypatch):
    monkeypatch.setenv("INFERASIM_HOME", str(tmp_path / "home"))


def pipeline_exposure(fetch: float, layers: list[tuple[float, float]], blocks: int = 120) -> float:
    """Steady-state exposed time per block of a two-buffer fetch pipeline: layer l's fetch
    starts when fetch l-1 is done and layer l-2's MoE has freed its buffer; layer l's MoE
    (the last ``M`` of its compute ``C``) starts when its fetch is done."""
    seq = layers * blocks
    fetch_end, moe_end, link = [0.0] * len(seq), [0.0] * len(seq), 0.0
    for i, (compute, moe) in enumerate(seq):
        start = max(link, moe_end[i - 2] if i >= 2 else 0.0)
        link = fetch_end[i] = start + fetch
        ready = (moe_end[i - 1] if i else 0.0) + compute - moe
        moe_end[i] = max(ready, fetch_end[i]) + moe
    half = blocks // 2 * len(layers)
    return (moe_end[-1] - moe_end[half - 1]) / (blocks - blocks // 2) - sum(c for c, _ in layers)


def test_issue_formula_for_one_mla_and_three_kda_layers():
    f, c_mla, c_kda, m = 10.0, 12.0, 6.0, 3.0
    expected = max(0.0, 4 * f - c_mla - 3 * c_kda, 2 * f + m - 3 * c_kda)
    assert block_exposure_us(f, c_mla, c_kda, m, 3) == pytest.approx(expected) == pytest.approx(10.0)
    assert block_exposure_us(1.0, c_mla, c_kda, m, 3) == 0.0                    # fetch hidden
    assert block_exposure_us(5.0, 40.0, 4.0, 3.5, 3) == pytest.approx(2 * 5 + 3.5 - 12)   # buffer chain binds
    assert block_exposure_us(5.0, 3.0, 0.0, 1.0, 0) == pytest.approx(2.0)      # one-layer block: F - C


def test_formula_is_the_pipeline_where_one_chain_binds_and_never_above_it():
    rng = random.Random(7)
    equal = 0
    for _ in range(400):
        f, c_mla, c_kda = rng.uniform(0.1, 10), rng.uniform(0.5, 20), rng.uniform(0.5, 8)
        m = rng.uniform(0.05, 0.95) * c_kda
        moe_mla = min(m, 0.95 * c_mla)
        simulated = pipeline_exposure(f, [(c_kda, m)] * 3 + [(c_mla, moe_mla)])
        formula = block_exposure_us(f, c_mla, c_kda, m, 3)
        assert formula <= simulated + 1e-6 * max(1.0, simulated)                # a lower bound, never negative
        equal += abs(formula - simulated) <= 1e-6 * max(1.0, simulated)
    assert equal >= 0.85 * 400                                                  # and exact in most regimes


def test_kimi_k3_blocks_and_fetch_time():
    card, cluster = load_card("kimi-k3"), parse_cluster("gb300x4x8")
    assert layer_blocks(24, 69) == ((23, 3), (1, 0))
    layer_bytes = card.num_experts * card.expert_params() * 4.5 / 8
    expected_us = 15 / 16 * layer_bytes / (DWDP_FETCH_EFFICIENCY * cluster.gpu.intra_node_bw_gbps * 1e9) * 1e6
    assert fetch_us(card, 16, 4.5 / 8, cluster.gpu.intra_node_bw_gbps) == pytest.approx(expected_us)
    plan = dwdp_plan(card, 16, 4.5 / 8, cluster.gpu.intra_node_bw_gbps)
    assert plan.fetch_us == pytest.approx(expected_us * 92 / 93)


def test_prefill_pays_the_exposed_fetch_and_it_vanishes_with_large_batches():
    card, cluster = load_card("kimi-k3"), parse_cluster("gb300x4x8")
    config = Configuration().with_changes(parse_config_text(
        "disaggregated=true,prefill_layout=DWDP16,decode_layout=TP16/EP16/DP16,weight_dtype=recipe:nvfp4"))
    prefill, _ = pool_configs(config)
    model = SimulateStepModel(card, cluster, "trtllm", prefill)
    plain = SimulateStepModel(card, cluster, "trtllm", Configuration(weight_dtype="recipe:nvfp4"))
    small, big = model.prefill(4096), model.prefill(131072)
    exposed = model._dwdp.exposed_us(model.prefill_layer_costs(4096))
    assert small.get("communication") == pytest.approx(exposed) and exposed > 0
    assert small.total_us == pytest.approx(plain.prefill(4096).total_us + exposed)
    # fetch-bound: a forward takes about every layer's fetch, whatever its compute
    assert small.total_us >= 0.9 * 92 * model._dwdp.fetch_us * 93 / 92
    assert big.get("communication") == 0.0


def layer_costs_priced_as_steps(model: SimulateStepModel, tokens: int, seqs: int, context: float) -> LayerCosts:
    """`prefill_layer_costs` written out: each group's projections and attention priced
    as a step of their two rooflines."""
    rank_tokens, rank_seqs = model._prefill_rank(tokens, seqs)
    body = model._priced(model.body_raw(rank_tokens, tokens))
    own, grouped = {True: 0.0, False: 0.0}, 0.0
    for group, gemm, op in zip(model.card.attention, model._gemms, model._attention):
        memory, compute = op.prefill_parts(rank_tokens, rank_seqs, context, model._bf16_flops, model._bytes_per_us)
        cost = model._priced(RawStep((gemm.roofline(rank_tokens, model._bytes_per_us),
                                      Roofline(ATTENTION, memory, compute))))
        grouped += cost["gemm"]
        own[group.kind.is_linear] = max(own[group.kind.is_linear], (cost["gemm"] + cost["attention"]) / group.num_layers)
    card = model.card
    rest = (body["gemm"] - grouped + body["other"] + body["launch"] + body["communication"] + body["moe"]) / card.num_layers
    return LayerCosts(own[False] + rest, own[True] + rest, body["moe"] / card.moe_layers)


@pytest.mark.parametrize("calibration", (PHYSICS, Calibration(bandwidth=1.31, compute=0.87, moe=1.73, comm=1.21,
                                                              launch_us=3.1, fixed_us=5.0)), ids=("physics", "calibrated"))
def test_a_prefill_prices_to_the_bit_as_its_raw_parts_priced_one_by_one(calibration):
    """`_prefill_terms` computes the attention groups' parts once (for the step and the
    DWDP layer costs) and caches the head and per-step parts: a DWDP rank with EAGLE-3
    drafting, asked in any order and twice, gives what pricing `prefill_raw`'s parts and
    `prefill_layer_costs` from scratch gives."""
    card, cluster = load_card("kimi-k3"), parse_cluster("gb300x4x8")
    config = Configuration().with_changes(parse_config_text(
        "disaggregated=true,prefill_layout=DWDP16,decode_layout=TP16/EP16/DP16,weight_dtype=recipe:nvfp4,"
        "spec_method=eagle3,spec_depth=3"))
    prefill, _ = pool_configs(config)
    rng = random.Random(7)
    shapes = [(rng.randint(1, 40000), rng.randint(1, 4), float(rng.randint(0, 200000))) for _ in range(40)]
    model = SimulateStepModel(card, cluster, "trtllm", prefill, calibration=calibration)
    first = [model.prefill_us(*shape) for shape in shapes]
    again = [model.prefill_us(*shape) for shape in reversed(shapes)][::-1]
    for (tokens, seqs, context), us, repeat in zip(shapes, first, again):
        fresh = SimulateStepModel(card, cluster, "trtllm", prefill, calibration=calibration)
        raws = fresh.prefill_raw(tokens, seqs, context)
        body, head, attention, step, *draft = [fresh._priced(raw) for raw in raws]
        exposed = fresh._dwdp.exposed_us(layer_costs_priced_as_steps(fresh, tokens, seqs, context))
        terms = (body["gemm"] + head["gemm"], attention["attention"], body["moe"], body["communication"] + exposed,
                 body["launch"] + head["launch"], body["other"] + head["other"], step["fixed"],
                 sum(sum(p.values()) for p in draft), step["pipeline"])
        assert us == repeat == sum(terms)
