"""`inferasim deploy` (agent/cli/deploy.py): tune -> deploy, plan-mix -> deploy, --config,
and the winner's deploy line in `tune` and `plan-mix`; every command checked against the
engine's own argument definitions (tests/fixtures/engine_flags)."""

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

import agent.mix.planner
import agent.question
from agent.cli.main import app
from tests.agent.deploy.flags import argv_problems
from tests.agent.mix.test_planner import GPT_OSS_CANDIDATES, fake_predict
from tests.agent.tune_fakes import FakePredictor

runner = CliRunner()
QWEN = ["--model", "qwen3-30b-a3b", "--workload", "1k/1k"]
SPLIT = ("disaggregated=true,prefill_layout=TP8,decode_layout=TP8/EP8/DP8,kv_transfer_backend=nixl,"
         "concurrency=256,router=kv_aware")


@pytest.fixture
def fake_tune(monkeypatch):
    monkeypatch.setattr(agent.question, "predict", FakePredictor())


def deploy(*args):
    return runner.invoke(app, ["deploy", *args])


def assert_valid(pools, engine="vllm"):
    for pool in pools:
        assert argv_problems(pool["argv"], engine, 3) == [], pool["display"]


def test_tune_prints_the_winners_deploy_line_and_deploy_writes_it(fake_tune, tmp_path):
    text = runner.invoke(app, ["tune", *QWEN, "--budget", "12"], terminal_width=200)
    assert text.exit_code == 0, text.output
    assert "Deploy #" in text.stdout and "vllm serve Qwen/Qwen3-30B-A3B" in text.stdout
    tuned = json.loads(runner.invoke(app, ["tune", *QWEN, "--budget", "12", "--json"]).stdout)
    assert_valid(tuned["deploy"]["pools"])
    result = deploy(tuned["ledger"], "--out", str(tmp_path / "d"), "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["pick"]["origin"].endswith(f"best trial #{tuned['best']['index']}")
    assert [p["argv"] for p in data["pools"]] == [p["argv"] for p in tuned["deploy"]["pools"]]
    assert_valid(data["pools"])
    assert (tmp_path / "d" / "deploy.json").is_file() and data["pools"][0]["prefix_caching"] is True
    other = json.loads(deploy(tuned["ledger"], "--trial", "0", "--out", str(tmp_path / "e"), "--json").stdout)
    assert other["pick"]["origin"].endswith(": trial #0")
    assert_valid(other["pools"])


def test_a_disaggregated_config_gets_a_dynamo_graph_and_llmd_pools(tmp_path):
    result = deploy("--model", "deepseek-r1", "--cluster", "mi355x8x2", "--engine", "vllm", "--config", SPLIT,
                    "--out", str(tmp_path), "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [p["role"] for p in data["pools"]] == ["prefill", "decode"] and data["manifests"] == {}
    assert_valid(data["pools"])
    (graph,) = yaml.safe_load_all((tmp_path / "dynamo.yaml").read_text())
    frontend = graph["spec"]["services"]["Frontend"]["extraPodSpec"]["mainContainer"]
    assert frontend["args"][-2:] == ["--router-mode", "kv"]
    for role in ("prefill", "decode"):
        (deployment,) = yaml.safe_load_all((tmp_path / f"llm-d-{role}.yaml").read_text())
        assert deployment["metadata"]["labels"]["llm-d.ai/role"] == role
    text = deploy("--model", "deepseek-r1", "--cluster", "mi355x8x2", "--engine", "vllm", "--config", SPLIT,
                  "--out", str(tmp_path))
    assert "prefill: 1 replica(s) x 8 GPU(s), each:" in text.stdout and "dynamo.yaml" in text.stdout
    # their default images are CUDA builds: on MI355X that is said, and --image silences it
    assert any("NVIDIA builds (CUDA): on AMD GPUs pass --image" in note for note in data["notes"])
    imaged = deploy("--model", "deepseek-r1", "--cluster", "mi355x8x2", "--engine", "vllm", "--config", SPLIT,
                    "--image", "rocm/vllm:custom", "--out", str(tmp_path), "--json")
    assert not any("NVIDIA builds" in note for note in json.loads(imaged.stdout)["notes"])
    assert "rocm/vllm:custom" in (tmp_path / "dynamo.yaml").read_text()


def test_a_reused_folder_keeps_only_the_new_picks_files(tmp_path):
    """A split's manifests must not stay beside a later colocated pick in the same --out
    (`kubectl apply -f` the folder would deploy both); files deploy did not write stay."""
    out = tmp_path / "deploy"
    split = deploy("--model", "deepseek-r1", "--cluster", "mi355x8x2", "--engine", "vllm", "--config", SPLIT,
                   "--out", str(out), "--json")
    assert split.exit_code == 0, split.output
    assert {"dynamo.yaml", "llm-d-prefill.yaml", "llm-d-decode.yaml"} <= {p.name for p in out.iterdir()}
    (out / "notes.txt").write_text("mine")
    plain = deploy("--model", "deepseek-r1", "--cluster", "mi355x8x2", "--engine", "vllm", "--config", "tp=8",
                   "--out", str(out), "--json")
    assert plain.exit_code == 0, plain.output
    assert sorted(p.name for p in out.iterdir()) == ["deploy.json", "notes.txt"]
    assert list(json.loads(plain.stdout)["files"]) == ["deploy.json"]


def test_a_plan_mix_slot(monkeypatch, tmp_path):
    monkeypatch.setattr(agent.mix.planner, "default_predict_fn", lambda: fake_predict)
    models = tmp_path / "models.yaml"
    models.write_text(GPT_OSS_CANDIDATES)
    report = tmp_path / "plan.json"
    planned = runner.invoke(app, ["plan-mix", str(models), "--workers", "1", "--out", str(report)],
                            terminal_width=200)
    assert planned.exit_code == 0, planned.output
    slots = {s["tier"]: s for s in json.loads(report.read_text())["slots"]}
    assert slots["interactive"]["pick"]["engine"] == "atom" and slots["interactive"]["pick"]["disaggregated"]
    assert "no prefill/decode pool flags" in slots["interactive"]["deploy"]["error"]   # ATOM: no P/D flags
    assert "Deploy gpt-oss-120b/interactive: not expressible" in planned.stdout
    slot = slots["realtime"]
    assert slot["deploy"]["disaggregated"] is False and "Deploy gpt-oss-120b/realtime:" in planned.stdout
    engine = slot["pick"]["engine"]
    result = deploy("--plan", str(report), "--slot", "gpt-oss-120b/realtime", "--out", str(tmp_path / "d"),
                    "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [p["argv"] for p in data["pools"]] == [p["argv"] for p in slot["deploy"]["pools"]]
    assert_valid(data["pools"], engine)
    # the model named by its Hugging Face id, as everywhere else (it read 'no slot ... did you mean')
    by_id = deploy("--plan", str(report), "--slot", "openai/gpt-oss-120b/realtime", "--out", str(tmp_path / "e"),
                   "--json")
    assert by_id.exit_code == 0, by_id.output
    assert [p["argv"] for p in json.loads(by_id.stdout)["pools"]] == [p["argv"] for p in data["pools"]]


def test_a_model_listed_twice_in_the_plan_is_deployed_by_its_entry(tmp_path):
    """A models.yaml may list a model twice (another cluster, other tiers): MODEL/TIER
    alone is then ambiguous, MODEL/TIER#ENTRY is not."""
    def slot(entry, cluster, tp):
        return {"model": "Qwen3-30B-A3B", "tier": "bulk", "entry": entry, "cluster": cluster,
                "pick": {"cluster": cluster, "engine": "vllm", "configuration": {"tp": tp}}}
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"slots": [slot(0, "h100x1", 1), slot(1, "h100x2", 2)]}))
    both = deploy("--plan", str(plan), "--slot", "qwen3-30b-a3b/bulk", "--out", str(tmp_path / "d"))
    assert both.exit_code == 2
    assert "names 2 slots" in both.stderr and "Qwen3-30B-A3B/bulk#1 (h100x2)" in both.stderr
    second = deploy("--plan", str(plan), "--slot", "qwen3-30b-a3b/bulk#1", "--out", str(tmp_path / "d"), "--json")
    assert second.exit_code == 0, second.output
    assert json.loads(second.stdout)["pick"]["origin"].endswith("Qwen3-30B-A3B/bulk")
    assert json.loads(second.stdout)["cluster"] == "h100x2" and json.loads(second.stdout)["total_gpus"] == 2


@pytest.mark.parametrize("args, message", [
    ([], "deploy: nothing to deploy"),
    (["x.json", "--model", "kimi-k3"], "both name a pick"),
    (["--model", "kimi-k3", "--trial", "3"], "--trial: needs a LEDGER"),
    (["--model", "kimi-k3", "--config", "tp=1"], "cannot run: memory"),
    (["no-such-ledger"], "ledger"),
    (["x.json", "--config", "tp=4"], "--config: cannot change the pick of LEDGER"),
    (["x.json", "--engine", "vllm"], "--engine: cannot change the pick of LEDGER"),
    (["--plan", "p.json", "--slot", "a/b", "--cluster", "mi355x"], "--cluster: cannot change the pick of --plan"),
    (["--model", "llama-3.1-8b", "--slot", "a/b"], "--slot: needs --plan"),
])
def test_bad_input_is_one_line_exit_2(args, message):
    result = deploy(*args)
    assert result.exit_code == 2, result.output
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_a_slot_that_is_not_there_gets_a_suggestion(tmp_path):
    report = tmp_path / "plan.json"
    report.write_text(json.dumps({"slots": [{"model": "gpt-oss-120b", "tier": "interactive", "pick": None}]}))
    typo = deploy("--plan", str(report), "--slot", "gpt-oss-120b/interactve")
    assert typo.exit_code == 2 and "did you mean 'gpt-oss-120b/interactive'?" in typo.stderr
    empty = deploy("--plan", str(report), "--slot", "gpt-oss-120b/interactive")
    assert empty.exit_code == 2 and "has no pick" in empty.stderr
    unknown = deploy("--plan", str(report), "--slot", "nosuch/interactive")     # the slot is wrong, not --model
    assert unknown.exit_code == 2 and unknown.stderr.startswith("error: --slot: no slot 'nosuch/interactive'")
    assert "gpt-oss-120b/interactive" in unknown.stderr


def test_a_deploy_launches_the_precisions_it_was_priced_at(tmp_path):
    """A plain configuration is priced from its anchor's recipe (FP8 for Llama-3.1-70B on
    H100 under vLLM at TP8): the launch quantises to FP8 as priced and says so. A recipe
    precision the engine cannot set online is an error naming the recipe (DeepSeek-R1's
    FP4 experts under SGLang), except activations, which an engine without the flag takes
    from the weights (ATOM), as the anchor's run did."""
    fp8 = deploy("--model", "llama-3.1-70b", "--cluster", "h100", "--engine", "vllm", "--config", "tp=8",
                 "--out", str(tmp_path / "a"), "--json")
    assert fp8.exit_code == 0, fp8.output
    data = json.loads(fp8.stdout)
    assert data["recipe"]["weight_dtype"] == "fp8" and "--quantization" in data["pools"][0]["argv"]
    text = " ".join(deploy("--model", "llama-3.1-70b", "--cluster", "h100", "--engine", "vllm", "--config", "tp=8",
                           "--out", str(tmp_path / "b")).output.split())
    assert "unset levers as priced, from the calibrating anchor's recipe: weight_dtype=fp8" in text
    refused = deploy("--model", "deepseek-r1", "--cluster", "mi355x", "--engine", "sglang", "--config", "tp=2",
                     "--out", str(tmp_path / "c"))
    assert refused.exit_code == 2 and "the calibrating anchor's recipe, as priced" in refused.stderr
    atom = deploy("--model", "gpt-oss-120b", "--cluster", "mi355x", "--engine", "atom", "--config", "tp=8",
                  "--out", str(tmp_path / "d"), "--json")
    assert atom.exit_code == 0, atom.output
    notes = json.loads(atom.stdout)["notes"]
    assert len(notes) == 1 and notes[0].startswith("activation_dtype=fp4 as priced is not on atom's command line")


def test_a_replica_wider_than_a_node_gets_one_command_per_node(tmp_path):
    """Kimi-K3 as DEP16 over two 8-GPU H200 nodes: vLLM spreads its two attention-DP ranks
    (node 1 headless from start rank 1), SGLang runs one two-node group; every node's
    command passes the engine's own argument check. TensorRT-LLM's MPI launch is refused."""
    args = ("--model", "kimi-k3", "--cluster", "h200x8x4", "--config", "tp=16,ep=16,attention_dp=2,weight_dtype=fp8")
    vllm = deploy(*args, "--engine", "vllm", "--out", str(tmp_path / "v"), "--json")
    assert vllm.exit_code == 0, vllm.output
    nodes = json.loads(vllm.stdout)["pools"][0]["nodes"]
    assert [n["rank"] for n in nodes] == [0, 1]
    assert "--data-parallel-size-local" in nodes[0]["argv"] and "--headless" not in nodes[0]["argv"]
    assert nodes[1]["argv"][-3:] == ["--data-parallel-start-rank", "1", "--headless"]
    assert_valid([{"argv": n["argv"], "display": n["display"]} for n in nodes])
    sglang = deploy("--model", "deepseek-r1", "--cluster", "h100x8x2", "--config", "tp=16,ep=16,attention_dp=2",
                    "--engine", "sglang", "--out", str(tmp_path / "s"), "--json")
    assert sglang.exit_code == 0, sglang.output
    nodes = json.loads(sglang.stdout)["pools"][0]["nodes"]
    assert [n["argv"][-6:-2] for n in nodes] == [["--nnodes", "2", "--node-rank", "0"], ["--nnodes", "2", "--node-rank", "1"]]
    assert_valid([{"argv": n["argv"], "display": n["display"]} for n in nodes], engine="sglang")
    single = deploy("--model", "deepseek-r1", "--cluster", "h200x8x2", "--engine", "vllm", "--config", "tp=8",
                    "--out", str(tmp_path / "one"), "--json")
    assert json.loads(single.stdout)["pools"][0]["nodes"] == []
    trt = deploy("--model", "kimi-k3", "--cluster", "h200x8x4", "--engine", "trtllm", "--model-path", "/ckpt", "--config",
                 "tp=32,ep=32,attention_dp=32,weight_dtype=fp8", "--out", str(tmp_path / "t"))
    assert trt.exit_code == 2 and "spans 4 nodes of 8" in trt.stderr


def test_a_priced_lever_no_launch_sets_is_said_and_an_unused_draft_model_too(tmp_path):
    """Fusions move the price (2,746 vs 2,704 tok/s/GPU on Qwen3-30B-A3B) but are the
    engine compiler's choice; a --draft-model without a drafting method is read by nothing."""
    fused = deploy("--model", "qwen3-30b-a3b", "--cluster", "h100x1", "--engine", "vllm", "--config",
                   "fusions=add_rmsnorm", "--draft-model", "/ckpt/draft", "--out", str(tmp_path / "a"), "--json")
    assert fused.exit_code == 0, fused.output
    notes = json.loads(fused.stdout)["notes"]
    assert any(n.startswith("fusions=add_rmsnorm as priced is not on vllm's command line") for n in notes)
    assert any(n.startswith("--draft-model unused") for n in notes)
    plain = deploy("--model", "qwen3-30b-a3b", "--cluster", "h100x1", "--engine", "vllm", "--out", str(tmp_path / "b"),
                   "--json")
    assert not json.loads(plain.stdout)["notes"]


def test_colocated_replicas_get_a_dynamo_graph_with_the_priced_router(tmp_path):
    """The router is priced (11.7 to 57 tok/s/GPU across its values on one model), yet
    colocated replicas got one command and no router: a Dynamo frontend now fronts one
    worker service of that many replicas (no disaggregation mode); one replica needs none."""
    result = deploy("--model", "llama-3.1-8b", "--cluster", "h100x8", "--engine", "vllm", "--config",
                    "tp=1,replicas=8,router=round_robin", "--out", str(tmp_path / "a"), "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert "llm-d" in data["manifests"] and "dynamo" not in data["manifests"]
    (graph,) = yaml.safe_load_all((tmp_path / "a" / "dynamo.yaml").read_text())
    services = graph["spec"]["services"]
    assert services["Frontend"]["extraPodSpec"]["mainContainer"]["args"][-2:] == ["--router-mode", "round-robin"]
    worker = services["ServeWorker"]
    assert worker["replicas"] == 8 and "subComponentType" not in worker
    args = worker["extraPodSpec"]["mainContainer"]["args"]
    assert "--disaggregation-mode" not in args and args[:2] == ["--model", "meta-llama/Llama-3.1-8B"]
    hashed = deploy("--model", "llama-3.1-8b", "--cluster", "h100x8", "--engine", "vllm", "--config",
                    "tp=1,replicas=8,router=prefix_hash", "--out", str(tmp_path / "c"), "--json")
    assert any(n.startswith("router=prefix_hash as priced: Dynamo's frontend has no prefix-hash mode")
               for n in json.loads(hashed.stdout)["notes"])
    single = deploy("--model", "llama-3.1-8b", "--cluster", "h100x8", "--engine", "vllm", "--config", "tp=8",
                    "--out", str(tmp_path / "b"), "--json")
    assert json.loads(single.stdout)["manifests"] == {} and not (tmp_path / "b" / "dynamo.yaml").exists()


def test_a_recipe_the_engine_cannot_launch_names_a_runnable_alternative(tmp_path, monkeypatch):
    """DeepSeek-R1 TP8/EP4 on B200 under SGLang is priced at its anchor's FP4 experts, which
    SGLang cannot quantize to on its command line: the refusal offers a whole `deploy` line
    with the checkpoint's own fp8 (it offered `--config expert_dtype=fp8`, which a ledger's
    or a plan's pick refuses), and that line deploys."""
    monkeypatch.setenv("INFERASIM_HOME", str(tmp_path / "home"))
    args = ["deploy", "--model", "deepseek-r1", "--cluster", "b200x8", "--engine", "sglang",
            "--config", "tp=8,ep=4,concurrency=4"]
    refused = runner.invoke(app, args, terminal_width=400)
    assert refused.exit_code == 2
    message = " ".join(refused.output.split())
    line = message.split("price and launch the checkpoint's own fp8: inferasim ", 1)[1].rstrip(")")
    offered = line.split()
    assert offered[0] == "deploy" and "expert_dtype=fp8" in offered[-1]
    launched = runner.invoke(app, [*offered, "--out", str(tmp_path / "out")], terminal_width=400)
    assert launched.exit_code == 0, launched.output


def test_the_runnable_alternative_of_a_split_is_the_split(tmp_path, monkeypatch):
    """A split TensorRT-LLM cannot launch at its anchor's FP4 weights: the offered line kept
    one pool's layout alone (a colocated TP8 on 8 of the 16 GPUs); it restates the whole
    split with the checkpoint's fp8, and that line deploys on all 16."""
    monkeypatch.setenv("INFERASIM_HOME", str(tmp_path / "home"))
    refused = runner.invoke(app, ["deploy", "--model", "deepseek-r1", "--cluster", "b200x8x2", "--engine", "trtllm",
                                  "--config", "disaggregated=true,prefill_layout=TP8,decode_layout=TP8/EP8/DP8,"
                                  "kv_transfer_backend=nixl"], terminal_width=600)
    assert refused.exit_code == 2
    line = " ".join(refused.output.split()).split("price and launch the checkpoint's own fp8: inferasim ", 1)[1]
    offered = line.rstrip(")").split()
    assert "disaggregated=true" in offered[-1] and "decode_layout=TP8/EP8/DP8" in offered[-1]
    launched = runner.invoke(app, [*offered, "--out", str(tmp_path / "out"), "--json"], terminal_width=600)
    assert launched.exit_code == 0, launched.output
    pools = json.loads(launched.stdout)["pools"]
    assert sum(pool["replicas"] * pool["gpus_per_replica"] for pool in pools) == 16


def test_a_ledger_pick_the_engine_refuses_names_its_trial_not_a_config_option(fake_tune, tmp_path):
    """`deploy LEDGER` of a trial vLLM cannot launch read "--config weight_dtype: ..." though
    no --config was typed: the refusal names the ledger's trial and the way to another."""
    tuned = json.loads(runner.invoke(app, ["tune", *QWEN, "--budget", "12", "--json"]).stdout)
    path = Path(tuned["ledger"])
    data = json.loads(path.read_text())
    data["trials"][0]["configuration"].update(weight_dtype="fp8", activation_dtype="bf16")
    path.write_text(json.dumps(data))
    result = deploy(str(path), "--trial", "0", "--out", str(tmp_path / "d"))
    assert result.exit_code == 2 and "--config" not in result.output.split("(accepted")[0]
    assert ": trial #0" in result.output and "weight_dtype" in result.output and "--trial N" in result.output


@pytest.mark.parametrize("engine, cluster, said", [("trtllm", "b200x8", True), ("atom", "mi355x", True),
                                                   ("vllm", "b200x8", False)])
def test_a_chunk_size_the_engine_has_no_flag_for_is_said(tmp_path, engine, cluster, said):
    """TensorRT-LLM's and ATOM's prompt chunk is their token budget: a chunk size asked apart
    from it is neither priced nor launched, and was dropped without a word."""
    result = deploy("--model", "deepseek-r1", "--cluster", cluster, "--engine", engine, "--config",
                    "tp=8,weight_dtype=fp8,max_batched_tokens=4096,chunked_prefill_size=2048", "--out", str(tmp_path),
                    "--json")
    assert result.exit_code == 0, result.output
    notes = json.loads(result.stdout)["notes"]
    assert any(n.startswith("chunked_prefill_size=2048 is not on") for n in notes) is said


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_every_manifest_serves_on_the_asked_port(tmp_path, engine):
    """`--port 9000`: the prefill pod took it, the decode pod and Dynamo's frontend kept 8000
    (and SGLang's decode engine moved to 8200 with no sidecar in front: nothing served
    8000). Now clients reach every pod on --port, a decode engine behind llm-d's routing
    sidecar 200 above it, the sidecar speaking the engine's protocol."""
    result = deploy("--model", "deepseek-r1", "--cluster", "mi355x8x2", "--engine", engine, "--port", "9000",
                    "--config", SPLIT, "--out", str(tmp_path), "--json")
    assert result.exit_code == 0, result.output
    (graph,) = yaml.safe_load_all((tmp_path / "dynamo.yaml").read_text())
    frontend = graph["spec"]["services"]["Frontend"]["extraPodSpec"]["mainContainer"]["args"]
    assert frontend[frontend.index("--http-port") + 1] == "9000"
    for role in ("prefill", "decode"):
        (deployment,) = yaml.safe_load_all((tmp_path / f"llm-d-{role}.yaml").read_text())
        spec = deployment["spec"]["template"]["spec"]
        served = [p["containerPort"] for c in (*spec["containers"], *spec.get("initContainers", ())) for p in c["ports"]]
        assert 9000 in served, (role, served)
        args = spec["containers"][0]["args"]
        engine_port = int(args[args.index("--port") + 1])
        assert engine_port == (9200 if role == "decode" else 9000)
        if role == "decode":
            (sidecar,) = spec["initContainers"]
            assert f"--kv-connector={'nixlv2' if engine == 'vllm' else 'sglang'}" in sidecar["args"]
            assert "--port=9000" in sidecar["args"] and "--vllm-port=9200" in sidecar["args"]
