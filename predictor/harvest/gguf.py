"""Read a GGUF file's header and build a model card from its own metadata (METHOD §3.9).

GGUF (llama.cpp's weight file) starts with a small typed header, parsed here without any
dependency: magic ``GGUF``, a uint32 version (2 or 3; version 1 used uint32 counts),
uint64 tensor count, uint64 key/value count, then the key/values (a length-prefixed
UTF-8 key, a uint32 value type, the value; arrays carry an element type and a count),
then one info record per tensor (name, dims, ggml type, offset). Only the header is
read, never the tensor data.

The card is built through `predictor.cards.builder.card_from_hf_config` from an
equivalent config.json dict (`hf_config_from_gguf`): `{arch}.block_count`,
`{arch}.embedding_length`, `{arch}.attention.head_count`, `.head_count_kv`,
`{arch}.feed_forward_length`, `{arch}.context_length`, and the vocabulary size from the
length of `tokenizer.ggml.tokens`. The native weight dtype comes from the file's
tensor types (`weight_dtype_of`): the type holding most parameters of the 2-D weights,
mapped to the nearest precision class the product knows (<= 6 bits per weight -> fp4,
8-bit -> fp8, 16/32-bit -> bf16). llama.cpp keeps the KV cache in f16 (bf16 class).
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from levers.errors import InputError
from levers.inputs import quote
from predictor.cards.registry import (
    CardSource,
    Dtype,
    ModelCard,
    NativeDtypes,
    card_from_hf_config,
)

GGUF_MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (1, 2, 3)
KEEP_ARRAY_ELEMENTS = 64          # longer arrays are summarised by type and count
MAX_STRING_BYTES = 1 << 24        # a corrupt length must not allocate gigabytes

# GGUF value types -> struct format (scalars); 8 = string, 9 = array.
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
            10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9

# ggml tensor types -> (name, bits per weight including scales), from ggml's type table.
GGML_TYPES: dict[int, tuple[str, float]] = {
    0: ("F32", 32.0), 1: ("F16", 16.0), 2: ("Q4_0", 4.5), 3: ("Q4_1", 5.0), 6: ("Q5_0", 5.5),
    7: ("Q5_1", 6.0), 8: ("Q8_0", 8.5), 9: ("Q8_1", 9.0), 10: ("Q2_K", 2.625), 11: ("Q3_K", 3.4375),
    12: ("Q4_K", 4.5), 13: ("Q5_K", 5.5), 14: ("Q6_K", 6.5625), 15: ("Q8_K", 9.125),
    16: ("IQ2_XXS", 2.0625), 17: ("IQ2_XS", 2.3125), 18: ("IQ3_XXS", 3.0625), 19: ("IQ1_S", 1.5625),
    20: ("IQ4_NL", 4.5), 21: ("IQ3_S", 3.4375), 22: ("IQ2_S", 2.5), 23: ("IQ4_XS", 4.25),
    24: ("I8", 8.0), 25: ("I16", 16.0), 26: ("I32", 32.0), 27: ("I64", 64.0), 28: ("F64", 64.0),
    29: ("IQ1_M", 1.75), 30: ("BF16", 16.0),
}
FP4_CLASS_MAX_BITS = 7.0          # up to 6.56-bit K-quants are sized as the 4-bit class
FP8_CLASS_MAX_BITS = 10.0


@dataclass(frozen=True, slots=True)
class GgufArray:
    """An array value too long to keep: its element type and length."""

    element_type: int
    count: int


@dataclass(frozen=True, slots=True)
class GgufTensor:
    name: str
    shape: tuple[int, ...]
    ggml_type: int

    @property
    def elements(self) -> int:
        count = 1
        for dim in self.shape:
            count *= dim
        return count


@dataclass(frozen=True, slots=True)
class GgufHeader:
    version: int
    metadata: dict[str, object]
    tensors: tuple[GgufTensor, ...]

    @property
    def architecture(self) -> str:
        return str(self.metadata.get("general.architecture", "llama"))

    def arch_key(self, suffix: str, default: object = None) -> object:
        return self.metadata.get(f"{self.architecture}.{suffix}", default)


class _Reader:
    def __init__(self, stream: BinaryIO, origin: str) -> None:
        self.stream, self.origin = stream, origin

    def fail(self, problem: str) -> InputError:
        return InputError(f"GGUF file {self.origin}", problem, "a llama.cpp GGUF model file (version 1-3)")

    def take(self, size: int) -> bytes:
        data = self.stream.read(size)
        if len(data) != size:
            raise self.fail("ends inside its header")
        return data

    def scalar(self, fmt: str):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self, length_fmt: str) -> str:
        length = self.scalar(length_fmt)
        if length > MAX_STRING_BYTES:
            raise self.fail(f"has a {length}-byte string (corrupt header)")
        return self.take(length).decode("utf-8", errors="replace")


def _value(reader: _Reader, value_type: int, count_fmt: str) -> object:
    if value_type in _SCALARS:
        return reader.scalar(_SCALARS[value_type])
    if value_type == _STRING:
        return reader.string(count_fmt)
    if value_type == _ARRAY:
        element_type = reader.scalar("<I")
        count = reader.scalar(count_fmt)
        if count <= KEEP_ARRAY_ELEMENTS:
            return [_value(reader, element_type, count_fmt) for _ in range(count)]
        _skip(reader, element_type, count, count_fmt)
        return GgufArray(element_type, count)
    raise reader.fail(f"has an unknown value type {value_type}")


def _skip(reader: _Reader, element_type: int, count: int, count_fmt: str) -> None:
    if element_type in _SCALARS:
        reader.stream.seek(struct.calcsize(_SCALARS[element_type]) * count, 1)
        return
    for _ in range(count):
        _value(reader, element_type, count_fmt)


def read_gguf_header(path: str | Path) -> GgufHeader:
    """Parse the metadata and tensor infos of a GGUF file (module docstring)."""
    file = Path(path)
    try:
        stream = file.open("rb")
    except OSError as error:
        raise InputError(f"GGUF file {file}", f"cannot be read ({error.strerror})", "a readable .gguf file") from None
    with stream:
        reader = _Reader(stream, str(file))
        if reader.take(4) != GGUF_MAGIC:
            raise reader.fail("does not start with the GGUF magic")
        version = reader.scalar("<I")
        if version not in SUPPORTED_VERSIONS:
            raise reader.fail(f"has unsupported version {version}")
        count_fmt = "<I" if version == 1 else "<Q"
        tensor_count, kv_count = reader.scalar(count_fmt), reader.scalar(count_fmt)
        metadata: dict[str, object] = {}
        for _ in range(kv_count):
            key = reader.string(count_fmt)
            metadata[key] = _value(reader, reader.scalar("<I"), count_fmt)
        tensors = []
        for _ in range(tensor_count):
            name = reader.string(count_fmt)
            dims = tuple(reader.scalar(count_fmt) for _ in range(reader.scalar("<I")))
            ggml_type = reader.scalar("<I")
            reader.scalar("<Q")  # offset into the data section
            tensors.append(GgufTensor(name, dims, ggml_type))
    return GgufHeader(version, metadata, tuple(tensors))


def _count(value: object) -> int:
    if isinstance(value, GgufArray):
        return value.count
    if isinstance(value, list):
        return len(value)
    return 0


def _need(header: GgufHeader, suffix: str, origin: str) -> int:
    value = header.arch_key(suffix)
    if value is None:
        raise InputError(f"GGUF file {origin}", f"has no '{header.architecture}.{suffix}' key",
                         "a GGUF of a decoder-only transformer")
    if isinstance(value, list):  # per-layer arrays (some exports): the first layer's value
        value = value[0]
    return int(value)


def hf_config_from_gguf(header: GgufHeader, origin: str = "gguf") -> dict:
    """The config.json equivalent of a GGUF header (module docstring)."""
    heads = _need(header, "attention.head_count", origin)
    hidden = _need(header, "embedding_length", origin)
    kv_heads = header.arch_key("attention.head_count_kv") or heads
    vocab = int(header.arch_key("vocab_size") or 0) or _count(header.metadata.get("tokenizer.ggml.tokens"))
    if not vocab:
        vocab = next((t.shape[-1] for t in header.tensors if t.name == "token_embd.weight"), 0)
    if not vocab:
        raise InputError(f"GGUF file {quote(origin)}", "names no vocabulary (no vocab_size, tokenizer tokens or "
                         "token_embd.weight)", "a GGUF of a decoder-only transformer")
    has_output = any(t.name == "output.weight" for t in header.tensors)
    config = {
        "model_type": header.architecture,
        "hidden_size": hidden,
        "num_hidden_layers": _need(header, "block_count", origin),
        "num_attention_heads": heads,
        "num_key_value_heads": int(kv_heads[0] if isinstance(kv_heads, list) else kv_heads),
        "intermediate_size": _need(header, "feed_forward_length", origin),
        "max_position_embeddings": _need(header, "context_length", origin),
        "vocab_size": vocab,
        "tie_word_embeddings": not has_output,
        "rms_norm_eps": header.arch_key("attention.layer_norm_rms_epsilon", 1e-5),
        "rope_theta": header.arch_key("rope.freq_base", 10000.0),
    }
    key_length = header.arch_key("attention.key_length")
    if key_length:
        config["head_dim"] = int(key_length)
    experts = header.arch_key("expert_count")
    if experts:
        config["num_local_experts"] = int(experts)
        config["num_experts_per_tok"] = int(header.arch_key("expert_used_count", 1))
        config["moe_intermediate_size"] = int(header.arch_key("expert_feed_forward_length")
                                              or config["intermediate_size"])
    return config


def _dominant_type(header: GgufHeader) -> int | None:
    """The ggml type holding most parameters of the 2-D weight tensors (None: no such tensor)."""
    by_type: dict[int, int] = {}
    for tensor in header.tensors:
        if len(tensor.shape) >= 2:
            by_type[tensor.ggml_type] = by_type.get(tensor.ggml_type, 0) + tensor.elements
    return max(by_type, key=by_type.get) if by_type else None


def weight_dtype_of(header: GgufHeader) -> Dtype:
    """The precision class holding most parameters of the 2-D weight tensors."""
    dominant = _dominant_type(header)
    if dominant is None:
        return Dtype.BF16
    bits = GGML_TYPES.get(dominant, ("?", 16.0))[1]
    if bits <= FP4_CLASS_MAX_BITS:
        return Dtype.FP4
    if bits <= FP8_CLASS_MAX_BITS:
        return Dtype.FP8
    return Dtype.BF16


def quantization_name(header: GgufHeader) -> str:
    """The dominant ggml type's name, e.g. "Q4_1" (recorded in provenance)."""
    dominant = _dominant_type(header)
    if dominant is None:
        return "unknown"
    return GGML_TYPES.get(dominant, (f"type{dominant}", 0))[0]


_QUANT_SUFFIX = re.compile(r"[.-](?:i?q\d\w*|f16|f32|bf16)$", re.IGNORECASE)


def card_name_for(path: str | Path) -> str:
    """`SmolLM2-135M-Instruct.Q4_1.gguf` -> `SmolLM2-135M-Instruct` (quantisation dropped:
    it is the weight dtype, recorded in the card and the anchor's signature)."""
    stem = Path(path).name
    if stem.lower().endswith(".gguf"):
        stem = stem[: -len(".gguf")]
    return re.sub(r"[^A-Za-z0-9._-]+", "-", _QUANT_SUFFIX.sub("", stem)).strip("-") or "gguf-model"


def eos_token_id(header: GgufHeader) -> int | None:
    value = header.metadata.get("tokenizer.ggml.eos_token_id")
    return int(value) if isinstance(value, int) else None


def card_from_gguf(path: str | Path, name: str | None = None) -> ModelCard:
    """A model card from a GGUF file's own metadata (module docstring)."""
    file = Path(path)
    header = read_gguf_header(file)
    config = hf_config_from_gguf(header, str(file))
    card_name = name or card_name_for(file)
    source = CardSource(repo="gguf", path=str(file.resolve()))
    organization = header.metadata.get("general.organization")
    hf_id = f"{organization}/{card_name}" if organization else card_name
    card = card_from_hf_config(config, card_name, source, hf_id=hf_id, origin=f"GGUF file {file}")
    weight = weight_dtype_of(header)
    native = NativeDtypes(weight=weight, expert=weight, kv_cache=Dtype.BF16, embedding=card.native_dtypes.embedding)
    return card.model_copy(update={"native_dtypes": native})
