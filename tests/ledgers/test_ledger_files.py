"""The ledger file: shipped schema up to date, written ledgers validate, atomic writes, lookup."""

import importlib.util
import json
from pathlib import Path

import jsonschema
import pytest

from agent.tune import TuneRequest, tune
from ledgers.model import Ledger
from ledgers.store import LedgerWriter, atomic_write_text, ledgers_dir, load_ledger, resolve_ledger
from levers.errors import InputError
from predictor.feasibility import check_configuration
from tests.agent.tune_fakes import FakePredictor

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "ledgers" / "ledger.schema.json"


def _build_script():
    spec = importlib.util.spec_from_file_location("build_ledger_schema", ROOT / "scripts" / "build_ledger_schema.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _search(**options):
    request = TuneRequest(model="qwen3-30b-a3b", workload="1k/1k", **options)
    return tune(request, predict_fn=FakePredictor(), check_fn=check_configuration)


def test_the_shipped_schema_is_up_to_date():
    assert SCHEMA.read_text() == _build_script().render(), "run scripts/build_ledger_schema.py"


@pytest.mark.parametrize("slos", [("tpot<=20",), ("tpot<=1",)])
def test_a_written_ledger_validates_against_the_shipped_schema(slos):
    result = _search(budget=25, no_llm=True, slos=slos)
    data = json.loads(result.ledger_path.read_text())
    jsonschema.validate(data, json.loads(SCHEMA.read_text()))
    assert result.ledger_path.parent == ledgers_dir()            # $INFERASIM_HOME/ledgers by default
    assert len(data["trials"]) == data["stats"]["num_trials"] <= 25 and data["status"] == "finished"
    assert (data["best"] is None) == (slos == ("tpot<=1",))      # 1 ms TPOT is out of reach
    if data["best"] is None:
        assert len(data["nearest_misses"]) == 5


def test_schema_rejects_a_tampered_ledger():
    data = json.loads(_search(budget=5, no_llm=True).ledger_path.read_text())
    data["trials"][0]["phase"] = "oracle"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(data, json.loads(SCHEMA.read_text()))


def test_atomic_write_replaces_whole_files_and_leaves_no_temporaries(tmp_path):
    path = tmp_path / "out" / "x.json"
    atomic_write_text(path, "one")
    atomic_write_text(path, "two", durable=True)
    assert path.read_text() == "two" and [p.name for p in path.parent.iterdir()] == ["x.json"]
    assert path.stat().st_mode & 0o777 == 0o644


def test_writer_renders_valid_json_with_one_trial_per_line(tmp_path):
    writer = LedgerWriter(tmp_path / "l.json", {"a": 1}, [{"index": 0}])
    writer.add_trial({"index": 1})
    writer.write({"status": "finished"})
    text = (tmp_path / "l.json").read_text()
    assert json.loads(text) == {"a": 1, "trials": [{"index": 0}, {"index": 1}], "status": "finished"}
    assert text.count("\n    {\"index\"") == 2


def test_ledgers_are_found_by_path_id_or_prefix_and_bad_files_are_input_errors(tmp_path):
    path = _search(budget=3, no_llm=True).ledger_path
    assert resolve_ledger(str(path)) == path == resolve_ledger(path.stem) == resolve_ledger(path.stem[:-3])
    assert isinstance(load_ledger(path.stem), Ledger)
    with pytest.raises(InputError, match="no ledger 'nope'"):
        resolve_ledger("nope")
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps({"search_id": "x"}))
    with pytest.raises(InputError, match="is not a valid ledger"):
        load_ledger(broken)


def test_a_ledger_whose_best_is_not_among_its_trials_is_refused(tmp_path):
    data = json.loads(_search(budget=3, no_llm=True).ledger_path.read_text())
    assert data["best"] is not None
    edited = tmp_path / "notrials.json"
    edited.write_text(json.dumps({**data, "trials": []}))
    with pytest.raises(InputError, match=r"best names trial #\d+, which is not in its 0 trials"):
        load_ledger(edited)
    shuffled = tmp_path / "shuffled.json"
    shuffled.write_text(json.dumps({**data, "trials": data["trials"][::-1]}))
    with pytest.raises(InputError, match=r"trials\[0\] has index"):
        load_ledger(shuffled)



def test_a_reference_too_long_for_a_path_is_an_unknown_ledger_not_an_os_error():
    with pytest.raises(InputError) as raised:
        resolve_ledger("a" * 300)
    assert raised.value.what == "ledger" and "no ledger" in str(raised.value)
