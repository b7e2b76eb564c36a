"""DCP for MLA (memory, attention, communication, the KV split of a mixed-length batch) and
a forced acceptance length (issue 13)."""

from __future__ import annotations

import pickle
import random

import pytest

from levers.configuration import Configuration
from levers.errors import InputError
from predictor.cards.registry import load_card
from predictor.feasibility import memory_for
from predictor.hardware import parse_cluster
from predictor.step.comm_cost import build_comm_model
from predictor.step.dcp import busiest_rank_tokens, excess_tokens_per_request
from predictor.step.simulate import SimulateStepModel
from predictor.step.speculation import acceptance_curve, parse_acceptance


@pytest.fixture(autouse=True)
def isolated_home(tmp_path, monkeypatch):
    monkeypatch.setenv("INFERASIM_HOME", str(tmp_path / "home"))


A = dict(tp=8, kv_cache_dtype="fp8")


def test_dcp_partitions_the_mla_latent_and_leaves_the_kda_state():
    card, cluster = load_card("kimi-k3"), parse_cluster("gb300x4x2")
    one, eight = (memory_for(card, cluster, Configuration(**A, dcp=d), 200_000) for d in (1, 8))
    latent = 24 * (512 + 64) * 1                       # 24 MLA layers, FP8, not sharded by TP
    assert one.kv_bytes_per_token == latent and eight.kv_bytes_per_token == latent // 8
    assert one.state_bytes_per_sequence == eight.state_bytes_per_sequence      # KDA state: heads over TP
    assert eight.sequences_at(200_000)[1] > one.sequences_at(200_000)[1]


def test_dcp_attention_reads_a_share_and_pays_gather_and_scatter():
    card, cluster = load_card("kimi-k3"), parse_cluster("gb300x4x2")
    one, eight = (SimulateStepModel(card, cluster, "vllm", Configuration(**A, dcp=d)) for d in (1, 8))
    mla_one = one._attention[1].decode_parts(32, 200_000, 1, one._bf16_flops, one._bytes_per_us)
    mla_eight = eight._attention[1].decode_parts(32, 200_000, 1, eight._bf16_flops, eight._bytes_per_us)
    assert mla_eight[0] == pytest.approx(mla_one[0] / 8)        # KV bytes read
    assert mla_eight[1] == pytest.approx(mla_one[1])            # FLOPs: the group's heads over 1/8 of the tokens
    comm = build_comm_model(card, cluster, Configuration(**A, dcp=8)).dcp
    heads = 96 / 8
    assert comm.query_bytes_per_token == pytest.approx(heads * (512 + 64) * 2)
    assert comm.output_bytes_per_token == pytest.approx(heads * 8 * (512 * 2 + 4))
    assert comm.layers == 24 and build_comm_model(card, cluster, Configuration(**A)).dcp is None
    assert eight.decode(32, 200_000).get("attention") < one.decode(32, 200_000).get("attention")


def test_balanced_split_keeps_the_busiest_rank_within_one_chunk():
    rng = random.Random(3)
    for interleave in (1, 16, 64):
        for _ in range(50):
            contexts = [rng.randint(100, 250_000) for _ in range(rng.randint(2, 80))]
            mean = sum(contexts) / 8
            balanced = busiest_rank_tokens(contexts, 8, interleave, balanced=True)
            assert mean <= balanced <= mean + interleave
            assert busiest_rank_tokens(contexts, 8, interleave, balanced=False) >= balanced
    # the expectation the step model charges bounds the balanced excess over a batch
    assert excess_tokens_per_request(40, 8, 64, True) * 40 == pytest.approx(64 * 7 / 8)
    assert excess_tokens_per_request(40, 8, 64, False) == pytest.approx(64 * 7 / 16)
    assert excess_tokens_per_request(40, 1) == 0.0


# -- forced acceptance length ---------------------------------------------------------------------
def test_forced_acceptance_length():
    forced = parse_acceptance("al=3.2")
    assert forced[:5] == (2.0, 3.0, 3.2, 3.2, 3.2)           # at most k + 1 per verify step
    assert pickle.loads(pickle.dumps(forced)).forced_al == 3.2
    curve = acceptance_curve("Kimi-K3", "eagle3", "high", override=forced)   # no entropy scaling when forced
    assert curve.length(4) == 3.2 and curve.source.startswith("forced AL 3.2")
    card, cluster = load_card("kimi-k3"), parse_cluster("gb300x4x2")
    config = Configuration(**A, spec_method="eagle3", spec_depth=4)
    assert SimulateStepModel(card, cluster, "vllm", config, forced).tokens_per_step == 3.2
    measured = SimulateStepModel(card, cluster, "vllm", config).tokens_per_step
    assert measured != 3.2
    for bad in ("al=0.5", "al=x", "al=30"):
        with pytest.raises(InputError):
            parse_acceptance(bad)


def test_models_yaml_takes_a_per_model_acceptance():
    from agent.mix.config import parse_mix_text
    spec = parse_mix_text("models:\n  - name: kimi-k3\n    cluster: gb300x4x2\n    acceptance: al=2.5\n"
                          "  - name: kimi-k3\n    cluster: gb300x4x2\n    acceptance: [1.7, 2.2]\n")
    assert spec.models[0].workload.acceptance.forced_al == 2.5
    assert spec.models[1].workload.acceptance == (1.7, 2.2)
    with pytest.raises(InputError) as caught:
        parse_mix_text("models:\n  - name: kimi-k3\n    acceptance: al=0\n")
    assert "models[0].acceptance" in caught.value.message


def test_a_forced_acceptance_beyond_the_depth_is_priced_at_the_depth_and_says_so():
    from predictor.predict import predict
    from predictor.target import resolve_target
    from predictor.workload import WorkloadSpec
    target = resolve_target("deepseek-r1", "b200x8", "sglang")
    config = Configuration(tp=8, spec_method="mtp", spec_depth=3, concurrency=8)
    spec = WorkloadSpec("fixed", 1024, 1024)
    beyond = predict(target, config, _with_acceptance(spec, "al=5"))
    at = predict(target, config, _with_acceptance(spec, "al=4"))
    assert beyond.metrics["tpot_ms_mean"] == pytest.approx(at.metrics["tpot_ms_mean"])
    assert any("al=5 is beyond spec_depth=3" in flag for flag in beyond.flags)
    assert not any("beyond spec_depth" in flag for flag in at.flags)


def _with_acceptance(spec, text: str):
    import dataclasses
    return dataclasses.replace(spec, acceptance=parse_acceptance(text))
