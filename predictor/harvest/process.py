"""Start an engine server, wait until it is ready, and always stop it (PRODUCT.md §6:
"every process it starts is stopped on exit, error or interrupt"; METHOD §4).

- The engine runs in its own process group (`start_new_session`), so stopping it stops
  its workers too: SIGTERM to the group, then SIGKILL after `STOP_GRACE_S`.
- The group is tied to the harvester's life even when the harvester cannot run any
  code (`kill -9`): a watchdog process (`predictor.harvest.watchdog`, its own session)
  holds a pipe only the harvester writes to and stops the group when the pipe closes;
  on Linux the engine's leader also gets `PR_SET_PDEATHSIG` (SIGTERM when the thread
  that started it dies; start engines from the main thread).
- `EngineProcess` is a context manager: leaving the block for any reason (return,
  exception, KeyboardInterrupt) stops the group. While any engine is alive, SIGTERM and
  SIGHUP raise `SystemExit` in the main thread so the same unwinding runs, and an
  `atexit` hook stops whatever is still registered.
- Readiness is polled with tenacity (a retry there cannot bias a measurement) until the
  timeout; an engine that exits while starting fails at once with the tail of its log.
- The command is an argument list, never a shell string.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from tenacity import (
    RetryError,
    Retrying,
    retry_if_exception_type,
    retry_if_result,
    stop_after_delay,
    wait_fixed,
)

from levers.errors import InputError

STOP_GRACE_S = 10.0
READY_POLL_S = 0.5
LOG_TAIL_CHARS = 1500
WATCHDOG_PATH = Path(__file__).with_name("watchdog.py")
WATCHDOG_EXIT_S = 2.0
PR_SET_PDEATHSIG = 1
_SIGNALS = tuple(s for s in (getattr(signal, "SIGTERM", None), getattr(signal, "SIGHUP", None)) if s is not None)


class EngineError(InputError):
    """The engine could not be started or did not become ready (one line for the CLI)."""

    def __init__(self, problem: str, log_path: str | None = None) -> None:
        super().__init__("engine", problem, f"see the engine log {log_path}" if log_path else "")


class _EngineDied(Exception):
    pass


_LIVE: set[EngineProcess] = set()
_LOCK = threading.Lock()
_PREVIOUS_HANDLERS: dict[int, object] = {}


def _stop_all() -> None:
    with _LOCK:
        live = list(_LIVE)
    for process in live:
        process.stop()


atexit.register(_stop_all)


def _raise_exit(signum: int, _frame) -> None:
    raise SystemExit(128 + signum)


def _install_handlers() -> None:
    if threading.current_thread() is not threading.main_thread() or _PREVIOUS_HANDLERS:
        return
    for signum in _SIGNALS:
        try:
            _PREVIOUS_HANDLERS[signum] = signal.signal(signum, _raise_exit)
        except (ValueError, OSError):  # not allowed here (embedded interpreter)
            continue


def _restore_handlers() -> None:
    if threading.current_thread() is not threading.main_thread():
        return
    for signum, previous in list(_PREVIOUS_HANDLERS.items()):
        try:
            signal.signal(signum, previous)
        except (ValueError, OSError, TypeError):
            pass
        del _PREVIOUS_HANDLERS[signum]


def _tail(path: Path | None) -> str:
    if path is None or not path.exists():
        return ""
    text = path.read_text(errors="replace")[-LOG_TAIL_CHARS:]
    return " | ".join(line.strip() for line in text.splitlines() if line.strip())[-LOG_TAIL_CHARS:]


class EngineProcess:
    """One engine server process group (module docstring)."""

    def __init__(self, argv: Sequence[str], *, ready: Callable[[], bool], timeout_s: float,
                 env: Mapping[str, str] | None = None, log_path: str | Path | None = None,
                 poll_s: float = READY_POLL_S) -> None:
        if isinstance(argv, str) or not argv:
            raise ValueError("argv must be a non-empty list of arguments")
        self.argv = [str(a) for a in argv]
        self.ready, self.timeout_s, self.poll_s = ready, timeout_s, poll_s
        self.env = dict(env) if env is not None else None
        self.log_path = Path(log_path) if log_path is not None else None
        self.popen: subprocess.Popen | None = None
        self.watchdog: subprocess.Popen | None = None
        self._log = None

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen is not None else None

    def start(self) -> None:
        environment = {**os.environ, **self.env} if self.env is not None else None
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            self._log = self.log_path.open("wb")
        try:
            self.popen = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL,
                                          stdout=self._log or subprocess.DEVNULL, stderr=subprocess.STDOUT,
                                          env=environment, start_new_session=True, preexec_fn=_die_with_parent())
        except OSError as error:
            self._close_log()
            raise EngineError(f"cannot start '{self.argv[0]}' ({error.strerror})") from None
        with _LOCK:
            _LIVE.add(self)
        _install_handlers()
        self.watchdog = _start_watchdog(self.popen.pid)

    def wait_ready(self) -> None:
        """Poll `ready` until it is true; fail early if the engine exits."""
        def probe() -> bool:
            if self.popen is None or self.popen.poll() is not None:
                raise _EngineDied()
            return bool(self.ready())

        retrying = Retrying(stop=stop_after_delay(self.timeout_s), wait=wait_fixed(self.poll_s),
                            retry=retry_if_result(lambda ok: not ok) | retry_if_exception_type(OSError),
                            reraise=False)
        try:
            retrying(probe)
        except _EngineDied:
            code = self.popen.returncode if self.popen is not None else None
            raise EngineError(f"exited with code {code} before it was ready: {_tail(self.log_path)}",
                              str(self.log_path) if self.log_path else None) from None
        except RetryError:
            raise EngineError(f"not ready after {self.timeout_s:g} s",
                              str(self.log_path) if self.log_path else None) from None

    def stop(self) -> None:
        """SIGTERM the group, SIGKILL it after the grace period; idempotent."""
        popen = self.popen
        if popen is not None:
            for signum in (signal.SIGTERM, signal.SIGKILL):
                self._signal_group(popen.pid, signum)
                try:
                    popen.wait(timeout=STOP_GRACE_S)
                except subprocess.TimeoutExpired:
                    pass
        self._stop_watchdog()
        with _LOCK:
            _LIVE.discard(self)
            empty = not _LIVE
        if empty:
            _restore_handlers()
        self._close_log()

    def _stop_watchdog(self) -> None:
        """Close its pipe (it finds the group gone and exits) and reap it."""
        watchdog, self.watchdog = self.watchdog, None
        if watchdog is None:
            return
        if watchdog.stdin is not None:
            watchdog.stdin.close()
        try:
            watchdog.wait(timeout=WATCHDOG_EXIT_S + STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            watchdog.kill()
            watchdog.wait()

    @staticmethod
    def _signal_group(pid: int, signum: int) -> None:
        try:
            os.killpg(pid, signum)  # the group id is the leader's pid (start_new_session)
        except (ProcessLookupError, PermissionError):
            pass

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> EngineProcess:
        self.start()
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` asking Linux to SIGTERM the engine when its parent dies (None
    elsewhere: the watchdog alone then ties the group to the harvester)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved here, not in the forked child
    except (OSError, AttributeError):
        return None
    return lambda: prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)


def _start_watchdog(pgid: int) -> subprocess.Popen | None:
    """The watchdog of the group (module docstring); None if it cannot start (the
    in-process handlers still stop the group on any exit Python sees)."""
    try:
        return subprocess.Popen([sys.executable, "-I", "-S", str(WATCHDOG_PATH), str(pgid), str(STOP_GRACE_S)],
                                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True, close_fds=True)
    except OSError:
        return None


def group_alive(pgid: int) -> bool:
    """Whether any process of the group still exists (tests)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def wait_gone(pgid: int, timeout_s: float = STOP_GRACE_S) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not group_alive(pgid):
            return True
        time.sleep(0.05)
    return not group_alive(pgid)
