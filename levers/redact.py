"""Secrets never leave the process (PRODUCT.md §6), and untrusted text never drives the
terminal.

API keys come from the environment; anything the product writes or prints that could
carry one goes through :func:`redact`: ledgers and anchors (every file written by
``predictor.files``), harvest records and logs, ``--json`` output, the console and
error messages. Three rules: the value of any environment variable whose name says
key/token/secret/password (also in its JSON-escaped form), anything shaped like a
provider key (``sk-...``, ``Bearer ...``), and the user-info part of a URL.

:func:`clean_text` is what reaches a terminal: redacted, with control characters and
bidirectional overrides removed (an LLM reply or a shared ledger can hold escape
sequences). It sits in the bottom layer with the input layer because the predictor
writes files (anchors, harvest records) as well as the agent.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

from levers.inputs import strip_controls

MASK = "***"
MIN_SECRET_CHARS = 8  # shorter environment values are too common to mask safely
_SECRET_NAME = re.compile(r"(API_?KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL)", re.IGNORECASE)
_KEY_SHAPED = re.compile(r"\b(?:sk|pk|rk)-[A-Za-z0-9_\-]{12,}|(?<=Bearer )[A-Za-z0-9._~+/=\-]{12,}")
_URL_USERINFO = re.compile(r"(?<=://)[^/@\s\"'<>]+(?=@)")
_SECRET_FLAG = re.compile(r"^--?[\w-]*(key|token|secret|password)[\w-]*$", re.IGNORECASE)


def _secret_values() -> list[str]:
    values = {value for name, value in os.environ.items()
              if _SECRET_NAME.search(name) and len(value) >= MIN_SECRET_CHARS}
    values |= {json.dumps(value, ensure_ascii=False)[1:-1] for value in values}
    return sorted(values, key=len, reverse=True)


def redact(text: str | None) -> str | None:
    """``text`` with every secret masked."""
    return None if text is None else _redact_with(text, _secret_values())


def redact_data(value: Any) -> Any:
    """A JSON-like value with every string (keys too) redacted: one pass, one env scan."""
    secrets = _secret_values()

    def walk(item: Any) -> Any:
        if isinstance(item, str):
            return _redact_with(item, secrets)
        if isinstance(item, dict):
            return {walk(key): walk(child) for key, child in item.items()}
        if isinstance(item, (list, tuple)):
            return [walk(child) for child in item]
        return item

    return walk(value)


def _redact_with(text: str, secrets: list[str]) -> str:
    for value in secrets:
        if value in text:
            text = text.replace(value, MASK)
    if "-" in text or "Bearer" in text:
        text = _KEY_SHAPED.sub(MASK, text)
    return _URL_USERINFO.sub(MASK, text) if "://" in text else text


def clean_text(text: str) -> str:
    """What may reach a terminal: redacted, control characters removed."""
    return strip_controls(redact(text) or "")


def redact_argv(argv: list[str]) -> list[str]:
    """A command line with secret-bearing flag values masked (``--api-key X``, ``--token=X``)."""
    cleaned: list[str] = []
    mask_next = False
    for arg in argv:
        if mask_next:
            cleaned.append(MASK)
            mask_next = False
            continue
        flag, equals, _ = arg.partition("=")
        if _SECRET_FLAG.match(flag):
            if equals:
                cleaned.append(f"{flag}={MASK}")
            else:
                cleaned.append(arg)
                mask_next = True
            continue
        cleaned.append(redact(arg))
    return cleaned
