"""`inferasim anchors list|show|check` (agent/cli/anchors.py)."""

import json

from typer.testing import CliRunner

from agent.cli.main import app
from predictor.anchors.anchor import DecodeSweep, Provenance, Signature
from predictor.anchors.store import AnchorStore, build_anchor, save_anchor, user_anchors_dir

runner = CliRunner()


def make_anchor(accelerator="MI355X", engine="sglang", tp=8, model="DeepSeek-R1"):
    sig = Signature(accelerator=accelerator, engine=engine, model=model, weight_dtype="fp8",
                    activation_dtype="fp8", expert_dtype="fp8", kv_cache_dtype="bf16", tp=tp)
    sweep = DecodeSweep(prompt_tokens=1024, batch_sizes=(1, 8, 64), itl_ms=(20.0, 22.0, 36.0))
    return build_anchor(sig, sweep, (1024, 4096, 8192), (90.0, 330.0, 800.0),
                        Provenance(source="test", timestamp="2025-06-01"))


def _user_rows(output: str) -> list[dict]:
    return [row for row in json.loads(output) if row["where"] == "user"]


def test_list_shows_user_anchors_as_json():
    anchor = make_anchor()
    save_anchor(anchor)
    result = runner.invoke(app, ["anchors", "list", "--json"])
    assert result.exit_code == 0, result.output
    rows = _user_rows(result.stdout)
    assert [row["id"] for row in rows] == [anchor.id]
    assert rows[0]["gpu"] == "MI355X" and rows[0]["widths"]["tp"] == 8 and rows[0]["source"] == "test"
    table = runner.invoke(app, ["anchors", "list"])
    assert table.exit_code == 0 and "MI355X" in table.stdout and "sglang" in table.stdout


def test_show_one_anchor_and_unknown_id():
    anchor = make_anchor()
    save_anchor(anchor)
    result = runner.invoke(app, ["anchors", "show", anchor.id, "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["anchor"]["id"] == anchor.id and data["where"] == "user"
    assert "TP8/EP1/DP1" in data["coverage"] and "decode batch 1..64" in data["coverage"]   # what it measured
    missing = runner.invoke(app, ["anchors", "show", "nope"])
    assert missing.exit_code == 2
    assert missing.stderr.startswith("error: anchor id: unknown anchor 'nope'")
    assert len(missing.stderr.strip().splitlines()) == 1


def test_show_prints_a_corpus_anchors_measured_steps_at_their_own_contexts():
    """The sweep summary of a corpus anchor filled its cells across contexts (DeepSeek-R1
    DEP8 on H200 read 42.8 ms at batch 112 at 1,536 and 8,704 tokens alike); the points
    the calibration is fitted to are shown instead, each at its context."""
    anchor = next(a for a in AnchorStore.default().all() if a.id.startswith("h200-trtllm-deepseek-r1-fp8-tp8ep8dp8"))
    text = " ".join(runner.invoke(app, ["anchors", "show", anchor.id], terminal_width=200).stdout.split())
    assert "measured decode steps" in text and "single-wave" not in text
    assert "its own layout prices the reproduced ones" in text
    for point in anchor.decode_points:     # a point no pass could read shows none
        shown = "-" if point.reproduced_ms is None else f"{point.reproduced_ms:.1f}"
        assert f"{point.batch} {point.context_tokens:,} {point.step_ms:.1f} {shown}" in text
    assert any(p.reproduced_ms is None for p in anchor.decode_points)
    assert any(p.reproduced_ms is not None for p in anchor.decode_points)


def test_check_bad_file_is_one_line_exit_2(tmp_path):
    good = tmp_path / "good.json"
    good.write_text(make_anchor().model_dump_json())
    bad = tmp_path / "bad.json"
    data = make_anchor().model_dump(mode="json")
    data["signature"]["tp"] = "eight"
    bad.write_text(json.dumps(data))
    ok = runner.invoke(app, ["anchors", "check", str(good), "--json"])
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.stdout)[0]["status"] == "ok"
    result = runner.invoke(app, ["anchors", "check", str(bad)])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "bad.json" in lines[0] and "signature.tp" in lines[0]
    assert "Traceback" not in result.output
    assert result.stdout.strip() == ""      # not also "No anchors to check."


def test_check_of_many_bad_files_says_twenty_then_counts(tmp_path):
    """2,000 missing files printed 2,000 error lines; the first twenty are said, then a count."""
    from agent.cli.anchors import MAX_ERROR_LINES

    result = runner.invoke(app, ["anchors", "check", *(str(tmp_path / f"nf{i}.json") for i in range(60))])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == MAX_ERROR_LINES + 1 and lines[-1].startswith("error: ... and 40 more (60 in all")


def test_check_store_reports_foreign_and_broken_anchors():
    save_anchor(make_anchor())
    save_anchor(make_anchor(accelerator="H100"))
    save_anchor(make_anchor(accelerator="TPU9"))
    result = runner.invoke(app, ["anchors", "check", "--cluster", "mi355x", "--json"])
    assert result.exit_code == 2, result.output     # TPU9 is unusable; a foreign anchor alone is not an error
    reports = {r["id"]: r for r in json.loads(result.stdout) if r["where"] == "user"}
    statuses = sorted((r["id"].split("-")[0], r["status"]) for r in reports.values())
    assert statuses == [("h100", "refused"), ("mi355x", "ok"), ("tpu9", "refused")]
    h100 = next(r for r in reports.values() if r["id"].startswith("h100"))
    assert any("foreign" in reason for reason in h100["reasons"])
    (user_anchors_dir() / "junk.json").write_text("[]")
    broken = runner.invoke(app, ["anchors", "check"])
    assert broken.exit_code == 2 and "junk.json" in broken.stderr


def test_check_exits_2_on_refused_anchors_but_not_on_foreign_ones(tmp_path):
    save_anchor(make_anchor(accelerator="H100"))
    foreign = runner.invoke(app, ["anchors", "check", "--cluster", "mi355x"])
    assert foreign.exit_code == 0, foreign.output
    for broken, reason in ((make_anchor(engine="tgi"), "unknown engine 'tgi'"),
                           (make_anchor(model="no-such-model"), "unknown model 'no-such-model'")):
        path = tmp_path / f"{broken.id}.json"
        path.write_text(broken.model_dump_json())
        result = runner.invoke(app, ["anchors", "check", str(path)])
        assert result.exit_code == 2 and reason in result.stderr, result.output
    versioned = make_anchor().model_copy(update={"schema_version": 7})
    path = tmp_path / "v7.json"
    path.write_text(versioned.model_dump_json())
    result = runner.invoke(app, ["anchors", "check", str(path)])
    assert result.exit_code == 2 and "unknown schema version 7 (this build reads 1)" in result.stderr
