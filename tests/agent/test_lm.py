"""The LM layer: settings, secrets, and the real LiteLLM path against local fake servers
(an OpenAI-compatible one answering from the requested schema, and a silent one)."""

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import dspy
import pytest

from agent.lm import LmRuntime, LmSettings, build_lm, resolve_lm_settings
from levers.redact import MASK, redact, redact_argv
from agent.tune import TuneRequest, tune
from ledgers.store import load_ledger
from levers.errors import InputError
from predictor.feasibility import check_configuration
from tests.agent.tune_fakes import FakePredictor

def plan_from_schema(schema: dict) -> dict:
    """What constrained decoding could emit: five moves, one per lever of the menu, each
    the first value the schema allows (`agent.menu`)."""
    moves = []
    for name, definition in sorted(schema.get("$defs", {}).items()):
        if name.startswith("Move_") and len(moves) < 5:
            properties = definition["properties"]
            value = properties["value"].get("enum", [properties["value"].get("const")])[0]
            moves.append({"lever": properties["lever"]["const"], "value": value})
    moves += moves[:1] * (5 - len(moves))
    return {"rationale": "KV precision limits the batch", "hypotheses": ["fp8 KV helps"], "moves": moves,
            "polish_plan": "sweep concurrency"}


def test_settings_come_from_the_flag_or_the_environment(monkeypatch):
    assert resolve_lm_settings(None) is None
    monkeypatch.setenv("INFERASIM_LM", "hosted_vllm/qwen")
    monkeypatch.setenv("INFERASIM_LM_BASE_URL", "http://127.0.0.1:8000/v1")
    settings = resolve_lm_settings(None)
    assert settings.model == "hosted_vllm/qwen" and settings.base_url == "http://127.0.0.1:8000/v1"
    assert resolve_lm_settings("openai/gpt-4o-mini", "http://h/v1").model == "openai/gpt-4o-mini"
    with pytest.raises(InputError, match="not a LiteLLM model string"):
        resolve_lm_settings("gpt-4o")


def test_lm_goes_through_litellm_with_caching_off():
    lm = build_lm(LmSettings("openai/some-model", "http://127.0.0.1:9/v1", timeout_s=7, num_retries=2))
    assert lm.engine == "litellm" and lm.cache is False
    assert lm.kwargs["timeout"] == 7 and lm.num_retries == 2 and lm.kwargs["api_key"] == "no-key"


def test_redaction(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "abcdefgh12345678")
    assert redact("key abcdefgh12345678 used") == f"key {MASK} used"
    assert redact("Bearer sk-proj-abcdefghijklmnop") == f"Bearer {MASK}"
    assert redact("http://user:pw@host:8000/v1") == f"http://{MASK}@host:8000/v1"
    assert redact_argv(["tune", "--api-key", "x1", "--token=y2", "--lm", "openai/m"]) == \
        ["tune", "--api-key", MASK, f"--token={MASK}", "--lm", "openai/m"]


class SchemaServer(BaseHTTPRequestHandler):
    """Answers a chat completion with JSON matching the schema it was sent."""

    requests: list = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.requests.append(body)
        properties = body.get("response_format", {}).get("schema", {}).get("properties", {})
        if "plan" in properties:
            content = {"plan": plan_from_schema(body["response_format"]["schema"])}
        elif "next_tool_name" in properties:
            content = {"next_thought": "try fp8 weights", "next_tool_name": "evaluate_config",
                       "next_tool_args": {"changes": {"weight_dtype": "fp8", "bogus": 1}}}
            if sum("next_tool_name" in json.dumps(r.get("response_format")) for r in self.requests) > 1:
                content = {"next_thought": "done", "next_tool_name": "finish", "next_tool_args": {}}
        else:
            content = {"reasoning": "r", "best_config": {"kv_cache_dtype": "fp8"}, "what_worked": "fp8 KV",
                       "follow_ups": ["ep"]}
        reply = {"id": "x", "object": "chat.completion", "created": 0, "model": "smollm2",
                 "choices": [{"index": 0, "finish_reason": "stop",
                              "message": {"role": "assistant", "content": json.dumps(content)}}],
                 "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def schema_server():
    SchemaServer.requests = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), SchemaServer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/v1", SchemaServer.requests
    server.shutdown()


def test_tune_over_litellm_with_the_schema_sent(tmp_path, schema_server):
    url, requests = schema_server
    request = TuneRequest(model="qwen3-30b-a3b", workload="1k/1k", budget=16, lm="openai/smollm2",
                          lm_base_url=url, lm_json_schema=True, max_cycles=1)
    result = tune(request, predict_fn=FakePredictor(), check_fn=check_configuration, ledger_dir=tmp_path)
    ledger = load_ledger(result.ledger_path)
    formats = [r["response_format"] for r in requests]
    assert all(f["type"] == "json_object" and f["schema"]["required"] for f in formats)
    assert "Move_concurrency" in json.dumps(formats[0]["schema"])  # the menu is sent as the schema
    react = [f["schema"]["properties"] for f in formats if "next_tool_name" in f["schema"]["properties"]]
    assert react and react[0]["next_thought"]["maxLength"] and "anyOf" in react[0]["next_tool_args"]
    moves = react[0]["next_tool_args"]["anyOf"][0]["properties"]["changes"]["anyOf"]
    assert all(len(m["required"]) == 1 and "enum" in next(iter(m["properties"].values())) for m in moves)
    assert [(c.role, c.outcome) for c in ledger.llm.calls] == [("planner", "ok"), ("investigator", "ok")]
    assert ledger.lm.model == "openai/smollm2" and ledger.lm.json_schema
    investigator = [t for t in ledger.trials if t.phase == "investigator"]
    assert investigator[0].reason == "unknown lever 'bogus'" and investigator[0].rejected_by == "guard"
    planned = [t for t in ledger.trials if t.phase == "planner"]
    assert len(planned) == 5 and all(t.legal and t.metrics and t.duplicate_of is None for t in planned)
    assert result.best is not None and result.best.legal


def test_a_silent_server_times_out_and_is_recorded():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)  # accepts connections, never answers
    try:
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
        runtime = LmRuntime.from_settings(LmSettings("openai/silent", url, timeout_s=1.0, num_retries=0))
        answer, record = runtime.run("subquestion", lambda: dspy.Predict("question -> answer")(question="hi"))
    finally:
        listener.close()
    assert answer is None and record["outcome"] == "timeout"
    assert record["wall_ms"] < 30_000 and "Timeout" in record["message"]
