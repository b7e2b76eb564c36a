"""Corpus readers and mapping rules (predictor.corpus.read, corpus_formats, corpus_where)."""

from pathlib import Path

import pytest

from levers.errors import InputError
from predictor.cards.registry import load_card
from predictor.corpus.formats import dtypes_for
from predictor.corpus.read import (
    MappingError,
    card_name_for,
    detect_format,
    engine_for,
    filter_rows,
    gpu_name_for,
    read_corpus,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "corpus"
IX = FIXTURES / "inferencex_small.csv"
AIC = FIXTURES / "aiconfigurator_small.csv"
NATIVE = FIXTURES / "native_small.csv"


@pytest.mark.parametrize("raw, card", [
    ("/mnt/lustre01/models/deepseek-r1-0528-fp4-v2", "DeepSeek-R1"),
    ("nvidia/DeepSeek-R1-0528-FP4-V2", "DeepSeek-R1"),
    ("amd/DeepSeek-R1-0528-MXFP4-Preview", "DeepSeek-R1"),
    ("deepseek-ai/DeepSeek-R1-0528", "DeepSeek-R1"),
    ("/models/DeepSeek-R1", "DeepSeek-R1"),
    ("deepseek-ai/DeepSeek-V3", "DeepSeek-V3"),
    ("/mnt/lustre01/models/gpt-oss-120b", "gpt-oss-120b"),
    ("Qwen/Qwen3-235B-A22B-FP8", "Qwen3-235B-A22B"),
    ("meta-llama/Llama-3.1-8B-Instruct", "Llama-3.1-8B"),
    ("nvidia/Llama-3.1-8B-Instruct-FP8", "Llama-3.1-8B"),
    ("nvidia/Qwen3-32B-NVFP4", "Qwen3-32B"),
    ("zhipuai/GLM-5", "GLM-5"),
    ("moonshotai/Kimi-K2.5", "Kimi-K2.5"),
])
def test_model_names_map_to_cards(raw, card):
    assert card_name_for(raw) == card


def test_unknown_model_is_a_mapping_error():
    with pytest.raises(MappingError, match="matches no model card"):
        card_name_for("acme/NoSuchModel-7B")


@pytest.mark.parametrize("raw, gpu", [("mi355x-amd_0", "MI355X"), ("h200_sxm", "H200"), ("b200-trt", "B200"),
                                      ("gb200", "GB200"), ("B300_SXM", "B300")])
def test_gpu_names_map_to_profiles(raw, gpu):
    assert gpu_name_for(raw) == gpu


@pytest.mark.parametrize("raw, engine, split", [("dynamo-trt", "trtllm", False), ("trt", "trtllm", False),
                                                ("sglang-disagg", "sglang", True), ("dynamo-sglang", "sglang", False),
                                                ("vllm", "vllm", False), ("atom", "atom", False)])
def test_engine_names(raw, engine, split):
    assert engine_for(raw) == (engine, split)


def test_unknown_engine_is_a_mapping_error():
    with pytest.raises(MappingError):
        engine_for("llama.cpp")


def test_precision_rule():
    deepseek, gptoss, kimi = load_card("DeepSeek-R1"), load_card("gpt-oss-120b"), load_card("Kimi-K2.5")
    fp4 = dtypes_for(deepseek, "MI355X", "fp4")
    assert (fp4["weight_dtype"], fp4["expert_dtype"], fp4["activation_dtype"]) == ("fp8", "fp4", "fp4")
    assert dtypes_for(gptoss, "H100", "fp4")["activation_dtype"] == "bf16"      # no FP4 tensor cores
    assert dtypes_for(gptoss, "H100", "fp8")["expert_dtype"] == "fp4"           # never wider than shipped
    int4 = dtypes_for(kimi, "H200", "int4", "int4_wo", "int4_wo")
    assert (int4["expert_dtype"], int4["activation_dtype"], int4["weight_dtype"]) == ("fp4", "bf16", "bf16")
    llama = dtypes_for(load_card("Llama-3.1-70B"), "B200", "fp4", "nvfp4", "nvfp4")
    assert (llama["weight_dtype"], llama["expert_dtype"], llama["activation_dtype"]) == ("fp4", None, "fp4")


def test_inferencex_rows():
    corpus = read_corpus(IX, "inferencex")
    assert corpus.n_rows == 17 and len(corpus.failures) == 2
    reasons = {f.id: f.reason for f in corpus.failures}
    assert "conc='many' is not a number" in reasons["inferencex_small.csv:17"]
    assert "matches no model card" in reasons["inferencex_small.csv:18"]
    row = next(r for r in corpus.rows if r.engine == "vllm" and r.concurrency == 4)
    line = int(row.id.split(":")[1])
    assert row.id.startswith("inferencex_small.csv:")
    assert IX.read_text().splitlines()[line - 1].split(",")[15] == "4"          # the conc column
    assert (row.gpu, row.model, row.config.tp, row.config.attention_dp, row.total_gpus) == ("H100", "gpt-oss-120b", 2, 1, 2)
    assert row.measured.ttft_ms_mean == pytest.approx(1000 * float(IX.read_text().splitlines()[line - 1].split(",")[38]))
    assert row.chart.name == "gpt-oss-120b/H100/vllm/fp4/none/1024x1024"


def test_inferencex_split_layouts_follow_the_sglang_convention():
    rows = read_corpus(IX, "inferencex").rows
    amd = next(r for r in rows if r.gpu == "MI355X" and r.config.decode_replicas == 2 and r.config.tp == 8
               and r.config.attention_dp == 8)
    # recorded prefill tp=1 x dp_attention over 8 GPUs, ep=8: a TP x attention-DP product
    assert amd.config.prefill_layout == "TP8/EP8/DP8" and amd.total_gpus == 24
    gb = next(r for r in rows if r.gpu == "GB200")
    # dynamo-sglang records tp=1 for a 4-GPU worker: GPUs per worker are trusted
    assert gb.config.prefill_layout == "TP4/EP1/DP4" and gb.config.decode_layout == "TP4/EP1/DP4"
    assert (gb.config.prefill_replicas, gb.config.decode_replicas, gb.total_gpus) == (1, 2, 12)
    # SGLang's own prefill defaults on these GPUs (the B200 DeepSeek-R1 recipe's 16,384 too):
    # the chunk, 1/dp of it per attention-DP rank, and max_prefill_tokens
    for row in (amd, gb):
        assert (row.config.max_batched_tokens, row.config.chunked_prefill_size) == (16384, 16384)
    assert {(r.config.max_batched_tokens, r.config.chunked_prefill_size) for r in rows if r.engine == "vllm"} == {
        (8192, 8192)}
    line = IX.read_text().splitlines()[int(gb.id.split(":")[1]) - 1].split(",")
    # every GPU of both pools counts: InferenceX's output_tput_per_total_gpu
    assert gb.measured.output_throughput_per_gpu == pytest.approx(float(line[34]), rel=1e-9)


def test_aiconfigurator_rows():
    corpus = read_corpus(AIC, "aiconfigurator")
    assert corpus.n_rows == 10
    [failure] = corpus.failures
    assert "without prefill/decode worker counts" in failure.reason
    row = next(r for r in corpus.rows if r.concurrency == 128)
    assert (row.gpu, row.engine, row.model, row.config.tp) == ("B300", "vllm", "MiniMax-M2.5", 4)
    m = row.measured
    expected = 128 * 1024 / ((m.ttft_ms_mean + 1023 * m.tpot_ms_mean) / 1000) / 4   # Little's law
    assert m.throughput_derived and m.output_throughput_per_gpu == pytest.approx(expected, rel=1e-9)
    split = next(r for r in corpus.rows if r.config.disaggregated and r.concurrency == 105)
    assert split.config.decode_replicas == 5 and split.config.decode_layout == "TP4/EP4/DP1"


def test_native_rows_and_auto_format():
    corpus = read_corpus(NATIVE)
    assert corpus.format == "native" and len(corpus.rows) == 10 and not corpus.failures
    assert detect_format(["framework", "conc"]) == "inferencex"
    assert detect_format(["silicon_tpot_ms"]) == "aiconfigurator"


def test_native_totals_stand_in_for_per_gpu(tmp_path):
    path = tmp_path / "c.csv"
    path.write_text("model,hardware,engine,precision,tp,isl,osl,concurrency,total_output_throughput\n"
                    "gpt-oss-120b,h200,vllm,fp4,4,1024,1024,16,4000\n"
                    "gpt-oss-120b,h200,vllm,fp4,4,1024,1024,16,\n"
                    "gpt-oss-120b,h200,vllm,fp4,x,1024,1024,16,4000\n")
    corpus = read_corpus(path, "native")
    assert corpus.rows[0].measured.output_throughput_per_gpu == pytest.approx(1000.0)
    reasons = [f.reason for f in corpus.failures]
    assert reasons == ["no measured metric", "tp='x' is not a number"]


def test_missing_columns_and_bad_files_are_input_errors(tmp_path):
    path = tmp_path / "c.csv"
    path.write_text("model,hardware,engine\nx,y,z\n")
    with pytest.raises(InputError, match="missing required column"):
        read_corpus(path, "native")
    with pytest.raises(InputError, match="cannot be read"):
        read_corpus(tmp_path / "nope.csv", "native")
    with pytest.raises(InputError, match="unknown corpus format"):
        read_corpus(path, "csv")
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(InputError, match="empty"):
        read_corpus(empty)


def test_anchor_where_filters_rows():
    rows = read_corpus(NATIVE).rows
    matched, rest = filter_rows(rows, "tp=2, concurrency<=8")
    assert sorted(r.concurrency for r in matched) == [4, 8] and len(rest) == 8
    matched, _ = filter_rows(rows, "engine=VLLM and tp=2|4 and disaggregated=false")
    assert len(matched) == 10
    for bad in ("tp", "colour=red", "model<3"):
        with pytest.raises(InputError, match="--anchor-where"):
            filter_rows(rows, bad)


def test_aiconfigurator_sglang_workers_mix_prefill_unless_run_by_the_gap_analysis_collector():
    """AIConfigurator's generator deploys SGLang aggregated workers with mixed chunked
    prefill (`predictor.corpus.formats`): their rows are flagged and priced as a mixing
    engine's (no synchronised waves); its gap-analysis collector's rows, split rows and
    other engines are not."""
    import csv

    from predictor.benchmark import runs_in_waves
    from predictor.corpus.formats import aiconfigurator_row, sglang_default_chunk
    from predictor.workload import WorkloadSpec

    with open(AIC, encoding="utf-8") as handle:
        base = next(r for r in csv.DictReader(handle) if r["mode"] == "agg")
    sglang = {**base, "backend": "sglang", "backend_version": "0.5.9"}
    generated = aiconfigurator_row(sglang, "aic:2")
    collected = aiconfigurator_row({**sglang, "backend_version": "0.5.1.post1", "silicon_data_source":
                                    "source_file=/x/aic-auto-gap-analysis/data/b300_sxm/sglang/0.5.1.post1/m.csv; "
                                    "silicon_concurrency=128"}, "aic:3")
    vllm = aiconfigurator_row(base, "aic:4")
    assert generated.harness.mixed_prefill and not collected.harness.mixed_prefill
    assert not vllm.harness.mixed_prefill and generated.harness.name == "aiconfigurator"
    assert any("mixed chunked prefill" in note for note in generated.notes)
    # the generator's token budget per step: one prompt (+1500) and, outside SGLang, the batch
    isl = generated.isl
    assert generated.config.max_batched_tokens == isl + 1500
    assert generated.config.chunked_prefill_size == min(isl + 1500, 8192)
    assert vllm.config.max_batched_tokens == vllm.config.chunked_prefill_size == isl + 1500 + vllm.concurrency
    # the collector leaves SGLang's own defaults: max_prefill_tokens 16,384 and a chunk
    # tiered by GPU memory
    assert (collected.config.max_batched_tokens, collected.config.chunked_prefill_size) == (
        16384, sglang_default_chunk(collected.gpu))
    for row, waves in ((generated, False), (collected, True), (vllm, False)):
        spec = WorkloadSpec("fixed", row.isl, row.osl, row.requests_per_client, row.fixed_lengths,
                            harness=row.harness)
        assert runs_in_waves(row.engine, spec) is waves


def test_inferencex_b200_sglang_rows_carry_the_recipes_recv_interval():
    """InferenceX's DeepSeek-R1 recipes for SGLang on B200 poll for requests every 10 decode
    steps below 16 clients and every 30 from 16 (`predictor.corpus.formats`); other rows
    every step, and its vLLM rows schedule a step ahead."""
    import csv

    from predictor.corpus.formats import inferencex_row

    with open(NATIVE.parent / "inferencex_small.csv", encoding="utf-8") as handle:
        base = next(r for r in csv.DictReader(handle) if r["disagg"] == "False")
    b200 = {**base, "hw": "b200", "hardware": "b200", "framework": "sglang", "disagg": "False",
            "model": "deepseek-ai/DeepSeek-R1", "precision": "fp4"}
    assert inferencex_row({**b200, "conc": "8"}, "ix:2").harness.recv_interval == 10
    assert inferencex_row({**b200, "conc": "16"}, "ix:3").harness.recv_interval == 30
    vllm = inferencex_row({**b200, "framework": "vllm", "conc": "16"}, "ix:4")
    assert vllm.harness.recv_interval == 1 and vllm.harness.ahead_steps == 1   # its recipes' async scheduling
    assert inferencex_row({**b200, "conc": "16"}, "ix:6").harness.ahead_steps == 0
    assert inferencex_row({**b200, "hw": "h200", "hardware": "h200", "conc": "16"}, "ix:5").harness.recv_interval == 1
    other_model = {**b200, "model": "openai/gpt-oss-120b", "precision": "fp4", "conc": "16", "ep": "1"}
    assert inferencex_row(other_model, "ix:7").harness.recv_interval == 1      # only the DeepSeek-R1 recipes


def test_a_workload_says_what_its_harness_did_only_when_it_did_something():
    """`WorkloadSpec.to_json` (ledgers, `predict --json`) carries the harness only for a
    measured run's workload, and only the facts that differ from the product's launch."""
    from predictor.workload import Harness, WorkloadSpec

    assert "harness" not in WorkloadSpec("fixed", 1024, 1024).to_json()
    spec = WorkloadSpec("fixed", 1024, 1024, 10, harness=Harness("inferencex", ahead_steps=1))
    assert spec.to_json()["harness"] == {"name": "inferencex", "ahead_steps": 1}


def test_aiconfigurator_tensorrt_llm_rows_of_quantized_gemms_read_an_fp8_kv_cache():
    """AIConfigurator's TensorRT-LLM rows with FP8/FP4 GEMMs run an FP8 KV cache (their
    capacity says so, `predictor.corpus.formats`); a BF16 GEMM row and other engines keep
    the checkpoint's cache."""
    import csv

    from predictor.corpus.formats import aiconfigurator_row

    with open(AIC, encoding="utf-8") as handle:
        base = next(r for r in csv.DictReader(handle) if r["mode"] == "agg")
    assert base["gemm_quant_mode"] == "fp8"
    trtllm = aiconfigurator_row({**base, "backend": "trtllm", "backend_version": "1.2.0rc6"}, "aic:2")
    unquantized = aiconfigurator_row({**base, "backend": "trtllm", "backend_version": "1.2.0rc6", "precision": "bf16",
                                      "gemm_quant_mode": "bf16", "moe_quant_mode": "bf16"}, "aic:3")
    vllm = aiconfigurator_row(base, "aic:4")
    assert trtllm.config.kv_cache_dtype == "fp8"
    assert unquantized.config.kv_cache_dtype == vllm.config.kv_cache_dtype == "bf16"


def test_aiconfigurator_split_workers_carry_the_generators_prefill_budget_or_sglangs_defaults():
    """A split row's prefill workers: TensorRT-LLM's and vLLM's `prefill max_num_tokens` =
    isl + 1500 (the generator's trtllm.rule, vllm.rule); SGLang's split workers keep its own defaults
    (max_prefill_tokens 16,384, a chunk tiered by GPU memory: 16,384 on a GB200)."""
    import csv

    from predictor.corpus.formats import aiconfigurator_row, sglang_default_chunk

    with open(AIC, encoding="utf-8") as handle:
        split = next(r for r in csv.DictReader(handle) if r["mode"] == "disagg" and r["backend"] == "trtllm")
    trtllm = aiconfigurator_row(split, "aic:5")
    assert trtllm.config.max_batched_tokens == trtllm.config.chunked_prefill_size == trtllm.isl + 1500
    vllm = aiconfigurator_row({**split, "backend": "vllm", "backend_version": "0.12.0"}, "aic:7")
    assert vllm.config.max_batched_tokens == vllm.config.chunked_prefill_size == vllm.isl + 1500
    sglang = aiconfigurator_row({**split, "backend": "sglang", "backend_version": "0.5.9"}, "aic:6")
    assert (sglang.config.max_batched_tokens, sglang.config.chunked_prefill_size) == (16384, 16384)
    assert sglang_default_chunk("h200") == 8192 and sglang_default_chunk("gb200") == 16384


def test_inferencex_deepseek_r1_b200_sglang_rows_carry_their_recipes_memory_and_fp8_cache():
    """`dsr1_fp8_b200.sh` at TP4 runs SGLang with `--mem-fraction-static 0.95`, an FP8 cache
    and 8,192-token chunks: read so, the pool holds the 32 clients of 9k tokens it measured
    decoding (at the lever's 0.90 with a BF16 cache it held one). Other stacks keep SGLang's
    defaults and the checkpoint's cache."""
    import csv

    from predictor.corpus.formats import inferencex_row
    from predictor.feasibility import memory_for
    from predictor.memory import static_fraction

    with open(NATIVE.parent / "inferencex_small.csv", encoding="utf-8") as handle:
        base = next(r for r in csv.DictReader(handle) if r["disagg"] == "False")
    fp8 = {**base, "hw": "b200", "hardware": "b200", "framework": "sglang", "disagg": "False",
           "model": "deepseek-ai/DeepSeek-R1-0528", "precision": "fp8", "tp": "4", "ep": "1",
           "dp_attention": "False", "isl": "8192", "osl": "1024", "conc": "32", "total_gpus": "4"}
    row = inferencex_row(fp8, "ix:1")
    config = row.config
    assert (config.kv_cache_dtype, config.chunked_prefill_size, config.max_batched_tokens) == ("fp8", 8192, 8192)
    memory = memory_for(row.card(), row.cluster(), config, 9216)
    assert static_fraction(memory) == pytest.approx(0.95, abs=1e-4)
    assert memory.max_concurrency >= 32
    eight = inferencex_row({**fp8, "tp": "8", "total_gpus": "8"}, "ix:2").config
    assert (eight.chunked_prefill_size, eight.kv_cache_dtype) == (32768, "fp8")
    h200 = inferencex_row({**fp8, "hw": "h200", "hardware": "h200", "tp": "8", "total_gpus": "8"}, "ix:3").config
    assert (h200.kv_cache_dtype, h200.kv_memory_fraction, h200.chunked_prefill_size) == ("bf16", 0.9, 8192)
    for other in ({"dp_attention": "True"}, {"spec_decoding": "mtp"}):    # the recipes run DP 1, no MTP
        config = inferencex_row({**fp8, "tp": "8", "total_gpus": "8", **other}, "ix:4").config
        assert (config.kv_cache_dtype, config.kv_memory_fraction) == ("bf16", 0.9)


def test_a_row_whose_prompt_rate_beats_the_gpus_peak_flops_is_not_priced():
    """2 FLOPs per weight per prompt token: a row claiming more prompt tokens per second
    than its GPUs' peak dense FLOP/s allow did not run what it names (`_check_prompt_rate`)."""
    import csv

    from predictor.corpus.formats import inferencex_row

    with open(NATIVE.parent / "inferencex_small.csv", encoding="utf-8") as handle:
        base = next(r for r in csv.DictReader(handle) if r["disagg"] == "False")
    row = inferencex_row(base, "ix:1")
    gpus = row.total_gpus
    weights = row.card().active_params() - row.card().params_by_component()["embeddings"]
    peak = row.cluster().gpu.peak_flops(row.config.activation_dtype or "bf16")
    output = float(base["total_output_tput"])
    possible = 0.9 * peak / (2 * weights) * gpus + output           # prompt + output tokens/s, all GPUs
    assert inferencex_row({**base, "total_tput": str(possible)}, "ix:2").measured.throughput_per_gpu
    with pytest.raises(MappingError, match="peak"):
        inferencex_row({**base, "total_tput": str(1.2 * peak / (2 * weights) * gpus + output)}, "ix:3")
    isl, osl = int(base["isl"]), int(base["osl"])
    only_total = {**base, "total_output_tput": "", "output_tput_per_total_gpu": "",     # prompt share by lengths
                  "total_tput": str(1.2 * peak / (2 * weights) * gpus * (isl + osl) / isl)}
    with pytest.raises(MappingError, match="peak"):
        inferencex_row(only_total, "ix:4")


def test_a_row_with_a_field_missing_or_extra_fails_naming_the_counts(tmp_path):
    """A deleted comma shifts every later value under another column: the row is refused,
    not read with its numbers in the wrong places."""
    lines = IX.read_text().splitlines()
    header_fields = len(lines[0].split(","))
    short, long = lines[1].split(","), lines[2].split(",")
    del short[5]
    path = tmp_path / "shifted.csv"
    path.write_text("\n".join([lines[0], ",".join(short), ",".join(long + ["9"]), *lines[3:]]) + "\n")
    corpus = read_corpus(path, "inferencex")
    reasons = {f.id: f.reason for f in corpus.failures}
    assert reasons["shifted.csv:2"] == f"{header_fields - 1} fields, the header has {header_fields}"
    assert reasons["shifted.csv:3"] == f"{header_fields + 1} fields, the header has {header_fields}"
    assert len(corpus.rows) == len(read_corpus(IX, "inferencex").rows) - 2


def test_a_metric_outside_every_real_run_is_refused_and_an_empty_cell_reads_alike_in_any_case():
    """A TPOT of 1e-12 s was scored (a p90 error of 3e11 %); 'nan' read as an empty cell
    and 'NaN' failed the row."""
    import csv

    from predictor.corpus.formats import inferencex_row

    with open(IX, encoding="utf-8") as handle:
        base = next(r for r in csv.DictReader(handle) if r["disagg"] == "False")
    with pytest.raises(MappingError, match=r"mean_tpot='1e-12' \(1e-09 in ms or tokens/s\) is not a number from"):
        inferencex_row({**base, "mean_tpot": "1e-12"}, "ix:1")
    for spelling in ("nan", "NaN", "NAN", "None", ""):
        assert inferencex_row({**base, "median_ttft": spelling}, "ix:2").measured.ttft_ms_median is None
