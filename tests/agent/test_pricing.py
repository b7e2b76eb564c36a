"""Parallel pricing of seed rounds (agent.pricing): rounds are the seed planner's seeds
cut at round boundaries, batches never cross one, and a search on 2 worker processes
writes the same ledger, trial for trial, as one in process."""

import json
from itertools import chain
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent.cli.main import app
from agent.pricing import DEFAULT_MAX_WORKERS, Job, Pricer, SeedQueue, available_cores, resolve_workers
from agent.scoring import evaluate
from agent.seed_planner import SeedPlanner, baseline
from agent.trial import Phase
from levers.errors import InputError
from tests.agent.tune_fakes import FakePredictor, make_context

VOLATILE = {"search_id", "created_at", "updated_at", "stats", "command_line"}


def test_rounds_are_the_seeds_cut_at_round_boundaries():
    context = make_context(workload="agentic")
    start = baseline(context)
    second = start.with_changes({"concurrency": 16})
    planner = SeedPlanner(context)
    rounds = list(planner.rounds(start, incumbent=lambda: second))
    assert len(rounds) == 2 and rounds[0][0].group == "baseline" and rounds[0][0].config == start
    flat = [seed.config for seed in chain(*rounds)]
    assert flat == [seed.config for seed in planner.seeds(start, incumbent=lambda: second)]
    assert len(set(flat)) == len(flat)


def test_the_queue_takes_at_most_the_limit_and_never_crosses_a_round():
    context = make_context(workload="agentic")
    start = baseline(context)
    rounds = list(SeedPlanner(context).rounds(start, incumbent=lambda: start.with_changes({"concurrency": 16})))
    seen = {rounds[0][1].config}                       # priced meanwhile (an LLM phase): skipped
    queue = SeedQueue(iter(rounds), seen.__contains__)
    batches = []
    while batch := queue.take(7):
        batches.append([seed.config for seed in batch])
    first_round = {seed.config for seed in rounds[0]}
    assert all(1 <= len(b) <= 7 for b in batches)
    assert all(set(b) <= first_round or not set(b) & first_round for b in batches)
    assert list(chain(*batches)) == [s.config for s in chain(*rounds) if s.config not in seen]
    assert queue.take(7) == []


def test_workers_default_to_the_available_cores_and_reject_nonsense():
    assert resolve_workers(None) == min(available_cores(), DEFAULT_MAX_WORKERS) >= 1
    assert resolve_workers(1) == 1
    with pytest.raises(InputError, match="--workers"):
        resolve_workers(0)


def test_an_injected_predictor_is_priced_in_process_even_with_workers():
    predictor = FakePredictor()
    context = make_context(predictor=predictor)
    configs = [baseline(context).with_changes({"concurrency": c}) for c in (1, 4, 16)]
    with Pricer(context, question=None, workers=4) as pricer:
        assert not pricer.parallel
        trials = list(pricer.price([Job(config, Phase.SEED) for config in configs]))
    assert [t.config for t in trials] == configs and len(predictor.calls) == 3
    assert [t.metrics for t in trials] == [evaluate(context, c, phase=Phase.SEED).metrics for c in configs]


def _stable_ledger(output: str) -> dict:
    data = json.loads(Path(json.loads(output)["ledger"]).read_text())
    for trial in data["trials"]:
        trial.pop("wall_ms")
    return {key: value for key, value in data.items() if key not in VOLATILE}


@pytest.mark.slow
def test_two_workers_write_the_same_ledger_as_one():
    """Real predictor, DES on a fixed workload (a p90 SLO), with bounded trials and a
    confirm step: the parallel ledger equals the sequential one but for wall times."""
    args = ["tune", "--model", "qwen3-30b-a3b", "--workload", "1k/1k", "--slo", "p90-itl=20", "--no-llm",
            "--budget", "40", "--json"]
    runner = CliRunner()
    sequential = runner.invoke(app, [*args, "--workers", "1"])
    parallel = runner.invoke(app, [*args, "--workers", "2"])
    assert sequential.exit_code in (0, 1) and parallel.exit_code == sequential.exit_code, parallel.output
    first, second = _stable_ledger(sequential.output), _stable_ledger(parallel.output)
    assert first == second
    phases = [trial["phase"] for trial in first["trials"]]
    assert phases.count("seed") == 40 and "confirm" in phases          # both pools priced in parallel
    assert json.loads(parallel.output).keys() == json.loads(sequential.output).keys()
