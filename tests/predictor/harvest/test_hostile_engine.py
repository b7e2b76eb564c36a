"""A hostile engine on loopback cannot hold or crash a harvest (PRODUCT.md §6): an
endpoint that never answers, a stream that only sends keep-alives, malformed SSE chunks
and tokenize replies; every case ends in one line, exit code 2, within its timeout."""

import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from typer.testing import CliRunner

from agent.cli.main import app

runner = CliRunner()
SMALL = ["--engine", "vllm", "--model", "qwen3-30b-a3b", "--cluster", "h100x1", "--config", "tp=1",
         "--prompt-tokens", "16", "--second-prompt-tokens", "0", "--decode-tokens", "4", "--batches", "1",
         "--prefill-lengths", "16,32", "--repeats", "1", "--no-probe"]


class HostileEngine(BaseHTTPRequestHandler):
    """`/health` answers; `/tokenize` and `/v1/completions` misbehave as ``mode`` says."""

    mode = "ok"
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # keep the test output clean
        pass

    def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):  # noqa: N802
        self._send(200, b"{}")

    def do_POST(self):  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        if self.path == "/tokenize":
            if self.mode == "tokenize-garbage":
                return self._send(200, b"<html>not json</html>", "text/html")
            return self._send(200, b'{"count": 16}')
        if self.mode == "silent":
            time.sleep(60)
            return None
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        if self.mode == "keepalive":
            for _ in range(600):
                self.wfile.write(b": ping\n\n")
                self.wfile.flush()
                time.sleep(0.1)
            return None
        bad = {"chunk-list": b"data: [1,2,3]\n\n", "chunk-choices": b'data: {"choices":"abc"}\n\n'}[self.mode]
        self.wfile.write(bad + b"data: [DONE]\n\n")
        self.close_connection = True
        return None


@pytest.fixture
def engine():
    handler = type("Handler", (HostileEngine,), {})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield handler, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def black_hole():
    """A port that completes the TCP handshake (the kernel's backlog) and never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    sock.close()


def harvest(*args: str) -> tuple[int, str, float]:
    started = time.perf_counter()
    result = runner.invoke(app, ["harvest", *SMALL, *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.output, time.perf_counter() - started


def test_an_endpoint_that_never_answers_honours_ready_timeout(black_hole):
    code, output, wall_s = harvest("--endpoint", black_hole, "--ready-timeout", "1.5")
    assert code == 2 and "did not answer within 1.5 s (--ready-timeout)" in output, output
    assert wall_s < 15   # bounded: an unbounded wait here was 600 s
    assert "Traceback" not in output


def test_the_overall_deadline_bounds_a_request_that_never_answers(engine):
    handler, url = engine
    handler.mode = "silent"
    code, output, wall_s = harvest("--endpoint", url, "--deadline", "2")
    assert code == 2 and "the harvest --deadline of 2 s passed" in output, output
    assert wall_s < 15   # bounded: an unbounded wait here was 600 s


def test_a_stream_of_keepalives_is_cut_at_the_request_timeout(engine):
    handler, url = engine
    handler.mode = "keepalive"
    code, output, wall_s = harvest("--endpoint", url, "--request-timeout", "1.5")
    assert code == 2 and "took longer than 1.5 s (--request-timeout)" in output, output
    assert wall_s < 15   # bounded: an unbounded wait here was 600 s


@pytest.mark.parametrize("mode, message", [
    ("chunk-list", "malformed SSE chunk '[1,2,3]'"),
    ("chunk-choices", "malformed SSE chunk '{\"choices\":\"abc\"}': choices"),
    ("tokenize-garbage", "/tokenize replied '<html>not json</html>' (not JSON)"),
])
def test_malformed_engine_replies_are_one_line_errors(engine, mode, message):
    handler, url = engine
    handler.mode = mode
    code, output, wall_s = harvest("--endpoint", url, "--deadline", "20")
    assert code == 2 and message in output, output
    assert output.count("\n") <= 3 and wall_s < 20
