"""The engine process group is always stopped: readiness that never comes, an engine that
dies while starting, an exception or a SIGTERM inside the block, and a harvest whose
engine never becomes ready (PRODUCT.md §6)."""

import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from predictor.harvest import harvester
from predictor.harvest.adapters import LaunchCommand
from predictor.harvest.harvester import run_harvest
from predictor.harvest.plan import HarvestRequest, plan_harvest
from predictor.harvest.process import EngineError, EngineProcess, group_alive, wait_gone

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]
# a parent that starts a grandchild in its group, then sleeps
FAMILY = [sys.executable, "-c",
          "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']);"
          " time.sleep(60)"]


def test_readiness_that_never_comes_stops_the_group(tmp_path):
    engine = EngineProcess(FAMILY, ready=lambda: False, timeout_s=1.0, poll_s=0.1, log_path=tmp_path / "e.log")
    with pytest.raises(EngineError, match="not ready after 1 s"), engine:
        pass
    assert wait_gone(engine.pid, timeout_s=5.0)


def test_an_engine_that_dies_fails_at_once_with_its_log(tmp_path):
    argv = [sys.executable, "-c", "import sys; print('boom: no GPU'); sys.exit(3)"]
    engine = EngineProcess(argv, ready=lambda: False, timeout_s=30.0, poll_s=0.1, log_path=tmp_path / "e.log")
    with pytest.raises(EngineError, match="exited with code 3 before it was ready: boom: no GPU"):
        with engine:
            pass
    assert not group_alive(engine.pid)


def test_an_exception_inside_the_block_stops_the_group():
    engine = EngineProcess(FAMILY, ready=lambda: True, timeout_s=5.0)
    with pytest.raises(KeyboardInterrupt), engine:
        assert group_alive(engine.pid)
        raise KeyboardInterrupt
    assert wait_gone(engine.pid, timeout_s=5.0)


def test_sigterm_to_the_harvester_stops_the_group():
    before = signal.getsignal(signal.SIGTERM)
    engine = EngineProcess(SLEEPER, ready=lambda: True, timeout_s=5.0)
    with pytest.raises(SystemExit) as stopped, engine:
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(500):        # the handler raises SystemExit here
            time.sleep(0.01)
    assert stopped.value.code == 128 + signal.SIGTERM
    assert wait_gone(engine.pid, timeout_s=5.0)
    assert signal.getsignal(signal.SIGTERM) is before     # the previous handler is back


def test_argv_is_never_a_shell_string():
    with pytest.raises(ValueError):
        EngineProcess("python -c 'pass'", ready=lambda: True, timeout_s=1.0)


def test_a_harvest_whose_engine_never_becomes_ready_leaves_nothing(gguf_file, monkeypatch, tmp_path):
    plan = plan_harvest(HarvestRequest(engine="llamacpp", model=str(gguf_file), cluster="cpu", config_text="tp=1",
                                       ready_timeout_s=1.0))
    plan = replace(plan, launch=LaunchCommand(tuple(FAMILY)))            # an "engine" that never serves
    started: list[EngineProcess] = []

    class Recording(EngineProcess):
        def start(self) -> None:
            super().start()
            started.append(self)

    monkeypatch.setattr(harvester, "EngineProcess", Recording)
    with pytest.raises(EngineError, match="not ready"):
        run_harvest(plan, directory=tmp_path, log_path=tmp_path / "engine.log")
    assert len(started) == 1 and wait_gone(started[0].pid, timeout_s=5.0)
    assert not list(tmp_path.glob("*.json"))                                # no anchor written


HARVESTER = """
import sys, time
from predictor.harvest.process import EngineProcess
family = [sys.executable, "-c",
          "import subprocess, sys, time; child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']);"
          " print(child.pid, flush=True); time.sleep(120)"]
engine = EngineProcess(family, ready=lambda: True, timeout_s=5.0, log_path=sys.argv[1])
with engine:
    print(engine.pid, flush=True)
    time.sleep(120)
"""


def test_kill_9_of_the_harvester_leaves_no_engine_process(tmp_path):
    """The watchdog (and PR_SET_PDEATHSIG) stop the engine's whole group when the
    harvester is killed without a chance to run any code."""
    log = tmp_path / "engine.log"
    harvester_process = subprocess.Popen([sys.executable, "-c", HARVESTER, str(log)], stdout=subprocess.PIPE,
                                         text=True, cwd=str(Path(__file__).resolve().parents[3]),
                                         env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])})
    try:
        engine_pgid = int(harvester_process.stdout.readline())
        deadline = time.monotonic() + 10
        while not log.read_text().strip() and time.monotonic() < deadline:   # the grandchild's pid
            time.sleep(0.05)
        grandchild = int(log.read_text().split()[0])
        assert group_alive(engine_pgid)
        os.kill(harvester_process.pid, signal.SIGKILL)
        harvester_process.wait(timeout=5)
        assert wait_gone(engine_pgid, timeout_s=15.0), "the engine's group outlived its harvester"
        assert not _pid_alive(grandchild)
    finally:
        harvester_process.kill()
        try:
            os.killpg(engine_pgid, signal.SIGKILL)
        except (ProcessLookupError, UnboundLocalError, NameError):
            pass


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (dead, not yet reaped by init) counts as gone
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False
