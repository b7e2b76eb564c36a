"""`inferasim score` through the CLI runner: JSON keys, rendering, bad input (PRODUCT.md §6)."""

import json
import time
from pathlib import Path

from typer.testing import CliRunner

from agent.cli.main import app
from agent.cli.score import protocol_table
from tests.fixtures.corpus_edits import native_with_fast_row

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "corpus"
runner = CliRunner()


def test_score_json_on_a_native_corpus():
    result = runner.invoke(app, ["score", str(FIXTURES / "native_small.csv"), "--format", "native", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    for key in ("n_rows", "n_scored", "ttft_median_ape", "tpot_median_ape", "throughput_median_ape",
                "pair_accuracy", "per_model", "per_chart"):
        assert key in data
    assert data["n_rows"] == 10 and data["n_scored"] == 4 and data["format"] == "native"
    assert data["tpot_median_ape"] < 3.0                     # a synthetic steady state: interpolation is tight
    chart = next(iter(data["per_chart"].values()))
    assert {"tpot_median_ape", "pair_accuracy", "n"} <= set(chart)


def test_score_table_and_auto_format_on_inferencex_rows():
    result = runner.invoke(app, ["score", str(FIXTURES / "inferencex_small.csv")])
    assert result.exit_code == 0, result.output
    assert "Score of" in result.stdout and "Failed rows by reason" in result.stdout
    assert "matches no model card" in result.stdout


def test_score_json_reports_unmappable_rows():
    result = runner.invoke(app, ["score", str(FIXTURES / "aiconfigurator_small.csv"), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["format"] == "aiconfigurator"
    reasons = data["failures"]["by_reason"]
    assert any("worker counts" in reason for reason in reasons)
    assert data["n_rows"] == data["n_anchor_rows"] + data["n_scored"] + data["n_rank_only"] + data["n_failed"]


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    missing_columns = tmp_path / "bad.csv"
    missing_columns.write_text("model,hardware\ngpt-oss-120b,h100\n")
    cases = [
        (["score", str(tmp_path / "nope.csv")], "cannot be read"),
        (["score", str(missing_columns), "--format", "native"], "missing required column"),
        (["score", str(FIXTURES / "native_small.csv"), "--format", "xlsx"], "unknown corpus format"),
        (["score", str(FIXTURES / "native_small.csv"), "--anchor-where", "tp>>2"], "--anchor-where"),
        (["score", str(FIXTURES / "native_small.csv"), "--protocol", "in-ladder", "--anchor-where", "tp=2"],
         "--anchor-where: cannot be combined with --protocol"),
        (["score", str(FIXTURES / "native_small.csv"), "--protocol", "in-ladder,,"], "holds an empty item"),
        (["score", str(FIXTURES / "native_small.csv"), "--protocol", ","], "holds an empty item"),
    ]
    for args, message in cases:
        result = runner.invoke(app, args)
        assert result.exit_code == 2, (args, result.output)
        assert message in result.stderr and "Traceback" not in result.output


def test_non_physical_rows_fail_with_their_reason_and_empty_selections_are_errors(tmp_path):
    text = (FIXTURES / "native_small.csv").read_text()
    header, first, *_ = text.splitlines()
    columns = header.split(",")
    hostile = dict(zip(columns, first.split(",")))
    hostile["isl"] = "1e300"
    corpus = tmp_path / "hostile.csv"
    corpus.write_text(text.rstrip("\n") + "\n" + ",".join(hostile[c] for c in columns) + "\n")
    started = time.perf_counter()
    result = runner.invoke(app, ["score", str(corpus), "--json"])
    assert result.exit_code == 0, result.output
    assert time.perf_counter() - started < 60
    reasons = json.loads(result.stdout)["failures"]["by_reason"]
    assert any("isl='1e300' is not a whole number from 0 to 16,777,216" in reason for reason in reasons), reasons
    header_only = tmp_path / "header.csv"
    header_only.write_text(header + "\n")
    empty = runner.invoke(app, ["score", str(header_only)])
    assert empty.exit_code == 2 and "has a header but no rows" in empty.stderr
    nothing = runner.invoke(app, ["score", str(FIXTURES / "native_small.csv"), "--anchor-where", "tp=="])
    assert nothing.exit_code == 2 and "--anchor-where: 'tp==' matches none of the" in nothing.stderr
    everything = runner.invoke(app, ["score", str(FIXTURES / "native_small.csv"), "--anchor-where", "pp=1"])
    assert everything.exit_code == 2
    assert everything.exit_code == 2 and "matches all" in everything.stderr and "no row is left" in everything.stderr


def test_score_by_protocol_names_absurd_predictions_on_rows_that_contradict_their_chart(tmp_path):
    path, fast = native_with_fast_row(tmp_path, 6.0)
    table = runner.invoke(app, ["score", str(path), "--format", "native", "--protocol", "load"])
    assert table.exit_code == 0, table.output
    assert "by protocol" in table.stdout
    result = runner.invoke(app, ["score", str(path), "--format", "native", "--protocol", "load", "--json"])
    assert result.exit_code == 0, result.output
    line = json.loads(result.stdout)["protocols"][0]
    named = [r for r in line["absurd_rows"] if r["id"] == fast]
    assert named and "faster than" in named[0]["chart_contradiction"]
    cell = protocol_table(json.loads(result.stdout)).columns[-1]._cells[0]
    assert cell == f"{sum(line['absurd'].values())} ({sum(line['absurd_on_contradicting_rows'].values())})"
    assert line["absurd_on_contradicting_rows"]["tpot"] >= 1


def test_score_by_protocol_counts_the_rows_no_protocol_could_use(tmp_path):
    """A row that cannot be read (a TPOT of 'abc') was in no protocol's count and no line
    said so: the JSON's `read` and the line under the table count it."""
    rows = (FIXTURES / "native_small.csv").read_text().splitlines()
    header = rows[0].split(",")
    broken = rows[1].split(",")
    broken[header.index("tpot_ms")] = "abc"
    path = tmp_path / "broken.csv"
    path.write_text("\n".join([rows[0], ",".join(broken), *rows[2:]]) + "\n")
    data = json.loads(runner.invoke(app, ["score", str(path), "--format", "native", "--protocol", "none",
                                          "--json"]).stdout)
    assert data["read"]["rows"] == len(rows) - 1 and data["read"]["usable"] == len(rows) - 2
    text = runner.invoke(app, ["score", str(path), "--format", "native", "--protocol", "none"],
                         terminal_width=200).stdout
    assert f"{len(rows) - 1} rows read, {len(rows) - 2} usable by the protocols; not usable: 1 " in " ".join(text.split())


def test_a_protocol_named_twice_is_scored_once():
    from predictor.corpus.protocol_score import parse_protocols

    assert parse_protocols("in-ladder,load,in-ladder") == ("in-ladder", "load")
    assert len(parse_protocols("all,in-ladder")) == len(set(parse_protocols("all")))
