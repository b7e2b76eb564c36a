"""A streaming OpenAI-compatible client that timestamps every token (METHOD §4).

`stream` sends one `/v1/completions` request with `stream: true` and records, on one
monotonic clock (`time.perf_counter`), when it was sent and when each chunk carrying
text arrived (`RequestTrace`). `run_wave` sends several at once from threads released
together by a barrier (a single wave). Timed requests are never retried: a retry would
hide a stall inside the measurement. Only readiness polling (`process`) and metadata
look-ups (`tokenize_count`, `get_json`) are retried, with tenacity.

Any object with `stream`, `tokenize_count` and `get_json` can stand in for the server
(tests replay recorded streams through `ReplayClient`).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import httpx
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_fixed

from levers.errors import InputError
from predictor.units import S_PER_MS

REQUEST_TIMEOUT_S = 600.0
CONNECT_TIMEOUT_S = 10.0
METADATA_ATTEMPTS = 3
METADATA_WAIT_S = 0.5
MAX_CONNECTIONS = 2048


@dataclass(frozen=True, slots=True)
class RequestTrace:
    """One streamed request: send time and the arrival time of each text chunk (s)."""

    sent_s: float
    token_times_s: tuple[float, ...]
    prompt_tokens: int | None = None      # as reported by the engine (usage), if it does
    completion_tokens: int | None = None
    finish_reason: str | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        """Streamed text and ended with a finish reason (a stream cut short has none)."""
        return self.error is None and bool(self.token_times_s) and self.finish_reason is not None

    @property
    def first_token_s(self) -> float:
        return self.token_times_s[0]

    @property
    def last_token_s(self) -> float:
        return self.token_times_s[-1]

    @property
    def ttft_ms(self) -> float:
        return (self.token_times_s[0] - self.sent_s) / S_PER_MS

    def to_json(self) -> dict:
        return {"sent_s": self.sent_s, "token_times_s": list(self.token_times_s),
                "prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "finish_reason": self.finish_reason, "error": self.error}

    @classmethod
    def from_json(cls, data: dict) -> RequestTrace:
        return cls(sent_s=float(data["sent_s"]), token_times_s=tuple(float(t) for t in data["token_times_s"]),
                   prompt_tokens=data.get("prompt_tokens"), completion_tokens=data.get("completion_tokens"),
                   finish_reason=data.get("finish_reason"), error=data.get("error"))


class StreamClient(Protocol):
    def stream(self, prompt: str, max_tokens: int) -> RequestTrace: ...

    def tokenize_count(self, text: str) -> int | None: ...

    def get_json(self, path: str) -> dict | None: ...


def _chunk_text(choice: dict) -> str:
    if "text" in choice:
        return choice.get("text") or ""
    return (choice.get("delta") or {}).get("content") or ""


class OpenAIStreamClient:
    """`/v1/completions` streaming over httpx (module docstring)."""

    def __init__(self, base_url: str, model: str, *, extras: dict | None = None,
                 tokenize_path: str | None = None, tokenize_body: Callable[[str, str], dict] | None = None,
                 include_usage: bool = True, timeout_s: float = REQUEST_TIMEOUT_S,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.base_url = base_url.rstrip("/")
        self.model, self.extras = model, dict(extras or {})
        self.tokenize_path, self.tokenize_body = tokenize_path, tokenize_body
        self.include_usage, self.clock = include_usage, clock
        self._http = httpx.Client(base_url=self.base_url,
                                  timeout=httpx.Timeout(timeout_s, connect=CONNECT_TIMEOUT_S),
                                  limits=httpx.Limits(max_connections=MAX_CONNECTIONS,
                                                      max_keepalive_connections=MAX_CONNECTIONS))

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> OpenAIStreamClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def body(self, prompt: str, max_tokens: int) -> dict:
        body = {"model": self.model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0,
                "stream": True, **self.extras}
        if self.include_usage:
            body["stream_options"] = {"include_usage": True}
        return body

    def stream(self, prompt: str, max_tokens: int) -> RequestTrace:
        """One timed request; never retried (module docstring)."""
        times: list[float] = []
        usage: dict = {}
        finish: str | None = None
        sent = self.clock()
        try:
            with self._http.stream("POST", "/v1/completions", json=self.body(prompt, max_tokens)) as response:
                if response.status_code != 200:
                    detail = response.read().decode("utf-8", errors="replace")[:300]
                    return RequestTrace(sent, (), error=f"HTTP {response.status_code}: {detail}")
                for line in response.iter_lines():
                    now = self.clock()
                    if not line.startswith("data:"):
                        continue
                    payload = line[len("data:"):].strip()
                    if payload == "[DONE]":
                        break
                    chunk = json.loads(payload)
                    usage = chunk.get("usage") or usage
                    for choice in chunk.get("choices") or ():
                        if _chunk_text(choice):
                            times.append(now)
                        finish = choice.get("finish_reason") or finish
        except (httpx.HTTPError, json.JSONDecodeError) as error:
            return RequestTrace(sent, tuple(times), error=f"{type(error).__name__}: {error}")
        return RequestTrace(sent, tuple(times), usage.get("prompt_tokens"), usage.get("completion_tokens"), finish)

    def _retrying(self) -> Retrying:
        return Retrying(stop=stop_after_attempt(METADATA_ATTEMPTS), wait=wait_fixed(METADATA_WAIT_S),
                        retry=retry_if_exception_type(httpx.TransportError), reraise=True)

    def tokenize_count(self, text: str) -> int | None:
        """The engine's own token count of `text`, or None when it has no tokenize API."""
        if self.tokenize_path is None or self.tokenize_body is None:
            return None
        try:
            response = self._retrying()(self._http.post, self.tokenize_path,
                                        json=self.tokenize_body(text, self.model))
        except httpx.HTTPError:
            return None
        if response.status_code != 200:
            return None
        data = response.json()
        if isinstance(data.get("count"), int):
            return data["count"]
        tokens = data.get("tokens")
        return len(tokens) if isinstance(tokens, list) else None

    def is_up(self, path: str) -> bool:
        """One readiness probe (the caller polls): HTTP 200 on `path`."""
        try:
            return self._http.get(path).status_code == 200
        except httpx.HTTPError:
            return False

    def get_json(self, path: str) -> dict | None:
        try:
            response = self._retrying()(self._http.get, path)
        except httpx.HTTPError:
            return None
        if response.status_code != 200:
            return None
        try:
            data = response.json()
        except ValueError:
            return None
        return data if isinstance(data, dict) else None


def run_wave(client: StreamClient, prompts: Sequence[str], max_tokens: int) -> list[RequestTrace]:
    """Send every prompt at once (one thread each, released by a barrier); traces in
    prompt order."""
    if len(prompts) == 1:
        return [client.stream(prompts[0], max_tokens)]
    barrier = threading.Barrier(len(prompts))
    results: list[RequestTrace | None] = [None] * len(prompts)

    def worker(index: int) -> None:
        barrier.wait()
        results[index] = client.stream(prompts[index], max_tokens)

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(len(prompts))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return [r if r is not None else RequestTrace(0.0, (), error="worker failed") for r in results]


def failed(traces: Sequence[RequestTrace], what: str) -> None:
    """Raise when a timed request failed: a partial wave is not a measurement."""
    bad = [t for t in traces if not t.ok]
    if bad:
        raise InputError("engine", f"{len(bad)} of {len(traces)} requests failed during {what}: "
                         f"{bad[0].error or _why(bad[0])}", "a healthy OpenAI-compatible /v1/completions")


def _why(trace: RequestTrace) -> str:
    if not trace.token_times_s:
        return "no tokens streamed"
    return f"the stream ended after {len(trace.token_times_s)} tokens without a finish reason (interrupted)"


class ReplayClient:
    """Serves recorded traces (tests and offline re-analysis): the first unused one
    recorded for a prompt of the same word count and output length, else the next."""

    def __init__(self, traces: Sequence[RequestTrace], token_counts: Callable[[str], int | None] | None = None,
                 keys: Sequence[tuple[int, int] | None] | None = None) -> None:
        self._traces = list(traces)
        self._keys = list(keys) if keys is not None else [None] * len(self._traces)
        self._lock = threading.Lock()
        self._counts = token_counts
        self.prompts: list[str] = []

    @classmethod
    def from_records(cls, records: Sequence[dict], token_counts: Callable[[str], int | None] | None = None
                     ) -> "ReplayClient":
        keys = [(r["prompt_words"], r["max_tokens"]) if "prompt_words" in r else None for r in records]
        return cls([RequestTrace.from_json(r) for r in records], token_counts, keys)

    def stream(self, prompt: str, max_tokens: int) -> RequestTrace:
        with self._lock:
            self.prompts.append(prompt)
            key = (len(prompt.split()), max_tokens)
            index = next((i for i, k in enumerate(self._keys) if k == key), 0)
            self._keys.pop(index)
            return self._traces.pop(index)

    def tokenize_count(self, text: str) -> int | None:
        return self._counts(text) if self._counts else None

    def get_json(self, path: str) -> dict | None:
        return None
