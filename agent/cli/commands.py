"""The command list of `inferasim`, in help order: name, the module that registers it,
and the one-line help `inferasim --help` shows.

It is plain data so that `inferasim --help` (and a typo's did-you-mean) need no command
module: each module, and what it imports (the simulator, numpy, DSPy, the harvester),
is loaded only when its command runs (`agent.cli.app.LazyGroup`). The one-line help is
the first line of the command's docstring; `tests/agent/cli/test_app.py` keeps the two
equal.
"""

from __future__ import annotations

from typing import NamedTuple


class CommandEntry(NamedTuple):
    name: str
    module: str
    summary: str


COMMANDS: tuple[CommandEntry, ...] = (
    CommandEntry("tune", "agent.cli.tune",
                 "Search for the best configuration (seed phase, then the LLM phase when an LM is configured)."),
    CommandEntry("plan-mix", "agent.cli.mix",
                 "Pick one configuration per model and tier; print a table per tier and a short list."),
    CommandEntry("deploy", "agent.cli.deploy",
                 "The launch command (and Dynamo / llm-d manifests) for a ledger's pick, a plan-mix slot or a --config."),
    CommandEntry("report", "agent.cli.report",
                 "One self-contained HTML page for a search ledger or a plan-mix report."),
    CommandEntry("predict", "agent.cli.predict",
                 "Price one configuration: metrics, mode (anchored / rank-only), flags, memory, breakdown."),
    CommandEntry("simulate", "agent.cli.simulate",
                 "Run the discrete-event simulator: TTFT/ITL/TPOT/E2E distributions, throughput, hit rates."),
    CommandEntry("pareto", "agent.cli.pareto",
                 "Sweep layouts, precisions, splits, concurrency and speculation; write the frontier."),
    CommandEntry("harvest", "agent.cli.harvest",
                 "Measure an anchor (METHOD §4) and write it into $INFERASIM_HOME/anchors."),
    CommandEntry("score", "agent.cli.score",
                 "Score the predictor on a measured corpus: anchors from its rows, predictions for the rest."),
    CommandEntry("ledger", "agent.cli.ledger", "Review persisted ledgers (one per search)."),
    CommandEntry("anchors", "agent.cli.anchors", "The anchor cache: list, show and check anchors."),
    CommandEntry("models", "agent.cli.info", "The embedded (and user-added) model cards."),
    CommandEntry("hardware", "agent.cli.info", "The embedded GPU profiles."),
    CommandEntry("levers", "agent.cli.info", "The 36 levers with their kind and legal values (per engine)."),
    CommandEntry("objectives", "agent.cli.info", "The 24 objectives with their direction and metric."),
    CommandEntry("check", "agent.cli.info",
                 "Is a configuration legal (structure, engine support, fusions, 90% HBM)? Exit 1 if not."),
    CommandEntry("memory", "agent.cli.info",
                 "Per-GPU memory: weights by component, KV per token, pool, largest concurrency."),
)

BY_NAME: dict[str, CommandEntry] = {entry.name: entry for entry in COMMANDS}
