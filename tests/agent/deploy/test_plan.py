"""`agent.deploy`: launch commands per pool, Dynamo and llm-d manifests, every flag
checked against the engine's own argument definitions (tests/fixtures/engine_flags)."""

import json

import pytest
import yaml

from agent.deploy.manifests import dynamo_graph, dynamo_worker_argv, llmd_manifests
from agent.deploy.plan import DeployOptions, build_plan, try_plan
from levers.configuration import Configuration, parse_config_text
from levers.errors import InputError
from predictor.target import resolve_target
from tests.agent.deploy.flags import argv_problems, engine_flags, env_problems

FLAGS_START = 3  # after `vllm serve MODEL`, `python3 -m MODULE`, `trtllm-serve serve MODEL`


def config(text: str) -> Configuration:
    return Configuration().with_changes(parse_config_text([text]))


def valid(engine: str, argv, start: int = FLAGS_START, extra: str | None = None) -> list[str]:
    problems = argv_problems(argv, engine, start)
    if extra:   # a Dynamo worker takes Dynamo's flags and the engine's
        dynamo = set(argv_problems(argv, extra, start))
        problems = [p for p in problems if p in dynamo]
    return problems


COLOCATED = [
    ("deepseek-r1", "mi355x", "vllm", "tp=8,ep=8,attention_dp=8,all_to_all_backend=mori,max_running_requests=128,"
                                      "max_batched_tokens=16384,kv_cache_dtype=fp8,spec_method=mtp,spec_depth=2"),
    ("deepseek-r1", "mi355x", "sglang", "tp=8,attention_dp=8,ep=8,moe_backend=aiter,chunked_prefill_size=4096,"
                                        "kv_block_size=64,max_running_requests=512"),
    ("deepseek-r1", "mi355x", "atom", "tp=8,ep=8,max_running_requests=256,kv_cache_dtype=fp8,spec_method=mtp,"
                                      "spec_depth=1"),
    ("qwen3-235b-a22b", "b200", "trtllm", "tp=8,ep=8,attention_dp=8,max_batched_tokens=8192,moe_backend=cutlass"),
]


@pytest.mark.parametrize("model, cluster, engine, text", COLOCATED)
def test_colocated_commands_are_valid_and_carry_the_picks_levers(model, cluster, engine, text):
    target = resolve_target(model, cluster, engine)
    chosen = config(text)
    plan = build_plan(target, chosen)
    (pool,) = plan.pools
    argv = list(pool.command.argv)
    assert valid(engine, argv) == []
    if engine in ("vllm", "sglang"):
        assert env_problems(pool.command.env, engine) == []
    assert pool.role == "serve" and pool.gpus_per_replica == chosen.replica_gpus
    limit = {"vllm": "--max-num-seqs", "sglang": "--max-running-requests", "atom": "--max-num-seqs",
             "trtllm": "--max_batch_size"}[engine]
    per_scheduler = chosen.attention_dp if engine == "sglang" else 1     # SGLang splits its cap over DP ranks
    assert argv[argv.index(limit) + 1] == str(chosen.max_running_requests * per_scheduler)
    caching = {"vllm": "--enable-prefix-caching" in argv, "sglang": "--disable-radix-cache" not in argv,
               "atom": "--enable_prefix_caching" in argv}
    if engine == "trtllm":
        caching["trtllm"] = yaml.safe_load(pool.command.files[0][1])["kv_cache_config"]["enable_block_reuse"]
    assert caching[engine] is True
    assert argv[argv.index("--host") + 1] == "0.0.0.0"


def test_prefix_caching_follows_the_lever():
    target = resolve_target("deepseek-r1", "mi355x", "vllm")
    argv = build_plan(target, config("tp=8,prefix_cache=off")).pools[0].command.argv
    assert "--no-enable-prefix-caching" in argv and "--enable-prefix-caching" not in argv


def test_context_is_the_models_when_it_fits_else_the_longest_sequence_that_fits():
    """The longest sequence the pool holds, in 1,024-token steps (halving it launched
    Qwen3.5-35B-A3B on one H100 at 131,072 tokens where 259,072 fit, below prompts its
    agentic price served)."""
    from agent.deploy.plan import CONTEXT_STEP_TOKENS
    from predictor.feasibility import memory_for

    roomy = build_plan(resolve_target("deepseek-r1", "mi355x", "vllm"), config("tp=8")).pools[0]
    assert roomy.request.context_tokens == 163840
    for model, cluster, text in (("kimi-k3", "mi355x", "tp=8,kv_memory_fraction=0.7"),
                                 ("qwen3.5-35b-a3b", "h100", "tp=1")):
        target = resolve_target(model, cluster, "vllm")
        tokens = build_plan(target, config(text)).pools[0].request.context_tokens
        assert tokens < target.card.max_context and tokens % CONTEXT_STEP_TOKENS == 0
        assert memory_for(target.card, target.cluster, config(text), tokens).fits
        assert not memory_for(target.card, target.cluster, config(text), tokens + CONTEXT_STEP_TOKENS).fits
        assert tokens > target.card.max_context // 2
    assert DeployOptions(context_tokens=4096).context_tokens == 4096


SPLITS = [
    ("deepseek-r1", "mi355x8x2", "vllm", "disaggregated=true,prefill_layout=TP8,decode_layout=TP8/EP8/DP8,"
                                          "kv_transfer_backend=nixl,concurrency=256"),
    ("deepseek-r1", "mi355x8x2", "sglang", "disaggregated=true,prefill_layout=TP8,decode_layout=TP8/EP8/DP8,"
                                            "kv_transfer_backend=mori,concurrency=256"),
    ("qwen3-235b-a22b", "b200x8x2", "trtllm", "disaggregated=true,prefill_layout=TP8,decode_layout=TP8/EP8/DP8,"
                                               "kv_transfer_backend=nixl,concurrency=128"),
]


@pytest.mark.parametrize("model, cluster, engine, text", SPLITS)
def test_splits_have_a_valid_command_and_worker_per_pool(model, cluster, engine, text):
    plan = build_plan(resolve_target(model, cluster, engine), config(text))
    assert [pool.role for pool in plan.pools] == ["prefill", "decode"]
    for pool in plan.pools:
        assert valid(engine, pool.command.argv) == []
        worker = dynamo_worker_argv(plan, pool)
        assert worker[:3] == ["python3", "-m", f"dynamo.{engine}"]
        assert valid(engine if engine != "trtllm" else "dynamo", worker, extra="dynamo") == []
        assert worker[worker.index("--disaggregation-mode") + 1] == pool.role
    graph = list(yaml.safe_load_all(dynamo_graph(plan)))
    (dgd,) = [d for d in graph if d["kind"] == "DynamoGraphDeployment"]
    services = dgd["spec"]["services"]
    assert set(services) == {"Frontend", "PrefillWorker", "DecodeWorker"}
    frontend = services["Frontend"]["extraPodSpec"]["mainContainer"]
    assert valid("dynamo", frontend["command"] + frontend["args"]) == []
    for pool in plan.pools:
        service = services[f"{pool.role.capitalize()}Worker"]
        assert service["subComponentType"] == pool.role and service["replicas"] == pool.replicas
        assert service["resources"]["limits"]["gpu"] == str(pool.gpus_per_replica)


def test_vllm_split_connectors_and_llmd_pools():
    plan = build_plan(resolve_target("deepseek-r1", "mi355x8x2", "vllm"), config(SPLITS[0][3]))
    prefill, decode = (list(pool.command.argv) for pool in plan.pools)
    roles = [json.loads(argv[argv.index("--kv-transfer-config") + 1]) for argv in (prefill, decode)]
    assert roles == [{"kv_connector": "NixlConnector", "kv_role": "kv_producer"},
                     {"kv_connector": "NixlConnector", "kv_role": "kv_consumer"}]
    manifests = llmd_manifests(plan)
    assert set(manifests) == {"prefill", "decode"}
    for role, text in manifests.items():
        (deployment,) = yaml.safe_load_all(text)
        pod = deployment["spec"]["template"]["spec"]
        container = pod["containers"][0]
        assert deployment["metadata"]["labels"]["llm-d.ai/role"] == role
        assert container["command"] == ["vllm", "serve"]
        assert valid("vllm", container["command"] + container["args"]) == []
        assert container["resources"]["limits"]["amd.com/gpu"] == "8"
        assert ("initContainers" in pod) is (role == "decode")
    assert "&id" not in manifests["decode"]


def test_what_cannot_be_deployed_is_refused_with_the_reason():
    with pytest.raises(InputError, match="cannot run: memory"):
        build_plan(resolve_target("deepseek-r1", "mi355x", "vllm"), config("tp=2"))
    with pytest.raises(InputError, match="--model-path CHECKPOINT that holds these precisions") as caught:
        build_plan(resolve_target("deepseek-r1", "mi355x", "sglang"), config("tp=8,expert_dtype=fp4"))
    assert "--endpoint" not in caught.value.message
    atom = resolve_target("deepseek-r1", "mi355x8x2", "atom")
    with pytest.raises(InputError, match="no prefill/decode pool flags"):
        build_plan(atom, config("disaggregated=true,prefill_layout=TP8,decode_layout=TP8,kv_transfer_backend=mori"))
    mooncake = build_plan(resolve_target("deepseek-r1", "mi355x8x2", "vllm"), config(
        "disaggregated=true,prefill_layout=TP8,decode_layout=TP8,kv_transfer_backend=mooncake"))
    with pytest.raises(InputError, match="does not speak mooncake"):
        llmd_manifests(mooncake)


def test_layouts_no_engine_flag_expresses_are_refused_not_launched_as_another():
    """DWDP would start single-GPU servers each loading every expert; TP subgroups a DEP
    pool replicating what they shard."""
    kimi = resolve_target("kimi-k3", "gb300x4x8", "trtllm")
    with pytest.raises(InputError, match="prefill_layout=DWDP16.*only under trtllm's MPI disaggregated launch"):
        build_plan(kimi, config("disaggregated=true,prefill_layout=DWDP16,decode_layout=TP16/EP16/DP16,"
                                "weight_dtype=recipe:nvfp4"))
    with pytest.raises(InputError, match="decode_layout=TP8/EP8/DP8/TS4.*no flag"):
        build_plan(resolve_target("deepseek-r1", "b200x8x2", "sglang"),
                   config("disaggregated=true,prefill_layout=TP8/EP8/DP8,decode_layout=TP8/EP8/DP8/TS4,"
                          "expert_dtype=fp8,weight_dtype=fp8"))


def test_a_helix_decode_pool_and_its_dynamo_worker_run_the_same_widths():
    plan = build_plan(resolve_target("deepseek-r1", "b200x8x2", "trtllm"), config(
        "disaggregated=true,prefill_layout=TP8/EP8/DP1,decode_layout=TP8/EP8/DP1,dcp=8,weight_dtype=fp8"))
    for pool, tp in zip(plan.pools, ("8", "1")):
        argv, worker = list(pool.command.argv), dynamo_worker_argv(plan, pool)
        assert argv[argv.index("--tp_size") + 1] == worker[worker.index("--tensor-parallel-size") + 1] == tp
        assert argv[argv.index("--ep_size") + 1] == worker[worker.index("--expert-parallel-size") + 1] == "8"


def test_fixtures_record_where_the_flags_came_from():
    for engine in ("vllm", "sglang", "dynamo", "trtllm", "atom"):
        provenance = engine_flags(engine)["provenance"]
        assert provenance["origin"] and provenance["version"] and provenance["files"]
        assert all(len(f["sha256"]) == 64 for f in provenance["files"])


@pytest.mark.parametrize("engine, flag", [("sglang", "--mem-fraction-static"),
                                          ("trtllm", "--kv_cache_free_gpu_memory_fraction"),
                                          ("vllm", "--gpu-memory-utilization")])
def test_each_engine_is_asked_for_the_kv_pool_the_lever_prices(engine, flag):
    """The lever counts weights + activations + KV; each engine's flag is its own share
    (`predictor.memory.engine_memory_fraction`), so the launched pool is the priced one."""
    from predictor.feasibility import memory_for
    from predictor.memory import free_memory_fraction, static_fraction

    target = resolve_target("deepseek-r1", "b200", engine)
    pool = build_plan(target, config("tp=8,kv_memory_fraction=0.85")).pools[0]
    argv = pool.command.argv
    value = float(argv[argv.index(flag) + 1])
    memory = memory_for(target.card, target.cluster, pool.config, pool.request.context_tokens)
    expected = {"sglang": static_fraction(memory), "trtllm": free_memory_fraction(memory), "vllm": 0.85}[engine]
    assert value == pytest.approx(expected, abs=1e-3) and value <= expected
    if engine == "sglang":            # activations and graphs sit outside its share
        assert value < 0.85


@pytest.mark.parametrize("model, cluster, engine, text", [
    ("llama-3.1-8b", "h100x8", "vllm", "tp=1,replicas=8,router=kv_aware"),
    ("llama-3.1-8b", "h100x8", "sglang", "tp=2,replicas=4,router=least_loaded"),
    ("llama-3.1-8b", "h100x8", "trtllm", "tp=4,replicas=2,router=round_robin"),
])
def test_colocated_replicas_have_a_valid_aggregated_worker_and_frontend(model, cluster, engine, text):
    plan = build_plan(resolve_target(model, cluster, engine), config(text))
    (pool,) = plan.pools
    worker = dynamo_worker_argv(plan, pool)
    assert "--disaggregation-mode" not in worker
    assert valid(engine if engine != "trtllm" else "dynamo", worker, extra="dynamo") == []
    (dgd,) = [d for d in yaml.safe_load_all(dynamo_graph(plan)) if d["kind"] == "DynamoGraphDeployment"]
    frontend = dgd["spec"]["services"]["Frontend"]["extraPodSpec"]["mainContainer"]
    assert valid("dynamo", frontend["command"] + frontend["args"]) == []
    assert dgd["spec"]["services"]["ServeWorker"]["replicas"] == pool.replicas


def test_a_pick_no_launch_expresses_names_its_lever_not_a_config_option():
    """tune's, the report's and plan-mix's deploy line: the pick's levers were not typed."""
    _, problem = try_plan(resolve_target("qwen3-32b", "h100x8", "vllm"),
                          Configuration(tp=2, weight_dtype="fp8", activation_dtype="bf16"))
    assert problem.startswith("weight_dtype: fp8 linear weights") and "--config" not in problem


def test_asked_precisions_that_restate_the_checkpoint_launch_it_as_it_is():
    """DeepSeek-R1's own FP8 weights, experts and activations asked on SGLang (which cannot
    set activations): the stock checkpoint's launch, said so, as the harvest hint does."""
    target = resolve_target("deepseek-r1", "h200x8", "sglang")
    asked = build_plan(target, Configuration(tp=8, kv_cache_dtype="fp8", weight_dtype="fp8", expert_dtype="fp8",
                                             activation_dtype="fp8"))
    plain = build_plan(target, Configuration(tp=8, kv_cache_dtype="fp8"))
    assert [p.command.argv for p in asked.pools] == [p.command.argv for p in plain.pools]
    assert any("activation_dtype=fp8" in note and "checkpoint runs on its own" in note for note in asked.notes)
    with pytest.raises(InputError):     # an activation the checkpoint does not run is still refused
        build_plan(target, Configuration(tp=8, activation_dtype="bf16"))
