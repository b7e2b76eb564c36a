"""The `inferasim` command line (PRODUCT.md §2): the console-script entry points.

Command modules are imported on first use (`agent.cli.app.LazyGroup`, the list in
`agent.cli.commands`), so start-up costs only typer and rich.
"""

from __future__ import annotations

import os
import sys

# The simulator's small numpy reductions gain nothing from BLAS threads, whose spin-wait
# burns a core the search's worker processes need (measured: ~7% of a default `tune`).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from agent.cli.app import app  # noqa: E402


def main() -> None:
    app()


def tune_main() -> None:
    """The `tune` console script: `inferasim tune` with the same options."""
    sys.argv = ["inferasim", "tune", *sys.argv[1:]]
    app()


def plan_mix_main() -> None:
    """The `plan-mix` console script: `inferasim plan-mix` with the same options."""
    sys.argv = ["inferasim", "plan-mix", *sys.argv[1:]]
    app()
