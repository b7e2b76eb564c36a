"""The engine process group is always stopped: readiness that never comes, an engine that
dies while starting, an exception or a SIGTERM inside the block, and a harvest whose
engine never becomes ready (PRODUCT.md §6)."""

import os
import signal
import sys
import time
from dataclasses import replace

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
