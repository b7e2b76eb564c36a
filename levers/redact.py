"""Secrets never leave the process (PRODUCT.md §6), and untrusted text never drives the
terminal.

API keys come from the environment; anything the product writes or prints that could
carry one goes through :func:`redact`: ledgers and anchors (every file written by
``predictor.files``), harvest records and logs, ``--json`` output, the console and
error messages. Four rules: the value of any environment variable whose name says
key/token/secret/password (also in its JSON-escaped form), anything shaped like a
provider's key or token (OpenAI and Anthropic ``sk-...``, Stripe ``sk_live_...``,
Hugging Face ``hf_...``, GitHub ``ghp_...`` / ``github_pat_...``, GitLab ``glpat-...``,
AWS ``AKIA...``, Google ``AIza...``, Slack ``xoxb-...``, any ``Bearer ...``), the value
written after a secret's name (``api_key=...``, ``password: ...``), and the user-info
part of a URL.

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
_KEY_SHAPED = re.compile(
    r"\b(?:(?:sk|pk|rk)-[A-Za-z0-9_\-]{12,}"            # OpenAI, Anthropic
    r"|(?:sk|pk|rk)_(?:live|test)_[A-Za-z0-9]{12,}"      # Stripe
    r"|hf_[A-Za-z0-9]{20,}"                              # Hugging Face
    r"|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}"   # GitHub
    r"|glpat-[A-Za-z0-9_\-]{20,}"                        # GitLab
    r"|AKIA[0-9A-Z]{16}"                                 # AWS access key id
    r"|AIza[0-9A-Za-z_\-]{35}"                           # Google API key
    r"|xox[abprs]-[A-Za-z0-9\-]{10,})"                   # Slack
    r"|(?<=[Bb]earer )[A-Za-z0-9._~+/=\-]{12,}|(?<=BEARER )[A-Za-z0-9._~+/=\-]{12,}")
# Literals one of `_KEY_SHAPED`'s matches holds (a cheap test before the regex runs).
_KEY_MARKS = ("sk-", "pk-", "rk-", "_live_", "_test_", "hf_", "gh", "glpat-", "AKIA", "AIza", "xox", "earer ", "EARER ")
_NAME_MARKS = ("key", "secret", "passw", "token")
# The value after a secret's name: ``api_key=...``, ``"password": "..."``, ``token: ...``.
_NAMED_SECRET = re.compile(
    r"(?i)(\b(?:api[_-]?key|access[_-]?key|secret(?:[_-]?key)?|password|passwd|auth[_-]?token|token)"
    r"[\"']?\s*[:=]\s*[\"']?)([^\s\"',;&]{6,})")
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
    if any(mark in text for mark in _KEY_MARKS):
        text = _KEY_SHAPED.sub(MASK, text)
    if ("=" in text or ":" in text) and any(name in text.lower() for name in _NAME_MARKS):
        text = _NAMED_SECRET.sub(lambda m: m.group(1) + MASK, text)
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
