"""Agentic coding session traces (METHOD §5; shared/data/README.md traces/).

One session per file (or per line of a JSONL file, or a folder of session files):
``block_size`` (64), ``hash_id_scope`` ("local": ids scoped per session; subagents share
the parent's namespace) and ``requests``, each either a request (``t``, ``in``, ``out``,
``hash_ids``, ``think_time`` = seconds since the previous request of its stream ended)
or a subagent entry (``type: "subagent"``, ``t``, ``duration_ms`` and its own nested
``requests``). Replay rules:

- the parent stream is a chain; a run of consecutive subagent entries is one group that
  starts after the parent request before it (delay: the entry's ``t`` minus that
  request's end) and the parent's next request waits for the whole group (join), after
  the gap the trace shows past the group's end (usually none);
- subagent requests chain with their own ``think_time``;
- idle gaps are capped at 300 s (the AgentX replay rule); ``out`` 0 is served as one token;
- closed loop: ``concurrency`` live sessions, the next session starts when one ends.
Descriptive fields (models, types, stop reasons, totals) are not needed and ignored.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, ValidationError

from levers.errors import InputError
from levers.inputs import MAX_DEPTH, check_depth, check_input_file, parse_json, quote
from predictor.sim.request import RequestSpec
from predictor.sim.trace_base import (
    HASH_ID_MAX,
    HASH_ID_MIN,
    MAX_TRACE_TIME_S,
    MAX_TRACE_TOKENS,
    TRACE_EXPECTED,
    BadLines,
    PrefixChecker,
    TraceWorkload,
    empty_trace,
    read_trace_text,
)
from predictor.sim.workloads import ArrivalMode, Session
from predictor.units import MS_PER_S, US_PER_S

IDLE_GAP_CAP_S = 300.0
SESSION_ID_SHIFT = 36          # local scope: session index << 36 | id
LOCAL_ID_LIMIT = 1 << SESSION_ID_SHIFT
SNIFF_BYTES = 4096


MAX_SESSION_FILES = 100_000
HashId = Annotated[int, Field(ge=HASH_ID_MIN, le=HASH_ID_MAX)]


class _Loose(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, allow_inf_nan=False)


class TraceRequest(_Loose):
    t: float = Field(ge=0, le=MAX_TRACE_TIME_S)
    type: Literal["n", "s"] = "n"
    in_tokens: int = Field(alias="in", ge=1, le=MAX_TRACE_TOKENS)
    out: int = Field(ge=0, le=MAX_TRACE_TOKENS)
    hash_ids: list[HashId] = Field([], max_length=MAX_TRACE_TOKENS)
    think_time: float = Field(0.0, ge=0, le=MAX_TRACE_TIME_S)
    api_time: float = Field(0.0, ge=0, le=MAX_TRACE_TIME_S)


class SubagentEntry(_Loose):
    t: float = Field(ge=0, le=MAX_TRACE_TIME_S)
    type: Literal["subagent"]
    duration_ms: float = Field(0.0, ge=0, le=MAX_TRACE_TIME_S * 1000)
    requests: list[TraceRequest] = Field(min_length=1)


def _entry_kind(entry: object) -> str:
    """A subagent entry says so in ``type``; anything else is read as a request (so a bad
    request is reported with the request's own errors)."""
    kind = entry.get("type") if isinstance(entry, dict) else getattr(entry, "type", None)
    return "subagent" if kind == "subagent" else "request"


Entry = Annotated[Annotated[SubagentEntry, Tag("subagent")] | Annotated[TraceRequest, Tag("request")],
                  Discriminator(_entry_kind)]


class SessionTrace(_Loose):
    id: Annotated[str, Field(max_length=256)] | int = ""
    block_size: int = Field(64, ge=1, le=1 << 20)
    hash_id_scope: Literal["local", "global"] = "local"
    requests: list[Entry] = Field(min_length=1)


def looks_like_sessions(path: Path) -> bool:
    """Sniff the head of a regular file (the caller checked it is one)."""
    with open(path, encoding="utf-8", errors="replace") as handle:
        head = handle.read(SNIFF_BYTES)
    return head.lstrip().startswith("{") and '"requests"' in head


def _session_files(path: Path, max_bytes: int | None) -> list[Path]:
    if not path.is_dir():
        return [path]
    files = sorted(p for p in path.iterdir() if p.suffix == ".json")
    if not files:
        raise InputError(f"--trace {quote(str(path))}", "is a folder with no session files (*.json)", TRACE_EXPECTED)
    if len(files) > MAX_SESSION_FILES:
        raise InputError(f"--trace {quote(str(path))}", f"holds {len(files):,} session files",
                         f"at most {MAX_SESSION_FILES:,} per folder")
    for file in files:
        check_input_file(file, "--trace", max_bytes=max_bytes, expected=TRACE_EXPECTED)
    return files


def _parsed(text: str, where: str) -> object:
    value = parse_json(text, where, document=False)
    check_depth(value, where, MAX_DEPTH)  # sessions nest (subagents): bound them
    return value


def _raw_sessions(path: Path, bad: BadLines, max_bytes: int | None) -> Iterator[tuple[str, object]]:
    for file in _session_files(path, max_bytes):
        text = read_trace_text(file, max_bytes)
        where = file.name if path.is_dir() else ""
        try:
            yield where, _parsed(text, file.name)
            continue
        except InputError:
            pass
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                value = _parsed(line, f"{file.name} line {number}")
            except InputError as error:
                bad.report(f"line {number}", error.problem)
                continue
            yield f"{where} line {number}".strip(), value


class _SessionBuilder:
    def __init__(self, trace: SessionTrace, index: int, checker: PrefixChecker) -> None:
        self.trace = trace
        self.offset = index << SESSION_ID_SHIFT if trace.hash_id_scope == "local" else 0
        self.checker = checker
        self.specs: list[RequestSpec] = []
        self.last_ids: dict[int, np.ndarray] = {}      # stream -> previous prompt's ids

    def _ids(self, request: TraceRequest, stream: int) -> np.ndarray:
        blocks = -(-request.in_tokens // self.trace.block_size)
        whole = request.in_tokens // self.trace.block_size
        # one id per block of the prompt (its last, partial block hashed or not): more would
        # be hits it cannot hold, fewer silently drop the prompt's prefix from every cache
        if len(request.hash_ids) > blocks:
            raise ValueError(f"{len(request.hash_ids):,} hash ids for a prompt of {request.in_tokens:,} tokens "
                             f"(at most {blocks:,} blocks of {self.trace.block_size} tokens)")
        if len(request.hash_ids) < whole:
            raise ValueError(f"{len(request.hash_ids):,} hash ids for a prompt of {request.in_tokens:,} tokens "
                             f"(one per block of {self.trace.block_size} tokens: at least {whole:,})")
        ids = np.asarray(request.hash_ids, dtype=np.int64)
        if self.offset and ids.size and (ids.min() < 0 or ids.max() >= LOCAL_ID_LIMIT):
            raise ValueError(f"local hash ids must be in [0, 2^{SESSION_ID_SHIFT})")
        ids = ids + self.offset
        previous = self.last_ids.get(stream)
        start = 0
        if previous is not None:
            n = min(len(previous), len(ids))
            mismatch = np.flatnonzero(previous[:n] != ids[:n])
            start = int(mismatch[0]) if mismatch.size else n
        problem = self.checker.problem(ids, start)
        if problem:
            raise ValueError(problem)
        self.last_ids[stream] = ids
        return ids

    def _add(self, request: TraceRequest, stream: int, deps: tuple[int, ...], gap_s: float) -> int:
        think = min(max(0.0, gap_s), IDLE_GAP_CAP_S) * US_PER_S
        self.specs.append(RequestSpec(request.in_tokens, max(1, request.out), self._ids(request, stream),
                                      deps, think, label=f"{self.trace.id}#{len(self.specs)}"))
        return len(self.specs) - 1

    def build(self) -> Session:
        entries, index, parent_end = self.trace.requests, 0, 0.0
        deps: tuple[int, ...] = ()
        streams, after_group = 0, False
        while index < len(entries):
            entry = entries[index]
            if isinstance(entry, TraceRequest):
                gap = 0.0 if not deps else max(0.0, entry.t - parent_end) if after_group else entry.think_time
                deps = (self._add(entry, 0, deps, gap),)
                parent_end, after_group = entry.t + entry.api_time, False
                index += 1
                continue
            finals, group_end = [], parent_end
            while index < len(entries) and isinstance(entries[index], SubagentEntry):
                sub = entries[index]
                streams += 1
                dep = deps
                for position, request in enumerate(sub.requests):
                    gap = sub.t - parent_end if position == 0 else request.think_time
                    dep = (self._add(request, streams, dep, gap),)
                finals.append(dep[0])
                group_end = max(group_end, sub.t + sub.duration_ms / MS_PER_S)
                index += 1
            deps, parent_end, after_group = tuple(finals), group_end, True
        return Session(tuple(self.specs), str(self.trace.id))


def read_sessions(path: Path, skip_bad_lines: bool = False, max_bytes: int | None = None) -> TraceWorkload:
    bad = BadLines(path, skip_bad_lines)
    checker = PrefixChecker()
    sessions: list[Session] = []
    block_sizes: set[int] = set()
    for where, raw in _raw_sessions(path, bad, max_bytes):
        try:
            trace = SessionTrace.model_validate(raw)
            session = _SessionBuilder(trace, len(sessions), checker).build()
        except ValidationError as error:
            first = error.errors()[0]
            bad.report(where, f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}")
            continue
        except ValueError as error:
            bad.report(where, str(error))
            continue
        block_sizes.add(trace.block_size)
        sessions.append(session)
    if not sessions:
        raise empty_trace(path, bad.count)
    if len(block_sizes) > 1:
        raise InputError(f"--trace {quote(path.name)}", f"sessions use different block sizes {sorted(block_sizes)[:8]}",
                         "one block size per trace")
    return TraceWorkload(path.name, ArrivalMode.CLOSED, block_sizes.pop(), tuple(sessions), bad.count)
