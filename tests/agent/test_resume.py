"""Resume is reproducible and exclusive (agent.resume, ledgers.lock): a search killed at
any trial and resumed is, trial for trial, the uninterrupted search with the same seed;
a second writer of one ledger is refused; a stale lock of a dead process is taken over."""

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

import agent.cli.tune
import agent.tune
from agent.cli.main import app
from agent.tune import TuneRequest, tune
from ledgers.lock import LedgerLock, lock_path
from predictor.feasibility import check_configuration
from tests.agent.tune_fakes import FakePredictor

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


class Killed(BaseException):
    """Stands in for a kill: raised by a listener after the ledger write of trial N."""


def _configs(ledger: Path) -> list[str]:
    return [json.dumps(t["configuration"], sort_keys=True) for t in json.loads(ledger.read_text())["trials"]]


def _search(request: TuneRequest, ledger_dir: Path, kill_at: int | None = None):
    def kill(session, trial):
        if kill_at is not None and len(session.trials) >= kill_at:
            raise Killed
    try:
        return tune(request, predict_fn=FakePredictor(), check_fn=check_configuration, listeners=[kill],
                    ledger_dir=ledger_dir)
    except Killed:
        return None


@pytest.mark.parametrize("slos, workload", [(("tpot<=13",), "1k/1k"), (("p90-itl<=15",), "agentic")])
def test_a_search_killed_at_any_trial_resumes_into_the_uninterrupted_one(tmp_path, slos, workload):
    request = TuneRequest(model="qwen3-30b-a3b", workload=workload, slos=slos, budget=160, seed=3, no_llm=True,
                          workers=1)
    whole = _search(request, tmp_path / "whole")
    expected = _configs(whole.ledger_path)
    for kill_at in (5, 47, 101, 102, 133, 159):     # round 0, the middle of later rounds, the end
        folder = tmp_path / f"killed-{kill_at}"
        _search(request, folder, kill_at)
        ledger = next(folder.glob("*.json"))
        assert len(json.loads(ledger.read_text())["trials"]) == kill_at
        resumed = tune(TuneRequest(resume=str(ledger), workers=1), predict_fn=FakePredictor(),
                       check_fn=check_configuration)
        assert _configs(resumed.ledger_path) == expected, f"killed at {kill_at}"
        assert resumed.best.index == whole.best.index and resumed.best.config == whole.best.config
        assert not lock_path(ledger).exists()


def test_kill_9_of_a_real_search_then_resume_equals_the_uninterrupted_search(tmp_path):
    """The real predictor, a real SIGKILL mid-search (its stale lock left behind)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "INFERASIM_HOME": str(tmp_path / "home")}
    args = ["tune", "--model", "qwen3-30b-a3b", "--cluster", "h100x1", "--workload", "1k/1k", "--budget", "300",
            "--no-llm", "--workers", "1", "--seed", "7", "--json"]
    code = "import sys; from agent.cli.main import main; sys.argv = ['inferasim', *sys.argv[1:]]; main()"
    whole = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True,
                           timeout=300, check=False)
    assert whole.returncode == 0, whole.stderr
    expected = _configs(Path(json.loads(whole.stdout)["ledger"]))
    ledgers = tmp_path / "home" / "ledgers"
    before = set(ledgers.glob("*.json"))
    # the victim runs at the lowest priority so that on a loaded machine this poller still
    # sees it mid-search (at normal priority it once finished all its trials between polls)
    victim = subprocess.Popen([sys.executable, "-c", code, *args], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, preexec_fn=lambda: os.nice(19))
    ledger = None
    deadline = time.monotonic() + 300    # a niced victim on a loaded machine is slow to reach 90
    while time.monotonic() < deadline:
        fresh = set(ledgers.glob("*.json")) - before
        if fresh:
            ledger = fresh.pop()
            try:
                if len(json.loads(ledger.read_text())["trials"]) >= 90:
                    break
            except (ValueError, OSError):
                pass
        time.sleep(0.005)
    victim.kill()
    victim.wait(timeout=10)
    data = json.loads(ledger.read_text())
    assert data["status"] == "running" and 90 <= len(data["trials"]) < 300
    assert lock_path(ledger).exists()                         # left behind by the kill
    resumed = runner.invoke(app, ["tune", "--resume", str(ledger), "--workers", "1", "--json"])
    assert resumed.exit_code == 0, resumed.output
    assert _configs(ledger) == expected


def test_a_second_writer_of_one_ledger_is_refused(tmp_path):
    request = TuneRequest(model="qwen3-30b-a3b", workload="1k/1k", budget=20, no_llm=True, workers=1)
    ledger = _search(request, tmp_path).ledger_path
    with LedgerLock(ledger):
        result = runner.invoke(app, ["tune", "--resume", str(ledger), "--workers", "1"])
    assert result.exit_code == 2
    assert f"is being written by process {os.getpid()}" in result.stderr and "remove the lock file" in result.stderr


def test_a_stale_lock_of_a_dead_process_is_taken_over(tmp_path):
    request = TuneRequest(model="qwen3-30b-a3b", workload="1k/1k", budget=20, no_llm=True, workers=1)
    ledger = _search(request, tmp_path).ledger_path
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    lock_path(ledger).write_text(json.dumps({"pid": int(dead.stdout), "host": socket.gethostname(), "started": "1"}))
    resumed = tune(TuneRequest(resume=str(ledger), budget=25, workers=1), predict_fn=FakePredictor(),
                   check_fn=check_configuration)
    assert resumed.num_trials >= 20 and not lock_path(ledger).exists()


PLAN = [{"kv_cache_dtype": "fp8"}, {"weight_dtype": "fp8", "expert_dtype": "fp8"}, {"ep": 2},
        {"concurrency": 1024}, {"max_running_requests": 512, "kv_cache_dtype": "fp8"}]


def _scripted():
    from tests.agent.tune_fakes import plan_answer, report, scripted, step
    return scripted([plan_answer(PLAN), step("evaluate_config", {"changes": {"kv_cache_dtype": "fp8"}}),
                     step("finish"), report({"kv_cache_dtype": "fp8"})])


def test_a_search_killed_after_its_llm_phase_resumes_without_asking_the_lm_again(tmp_path):
    request = TuneRequest(model="qwen3-30b-a3b", workload="1k/1k", budget=60, workers=1, max_cycles=1)
    whole = tune(request, predict_fn=FakePredictor(), check_fn=check_configuration, runtime=_scripted(),
                 ledger_dir=tmp_path / "whole")
    expected = _configs(whole.ledger_path)
    phases = [t["phase"] for t in json.loads(whole.ledger_path.read_text())["trials"]]
    kill_at = phases.index("investigator") + 10
    folder = tmp_path / "killed"
    with pytest.raises(Killed):
        tune(request, predict_fn=FakePredictor(), check_fn=check_configuration, runtime=_scripted(),
             ledger_dir=folder, listeners=[lambda s, t: (_ for _ in ()).throw(Killed) if len(s.trials) >= kill_at
                                           else None])
    ledger = next(folder.glob("*.json"))
    resumed = tune(TuneRequest(resume=str(ledger), workers=1), predict_fn=FakePredictor(),
                   check_fn=check_configuration)       # no LM now: the recorded LLM phase is restored
    assert _configs(resumed.ledger_path) == expected
    assert resumed.outcome.lm_note == "1 planner/investigator cycles done"


def test_ctrl_c_names_the_ledger_and_how_to_resume(tmp_path, monkeypatch):
    """A KeyboardInterrupt mid-search leaves the ledger (written after each trial, still
    running) and the CLI says where it is and how to continue, exit 130."""
    def interrupt(session, trial):
        if len(session.trials) >= 5:
            raise KeyboardInterrupt
    request = TuneRequest(model="qwen3-30b-a3b", workload="1k/1k", budget=40, no_llm=True)
    with pytest.raises(agent.tune.SearchInterrupted) as stop:
        tune(request, predict_fn=FakePredictor(), check_fn=check_configuration, listeners=[interrupt],
             ledger_dir=tmp_path)
    ledger = json.loads(stop.value.path.read_text())
    assert stop.value.num_trials == 5 and len(ledger["trials"]) == 5 and ledger["status"] == "running"

    def interrupted(request, **_):
        raise agent.tune.SearchInterrupted(stop.value.path, 5)
    monkeypatch.setattr(agent.cli.tune, "tune", interrupted)
    result = runner.invoke(app, ["tune", "--model", "qwen3-30b-a3b", "--workload", "1k/1k", "--no-llm"])
    assert result.exit_code == 130
    assert f"--resume {stop.value.path.stem}" in result.stderr and str(stop.value.path) in result.stderr
    deployed = runner.invoke(app, ["deploy", str(stop.value.path), "--out", str(tmp_path / "d")])
    assert deployed.exit_code == 0, deployed.output
    assert "of an unfinished search" in " ".join(deployed.stdout.split())
