"""A streaming OpenAI-compatible client that timestamps every token (METHOD §4).

`stream` sends one `/v1/completions` request with `stream: true` and records, on one
monotonic clock (`time.perf_counter`), when it was sent and when each chunk carrying
text arrived (`RequestTrace`). `run_wave` sends several at once from threads released
together by a barrier (a single wave). Timed requests are never retried: a retry would
hide a stall inside the measurement. Only readiness polling (`process`) and metadata
look-ups (`tokenize_count`, `get_json`) are retried, with tenacity.

Any object with `stream`, `tokenize_count` and `get_json` can stand in for the server
(tests replay recorded streams through `ReplayClient`).

Every wait is bounded (PRODUCT.md §6). A request may take at most `request_timeout_s`
from sending to its last byte, and nothing runs past the harvest's `Deadline`: httpx's
connect/read timeouts cover the wait for the first byte, and a timer shuts the socket
down when the whole request is over time (an open SSE stream that only sends
keep-alives, or trickles bytes, cannot hold the harvest). Every engine reply is
validated (`predictor.harvest.replies`): a malformed chunk fails its request with the
chunk quoted; a malformed `/tokenize` reply is an error naming the endpoint.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import httpx
from pydantic import ValidationError
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_fixed

from levers.errors import InputError
from levers.inputs import quote
from predictor.harvest.replies import (
    ChunkChoice,
    ChunkUsage,
    CompletionChunk,
    TokenizeReply,
)
from predictor.units import S_PER_MS

REQUEST_TIMEOUT_S = 600.0
CONNECT_TIMEOUT_S = 10.0
METADATA_TIMEOUT_S = 30.0
PROBE_TIMEOUT_S = 5.0
METADATA_ATTEMPTS = 3
METADATA_WAIT_S = 0.5
MAX_CONNECTIONS = 2048
MAX_LINE_CHARS = 1 << 20        # one SSE line; a bigger one is not a completion chunk


@dataclass(frozen=True)
class Deadline:
    """The harvest's overall deadline (`--deadline`), on the monotonic clock."""

    total_s: float
    started_s: float = field(default_factory=time.monotonic)

    @property
    def remaining_s(self) -> float:
        return self.total_s - (time.monotonic() - self.started_s)

    @property
    def passed(self) -> bool:
        return self.remaining_s <= 0

    def bound(self, seconds: float) -> float:
        """``seconds``, cut to what is left (never negative)."""
        return max(0.0, min(seconds, self.remaining_s))

    def message(self) -> str:
        return f"the harvest --deadline of {self.total_s:g} s passed"

    def check(self, during: str) -> None:
        if self.passed:
            raise DeadlineError(f"{self.message()} during {during}; nothing was written")


class DeadlineError(InputError):
    def __init__(self, problem: str) -> None:
        super().__init__("harvest", problem, "a longer --deadline, or a smaller sweep")


NO_DEADLINE = Deadline(float("inf"))


def _first_problem(error: ValidationError) -> str:
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "(top level)"
    return f"{where}: {first['msg']}"


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


def _chunk_text(choice: ChunkChoice) -> str:
    if choice.text is not None:
        return choice.text
    return (choice.delta.content if choice.delta is not None else None) or ""


class OpenAIStreamClient:
    """`/v1/completions` streaming over httpx (module docstring)."""

    def __init__(self, base_url: str, model: str, *, extras: dict | None = None,
                 tokenize_path: str | None = None, tokenize_body: Callable[[str, str], dict] | None = None,
                 include_usage: bool = True, timeout_s: float = REQUEST_TIMEOUT_S,
                 deadline: Deadline = NO_DEADLINE, clock: Callable[[], float] = time.perf_counter) -> None:
        self.base_url = base_url.rstrip("/")
        self.model, self.extras = model, dict(extras or {})
        self.tokenize_path, self.tokenize_body = tokenize_path, tokenize_body
        self.include_usage, self.clock = include_usage, clock
        self.timeout_s, self.deadline = timeout_s, deadline
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

    def _timeout(self, seconds: float) -> httpx.Timeout:
        return httpx.Timeout(seconds, connect=min(CONNECT_TIMEOUT_S, seconds))

    def stream(self, prompt: str, max_tokens: int) -> RequestTrace:
        """One timed request; never retried (module docstring). Bounded by the request
        timeout and the deadline; every chunk validated."""
        times: list[float] = []
        usage: ChunkUsage | None = None
        finish: str | None = None
        sent = self.clock()
        budget_s = self.deadline.bound(self.timeout_s)
        if budget_s <= 0:
            return RequestTrace(sent, (), error=self.deadline.message())
        guard = _Overtime(budget_s)
        try:
            with self._http.stream("POST", "/v1/completions", json=self.body(prompt, max_tokens),
                                   timeout=self._timeout(budget_s)) as response:
                guard.arm(response)
                if response.status_code != 200:
                    detail = response.read()[:300].decode("utf-8", errors="replace")
                    return RequestTrace(sent, (), error=f"HTTP {response.status_code}: {quote(detail)}")
                for line in response.iter_lines():
                    now = self.clock()
                    if len(line) > MAX_LINE_CHARS:
                        return RequestTrace(sent, tuple(times), error=f"an SSE line of {len(line):,} characters")
                    if not line.startswith("data:"):
                        continue
                    payload = line[len("data:"):].strip()
                    if payload == "[DONE]":
                        break
                    chunk = _chunk(payload)
                    usage = chunk.usage or usage
                    for choice in chunk.choices:
                        if _chunk_text(choice):
                            times.append(now)
                        finish = choice.finish_reason or finish
        except _MalformedChunk as error:
            return RequestTrace(sent, tuple(times), error=str(error))
        except (httpx.HTTPError, OSError) as error:
            if guard.fired or isinstance(error, httpx.TimeoutException):
                return RequestTrace(sent, tuple(times), error=self._overtime_message(budget_s))
            return RequestTrace(sent, tuple(times), error=f"{type(error).__name__}: {quote(str(error))}")
        finally:
            guard.disarm()
        if guard.fired:
            return RequestTrace(sent, tuple(times), error=self._overtime_message(budget_s))
        return RequestTrace(sent, tuple(times), usage.prompt_tokens if usage else None,
                            usage.completion_tokens if usage else None, finish)

    def _overtime_message(self, budget_s: float) -> str:
        if self.deadline.passed:
            return self.deadline.message()
        return f"the request took longer than {budget_s:g} s (--request-timeout)"

    def _retrying(self) -> Retrying:
        return Retrying(stop=stop_after_attempt(METADATA_ATTEMPTS), wait=wait_fixed(METADATA_WAIT_S),
                        retry=retry_if_exception_type(httpx.TransportError), reraise=True)

    def _metadata(self, method: str, path: str, **kwargs) -> httpx.Response | None:
        """One bounded, retried metadata call; None when the engine cannot be reached."""
        self.deadline.check(f"a request to {path}")
        timeout = self._timeout(max(0.1, self.deadline.bound(METADATA_TIMEOUT_S)))
        try:
            return self._retrying()(self._http.request, method, path, timeout=timeout, **kwargs)
        except httpx.HTTPError:
            return None

    def tokenize_count(self, text: str) -> int | None:
        """The engine's own token count of `text`, or None when it has no tokenize API."""
        if self.tokenize_path is None or self.tokenize_body is None:
            return None
        response = self._metadata("POST", self.tokenize_path, json=self.tokenize_body(text, self.model))
        if response is None or response.status_code != 200:
            return None
        try:
            count = TokenizeReply.model_validate(response.json()).num_tokens()
        except (ValueError, ValidationError) as error:
            problem = _first_problem(error) if isinstance(error, ValidationError) else "not JSON"
            raise InputError("engine", f"{self.tokenize_path} replied {quote(response.text, 120)} ({problem})",
                             "an engine whose tokenize API returns {\"count\": N} or {\"tokens\": [...]}") from None
        return count

    def is_up(self, path: str, timeout_s: float = PROBE_TIMEOUT_S) -> bool:
        """One readiness probe (the caller polls): HTTP 200 on `path`, within `timeout_s`."""
        seconds = self.deadline.bound(min(timeout_s, PROBE_TIMEOUT_S))
        if seconds <= 0:
            return False
        try:
            return self._http.get(path, timeout=self._timeout(seconds)).status_code == 200
        except (httpx.HTTPError, OSError):
            return False

    def get_json(self, path: str) -> dict | None:
        response = self._metadata("GET", path)
        if response is None or response.status_code != 200:
            return None
        try:
            data = response.json()
        except ValueError:
            return None
        return data if isinstance(data, dict) else None


class _MalformedChunk(Exception):
    pass


def _chunk(payload: str) -> CompletionChunk:
    try:
        return CompletionChunk.model_validate_json(payload)
    except ValidationError as error:
        raise _MalformedChunk(f"malformed SSE chunk {quote(payload, 120)}: {_first_problem(error)}") from None


class _Overtime:
    """Shuts a response's socket down when its request is over time: a blocked read then
    returns at once (closing a socket from another thread would not wake it)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.fired = False
        self._timer: threading.Timer | None = None
        self._socket: socket.socket | None = None

    def arm(self, response: httpx.Response) -> None:
        stream = response.extensions.get("network_stream")
        self._socket = stream.get_extra_info("socket") if stream is not None else None
        self._timer = threading.Timer(self.seconds, self._fire)
        self._timer.daemon = True
        self._timer.start()

    def _fire(self) -> None:
        self.fired = True
        if self._socket is not None:
            try:
                self._socket.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()


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
        thread.join()  # each stream is bounded by its request timeout and the deadline
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
                     ) -> ReplayClient:
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
