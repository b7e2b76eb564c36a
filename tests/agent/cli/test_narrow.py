"""Every command reads at 80 columns (agent/cli/render.py): no line wider than the
terminal except ids, paths and command lines printed whole on purpose; headers never
broken inside a word; no Python reprs or scientific notation in human output."""

import json
import re

import pytest
from typer.testing import CliRunner

import agent.mix.planner
import agent.question
from agent.cli.main import app
from tests.agent.cli.narrow import NARROW, console_width, overlong
from tests.agent.mix.test_planner import GPT_OSS_CANDIDATES, fake_predict
from tests.agent.tune_fakes import FakePredictor

runner = CliRunner()
QWEN = ["--model", "qwen3-30b-a3b", "--workload", "1k/1k"]
WHOLE = ("inferasim harvest", "vllm serve", "python3 -m", "trtllm-serve", "/", "20", "mix-", "b200-", "mi355x-", "h100-", "h200-", "gb200-", "gb300-",
         "b300-", "mi300x-", "mi325x-")
REPRS = [re.compile(p) for p in (r"\{'", r"\['", r"\[\d+, \d+", r"\d\.\d+e[+-]\d\d", r"\bNone\b", r"\bTrue\b",
                                 r"\bFalse\b")]


def narrow(args: list[str]) -> str:
    with console_width():
        result = runner.invoke(app, args)
    assert result.exit_code in (0, 1), result.output
    return result.stdout


def assert_readable(text: str, headers: tuple[str, ...] = ()) -> None:
    assert not overlong(text, NARROW, WHOLE), overlong(text, NARROW, WHOLE)
    prose = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith(WHOLE))
    for pattern in REPRS:   # command lines keep their JSON arguments
        assert not pattern.search(prose), (pattern.pattern, prose)
    lines = text.splitlines()
    for header in headers:   # each header line appears whole on one line
        assert any(header in line for line in lines), header


@pytest.fixture
def ledgers(monkeypatch):
    monkeypatch.setattr(agent.question, "predict", FakePredictor())
    first = json.loads(runner.invoke(app, ["tune", *QWEN, "--budget", "12", "--json"]).stdout)["ledger"]
    second = json.loads(runner.invoke(app, ["tune", *QWEN, "--budget", "12", "--slo", "tpot<=1",
                                            "--json"]).stdout)["ledger"]
    return first, second


def test_tune_table(monkeypatch):
    monkeypatch.setattr(agent.question, "predict", FakePredictor())
    text = narrow(["tune", "--model", "kimi-k3", "--workload", "1k/1k", "--budget", "8", "--slo", "tpot<=50",
                   "--slo", "p90-itl=25"])
    assert_readable(text, ("objective", "tok/s/GPU", "mean ms", "p50 ms", "p90 ms"))
    assert "Ledger:" in text


def test_ledger_commands(ledgers):
    first, second = ledgers
    for args, headers in ((["ledger", "list"], ()), (["ledger", "show", first], ("objective", "tok/s/GPU")),
                          (["ledger", "best", first], ()), (["ledger", "compare", first, second], ())):
        assert_readable(narrow(args), headers)


def test_ids_are_whole_on_their_own_line_or_in_the_wide_table(ledgers):
    ids = [path.rsplit("/", 1)[1].removesuffix(".json") for path in ledgers]
    text = narrow(["ledger", "list"])
    assert [line for line in text.splitlines() if line in ids] == ids
    wide = narrow(["ledger", "list", "--wide"])
    assert all(any(search_id in line and "Qwen3-30B-A3B" in line for line in wide.splitlines()) for search_id in ids)


def test_anchor_commands():
    listed = narrow(["anchors", "list", "--model", "deepseek-r1", "--gpu", "mi355x"])
    assert_readable(listed)
    ids = [row["id"] for row in json.loads(runner.invoke(
        app, ["anchors", "list", "--model", "deepseek-r1", "--gpu", "mi355x", "--json"]).stdout)]
    assert ids and all(anchor_id in listed.splitlines() for anchor_id in ids)
    assert_readable(narrow(["anchors", "show", ids[0]]), ("batch",))
    assert_readable(narrow(["anchors", "check", "--cluster", "mi355x"]))


def test_anchor_filters():
    rows = json.loads(runner.invoke(app, ["anchors", "list", "--json", "--engine", "sglang", "--gpu", "mi355x"]).stdout)
    assert rows and all(r["engine"] == "sglang" and r["gpu"] == "MI355X" for r in rows)
    every = json.loads(runner.invoke(app, ["anchors", "list", "--json"]).stdout)
    assert len(rows) < len(every)
    by_model = json.loads(runner.invoke(app, ["anchors", "list", "--json", "--model", "deepseek-r1"]).stdout)
    assert by_model and {r["model"] for r in by_model} == {"DeepSeek-R1"}
    typo = runner.invoke(app, ["anchors", "list", "--gpu", "mi35x"])
    assert typo.exit_code == 2 and "did you mean 'mi355x'?" in typo.stderr


@pytest.mark.parametrize("args, headers", [
    (["models"], ("total B", "active B", "tokens")),
    (["hardware"], ("GB/s", "TFLOPS")),
    (["levers"], ("legal values",)),
    (["objectives"], ("unit",)),
    (["memory", "--model", "kimi-k3"], ()),
    (["predict", "--model", "qwen3-30b-a3b", "--cluster", "h100x1", "--config", "tp=1"], ("unit",)),
    (["simulate", "--model", "qwen3-30b-a3b", "--cluster", "h100x1", "--config", "tp=1", "--workload", "1k/1k",
      "--requests", "40", "--concurrency", "4"], ("tok/s/user",)),
])
def test_info_and_pricing_commands(args, headers):
    assert_readable(narrow(args), headers)


def test_plan_mix_tables(monkeypatch, tmp_path):
    monkeypatch.setattr(agent.mix.planner, "default_predict_fn", lambda: fake_predict)
    path = tmp_path / "models.yaml"
    path.write_text(GPT_OSS_CANDIDATES)
    assert_readable(narrow(["plan-mix", str(path), "--workers", "1"]), ("per GPU", "p50", "mean s"))
