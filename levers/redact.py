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
_KEY_MARKS = ("sk-", "pk-", "rk-", "_live_", "_test_", "hf_", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_",
              "glpat-", "AKIA", "AIza", "xox", "earer ", "EARER ")
_NAME_MARKS = ("key", "secret", "passw", "token")
# The value after a secret's name: ``api_key=...``, ``OPENAI_API_KEY=...``, ``HF_TOKEN=...``,
# ``"password": "..."`` (also JSON-escaped). A password's value is masked whatever it is;
# another secret's when it looks like one (8 characters or more, a digit among them), so
# that prose such as ``secret: /run/secrets/hf`` or code such as ``api_key = os.environ
# .get(...)`` stays readable; a bare ``token`` is a secret's name only as a quoted key
# (``token: gpt-oss-120b`` is prose); a name ending a path (``/etc/passwd: ...``) is a
# file's. Found from where a name meets its separator (a
# literal search), then checked: a ledger of hundreds of trials passes through here.
_NAME_END = re.compile(r"(?i)(?:key|secret|token|passwd|password)(?=\\?[\"']?\s*[:=])")
_SECRET_NAME_WORD = re.compile(
    r"(?i)(?:[a-z0-9]+[_-])*(?:api[_-]?key|access[_-]?key|secret(?:[_-]?access)?(?:[_-]?key)?|auth[_-]?token"
    r"|[a-z0-9]+[_-]token|password|passwd)")
_NAME_SEPARATOR = re.compile(r"\\?[\"']?\s*[:=]\s*\\?[\"']?")
_SECRET_VALUE = re.compile(r"[^\s\"',;&\\]+")
PASSWORD_MIN_CHARS, SECRET_MIN_CHARS = 6, 8
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
        text = _mask_named(text)
    return _URL_USERINFO.sub(MASK, text) if "://" in text else text


def _mask_named(text: str) -> str:
    """``text`` with the value after each secret's name masked (`_NAME_END`)."""
    pieces, last = [], 0
    for end in _NAME_END.finditer(text):
        start = end.start()
        while start > 0 and (text[start - 1].isalnum() or text[start - 1] in "_-"):
            start -= 1
        name = text[start:end.end()].lower()
        quoted = start > 0 and text[start - 1] in "\"'"
        if start > 0 and text[start - 1] in "/\\":
            continue  # a file's name (``'/etc/passwd': Permission denied``), not a secret's
        if not (_SECRET_NAME_WORD.fullmatch(name) or (quoted and name == "token")):
            continue
        value = _SECRET_VALUE.match(text, _NAME_SEPARATOR.match(text, end.end()).end())
        if value is None or value.start() < last:
            continue
        found = value.group()
        password = name.endswith(("password", "passwd"))
        if len(found) < (PASSWORD_MIN_CHARS if password else SECRET_MIN_CHARS) or _is_number(found) \
                or not (password or any(ch.isdigit() for ch in found)):
            continue
        pieces += [text[last:value.start()], MASK]
        last = value.end()
    return "".join(pieces) + text[last:] if pieces else text


def _is_number(text: str) -> bool:
    """A JSON number (a metric such as ``"prompt_tokens": 123456789``) is no secret, and
    masking it would break the JSON it sits in."""
    try:
        float(text)
    except ValueError:
        return False
    return True


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
