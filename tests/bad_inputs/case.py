"""The bad-input corpus's vocabulary: a case, its outcome, and the files cases are made of
(see ``tests/bad_inputs/cases.py``)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
CASE_LIMIT_S = 10.0
LONG = "x" * 100_000
ESCAPES = "\x1b[2J\x1b]0;pwned\x07"
MODEL = ["--model", "qwen3-30b-a3b"]
SMALL = [*MODEL, "--cluster", "h100x1"]


@dataclass(frozen=True)
class Case:
    id: str
    args: tuple[str, ...]
    names: str                                    # the input the message must name
    accepts: str = "accepted:"                    # what it must say is accepted
    files: tuple[tuple[str, object], ...] = ()    # (name, str | bytes | generator name)
    env: tuple[tuple[str, str], ...] = ()
    exit_code: int = 2


@dataclass
class Outcome:
    case: Case
    exit_code: int
    output: str
    wall_s: float
    traceback: str | None = None
    problems: list[str] = field(default_factory=list)


# --- file generators -------------------------------------------------------------------

def _anchor_text() -> str:
    folder = ROOT / "predictor" / "data" / "anchors"
    return next(iter(sorted(folder.glob("mi355x-sglang-*.json")))).read_text()


def _anchor(**changes) -> str:
    data = json.loads(_anchor_text())
    for dotted, value in changes.items():
        target = data
        *parents, leaf = dotted.split("__")
        for part in parents:
            target = target[part]
        target[leaf] = value
    return json.dumps(data)


def _ledger(**changes) -> str:
    data = json.loads((HERE / "ledger.json").read_text())
    for key, value in changes.items():
        if key.startswith("trial0__"):
            data["trials"][0][key.removeprefix("trial0__")] = value
        else:
            data[key] = value
    return json.dumps(data)


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


MOONCAKE_OK = '{"timestamp": 0, "input_length": 64, "output_length": 4, "hash_ids": [1]}\n'
SESSION_OK = {"id": "s", "block_size": 64, "requests": [{"t": 0, "in": 64, "out": 4, "hash_ids": [1]}]}
CSV_TRACE_HEADER = "arrived_at,num_prefill_tokens,num_decode_tokens\n"
MIX_OK = "models:\n  - name: qwen3-30b-a3b\n    cluster: h100x1\n"
BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{b}: &{b} [{', '.join([f'*{a}'] * 9)}]\n" for a, b in zip("abcdefgh", "bcdefghi")) + "models: []\n"


def _corpus_row(**changes) -> str:
    text = (ROOT / "tests" / "fixtures" / "corpus" / "native_small.csv").read_text().splitlines()
    header, first = text[0].split(","), text[1].split(",")
    row = dict(zip(header, first))
    row.update(changes)
    return text[0] + "\n" + ",".join(str(row[c]) for c in header) + "\n"


GENERATORS = {
    "big": lambda: b"x" * (2 * 1024 * 1024),
    "latin1": lambda: "caf\xe9 na\xefve\n".encode("latin-1"),
    "utf16": lambda: '{"a": 1}'.encode("utf-16"),
    "nul": lambda: b"\x00\x01\x02\xff\xfe",
}


