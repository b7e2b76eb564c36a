"""Every command's `--json` output has a shipped JSON Schema (agent/cli/schemas, built by
scripts/build_output_schemas.py from agent.cli.output_schemas): the files are up to date,
each output validates, and no property name has two JSON types across all schemas (one
JSON type per quantity, null aside)."""

import json
from collections import defaultdict
from pathlib import Path

import jsonschema
import pytest
from typer.testing import CliRunner

import agent.mix.planner
import agent.question
from agent.cli.main import app
from agent.cli.output_schemas import SCHEMA_DIR, build, schema_text
from tests.agent.mix.test_planner import GPT_OSS_CANDIDATES, fake_predict
from tests.agent.tune_fakes import FakePredictor

runner = CliRunner()
CORPUS = Path(__file__).resolve().parents[2] / "fixtures" / "corpus" / "native_small.csv"
QWEN = ["--model", "qwen3-30b-a3b", "--workload", "1k/1k"]


def schema(name: str) -> dict:
    return json.loads((SCHEMA_DIR / f"{name}.schema.json").read_text())


def strict_json(text: str):
    """JSON as strict parsers read it: NaN and Infinity are not JSON."""
    def refuse(constant: str):
        raise ValueError(f"{constant} is not JSON")
    return json.loads(text, parse_constant=refuse)


def output(args: list[str], codes=(0, 1)):
    result = runner.invoke(app, args)
    assert result.exit_code in codes, result.output
    return strict_json(result.stdout)


def test_shipped_schemas_are_up_to_date():
    built = build()
    assert sorted(p.name for p in SCHEMA_DIR.glob("*.schema.json")) == sorted(f"{n}.schema.json" for n in built)
    for name, value in built.items():
        assert (SCHEMA_DIR / f"{name}.schema.json").read_text() == schema_text(value), name
        jsonschema.Draft202012Validator.check_schema(value)


def _types(node: dict, defs: dict) -> frozenset[str]:
    """The JSON types a schema admits (through $ref, anyOf and enum), null left out."""
    if "$ref" in node:
        return _types(defs[node["$ref"].rsplit("/", 1)[-1]], defs)
    if "anyOf" in node:
        return frozenset().union(*(_types(n, defs) for n in node["anyOf"]))
    if "enum" in node:
        return frozenset({"string" if isinstance(v, str) else type(v).__name__ for v in node["enum"] if v is not None})
    kinds = node.get("type", [])
    return frozenset(k for k in ([kinds] if isinstance(kinds, str) else kinds) if k != "null")


def _properties(node, defs, found, where):
    if isinstance(node, dict):
        for name, sub in (node.get("properties") or {}).items():
            found[name][_types(sub, defs)].add(where)
        for value in node.values():
            _properties(value, defs, found, where)
    elif isinstance(node, list):
        for value in node:
            _properties(value, defs, found, where)


def test_one_json_type_per_quantity_across_commands():
    found: dict[str, dict[frozenset, set]] = defaultdict(lambda: defaultdict(set))
    for name, value in build().items():
        _properties(value, value.get("$defs", {}), found, name)
    clashes = {prop: {"/".join(sorted(t)): sorted(w) for t, w in by_type.items()}
               for prop, by_type in found.items() if len(by_type) > 1}
    assert clashes == {}


@pytest.fixture
def fakes(monkeypatch, tmp_path):
    monkeypatch.setattr(agent.question, "predict", FakePredictor())
    monkeypatch.setattr(agent.mix.planner, "default_predict_fn", lambda: fake_predict)
    (tmp_path / "models.yaml").write_text(GPT_OSS_CANDIDATES)
    return tmp_path


def test_every_command_output_validates(fakes):
    tmp = fakes
    tuned = output(["tune", *QWEN, "--budget", "10", "--json"])
    ledger = tuned["ledger"]
    anchor = output(["anchors", "list", "--json", "--model", "deepseek-r1", "--gpu", "mi355x"])[0]["id"]
    outputs = {
        "tune": tuned,
        "plan-mix": output(["plan-mix", str(tmp / "models.yaml"), "--workers", "1", "--json"]),
        "deploy": output(["deploy", ledger, "--out", str(tmp / "d"), "--json"]),
        "report": output(["report", ledger, "-o", str(tmp / "r.html"), "--json"]),
        "predict": output(["predict", "--model", "qwen3-30b-a3b", "--cluster", "h100x1", "--config", "tp=1",
                           "--json"]),
        "simulate": output(["simulate", "--model", "qwen3-30b-a3b", "--cluster", "h100x1", "--config", "tp=1",
                            "--workload", "1k/1k", "--requests", "20", "--replications", "2", "--json"]),
        "pareto": output(["pareto", "--model", "llama-3.1-8b", "--cluster", "h100x1", "--engine", "vllm",
                          "--max-points", "20", "--no-plot", "--out", str(tmp / "p"), "--json"]),
        "check": output(["check", "--model", "qwen3-30b-a3b", "--json"]),
        "memory": output(["memory", "--model", "qwen3-30b-a3b", "--json"]),
        "models": output(["models", "--json"]), "hardware": output(["hardware", "--json"]),
        "levers": output(["levers", "--json"]), "objectives": output(["objectives", "--json"]),
        "anchors-list": output(["anchors", "list", "--json"]),
        "anchors-show": output(["anchors", "show", anchor, "--json"]),
        "anchors-check": output(["anchors", "check", "--cluster", "mi355x", "--json"]),
        "ledger-list": output(["ledger", "list", "--json"]),
        "ledger-show": output(["ledger", "show", ledger, "--json"]),
        "ledger-best": output(["ledger", "best", ledger, "--json"]),
        "ledger-compare": output(["ledger", "compare", ledger, ledger, "--json"]),
        "harvest": output(["harvest", "--engine", "vllm", "--model", "deepseek-r1", "--config", "tp=8",
                           "--dry-run", "--json"]),
        "score": output(["score", str(CORPUS), "--format", "native", "--json"]),
    }
    assert set(outputs) == set(build())
    for name, data in outputs.items():
        jsonschema.validate(data, schema(name))
