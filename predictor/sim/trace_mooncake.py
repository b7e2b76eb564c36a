"""Mooncake-format traces (METHOD §5): JSON lines or one JSON array of records.

Each record: ``timestamp`` (ms, arrival), ``input_length``, ``output_length``,
``hash_ids`` (ordered hashes of the prompt's fixed-size blocks; the block size is
inferred, 512 tokens in the public Mooncake traces). Optional fields:

- ``id``: a name other records can refer to (default: the record's 0-based position);
- ``session_id``: records of one session run in file order, each waiting on the one
  before (unless it names its own ``waits_on``/``joins``);
- ``waits_on`` (an id) / ``joins`` (ids): requests that must finish first;
- ``think_time`` (s) or ``delay`` (ms): the gap after they finish (default 0);
- compact form: ``prefix_from`` (an earlier id) + ``prefix_blocks`` n: the prompt's
  blocks are that record's first n blocks followed by this record's ``hash_ids``.

A record that waits on another takes its arrival from that dependency; only a session
root needs ``timestamp``. ``output_length`` 0 is served as one token. Timestamps are
shifted so the trace starts at 0.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from levers.errors import InputError
from levers.inputs import parse_json
from predictor.sim.request import RequestSpec
from predictor.sim.trace_base import (
    HASH_ID_MAX,
    HASH_ID_MIN,
    MAX_TRACE_TIME_S,
    MAX_TRACE_TOKENS,
    BadLines,
    PrefixChecker,
    TraceWorkload,
    empty_trace,
    infer_block_tokens,
    read_trace_text,
)
from predictor.sim.workloads import ArrivalMode, Session
from predictor.units import US_PER_MS, US_PER_S

MAX_KEY_CHARS = 256
Key = Annotated[int, Field(ge=HASH_ID_MIN, le=HASH_ID_MAX)] | Annotated[str, Field(max_length=MAX_KEY_CHARS)]
HashId = Annotated[int, Field(ge=HASH_ID_MIN, le=HASH_ID_MAX)]
MAX_TIMESTAMP_MS = MAX_TRACE_TIME_S * 1000


class MooncakeRecord(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    timestamp: float | None = Field(None, ge=0, le=MAX_TIMESTAMP_MS)
    input_length: int = Field(ge=1, le=MAX_TRACE_TOKENS)
    output_length: int = Field(ge=0, le=MAX_TRACE_TOKENS)
    hash_ids: list[HashId] = Field([], max_length=MAX_TRACE_TOKENS)
    id: Key | None = None
    session_id: Key | None = None
    think_time: float | None = Field(None, ge=0, le=MAX_TRACE_TIME_S)
    delay: float | None = Field(None, ge=0, le=MAX_TIMESTAMP_MS)
    waits_on: Key | None = None
    joins: list[Key] = []
    prefix_from: Key | None = None
    prefix_blocks: int | None = Field(None, ge=0, le=MAX_TRACE_TOKENS)

    @model_validator(mode="before")
    @classmethod
    def _no_booleans(cls, data: Any) -> Any:
        """No field of a record is a boolean; lax validation read `true` as the number 1."""
        if isinstance(data, dict):
            for name, value in data.items():
                if isinstance(value, bool) or (isinstance(value, list) and any(isinstance(v, bool) for v in value)):
                    raise ValueError(f"{name}: a JSON boolean where a number (or list of them) is expected")
        return data

    @model_validator(mode="after")
    def _consistent(self) -> MooncakeRecord:
        if (self.prefix_from is None) != (self.prefix_blocks is None):
            raise ValueError("prefix_from and prefix_blocks go together")
        if self.think_time is not None and self.delay is not None:
            raise ValueError("give think_time (s) or delay (ms), not both")
        return self

    @property
    def think_us(self) -> float:
        if self.think_time is not None:
            return self.think_time * US_PER_S
        return (self.delay or 0.0) * US_PER_MS


def _records(path: Path, bad: BadLines, max_bytes: int | None) -> Iterator[tuple[str, int, dict]]:
    """(where, position, raw record) for each record of a JSONL file or a JSON array."""
    text = read_trace_text(path, max_bytes)
    if text.lstrip().startswith("["):
        items = parse_json(text, f"--trace {path.name}", document=False,
                           expected="a JSON array of records or one JSON record per line")
        if not isinstance(items, list):
            raise InputError(f"--trace {path.name}", "is not a JSON array of records", "a JSON array of records")
        for position, item in enumerate(items):
            yield f"record {position}", position, item
        return
    position = 0
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = parse_json(line, f"line {number}", document=False)
        except InputError as error:
            bad.report(f"line {number}", error.problem)
            position += 1
            continue
        yield f"line {number}", position, item
        position += 1


def _reason(error: ValidationError) -> str:
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"])
    return f"{where}: {first['msg']}" if where else first["msg"]


class _Builder:
    """Turns validated records into sessions of dependent requests."""

    def __init__(self) -> None:
        self.ids: dict[Key, tuple[int, int, np.ndarray]] = {}   # id -> (session, local index, blocks)
        self.sessions: list[list[tuple[MooncakeRecord, np.ndarray, tuple[int, ...]]]] = []
        self.session_of: dict[Key, int] = {}
        self.checker = PrefixChecker()
        self.timestamps: list[float] = []

    def add(self, record: MooncakeRecord, position: int) -> str | None:
        blocks, problem = self._blocks(record)
        if problem:
            return problem
        session, deps, problem = self._placement(record)
        if problem:
            return problem
        problem = self.checker.problem(blocks)
        if problem:
            return problem
        if session is None:
            session = len(self.sessions)
            self.sessions.append([])
            if record.session_id is not None:
                self.session_of[record.session_id] = session
        local = len(self.sessions[session])
        self.sessions[session].append((record, blocks, deps))
        self.ids[record.id if record.id is not None else position] = (session, local, blocks)
        if record.timestamp is not None:
            self.timestamps.append(record.timestamp)
        return None

    def _blocks(self, record: MooncakeRecord) -> tuple[np.ndarray, str | None]:
        own = np.asarray(record.hash_ids, dtype=np.int64)  # the schema keeps ids in 64 bits
        if record.prefix_from is None:
            return own, None
        earlier = self.ids.get(record.prefix_from)
        if earlier is None:
            return own, f"prefix_from {record.prefix_from!r} names no earlier record"
        if record.prefix_blocks > len(earlier[2]):
            return own, f"prefix_blocks {record.prefix_blocks} > {len(earlier[2])} blocks of {record.prefix_from!r}"
        return np.concatenate([earlier[2][: record.prefix_blocks], own]), None

    def _placement(self, record: MooncakeRecord) -> tuple[int | None, tuple[int, ...], str | None]:
        named = ([record.waits_on] if record.waits_on is not None else []) + list(record.joins)
        session = self.session_of.get(record.session_id) if record.session_id is not None else None
        if not named:
            if session is not None:
                return session, (len(self.sessions[session]) - 1,), None
            return None, (), None if record.timestamp is not None else "a session root needs a timestamp"
        found = [self.ids.get(key) for key in named]
        if any(f is None for f in found):
            return None, (), f"waits on unknown or later request {named[found.index(None)]!r}"
        sessions = {f[0] for f in found} | ({session} if session is not None else set())
        if len(sessions) > 1:
            return None, (), "waits on requests of different sessions"
        return sessions.pop(), tuple(f[1] for f in found), None

    def workload(self, path: Path, bad_lines: int) -> TraceWorkload:
        start_ms = min(self.timestamps, default=0.0)
        block_tokens = infer_block_tokens([(r.input_length, len(b)) for s in self.sessions for r, b, _ in s],
                                          path.name)
        sessions = []
        for entries in self.sessions:
            specs = tuple(RequestSpec(r.input_length, max(1, r.output_length), b, deps, r.think_us,
                                      None if deps else (r.timestamp - start_ms) * US_PER_MS)
                          for r, b, deps in entries)
            sessions.append(Session(specs))
        sessions.sort(key=lambda s: s.requests[0].arrival_us or 0.0)
        return TraceWorkload(path.name, ArrivalMode.OPEN, block_tokens, tuple(sessions), bad_lines)


def read_mooncake(path: Path, skip_bad_lines: bool = False, max_bytes: int | None = None) -> TraceWorkload:
    bad = BadLines(path, skip_bad_lines)
    builder = _Builder()
    for where, position, raw in _records(path, bad, max_bytes):
        try:
            record = MooncakeRecord.model_validate(raw)
        except ValidationError as error:
            bad.report(where, _reason(error))
            continue
        problem = builder.add(record, position)
        if problem:
            bad.report(where, problem)
    if not builder.sessions:
        raise empty_trace(path, bad.count)
    return builder.workload(path, bad.count)
