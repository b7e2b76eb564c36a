"""The 36 levers: catalogue, parsing, partial configurations, structural legality."""

from dataclasses import dataclass

import pytest

from levers.catalog import LEVERS, get_lever, parse_layout
from levers.configuration import Configuration, configuration_from_dict, from_partial, parse_config_text
from levers.errors import InputError
from levers.legality import context_reasons, fusion_reasons, structural_reasons


@dataclass
class Model:
    name: str = "toy-moe"
    num_layers: int = 60
    num_experts: int = 256
    mtp_layers: int = 1
    attention_heads: int = 64
    is_moe: bool = True
    max_context: int = 262_144


@dataclass
class Gpu:
    vendor: str = "amd"
    fp4_tflops: float | None = 10000.0


@dataclass
class Cluster:
    gpu: Gpu
    total_gpus: int = 8
    domain: int = 8

    def scale_up_gpus(self) -> int:
        return self.domain


def reasons(config_text: str, engine: str = "sglang", model=None, cluster=None) -> list[str]:
    config = Configuration().with_changes(parse_config_text(config_text))
    return structural_reasons(config, engine, model or Model(), cluster or Cluster(Gpu()))


def test_exactly_36_levers_in_product_order():
    assert len(LEVERS) == 36
    assert [lever.index for lever in LEVERS] == list(range(1, 37))
    assert LEVERS[0].name == "tp" and LEVERS[-1].name == "router"
    assert {str(lever.kind) for lever in LEVERS} == {
        "anchor-defining", "transferable", "DES", "priced", "memory + DES"}


def test_configuration_has_one_field_per_lever():
    assert list(Configuration().to_dict()) == [lever.name for lever in LEVERS]


def test_parse_config_text_merges_left_to_right():
    partial = parse_config_text(["tp=4,ep=4", "tp=8,kv_cache_dtype=fp8,fusions=add_rmsnorm+moe_expert"])
    assert partial == {"tp": 8, "ep": 4, "kv_cache_dtype": "fp8", "fusions": ("add_rmsnorm", "moe_expert")}


@pytest.mark.parametrize("text, fragment", [
    ("tp", "is not k=v"),
    ("bogus=1", "unknown lever 'bogus'"),
    ("tp=3", "'3' is not a legal value"),
    ("kv_memory_fraction=0.95", "out of range"),
    ("max_running_requests=abc", "not a valid value"),
    ("max_running_requests=inf", "not a valid value"),
    ("fusions=norm_quant+turbo", "unknown fusion 'turbo'"),
    ("decode_layout=TP8/XX2", "cannot parse"),
])
def test_bad_config_text_names_the_input_and_accepted_values(text, fragment):
    with pytest.raises(InputError) as error:
        parse_config_text(text)
    assert fragment in error.value.message
    assert "accepted" in error.value.message


def test_layout_grammar():
    assert parse_layout("TP8/EP8/DP8") == (8, 8, 8)
    assert parse_layout("tp4") == (4, 1, 1)
    with pytest.raises(InputError):
        parse_layout("EP8")


def test_default_configuration_is_legal_on_every_gpu_engine():
    for engine in ("vllm", "sglang", "atom", "trtllm"):
        vendor = "nvidia" if engine == "trtllm" else "amd"
        assert reasons("", engine=engine, cluster=Cluster(Gpu(vendor=vendor))) == []


def test_each_engine_runs_only_on_its_platforms():
    assert reasons("", engine="trtllm") == ["trtllm does not run on AMD (amd); it runs on NVIDIA"]
    assert any("atom does not run on NVIDIA" in r for r in reasons("", engine="atom", cluster=Cluster(Gpu("nvidia"))))
    assert any("llamacpp does not run on AMD" in r for r in reasons("", engine="llamacpp"))
    assert any("vllm does not run on a CPU" in r for r in reasons("", engine="vllm", cluster=Cluster(Gpu("cpu"))))


def test_a_context_beyond_the_models_maximum_is_refused():
    assert context_reasons(262_144, Model()) == []
    assert context_reasons(262_145, Model()) == ["a context of 262,145 tokens exceeds toy-moe's maximum of 262,144"]


def test_dep8_layout_is_legal_and_widths_are_checked():
    assert reasons("tp=8,attention_dp=8,ep=8,all_to_all_backend=mori") == []
    assert not any("layers" in r for r in reasons("pp=8"))        # 60 layers in stages of 8 and 7
    assert any("exceeds the 4 layers" in r for r in reasons("pp=8", model=Model(num_layers=4)))
    assert any("must divide tp=4" in r for r in reasons("tp=4,ep=8"))
    assert any("does not divide tp=4" in r for r in reasons("tp=4,attention_dp=8"))
    model = Model(attention_heads=12)
    assert any("does not divide the 12 attention heads" in r for r in reasons("tp=8", model=model))
    assert any("needs a MoE model" in r for r in reasons("tp=2,ep=2", model=Model(is_moe=False, num_experts=0)))


def test_gpu_count_and_scale_up_domain():
    assert any("needs 16 GPUs" in r for r in reasons("tp=8,replicas=2"))
    big = Cluster(Gpu(), total_gpus=16, domain=8)
    assert any("scale-up domain" in r for r in reasons("tp=16", cluster=big))
    # A cross-domain EP with attention inside one domain is allowed (PRODUCT.md §3).
    assert reasons("tp=16,ep=16,attention_dp=2,all_to_all_backend=deepep", cluster=big) == []
    assert reasons("tp=8,pp=2", model=Model(num_layers=60), cluster=big) == []


def test_disaggregation_levers_only_when_disaggregated():
    assert any("only legal when disaggregated" in r for r in reasons("decode_layout=TP8"))
    assert any("only legal when disaggregated" in r for r in reasons("prefill_replicas=2"))
    legal = "disaggregated=true,prefill_layout=TP4,decode_layout=TP4/EP4/DP4,kv_transfer_backend=mori"
    assert reasons(legal) == []
    config = Configuration().with_changes(parse_config_text(legal))
    assert (config.tp, config.ep, config.attention_dp, config.total_gpus) == (4, 4, 4, 8)
    assert any("needs prefill_layout" in r for r in reasons("disaggregated=true"))


def test_engine_support_is_checked_per_engine():
    assert any("not supported by atom" in r for r in reasons("attention_backend=triton", engine="atom"))
    assert any("not supported by vllm" in r for r in reasons("kv_block_size=1", engine="vllm"))
    assert reasons("kv_block_size=1", engine="sglang") == []


def test_precision_and_speculation_rules():
    nvidia_h100 = Cluster(Gpu(vendor="nvidia", fp4_tflops=None))
    assert any("FP4 tensor cores" in r for r in reasons("activation_dtype=fp4", cluster=nvidia_h100))
    assert any("only on AMD" in r for r in reasons("allreduce_algorithm=quick_reduce", cluster=nvidia_h100))
    assert any("needs spec_depth" in r for r in reasons("spec_method=mtp"))
    assert any("has none" in r for r in reasons("spec_method=mtp,spec_depth=2", model=Model(mtp_layers=0)))


def test_fusion_rules_method_3_13():
    assert fusion_reasons(("add_rmsnorm", "moe_expert"), None, True) == []
    assert fusion_reasons(("norm_quant",), "bf16", True) == ["fusion norm_quant needs fp8 or fp4 activations"]
    assert fusion_reasons(("norm_quant",), "fp8", True) == []
    assert fusion_reasons(("moe_routing",), None, False) == ["fusion moe_routing needs a MoE model"]
    assert "fusions may not repeat a fusion" in fusion_reasons(("add_rmsnorm", "add_rmsnorm"), None, True)
    assert "fusions may not mix 'generic' with named fusions" in fusion_reasons(("generic", "act_quant"), "fp8", True)


def test_configuration_round_trips_through_json():
    config = Configuration().with_changes(parse_config_text("tp=8,ep=8,fusions=generic,kv_cache_dtype=fp8"))
    assert configuration_from_dict(config.to_dict()) == config
    with pytest.raises(InputError):
        configuration_from_dict({"tp": 8, "warp_speed": 9})


def test_every_lever_explains_itself():
    for lever in LEVERS:
        assert lever.description and lever.accepted_text()
        assert get_lever(lever.name.replace("_", "-")) is lever


def test_config_files_are_read_through_the_input_layer(tmp_path):
    mapping = tmp_path / "c.yaml"
    mapping.write_text("tp: 4\nkv_cache_dtype: fp8\n")
    lines = tmp_path / "c.txt"
    lines.write_text("# a comment\ntp=2\nconcurrency=8\n")
    assert parse_config_text([f"@{mapping}", "ep=4"]) == {"tp": 4, "kv_cache_dtype": "fp8", "ep": 4}
    assert parse_config_text(f"@{lines}") == {"tp": 2, "concurrency": 8}
    (tmp_path / "list.yaml").write_text("- tp\n")
    for name, problem in (("list.yaml", "not a mapping"), ("missing", "cannot be read")):
        with pytest.raises(InputError, match=problem):
            parse_config_text(f"@{tmp_path / name}")


def test_a_kernel_of_one_vendor_is_illegal_on_the_other():
    nvidia = Cluster(Gpu(vendor="nvidia"))
    assert reasons("tp=8,ep=8,all_to_all_backend=pplx", engine="vllm") == [
        "all_to_all_backend=pplx runs on NVIDIA GPUs only, not AMD (amd)"]
    assert reasons("tp=8,ep=8,all_to_all_backend=deepep") == []         # DeepEP has ROCm ports
    assert reasons("moe_backend=aiter", cluster=nvidia) == ["moe_backend=aiter runs on AMD GPUs only, not NVIDIA (nvidia)"]
    assert reasons("attention_backend=flashinfer") and not reasons("attention_backend=flashinfer", cluster=nvidia)
    assert reasons("moe_backend=triton") == reasons("moe_backend=triton", cluster=nvidia) == []


def test_vllm_expert_parallelism_spans_the_replica_or_nothing():
    """vLLM's one switch shards experts over every rank (deploy and harvest cannot launch
    an EP between 1 and tp); SGLang and TensorRT-LLM take an EP group."""
    assert reasons("tp=8,ep=2", engine="vllm") == [
        "ep=2 cannot run on vllm: its --enable-expert-parallel spans every rank of the replica (ep = 1 or 8)"]
    assert reasons("tp=8,ep=8", engine="vllm") == reasons("tp=8,ep=1", engine="vllm") == []
    assert reasons("tp=8,ep=2", engine="sglang") == []
    split = "disaggregated=true,prefill_layout=TP8/EP2,decode_layout=TP8/EP8"
    assert any(r.startswith("prefill_layout ep=2 cannot run on vllm") for r in reasons(split, engine="vllm"))


def test_a_host_tier_holds_at_most_the_host_dram_behind_each_gpu():
    dram = Cluster(Gpu(vendor="nvidia"))
    dram.gpu.host_dram_per_gpu_gb = 240.0
    assert reasons("host_kv_tier_gb=200", cluster=dram) == reasons("host_kv_tier_gb=200:shared", cluster=dram) == []
    assert reasons("host_kv_tier_gb=4096", cluster=dram) == [
        "host_kv_tier_gb=4096 exceeds the 240 GB of host DRAM per GPU of this GPU"]


def test_yaml_on_off_read_as_booleans_are_the_levers_on_off():
    """YAML 1.1 reads a bare `off` as false: `prefix_cache: off` in a --config file was
    refused as "False is not a legal value (accepted: on, off)"."""
    from levers.configuration import parse_partial
    assert parse_partial({"prefix_cache": False}) == {"prefix_cache": "off"}
    assert parse_partial({"prefix_cache": True}) == {"prefix_cache": "on"}


def test_an_unset_prompt_chunk_follows_a_smaller_step_budget():
    """`--config max_batched_tokens=2048` alone was illegal on every engine (the default
    8,192-token chunk exceeded it); a chunk the user gives above the budget stays refused."""
    small = from_partial(parse_config_text("max_batched_tokens=2048"))
    assert (small.max_batched_tokens, small.chunked_prefill_size) == (2048, 2048)
    assert from_partial(parse_config_text("max_batched_tokens=32768")).chunked_prefill_size == 8192
    assert from_partial(parse_config_text("chunked_prefill_size=1024")).chunked_prefill_size == 1024
    given = from_partial(parse_config_text("max_batched_tokens=2048,chunked_prefill_size=4096"))
    assert given.chunked_prefill_size == 4096
    nvidia = Cluster(Gpu(vendor="nvidia"))
    for engine in ("vllm", "sglang", "trtllm"):
        assert not structural_reasons(small, engine, Model(), nvidia)
        assert any("exceeds max_batched_tokens" in r for r in structural_reasons(given, engine, Model(), nvidia))


def test_trtllm_attention_dp_spans_every_tp_rank_or_none():
    nvidia = Cluster(Gpu(vendor="nvidia"))
    reasons = lambda text, engine: structural_reasons(from_partial(parse_config_text(text)), engine,  # noqa: E731
                                                      Model(), nvidia)
    assert any("spans every TP rank or none" in r for r in reasons("tp=8,attention_dp=2", "trtllm"))
    assert not any("spans every TP rank" in r for r in reasons("tp=8,attention_dp=8", "trtllm"))
    assert not any("spans every TP rank" in r for r in reasons("tp=8,attention_dp=2", "vllm"))


def test_an_open_loop_slower_than_one_request_in_17_minutes_is_refused():
    """1e-16 requests/s ran the simulator's clock to 2.4e17 us, where a step no longer
    advanced it (TPOT 0 ms): refused with the range; 0 (a closed loop) and 0.001 pass."""
    lever = get_lever("arrival_rate")
    assert lever.parse("0") == 0.0 and lever.parse("0.001") == 0.001
    with pytest.raises(InputError, match="arrival_rate: 1e-16 requests/s is one request every") as error:
        lever.parse("1e-16")
    assert "0 (a closed loop), or requests/s from 0.001" in error.value.accepted


def test_vllm_fp8_activations_for_fp4_experts_need_fp4_tensor_cores():
    """vLLM gates its MXFP4 x MXFP8 MoE backends to Blackwell; on Hopper it runs fp4 experts
    W4A16 only, so W4A8 is illegal there (its launch refused it while searches priced it)."""
    hopper = Cluster(Gpu(vendor="nvidia", fp4_tflops=None))
    blackwell = Cluster(Gpu(vendor="nvidia"))
    asked = "expert_dtype=fp4,activation_dtype=fp8"
    assert any("W4A8" in r for r in reasons(asked, engine="vllm", cluster=hopper))
    assert not any("W4A8" in r for r in reasons(asked, engine="vllm", cluster=blackwell))
    assert not any("W4A8" in r for r in reasons(asked, engine="sglang", cluster=hopper))
    assert not any("W4A8" in r for r in reasons("expert_dtype=fp4,activation_dtype=bf16", engine="vllm", cluster=hopper))
    assert not any("W4A8" in r for r in reasons("expert_dtype=fp8,activation_dtype=fp8", engine="vllm", cluster=hopper))
