"""The bad-input corpus (tests/bad_inputs/cases.py): every case ends with exit code 2, no
traceback, a bounded message naming the input and what is accepted, within 10 s."""

import pytest

from tests.bad_inputs.cases import all_cases, run_case

CASES = all_cases()


def test_the_corpus_is_large_and_covers_every_command():
    assert len(CASES) >= 300
    commands = {case.args[0] for case in CASES}
    # `models` reads no input of its own: a broken user card is skipped there with a warning
    # and refused where a command names it (`card_cases`)
    assert commands >= {"tune", "plan-mix", "predict", "simulate", "pareto", "harvest", "score", "ledger",
                        "anchors", "levers", "check", "memory", "deploy"}


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_bad_input(case, tmp_path):
    outcome = run_case(case, tmp_path)
    assert outcome.traceback is None, outcome.traceback
    assert not outcome.problems, f"{outcome.problems}: {outcome.output[-600:]}"
