"""One writer per ledger: a lock file beside it (PRODUCT.md §5 ``--resume``).

A search holds ``.<ledger>.lock`` while it runs, so a second ``tune --resume`` of the same
ledger (or a resume of a search still running) stops before any work with the holder's
process id, instead of two searches overwriting each other's trials. The file is created
exclusively (``O_CREAT | O_EXCL``) and records the holder's pid, host and process start
time. A lock whose process is gone (killed, crashed: it could not remove its lock) is
stale and taken over: the pid no longer exists, or it exists but started at another
time (a reused pid). A lock from another host is honoured (its process cannot be
checked from here) and the message says how to remove it.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

from levers.errors import InputError
from levers.inputs import quote

ATTEMPTS = 3


def lock_path(ledger: Path) -> Path:
    return ledger.with_name(f".{ledger.name}.lock")


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (Linux), to tell a reused pid."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _holder_alive(holder: dict) -> bool:
    if holder.get("host") != socket.gethostname():
        return True
    pid = holder.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    started = holder.get("started")
    return started is None or _start_time(pid) in (None, started)


def _read_holder(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8", errors="replace")[:4096])
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def is_held(ledger: Path) -> bool:
    """Whether a live process holds ``ledger``'s lock: a search still writing it."""
    path = lock_path(Path(ledger))
    return path.exists() and _holder_alive(_read_holder(path))


class LedgerLock:
    """Held while a search writes its ledger (module docstring); a context manager."""

    def __init__(self, ledger: Path) -> None:
        self.ledger = Path(ledger)
        self.path = lock_path(self.ledger)
        self.held = False

    def acquire(self) -> "LedgerLock":
        mine = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "started": _start_time(os.getpid())})
        for _ in range(ATTEMPTS):
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                descriptor = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                holder = _read_holder(self.path)
                if _holder_alive(holder):
                    raise self._busy(holder) from None
                self.path.unlink(missing_ok=True)  # stale: its process is gone
                continue
            except OSError as error:
                raise InputError(f"ledger {quote(str(self.ledger))}", f"cannot be locked ({error.strerror or error})",
                                 "a ledger in a folder you may write") from None
            with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
                handle.write(mine)
            self.held = True
            return self
        raise self._busy(_read_holder(self.path))

    def _busy(self, holder: dict) -> InputError:
        who = f"process {holder.get('pid', '?')} on {holder.get('host', 'an unknown host')}"
        return InputError(f"ledger {quote(self.ledger.name)}", f"is being written by {who} (lock {self.path})",
                          "wait for that search to finish, or remove the lock file if that process is gone")

    def release(self) -> None:
        if self.held:
            if _read_holder(self.path).get("pid") == os.getpid():
                self.path.unlink(missing_ok=True)
            self.held = False

    def __enter__(self) -> "LedgerLock":
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
