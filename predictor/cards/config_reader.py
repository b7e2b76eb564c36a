"""Read fields of a Hugging Face config.json, whatever its nesting, with clean errors.

Multimodal checkpoints (Kimi-K2.5/K3, Qwen3.5) nest the language model under
`text_config`; the reader looks there first and falls back to the top level (where
`tie_word_embeddings` or `quantization_config` may live). A missing required field is a
user mistake: an `InputError` naming the file and the field(s).
"""

from __future__ import annotations

from typing import Any

from levers.errors import InputError

CORE_FIELDS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size")


class ConfigReader:
    """Lookup over (text_config, top level); `origin` names the file in errors."""

    def __init__(self, config: dict, origin: str) -> None:
        if not isinstance(config, dict):
            raise InputError(origin, "is not a JSON object", "a Hugging Face config.json")
        text = config.get("text_config")
        self._layers = (text, config) if isinstance(text, dict) else (config,)
        self.origin = origin

    def has(self, key: str) -> bool:
        return any(layer.get(key) is not None for layer in self._layers)

    def opt(self, *keys: str, default: Any = None) -> Any:
        """The first of `keys` present (not null), else `default`."""
        for key in keys:
            for layer in self._layers:
                if layer.get(key) is not None:
                    return layer[key]
        return default

    def need(self, *keys: str) -> Any:
        """The first of `keys` present; a missing field raises `InputError`."""
        value = self.opt(*keys)
        if value is None:
            self.fail([" or ".join(keys)])
        return value

    def check_core(self) -> None:
        """All core fields at once, so the user sees every missing one in one message."""
        missing = [key for key in CORE_FIELDS if not self.has(key)]
        if missing:
            self.fail(missing)

    def fail(self, missing: list[str]) -> None:
        raise InputError(self.origin, f"missing config.json field(s): {', '.join(missing)}",
                         "a Hugging Face config.json of a decoder-only model")
