"""One chat model through LiteLLM, as DSPy sees it (METHOD §6 "Phase 2"; NOTES.md).

Facts this module follows (verified against DSPy 3.4 / LiteLLM 1.110):
- ``dspy.LM(model, engine="litellm")`` routes through LiteLLM (DSPy's default engine
  would bypass it); response caching is off (``cache=False`` and ``configure_cache``);
- ``LITELLM_LOCAL_MODEL_COST_MAP=True`` is set before LiteLLM is imported, so an
  offline machine does not try to download the cost map;
- DSPy retries transient LM errors itself (``num_retries``, exponential backoff) and
  honours ``timeout``; what still fails raises a ``dspy.LMError``;
- ``AdapterParseError`` is not caught by ``dspy.ReAct``: every planner, investigator and
  sub-question call therefore goes through :meth:`LmRuntime.run`, which catches every
  failure, classifies it and returns a call record for the ledger.

A small local model (a llama.cpp server) follows DSPy's text formats only when its
decoding is constrained: ``json_schema=True`` selects :class:`SchemaJSONAdapter`, which
sends ``response_format={"type": "json_object", "schema": ...}`` built from the
signature's output fields. Secrets never reach a record (:mod:`levers.redact`).
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # before LiteLLM is imported

import time  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from datetime import datetime, timezone  # noqa: E402
from enum import StrEnum  # noqa: E402
from typing import Any, Callable, TypeVar  # noqa: E402

import dspy  # noqa: E402
import pydantic  # noqa: E402
from dspy.adapters.types.tool import ToolCalls  # noqa: E402

from levers.redact import redact  # noqa: E402
from levers.errors import InputError  # noqa: E402
from predictor.units import MS_PER_S  # noqa: E402

LM_ENV = "INFERASIM_LM"
LM_BASE_URL_ENV = "INFERASIM_LM_BASE_URL"
LM_API_KEY_ENV = "INFERASIM_LM_API_KEY"
DEFAULT_TIMEOUT_S = 120.0
DEFAULT_NUM_RETRIES = 3
DEFAULT_MAX_TOKENS = 2048
SCHEMA_MAX_TOKENS = 768      # constrained decoding bounds every field; this only stops a runaway
PLACEHOLDER_API_KEY = "no-key"  # OpenAI-compatible local servers need some key; not a secret
MAX_MESSAGE_CHARS = 600
RESPONSE_SCHEMA_KEY = "response_schema"   # an output field's own schema (output_schema)

T = TypeVar("T")


class Outcome(StrEnum):
    OK = "ok"
    STOPPED = "stopped"      # a tool ended the agent early (budget spent): not a failure
    PARSE_ERROR = "parse_error"
    TIMEOUT = "timeout"
    LM_ERROR = "lm_error"
    ERROR = "error"


class StopAgent(BaseException):
    """Raised by a tool to end an agent run at once (ReAct turns ``Exception`` from a
    tool into an observation and keeps going; this passes through it)."""


@dataclass(frozen=True, slots=True)
class LmSettings:
    """Which model, where, and how patiently."""

    model: str
    base_url: str | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    num_retries: int = DEFAULT_NUM_RETRIES
    json_schema: bool = False
    max_tokens: int = DEFAULT_MAX_TOKENS
    # False for an LM taken from a file (a resumed ledger): no environment key is sent to
    # an endpoint the user did not name on this command line (PRODUCT.md §6).
    use_env_key: bool = True

    def to_json(self) -> dict[str, Any]:
        return {"model": self.model, "base_url": redact(self.base_url), "timeout_s": self.timeout_s,
                "num_retries": self.num_retries, "json_schema": self.json_schema}


def resolve_lm_settings(model: str | None, base_url: str | None = None, *,
                        json_schema: bool = False, timeout_s: float = DEFAULT_TIMEOUT_S,
                        num_retries: int = DEFAULT_NUM_RETRIES) -> LmSettings | None:
    """``--lm`` or ``$INFERASIM_LM`` (a LiteLLM model string); None when neither is set."""
    chosen = (model or os.environ.get(LM_ENV) or "").strip()
    if not chosen:
        return None
    provider, slash, name = chosen.partition("/")
    if not slash or not provider or not name:
        raise InputError("--lm", f"'{chosen}' is not a LiteLLM model string",
                         "provider/model, e.g. openai/gpt-4o-mini, anthropic/claude-..., "
                         "hosted_vllm/NAME or openai/NAME with --lm-base-url")
    if timeout_s <= 0:
        raise InputError("--lm-timeout", f"{timeout_s} is not positive", "seconds > 0")
    url = (base_url or os.environ.get(LM_BASE_URL_ENV) or "").strip() or None
    return LmSettings(chosen, url, timeout_s, num_retries, json_schema)


class SchemaJSONAdapter(dspy.JSONAdapter):
    """JSON mode with the output schema sent (llama.cpp's constrained decoding)."""

    def _prepare_response_format(self, lm, lm_kwargs, signature):
        lm_kwargs["response_format"] = {"type": "json_object", "schema": output_schema(signature)}


def output_schema(signature) -> dict[str, Any]:
    """JSON Schema of a signature's output fields (all required). A field may carry its
    own schema (``response_schema`` in its extras: a schema sent to the server but kept
    out of the prompt, which then stays short for a small model); the others are
    derived from their type."""
    properties: dict[str, Any] = {}
    definitions: dict[str, Any] = {}
    for name, field in signature.output_fields.items():
        if field.annotation is ToolCalls:
            continue
        explicit = (field.json_schema_extra or {}).get(RESPONSE_SCHEMA_KEY)
        schema = dict(explicit) if explicit else pydantic.TypeAdapter(field.annotation).json_schema()
        definitions.update(schema.pop("$defs", {}))
        properties[name] = schema
    schema = {"type": "object", "properties": properties, "required": list(properties)}
    if definitions:
        schema["$defs"] = definitions
    return schema


def build_lm(settings: LmSettings) -> dspy.LM:
    """A DSPy LM over LiteLLM with caching off, timeouts and retries."""
    dspy.configure_cache(enable_disk_cache=False, enable_memory_cache=False)
    kwargs: dict[str, Any] = {"engine": "litellm", "cache": False, "timeout": settings.timeout_s,
                              "num_retries": settings.num_retries,
                              "max_tokens": min(settings.max_tokens, SCHEMA_MAX_TOKENS) if settings.json_schema
                              else settings.max_tokens}
    if settings.base_url:
        kwargs["api_base"] = settings.base_url
    api_key = os.environ.get(LM_API_KEY_ENV) if settings.use_env_key else None
    if not settings.use_env_key:
        kwargs["api_key"] = PLACEHOLDER_API_KEY  # explicit, so LiteLLM reads no provider key either
    elif api_key:
        kwargs["api_key"] = api_key
    elif settings.base_url and settings.model.startswith("openai/") and not os.environ.get("OPENAI_API_KEY"):
        kwargs["api_key"] = PLACEHOLDER_API_KEY
    return dspy.LM(settings.model, **kwargs)


def classify(error: BaseException) -> Outcome:
    if isinstance(error, StopAgent):
        return Outcome.STOPPED
    if isinstance(error, dspy.AdapterParseError):
        return Outcome.PARSE_ERROR
    if isinstance(error, (dspy.LMTimeoutError, TimeoutError)):
        return Outcome.TIMEOUT
    if isinstance(error, dspy.LMError):
        return Outcome.LM_ERROR
    return Outcome.ERROR


class LmRuntime:
    """An LM with its adapter; runs DSPy calls and records each one's outcome."""

    def __init__(self, lm: Any, adapter: Any = None, settings: LmSettings | None = None) -> None:
        self.lm = lm
        self.adapter = adapter if adapter is not None else (
            SchemaJSONAdapter() if settings and settings.json_schema else dspy.ChatAdapter())
        self.settings = settings

    @classmethod
    def from_settings(cls, settings: LmSettings) -> "LmRuntime":
        return cls(build_lm(settings), settings=settings)

    @property
    def model(self) -> str:
        return self.settings.model if self.settings else str(getattr(self.lm, "model", "unknown"))

    def run(self, role: str, call: Callable[[], T]) -> tuple[T | None, dict[str, Any]]:
        """Run ``call`` with this LM; never raises (except KeyboardInterrupt)."""
        started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
        history_before = len(getattr(self.lm, "history", []) or [])
        started = time.perf_counter()
        result: T | None = None
        error: BaseException | None = None
        try:
            with dspy.context(lm=self.lm, adapter=self.adapter):
                result = call()
        except StopAgent as stop:
            error = stop
        except Exception as caught:  # noqa: BLE001 - an LM failure must never lose the search
            error = caught
        requests = len(getattr(self.lm, "history", []) or []) - history_before
        record = {
            "role": role, "outcome": str(Outcome.OK if error is None else classify(error)),
            "message": None if error is None else _message(error),
            "started_at": started_at, "wall_ms": round((time.perf_counter() - started) * MS_PER_S, 1),
            "num_requests": max(0, requests),
        }
        return result, record


def _message(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}"
    text = redact(" ".join(text.split()))
    return text if len(text) <= MAX_MESSAGE_CHARS else text[:MAX_MESSAGE_CHARS] + "..."
