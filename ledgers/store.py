"""Ledgers on disk: `$INFERASIM_HOME/ledgers/<search id>.json`, written atomically.

The search writes its ledger after every trial (PRODUCT.md §5), so an interrupted search
leaves a valid file that ``--resume`` continues. A write is a temporary file in the
same directory, then ``os.replace`` — a reader sees the old ledger or the new one, never
half of one. Each trial is serialised once (:meth:`LedgerWriter.add_trial`) and the
file is assembled from those fragments, one trial per line, so a write costs a string
join rather than re-encoding the whole search. Each fragment is redacted once, when it is
added (:mod:`levers.redact`: an LLM that echoes a key never puts it on disk), and the
header and tail on every write.

Reading goes through the input layer (:mod:`levers.inputs`): bounded size, UTF-8, no
NaN, bounded nesting, control characters removed from every string, so a shared or
hand-edited ledger cannot crash a reader or drive the terminal.
"""

from __future__ import annotations

import glob
import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ledgers.model import Ledger
from levers.configuration import configuration_from_dict
from levers.errors import InputError
from levers.inputs import load_json, quote
from levers.redact import redact
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
        self._fragments = [redact(_dumps(record)) for record in trials or []]

    def add_trial(self, record: dict[str, Any]) -> None:
        self._fragments.append(redact(_dumps(record)))

    @property
    def num_trials(self) -> int:
        return len(self._fragments)

    def render(self, tail: dict[str, Any]) -> str:
        head = redact(",\n".join(f"  {json.dumps(key)}: {_dumps(value)}" for key, value in self.header.items()))
        trials = ",\n".join(f"    {fragment}" for fragment in self._fragments)
        rest = redact(",\n".join(f"  {json.dumps(key)}: {_dumps(value)}" for key, value in tail.items()))
        body = f"{head},\n  \"trials\": [\n{trials}\n  ]" if trials else f"{head},\n  \"trials\": []"
        return "{\n" + body + (",\n" + rest if rest else "") + "\n}\n"

    def write(self, tail: dict[str, Any], *, durable: bool = False) -> None:
        atomic_write_text(self.path, self.render(tail), durable=durable, redacted=True)


def _dumps(value: Any) -> str:
    return json.dumps(value, allow_nan=False, separators=(",", ":"), ensure_ascii=False)


def resolve_ledger(reference: str) -> Path:
    """A ledger path, a search id, or a unique prefix of one in the ledgers directory."""
    candidate = Path(reference).expanduser()
    try:
        is_file, is_dir = candidate.is_file(), candidate.is_dir()
    except OSError:                     # e.g. a name too long to be a path: not a file, maybe an id
        is_file = is_dir = False
    if is_file:
        return candidate
    if is_dir:
        raise InputError(f"ledger {quote(reference)}", "is a directory", "a ledger file or search id")
    pattern = f"{glob.escape(reference)}*{SUFFIX}"
    try:
        matches = sorted(ledgers_dir().glob(pattern)) if "/" not in reference and ledgers_dir().is_dir() else []
    except (OSError, ValueError):
        matches = []
    exact = [m for m in matches if m.stem == reference]
    if exact or len(matches) == 1:
        return (exact or matches)[0]
    known = ", ".join(p.stem for p in list_ledgers()[-5:]) or "none yet"
    problem = f"{quote(reference)} matches {len(matches)} ledgers" if matches else f"no ledger {quote(reference)}"
    raise InputError("ledger", problem, f"a ledger file or search id (recent: {known})")


def load_ledger(reference: str | Path) -> Ledger:
    """Read and validate a ledger; InputError (one line) when it is not one."""
    path = resolve_ledger(str(reference))
    data = load_json(path, "ledger", expected="a ledger JSON written by tune")
    try:
        ledger = Ledger.model_validate(data)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise InputError(f"ledger {quote(str(path))}", f"is not a valid ledger: {quote(where)}: {first['msg']}",
                         "a ledger JSON written by tune (schema ledgers/ledger.schema.json)") from None
    _check_configurations(ledger, path)
    _check_trial_references(ledger, path)
    return ledger


def _check_trial_references(ledger: Ledger, path: Path) -> None:
    """Trial ``i`` is ``trials[i]``, and the best, the ties and the nearest misses name
    trials the ledger holds: a hand-edited ledger that dropped trials is refused here, not
    met later as an internal error."""
    for position, trial in enumerate(ledger.trials):
        if trial.index != position:
            raise InputError(f"ledger {quote(str(path))}", f"trials[{position}] has index {trial.index}",
                             "a ledger JSON written by tune (trial i at position i)")
    named = [("best", ledger.best.index)] if ledger.best is not None else []
    named += [("ties", index) for index in ledger.ties]
    named += [("nearest_misses", miss.index) for miss in ledger.nearest_misses]
    for where, index in named:
        if index >= len(ledger.trials):
            raise InputError(f"ledger {quote(str(path))}",
                             f"{where} names trial #{index}, which is not in its {len(ledger.trials)} trials",
                             "a ledger JSON written by tune")


def _check_configurations(ledger: Ledger, path: Path) -> None:
    """Every recorded configuration is one of the 36 levers' legal values (the schema
    leaves them as plain mappings): a hand-edited value is refused here, not later."""
    configurations = [("baseline", ledger.baseline)]
    configurations += [(f"trials[{t.index}].configuration", t.configuration) for t in ledger.trials if t.configuration]
    for where, configuration in configurations:
        try:
            configuration_from_dict(configuration)
        except InputError as error:
            raise InputError(f"ledger {quote(str(path))}", f"{where}: {error.what}: {error.problem}",
                             error.accepted or "a ledger JSON written by tune") from None


def list_ledgers() -> list[Path]:
    """Ledger files, oldest first (by modification time, then name)."""
    directory = ledgers_dir()
    if not directory.is_dir():
        return []
    paths = [p for p in directory.glob(f"*{SUFFIX}") if not p.name.startswith(".")]
    return sorted(paths, key=lambda p: (p.stat().st_mtime, p.name))
