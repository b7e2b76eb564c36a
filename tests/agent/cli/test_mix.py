"""`inferasim plan-mix` (and the `plan-mix` console script): report, tables, bad files.

Bad files are rejected with one line naming the file, the key path and what is
accepted (exit 2), before anything is priced. The last test runs the real predictor
(the DES) on a two-candidate plan.
"""

import json

import pytest
from typer.testing import CliRunner

import agent.cli.mix
import agent.mix.planner
from agent.cli.main import app, plan_mix_main
from tests.agent.mix.test_planner import GPT_OSS_CANDIDATES, fake_predict

runner = CliRunner()


@pytest.fixture
def fake_predictor(monkeypatch):
    monkeypatch.setattr(agent.mix.planner, "default_predict_fn", lambda: fake_predict)


@pytest.fixture
def models_yaml(tmp_path):
    path = tmp_path / "models.yaml"
    path.write_text(GPT_OSS_CANDIDATES)
    return path


def test_json_report_on_stdout_and_in_out_file(fake_predictor, models_yaml, tmp_path, isolated_home):
    out = tmp_path / "plan.json"
    result = runner.invoke(app, ["plan-mix", str(models_yaml), "--json", "--workers", "1", "--out", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert json.loads(out.read_text()) == data
    assert data["candidates_evaluated"] == 5 and data["wall_s"] >= 0
    assert [slot["tier"] for slot in data["slots"]] == ["realtime", "interactive", "responsive", "bulk"]
    interactive = data["slots"][1]
    assert interactive["met"] and interactive["pick"]["disaggregated"]
    assert interactive["pick"]["output_throughput_per_gpu"] == pytest.approx(1500.0, abs=1e-9)
    assert len(interactive["short_list"]) == 4  # the four candidates under 1.25 s and over 70 tok/s
    assert data["settings"] == {"seed": 0, "max_requests": 1024, "workers": 1, "replications": 3}
    (ledger,) = data["ledgers"]
    assert ledger.startswith(str(isolated_home / "ledgers"))


def test_illegal_candidates_are_counted_with_their_reasons(fake_predictor, tmp_path):
    path = tmp_path / "models.yaml"
    path.write_text(GPT_OSS_CANDIDATES + "      - {tp: 2, attention_dp: 4, concurrency: 4}\n"
                    "      - {tp: 1, attention_dp: 2, concurrency: 8}\n")
    result = runner.invoke(app, ["plan-mix", str(path), "--workers", "1", "--json"])
    assert result.exit_code == 0, result.output
    (entry,) = json.loads(result.stdout)["entries"]
    assert (entry["candidates"], entry["illegal"]) == (7, 2)
    assert sum(r["count"] for r in entry["illegal_reasons"]) == 2
    assert all(r["reason"].startswith("structure: ") for r in entry["illegal_reasons"])
    text = runner.invoke(app, ["plan-mix", str(path), "--workers", "1"], terminal_width=200).stdout
    assert "gpt-oss-120b: 2 of 7 candidates illegal: structure: " in text


def test_tables_show_each_tier_and_the_nearest_miss(fake_predictor, tmp_path):
    path = tmp_path / "models.yaml"
    path.write_text(GPT_OSS_CANDIDATES.replace("max_gpus: 8", "max_gpus: 8\n    tiers: [realtime, bulk, strict]")
                    + "tiers:\n  strict: {interactivity: 500, ttft_s: 0.2}\n")
    result = runner.invoke(app, ["plan-mix", str(path), "--workers", "1"], terminal_width=200)
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert "realtime: interactivity p50 >= 150 tok/s, TTFT mean <= 1 s (qualify at half)" in text
    assert "bulk: no latency bound (best throughput)" in text
    assert "strict / gpt-oss-120b: nothing meets the tier; nearest miss tp=2, replicas=4, concurrency=4: " in text
    assert "5 candidates evaluated (5 legal)" in text and "rank-only picks (gpt-oss-120b)" in text


def test_a_rank_only_pick_among_engines_says_the_engines_were_compared_on_priors(fake_predictor, tmp_path):
    """README: rank-only numbers rank candidates within one engine; a pick among two
    engines on them says so, once per entry, naming its tiers."""
    path = tmp_path / "models.yaml"
    path.write_text(GPT_OSS_CANDIDATES.replace("max_gpus: 8", "max_gpus: 8\n    engines: [vllm, sglang]"))
    result = runner.invoke(app, ["plan-mix", str(path), "--workers", "1"], terminal_width=300)
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stdout.splitlines() if "rank-only picks among" in line]
    assert len(lines) == 1 and lines[0].startswith("gpt-oss-120b: rank-only picks among vllm, sglang (realtime")
    path.write_text(GPT_OSS_CANDIDATES)
    assert "rank-only picks among" not in runner.invoke(app, ["plan-mix", str(path), "--workers", "1"],
                                                          terminal_width=300).stdout


@pytest.mark.parametrize("text, expected", [
    ("models:\n  - name: kimi-k3\n    tiers: [realtime\n", "models.yaml: malformed YAML at line 4"),
    ("models:\n  - name: gpt-oss-120b\n  - name: llama-9000\n",
     "models.yaml: models[1].name: unknown model 'llama-9000'"),
    ("models: [{name: kimi-k3}]\ntiers:\n  bulk: {interactivity: 1, latency: 3}\n",
     "models.yaml: tiers.bulk.latency: unknown key 'latency' (accepted: keys interactivity, ttft_s,"),
    ("models:\n  - name: kimi-k3\n    tiers: [gold]\n",
     "models.yaml: models[0].tiers[0]: unknown tier 'gold' (accepted: realtime, interactive, responsive, bulk)"),
    ("models:\n  - name: kimi-k3\n    max_gpus: -8\n",
     ("models.yaml: models[0].max_gpus: Input should be greater than or equal to 1 (got -8) "
      "(accepted: a positive integer (GPUs per deployment))")),
])
def test_bad_files_are_rejected_before_anything_runs(monkeypatch, tmp_path, isolated_home, text, expected):
    monkeypatch.setattr(agent.cli.mix, "plan_mix", lambda *a, **k: pytest.fail("planned a bad file"))
    path = tmp_path / "models.yaml"
    path.write_text(text)
    result = runner.invoke(app, ["plan-mix", str(path)])
    assert result.exit_code == 2
    assert result.stdout == ""
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"error: {path}"), line
    assert expected.removeprefix("models.yaml") in line
    assert not (isolated_home / "ledgers").exists()


def test_plan_mix_console_script(fake_predictor, models_yaml, monkeypatch, capsys):
    monkeypatch.setattr("sys.argv", ["plan-mix", str(models_yaml), "--json", "--workers", "1"])
    with pytest.raises(SystemExit) as stopped:
        plan_mix_main()
    assert stopped.value.code == 0
    assert json.loads(capsys.readouterr().out)["candidates_evaluated"] == 5


def test_real_predictor_prices_with_the_des(tmp_path):
    path = tmp_path / "models.yaml"
    path.write_text("models:\n  - name: gpt-oss-120b\n    engines: [vllm]\n    candidates:\n"
                    "      - {tp: 1, replicas: 8, concurrency: 8}\n"
                    "      - {disaggregated: true, prefill_layout: TP1, decode_layout: TP1, concurrency: 8}\n")
    result = runner.invoke(app, ["plan-mix", str(path), "--json", "--workers", "2", "--requests", "16"])
    assert result.exit_code in (0, 1), result.output
    data = json.loads(result.stdout)
    assert data["candidates_evaluated"] == 2 == data["candidates_legal"]
    bulk = data["slots"][3]
    assert bulk["tier"] == "bulk" and bulk["met"]
    assert {entry["source"] for entry in bulk["short_list"]} == {"des"}
    assert {entry["disaggregated"] for entry in bulk["short_list"]} == {False, True}
    assert all(entry["output_throughput_per_gpu"] > 0 and entry["ttft_s"] > 0 for entry in bulk["short_list"])


def test_a_model_that_does_not_fit_its_gpu_budget_names_max_gpus(tmp_path, isolated_home):
    path = tmp_path / "models.yaml"
    path.write_text("models:\n  - name: kimi-k3\n    max_gpus: 4\n")
    result = runner.invoke(app, ["plan-mix", str(path), "--workers", "1"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    (line,) = result.stderr.strip().splitlines()
    assert f"{path}: models[0].max_gpus: Kimi-K3 does not fit" in line and "(its 4 GPUs of mi355x)" in line
    assert "(accepted: a larger max_gpus, or none (the whole cluster))" in line


def test_a_table_interval_held_at_zero_is_shown_as_it_is():
    from agent.cli.mix import _stacked
    assert _stacked(18.5, [0.0, 69.78]) == "18.5\n-100/+277%"      # not ±189%: no negative lower end
    assert _stacked(100.0, [98.0, 102.0]) == "100\n±2%" and _stacked(100.0, [99.5, 100.5]) == "100\n±0.5%"
    assert _stacked(100.0, [96.2, 104.1]) == "100\n±4%"               # a factor either side: sides alike as shown
    assert _stacked(100.0, [80.0, 134.0]) == "100\n-20/+34%"


def test_a_model_listed_twice_is_told_apart_by_its_entry(fake_predictor, tmp_path):
    path = tmp_path / "models.yaml"
    path.write_text("models:\n  - name: gpt-oss-120b\n    tiers: [bulk]\n    candidates: [{tp: 8, concurrency: 4}]\n"
                    "  - name: gpt-oss-120b\n    tiers: [bulk]\n    candidates: [{tp: 8, concurrency: 64}]\n")
    result = runner.invoke(app, ["plan-mix", str(path), "--workers", "1"], terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "gpt-oss-120b#0" in result.stdout and "gpt-oss-120b#1" in result.stdout
    assert "Deploy gpt-oss-120b/bulk#0" in result.stdout and "Deploy gpt-oss-120b/bulk#1" in result.stdout


def test_a_model_too_big_for_the_whole_cluster_blames_the_cluster_not_max_gpus(tmp_path, isolated_home):
    path = tmp_path / "models.yaml"
    path.write_text("models:\n  - name: kimi-k3\n    cluster: h100\n    max_gpus: 4\n")
    result = runner.invoke(app, ["plan-mix", str(path), "--workers", "1"])
    assert result.exit_code == 2
    assert "models[0]: Kimi-K3 does not fit on h100 " in result.stderr and "max_gpus" not in result.stderr


def test_a_pick_priced_by_a_replay_too_short_says_so_in_the_text(monkeypatch, models_yaml):
    """`--requests 200` at 144 clients measured warm-up only (11.6 tok/s/GPU against 75.7
    with 2,000): the flag was in --json only and the table read as a result."""
    import dataclasses

    def short(*args, **kwargs):
        found = fake_predict(*args, **kwargs)
        return dataclasses.replace(found, flags=(*found.flags, "warm-up only: no request finished after the "
                                                 "warm-up in 1 of 1 replication(s), so their figures are the "
                                                 "warm-up's (replay more requests)"))

    monkeypatch.setattr(agent.mix.planner, "default_predict_fn", lambda: short)
    result = runner.invoke(app, ["plan-mix", str(models_yaml), "--workers", "1"], terminal_width=250)
    assert result.exit_code == 0, result.output
    assert "gpt-oss-120b: warm-up only: no request finished" in result.stdout
    assert "raise --requests" in result.stdout
