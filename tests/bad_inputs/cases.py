"""The bad-input corpus (issue 16): several hundred hostile inputs over every command and
every file kind the product reads, each with what must happen: exit code 2, no
traceback, one bounded message that names the input and says what is accepted, within
:data:`CASE_LIMIT_S`.

A case is data: the command line (``{tmp}`` is the case's own folder, ``{f:NAME}`` a file
written there first), the files (text, bytes, or a named generator below), extra
environment, and the text the message must contain (``names``: the input; ``accepts``:
what it says is accepted, default ``"accepted:"``). Cases run in-process through typer's
``CliRunner`` (no interpreter start-up per case). Families:

- numeric options of every command x ASCII-only / finite / range violations;
- text options (model, cluster, engine, workload, SLO, objective, lever values, LM) with
  unknown, absurd, unicode-digit, escape-laden and 100 kB values;
- each file kind (trace in three formats, corpus CSV, models.yaml, ledger, anchor, user
  model card) x encoding, size, device/folder/missing, nesting, NaN/Infinity, aliases,
  wrong shapes and non-physical values;
- output paths (a folder where a file goes, a file where a folder goes, under a file).

``python -m tests.bad_inputs.cases`` runs the corpus and prints the counts.
"""

from __future__ import annotations

import sys
import time
import traceback
from pathlib import Path

from tests.bad_inputs.case import CASE_LIMIT_S, GENERATORS, Case, Outcome
from tests.bad_inputs.files import (
    anchor_cases,
    card_cases,
    config_file_cases,
    corpus_cases,
    deploy_cases,
    ledger_cases,
    mix_cases,
    trace_cases,
)
from tests.bad_inputs.options import numeric_cases, output_cases, text_option_cases


def all_cases() -> list[Case]:
    cases = [*numeric_cases(), *text_option_cases(), *trace_cases(), *corpus_cases(), *mix_cases(),
             *ledger_cases(), *anchor_cases(), *card_cases(), *output_cases(), *config_file_cases(),
             *deploy_cases()]
    ids = [case.id for case in cases]
    assert len(ids) == len(set(ids)), sorted({i for i in ids if ids.count(i) > 1})
    return cases


# --- running ---------------------------------------------------------------------------

def _materialise(case: Case, tmp: Path) -> tuple[list[str], dict[str, str]]:
    for name, content in case.files:
        path = tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, str) and content in GENERATORS:
            content = GENERATORS[content]()
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")

    def fill(text: str) -> str:
        text = text.replace("{tmp}", str(tmp))
        for name, _ in case.files:
            text = text.replace(f"{{f:{name}}}", str(tmp / name))
        return text

    return [fill(a) for a in case.args], {k: fill(v) for k, v in case.env}


def run_case(case: Case, tmp: Path) -> Outcome:
    """Run one case in-process and judge it (module docstring)."""
    from typer.testing import CliRunner

    from agent.cli.main import app

    args, env = _materialise(case, tmp)
    started = time.perf_counter()
    result = CliRunner().invoke(app, args, env=env or None)
    wall_s = time.perf_counter() - started
    output = result.output
    outcome = Outcome(case, result.exit_code, output, wall_s)
    names = case.names.replace("{tmp}", str(tmp))
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        outcome.traceback = "".join(traceback.format_exception(result.exception))
    if "Traceback" in output:
        outcome.traceback = output
    if result.exit_code != case.exit_code:
        outcome.problems.append(f"exit {result.exit_code}, expected {case.exit_code}")
    if names and names not in output:
        outcome.problems.append(f"the message does not name {names!r}")
    if case.accepts and case.accepts not in output:
        outcome.problems.append(f"the message does not say {case.accepts!r}")
    if len(output) > 4000:
        outcome.problems.append(f"{len(output):,} characters of output")
    if "\x1b[2J" in output or "\x07" in output:
        outcome.problems.append("escape sequences reached the terminal")
    if wall_s > CASE_LIMIT_S:
        outcome.problems.append(f"took {wall_s:.1f} s")
    return outcome


def main() -> int:
    import os
    import tempfile

    cases = all_cases()
    outcomes = []
    with tempfile.TemporaryDirectory() as folder:
        os.environ["INFERASIM_HOME"] = str(Path(folder) / "home")
        for index, case in enumerate(cases):
            tmp = Path(folder) / f"case-{index}"
            tmp.mkdir()
            outcomes.append(run_case(case, tmp))
    tracebacks = [o for o in outcomes if o.traceback]
    wrong_exit = [o for o in outcomes if o.exit_code != o.case.exit_code]
    slow = [o for o in outcomes if o.wall_s > CASE_LIMIT_S]
    other = [o for o in outcomes if o.problems and o not in wrong_exit and o not in slow]
    print(f"{len(cases)} cases: {len(tracebacks)} tracebacks, {len(wrong_exit)} wrong exit codes, "
          f"{len(slow)} over {CASE_LIMIT_S:g} s, {len(other)} other problems; "
          f"slowest {max(o.wall_s for o in outcomes):.2f} s, total {sum(o.wall_s for o in outcomes):.1f} s")
    for outcome in [*tracebacks, *wrong_exit, *slow, *other][:40]:
        print(f"- {outcome.case.id}: {'; '.join(outcome.problems) or 'traceback'}: {outcome.output[-300:]!r}")
    return 0 if not (tracebacks or wrong_exit or slow or other) else 1


if __name__ == "__main__":
    sys.exit(main())
