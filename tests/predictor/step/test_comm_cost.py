"""Per-step communication (METHOD §3.7): tiers, collectives per layout, hops; m/B plus the
part of each collective's alpha above the kernel launch the step already pays."""

from __future__ import annotations

import pytest

from levers.configuration import Configuration
from predictor.cards.registry import load_card
from predictor.hardware import parse_cluster
from predictor.step.comm import Collective
from predictor.step.comm_cost import CUSTOM_ALLREDUCE_MAX_BYTES, AllReduceTier, build_comm_model

REL = 1e-9


def _per_byte(gpu, name, group):
    return gpu.collective_us(name, group, 1.0, include_alpha=False)


def _wait(gpu, name, group):
    """alpha above the per-kernel launch cost (what a collective adds to its kernel)."""
    return max(0.0, gpu.collective_us(name, group, 0.0) - gpu.kernel_launch_us)


def test_allreduce_grows_with_message_and_picks_the_tier():
    gpu = parse_cluster("mi355x").gpu
    tier = AllReduceTier.build(gpu, 8, None, crosses_nodes=False)
    sizes = [1e3, 1e5, gpu.custom_allreduce_switch_bytes, 2e6, CUSTOM_ALLREDUCE_MAX_BYTES, 3e7]
    times = [tier.us(size) for size in sizes]
    assert times == sorted(times) and times[0] > 0
    small, medium, large = 1e5, 2e6, 3e7
    assert tier.us(small) == pytest.approx(small * _per_byte(gpu, Collective.ALLREDUCE_ONE_SHOT, 8)
                                           + _wait(gpu, Collective.ALLREDUCE_ONE_SHOT, 8), rel=REL)
    assert tier.us(medium) == pytest.approx(medium * _per_byte(gpu, Collective.ALLREDUCE_TWO_SHOT, 8)
                                            + _wait(gpu, Collective.ALLREDUCE_TWO_SHOT, 8), rel=REL)
    assert tier.us(large) == pytest.approx(large * _per_byte(gpu, Collective.ALLREDUCE, 8)
                                           + _wait(gpu, Collective.ALLREDUCE, 8), rel=REL)


def test_forced_algorithms():
    gpu = parse_cluster("mi355x").gpu
    one = AllReduceTier.build(gpu, 4, "custom_one_shot", False)
    two = AllReduceTier.build(gpu, 4, "custom_two_shot", False)
    library = AllReduceTier.build(gpu, 4, "library", False)
    quick = AllReduceTier.build(gpu, 4, "quick_reduce", False)
    message = 2e6
    assert one.us(message) == pytest.approx(message * _per_byte(gpu, Collective.ALLREDUCE_ONE_SHOT, 4)
                                            + _wait(gpu, Collective.ALLREDUCE_ONE_SHOT, 4), rel=REL)
    assert library.us(message) == pytest.approx(message * _per_byte(gpu, Collective.ALLREDUCE, 4)
                                                + _wait(gpu, Collective.ALLREDUCE, 4), rel=REL)
    wait = _wait(gpu, Collective.ALLREDUCE_TWO_SHOT, 4)    # half the payload, the same latency
    assert quick.us(message) - wait == pytest.approx((two.us(message) - wait) / 2, rel=REL)


def test_cross_node_tier():
    gpu = parse_cluster("h100x8x2").gpu
    tier = AllReduceTier.build(gpu, 16, None, crosses_nodes=True)
    assert tier.us(1e5) == pytest.approx(1e5 * _per_byte(gpu, Collective.ALLREDUCE_INTER, 16)
                                         + _wait(gpu, Collective.ALLREDUCE_INTER, 16), rel=REL)
    card = load_card("Llama-3.1-70B")
    inside = build_comm_model(card, parse_cluster("h100x8x2"), Configuration(tp=8))
    across = build_comm_model(card, parse_cluster("h100x8x2"), Configuration(tp=16))
    assert across.step_us(8, 8) > inside.step_us(8, 8)  # the NIC is slower than NVLink despite half the bytes
    nvl72 = parse_cluster("gb200x4x4")  # 16 GPUs inside one NVLink domain: no NIC
    nvl = build_comm_model(card, nvl72, Configuration(tp=16))
    assert nvl.attention_ar.library == pytest.approx(_per_byte(nvl72.gpu, Collective.ALLREDUCE, 16), rel=REL)


def test_dense_tp_step_is_two_allreduces_per_layer():
    card = load_card("Llama-3.1-8B")
    assert build_comm_model(card, parse_cluster("h100x1"), Configuration()).step_us(64, 64) == 0.0
    model = build_comm_model(card, parse_cluster("h100"), Configuration(tp=2))
    gpu = parse_cluster("h100").gpu
    message = 64 * card.hidden_size * 2                      # below the one-shot switch size
    expected = 2 * card.num_layers * (message * _per_byte(gpu, Collective.ALLREDUCE_ONE_SHOT, 2)
                                      + _wait(gpu, Collective.ALLREDUCE_ONE_SHOT, 2))
    logits = 64 * card.vocab_size * 2 * _per_byte(gpu, Collective.ALLGATHER, 2) + _wait(gpu, Collective.ALLGATHER, 2)
    assert model.step_us(64, 64) == pytest.approx(expected + logits, rel=REL)


def test_only_alpha_above_the_launch_is_charged_inside_a_step():
    card = load_card("Llama-3.1-8B")
    gpu = parse_cluster("mi355x").gpu     # custom all-reduce alpha 6.4 us vs a 4.98 us launch (METHOD §3.15)
    model = build_comm_model(card, parse_cluster("mi355x"), Configuration(tp=8))
    alphas = card.num_layers * 2 * gpu.collectives["allreduce_one_shot"][8].alpha_us
    assert model.step_us(1, 1) < 0.3 * alphas
    assert model.step_us(1, 1) >= card.num_layers * 2 * _wait(gpu, Collective.ALLREDUCE_ONE_SHOT, 8)
    nvidia = parse_cluster("h100").gpu    # one-shot 4.6 us vs a 3 us launch: the rest is latency
    assert _wait(nvidia, Collective.ALLREDUCE_ONE_SHOT, 8) == pytest.approx(
        nvidia.collectives["allreduce_one_shot"][8].alpha_us - nvidia.kernel_launch_us)


def test_moe_exchange_by_layout():
    card, cluster = load_card("DeepSeek-V3"), parse_cluster("mi355x")
    gpu = cluster.gpu
    tokens = 256
    dep = build_comm_model(card, cluster, Configuration(tp=8, ep=8, attention_dp=8))
    gathered = tokens * card.hidden_size * 2
    expected = card.moe_layers * (gathered * (_per_byte(gpu, Collective.ALLGATHER, 8)
                                              + _per_byte(gpu, Collective.REDUCE_SCATTER, 8))
                                  + _wait(gpu, Collective.ALLGATHER, 8) + _wait(gpu, Collective.REDUCE_SCATTER, 8))
    assert dep.step(tokens / 8, tokens).moe_exchange_us == pytest.approx(expected, rel=REL)
    backend = build_comm_model(card, cluster, Configuration(tp=8, ep=8, attention_dp=8, all_to_all_backend="mori"))
    sent = tokens / 8 * card.top_k * card.hidden_size * (1 + 2)   # fp8 dispatch, bf16 combine
    a2a = card.moe_layers * (sent * _per_byte(gpu, Collective.ALL_TO_ALL, 8) + 2 * _wait(gpu, Collective.ALL_TO_ALL, 8))
    assert backend.step(tokens / 8, tokens).moe_exchange_us == pytest.approx(a2a, rel=REL)
    assert backend.step(32, 256).tp_allreduce_us == 0.0        # attention TP 1: no attention all-reduce
    plain = build_comm_model(card, cluster, Configuration(tp=8, ep=8))
    assert plain.step(tokens, tokens).moe_exchange_us == pytest.approx(
        card.moe_layers * plain.moe_ar.us(tokens * card.hidden_size * 2), rel=REL)


def test_pipeline_hops_cross_the_network_between_domains():
    card = load_card("Llama-3.1-70B")
    in_node = build_comm_model(card, parse_cluster("h100"), Configuration(tp=4, pp=2))
    spanning = build_comm_model(card, parse_cluster("h100x8x2"), Configuration(tp=8, pp=2))
    assert in_node.domains_spanned == 1 and spanning.domains_spanned == 2
    tokens = 16
    mean_bytes = (tokens * card.hidden_size * 2 + tokens * 4) / 2
    gpu = parse_cluster("h100").gpu
    assert in_node.hops_us(tokens) == pytest.approx(2 * mean_bytes * _per_byte(gpu, Collective.P2P, 2), rel=REL)
    assert spanning.hops_us(tokens) == pytest.approx(2 * mean_bytes * _per_byte(gpu, Collective.P2P_INTER, 2), rel=REL)
    assert build_comm_model(card, parse_cluster("h100"), Configuration(tp=8)).hops_us(tokens) == 0.0
