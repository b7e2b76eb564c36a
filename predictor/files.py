"""Atomic file writes (PRODUCT.md §6: nothing is left half-written).

Every file the product writes (ledgers, anchors, user model cards, sweep CSV/JSON, plots)
goes through :func:`atomic_write`: a temporary file in the target's directory, then
``os.replace``, so a reader sees the old file or the new one, never a torn one. Files get
an ordinary user mode (``mkstemp`` alone would leave them 0600). Text goes through the
one redaction pass (:func:`levers.redact.redact`) on its way out, so no file carries a
key; a writer that redacted its parts already (the ledger, fragment by fragment) says so.
A path that cannot be written is an :class:`InputError` naming it, not a traceback.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Callable

from levers.errors import InputError
from levers.inputs import quote
from levers.redact import redact

FILE_MODE = 0o644


def atomic_write(path: Path, write: Callable[[str], None], *, durable: bool = False) -> Path:
    """Call ``write(temporary_path)``, then move the result onto ``path``."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as error:
        raise InputError(f"output {quote(str(path))}", f"cannot be written ({error.strerror or error})",
                         "a path in a folder you may write") from None
    os.close(handle)
    try:
        write(temporary)
        if durable:
            descriptor = os.open(temporary, os.O_RDONLY)
            try:
                os.fsync(descriptor)
            finally:
                os.close(descriptor)
        os.chmod(temporary, FILE_MODE)
        os.replace(temporary, path)
    except OSError as error:
        Path(temporary).unlink(missing_ok=True)
        raise InputError(f"output {quote(str(path))}", f"cannot be written ({error.strerror or error})",
                         "a path in a folder you may write, on a disk with room") from None
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path


def atomic_write_text(path: Path, text: str, *, durable: bool = False, redacted: bool = False) -> Path:
    """Write ``text`` (UTF-8, secrets masked unless the caller ``redacted`` it) atomically."""
    safe = text if redacted else redact(text)
    return atomic_write(path, lambda temporary: Path(temporary).write_text(safe, encoding="utf-8"),
                        durable=durable)
