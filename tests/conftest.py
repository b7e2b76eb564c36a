"""Test isolation: every test gets its own INFERASIM_HOME (user cards, anchors,
ledgers), no LM configured, and LiteLLM kept offline (STYLE.md rule 10).

Real-component tests (markers `llm`, `engine`, `ray`, `browser`) may skip locally with a
reason (no server built, no model file, no Ray, no headless Chromium); in CI (`CI` set to true) a skip of one of
them is turned into a failure that keeps the reason, so a green CI run means each of
them really ran. A whole module skipped at collection (a module-level `importorskip`)
would take its tests out unseen, markers and all, so in CI that fails too
(tests/test_ci_skips.py runs both rules on a scratch suite).
"""

import os

import pytest

REAL_MARKERS = ("llm", "engine", "ray", "browser")


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


@pytest.fixture(autouse=True)
def empty_replay_store():
    """Every test starts without the replays earlier tests recorded (predictor.sim.reuse)."""
    from predictor.sim import reuse
    reuse.STORE.clear()
    reuse.STORE.reused = reuse.STORE.checked = 0


@pytest.fixture(autouse=True)
def isolated_home(tmp_path, monkeypatch):
    home = tmp_path / "inferasim-home"
    home.mkdir()
    monkeypatch.setenv("INFERASIM_HOME", str(home))
    monkeypatch.delenv("INFERASIM_LM", raising=False)
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    return home


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if not (report.skipped and in_ci()):
        return
    real = [name for name in REAL_MARKERS if item.get_closest_marker(name)]
    if real:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = (f"CI=true: the {'/'.join(real)} test {item.nodeid} must run, not skip "
                           f"(skip reason: {reason})")


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    report = outcome.get_result()
    if report.skipped and in_ci():
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"CI=true: {collector.nodeid} was skipped at collection, its tests unseen ({reason})"
