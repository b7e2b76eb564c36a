"""`inferasim tune` and `inferasim ledger ...` through the CLI runner (fake predictor)."""

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

import agent.question
from agent.cli.main import app
from ledgers.lock import LedgerLock
from tests.agent.tune_fakes import FakePredictor

runner = CliRunner()
QWEN = ["--model", "qwen3-30b-a3b", "--workload", "1k/1k"]


@pytest.fixture(autouse=True)
def fake_predictor(monkeypatch):
    predictor = FakePredictor()
    monkeypatch.setattr(agent.question, "predict", predictor)
    return predictor


def invoke(*args):
    return runner.invoke(app, ["tune", *args])


def test_tune_prints_the_table_the_ledger_and_the_no_lm_line():
    result = invoke(*QWEN, "--budget", "20", "--top", "3")
    assert result.exit_code == 0, result.output
    assert "throughput_per_gpu (max)" in result.output
    assert "LLM phase: no LM configured (set --lm or INFERASIM_LM): seed phase only" in result.output
    assert "Ledger:\n  " in result.output and "trials/s" in result.output


def test_tune_json_has_the_documented_keys():
    result = invoke(*QWEN, "--budget", "15", "--slo", "tpot<=20", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert {"best", "top", "ledger", "num_trials", "stop_reason", "lm"} <= set(data)
    assert data["best"]["legal"] and data["best"]["slo_met"] is True and data["lm"] is None
    assert data["top"][0] == data["best"] and data["num_trials"] <= 15


def test_no_trial_meeting_the_slos_is_exit_1_with_nearest_misses():
    result = invoke(*QWEN, "--budget", "10", "--slo", "tpot<=1", "--json")
    assert result.exit_code == 1
    data = json.loads(result.output)
    assert data["best"] is None and data["nearest_misses"]
    distances = [t["miss_distance"] for t in data["nearest_misses"]]
    assert distances == sorted(distances)


def test_rank_only_best_says_compliance_is_unverified_and_prints_harvest_lines():
    result = invoke("--model", "kimi-k3", "--workload", "1k/1k", "--budget", "8", "--slo", "tpot<=50")
    assert result.exit_code == 0, result.output
    assert "compliance is unverified" in result.output
    assert "inferasim harvest --engine vllm --model Kimi-K3 --cluster mi355x --config tp=8,pp=1,ep=1" in result.output


@pytest.mark.parametrize("args, message", [
    (["--budget", "5", "--slo", "p90itl=25"], "--slo: cannot parse 'p90itl=25'"),
    (["--budget", "0"], "--budget: 0 is out of range"),
    (["--budget", "5", "--lm", "gpt4"], "--lm: 'gpt4' is not a LiteLLM model string"),
    (["--budget", "5", "--precisions", "int3"], "--precisions: unknown precision 'int3'"),
])
def test_bad_input_is_one_line_and_exit_2(args, message):
    result = invoke(*QWEN, *args)
    assert result.exit_code == 2
    assert result.output.strip().startswith(f"error: {message}")
    assert "Traceback" not in result.output


def test_missing_model_is_exit_2():
    result = invoke("--budget", "5")
    assert result.exit_code == 2 and "--model: a model is required" in result.output


def test_ledger_commands_review_persisted_searches():
    first = json.loads(invoke(*QWEN, "--budget", "12", "--json").output)["ledger"]
    second = json.loads(invoke(*QWEN, "--budget", "12", "--slo", "tpot<=1", "--json").output)["ledger"]
    listed = json.loads(runner.invoke(app, ["ledger", "list", "--json"]).output)
    assert [row["path"] for row in listed] == [first, second]
    shown = json.loads(runner.invoke(app, ["ledger", "show", first, "--json"]).output)
    assert shown["question"]["model"] == "Qwen3-30B-A3B" and shown["top"]
    best = runner.invoke(app, ["ledger", "best", first, "--json"])
    assert best.exit_code == 0 and json.loads(best.output)["legal"]
    record = json.loads(best.output)
    told = runner.invoke(app, ["ledger", "best", first], terminal_width=200).output
    if record["source"] == "des":     # how to re-price it as recorded
        assert f"predict --requests {record['des_requests']} --replications {record['replications']}" in told
    else:
        assert f"priced by: the {record['source']} model" in told
    assert runner.invoke(app, ["ledger", "best", second]).exit_code == 1
    compared = json.loads(runner.invoke(app, ["ledger", "compare", first, second, "--json"]).output)
    assert compared["question"]["slos"] == [[], ["mean-tpot<=1ms"]] and not compared["same_question"]
    assert runner.invoke(app, ["ledger", "show", "no-such-ledger"]).exit_code == 2
    listing = runner.invoke(app, ["ledger", "list"]).output
    assert all(Path(path).stem in listing.splitlines() for path in (first, second))
    # the confirm step's re-pricings come on top of the budget: said so, not "N/12"
    assert f"{listed[0]['num_trials']} trials (budget 12)" in listing and "/12 trials" not in listing


def test_resume_through_the_cli_extends_the_budget():
    first = json.loads(invoke(*QWEN, "--budget", "6", "--json").output)
    before = Path(first["ledger"]).read_bytes()
    again = json.loads(invoke("--resume", first["ledger"], "--json").output)    # finished, same budget: a replay
    assert again["num_trials"] == 6 and again["best"] == first["best"]
    assert Path(first["ledger"]).read_bytes() == before                        # nothing priced: left as it was
    resumed = json.loads(invoke("--resume", first["ledger"], "--budget", "10", "--json").output)
    assert resumed["ledger"] == first["ledger"] and resumed["num_trials"] == 10
    assert resumed["warnings"] == []


def test_resume_says_which_options_the_ledgers_question_overrides():
    first = json.loads(invoke(*QWEN, "--budget", "4", "--json").output)
    same = json.loads(invoke(*QWEN, "--resume", first["ledger"], "--budget", "5", "--json").output)
    assert same["warnings"] == []                                  # the ledger's own question, as typed
    other = json.loads(invoke("--model", "kimi-k3", "--objective", "ttft", "--resume", first["ledger"],
                              "--budget", "6", "--json").output)
    assert other["num_trials"] == 6 and len(other["warnings"]) == 1
    warning = other["warnings"][0]
    assert warning.startswith("--resume continues the ledger's question; ignored: --model 'kimi-k3'")
    assert "--objective" in warning and "--slo" not in warning
    fewer = json.loads(invoke("--precisions", "bf16", "--resume", first["ledger"], "--budget", "2", "--json").output)
    assert fewer["num_trials"] == 6
    assert any("--precisions 'bf16'" in w for w in fewer["warnings"])
    assert any(w.startswith("--budget 2 is below the 6 trials the ledger already spent") for w in fewer["warnings"])
    seeded = json.loads(invoke("--seed", "5", "--des-requests", "100", "--resume", first["ledger"], "--budget", "6",
                               "--json").output)
    assert any("--seed 5 (the ledger's: 0)" in w and "--des-requests 100 (the ledger's: 'none')" in w
               for w in seeded["warnings"]), seeded["warnings"]
    # another spelling of the same question is no override; the default objective, given, is
    spelled = json.loads(invoke("--cluster", "mi355xx8", "--workload", "1024/1024", "--resume", first["ledger"],
                                "--budget", "6", "--json").output)
    assert spelled["warnings"] == []
    ttft = json.loads(invoke(*QWEN, "--objective", "ttft", "--budget", "2", "--json").output)
    given = json.loads(invoke("--objective", "throughput", "--resume", ttft["ledger"], "--budget", "2",
                              "--json").output)
    assert any("--objective" in w for w in given["warnings"]), given["warnings"]


def test_the_trial_table_never_cuts_a_number():
    """Confirm rows carry an interval on every metric (wide ones when SLOs miss by far):
    each interval sits under its value and the words wrap, so no cell ends in an ellipsis."""
    result = runner.invoke(app, ["tune", "--model", "llama-3.1-8b", "--cluster", "h100x1", "--slo", "p99-ttft<=1ms",
                                 "--budget", "15", "--no-llm"], terminal_width=120)
    assert result.exit_code == 1 and "…" not in result.output
    assert re.search(r"^ +\d+ +confirm #\d+ +[\d.,]+ ", result.output, re.M)      # the trial number is whole


@pytest.mark.parametrize("options, words", [
    (("--lm", "openai/gpt-4o-mini", "--no-llm"), "--no-llm: given with --lm"),
    (("--lm-from-ledger",), "--lm-from-ledger: needs --resume"),
    (("--lm-base-url", "http://127.0.0.1:1/v1"), "--lm-base-url: given without an LM"),
])
def test_contradictory_lm_options_are_refused(monkeypatch, options, words):
    monkeypatch.delenv("INFERASIM_LM", raising=False)
    result = invoke(*QWEN, "--budget", "3", *options)
    assert result.exit_code == 2 and words in result.stderr


@pytest.mark.parametrize("args, what", [
    (["--no-llm", "--guidance", "use tp"], "--no-llm"),
    (["--no-llm", "--lm-json-schema"], "--no-llm"),
    (["--no-llm", "--lm-timeout", "5"], "--no-llm"),
    (["--des-requests", "5"], "--des-requests"),     # predict's floor: fewer replay warm-up alone
])
def test_options_nothing_would_read_are_refused(args, what):
    result = CliRunner().invoke(app, ["tune", "--model", "llama-3.1-8b", "--cluster", "h100x8", "--budget", "5", *args])
    assert result.exit_code == 2 and f"error: {what}" in result.output, result.output


def test_ledger_show_ranks_as_tune_does_the_best_then_the_confirmed():
    """`ledger show` sorted every trial by its objective, so a bounded search trial priced
    above the confirmed answer led its table while `ledger best` named another."""
    data = json.loads(invoke(*QWEN, "--budget", "15", "--slo", "p90-itl<=200", "--json").output)
    shown = json.loads(runner.invoke(app, ["ledger", "show", data["ledger"], "--json", "--top", "50"]).output)["top"]
    assert shown[0]["index"] == data["best"]["index"]
    phases = [t["phase"] for t in shown if t["slo_met"]]
    if "confirm" in phases:
        assert phases == sorted(phases, key=lambda phase: phase != "confirm")     # confirmed ones first


def test_ledger_best_of_an_unfinished_search_says_so_and_show_names_no_stop():
    """An unfinished search's best is the best so far of its full-fidelity trials, not yet
    re-priced over replications: `ledger best` says so as `deploy` does, and `ledger show`
    says no stop was recorded (it printed 'stop: None'). A search no process writes any
    more (Ctrl-C, killed) reads 'interrupted' with how to resume it; one whose lock a live
    process holds reads 'running' (`ledger list` read 'running' for good after a Ctrl-C)."""
    path = Path(json.loads(invoke(*QWEN, "--budget", "12", "--json").output)["ledger"])
    finished = runner.invoke(app, ["ledger", "best", str(path)], terminal_width=300).output
    assert "unfinished" not in finished
    data = json.loads(path.read_text())
    data["status"], data["stop_reason"] = "running", None
    path.write_text(json.dumps(data))
    best = runner.invoke(app, ["ledger", "best", str(path)], terminal_width=300)
    said = " ".join(best.output.split())
    assert best.exit_code == 0 and f"(best so far of an unfinished search (interrupted; tune --resume {path}" in said
    assert "re-priced over replications" not in said         # an analytical search has no confirm step
    data["trials"][data["best"]["index"]]["source"] = "des"    # a DES search's has
    path.write_text(json.dumps(data))
    said = " ".join(runner.invoke(app, ["ledger", "best", str(path)], terminal_width=300).output.split())
    assert "among the trials priced at full fidelity, not yet re-priced over replications" in said
    shown = " ".join(runner.invoke(app, ["ledger", "show", str(path)], terminal_width=300).output.split())
    assert "stop: none recorded (the search is interrupted)" in shown and "stop: None" not in shown
    listed = json.loads(runner.invoke(app, ["ledger", "list", "--json"]).output)
    assert {row["search_id"]: row["status"] for row in listed}[data["search_id"]] == "interrupted"
    with LedgerLock(path):                  # a live search writing it
        shown = " ".join(runner.invoke(app, ["ledger", "show", str(path)], terminal_width=300).output.split())
        assert "stop: none recorded (the search is running)" in shown
        assert "(still running)" in " ".join(runner.invoke(app, ["ledger", "best", str(path)],
                                                           terminal_width=300).output.split())
