"""The harvest commands `tune` prints for a rank-only answer (METHOD §2, §4, §3.14):
one per kernel set and width, each one accepted by `inferasim harvest --dry-run`.

The fast tests build rank-only trials; the slow ones run the three searches the issue
names (the README's main job, the same on `--cluster gb300x4x4`, and a search whose
best is disaggregated) and dry-run every command they print."""

from dataclasses import replace

import pytest
from typer.testing import CliRunner

from agent.cli.main import app
from agent.harvest_hints import harvest_hints, harvest_plan
from agent.recorder import trial_from_record
from agent.trial import Phase, Trial
from agent.tune import TuneRequest, tune
from ledgers.store import load_ledger
from levers.configuration import Configuration
from predictor.target import resolve_target

runner = CliRunner()


def rank_only(**levers):
    return Trial(phase=Phase.SEED, config=Configuration(**levers), proposed=None, legal=True, mode="rank-only")


def dry_run_every_command(lines):
    commands = [line for line in lines if not line.startswith("#")]
    assert all(line.startswith("inferasim harvest ") for line in commands), lines
    for command in commands:
        result = runner.invoke(app, command.split()[1:] + ["--dry-run"])
        assert result.exit_code == 0, (command, result.output)
    return commands


def test_one_harvest_per_kernel_set_and_width():
    target = resolve_target("kimi-k3", "mi355x", "vllm")
    trials = [rank_only(tp=8, spec_method="ngram", spec_depth=2, concurrency=16),
              rank_only(tp=8, spec_method="ngram", spec_depth=1, concurrency=64, max_running_requests=32),
              rank_only(tp=8, spec_method="eagle3", spec_depth=2),
              rank_only(tp=8, weight_dtype="fp4", spec_method="ngram", spec_depth=1),
              rank_only(tp=8, activation_dtype="fp8"),
              Trial(phase=Phase.SEED, config=Configuration(tp=4), proposed=None, legal=True, mode="anchored")]
    hints = harvest_hints(target, trials)
    assert len(hints) == 4                            # ngram once (depth 2: the first), eagle3, fp4, W4A8 experts
    assert "spec_method=ngram,spec_depth=2" in hints[0].command
    commands = dry_run_every_command(harvest_plan(target, trials))
    assert len(commands) == 4 and any("weight_dtype=fp4" in c for c in commands)
    assert hints[3].command.endswith("activation_dtype=fp8") and hints[3].problem is None


def test_pools_of_one_layout_share_a_harvest():
    target = resolve_target("deepseek-r1", "mi355x", "sglang")
    trials = [rank_only(disaggregated=True, prefill_layout="TP4/EP4/DP4", decode_layout="TP4/EP4/DP4", tp=4, ep=4,
                        attention_dp=4)]
    (hint,) = harvest_hints(target, trials)
    assert hint.reduction.pool == "prefill"
    dry_run_every_command(hint.lines())


SEARCHES = {
    "readme": dict(model="kimi-k3", objective="throughput", slos=("p90-itl=25",)),
    "gb300": dict(model="kimi-k3", objective="throughput", slos=("p90-itl=25",), cluster="gb300x4x4", budget=100),
    "disaggregated": dict(model="llama-3.1-70b", cluster="h100x8x2", workload="8k/1k", objective="throughput",
                          budget=120),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SEARCHES))
def test_every_hint_of_a_real_search_passes_the_dry_run(name, tmp_path):
    """The hints a real search prints run; which trials win depends on the step model, so
    the kernel sets and pools asserted here are the ones the search priced."""
    result = tune(TuneRequest(**SEARCHES[name]), ledger_dir=tmp_path)
    shown = [t for t in [result.outcome.best, *result.outcome.top] if t is not None]
    assert result.harvest or not any(t.mode == "rank-only" for t in shown), "a rank-only answer prints hints"
    commands = dry_run_every_command(result.harvest) if result.harvest else []
    if name == "readme":
        ngram = [c for c in commands if "spec_method=ngram" in c and "dtype" not in c]
        assert len({c.split("spec_depth=")[0] for c in ngram}) == len(ngram)   # one per layout, any depth
    if name == "gb300":
        assert any(c.endswith("--endpoint http://HEAD_NODE:8000") and "tp=8," in c for c in commands)
    if name == "disaggregated":
        split = [t for t in result.outcome.top if t.config.disaggregated] or [
            t for t in _ledger_trials(result) if t.legal and t.config and t.config.disaggregated]
        assert split, "the search priced disaggregated candidates"
        lines = harvest_plan(result.context.target, [replace(split[0], mode="rank-only")])
        assert any(line.startswith("# prefill pool") for line in lines)
        dry_run_every_command(lines)


def _ledger_trials(result):
    ledger = load_ledger(result.ledger_path)
    return [trial_from_record(record, result.context) for record in ledger.trials]


def test_a_hint_measures_the_precisions_the_trial_was_priced_at():
    """A DeepSeek-R1 TP8/EP4 trial on B200 under SGLang with its precisions unset is priced at
    its anchor's FP4 recipe: the hint measures that (it printed a bare layout, which would
    run the checkpoint's own FP8, beside an fp4 one), and one hint serves both trials."""
    target = resolve_target("deepseek-r1", "b200x8", "sglang")
    trials = [rank_only(tp=8, ep=4, concurrency=4), rank_only(tp=8, ep=4, weight_dtype="fp4", concurrency=4)]
    commands = [line for line in harvest_plan(target, trials) if not line.startswith("#")]
    assert len(commands) == 1, commands
    assert "weight_dtype=fp4" in commands[0] and "expert_dtype=fp4" in commands[0]


def test_a_recipe_that_restates_the_checkpoint_harvests_the_stock_checkpoint():
    """DeepSeek-R1's FP8 recipe (weights, experts and activations FP8) is what its stock
    checkpoint runs: the hint launches it as is, where it asked for a quantized checkpoint
    because SGLang cannot set activation_dtype; a precision the stock one lacks still asks."""
    target = resolve_target("deepseek-r1", "h200x8", "sglang")
    lines = harvest_plan(target, [rank_only(tp=8, kv_cache_dtype="fp8")], 2048)
    assert len(lines) == 1 and "QUANTIZED_CHECKPOINT" not in lines[0] and "activation_dtype" not in lines[0]
    dry_run_every_command(lines)
    experts = harvest_plan(target, [rank_only(tp=8, expert_dtype="fp4")], 2048)
    assert any("--model-path QUANTIZED_CHECKPOINT" in line and "expert_dtype=fp4" in line for line in experts)
