"""`predictor.target`: names read from a file are judged as the file's fields."""

import pytest

from levers.errors import InputError
from predictor.target import recorded_target, resolve_target


def test_a_recorded_target_names_the_files_field_not_an_option():
    assert recorded_target("gpt-oss-120b", "h100", "vllm", "ledger x") == resolve_target("gpt-oss-120b", "h100", "vllm")
    with pytest.raises(InputError) as model:
        recorded_target("no-such-model", "h100", "vllm", "ledger x")
    assert model.value.what == "ledger x: model" and "unknown model" in model.value.problem
    with pytest.raises(InputError) as gpu:
        recorded_target("gpt-oss-120b", "tpu", "vllm", "ledger x")
    assert gpu.value.what == "ledger x: cluster"
    with pytest.raises(InputError) as engine:
        recorded_target("gpt-oss-120b", "mi355x", "trtllm", "ledger x")
    assert engine.value.what == "ledger x: engine"
