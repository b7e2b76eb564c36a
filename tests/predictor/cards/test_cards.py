"""Model cards: parameter counts derived from the architecture, aliases, user cards."""

from __future__ import annotations

import json
from pathlib import Path
from importlib import resources

import pytest

from levers.errors import InputError
from predictor.cards import registry as cards
from predictor.cards.builder import native_dtypes
from predictor.cards.config_reader import ConfigReader
from predictor.cards.registry import (
    COMPONENTS,
    AttentionKind,
    Dtype,
    add_card_from_config,
    card_from_config_json,
    card_problems,
    card_from_hf_config,
    list_cards,
    load_card,
    register_card_file,
)

# The public Llama-3.1-8B config.json (meta-llama), the fields a card needs.
LLAMA_8B_CONFIG = {
    "architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336,
    "max_position_embeddings": 131072, "model_type": "llama", "num_attention_heads": 32,
    "num_hidden_layers": 32, "num_key_value_heads": 8, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "vocab_size": 128256,
}


# Embedded card names, read from the package data (not through the user's home).
EMBEDDED = sorted(item.name[:-5] for item in (resources.files("predictor") / "data" / "models").iterdir()
                  if item.name.endswith(".json"))


@pytest.fixture(autouse=True)
def isolated_home(tmp_path, monkeypatch):
    """User cards go to a throw-away INFERASIM_HOME."""
    monkeypatch.setenv("INFERASIM_HOME", str(tmp_path / "home"))
    yield tmp_path / "home"
    cards._catalog.cache_clear()


def test_all_35_embedded_cards_load():
    names = {card.name for card in list_cards()}
    assert len(names) == len(EMBEDDED) == 35
    assert {"Kimi-K3", "DeepSeek-V4-Pro", "GLM-5.2", "gpt-oss-120b", "MiniMax-M1"} <= names


@pytest.mark.parametrize("name", EMBEDDED)
def test_params_from_architecture_match_published_derivation_within_1pct(name):
    """The count comes from the card's fields; `derived_total_params` is only the check."""
    card = load_card(name)
    if card.derived_total_params is None:
        pytest.skip(f"{card.name} has no published derivation (e.g. MiniMax-M1 is unverified)")
    assert card.total_params() == pytest.approx(card.derived_total_params, rel=0.01)


def test_every_card_but_minimax_m1_has_a_derivation():
    missing = [card.name for card in list_cards() if card.derived_total_params is None]
    assert missing == ["MiniMax-M1"]
    # MiniMax-M1's vendor figure is 456B total: 80 layers x 32 experts x 3*6144*9216 dominate.
    assert load_card("minimax-m1").total_params() == pytest.approx(456e9, rel=0.01)


def test_components_partition_the_total():
    for card in list_cards():
        parts = card.params_by_component()
        assert tuple(parts) == COMPONENTS
        assert sum(parts.values()) == card.total_params()
        assert 0 < card.active_params() <= card.total_params()


def test_llama_8b_components_by_hand():
    parts = load_card("llama-3.1-8b").params_by_component()
    h, inter, vocab, layers = 4096, 14336, 128256, 32
    assert parts["attention"] == layers * (h * h + 2 * h * 8 * 128 + h * h)     # q, k, v, o
    assert parts["dense_mlp"] == layers * 3 * h * inter                        # gate, up, down
    assert parts["embeddings"] == 2 * vocab * h                                # untied embed + LM head
    assert parts["other"] == layers * 2 * h + h                                # two norms per layer + final
    assert parts["routed_experts"] == parts["shared_experts"] == 0
    assert load_card("llama-3.1-8b").active_params() == 8_030_261_248


def test_kimi_k3_active_params_count_top16_latent_experts():
    card = load_card("kimi-k3")
    expert = 3 * 3584 * 3072                      # routed experts live in the 3584-d latent space
    routed = card.params_by_component()["routed_experts"]
    assert routed == 92 * 896 * expert
    assert card.active_params() == card.total_params() - routed + 92 * 16 * expert
    assert card.active_params() == pytest.approx(105.36e9, rel=0.01)


@pytest.mark.parametrize("alias, name", [
    ("kimi-k3", "Kimi-K3"), ("moonshotai/Kimi-K3", "Kimi-K3"), ("deepseek-v4-pro", "DeepSeek-V4-Pro"),
    ("glm-5.2", "GLM-5.2"), ("gpt-oss-120b", "gpt-oss-120b"), ("llama-3.1-8b", "Llama-3.1-8B"),
    ("qwen3.5-397b", "Qwen3.5-397B-A17B"), ("QWEN3.5-397B-A17B", "Qwen3.5-397B-A17B"),
    ("qwen3-30b", "Qwen3-30B-A3B"), ("minimax-m3", "MiniMax-M3"), ("deepseek-r1", "DeepSeek-R1"),
    ("deepseek-ai/DeepSeek-R1", "DeepSeek-R1"), ("meta-llama/Meta-Llama-3.1-8B", "Llama-3.1-8B"),
])
def test_aliases_resolve_case_insensitively(alias, name):
    assert load_card(alias).name == name


def test_no_alias_names_two_cards():
    seen: dict[str, str] = {}
    for card in list_cards():
        for alias in (card.name.lower(), *card.aliases):
            assert seen.setdefault(alias, card.name) == card.name, alias


def test_unknown_model_is_an_input_error_listing_cards():
    with pytest.raises(InputError) as error:
        load_card("gpt-5")
    assert error.value.what == "--model"
    assert "unknown model 'gpt-5'" in error.value.problem
    assert "DeepSeek-R1" in error.value.accepted


def test_native_dtypes_from_quantization_config():
    def dtypes(name):
        d = load_card(name).native_dtypes
        return d.weight, d.expert, d.kv_cache, d.embedding
    bf16, fp8, fp4 = Dtype.BF16, Dtype.FP8, Dtype.FP4
    assert dtypes("deepseek-r1") == (fp8, fp8, bf16, bf16)        # quant_method fp8
    assert dtypes("deepseek-v4-pro") == (fp8, fp4, bf16, bf16)    # fp8 + expert_dtype fp4
    assert dtypes("gpt-oss-120b") == (bf16, fp4, bf16, bf16)      # mxfp4 experts only
    assert dtypes("kimi-k3") == (bf16, fp4, bf16, bf16)           # compressed-tensors MXFP4, self_attn ignored
    assert dtypes("kimi-k2.5") == (bf16, fp4, bf16, bf16)         # INT4 group-32 sized as a 4-bit format
    assert dtypes("llama-3.1-8b") == (bf16, bf16, bf16, bf16)


def test_native_fp4_experts_keep_their_format():
    """A 4-bit checkpoint's experts name their format when it is not the platform's FP4
    (NVFP4 on NVIDIA): TensorRT-LLM's DWDP refuses them (test_deployment_layouts)."""
    def expert_format(name):
        return load_card(name).native_dtypes.expert_format
    assert expert_format("gpt-oss-120b") == "mxfp4"        # quant_method mxfp4
    assert expert_format("kimi-k3") == "mxfp4"             # compressed-tensors float, group 32
    assert expert_format("kimi-k2.5") == "int4"            # compressed-tensors int
    assert expert_format("deepseek-v4-pro") == "mxfp4"     # fp4 experts with ue8m0 scales
    assert expert_format("deepseek-r1") is None and expert_format("llama-3.1-8b") is None
    nvfp4 = {"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized",
             "config_groups": {"group_0": {"weights": {"num_bits": 4, "type": "float", "group_size": 16}}}}
    native = native_dtypes(ConfigReader({"quantization_config": nvfp4}, "config.json"))
    assert (native.expert, native.expert_format) == (Dtype.FP4, None)     # the platform's FP4


def test_attention_groups_of_hybrid_models():
    def groups(name):
        return [(g.kind, g.num_layers, g.window_tokens, g.compress_ratio) for g in load_card(name).attention]
    assert groups("gpt-oss-120b") == [(AttentionKind.GQA, 18, 128, None), (AttentionKind.GQA, 18, None, None)]
    assert groups("kimi-k3") == [(AttentionKind.KDA, 69, None, None), (AttentionKind.MLA, 24, None, None)]
    assert groups("qwen3.5-397b") == [(AttentionKind.GDN, 45, None, None), (AttentionKind.GQA, 15, None, None)]
    assert groups("deepseek-v4-pro") == [(AttentionKind.COMPRESSED, 30, 128, 4),
                                         (AttentionKind.COMPRESSED, 31, 128, 128)]
    assert groups("minimax-m1") == [(AttentionKind.LIGHTNING, 70, None, None), (AttentionKind.GQA, 10, None, None)]
    assert load_card("kimi-k3").latent_moe_dim == 3584
    assert [g.indexer_heads for g in load_card("glm-5.2").attention] == [32, None]   # 21 full + 57 shared


def test_head_counts_for_legality():
    assert load_card("llama-3.1-8b").attention_heads == 32
    assert load_card("qwen3.5-397b").attention_heads == 16      # GDN key heads are the smallest
    assert load_card("qwen3.5-397b").num_kv_heads == 2
    assert load_card("deepseek-r1").num_attention_heads == 128
    assert load_card("deepseek-r1").num_kv_heads == 1            # one latent per token
    assert load_card("llama-3.1-8b").is_moe is False and load_card("kimi-k3").is_moe is True


def test_builder_reproduces_the_embedded_card():
    built = card_from_hf_config(LLAMA_8B_CONFIG, "Llama-3.1-8B", {"repo": "test"})
    embedded = load_card("llama-3.1-8b")
    assert built.attention == embedded.attention
    assert built.params_by_component() == embedded.params_by_component()


def test_missing_config_fields_name_the_file_and_fields(tmp_path):
    path = tmp_path / "broken" / "config.json"
    path.parent.mkdir()
    config = {k: v for k, v in LLAMA_8B_CONFIG.items() if k not in ("hidden_size", "vocab_size")}
    path.write_text(json.dumps(config))
    with pytest.raises(InputError) as error:
        card_from_config_json(path)
    assert str(path) in error.value.what
    assert "hidden_size" in error.value.problem and "vocab_size" in error.value.problem


def test_unreadable_config_is_an_input_error(tmp_path):
    path = tmp_path / "config.json"
    path.write_text("{not json")
    with pytest.raises(InputError, match="not valid JSON"):
        card_from_config_json(path)


def test_add_card_from_config_writes_atomically_and_loads_by_name(tmp_path, isolated_home):
    path = tmp_path / "my-llama" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(LLAMA_8B_CONFIG))
    card = add_card_from_config(path, "my-llama")
    stored = isolated_home / "models" / "my-llama.json"
    assert stored.is_file()
    assert [p.name for p in stored.parent.iterdir()] == ["my-llama.json"]    # no temp file left
    assert load_card("MY-LLAMA") == card
    assert load_card("my-llama").total_params() == 8_030_261_248
    assert "my-llama" in [c.name for c in list_cards()]


def test_user_card_cannot_take_an_embedded_name(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(LLAMA_8B_CONFIG))
    with pytest.raises(InputError, match="clashes with an embedded model"):
        add_card_from_config(path, "Kimi-K3")


def test_register_card_file_validates_the_schema(tmp_path):
    data = load_card("gpt-oss-20b").model_dump(mode="json")
    data.update(name="my-oss", aliases=["my-oss"], hf_id="me/my-oss")
    good = tmp_path / "card.json"
    good.write_text(json.dumps(data))
    assert register_card_file(good).name == "my-oss"
    assert load_card("my-oss").total_params() == load_card("gpt-oss-20b").total_params()
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**data, "hidden_size": "wide"}))
    with pytest.raises(InputError, match="hidden_size"):
        register_card_file(bad)


def test_user_card_drops_aliases_an_embedded_card_owns(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**LLAMA_8B_CONFIG, "_name_or_path": "meta-llama/Llama-3.1-8B"}))
    card = add_card_from_config(path, "llama-finetune")
    assert card.aliases == ("llama-finetune",)
    assert load_card("meta-llama/Llama-3.1-8B").name == "Llama-3.1-8B"
    assert load_card("llama-finetune").name == "llama-finetune"


def test_a_broken_user_card_is_skipped_and_named_when_asked_for(isolated_home):
    """One broken file in the user's models folder made every model command exit 2, the
    embedded models included; the anchor store skips a bad file, so does the catalog."""
    folder = isolated_home / "models"
    folder.mkdir(parents=True)
    (folder / "bad.json").write_text("{bad")
    (folder / "mymodel.json").write_text('{"name": "mymodel"}')
    cards._catalog.cache_clear()
    assert load_card("llama-3.1-8b").name == "Llama-3.1-8B"
    assert len(list_cards()) == len(EMBEDDED)
    assert sorted(Path(path).name for path, _ in card_problems()) == ["bad.json", "mymodel.json"]
    with pytest.raises(InputError, match="cannot be read: not a valid model card"):
        load_card("mymodel")


def test_a_user_card_placed_under_a_taken_name_or_with_counts_that_disagree_is_skipped_and_said(isolated_home):
    """A copy of an embedded card was listed twice and never used; 40 layers over attention
    groups of 32 was listed with 40 and sized with 32; more KV heads than heads was taken."""
    folder = isolated_home / "models"
    folder.mkdir(parents=True)
    source = json.loads((resources.files("predictor") / "data" / "models" / "Llama-3.1-8B.json").read_text())
    (folder / "Llama-3.1-8B.json").write_text(json.dumps({**source, "max_context": 1024}))
    (folder / "Deep.json").write_text(json.dumps({**source, "name": "Deep", "aliases": ["deep"], "num_layers": 40}))
    heads = {**source["attention"][0], "num_kv_heads": source["attention"][0]["num_heads"] * 2}
    (folder / "Wide.json").write_text(json.dumps({**source, "name": "Wide", "aliases": [], "attention": [heads]}))
    (folder / "Mine.json").write_text(json.dumps({**source, "name": "Mine", "aliases": ["mine"]}))
    cards._catalog.cache_clear()
    assert [c.name for c in list_cards()].count("Llama-3.1-8B") == 1
    assert load_card("llama-3.1-8b").max_context == source["max_context"]
    problems = {Path(path).name: problem for path, problem in card_problems()}
    assert set(problems) == {"Llama-3.1-8B.json", "Deep.json", "Wide.json"}
    assert "is an embedded model's" in problems["Llama-3.1-8B.json"]
    assert "num_layers is 40 but the attention groups hold 32" in problems["Deep.json"]
    assert "KV heads" in problems["Wide.json"]
    assert load_card("mine").name == "Mine"
