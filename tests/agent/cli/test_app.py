"""The CLI's shared edge (agent/cli/app.py, agent/cli/commands.py): lazy command
loading, the command list's one-line help, `--version`, did-you-mean on a command."""

import importlib
import json
import subprocess
import sys

import pytest
import typer
from typer.testing import CliRunner

from agent.cli.app import app, package_version
from agent.cli.commands import COMMANDS

runner = CliRunner()
HEAVY = ("numpy", "dspy", "litellm", "httpx", "matplotlib", "predictor.sim", "agent.tune")


def _loaded_after(args: list[str]) -> dict:
    """Run the CLI with ``args`` in a fresh interpreter; which modules were imported."""
    code = ("import json, sys\n"
            "from typer.testing import CliRunner\n"
            "from agent.cli.main import app\n"
            f"result = CliRunner().invoke(app, {args!r})\n"
            "print(json.dumps({'exit': result.exit_code, 'modules': sorted(sys.modules)}))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_help_imports_no_command_module_and_nothing_heavy():
    loaded = _loaded_after(["--help"])
    assert loaded["exit"] == 0
    commands = {m for m in loaded["modules"] if m.startswith("agent.cli.")}
    assert commands == {"agent.cli.app", "agent.cli.commands", "agent.cli.main"}
    assert not [m for m in loaded["modules"] if m.startswith(HEAVY)]


def test_models_imports_only_its_own_module():
    loaded = _loaded_after(["models"])
    assert loaded["exit"] == 0
    assert {m for m in loaded["modules"] if m.startswith("agent.cli.")} == {
        "agent.cli.app", "agent.cli.commands", "agent.cli.main", "agent.cli.info", "agent.cli.render"}
    assert not [m for m in loaded["modules"] if m.startswith(HEAVY)]


def test_listed_summary_is_the_commands_own_help():
    for entry in COMMANDS:
        importlib.import_module(entry.module)
    group = typer.main.get_group(app)
    for entry in COMMANDS:
        command = group.commands[entry.name]
        first_line = (command.help or "").strip().splitlines()[0]
        assert entry.summary == first_line, entry.name


def test_help_lists_every_command_in_order():
    result = runner.invoke(app, ["--help"], terminal_width=200)
    assert result.exit_code == 0
    listed = [line.strip("│ ").split()[0] for line in result.stdout.splitlines()
              if line.startswith("│ ") and not line.startswith("│  ") and "--" not in line.split()[1]]
    assert listed == [entry.name for entry in COMMANDS]


def test_version():
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.stdout.startswith(f"inferasim {package_version()} (Python ")


def test_mistyped_command_gets_a_suggestion():
    result = runner.invoke(app, ["tnue"])
    assert result.exit_code == 2
    assert "No such command 'tnue'. Did you mean 'tune'?" in result.output
    sub = runner.invoke(app, ["ledger", "shwo"])
    assert sub.exit_code == 2 and "Did you mean 'show'?" in sub.output


@pytest.mark.parametrize("args, suggestion", [
    (["check", "--model", "kimi-k33"], "did you mean 'kimi-k3'?"),
    (["check", "--model", "deepsek-r1"], "did you mean 'deepseek-r1'?"),
    (["check", "--model", "kimi-k3", "--cluster", "mi35x"], "did you mean 'mi355x'?"),
    (["check", "--model", "kimi-k3", "--config", "tpp=8"], "did you mean 'tp'?"),
    (["check", "--model", "kimi-k3", "--config", "spec_method=mpt"], "did you mean 'mtp'?"),
    (["check", "--model", "kimi-k3", "--engine", "vlm"], "did you mean 'vllm'?"),
    (["tune", "--model", "kimi-k3", "--objective", "throughpt", "--budget", "1"], "did you mean 'throughput'?"),
    (["predict", "--model", "kimi-k3", "--workload", "agentc"], "did you mean 'agentic'?"),
])
def test_typos_get_a_did_you_mean(args, suggestion):
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert suggestion in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_no_suggestion_for_a_far_miss():
    result = runner.invoke(app, ["check", "--model", "zzzzzz"])
    assert result.exit_code == 2 and "did you mean" not in result.stderr


def test_a_number_gets_the_accepted_numbers_not_a_spelling_guess():
    result = runner.invoke(app, ["check", "--model", "kimi-k3", "--config", "tp=3"])
    assert result.exit_code == 2 and "did you mean" not in result.stderr
    assert "accepted: 1, 2, 4, 8" in result.stderr


def test_a_huge_number_fits_its_column():
    """A tier floor of 1e-300 made a 300-digit headroom that squeezed every other column."""
    from agent.cli.render import number, percent

    assert number(1.69e302) == "1.69e+302" and percent(1.69e300, signed=True) == "+1.69e+302%"
    assert number(12345.6) == "12,346" and percent(0.12) == "12%" and percent(-0.5, signed=True) == "-50%"


@pytest.mark.parametrize("argv", [["models", "x" * 100_000], ["models", "--" + "x" * 100_000],
                                  ["bogus-" + "x" * 100_000], ["anchors", "x" * 100_000]])
def test_a_parser_usage_error_is_bounded(argv):
    """The parser echoed a 100,000-character argument whole (112 KB on stderr); its
    usage errors are bounded as the tool's own messages are."""
    result = runner.invoke(app, argv)
    assert result.exit_code == 2 and len(result.output) < 5_000, len(result.output)
    assert "x" * 50 in result.output        # the argument is still quoted, in part


def test_the_help_a_bare_command_prints_is_not_bounded(monkeypatch):
    """click carries a bare group's help as a usage error: it stays the whole help."""
    monkeypatch.setenv("TYPER_USE_RICH", "0")
    result = subprocess.run([sys.executable, "-c", "from agent.cli.main import main; main()"],
                            capture_output=True, text=True, timeout=120)
    text = result.stdout + result.stderr
    assert "Usage:" in text and len(text.splitlines()) > 10 and "plan-mix" in text
