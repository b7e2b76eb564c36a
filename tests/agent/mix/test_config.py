"""models.yaml (PRODUCT.md §5) and the tiers of METHOD §7: shape, resolution, messages."""

from pathlib import Path

import pytest

from agent.mix.config import DEFAULT_TIERS, load_mix_file, parse_mix_text
from levers.errors import InputError

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "models.yaml"


def rejected(text: str) -> str:
    with pytest.raises(InputError) as caught:
        parse_mix_text(text, "models.yaml")
    return caught.value.message


def test_example_file_lists_the_six_models_on_mi355x():
    spec = load_mix_file(EXAMPLE)
    assert [m.name for m in spec.models] == [
        "Kimi-K3", "DeepSeek-V4-Pro", "GLM-5.2", "MiniMax-M3", "Qwen3.5-397B-A17B", "gpt-oss-120b"]
    assert [m.cluster for m in spec.models] == ["mi355x8x2", "mi355x", "mi355x8x2", "mi355x", "mi355x", "mi355x"]
    assert all(m.tiers == ("realtime", "interactive", "responsive", "bulk") for m in spec.models)
    assert all(m.workload.kind == "agentic" and m.candidates is None for m in spec.models)


def test_default_tiers_follow_method_7_and_qualify_at_half_the_ttft_cap():
    assert [(t.interactivity_floor, t.ttft_cap_s) for t in DEFAULT_TIERS.values()] == [
        (150.0, 1.0), (70.0, 2.5), (25.0, 10.0), (None, None)]
    assert [str(slo) for slo in DEFAULT_TIERS["realtime"].slos] == [
        "p50-interactivity>=150tok/s", "mean-ttft<=500ms"]
    assert DEFAULT_TIERS["bulk"].slos == ()


def test_custom_tiers_override_fields_and_add_tiers():
    spec = parse_mix_text(
        "models: [{name: gpt-oss-120b, tiers: [realtime, overnight]}]\n"
        "tiers:\n  realtime: {interactivity: 120}\n  overnight: {interactivity: 5, ttft_s: 60, ttft_stat: p90}\n")
    realtime, overnight = spec.tiers["realtime"], spec.tiers["overnight"]
    assert (realtime.interactivity_floor, realtime.ttft_cap_s) == (120.0, 1.0)  # cap inherited
    assert [str(s) for s in overnight.slos] == ["p50-interactivity>=5tok/s", "p90-ttft<=30000ms"]
    assert spec.models[0].tiers == ("realtime", "overnight")


def test_tiers_added_at_file_level_are_planned_for_every_model_without_its_own_list():
    spec = parse_mix_text(
        "models: [{name: gpt-oss-120b}, {name: kimi-k3, tiers: [bulk]}]\n"
        "tiers:\n  realtime: {interactivity: 120}\n  overnight: {interactivity: 5, ttft_s: 60}\n")
    assert spec.models[0].tiers == ("realtime", "interactive", "responsive", "bulk", "overnight")
    assert spec.models[1].tiers == ("bulk",)
    assert spec.tiers["realtime"].interactivity_floor == 120.0


def test_a_file_level_list_of_tiers_selects_them_for_every_model():
    spec = parse_mix_text("models: [{name: gpt-oss-120b}, {name: kimi-k3, tiers: [bulk]}]\n"
                          "tiers: [interactive, bulk, interactive]\n")
    assert [m.tiers for m in spec.models] == [("interactive", "bulk"), ("bulk",)]
    message = rejected("models: [{name: gpt-oss-120b}]\ntiers: [realtime, gold]\n")
    assert message.startswith("models.yaml: tiers[1]: unknown tier 'gold' (accepted: realtime, interactive")
    assert rejected("models: [{name: gpt-oss-120b}]\ntiers: 5\n").startswith("models.yaml: tiers: ")


def test_listed_candidates_are_partials_over_the_lever_defaults():
    spec = parse_mix_text("models:\n - name: Qwen3.5-397B\n   engines: [sglang, vllm]\n   candidates:\n"
                          "     - {tp: 8, concurrency: 16}\n"
                          "     - {disaggregated: true, prefill_layout: TP4, decode_layout: TP4/EP4/DP4}\n")
    entry = spec.models[0]
    assert entry.name == "Qwen3.5-397B-A17B" and entry.engines == ("sglang", "vllm")
    colocated, split = entry.candidates
    assert (colocated.tp, colocated.concurrency, colocated.max_running_requests) == (8, 16, 256)
    assert split.disaggregated and split.total_gpus == 8 and split.decode_layout == "TP4/EP4/DP4"


def test_malformed_yaml_names_the_file_and_line():
    message = rejected("models:\n  - name: kimi-k3\n    tiers: [realtime\n")
    assert message.startswith("models.yaml: malformed YAML at line")
    assert "accepted: a YAML mapping with a 'models:' list" in message


def test_unknown_model_names_the_key_path_and_the_known_models():
    message = rejected("models:\n  - name: gpt-oss-120b\n  - name: llama-9000\n")
    assert message.startswith("models.yaml: models[1].name: unknown model 'llama-9000'")
    assert "(accepted: DeepSeek-R1, " in message and " in all)" in message


def test_unknown_keys_are_rejected_with_the_accepted_keys():
    message = rejected("models:\n  - name: kimi-k3\n    max_gpu: 8\n")
    assert message.startswith("models.yaml: models[0].max_gpu: unknown key 'max_gpu'")
    assert "max_gpus" in message and "candidates" in message
    message = rejected("models: [{name: kimi-k3}]\ntiers:\n  realtime: {interactivity: 150, ttft: 1}\n")
    assert message.startswith("models.yaml: tiers.realtime.ttft: unknown key 'ttft'")
    assert "ttft_s" in message


def test_unknown_tier_name_lists_the_known_tiers():
    message = rejected("models:\n  - name: kimi-k3\n    tiers: [bulk, premium]\n")
    assert message == ("models.yaml: models[0].tiers[1]: unknown tier 'premium' "
                       "(accepted: realtime, interactive, responsive, bulk)")


def test_negative_max_gpus_is_rejected_with_what_is_accepted():
    message = rejected("models:\n  - name: minimax-m3\n  - name: glm-5.2\n  - name: kimi-k3\n    max_gpus: -8\n")
    assert message.startswith("models.yaml: models[2].max_gpus: Input should be greater than or equal to 1")
    assert message.endswith("(accepted: a positive integer (GPUs per deployment))")


@pytest.mark.parametrize("text, path, words", [
    ("models: []\n", "models.yaml: models", "at least 1"),
    ("- name: kimi-k3\n", "models.yaml", "not a mapping"),
    ("# nothing yet\n", "models.yaml", "is empty"),
    ("models: [{name: kimi-k3, candidates: everything}]\n", "models.yaml: models[0].candidates", "'auto'"),
    ("models: [{name: kimi-k3, candidates: [{tp: 3}]}]\n", "models.yaml: models[0].candidates[0].tp",
     "legal value"),
    ("models: [{name: kimi-k3, candidates: [{tpp: 8}]}]\n", "models.yaml: models[0].candidates[0].tpp",
     "unknown lever"),
    ("models: [{name: kimi-k3, engines: [tgi]}]\n", "models.yaml: models[0].engines[0]", "unknown engine"),
    ("models: [{name: kimi-k3, cluster: tpu-v5}]\n", "models.yaml: models[0].cluster", "unknown GPU"),
    ("models: [{name: kimi-k3, workload: chatty}]\n", "models.yaml: models[0].workload", "unknown workload"),
    ("models: [{name: kimi-k3}]\ntiers: {realtime: {ttft_s: 0}}\n", "models.yaml: tiers.realtime.ttft_s",
     "greater than 0"),
    ("models: [{cluster: mi355x}]\n", "models.yaml: models[0].name", "required key 'name'"),
    ("models: [{name: kimi-k3, max_gpus: true}]\n", "models.yaml: models[0].max_gpus", "not a boolean"),
    ("models: [{name: kimi-k3, acceptance: true}]\n", "models.yaml: models[0].acceptance", "a list of numbers"),
    ("models: [{name: kimi-k3, acceptance: 2.5}]\n", "models.yaml: models[0].acceptance", "L(1) = 2.5"),
    ("models: [{name: kimi-k3, acceptance: '3:5'}]\n", "models.yaml: models[0].acceptance", "L(3) = 5"),
])
def test_bad_values_name_file_key_path_and_accepted(text, path, words):
    message = rejected(text)
    assert message.startswith(path + ":"), message
    assert words in message and "(accepted: " in message


def test_missing_file_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="cannot be read"):
        load_mix_file(tmp_path / "absent.yaml")


@pytest.mark.parametrize("text, path, words", [
    ("modelz: [{name: kimi-k3}]\n", "models.yaml: modelz", "unknown key 'modelz'"),
    ("models: [{name: kimi-k3}]\ntiers: {123: {interactivity: 5}}\n", "models.yaml: tiers[123]", "valid string"),
    ("models: [{name: kimi-k3}]\ntiers: []\n", "models.yaml: tiers", "an empty list selects no tier"),
])
def test_file_level_mistakes_name_their_own_key(text, path, words):
    message = rejected(text)
    assert message.startswith(path + ":") and words in message and "[key]" not in message


def test_an_engine_that_does_not_run_on_the_entrys_gpus_is_named_by_its_key_path():
    text = "models:\n  - name: gpt-oss-20b\n    cluster: h100x1\n    engines: [vllm, llamacpp]\n"
    with pytest.raises(InputError) as caught:
        parse_mix_text(text, "m.yaml")
    assert caught.value.what == "m.yaml: models[0].engines[1]" and "does not run on NVIDIA" in caught.value.problem


def test_an_acceptance_file_is_read_beside_the_models_file(tmp_path, monkeypatch):
    """`acceptance: acc.json` names a file as `--acceptance` does: read beside the models
    file (it was refused as unreadable while its own error offered "a JSON/CSV file")."""
    (tmp_path / "acc.json").write_text('{"1": 1.8, "2": 2.4}')
    models = tmp_path / "models.yaml"
    models.write_text("models:\n  - name: gpt-oss-20b\n    cluster: h100x1\n    acceptance: acc.json\n")
    monkeypatch.chdir(Path("/"))
    spec = load_mix_file(models)
    assert spec.models[0].workload.acceptance is not None
    models.write_text("models:\n  - name: gpt-oss-20b\n    cluster: h100x1\n    acceptance: gone.json\n")
    with pytest.raises(InputError) as caught:
        load_mix_file(models)
    assert caught.value.what.endswith("models[0].acceptance") and "gone.json" in caught.value.problem
