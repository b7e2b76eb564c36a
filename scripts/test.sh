#!/usr/bin/env bash
# Set up a virtual environment in .venv and run the offline test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e ".[test,plot]"
exec .venv/bin/python -m pytest -q -n 2 "$@"
