"""The `inferasim` command line (PRODUCT.md §2): imports every command module so they
register on the shared app, and the console-script entry points."""

from __future__ import annotations

import sys

from agent import commands_info, commands_predict, commands_stubs  # noqa: F401  (register commands)
from agent import commands_anchors  # noqa: F401  (register `anchors`)
from agent import commands_harvest  # noqa: F401  (register `harvest`)
from agent import commands_mix  # noqa: F401  (register `plan-mix`)
from agent import commands_pareto  # noqa: F401  (register `pareto`)
from agent import commands_ledger, commands_tune  # noqa: F401  (register `ledger`, `tune`)
from agent import commands_simulate  # noqa: F401  (register `simulate`)
from agent import commands_score  # noqa: F401  (register `score`)
from agent.cli_app import app


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
