"""`inferasim simulate` driven through the CLI runner, with the fake step model."""

import csv
import json
from pathlib import Path

import jsonschema
import pytest
from typer.testing import CliRunner

from agent.cli import simulate as commands_simulate
from agent.cli.main import app
from agent.cli.output_schemas import SCHEMA_DIR
from tests.predictor.sim.sim_fakes import fake_factory

runner = CliRunner()
REAL_FACTORY = commands_simulate.step_model_factory_for
BASE = ["simulate", "--model", "llama-3.1-8b", "--cluster", "h100x1", "--engine", "vllm"]


@pytest.fixture(autouse=True)
def fake_step_model(monkeypatch):
    monkeypatch.setattr(commands_simulate, "step_model_factory_for", lambda target: fake_factory())


def invoke(*args):
    return runner.invoke(app, [*BASE, *args])


def test_json_has_the_distributions_and_rates():
    result = invoke("--workload", "1k/1k", "--concurrency", "8", "--requests", "40", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    for name in ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms"):
        assert set(data[name]) >= {"mean", "p50", "p90", "p99"}
        assert data[name]["p99"] >= data[name]["p50"] > 0
    for key in ("throughput_per_gpu", "output_throughput_per_gpu", "num_requests", "sim_wall_s"):
        assert data[key] > 0
    assert set(data["hit_rate"]) == {"overall", "per_replica", "per_tier", "host_tier"}
    assert data["configuration_text"] == "concurrency=8" and data["modes"] == ["rank-only"]


def test_config_repeats_merge_left_to_right_and_flags_override():
    result = invoke("--config", "concurrency=16,max_running_requests=64", "--config", "concurrency=8",
                    "--requests", "16", "--json")
    assert json.loads(result.stdout)["configuration_text"] == "max_running_requests=64,concurrency=8"
    result = invoke("--config", "concurrency=16", "--concurrency", "4", "--workload", "256/16", "--json")
    assert json.loads(result.stdout)["configuration_text"] == "concurrency=4"


def test_a_bad_trace_line_exits_2_with_its_line_number(tmp_path):
    trace = tmp_path / "t.jsonl"
    good = {"timestamp": 0, "input_length": 512, "output_length": 8, "hash_ids": [1, 2, 3, 4, 5, 6, 7, 8]}
    trace.write_text(json.dumps(good) + "\n" + '{"timestamp": 5, "input_length": "many"}\n')
    result = invoke("--trace", str(trace), "--json")
    assert result.exit_code == 2
    assert "t.jsonl line 2: input_length" in result.stderr and "Traceback" not in result.output
    skipped = invoke("--trace", str(trace), "--skip-bad-lines", "--json")
    assert skipped.exit_code == 0, skipped.output
    data = json.loads(skipped.stdout)
    assert data["bad_lines_skipped"] == 1 and data["num_requests"] == 1


def test_csv_has_one_row_per_request(tmp_path):
    path = tmp_path / "requests.csv"
    result = invoke("--workload", "512/32", "--concurrency", "4", "--requests", "12", "--csv", str(path), "--json")
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(path.open()))
    assert len(rows) == 12 and float(rows[-1]["ttft_ms"]) > 0
    nested = tmp_path / "new" / "folder" / "requests.csv"     # the option's own promise: its folder is created
    again = invoke("--workload", "512/32", "--concurrency", "4", "--requests", "12", "--csv", str(nested), "--json")
    assert again.exit_code == 0, again.output
    assert len(list(csv.DictReader(nested.open()))) == 12 and not list(nested.parent.glob(".*.tmp"))


def test_workload_and_trace_together_are_refused(tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text("")
    result = invoke("--workload", "1k/1k", "--trace", str(trace))
    assert result.exit_code == 2 and "not both" in result.stderr


def test_concurrency_is_refused_on_an_open_loop_trace(tmp_path):
    """Its timestamps set the load: --concurrency changed no figure, only the mode judged at it."""
    trace = tmp_path / "lengths.csv"
    trace.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0.0,100,10\n0.5,200,20\n")
    assert invoke("--trace", str(trace), "--json").exit_code == 0
    result = invoke("--trace", str(trace), "--concurrency", "1")
    assert result.exit_code == 2 and "--concurrency: does not apply to lengths.csv, an open-loop trace" in result.stderr
    lever = invoke("--trace", str(trace), "--config", "concurrency=2")     # the lever was accepted and ignored
    assert lever.exit_code == 2 and "--config concurrency: does not apply to lengths.csv" in lever.stderr


def test_more_requests_than_a_trace_holds_are_flagged_not_silent(tmp_path):
    trace = tmp_path / "lengths.csv"
    trace.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0.0,100,10\n0.5,200,20\n")
    flags = json.loads(invoke("--trace", str(trace), "--requests", "5", "--json").stdout)["flags"]
    assert "requests-capped: --requests 5 is more than lengths.csv holds; its 2 replayed" in flags
    assert not any(f.startswith("requests-capped") for f in
                   json.loads(invoke("--trace", str(trace), "--requests", "2", "--json").stdout)["flags"])


def test_a_configuration_that_does_not_fit_is_a_result_as_predict_reports_it():
    """Why it does not fit, `metrics: null`, exit 1 (PRODUCT §2's contract for predict), not
    a bad-input error: the same configuration gets the same answer from both commands."""
    text = invoke("--config", "tp=2", "--workload", "1k/1k")
    assert text.exit_code == 1 and "does not fit / illegal" in text.stdout and "needs 2 GPUs" in text.stdout
    assert "metrics: null" in text.stdout and "Traceback" not in text.output
    result = invoke("--config", "tp=2", "--workload", "1k/1k", "--json")
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert data["legal"] is False and data["metrics"] is None and any("needs 2 GPUs" in r for r in data["reasons"])
    jsonschema.validate(data, json.loads((SCHEMA_DIR / "simulate.schema.json").read_text()))
    predicted = runner.invoke(app, ["predict", *BASE[1:], "--config", "tp=2", "--workload", "1k/1k", "--json"])
    assert predicted.exit_code == 1 and json.loads(predicted.stdout)["reasons"] == data["reasons"]


def test_an_empty_trace_is_refused(tmp_path):
    trace = tmp_path / "empty.jsonl"
    trace.write_text("\n")
    result = invoke("--trace", str(trace))
    assert result.exit_code == 2 and "no requests" in result.stderr


def test_table_output_on_the_agentic_default():
    result = invoke("--concurrency", "2", "--requests", "20")
    assert result.exit_code == 0, result.output
    assert "TTFT from arrival" in result.stdout and "prefix hit rate" in result.stdout


def test_replications_report_means_with_90_percent_intervals():
    result = invoke("--workload", "agentic", "--concurrency", "4", "--requests", "24", "--replications", "3", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["replications"] == 3
    lo, hi = data["seed_intervals"]["output_throughput_per_gpu"]
    assert lo <= data["output_throughput_per_gpu"] <= hi
    text = invoke("--workload", "agentic", "--concurrency", "4", "--requests", "24", "--replications", "3")
    assert text.exit_code == 0 and "over 3 replication(s)" in " ".join(text.stdout.split())
    # the latency table carries them too (--help and the README: means with their 90% interval)
    row = next(line for line in text.stdout.splitlines() if line.strip().startswith("TTFT from arrival"))
    assert "[" in row and "90% over replications" in text.stdout


def test_a_replay_too_short_for_its_warm_up_says_its_figures_are_the_warm_ups():
    """Each client's opening turn is warm-up (not measured); a replay that finishes none
    after it reports the warm-up's figures, and says so."""
    short = invoke("--workload", "agentic", "--concurrency", "8", "--requests", "8", "--json")
    assert short.exit_code == 0, short.output
    assert any(f.startswith("warm-up only: ") for f in json.loads(short.stdout)["flags"])
    longer = invoke("--workload", "agentic", "--concurrency", "8", "--requests", "200", "--json")
    assert not any(f.startswith("warm-up only") for f in json.loads(longer.stdout)["flags"])
    # its throughput is the whole replay's too, prompts included (the window after the
    # warm-up held the last decodes only: input 0 tok/s)
    tail = runner.invoke(app, ["simulate", "--model", "qwen3-30b-a3b", "--cluster", "h100x4", "--config",
                               "tp=4,concurrency=64", "--requests", "80", "--json"])
    data = json.loads(tail.stdout)
    assert data["warmup_only_replications"] == 1 and data["input_throughput_per_gpu"] > 0.0
    assert data["throughput_per_gpu"] == pytest.approx(data["input_throughput_per_gpu"] + data["output_throughput_per_gpu"],
                                                       rel=1e-3)


def test_a_replay_whose_measured_prompts_mostly_precede_its_window_says_so():
    """100 requests at 64 clients: the 36 measured ones mostly had their first token before
    the last warm-up request finished, and the window after it held their decodes only
    (input 0 tok/s with 8k prompts, output a tenth of the engine's), with no word of it; a
    longer replay's window holds its prompts."""
    def run(requests: int) -> dict:
        result = runner.invoke(app, ["simulate", "--model", "llama-3.1-8b", "--cluster", "h100x1", "--workload",
                                     "8k/1k", "--config", "concurrency=64", "--requests", str(requests), "--json"])
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)

    short, longer = run(100), run(1000)
    assert short["short_replay_replications"] == 1 and "short_replay_replications" not in longer
    assert any(f.startswith("short replay: ") for f in short["flags"])
    assert not any(f.startswith("short replay") for f in longer["flags"])
    assert longer["input_throughput_per_gpu"] > 5 * longer["output_throughput_per_gpu"] > 0
    # flagged, not re-measured over the warm-up (whose staggered first turns are shortened)
    assert short["input_throughput_per_gpu"] < 0.1 * longer["input_throughput_per_gpu"]


def test_a_plain_configuration_takes_its_anchors_recipe_as_predict_does(monkeypatch):
    """`simulate` and `predict` of one command line price the same kernels: Llama-3.1-8B's
    H200 vLLM anchor runs FP8, and a plain `tp=1` took BF16 in `simulate` (priced from the
    FP8 anchor as a precision transfer: ITL 183 ms at 512 clients of 4096/20, `predict`
    103 ms)."""
    monkeypatch.setattr(commands_simulate, "step_model_factory_for", REAL_FACTORY)
    args = ["--model", "llama-3.1-8b", "--cluster", "h200x8", "--engine", "vllm", "--config", "tp=1",
            "--workload", "1k/1k", "--concurrency", "4", "--json"]
    simulated = json.loads(runner.invoke(app, ["simulate", *args, "--requests", "20"]).stdout)
    predicted = json.loads(runner.invoke(app, ["predict", *args]).stdout)
    assert simulated["configuration_text"] == predicted["configuration_text"] == "concurrency=4"   # as typed
    assert simulated["modes"] == [predicted["mode"]]       # judged by the transfer's measured error, as predict is
    # one decode step priced alike (BF16 from the FP8 anchor was 1.4x the FP8 step)
    assert simulated["itl_ms"]["p50"] == pytest.approx(predicted["all_metrics"]["itl_ms_mean"], rel=0.1)



def test_a_trace_request_longer_than_the_models_context_is_the_traces_error(tmp_path):
    trace = tmp_path / "long.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 300000, "output_length": 10}\n')
    result = invoke("--trace", str(trace))
    assert result.exit_code == 2 and "--trace: a context of 300,010 tokens exceeds" in result.output


def test_a_precision_transfer_is_rank_only_in_simulate_as_in_predict(monkeypatch):
    """The step model's own label says only that an anchor calibrates it; BF16 priced from
    Llama-3.1-8B's FP8 anchor is a precision transfer `predict` calls rank-only, and
    `simulate` called it anchored."""
    monkeypatch.setattr(commands_simulate, "step_model_factory_for", REAL_FACTORY)
    args = ["--model", "llama-3.1-8b", "--cluster", "h200x8", "--engine", "vllm", "--config", "tp=1,weight_dtype=bf16",
            "--workload", "1k/1k", "--concurrency", "64", "--json"]
    simulated = json.loads(runner.invoke(app, ["simulate", *args, "--requests", "128"]).stdout)
    predicted = json.loads(runner.invoke(app, ["predict", *args]).stdout)
    assert predicted["mode"] == "rank-only" and simulated["modes"] == ["rank-only"]
    # the table prints the flags that say why, as predict's does (they were --json only)
    table = runner.invoke(app, ["simulate", *args[:-1], "--requests", "128"])
    assert table.exit_code == 0 and "flags: " in table.stdout and "kernel-set-transfer" in table.stdout



def test_skip_bad_lines_without_a_trace_is_refused():
    result = CliRunner().invoke(app, ["simulate", "--model", "llama-3.1-8b", "--workload", "1k/1k", "--skip-bad-lines"])
    assert result.exit_code == 2 and "error: --skip-bad-lines" in result.output, result.output


def test_load_levers_a_closed_loop_of_sessions_cannot_honour_are_said():
    """An arrival rate on agentic sessions changed no figure while the header echoed it;
    a session trace runs at most as many clients as it has sessions."""
    rated = json.loads(invoke("--workload", "agentic", "--concurrency", "8", "--requests", "40",
                              "--config", "arrival_rate=1000", "--json").stdout)
    plain = json.loads(invoke("--workload", "agentic", "--concurrency", "8", "--requests", "40", "--json").stdout)
    assert rated["output_throughput_per_gpu"] == plain["output_throughput_per_gpu"]
    assert any(f.startswith("arrival_rate=1000: unused") for f in rated["flags"])
    assert not any("unused" in f for f in plain["flags"])
    trace = Path(__file__).resolve().parents[3] / "predictor" / "data" / "traces" / "agentic_trace_0277.json"
    flags = json.loads(invoke("--trace", str(trace), "--concurrency", "8", "--json").stdout)["flags"]
    assert any(f.startswith("concurrency=8: the trace has 1 session(s)") for f in flags)
