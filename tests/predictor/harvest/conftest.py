"""Shared helpers of the harvest tests: a synthetic GGUF file (SmolLM2-135M's metadata;
the real 98 MB file is not in the repository) and the recorded llama.cpp streams."""

import json
import struct
from pathlib import Path

import pytest

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "harvest" / "llamacpp_smollm2_cpu.json"

U32, I32, F32, STRING, ARRAY, U64 = 4, 5, 6, 8, 9, 10


def _s(text: str) -> bytes:
    data = text.encode()
    return struct.pack("<Q", len(data)) + data


def _kv(key: str, kind: int, value) -> bytes:
    head = _s(key) + struct.pack("<I", kind)
    if kind == U32:
        return head + struct.pack("<I", value)
    if kind == F32:
        return head + struct.pack("<f", value)
    if kind == STRING:
        return head + _s(value)
    if kind == ARRAY:
        element, items = value
        body = struct.pack("<IQ", element, len(items))
        body += b"".join(_s(i) if element == STRING else struct.pack("<i", i) for i in items)
        return head + body
    raise AssertionError(kind)


def _tensor(name: str, dims: tuple[int, ...], ggml_type: int) -> bytes:
    return _s(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims) + \
        struct.pack("<IQ", ggml_type, 0)


def write_smollm2_like(path, vocab=200, layers=30, head_kv=3):
    kvs = [
        _kv("general.architecture", STRING, "llama"),
        _kv("general.organization", STRING, "HuggingFaceTB"),
        _kv("llama.block_count", U32, layers),
        _kv("llama.context_length", U32, 8192),
        _kv("llama.embedding_length", U32, 576),
        _kv("llama.feed_forward_length", U32, 1536),
        _kv("llama.attention.head_count", U32, 9),
        _kv("llama.attention.head_count_kv", U32, head_kv),
        _kv("llama.rope.freq_base", F32, 100000.0),
        _kv("tokenizer.ggml.tokens", ARRAY, (STRING, [f"t{i}" for i in range(vocab)])),
        _kv("tokenizer.ggml.token_type", ARRAY, (I32, [1] * vocab)),
        _kv("tokenizer.ggml.eos_token_id", U32, 2),
    ]
    tensors = [_tensor("token_embd.weight", (576, vocab), 8)]          # Q8_0
    for layer in range(layers):
        tensors.append(_tensor(f"blk.{layer}.attn_q.weight", (576, 576), 3))   # Q4_1
        tensors.append(_tensor(f"blk.{layer}.ffn_up.weight", (576, 1536), 3))
        tensors.append(_tensor(f"blk.{layer}.attn_norm.weight", (576,), 0))
    header = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs))
    path.write_bytes(header + b"".join(kvs) + b"".join(tensors))
    return path




@pytest.fixture
def gguf_writer():
    return write_smollm2_like


@pytest.fixture
def gguf_file(tmp_path):
    return write_smollm2_like(tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf", vocab=49152)


@pytest.fixture(scope="session")
def recorded():
    return json.loads(FIXTURE.read_text())
