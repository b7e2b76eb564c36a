"""GGUF header parsing and the card built from it (a synthetic file with SmolLM2-135M's
metadata: the real one is 98 MB and not in the repository)."""

import pytest

from levers.errors import InputError
from predictor.cards.registry import Dtype
from predictor.harvest.gguf import (
    GgufArray,
    card_from_gguf,
    card_name_for,
    eos_token_id,
    hf_config_from_gguf,
    quantization_name,
    read_gguf_header,
    weight_dtype_of,
)

STRING = 8  # GGUF value type of a string


def test_header_fields_and_config(tmp_path, gguf_writer):
    path = gguf_writer(tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf")
    header = read_gguf_header(path)
    assert header.version == 3 and len(header.tensors) == 1 + 3 * 30
    assert header.metadata["tokenizer.ggml.tokens"] == GgufArray(STRING, 200)   # long array summarised
    config = hf_config_from_gguf(header)
    assert config["hidden_size"] == 576 and config["num_hidden_layers"] == 30
    assert config["num_attention_heads"] == 9 and config["num_key_value_heads"] == 3
    assert config["intermediate_size"] == 1536 and config["max_position_embeddings"] == 8192
    assert config["vocab_size"] == 200 and config["tie_word_embeddings"] is True   # no output.weight
    assert eos_token_id(header) == 2
    assert quantization_name(header) == "Q4_1" and weight_dtype_of(header) is Dtype.FP4


def test_card_from_gguf_is_a_llama_card(gguf_file):
    card = card_from_gguf(gguf_file)
    assert card.name == "SmolLM2-135M-Instruct" and card.hf_id == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert card.native_dtypes.weight is Dtype.FP4 and card.native_dtypes.kv_cache is Dtype.BF16
    assert not card.is_moe and card.num_layers == 30 and card.hidden_size == 576
    # SmolLM2-135M: 134.5M parameters (tied embeddings), within 1%
    assert card.total_params() == pytest.approx(134.5e6, rel=0.01)


def test_bad_files_are_input_errors(tmp_path, gguf_writer):
    bad = tmp_path / "x.gguf"
    bad.write_bytes(b"NOPE" + b"\0" * 20)
    with pytest.raises(InputError, match="magic"):
        read_gguf_header(bad)
    truncated = tmp_path / "t.gguf"
    truncated.write_bytes(gguf_writer(tmp_path / "full.gguf").read_bytes()[:100])
    with pytest.raises(InputError, match="ends inside"):
        read_gguf_header(truncated)
    with pytest.raises(InputError, match="cannot be read"):
        read_gguf_header(tmp_path / "missing.gguf")


def test_card_name_drops_the_quantisation():
    assert card_name_for("/m/SmolLM2-135M-Instruct.Q4_1.gguf") == "SmolLM2-135M-Instruct"
    assert card_name_for("llama-3-8b-f16.gguf") == "llama-3-8b"
    assert card_name_for("model.gguf") == "model"


def test_a_gguf_with_no_vocabulary_is_named_not_an_internal_error(tmp_path, gguf_writer):
    from predictor.harvest.gguf import card_from_gguf
    path = gguf_writer(tmp_path / "novocab.gguf", vocab=0)
    with pytest.raises(InputError, match="names no vocabulary"):
        card_from_gguf(path)
