"""Speculative decoding (METHOD §3.8, Eq. 2): L(k), fallbacks, extrapolation, best depth."""

from __future__ import annotations

import statistics

import pytest

from levers.errors import InputError
from predictor.cards.registry import load_card
from predictor.step.speculation import (
    EAGLE3_DRAFT_VOCAB,
    NGRAM_DEFAULT_SOURCE,
    ENTROPY_SCALE,
    AcceptanceCurve,
    Entropy,
    SpecMethod,
    acceptance_curve,
    best_depth,
    curve_from_positions,
    drafter_plan,
    measured_curves,
    parse_acceptance,
)

EXACT = 1e-12


@pytest.mark.parametrize("model, method, depth, expected", [
    ("GLM-5.2", "mtp", 3, 2.99),          # glm5.2_mtp.yaml, thinking on
    ("Kimi-K2.5", "eagle3", 8, 3.77),     # kimik2.5_eagle3.yaml, thinking on
    ("Qwen3.5-397B-A17B", "mtp", 1, 1.93),
    ("DeepSeek-V4-Pro", "dspark", 7, 3.73),
])
def test_measured_curve_equals_the_csv(model, method, depth, expected):
    curve = acceptance_curve(model, method)
    assert curve.length(depth) == pytest.approx(expected, abs=EXACT)
    assert curve.source.startswith("measured")


def test_thinking_off_and_variants():
    off = acceptance_curve("Kimi-K2.5", "eagle3", thinking="off")
    assert off.length(1) == pytest.approx(1.80, abs=EXACT)
    # MiniMax-M3 has a plain and a GQA-head EAGLE-3 recipe: the plain one is the default.
    assert acceptance_curve("MiniMax-M3", "eagle3").length(8) == pytest.approx(3.74, abs=EXACT)


def test_sibling_head_fallback():
    mtp = acceptance_curve("Kimi-K2.5", "mtp")          # no MTP curve: EAGLE-3's
    assert mtp.source.startswith("sibling")
    assert mtp.length(4) == pytest.approx(3.24, abs=EXACT)
    eagle = acceptance_curve("GLM-5.2", "eagle3")       # no EAGLE-3 curve: MTP's
    assert eagle.length(2) == pytest.approx(2.5, abs=EXACT)


def test_median_fallback():
    curve = acceptance_curve("Llama-3.1-8B", "eagle3")
    assert curve.source.startswith("per-depth median")
    defaults = [c for c in measured_curves() if c["primary"] and c["thinking"] == "on"]
    assert curve.length(1) == pytest.approx(statistics.median(c["acceptance_length"][0] for c in defaults), abs=EXACT)
    ngram = acceptance_curve("Llama-3.1-8B", "ngram")           # never a neural drafter's curve
    assert ngram.source == NGRAM_DEFAULT_SOURCE and ngram.length(3) < 1.4 < curve.length(3)


def test_acceptance_is_an_input():
    assert parse_acceptance("1.8,2.4,2.9") == (1.8, 2.4, 2.9)
    forced = parse_acceptance("3:2.4")                            # a benchmark's fixed AL at depth 3
    assert forced[2] == pytest.approx(2.4) and 1.0 < forced[0] < forced[1] < forced[2]
    assert acceptance_curve("Kimi-K3", "dspark", override=forced).length(3) == pytest.approx(2.4)
    for bad in ("", "x", "0.5,2", "2,1.5", "0:2", "3:nan", "3:2.4,3:2.5"):
        with pytest.raises(InputError, match="--acceptance"):
            parse_acceptance(bad)
    for impossible in ("3:5", "2.5,3", "1.8,3.2", "1.1,3.0", "1:1.0,3:4.0"):   # each draft commits at most one more
        with pytest.raises(InputError, match=r"more than one token per drafted token"):
            parse_acceptance(impossible)
    with pytest.raises(InputError, match=r"above the 2.1 it can reach with L\(1\) = 1.1"):
        parse_acceptance("1.1,3.0")
    with pytest.raises(InputError, match="lists 17 depths"):
        parse_acceptance(",".join(["1.5"] * 17))


@pytest.mark.parametrize("content, problem", [
    ('{"lengths": 5}', "holds no acceptance curve"), ('"hello"', "is not CSV rows k,AL"), ("", "is empty"),
    ('{"lengths": [1.8, true]}', "holds no acceptance curve"), ('{"3": 5}', "L(3) = 5"),
])
def test_a_bad_acceptance_file_is_named(tmp_path, content, problem):
    path = tmp_path / "curve.json"
    path.write_text(content)
    with pytest.raises(InputError) as raised:
        parse_acceptance(str(path), lambda p: open(p).read())
    assert raised.value.what == f"--acceptance file '{path}'" and problem in str(raised.value)


def test_geometric_chain_beyond_the_last_point():
    curve = acceptance_curve("any", "mtp", override=[1.5, 1.8])
    # increments 0.5, 0.3: r = 0.6, A = 0.5 / 0.6, so the third adds 0.5 * 0.6^2 = 0.18.
    assert curve.chain_ratio == pytest.approx(0.6, abs=1e-12)
    assert curve.length(3) == pytest.approx(1.98, abs=1e-12)
    assert curve.length(4) == pytest.approx(1.98 + 0.108, abs=1e-12)
    measured = acceptance_curve("GLM-5.2", "mtp")
    assert measured.length(8) < measured.length(9) < measured.length(8) + (measured.length(8) - measured.length(7)) * 1.5


def test_entropy_classes_scale_first_position_acceptance():
    low = acceptance_curve("GLM-5.2", "mtp")
    for entropy in (Entropy.MIXED, Entropy.HIGH):
        scaled = acceptance_curve("GLM-5.2", "mtp", entropy=entropy)
        for depth in range(1, 9):
            expected = 1 + ENTROPY_SCALE[entropy] * (low.length(depth) - 1)
            assert scaled.length(depth) == pytest.approx(expected, abs=1e-12)
    assert ENTROPY_SCALE[Entropy.LOW] == 1.0 > ENTROPY_SCALE[Entropy.MIXED] > ENTROPY_SCALE[Entropy.HIGH]


def test_override_and_positions():
    curve = curve_from_positions([0.26, 0.12, 0.087])
    assert curve.length(2) == pytest.approx(1 + 0.26 + 0.26 * 0.12, abs=EXACT)
    assert acceptance_curve("Kimi-K3", "dspark", override=[1.2, 1.4]).length(2) == 1.4
    with pytest.raises(InputError):
        acceptance_curve("Kimi-K3", "dspark", override=[0.5])
    with pytest.raises(InputError):
        acceptance_curve("Kimi-K3", "medusa")
    assert acceptance_curve("Kimi-K3", "none").length(0) == acceptance_curve("Kimi-K3", "none").length(3) == 1.0


def test_best_depth_maximises_tokens_per_step_time():
    curve = AcceptanceCurve.fitted([1.8, 2.4, 2.8, 3.0], "test")
    step = lambda depth: 10.0 + 2.0 * depth
    rates = [curve.length(k) / step(k) for k in range(5)]
    assert best_depth(step, curve, 4) == max(range(5), key=lambda k: rates[k])
    rejected = acceptance_curve("Kimi-K3", "dspark", override=[1.0] * 8)
    assert best_depth(step, rejected, 8) == 0
    assert best_depth(lambda depth: 10.0, curve, 0) == 0


def test_drafter_plans():
    deepseek, llama = load_card("DeepSeek-V3"), load_card("Llama-3.1-8B")
    assert drafter_plan(deepseek, "mtp").target_layers_per_draft == deepseek.mtp_layers == 1
    assert drafter_plan(llama, "mtp").target_layers_per_draft == 1
    eagle = drafter_plan(deepseek, "eagle3")
    assert eagle.dense_layers_per_draft == 1 and eagle.lm_head_vocab == EAGLE3_DRAFT_VOCAB
    assert drafter_plan(deepseek, "dspark").target_layers_once == 3
    assert drafter_plan(deepseek, "ngram").is_free
    assert drafter_plan(deepseek, SpecMethod.NONE).is_free


def test_an_acceptance_that_names_no_file_lists_every_form_it_could_have_been():
    """`--acceptance banana` read as a file that is not there: the message lists the text
    forms too (it said only 'a UTF-8 text file')."""
    from predictor.step.speculation import ACCEPTANCE_ACCEPTED, parse_acceptance, read_acceptance_file

    with pytest.raises(InputError) as caught:
        parse_acceptance("banana", read_file=read_acceptance_file)
    assert caught.value.accepted == ACCEPTANCE_ACCEPTED and "k:AL pairs" in caught.value.accepted
    assert "no such file" in caught.value.problem
