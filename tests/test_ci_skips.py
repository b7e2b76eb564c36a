"""CI's rule for real components (tests/conftest.py), run on a scratch suite in a
subprocess: with `CI=true` a skipped `llm`/`engine`/`ray`/`browser` test, and a module
skipped at collection, fail the run and say why; locally both skip and the run passes;
an offline test may still skip in CI."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

CONFTEST = Path(__file__).with_name("conftest.py")
SUITE = {
    "test_real.py": "import pytest\n\n\n@pytest.mark.llm\ndef test_llm():\n    pytest.skip('no server')\n\n\n"
                    "@pytest.mark.engine\ndef test_engine_runs():\n    assert True\n",
    "test_offline.py": "import pytest\n\n\ndef test_optional():\n    pytest.skip('optional')\n",
    "test_gone.py": "import pytest\n\npytest.importorskip('no_such_module_for_ci_test')\n\n\n"
                    "@pytest.mark.ray\ndef test_ray():\n    pass\n",
}
INI = "[pytest]\nmarkers =\n    llm: x\n    engine: x\n    ray: x\n    browser: x\naddopts = -p no:cacheprovider\n"


def run_suite(tmp_path, ci: str | None) -> subprocess.CompletedProcess:
    for name, text in {**SUITE, "conftest.py": CONFTEST.read_text("utf-8"), "pytest.ini": INI}.items():
        (tmp_path / name).write_text(text, "utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER")}
    if ci is not None:
        env["CI"] = ci
    # a collection error stops a run before its tests; here both rules are to be seen
    argv = [sys.executable, "-m", "pytest", "-rA", "-p", "no:xdist", "--continue-on-collection-errors", str(tmp_path)]
    return subprocess.run(argv, check=False, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("ci", ["true", "1"])
def test_in_ci_a_skipped_real_test_or_module_fails_and_says_why(tmp_path, ci):
    result = run_suite(tmp_path, ci)
    assert result.returncode != 0, result.stdout
    assert "the llm test test_real.py::test_llm must run, not skip (skip reason: Skipped: no server)" in result.stdout
    assert "test_gone.py was skipped at collection" in result.stdout and "no_such_module_for_ci_test" in result.stdout
    assert "PASSED test_real.py::test_engine_runs" in result.stdout
    assert "SKIPPED" in result.stdout and "optional" in result.stdout       # offline skips stay skips


def test_locally_they_skip_with_their_reason(tmp_path):
    result = run_suite(tmp_path, None)
    assert result.returncode == 0, result.stdout
    assert "no server" in result.stdout and "no_such_module_for_ci_test" in result.stdout
