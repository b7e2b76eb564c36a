"""Trace workloads (METHOD §5 input): pick the reader from the file.

Formats:
- Mooncake (`trace_mooncake`): JSON lines or one JSON array of request records, open
  loop at their timestamps, optional sessions and dependencies, a compact prefix form.
- Agentic sessions (`trace_sessions`): one session per file (or per line, or a folder
  of files) with nested subagent groups; replayed closed loop over live sessions.
- Request-length CSV (`trace_base.read_length_csv`; `arrived_at` s, `num_prefill_tokens`,
  `num_decode_tokens`: the Vidur/Splitwise processed traces): open loop, no prefixes.

A bad record raises an :class:`InputError` naming its line (or record) and the reason;
with ``skip_bad_lines`` it is skipped and counted (`TraceWorkload.bad_lines`).

Every file is read through the input layer (:mod:`levers.inputs`: a regular file, at most
``max_bytes``, UTF-8), and every field is bounded (:mod:`predictor.sim.trace_base`
limits: finite timestamps, token counts a model could hold, 64-bit hash ids).
"""

from __future__ import annotations

from pathlib import Path

from levers.errors import InputError
from levers.inputs import check_input_file, quote
from predictor.sim.trace_base import TRACE_EXPECTED, TraceWorkload, read_length_csv
from predictor.sim.trace_mooncake import read_mooncake
from predictor.sim.trace_sessions import looks_like_sessions, read_sessions

__all__ = ["TraceWorkload", "load_trace"]


def load_trace(path: str | Path, *, skip_bad_lines: bool = False, max_bytes: int | None = None) -> TraceWorkload:
    """Read a trace in any supported format (see the module docstring); files larger than
    ``max_bytes`` (default: the input layer's limit) are refused before they are read."""
    trace = Path(path)
    if not trace.exists():
        raise InputError(f"--trace {quote(str(trace))}", "no such file", "a path to a trace file or a folder of sessions")
    if trace.is_dir():
        return read_sessions(trace, skip_bad_lines, max_bytes)
    check_input_file(trace, "--trace", max_bytes=max_bytes, expected=TRACE_EXPECTED)
    if looks_like_sessions(trace):
        return read_sessions(trace, skip_bad_lines, max_bytes)
    if trace.suffix.lower() == ".csv":
        return read_length_csv(trace, skip_bad_lines, max_bytes)
    return read_mooncake(trace, skip_bad_lines, max_bytes)
