"""The report in a real browser (headless Chromium, the Debian package `chromium`):
`tune` -> `report` -> load the page, no console error, exception or failed load, the
best-trials rows and the figures are in the DOM, and a screenshot that is not blank.
Marked `browser`: in CI (CI=true) it must run, not skip (tests/conftest.py)."""

import io
import json

import pytest
from typer.testing import CliRunner

from agent.cli.main import app
from tests.agent.report.browser import Browser, chromium_path
from tests.agent.report.test_report import plan_mix_page

pytestmark = [pytest.mark.browser, pytest.mark.slow]
runner = CliRunner()
SELECTORS = ("table tbody tr", "figure svg", "h2", "pre")
WIDTH = 1280


@pytest.fixture(scope="module")
def chromium():
    path = chromium_path()
    if path is None:
        pytest.skip("headless Chromium is not installed (Debian: apt-get install -y chromium)")
    with Browser(path, width=WIDTH) as browser:
        yield browser


def looks_drawn(png: bytes) -> tuple[int, int, float]:
    image = pytest.importorskip("matplotlib.image").imread(io.BytesIO(png), format="png")
    grey = image[..., :3].mean(axis=2)
    return image.shape[1], image.shape[0], float(grey.std())


def test_tune_then_report_renders_in_chromium(chromium, tmp_path):
    tuned = runner.invoke(app, ["tune", "--model", "qwen3-30b-a3b", "--workload", "1k/1k", "--budget", "30",
                                "--slo", "tpot<=20", "--json"])
    assert tuned.exit_code in (0, 1), tuned.output
    ledger = json.loads(tuned.stdout)["ledger"]
    page = tmp_path / "report.html"
    assert runner.invoke(app, ["report", ledger, "-o", str(page), "--top", "12"]).exit_code == 0
    loaded = chromium.load(page.as_uri(), SELECTORS)
    assert loaded["errors"] == []
    counts = loaded["counts"]
    assert counts["table tbody tr"] >= 12 and counts["figure svg"] >= 2 and counts["h2"] >= 8
    width, height, spread = looks_drawn(loaded["png"])
    (tmp_path / "report.png").write_bytes(loaded["png"])
    assert width == WIDTH and height > 1500 and spread > 0.05


def test_a_plan_mix_report_renders_in_chromium(chromium, monkeypatch, tmp_path):
    loaded = chromium.load(plan_mix_page(monkeypatch, tmp_path).as_uri(), SELECTORS)
    assert loaded["errors"] == []
    assert loaded["counts"]["figure svg"] == 4 and loaded["counts"]["table tbody tr"] >= 10
    assert looks_drawn(loaded["png"])[2] > 0.05
