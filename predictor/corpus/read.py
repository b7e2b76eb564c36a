"""Measured serving corpora as normalised rows (METHOD §8, PRODUCT.md §2 `score`, §3).

Three formats are read (`predictor.corpus.formats`): InferenceX fixed-sequence runs,
AIConfigurator's silicon sample, and a native CSV in this product's own terms; `auto`
picks one from the header. Every row becomes either a frozen `CorpusRow`
(`predictor.corpus.row`, with the name rules) or a `RowFailure` naming the row
("file:line") and why it could not be mapped. A missing required column, an unreadable
or empty file, or an unknown format is a user error for the whole file (InputError).
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Iterable

from levers.errors import InputError
from predictor.corpus.formats import READERS
from predictor.corpus.row import (  # noqa: F401  (re-exported: the corpus API)
    FORMATS,
    METRIC_NAMES,
    ChartKey,
    CorpusRead,
    CorpusRow,
    Format,
    MappingError,
    Measured,
    RowFailure,
    card_name_for,
    cluster_for,
    engine_for,
    gpu_name_for,
    running_cap,
)
from predictor.corpus.where import parse_where

# --- reading -----------------------------------------------------------------------------

AUTO = "auto"
_SIGNATURE_COLUMNS = {Format.INFERENCEX: "framework", Format.AICONFIGURATOR: "silicon_tpot_ms"}


def detect_format(header: list[str]) -> str:
    """`auto`: InferenceX has `framework`, AIConfigurator `silicon_tpot_ms`; else native."""
    for fmt, column in _SIGNATURE_COLUMNS.items():
        if column in header:
            return fmt
    return Format.NATIVE


def read_corpus(path: str | Path, fmt: str = AUTO) -> CorpusRead:
    """Read one corpus file; unknown format, unreadable file or missing required columns
    raise InputError; a row that cannot be mapped becomes a RowFailure."""
    fmt = str(fmt).strip().lower()
    if fmt not in READERS and fmt != AUTO:
        raise InputError("--format", f"unknown corpus format '{fmt}'", ", ".join([AUTO, *FORMATS]))
    file = Path(path)
    if file.is_dir():
        raise InputError(f"corpus {file}", "is a directory", "a CSV file")
    try:
        handle = file.open(newline="", encoding="utf-8")
    except OSError as error:
        raise InputError(f"corpus {file}", f"cannot be read ({error.strerror})") from None
    with handle:
        try:
            reader = csv.DictReader(handle)
            header = [h.strip() for h in (reader.fieldnames or [])]
            if not header:
                raise InputError(f"corpus {file}", "is empty (no header row)", "a CSV file with a header row")
            fmt = detect_format(header) if fmt == AUTO else fmt
            READERS[fmt].check_columns(header, str(file))
            rows, failures = [], []
            for raw in reader:
                row_id = f"{file.name}:{reader.line_num}"
                fields = sum(v is not None for k, v in raw.items() if k is not None) + len(raw.get(None) or ())
                if fields != len(header):       # its values would sit under other columns
                    failures.append(RowFailure(row_id, f"{fields} fields, the header has {len(header)}"))
                    continue
                clean = {(k or "").strip(): v.strip() if isinstance(v, str) else "" for k, v in raw.items()}
                try:
                    rows.append(READERS[fmt].row(clean, row_id))
                except (MappingError, InputError, ValueError, ZeroDivisionError) as error:
                    failures.append(RowFailure(row_id, _reason(error)))
        except (csv.Error, UnicodeDecodeError) as error:
            raise InputError(f"corpus {file}", f"is not a readable CSV ({error})") from None
    return CorpusRead(str(file), fmt, tuple(rows), tuple(failures))


def _reason(error: Exception) -> str:
    return error.message if isinstance(error, InputError) else str(error)


def filter_rows(rows: Iterable[CorpusRow], where: str | None) -> tuple[list[CorpusRow], list[CorpusRow]]:
    """(rows matching `where`, the rest); see `predictor.corpus.where`."""
    predicate = parse_where(where)
    matched, rest = [], []
    for row in rows:
        (matched if predicate(row) else rest).append(row)
    return matched, rest
