"""The engine's watchdog: stops an engine's process group when the harvester dies, even
by ``kill -9`` (PRODUCT.md §6: every process the harvester starts dies with it).

`EngineProcess` starts this file as its own small process (own session, so a signal to
the harvester's group does not reach it) with a pipe on its stdin whose only writer is
the harvester. When the harvester exits for any reason the kernel closes the pipe; the
read here returns and the engine's group gets SIGTERM, then SIGKILL after the grace
period. It is run by path with the standard library only (no package import, no
``sys.path`` set-up), so it starts in ~20 ms and works whatever the interpreter's path.
"""

from __future__ import annotations

import os
import signal
import sys
import time

POLL_S = 0.05


def _alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_group(pgid: int, grace_s: float) -> None:
    """SIGTERM the group, SIGKILL it if it is still there after ``grace_s``."""
    if not _alive(pgid):
        return
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not _alive(pgid):
            return
        time.sleep(POLL_S)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def main(argv: list[str]) -> int:
    pgid, grace_s = int(argv[1]), float(argv[2])
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # a terminal's Ctrl-C is the harvester's to handle
    while sys.stdin.buffer.read(4096):             # the harvester never writes: EOF when it is gone
        pass
    stop_group(pgid, grace_s)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
