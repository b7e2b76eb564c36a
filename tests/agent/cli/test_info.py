"""The foundation commands: models, hardware, levers, objectives, check, memory, and
the bad-input rule (one line naming the input and what is accepted, exit 2)."""

import json

import pytest
from typer.testing import CliRunner

from agent.cli.main import app

runner = CliRunner()


def run(*args):
    return runner.invoke(app, list(args))


def run_json(*args):
    result = run(*args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_levers_json_lists_exactly_36():
    levers = run_json("levers")
    assert len(levers) == 36
    assert levers[0]["name"] == "tp" and levers[35]["name"] == "router"
    assert run_json("levers", "--engine", "atom")[16]["values"] == {"atom": ["aiter"]}


def test_objectives_json_lists_exactly_24():
    assert len(run_json("objectives")) == 24


def test_models_and_hardware_list_the_embedded_cards():
    rows = {row["name"]: row for row in run_json("models")}
    assert len(rows) >= 35 and {"Kimi-K3", "DeepSeek-V4-Pro", "gpt-oss-120b"} <= set(rows)
    assert rows["Kimi-K3"]["native_dtypes"]["expert_format"] == "mxfp4"
    assert "fp4 (mxfp4)" in run("models").output and "fp4 (int4)" in run("models").output
    # the checkpoints weight_dtype=recipe:NAME names (the lever's help points here)
    assert rows["Kimi-K3"]["recipes"] == ["native", "nvfp4"] and rows["gpt-oss-120b"]["recipes"] == ["native"]
    assert "native, nvfp4" in run("models").output
    gpus = {row["name"]: row for row in run_json("hardware")}
    assert set(gpus) >= {"H100", "H200", "B200", "GB200", "B300", "GB300", "MI300X", "MI325X", "MI355X"}
    assert gpus["GB200"]["scale_up_domain"] == 72 and gpus["MI355X"]["scale_up_domain"] == 8


def test_check_reports_every_reason_and_exits_1():
    result = run("check", "--model", "deepseek-r1", "--engine", "atom",
                 "--config", "tp=8,ep=4,attention_backend=triton,activation_dtype=bf16,fusions=norm_quant")
    assert result.exit_code == 1
    assert "not supported by atom" in result.output
    assert "needs fp8 or fp4 activations" in result.output
    data = run_json("check", "--model", "deepseek-r1", "--config", "tp=8,ep=8,attention_dp=8")
    assert data["legal"] is True and data["memory"]["fits"] is True


def test_check_says_when_a_legal_configuration_is_one_its_engine_cannot_launch():
    """Legal to price, refused by `deploy` (ATOM's command line has no prefill/decode pool
    flags): `check` said 'legal' and exit 0 with nothing more; it still exits 0 (the price
    is sound) and says why it cannot be deployed."""
    split = "tp=2,ep=2,attention_dp=2,disaggregated=true,prefill_layout=TP1/EP1/DP1,decode_layout=TP2/EP2/DP2"
    result = run("check", "--model", "gpt-oss-120b", "--engine", "atom", "--config", split)
    assert result.exit_code == 0 and "legal" in result.output
    assert "not deployable: disaggregated" in " ".join(result.output.split())
    data = run_json("check", "--model", "gpt-oss-120b", "--engine", "atom", "--config", split)
    assert data["legal"] is True and "disaggregated=true cannot be set on the atom command line" in data["deploy_refused"]
    plain = run_json("check", "--model", "gpt-oss-120b", "--config", "tp=8")
    assert plain["legal"] is True and plain["deploy_refused"] is None
    # a harvest-only engine has no deploy to refuse it (it read 'harvest-only engine' on every check)
    cpu = run_json("check", "--model", "llama-3.1-8b", "--cluster", "cpu", "--engine", "llamacpp")
    assert cpu["legal"] is True and cpu["deploy_refused"] is None


def test_check_sizes_the_context_it_is_asked_about():
    """`check` fits one sequence of --context tokens (2,048 by default), as `memory` and
    `predict` size theirs: DeepSeek-R1 on four B200 fits 2k tokens, not 101k."""
    base = ("check", "--model", "deepseek-r1", "--cluster", "b200x4", "--engine", "sglang",
            "--config", "tp=4,weight_dtype=fp8,expert_dtype=fp8,kv_cache_dtype=fp8")
    assert run(*base).exit_code == 0
    long = run(*base, "--context", "101000")
    assert long.exit_code == 1 and "101000-token sequence" in long.output


def test_memory_json_keys_and_fit():
    data = run_json("memory", "--model", "llama-3.1-8b", "--cluster", "h100x1", "--context", "4096")
    for key in ("weights_per_gpu_gb", "weights_by_component_gb", "kv_bytes_per_token",
                "state_bytes_per_sequence", "kv_pool_per_gpu_gb", "max_concurrency", "fits"):
        assert key in data
    # Llama-3.1-8B bf16: 32 layers x 2 (K,V) x 8 KV heads x 128 x 2 bytes = 131072 B/token.
    assert data["kv_bytes_per_token"] == 131072
    assert data["fits"] is True
    too_big = run_json("memory", "--model", "kimi-k3", "--cluster", "mi355x1", "--config", "expert_dtype=bf16")
    assert too_big["fits"] is False
    assert too_big["kv_pool_per_gpu_gb"] == 0 and too_big["max_concurrency"] == 0   # no negative pool
    # legal as `check` says it: a layout that does not fit is not legal, and says why
    assert data["legal"] is True and too_big["legal"] is False
    assert too_big["reasons"] == [too_big["reason"]]


@pytest.mark.parametrize("args, fragment", [
    (("memory", "--model", "llama-3.1-8b", "--cluster", "h100x1", "--context", "200000"),
     "--context: 200,000 tokens: a context of 200,000 tokens exceeds Llama-3.1-8B's maximum of 131,072"),
    (("check", "--model", "gpt-5-ultra"), "--model: unknown model 'gpt-5-ultra'"),
    (("check", "--model", "kimi-k3", "--cluster", "tpu9x8"), "--cluster"),
    (("check", "--model", "kimi-k3", "--engine", "tgi"), "--engine: unknown engine 'tgi'"),
    (("check", "--model", "kimi-k3", "--config", "warp=9"), "--config: unknown lever 'warp'"),
    (("check", "--model", "kimi-k3", "--config", "tp=3"), "tp: '3' is not a legal value"),
    (("check", "--model", "kimi-k3", "--config", "tp8"), "--config: 'tp8' is not k=v"),
    (("memory", "--model", "kimi-k3", "--config", "kv_cache_dtype=int2"), "kv_cache_dtype"),
    (("objectives", "--json", "--bogus"), "No such option"),
])
def test_bad_input_is_one_line_exit_2_no_traceback(args, fragment):
    result = run(*args)
    assert result.exit_code == 2
    assert fragment in result.output
    assert "Traceback" not in result.output
    if not fragment.startswith("No such"):
        assert "accepted" in result.output
        assert len(result.output.strip().splitlines()) == 1


def test_config_json_missing_fields_is_a_clear_error(tmp_path):
    from levers.errors import InputError
    from predictor.cards.registry import card_from_config_json

    path = tmp_path / "config.json"
    path.write_text(json.dumps({"hidden_size": 4096}))
    with pytest.raises(InputError) as error:
        card_from_config_json(path)
    assert str(path) in error.value.message or "config.json" in error.value.message


def test_check_and_memory_size_the_precisions_predict_prices():
    """An unset precision lever takes the calibrating anchor's recipe in `predict`; `check`
    and `memory` size that configuration, not the checkpoint's, and say which levers came
    from the recipe (Llama-3.1-70B on H100 under vLLM: an FP8 anchor at TP8)."""
    args = ("--model", "llama-3.1-70b", "--cluster", "h100", "--config", "tp=8")
    priced = run_json("predict", *args, "--engine", "vllm")
    memory = run_json("memory", *args, "--engine", "vllm")
    assert memory["recipe"]["weight_dtype"] == "fp8"
    assert memory["weights_per_gpu_gb"] == pytest.approx(priced["memory"]["weights_per_gpu_gb"])
    assert memory["weights_per_gpu_gb"] < run_json("memory", *args, "--engine", "vllm", "--config",
                                                   "weight_dtype=bf16,activation_dtype=bf16")["weights_per_gpu_gb"] / 1.8
    check = run_json("check", *args, "--engine", "vllm")
    assert check["legal"] and check["configuration"]["weight_dtype"] == "fp8"
    text = " ".join(run("memory", *args).output.split())
    assert "unset levers as priced, from the calibrating anchor's recipe: weight_dtype=fp8" in text
    no_anchor = run_json("memory", "--model", "kimi-k3", "--config", "tp=8")
    assert no_anchor["recipe"] == {} and no_anchor["configuration_text"] == "tp=8"


@pytest.mark.parametrize("option, words", [("--cluster", "--cluster: empty cluster"),
                                           ("--engine", "--engine: unknown engine ''")])
def test_an_empty_cluster_or_engine_is_an_error_not_the_default(option, words):
    result = run("check", "--model", "kimi-k3", option, "")
    assert result.exit_code == 2 and words in result.stderr


def test_memory_says_when_the_layout_cannot_run():
    data = run_json("memory", "--model", "kimi-k3", "--config", "tp=64")
    assert data["legal"] is False and any("needs 64 GPUs" in r for r in data["reasons"])
    assert run_json("memory", "--model", "kimi-k3", "--config", "tp=8")["legal"] is True


def test_memory_of_a_split_shows_both_pools_and_fits_only_when_both_do():
    """A disaggregated deployment's memory is its pools' (check's verdict): the decode pool's
    layout, not the top-level tp, holds the KV; a prefill pool that does not fit is no fit."""
    split = ("--model", "kimi-k3", "--cluster", "gb300x4x4", "--config",
             "tp=8,disaggregated=true,prefill_layout=TP4/EP4/DP1,decode_layout=TP8/EP8/DP1")
    data = run_json("memory", *split)
    assert data["fits"] is False and data["reason"].startswith("prefill pool: weights")
    assert data["prefill_pool"]["fits"] is False and (data["prefill_layout"], data["decode_layout"]) == ("tp=4,ep=4",
                                                                                                    "tp=8,ep=8")
    decode = run_json("memory", "--model", "kimi-k3", "--cluster", "gb300x4x4", "--config", "tp=8,ep=8")
    assert data["kv_pool_per_gpu_gb"] == decode["kv_pool_per_gpu_gb"]
    checked = run("check", *split, "--json")
    assert checked.exit_code == 1 and json.loads(checked.stdout)["legal"] is False
    text = runner.invoke(app, ["memory", *split], terminal_width=200).output
    assert "Memory per GPU (prefill pool: tp=4,ep=4)" in text and "Memory per GPU (decode pool: tp=8,ep=8)" in text
    fits = run_json("memory", "--model", "kimi-k3", "--cluster", "gb300x4x4", "--config",
                    "disaggregated=true,prefill_layout=TP8/EP8/DP1,decode_layout=TP8/EP8/DP1")
    assert fits["fits"] is True and fits["reason"] is None


def test_memory_shows_the_drafters_kv_it_counts():
    data = run_json("memory", "--model", "kimi-k3", "--config", "tp=8,spec_method=eagle3,spec_depth=3")
    assert data["drafter_kv_bytes_per_token"] > 0
    text = runner.invoke(app, ["memory", "--model", "kimi-k3", "--config", "tp=8,spec_method=eagle3,spec_depth=3"],
                         terminal_width=200).output
    shown = data["kv_bytes_per_token"] + data["drafter_kv_bytes_per_token"]
    assert f"{shown:,}" in text and "KV per token (drafter incl.)" in text


def test_cluster_help_shows_the_multi_node_grammar():
    for command in ("tune", "check", "memory", "predict"):
        assert "GPU[xPER_NODE[xNODES]]" in " ".join(runner.invoke(app, [command, "--help"], terminal_width=200)
                                                   .output.split()), command


def test_objective_units_in_json_match_the_table():
    units = {row["name"]: row["unit"] for row in run_json("objectives")}
    assert units["output_throughput_per_gpu"] == "tok/s/GPU" and units["throughput_fleet"] == "tok/s"
    assert units["interactivity"] == "tok/s/user" and units["ttft"] == "ms"


def test_predict_json_holds_a_splits_prefill_pool_memory_as_its_table_does():
    """`predict --json` of a split: `memory` is the decode pool's (it holds the KV) and
    `prefill_pool` the prefill pool's, as `memory --json` names them and the table shows
    both columns; a colocated prediction has no `prefill_pool`."""
    split = ("--model", "deepseek-r1", "--cluster", "gb200x4x3", "--engine", "trtllm", "--config",
             "disaggregated=true,prefill_layout=TP4/EP4/DP4,decode_layout=TP8/EP8/DP8,weight_dtype=fp8,concurrency=256")
    data = run_json("predict", *split)
    memory = run_json("memory", *split[:-1], split[-1].removesuffix(",concurrency=256"))
    assert data["prefill_pool"]["weights_per_gpu_gb"] == memory["prefill_pool"]["weights_per_gpu_gb"]
    assert data["prefill_pool"]["weights_per_gpu_gb"] > data["memory"]["weights_per_gpu_gb"]   # TP4 against TP8
    assert "prefill_pool" not in run_json("predict", "--model", "deepseek-r1", "--cluster", "b200x8", "--config", "tp=8")


def test_memory_takes_the_recipe_of_the_anchor_predict_chose_at_that_context():
    """GLM-5 on B200 under SGLang has FP8 and FP4 anchors at TP8: a 1k/1k prediction (mean
    context 1,536) is calibrated by the FP8 one, and memory at that context sizes FP8 too."""
    args = ("--model", "glm-5", "--cluster", "b200", "--engine", "sglang", "--config", "tp=8")
    priced = run_json("predict", *args, "--workload", "1k/1k")
    memory = run_json("memory", *args, "--context", "1536")
    assert "fp8" in priced["anchor_id"] and memory["recipe"]["weight_dtype"] == "fp8"
    assert memory["weights_per_gpu_gb"] == pytest.approx(priced["memory"]["weights_per_gpu_gb"])


def test_predict_says_which_unset_levers_it_took_from_the_anchors_recipe():
    """A bare Llama-3.1-70B TP4 on B200 is priced as its anchor ran it (fp8 weights on a
    bf16 checkpoint: of its fp8 and fp4 anchors, the nearer checkpoint): predict says so in
    its text and --json, as check and memory do."""
    args = ("--model", "llama-3.1-70b", "--cluster", "b200", "--config", "tp=4")
    priced = run_json("predict", *args)
    assert priced["recipe"]["weight_dtype"] == "fp8" == run_json("check", *args)["recipe"]["weight_dtype"]
    text = " ".join(runner.invoke(app, ["predict", *args], terminal_width=200).output.split())
    assert "from the calibrating anchor's recipe: weight_dtype=fp8" in text
    explicit = run_json("predict", *args[:-1], "tp=4,weight_dtype=fp4,activation_dtype=fp4,kv_cache_dtype=bf16")
    assert explicit["recipe"] == {}
    # the first flag says it, so every table, ledger and report that shows flags does
    assert priced["flags"][0].startswith("unset levers as priced") and "weight_dtype=fp8" in priced["flags"][0]
    assert not any(f.startswith("unset levers as priced") for f in explicit["flags"])
    assert text.count("from the calibrating anchor's recipe") == 1


def test_a_plain_llama_cpp_configuration_runs_without_graph_capture():
    """llama.cpp captures no graphs: its plain configuration takes graph_capture=none (as
    the seed planner and a harvest do), so check, predict and pareto price it instead of
    refusing the default; an explicit graph_capture=full stays refused."""
    args = ("--model", "llama-3.1-8b", "--cluster", "cpu", "--engine", "llamacpp")
    assert run("check", *args).exit_code == 0
    assert run_json("predict", *args)["configuration"]["graph_capture"] == "none"
    assert run("check", *args, "--config", "graph_capture=full").exit_code == 1


def test_a_llama_cpp_sweep_has_legal_points(tmp_path):
    result = run("pareto", "--model", "llama-3.1-8b", "--cluster", "cpu", "--engine", "llamacpp", "--workers", "1",
                 "--out", str(tmp_path), "--no-plot", "--json", "--ttft-max", "none")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["num_priced"] > 0
