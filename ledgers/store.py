"""Ledgers on disk: `$INFERASIM_HOME/ledgers/<search id>.json`, written atomically.

The search writes its ledger after every trial (PRODUCT.md §5), so an interrupted search
leaves a valid file that ``--resume`` continues. A write is a temporary file in the
same directory, then ``os.replace`` — a reader sees the old ledger or the new one, never
half of one. Each trial is serialised once (:meth:`LedgerWriter.add_trial`) and the
file is assembled from those fragments, one trial per line, so a write costs a string
join rather than re-encoding the whole search.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ledgers.model import Ledger
from levers.errors import InputError
from predictor.cards.registry import inferasim_home
from predictor.files import atomic_write_text  # noqa: F401  (the ledger API re-exports it)

LEDGERS_SUBDIR = "ledgers"
SUFFIX = ".json"


def ledgers_dir() -> Path:
    return inferasim_home() / LEDGERS_SUBDIR


class LedgerWriter:
    """Holds a ledger's header and serialised trials; writes the whole file on demand."""

    def __init__(self, path: Path, header: dict[str, Any], trials: list[dict[str, Any]] | None = None):
        self.path = path
        self.header = header
        self._fragments = [_dumps(record) for record in trials or []]

    def add_trial(self, record: dict[str, Any]) -> None:
        self._fragments.append(_dumps(record))

    @property
    def num_trials(self) -> int:
        return len(self._fragments)

    def render(self, tail: dict[str, Any]) -> str:
        head = ",\n".join(f"  {json.dumps(key)}: {_dumps(value)}" for key, value in self.header.items())
        trials = ",\n".join(f"    {fragment}" for fragment in self._fragments)
        rest = ",\n".join(f"  {json.dumps(key)}: {_dumps(value)}" for key, value in tail.items())
        body = f"{head},\n  \"trials\": [\n{trials}\n  ]" if trials else f"{head},\n  \"trials\": []"
        return "{\n" + body + (",\n" + rest if rest else "") + "\n}\n"

    def write(self, tail: dict[str, Any], *, durable: bool = False) -> None:
        atomic_write_text(self.path, self.render(tail), durable=durable)


def _dumps(value: Any) -> str:
    return json.dumps(value, allow_nan=False, separators=(",", ":"), ensure_ascii=False)


def resolve_ledger(reference: str) -> Path:
    """A ledger path, a search id, or a unique prefix of one in the ledgers directory."""
    candidate = Path(reference).expanduser()
    if candidate.is_file():
        return candidate
    matches = sorted(ledgers_dir().glob(f"{reference}*{SUFFIX}")) if ledgers_dir().is_dir() else []
    exact = [m for m in matches if m.stem == reference]
    if exact or len(matches) == 1:
        return (exact or matches)[0]
    known = ", ".join(p.stem for p in list_ledgers()[-5:]) or "none yet"
    problem = f"'{reference}' matches {len(matches)} ledgers" if matches else f"no ledger '{reference}'"
    raise InputError("ledger", problem, f"a ledger file or search id (recent: {known})")


def load_ledger(reference: str | Path) -> Ledger:
    """Read and validate a ledger; InputError (one line) when it is not one."""
    path = resolve_ledger(str(reference))
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as error:
        raise InputError("ledger", f"cannot read {path}: {error}", "a ledger JSON written by tune") from None
    try:
        return Ledger.model_validate(data)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise InputError("ledger", f"{path} is not a valid ledger: {where}: {first['msg']}",
                         "a ledger JSON written by tune (schema ledgers/ledger.schema.json)") from None


def list_ledgers() -> list[Path]:
    """Ledger files, oldest first (by modification time, then name)."""
    directory = ledgers_dir()
    if not directory.is_dir():
        return []
    paths = [p for p in directory.glob(f"*{SUFFIX}") if not p.name.startswith(".")]
    return sorted(paths, key=lambda p: (p.stat().st_mtime, p.name))
