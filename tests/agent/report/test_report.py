"""`inferasim report` (agent/report, agent/cli/report.py): one self-contained page for a
search or a plan-mix run; what the page holds, that it loads nothing from a network,
and that ledger text is escaped."""

import json
import os
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from typer.testing import CliRunner

import agent.mix.planner
import agent.question
from agent.cli.main import app
from tests.agent.mix.test_planner import GPT_OSS_CANDIDATES, fake_predict
from tests.agent.tune_fakes import FakePredictor

runner = CliRunner()
QWEN = ["--model", "qwen3-30b-a3b", "--workload", "1k/1k"]
HOSTILE = "<script>alert('x')</script>"
EXTERNAL = re.compile(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//|@import|url\(\s*["']?https?:""", re.I)


class Outline(HTMLParser):
    """Counts of the page's structure: sections, table rows per table, svgs, scripts."""

    def __init__(self) -> None:
        super().__init__()
        self.headings, self.rows, self.svgs, self.scripts, self._in_h2 = [], [], 0, 0, False

    def handle_starttag(self, tag, attrs):
        if tag == "h2":
            self._in_h2 = True
        elif tag == "table":
            self.rows.append(0)
        elif tag == "tr" and self.rows:
            self.rows[-1] += 1
        elif tag == "svg":
            self.svgs += 1
        elif tag == "script":
            self.scripts += 1

    def handle_endtag(self, tag):
        if tag == "h2":
            self._in_h2 = False

    def handle_data(self, data):
        if self._in_h2:
            self.headings.append(data)


def outline(text: str) -> Outline:
    parsed = Outline()
    parsed.feed(text)
    return parsed


@pytest.fixture
def ledger(monkeypatch):
    monkeypatch.setattr(agent.question, "predict", FakePredictor())
    result = runner.invoke(app, ["tune", *QWEN, "--budget", "24", "--slo", "tpot<=13", "--json"])
    assert result.exit_code in (0, 1), result.output
    return json.loads(result.stdout)


def with_hostile_llm_notes(path: str) -> None:
    """LLM text is untrusted: put markup where the page shows the LLM's notes."""
    data = json.loads(Path(path).read_text())
    data["llm"]["rationale"] = HOSTILE
    data["llm"]["hypotheses"] = [HOSTILE]
    data["llm"]["calls"] = [{"role": "planner", "outcome": "ok", "message": HOSTILE, "started_at": "2026-01-01T00:00",
                             "wall_ms": 1200.0, "num_requests": 1}]
    Path(path).write_text(json.dumps(data))


def test_a_search_page_has_every_part_and_loads_nothing(ledger, tmp_path):
    with_hostile_llm_notes(ledger["ledger"])
    out = tmp_path / "r.html"
    result = runner.invoke(app, ["report", ledger["ledger"], "-o", str(out), "--top", "10", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["report"] == str(out)
    text = out.read_text()
    page = outline(text)
    assert page.headings == ["The question", "The outcome", f"Best trials (top 10 of {ledger['num_trials']})",
                             "Deploy the best",
                             "Pareto frontier of the priced trials", "Trials over time", "Rejections by reason",
                             "Harvest hints", "LLM notes"]
    assert page.rows[0] == 1 + 10          # header + the ten best
    assert page.svgs >= 2 and page.scripts == 1
    assert not EXTERNAL.search(text)
    escaped = "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;"
    assert HOSTILE not in text and text.count(escaped) == 4   # rationale, hypothesis, message (text, sort key)
    assert "vllm serve Qwen/Qwen3-30B-A3B" in text


def plan_mix_page(monkeypatch, tmp_path) -> Path:
    """plan-mix (fake predictor) -> its JSON report -> the report page; the page's path."""
    monkeypatch.setattr(agent.mix.planner, "default_predict_fn", lambda: fake_predict)
    models = tmp_path / "models.yaml"
    models.write_text(GPT_OSS_CANDIDATES)
    report = tmp_path / "plan.json"
    assert runner.invoke(app, ["plan-mix", str(models), "--workers", "1", "--out", str(report)]).exit_code == 0
    out = tmp_path / "mix.html"
    result = runner.invoke(app, ["report", str(report), "-o", str(out)])
    assert result.exit_code == 0, result.output
    return out


def test_a_plan_mix_page(monkeypatch, tmp_path):
    text = plan_mix_page(monkeypatch, tmp_path).read_text()
    page = outline(text)
    assert page.headings == ["The plan", "Tier realtime", "Tier interactive", "Tier responsive", "Tier bulk",
                             "Illegal candidates", "Deploy the picks"]
    assert page.svgs == 4 and not EXTERNAL.search(text)
    assert "gpt-oss-120b/interactive" in text and "not expressible" in text


def test_a_source_that_is_neither_is_exit_2(tmp_path):
    other = tmp_path / "x.json"
    other.write_text(json.dumps({"hello": 1}))
    result = runner.invoke(app, ["report", str(other)])
    assert result.exit_code == 2 and "ledger" in result.stderr
    assert runner.invoke(app, ["report", "no-such-search"]).exit_code == 2
    fifo = tmp_path / "ff"
    os.mkfifo(fifo)       # said as what it is, not "no ledger 'ff'"
    for source, said in ((str(fifo), "is not a regular file"), ("", "report source: is empty")):
        result = runner.invoke(app, ["report", source])
        assert result.exit_code == 2 and said in result.stderr, result.output


@pytest.mark.parametrize("shape", [{"slots": [], "tiers": [1]}, {"slots": [], "tiers": [{}]},
                                   {"slots": [1], "tiers": []}, {"slots": [{"tier": "t"}], "tiers": []},
                                   {"slots": [], "tiers": [], "settings": [1]},
                                   {"slots": [], "tiers": [], "entries": "abc"},
                                   {"slots": [{"model": "m", "tier": "t", "short_list": [1]}],
                                    "tiers": [{"name": "t"}]}])
def test_a_file_shaped_almost_like_a_plan_mix_report_is_exit_2(tmp_path, shape):
    """Lists named slots and tiers make a file read as a plan-mix report; a field of
    another shape inside is bad input (it crashed the page: exit 3)."""
    path = tmp_path / "m.json"
    path.write_text(json.dumps(shape))
    result = runner.invoke(app, ["report", str(path), "-o", str(tmp_path / "r.html")])
    assert result.exit_code == 2 and "plan-mix" in result.stderr and "Traceback" not in result.output
    assert not (tmp_path / "r.html").exists()


def test_a_ledgers_search_id_cannot_choose_where_its_page_goes(ledger, tmp_path, monkeypatch):
    """The default file name comes from the ledger's search id, which the file says: kept
    to a plain name in the working directory (an id of '/../../x' wrote outside it)."""
    data = json.loads(Path(ledger["ledger"]).read_text())
    data["search_id"] = "/../../../escaped/a b" + "x" * 200
    hostile = tmp_path / "hostile.json"
    hostile.write_text(json.dumps(data))
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    result = runner.invoke(app, ["report", str(hostile), "--json"])
    assert result.exit_code == 0, result.output
    written = Path(json.loads(result.stdout)["report"])
    assert written.parent == Path(".") and written.name.startswith("report-escaped-a-b")
    assert len(written.name) <= len("report-.html") + 80 and (here / written).is_file()
    assert [p.name for p in here.iterdir()] == [written.name]


def test_an_empty_or_folder_like_out_is_refused(ledger, tmp_path):
    """typer read --out '' as '.', and 'x/' as the file x: taken as typed, both are refused."""
    for out, said in (("", "--out: is empty"), (f"{tmp_path}/newdir/", "ends in a folder separator")):
        result = runner.invoke(app, ["report", ledger["ledger"], "--out", out])
        assert result.exit_code == 2 and said in result.stderr, result.output
    assert not (tmp_path / "newdir").exists()


def test_a_search_with_no_trial_draws_its_figure_without_a_warning():
    """No trial: nothing to name in a legend, and nothing leaks to stderr."""
    import warnings

    from agent.report.figures import trials_svg

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        text = trials_svg([], [], [], [], [], "max", "tok/s/GPU")
    assert text.startswith("<svg")


def test_harvest_hints_do_not_call_an_anchored_best_rank_only(ledger, tmp_path):
    """A best trial that is anchored above rank-only runners-up: the page said 'The best
    trials are rank-only' all the same."""
    data = json.loads(Path(ledger["ledger"]).read_text())
    best = ledger["best"]["index"]
    for trial in data["trials"]:
        if trial["configuration"]:
            trial["mode"] = "anchored" if trial["index"] == best else "rank-only"
    Path(ledger["ledger"]).write_text(json.dumps(data))
    out = tmp_path / "r.html"
    assert runner.invoke(app, ["report", ledger["ledger"], "-o", str(out)]).exit_code == 0
    text = out.read_text()
    assert "The best trial is anchored;" in text and "The best trials are rank-only" not in text
    data["best"] = None                          # no trial met the SLOs: no "best" is claimed
    Path(ledger["ledger"]).write_text(json.dumps(data))
    assert runner.invoke(app, ["report", ledger["ledger"], "-o", str(out)]).exit_code == 0
    text = out.read_text()
    assert "The best trial" not in text and "No trial met the SLOs; the first shown is anchored" in text


def test_rejections_that_differ_in_numbers_alone_are_one_row():
    """Sixteen KV-capacity rejections of one search differed only in token counts and were
    sixteen rows, each cut mid-word: one row now, counted, cut at a word."""
    from types import SimpleNamespace

    from agent.report.search import MAX_REASON_CHARS, _rejections

    def rejected(tokens: int, pool: int, rank: str = "colocated"):
        return SimpleNamespace(legal=False, rejected_by="prediction", reason=(
            f"cannot serve the workload: request 0 (106204 prompt + 126 output tokens) needs {tokens} KV tokens but "
            f"one {rank} rank's pool holds {pool:,} (accepted: a layout, KV dtype or memory fraction with a larger pool)"))

    trials = [rejected(106330 + i, 68719 - i) for i in range(16)] + [rejected(106204, 68719, "prefill")] * 2
    html = _rejections(SimpleNamespace(trials=trials))
    rows = re.findall(r"<tr><td[^>]*>(.*?)</td><td[^>]*>(\d+)</td></tr>", html)
    assert [int(count) for _, count in rows] == [16, 2], rows
    assert rows[0][0].endswith("... (numbers vary)") and len(rows[0][0]) <= MAX_REASON_CHARS + len(" ... (numbers vary)")
    assert "(numbers vary)" not in rows[1][0]
