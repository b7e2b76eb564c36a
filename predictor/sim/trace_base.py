"""What every trace reader shares (METHOD §5 input), and the request-length CSV reader.

Block ids must name whole prefixes (a block's hash covers its whole prefix): an id seen
after a different predecessor is rejected as out of order (`PrefixChecker`). The block
size is inferred from the records (`infer_block_tokens`). A set ``config.arrival_rate``
re-times an open-loop trace's session roots as a Poisson process (lengths from the
trace, arrivals synthetic: `TraceWorkload.retimed`). A closed-loop (session) trace is
replayed by the AgentX rules: concurrency = live session trees, idle gaps capped at
300 s (the session reader), and each client's first session warm-started 25-75% of the
way in (`TraceWorkload.warm_started`).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from levers.errors import InputError
from levers.inputs import parse_number, quote, read_text
from predictor.sim.request import RequestSpec
from predictor.sim.workloads import ArrivalMode, Session
from predictor.units import US_PER_S

ROOT = -1
CANDIDATE_BLOCK_TOKENS = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
BLOCK_SIZE_AGREEMENT = 0.99      # share of records a candidate block size must explain
CSV_COLUMNS = ("arrived_at", "num_prefill_tokens", "num_decode_tokens")
WARM_START_FRACTION = (0.25, 0.75)   # AgentX: warm-up starts sessions 25-75% of the way in
TRACE_EXPECTED = "a Mooncake JSONL/JSON trace, an agentic session file or folder, or a request-length CSV"
# Bounds of every trace field: what a served request can physically be.
MAX_TRACE_TOKENS = 16_777_216        # prompt or output tokens of one request (no model holds more)
MAX_TRACE_TIME_S = 1e9               # arrival times, think times (about 31 years)
HASH_ID_MIN, HASH_ID_MAX = -(1 << 63), (1 << 63) - 1   # a hash id is a 64-bit integer


@dataclass(frozen=True)
class TraceWorkload:
    name: str
    mode: ArrivalMode
    block_tokens: int
    trace_sessions: tuple[Session, ...]
    bad_lines: int = 0
    poisson_rate: float = 0.0
    warmup_sessions_per_slot: int = 0
    warm_start_sessions: int = 0                 # closed loop: the first N start mid-way (AgentX rule)
    warm_start_fraction: tuple[float, float] = WARM_START_FRACTION

    @property
    def num_requests(self) -> int:
        return sum(len(s.requests) for s in self.trace_sessions)

    @property
    def context_tokens(self) -> int:
        """The longest request's prompt and output: what the model's context must hold
        (`inferasim simulate` checks it as `predict` checks a workload's)."""
        return max((r.prompt_tokens + r.output_tokens for s in self.trace_sessions for r in s.requests), default=1)

    @property
    def counts_sent_requests(self) -> bool:
        """A closed loop of sessions counts requests sent (a turn still thinking when the
        budget is reached is never sent), as a benchmark does."""
        return self.mode is ArrivalMode.CLOSED

    def default_num_requests(self, concurrency: int) -> int:
        return self.num_requests

    def retimed(self, rate_per_s: float) -> TraceWorkload:
        return replace(self, mode=ArrivalMode.OPEN, poisson_rate=rate_per_s) if rate_per_s > 0 else self

    def warm_started(self, concurrency: int) -> TraceWorkload:
        """The AgentX replay rule for a closed loop of ``concurrency`` live sessions: each
        client's first session starts 25-75% of the way in (`skip_into`)."""
        return replace(self, warm_start_sessions=concurrency) if self.mode is ArrivalMode.CLOSED else self

    def sessions(self, rng: np.random.Generator) -> Iterator[Session]:
        if self.poisson_rate <= 0:
            base = int(rng.integers(1 << 62))
            for index, session in enumerate(self.trace_sessions):
                if index < self.warm_start_sessions:
                    fraction = np.random.default_rng([base, index]).uniform(*self.warm_start_fraction)
                    session = skip_into(session, fraction)
                if session.requests:
                    yield session
            return
        clock_us = 0.0
        for session in self.trace_sessions:
            clock_us += float(rng.exponential(US_PER_S / self.poisson_rate))
            yield Session(tuple(replace(spec, arrival_us=clock_us) if not spec.deps else spec
                                for spec in session.requests), session.label)


def skip_into(session: Session, fraction: float) -> Session:
    """The session from ``fraction`` of its requests on (in trace order): earlier requests
    are taken as done, so a kept request's dependencies on them are dropped and the first
    kept turn, whose context is already long, arrives uncached (its blocks are scoped to
    its session: the replay's first turn is unique)."""
    cut = int(len(session.requests) * fraction)
    if cut <= 0:
        return session
    kept = tuple(replace(spec, deps=tuple(d - cut for d in spec.deps if d >= cut),
                         think_us=spec.think_us if any(d >= cut for d in spec.deps) else 0.0)
                 for spec in session.requests[cut:])
    return Session(kept, session.label)


class BadLines:
    """Collects or raises per-record errors (PRODUCT.md §5 traces)."""

    def __init__(self, path: Path, skip: bool) -> None:
        self.path, self.skip, self.count = path, skip, 0

    def report(self, where: str, reason: str) -> None:
        if not self.skip:
            raise InputError("--trace", f"{' '.join(filter(None, (quote(self.path.name)[1:-1], where)))}: "
                             f"{reason.removeprefix('is ')}",
                             "fix the record, or pass --skip-bad-lines to skip and count bad lines")
        self.count += 1


class PrefixChecker:
    """Checks that every block id always follows the same predecessor."""

    def __init__(self) -> None:
        self.predecessor: dict[int, int] = {}

    def problem(self, ids: Sequence[int], start: int = 0) -> str | None:
        """Check ids[start:]; return the reason they are out of order, else record them."""
        seen = self.predecessor
        fresh: list[tuple[int, int]] = []
        previous = int(ids[start - 1]) if start else ROOT
        for position in range(start, len(ids)):
            key = int(ids[position])
            known = seen.get(key)
            if known is None:
                fresh.append((key, previous))
            elif known != previous:
                return (f"hash ids out of order: id {key} at block {position} follows "
                        f"{'the start' if previous == ROOT else previous} here but "
                        f"{'the start' if known == ROOT else known} earlier (a block's hash covers its whole prefix)")
            previous = key
        keys = [key for key, _ in fresh]
        if len(set(keys)) != len(keys):
            return "hash ids out of order: an id repeats within one prompt"
        seen.update(fresh)
        return None


def infer_block_tokens(pairs: Sequence[tuple[int, int]], what: str) -> int:
    """The block size that explains (input tokens, number of blocks) for the records."""
    usable = [(tokens, blocks) for tokens, blocks in pairs if blocks > 0]
    if not usable:
        return CANDIDATE_BLOCK_TOKENS[2]
    tokens = np.array([t for t, _ in usable], dtype=np.int64)
    blocks = np.array([b for _, b in usable], dtype=np.int64)
    best, best_share = None, 0.0
    for size in CANDIDATE_BLOCK_TOKENS:
        fits = (-(-tokens // size) == blocks) | (tokens // size == blocks)
        share = float(fits.mean())
        if share > best_share:
            best, best_share = size, share
    if best is None or best_share < BLOCK_SIZE_AGREEMENT:
        raise InputError("--trace", f"{what}: cannot infer the block size: no size in "
                         f"{CANDIDATE_BLOCK_TOKENS} matches len(hash_ids) for {BLOCK_SIZE_AGREEMENT:.0%} "
                         "of the records", "hash_ids with one id per fixed-size block of the prompt")
    return best


def empty_trace(path: Path, bad_lines: int = 0) -> InputError:
    skipped = f" ({bad_lines:,} bad lines skipped)" if bad_lines else ""
    return InputError(f"--trace {quote(path.name)}", f"the trace has no requests{skipped}", TRACE_EXPECTED)


def read_trace_text(path: Path, max_bytes: int | None) -> str:
    """One trace file through the input layer (bounded, regular, UTF-8)."""
    return read_text(path, "--trace", max_bytes=max_bytes, expected=TRACE_EXPECTED)


def _csv_request(row: dict, line: int) -> RequestSpec:
    arrival = parse_number(row.get("arrived_at"), f"line {line}: arrived_at", low=0, high=MAX_TRACE_TIME_S)
    prompt = parse_number(row.get("num_prefill_tokens"), f"line {line}: num_prefill_tokens", integer=True,
                          low=1, high=MAX_TRACE_TOKENS)
    output = parse_number(row.get("num_decode_tokens"), f"line {line}: num_decode_tokens", integer=True,
                          low=1, high=MAX_TRACE_TOKENS)
    return RequestSpec(prompt, output, arrival_us=arrival * US_PER_S)


def read_length_csv(path: Path, skip_bad_lines: bool, max_bytes: int | None = None) -> TraceWorkload:
    """A Vidur/Splitwise request-length CSV: open loop at ``arrived_at`` seconds."""
    bad = BadLines(path, skip_bad_lines)
    sessions: list[Session] = []
    reader = csv.DictReader(io.StringIO(read_trace_text(path, max_bytes), newline=""))
    try:
        missing = [c for c in CSV_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise InputError(f"--trace {quote(path.name)}", f"missing columns {', '.join(missing)}",
                             "a CSV with columns " + ", ".join(CSV_COLUMNS))
        for line, row in enumerate(reader, start=2):
            try:
                sessions.append(Session((_csv_request(row, line),)))
            except InputError as error:
                bad.report(f"line {line}", f"{error.what.split(': ', 1)[-1]}: {error.problem} ({error.accepted})")
    except csv.Error as error:
        raise InputError(f"--trace {quote(path.name)}", f"is not a readable CSV ({quote(str(error))})",
                         TRACE_EXPECTED) from None
    if not sessions:
        raise empty_trace(path, bad.count)
    return TraceWorkload(path.name, ArrivalMode.OPEN, CANDIDATE_BLOCK_TOKENS[2], tuple(sessions), bad.count)
