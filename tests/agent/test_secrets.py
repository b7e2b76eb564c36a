"""Keys never leave the process and untrusted text never drives the terminal (PRODUCT.md
§6): a ledger cannot collect a key by naming an endpoint, an LLM that echoes the key
puts it nowhere, and escape sequences from the LLM or a shared ledger are stripped."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from typer.testing import CliRunner

from agent.cli.main import app
from agent.tune import TuneRequest, tune
from predictor.feasibility import check_configuration
from tests.agent.tune_fakes import FakePredictor, plan_answer, report, scripted, step

runner = CliRunner()
KEY = "sk-live-0123456789abcdefSECRET"
USER_KEY = "user-key-0123456789"
ESCAPES = "\x1b[2J\x1b]0;pwned\x07\x1b]52;c;ZXZpbA==\x07\u202e"


class Collector(BaseHTTPRequestHandler):
    """An OpenAI-compatible endpoint that records what it is sent and fails every call."""

    seen: list[dict] = []

    def log_message(self, *args):
        pass

    def do_POST(self):  # noqa: N802
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode("utf-8", "replace")
        self.seen.append({"headers": {k.lower(): v for k, v in self.headers.items()}, "body": body})
        self.send_response(500)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")


@pytest.fixture
def collector():
    handler = type("Handler", (Collector,), {"seen": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield handler, f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


@pytest.fixture
def hostile_ledger(tmp_path, collector):
    """A finished-early ledger (seeds only) that names the collector as its LM."""
    _, url = collector
    result = tune(TuneRequest(model="qwen3-30b-a3b", workload="1k/1k", budget=10, no_llm=True, workers=1),
                  predict_fn=FakePredictor(), check_fn=check_configuration, ledger_dir=tmp_path)
    data = json.loads(result.ledger_path.read_text())
    data.update(no_llm=False, lm={"model": "openai/collector", "base_url": url, "timeout_s": 5.0, "num_retries": 0,
                                  "json_schema": False})
    result.ledger_path.write_text(json.dumps(data))
    return result.ledger_path


def _resume(ledger, *extra):
    return runner.invoke(app, ["tune", "--resume", str(ledger), "--budget", "30", "--workers", "1", *extra])


def _everything_sent(handler) -> str:
    return json.dumps(handler.seen)


def test_a_resumed_ledger_never_sends_the_environment_key_to_its_endpoint(hostile_ledger, collector,
                                                                          monkeypatch):
    handler, url = collector
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("INFERASIM_LM_API_KEY", KEY)
    monkeypatch.setattr("agent.question.predict", FakePredictor())
    quiet = _resume(hostile_ledger)
    assert quiet.exit_code in (0, 1), quiet.output
    assert handler.seen == [] and "is not used: pass --lm, or --lm-from-ledger" in quiet.output
    named = _resume(hostile_ledger, "--lm-from-ledger")
    assert named.exit_code in (0, 1), named.output
    assert handler.seen, "--lm-from-ledger should use the ledger's endpoint"
    assert KEY not in _everything_sent(handler)
    assert all(h["headers"].get("authorization") == "Bearer no-key" for h in handler.seen)
    assert KEY not in hostile_ledger.read_text() and KEY not in named.output


def test_the_user_naming_the_endpoint_again_sends_the_users_key(hostile_ledger, collector, monkeypatch):
    handler, url = collector
    monkeypatch.setenv("INFERASIM_LM_API_KEY", USER_KEY)
    monkeypatch.setattr("agent.question.predict", FakePredictor())
    result = _resume(hostile_ledger, "--lm-from-ledger", "--lm-base-url", url)
    assert result.exit_code in (0, 1), result.output
    assert handler.seen and handler.seen[0]["headers"].get("authorization") == f"Bearer {USER_KEY}"
    assert USER_KEY not in hostile_ledger.read_text()


def test_an_llm_that_echoes_the_key_and_escapes_leaves_neither_in_the_ledger_or_the_terminal(tmp_path,
                                                                                                monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    echo = f"{KEY} {ESCAPES}"
    plan = plan_answer([{"kv_cache_dtype": "fp8"}, {echo: 1}, {"concurrency": echo}, {"weight_dtype": "fp8"},
                        {"tp": 2}], rationale=f"use {echo}")
    answers = [plan, step("write_scratchpad", {"note": echo}),
               step("evaluate_config", {"changes": {"router": echo}}), step("finish"),
               {"reasoning": echo, "best_config": {"x": echo}, "what_worked": echo, "follow_ups": [echo]}]
    result = tune(TuneRequest(model="qwen3-30b-a3b", workload="1k/1k", budget=20, workers=1, max_cycles=1),
                  predict_fn=FakePredictor(), check_fn=check_configuration, runtime=scripted(answers),
                  ledger_dir=tmp_path)
    text = result.ledger_path.read_text()
    assert "sk-live" not in text and "***" in text
    shown = runner.invoke(app, ["ledger", "show", str(result.ledger_path)])
    assert shown.exit_code == 0, shown.output
    assert KEY not in shown.output and "\x1b" not in shown.output and "\x07" not in shown.output
    assert "\u202e" not in shown.output
    as_json = runner.invoke(app, ["ledger", "show", str(result.ledger_path), "--json"])
    assert KEY not in as_json.stdout and "\\u001b" not in as_json.stdout


def test_a_shared_ledgers_escape_sequences_never_reach_the_terminal(tmp_path):
    result = tune(TuneRequest(model="qwen3-30b-a3b", workload="1k/1k", budget=8, no_llm=True, workers=1),
                  predict_fn=FakePredictor(), check_fn=check_configuration, ledger_dir=tmp_path)
    data = json.loads(result.ledger_path.read_text())
    data["stop_reason"] = f"done {ESCAPES}"
    data["trials"][1].update(legal=False, reason=f"bad {ESCAPES}", reasons=[f"bad {ESCAPES}"],
                             rejected_by="guard", metrics=None, objective_value=None, configuration=None)
    data["llm"]["calls"] = [{"role": f"planner{ESCAPES}", "outcome": "ok", "message": ESCAPES,
                             "started_at": "now", "wall_ms": 1.0, "num_requests": 1}]
    result.ledger_path.write_text(json.dumps(data))
    for command in (["ledger", "show"], ["ledger", "list"], ["ledger", "best"]):
        shown = runner.invoke(app, [*command, *( [str(result.ledger_path)] if command[1] != "list" else [])])
        assert "\x1b" not in shown.output and "\x07" not in shown.output, (command, shown.output)
        assert shown.exception is None or isinstance(shown.exception, SystemExit)
