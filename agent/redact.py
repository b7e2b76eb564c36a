"""Secrets never leave the process (PRODUCT.md §6).

API keys come from the environment; anything the search writes that could carry one
(the command line, an LM endpoint URL, an LM error message, LLM text) goes through
:func:`redact` first. Three rules: the value of any environment variable whose name
says key/token/secret/password, anything shaped like a provider key (``sk-...``), and
the user-info part of a URL.
"""

from __future__ import annotations

import os
import re

MASK = "***"
MIN_SECRET_CHARS = 8  # shorter environment values are too common to mask safely
_SECRET_NAME = re.compile(r"(API_?KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL)", re.IGNORECASE)
_KEY_SHAPED = re.compile(r"\b(sk|pk|rk)-[A-Za-z0-9_\-]{12,}")
_URL_USERINFO = re.compile(r"(?<=://)[^/@\s]+(?=@)")
_SECRET_FLAG = re.compile(r"^--?[\w-]*(key|token|secret|password)[\w-]*$", re.IGNORECASE)


def _secret_values() -> list[str]:
    values = [value for name, value in os.environ.items()
              if _SECRET_NAME.search(name) and len(value) >= MIN_SECRET_CHARS]
    return sorted(set(values), key=len, reverse=True)


def redact(text: str | None) -> str | None:
    """``text`` with every secret masked."""
    if text is None:
        return None
    for value in _secret_values():
        text = text.replace(value, MASK)
    text = _KEY_SHAPED.sub(MASK, text)
    return _URL_USERINFO.sub(MASK, text)


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
