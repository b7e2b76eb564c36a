"""Trace readers: Mooncake (JSONL, array, compact form, sessions), agentic sessions, CSV,
and the bad-input paths (line numbers, skipping, empty traces, out-of-order hash ids)."""

import json
from importlib import resources

import numpy as np
import pytest

from levers.errors import InputError
from predictor.sim import ArrivalMode, load_trace

FIXTURES = resources.files("predictor") / "data" / "traces"


def write_jsonl(path, records):
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in records) + "\n")
    return path


def test_mooncake_fixture_infers_512_token_blocks():
    trace = load_trace(FIXTURES / "mooncake_conversation_2000.jsonl")
    assert trace.mode is ArrivalMode.OPEN
    assert trace.block_tokens == 512
    assert trace.num_requests == 2000
    first = trace.trace_sessions[0].requests[0]
    assert (first.prompt_tokens, first.output_tokens, first.arrival_us) == (6758, 500, 0.0)
    assert len(first.block_ids) == 14


def test_mooncake_json_array_and_compact_prefix_form(tmp_path):
    records = [
        {"timestamp": 0, "input_length": 200, "output_length": 10, "hash_ids": [1, 2, 3, 4], "id": "a"},
        {"timestamp": 5, "input_length": 384, "output_length": 10, "prefix_from": "a", "prefix_blocks": 3,
         "hash_ids": [7, 8, 9]},
    ]
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(records))
    trace = load_trace(path)
    second = trace.trace_sessions[1].requests[0]
    assert second.block_ids.tolist() == [1, 2, 3, 7, 8, 9]
    assert second.arrival_us == pytest.approx(5000.0)
    assert trace.block_tokens == 64


def test_mooncake_sessions_wait_and_join(tmp_path):
    path = write_jsonl(tmp_path / "t.jsonl", [
        {"timestamp": 1000, "input_length": 64, "output_length": 4, "hash_ids": [1], "session_id": "s"},
        {"input_length": 128, "output_length": 4, "hash_ids": [1, 2], "session_id": "s", "think_time": 2.5},
        {"input_length": 64, "output_length": 4, "hash_ids": [5], "waits_on": 0, "id": "sub"},
        {"input_length": 192, "output_length": 4, "hash_ids": [1, 2, 3], "joins": [1, "sub"], "delay": 10},
    ])
    trace = load_trace(path)
    assert len(trace.trace_sessions) == 1
    specs = trace.trace_sessions[0].requests
    assert [s.deps for s in specs] == [(), (0,), (0,), (1, 2)]
    assert specs[0].arrival_us == 0.0 and specs[1].arrival_us is None
    assert specs[1].think_us == pytest.approx(2.5e6) and specs[3].think_us == pytest.approx(1e4)


def test_bad_line_names_its_line_and_reason(tmp_path):
    path = write_jsonl(tmp_path / "bad.jsonl", [
        {"timestamp": 0, "input_length": 64, "output_length": 4, "hash_ids": [1]},
        "{not json",
        {"timestamp": 1, "input_length": -5, "output_length": 4},
        {"timestamp": 2, "input_length": 64, "output_length": 4, "think_tim": 3},
    ])
    with pytest.raises(InputError, match=r"bad.jsonl line 2: not valid JSON"):
        load_trace(path)
    trace = load_trace(path, skip_bad_lines=True)
    assert trace.bad_lines == 3
    assert trace.num_requests == 1


def test_field_errors_are_reported_with_the_field(tmp_path):
    path = write_jsonl(tmp_path / "t.jsonl", [{"timestamp": 1, "input_length": -5, "output_length": 4}])
    with pytest.raises(InputError, match=r"line 1: input_length: Input should be greater than or equal to 1"):
        load_trace(path)


def test_a_trace_with_no_requests_is_an_error(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    with pytest.raises(InputError, match="no requests"):
        load_trace(empty)
    only_bad = write_jsonl(tmp_path / "bad.jsonl", ["{oops", "nope"])
    with pytest.raises(InputError, match="no requests"):
        load_trace(only_bad, skip_bad_lines=True)


@pytest.mark.parametrize("second", [[1, 3, 2], [4, 2], [1, 2, 2]])
def test_hash_ids_out_of_order_are_rejected(tmp_path, second):
    path = write_jsonl(tmp_path / "t.jsonl", [
        {"timestamp": 0, "input_length": 192, "output_length": 1, "hash_ids": [1, 2, 3]},
        {"timestamp": 1, "input_length": 64 * len(second), "output_length": 1, "hash_ids": second},
    ])
    with pytest.raises(InputError, match=r"line 2: hash ids out of order"):
        load_trace(path)


def test_dependency_on_a_later_request_is_rejected(tmp_path):
    path = write_jsonl(tmp_path / "t.jsonl", [
        {"timestamp": 0, "input_length": 64, "output_length": 1, "waits_on": 1},
        {"timestamp": 0, "input_length": 64, "output_length": 1},
    ])
    with pytest.raises(InputError, match="line 1: waits on unknown or later request 1"):
        load_trace(path)


def test_agentic_session_joins_its_subagent_group():
    trace = load_trace(FIXTURES / "agentic_trace_0277.json")
    assert trace.mode is ArrivalMode.CLOSED and trace.block_tokens == 64
    specs = trace.trace_sessions[0].requests
    joins = [s for s in specs if len(s.deps) > 1]
    assert len(joins) == 1 and len(joins[0].deps) == 3       # waits for the two-subagent group + ...
    subagent_firsts = [s for s in specs if s.deps == (0,)]
    assert len(subagent_firsts) == 3                            # a group of one, then a group of two
    # sibling subagents share a ~11.5k-token prefix, the parent a long one turn to turn
    a, b = subagent_firsts[1].block_ids, subagent_firsts[2].block_ids
    shared = int(np.argmin(a[: len(b)] == b[: len(a)]))
    assert shared * 64 == pytest.approx(11520, abs=128)
    assert all(s.think_us <= 300e6 for s in specs)               # idle gaps capped


def test_local_hash_scope_separates_sessions(tmp_path):
    session = json.loads((FIXTURES / "agentic_trace_0538.json").read_text())
    lines = [json.dumps(session), json.dumps({**session, "id": "copy"})]
    path = tmp_path / "sessions.jsonl"
    path.write_text("\n".join(lines) + "\n")
    trace = load_trace(path)
    first, second = (s.requests[0].block_ids for s in trace.trace_sessions)
    assert len(first) == len(second) and not set(first.tolist()) & set(second.tolist())


def test_a_session_request_names_no_more_blocks_than_its_prompt_holds(tmp_path):
    """Each hash id is a block of the prompt: 500 ids on a 640-token prompt (block 64)
    replayed a 100% hit rate (a review's trace; 0.82 with its true ids)."""
    request = {"t": 0, "in": 640, "out": 8, "hash_ids": list(range(10))}
    good, bad = ({"id": "s", "block_size": 64, "requests": [{**request, "hash_ids": ids}]}
                 for ids in (list(range(10)), list(range(500))))
    path = tmp_path / "sessions.jsonl"
    path.write_text(json.dumps(good) + "\n")
    assert load_trace(path).num_requests == 1
    path.write_text(json.dumps(bad) + "\n")
    with pytest.raises(InputError, match="500 hash ids for a prompt of 640 tokens \\(at most 10 blocks of 64"):
        load_trace(path)
    # fewer than one per whole block dropped the prompt's prefix from every cache, silently
    for ids, ok in ((list(range(9)), False), ([], False), (list(range(10)), True)):
        path.write_text(json.dumps({**good, "requests": [{**request, "in": 650, "hash_ids": ids}]}) + "\n")
        if ok:
            assert load_trace(path).num_requests == 1
        else:
            with pytest.raises(InputError, match="at least 10"):
                load_trace(path)


def test_length_csv_is_open_loop():
    trace = load_trace(FIXTURES / "splitwise_conv.csv")
    assert trace.mode is ArrivalMode.OPEN and trace.num_requests == 19366
    first = trace.trace_sessions[1].requests[0]
    assert (first.prompt_tokens, first.output_tokens) == (396, 109)
    assert first.arrival_us == pytest.approx(4.314579e6)


def test_unknown_path_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        load_trace(tmp_path / "missing.jsonl")
