"""`inferasim predict`'s legend says what its numbers carry: the 80% interval always, the
bracketed 90% interval over DES replications only when there is one."""

from __future__ import annotations

from typer.testing import CliRunner

from agent.cli.main import app

runner = CliRunner()
SMALL = ["--model", "qwen3-30b-a3b", "--cluster", "h100x1"]
BRACKETS = "brackets after a value"


def _text(args: list[str]) -> str:
    result = runner.invoke(app, ["predict", *SMALL, *args])
    assert result.exit_code == 0, result.output
    return result.stdout


def test_an_analytical_prediction_promises_no_replication_interval():
    text = _text(["--config", "tp=1", "--workload", "1k/1k"])
    assert "80% interval:" in text and BRACKETS not in text and "[" not in text.split("80% interval:")[0]


def test_des_replications_are_bracketed_and_said_so():
    text = _text(["--config", "tp=1,concurrency=4", "--workload", "agentic", "--requests", "64",
                  "--replications", "2"])
    assert BRACKETS in text
    assert "[" in text.split("80% interval:")[0]


def test_one_output_token_shows_no_decode_speed():
    from typer.testing import CliRunner
    from agent.cli.main import app
    result = CliRunner().invoke(app, ["predict", "--model", "gpt-oss-120b", "--config", "tp=8", "--workload", "1k/1"],
                                terminal_width=200)
    assert result.exit_code == 0, result.output
    rows = [line.split()[0] for line in result.output.splitlines() if line.strip()]
    assert "TTFT" in rows and not {"TPOT", "ITL", "E2E", "tok/s/user"} & set(rows)
    assert "no decode step, so no TPOT, ITL or tok/s/user, and E2E is the TTFT" in " ".join(result.output.split())


def test_one_output_token_carries_no_decode_metrics_and_no_search_can_aim_at_them():
    import json
    from typer.testing import CliRunner
    from agent.cli.main import app
    runner = CliRunner()
    data = json.loads(runner.invoke(app, ["predict", "--model", "gpt-oss-120b", "--config", "tp=8", "--workload", "1k/1",
                                          "--json"]).stdout)
    assert all(data["metrics"].get(key) is None for key in ("tpot_ms", "itl_ms", "interactivity"))
    assert data["metrics"]["ttft_ms"] > 0 and data["metrics"]["output_throughput_per_gpu"] > 0
    for option, value, what in (("--objective", "interactivity", "--objective"), ("--slo", "p90-itl=25", "--slo")):
        result = runner.invoke(app, ["tune", "--model", "gpt-oss-120b", "--workload", "1k/1", "--budget", "3",
                                     "--no-llm", option, value])
        assert result.exit_code == 2 and f"error: {what}:" in result.stderr and "one output token" in result.stderr


def test_the_memory_table_sizes_a_long_request_the_model_can_take_and_names_its_state():
    """200k tokens, or the model's context when shorter (gpt-oss-120b's 131,072: it printed
    '200k-token requests that fit' for a model that takes none); the fixed state is named
    by what it is (KDA state, sliding windows), not always 'KDA/GDN'."""
    from agent.cli.memory_view import sizing
    from predictor.cards.registry import load_card
    assert sizing(load_card("gpt-oss-120b")) == (131_072, "sliding windows")
    assert sizing(load_card("kimi-k3")) == (200_000, "KDA")
    assert sizing(load_card("qwen3.5-397b")) == (200_000, "GDN")
    assert sizing(load_card("llama-3.1-8b")) == (131_072, "none")
    out = runner.invoke(app, ["predict", "--model", "gpt-oss-120b", "--cluster", "b200x8", "--config", "tp=8"],
                        terminal_width=200).output
    assert "131,072-token requests that fit" in out and "200k" not in out
    assert "state per request (sliding windows, MB)" in out


def test_options_a_prediction_had_no_use_for_are_flagged():
    """DES options on an analytical prediction, --acceptance without speculation: the
    output was byte-identical to the defaults, as if they had been applied."""
    import json
    base = ["predict", "--model", "llama-3.1-8b", "--cluster", "h100x1", "--json"]
    flags = json.loads(runner.invoke(app, [*base, "--seed", "7"]).stdout)["flags"]
    assert "--seed: DES options, unused: this prediction is analytical (no replay)" in flags
    assert not any("unused" in f for f in json.loads(runner.invoke(app, base).stdout)["flags"])
    flags = json.loads(runner.invoke(app, [*base, "--acceptance", "al=3.2"]).stdout)["flags"]
    assert any(f.startswith("--acceptance: unused without speculative decoding") for f in flags)
    speculating = json.loads(runner.invoke(app, [*base, "--config", "spec_method=eagle3,spec_depth=3",
                                                 "--acceptance", "al=2.2"]).stdout)["flags"]
    assert not any(f.startswith("--acceptance") for f in speculating)


def test_asked_replays_replay_fixed_length_traffic_as_a_search_prices_it():
    """--requests or --replications on 1k/1k replay it (the DES), as tune does for a
    percentile SLO, so a ledger's trial re-prices as recorded; without them, analytical."""
    import json
    base = ["predict", "--model", "llama-3.1-8b", "--cluster", "h100x1", "--config", "concurrency=8", "--json"]
    for extra in (["--requests", "100"], ["--replications", "2"]):
        data = json.loads(runner.invoke(app, [*base, *extra]).stdout)
        assert data["source"] == "des" and not any("unused" in f for f in data["flags"])
        assert data["all_metrics"].get("itl_ms_p90") is not None       # the percentile an SLO reads
    assert json.loads(runner.invoke(app, base).stdout)["source"] == "analytical"


def test_the_mean_speed_json_headlines_is_in_the_table_when_it_differs_from_the_median():
    """--json's `interactivity` (and the objective of that name) is the mean of 1/TPOT; the
    table showed only its median, so the two outputs could not be reconciled."""
    agentic = _text(["--config", "tp=1,concurrency=4", "--workload", "agentic", "--requests", "64"])
    assert "mean of 1/TPOT" in agentic and "p50 of 1/TPOT" in agentic
    fixed = _text(["--config", "tp=1", "--workload", "1k/1k"])
    assert "mean of 1/TPOT" not in fixed and "p50 of 1/TPOT" in fixed      # one speed: one row


def test_an_interval_that_leaves_out_its_value_is_explained():
    """gpt-oss-120b TP2 x4 on MI355X is a width transfer whose throughput band lies wholly
    below the prediction (measured values came in under it in over 90% of the rows)."""
    result = runner.invoke(app, ["predict", "--model", "gpt-oss-120b", "--config", "tp=2,replicas=4"])
    assert result.exit_code == 0, result.output
    row = next(line for line in result.stdout.splitlines() if line.strip().startswith("throughput (output)"))
    value, interval = row.split()[-3], row.split()[-2]
    low, high = (float(x.replace(",", "")) for x in interval.split("-"))
    assert not low <= float(value.replace(",", "")) <= high
    assert "an interval that leaves out its value" in " ".join(result.stdout.split())
    plain = _text(["--config", "tp=1", "--workload", "1k/1k"])
    assert "leaves out its value" not in plain


def test_a_configuration_that_does_not_fit_shows_its_memory_and_the_precisions_it_sized():
    """PRODUCT.md: `predict` on a configuration that does not fit prints the memory
    breakdown and the reason; the precisions its weights were sized at came from an anchor."""
    result = runner.invoke(app, ["predict", "--model", "deepseek-r1"], terminal_width=160)
    assert result.exit_code == 1
    text = result.stdout
    assert "does not fit / illegal" in text and "exceed 90% of HBM" in text and "metrics: null" in text
    assert "memory per GPU (GB)" in text and "routed experts" in text
    assert "unset levers as priced" in text and "expert_dtype=fp4" in text
