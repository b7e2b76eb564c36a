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

import json
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
CASE_LIMIT_S = 10.0
LONG = "x" * 100_000
ESCAPES = "\x1b[2J\x1b]0;pwned\x07"
MODEL = ["--model", "qwen3-30b-a3b"]
SMALL = [*MODEL, "--cluster", "h100x1"]


@dataclass(frozen=True)
class Case:
    id: str
    args: tuple[str, ...]
    names: str                                    # the input the message must name
    accepts: str = "accepted:"                    # what it must say is accepted
    files: tuple[tuple[str, object], ...] = ()    # (name, str | bytes | generator name)
    env: tuple[tuple[str, str], ...] = ()
    exit_code: int = 2


@dataclass
class Outcome:
    case: Case
    exit_code: int
    output: str
    wall_s: float
    traceback: str | None = None
    problems: list[str] = field(default_factory=list)


# --- file generators -------------------------------------------------------------------

def _anchor_text() -> str:
    folder = ROOT / "predictor" / "data" / "anchors"
    return next(iter(sorted(folder.glob("mi355x-sglang-*.json")))).read_text()


def _anchor(**changes) -> str:
    data = json.loads(_anchor_text())
    for dotted, value in changes.items():
        target = data
        *parents, leaf = dotted.split("__")
        for part in parents:
            target = target[part]
        target[leaf] = value
    return json.dumps(data)


def _ledger(**changes) -> str:
    data = json.loads((HERE / "ledger.json").read_text())
    for key, value in changes.items():
        if key.startswith("trial0__"):
            data["trials"][0][key.removeprefix("trial0__")] = value
        else:
            data[key] = value
    return json.dumps(data)


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


MOONCAKE_OK = '{"timestamp": 0, "input_length": 64, "output_length": 4, "hash_ids": [1]}\n'
SESSION_OK = {"id": "s", "block_size": 64, "requests": [{"t": 0, "in": 64, "out": 4, "hash_ids": [1]}]}
CSV_TRACE_HEADER = "arrived_at,num_prefill_tokens,num_decode_tokens\n"
MIX_OK = "models:\n  - name: qwen3-30b-a3b\n    cluster: h100x1\n"
BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{b}: &{b} [{', '.join([f'*{a}'] * 9)}]\n" for a, b in zip("abcdefgh", "bcdefghi")) + "models: []\n"


def _corpus_row(**changes) -> str:
    text = (ROOT / "tests" / "fixtures" / "corpus" / "native_small.csv").read_text().splitlines()
    header, first = text[0].split(","), text[1].split(",")
    row = dict(zip(header, first))
    row.update(changes)
    return text[0] + "\n" + ",".join(str(row[c]) for c in header) + "\n"


GENERATORS = {
    "big": lambda: b"x" * (2 * 1024 * 1024),
    "latin1": lambda: "caf\xe9 na\xefve\n".encode("latin-1"),
    "utf16": lambda: '{"a": 1}'.encode("utf-16"),
    "nul": lambda: b"\x00\x01\x02\xff\xfe",
}


# --- the cases -------------------------------------------------------------------------

NUMERIC_OPTIONS = [
    # (command prefix, option, extra args after)
    (["tune", *SMALL, "--workload", "1k/1k"], "--budget"), (["tune", *SMALL], "--seed"),
    (["tune", *SMALL], "--des-requests"), (["tune", *SMALL], "--workers"), (["tune", *SMALL], "--top"),
    (["tune", *SMALL], "--lm-timeout"),
    (["simulate", *SMALL], "--concurrency"), (["simulate", *SMALL], "--requests"), (["simulate", *SMALL], "--seed"),
    (["predict", *SMALL], "--concurrency"), (["predict", *SMALL], "--seed"),
    (["pareto", *SMALL], "--workers"), (["pareto", *SMALL], "--max-points"), (["pareto", *SMALL], "--max-spec-depth"),
    (["pareto", *SMALL], "--num-requests"), (["pareto", *SMALL], "--seed"),
    (["plan-mix", "{tmp}/absent.yaml"], "--seed"), (["plan-mix", "{tmp}/absent.yaml"], "--requests"),
    (["plan-mix", "{tmp}/absent.yaml"], "--workers"),
    (["harvest", "--engine", "vllm", *SMALL, "--dry-run"], "--prompt-tokens"),
    (["harvest", "--engine", "vllm", *SMALL, "--dry-run"], "--second-prompt-tokens"),
    (["harvest", "--engine", "vllm", *SMALL, "--dry-run"], "--decode-tokens"),
    (["harvest", "--engine", "vllm", *SMALL, "--dry-run"], "--waves"),
    (["harvest", "--engine", "vllm", *SMALL, "--dry-run"], "--repeats"),
    (["harvest", "--engine", "vllm", *SMALL, "--dry-run"], "--threads"),
    (["harvest", "--engine", "vllm", *SMALL, "--dry-run"], "--ready-timeout"),
    (["harvest", "--engine", "vllm", *SMALL, "--dry-run"], "--request-timeout"),
    (["harvest", "--engine", "vllm", *SMALL, "--dry-run"], "--deadline"),
    (["harvest", "--engine", "vllm", *SMALL, "--dry-run"], "--seed"),
    (["ledger", "show", "{tmp}/absent.json"], "--top"),
    (["memory", *SMALL], "--context"),
]
BAD_NUMBERS = [("arabic-digits", "١٢"), ("fullwidth-digits", "１２"), ("underscores", "1_000"), ("nan", "nan"),
               ("inf", "inf"), ("negative", "-5"), ("overflow", "1e400"), ("word", "abc"), ("forty-nines", "9" * 40)]


def numeric_cases() -> list[Case]:
    cases = []
    for prefix, option in NUMERIC_OPTIONS:
        for name, value in BAD_NUMBERS:
            cases.append(Case(f"{prefix[0]}{option}={name}", (*prefix, option, value), option))
    return cases


def text_option_cases() -> list[Case]:
    c = []
    for command in (["predict"], ["simulate"], ["check"], ["tune"], ["pareto"], ["memory"]):
        has_config = command[0] in ("predict", "simulate", "check", "memory")
        head = command[0]
        c += [Case(f"{head}-model-unknown", (*command, "--model", "gpt-17"), "--model"),
              Case(f"{head}-model-long", (*command, "--model", LONG), "--model"),
              Case(f"{head}-model-escapes", (*command, "--model", ESCAPES), "--model"),
              Case(f"{head}-cluster-absurd", (*command, *MODEL, "--cluster", "mi355x8x1000000"), "--cluster",
                   "1..1,024"),
              Case(f"{head}-cluster-unicode", (*command, *MODEL, "--cluster", "mi355x٨"), "--cluster"),
              Case(f"{head}-cluster-unknown", (*command, *MODEL, "--cluster", "tpu9x8"), "--cluster"),
              Case(f"{head}-cluster-long", (*command, *MODEL, "--cluster", "h100x" + "9" * 5000), "--cluster")]
        if head != "memory":
            c += [Case(f"{head}-engine-platform", (*command, *MODEL, "--engine", "trtllm"), "--engine",
                       "an engine of this platform"),
                  Case(f"{head}-engine-atom-nvidia", (*command, *SMALL, "--engine", "atom"), "--engine"),
                  Case(f"{head}-engine-unknown", (*command, *MODEL, "--engine", "tgi"), "--engine")]
        c += [Case(f"{head}-config-{name}", (*command, *SMALL, "--config", value), what, accepts) if has_config else
              Case(f"{head}-unknown-option-{name}", (*command, *SMALL, "--config", value), "--config", "No such option")
              for name, value, what, accepts in (
                  ("unknown-lever", "tpp=2", "--config", "accepted:"), ("no-equals", "tp", "--config", "k=v"),
                  ("unicode-width", "tp=١٦", "tp", "accepted:"), ("nan", "kv_memory_fraction=nan",
                                                                  "kv_memory_fraction", "accepted:"),
                  ("range", "concurrency=100000000", "concurrency", "accepted:"),
                  ("long", f"tp={LONG}", "tp", "accepted:"), ("layout", "prefill_layout=TP١", "prefill_layout",
                                                               "accepted:"),
                  ("fusion", "fusions=warp_drive", "fusions", "accepted:"), ("escapes", f"router={ESCAPES}",
                                                                            "router", "accepted:"))]
    for command in (["predict", *SMALL], ["pareto", *SMALL], ["tune", *SMALL]):
        c += [Case(f"{command[0]}-workload-{name}", (*command, "--workload", value), "--workload", accepts)
              for name, value, accepts in (("unicode", "١k/1k", "accepted:"), ("huge", "99999999999/1", "accepted:"),
                                          ("beyond-context", "2048k/1k", "ISL + OSL <="),
                                          ("garbage", "lots", "accepted:"), ("zero", "0/1", "accepted:"))]
    for name, slo in (("grammar", "p90itl=25"), ("unit", "ttft<=2h"), ("nan", "ttft<=nan"), ("long", LONG),
                      ("unicode", "ttft<=١٢")):
        c.append(Case(f"tune-slo-{name}", ("tune", *SMALL, "--slo", slo), "--slo"))
    c += [Case("tune-objective-unknown", ("tune", *SMALL, "--objective", "happiness"), "--objective"),
          Case("tune-objective-long", ("tune", *SMALL, "--objective", LONG), "--objective"),
          Case("tune-lm-not-litellm", ("tune", *SMALL, "--lm", "gpt4"), "--lm"),
          Case("tune-precisions", ("tune", *SMALL, "--precisions", "int3"), "--precisions"),
          Case("tune-no-model", ("tune",), "--model"),
          Case("tune-resume-missing", ("tune", "--resume", "{tmp}/nope.json"), "ledger"),
          Case("tune-resume-glob", ("tune", "--resume", "*"), "ledger"),
          Case("levers-engine", ("levers", "--engine", "tgi"), "--engine"),
          Case("anchors-show-unknown", ("anchors", "show", "no-such-anchor"), "anchor"),
          Case("anchors-check-cluster", ("anchors", "check", "--cluster", "mi355x8x0"), "--cluster"),
          Case("anchors-check-engine", ("anchors", "check", "--engine", "tgi"), "--engine"),
          Case("harvest-config", ("harvest", "--engine", "vllm", *SMALL, "--config", "tp=١", "--dry-run"), "tp"),
          Case("harvest-engine-platform", ("harvest", "--engine", "atom", *SMALL, "--dry-run"), "atom"),
          Case("harvest-batches", ("harvest", "--engine", "vllm", *SMALL, "--batches", "1,٢", "--dry-run"),
               "--batches"),
          Case("harvest-prefill-lengths", ("harvest", "--engine", "vllm", *SMALL, "--prefill-lengths", "0,512",
                                           "--dry-run"), "--prefill-lengths"),
          Case("harvest-prefill-many", ("harvest", "--engine", "vllm", *SMALL, "--prefill-lengths",
                                        ",".join(["512"] * 500), "--dry-run"), "--prefill-lengths"),
          Case("score-format", ("score", "{f:c.csv}", "--format", "xlsx"), "--format",
               files=(("c.csv", _corpus_row()),)),
          Case("score-where-grammar", ("score", "{f:c.csv}", "--anchor-where", "tp>>2"), "--anchor-where",
               files=(("c.csv", _corpus_row()),)),
          Case("score-where-nothing", ("score", "{f:c.csv}", "--anchor-where", "tp=="), "--anchor-where",
               files=(("c.csv", _corpus_row()),)),
          Case("score-where-unknown-field", ("score", "{f:c.csv}", "--anchor-where", "colour=red"), "--anchor-where",
               files=(("c.csv", _corpus_row()),)),
          Case("simulate-trace-and-workload", ("simulate", *SMALL, "--workload", "1k/1k", "--trace", "{f:t.jsonl}"),
               "--trace", files=(("t.jsonl", MOONCAKE_OK),)),
          Case("simulate-requests-cap", ("simulate", *SMALL, "--requests", "1000000000000"), "--requests",
               "--allow-large")]
    return c


def _file_kind_cases(kind: str, command: tuple[str, ...], names: str, name: str,
                     contents: list[tuple[str, object, str]], env: tuple = ()) -> list[Case]:
    return [Case(f"{kind}-{label}", tuple(a.replace("{file}", f"{{f:{name}}}") for a in command), what,
                 files=((name, content),), env=env)
            for label, content, what in contents]


def _common_file_faults(kind: str, command: tuple[str, ...], names: str, name: str) -> list[Case]:
    """Encoding, size, and what is not a regular file: the same for every file kind."""
    swap = lambda target: tuple(a.replace("{file}", target) for a in command)  # noqa: E731
    cases = _file_kind_cases(kind, command, names, name, [
        ("latin1", "latin1", names), ("utf16", "utf16", names), ("binary", "nul", names), ("empty", "", names),
        ("escapes-only", ESCAPES, names)])
    cases += [Case(f"{kind}-missing", swap("{tmp}/missing-file"), "missing-file"),
              Case(f"{kind}-directory", swap("{tmp}"), "{tmp}"),
              Case(f"{kind}-device", swap("/dev/zero"), "/dev/zero"),
              Case(f"{kind}-oversized", swap(f"{{f:{name}}}"), names, "INFERASIM_MAX_INPUT_MB",
                   files=((name, "big"),), env=(("INFERASIM_MAX_INPUT_MB", "1"),))]
    return cases


def trace_cases() -> list[Case]:
    sim = ("simulate", *SMALL, "--trace", "{file}")
    cases = _common_file_faults("trace-jsonl", sim, "--trace", "t.jsonl")
    record = json.loads(MOONCAKE_OK)
    bad_records = {
        "hash-id-2^63": {**record, "hash_ids": [2**63]}, "hash-id-2^70": {**record, "hash_ids": [2**70]},
        "timestamp-infinity": "INFINITY", "timestamp-nan": "NAN", "timestamp-1e400": "1E400",
        "timestamp-string-inf": {**record, "timestamp": "inf"}, "timestamp-negative": {**record, "timestamp": -1},
        "timestamp-huge": {**record, "timestamp": 1e300}, "length-unicode": {**record, "input_length": "١٢"},
        "length-huge": {**record, "input_length": 10**12}, "length-float": {**record, "input_length": 6.5},
        "length-zero": {**record, "input_length": 0}, "unknown-key": {**record, "colour": "red"},
        "list-record": [1, 2, 3], "string-record": "hello", "hash-ids-nested": {**record, "hash_ids": [[1]]},
        "prefix-unknown": {**record, "prefix_from": "nope", "prefix_blocks": 1},
        "waits-on-unknown": {**record, "waits_on": "ghost"}, "key-long": {**record, "id": LONG},
        "think-and-delay": {**record, "think_time": 1, "delay": 1},
    }
    for label, value in bad_records.items():
        if value == "INFINITY":
            line = '{"timestamp": Infinity, "input_length": 64, "output_length": 4}'
        elif value == "NAN":
            line = '{"timestamp": NaN, "input_length": 64, "output_length": 4}'
        elif value == "1E400":
            line = '{"timestamp": 1e400, "input_length": 64, "output_length": 4}'
        else:
            line = json.dumps(value)
        cases.append(Case(f"trace-jsonl-{label}", ("simulate", *SMALL, "--trace", "{f:t.jsonl}"), "--trace",
                          "--skip-bad-lines", files=(("t.jsonl", MOONCAKE_OK + line + "\n"),)))
        cases.append(Case(f"trace-jsonl-skip-{label}", ("simulate", *SMALL, "--skip-bad-lines", "--trace",
                                                        "{f:t.jsonl}"), "--trace", "accepted:",
                          files=(("t.jsonl", line + "\n"),)))
    cases += [
        Case("trace-json-array-deep", sim[:-1] + ("{f:t.json}",), "--trace", files=(("t.json", "[" + _nested(5000)
                                                                                     + "]"),)),
        Case("trace-json-array-object", sim[:-1] + ("{f:t.json}",), "--trace",
             files=(("t.json", "[" + json.dumps({**record, "hash_ids": {"a": 1}}) + "]"),)),
        Case("trace-json-broken", sim[:-1] + ("{f:t.json}",), "--trace", files=(("t.json", "[{\"timestamp\": 0,"),)),
    ]
    csv = ("simulate", *SMALL, "--trace", "{file}")
    cases += _common_file_faults("trace-csv", csv, "--trace", "t.csv")
    for label, row in (("nan", "nan,64,4"), ("inf", "inf,64,4"), ("unicode", "0,١٢,4"), ("negative", "-1,64,4"),
                       ("huge-tokens", "0,99999999999,4"), ("float-tokens", "0,6.5,4"), ("words", "soon,lots,few"),
                       ("short-row", "0"), ("overflow", "1e400,64,4")):
        cases.append(Case(f"trace-csv-{label}", ("simulate", *SMALL, "--trace", "{f:t.csv}"), "--trace",
                          files=(("t.csv", CSV_TRACE_HEADER + row + "\n"),)))
    cases += [Case("trace-csv-missing-columns", ("simulate", *SMALL, "--trace", "{f:t.csv}"), "--trace",
                   files=(("t.csv", "a,b\n1,2\n"),)),
              Case("trace-csv-header-only", ("simulate", *SMALL, "--trace", "{f:t.csv}"), "--trace",
                   files=(("t.csv", CSV_TRACE_HEADER),))]
    session = ("simulate", *SMALL, "--trace", "{f:s.json}")
    for label, data in (("deep", '{"requests": ' + _nested(3000) + "}"),
                        ("in-unicode", json.dumps({**SESSION_OK, "requests": [{"t": 0, "in": "١٢", "out": 4}]})),
                        ("t-infinity", '{"requests": [{"t": Infinity, "in": 64, "out": 4}]}'),
                        ("hash-2^64", json.dumps({**SESSION_OK, "requests": [{"t": 0, "in": 64, "out": 4,
                                                                              "hash_ids": [2**64]}]})),
                        ("empty-requests", json.dumps({**SESSION_OK, "requests": []})),
                        ("block-size-zero", json.dumps({**SESSION_OK, "block_size": 0})),
                        ("subagent-empty", json.dumps({**SESSION_OK, "requests": [{"t": 0, "type": "subagent",
                                                                                   "requests": []}]}))):
        cases.append(Case(f"trace-session-{label}", session, "--trace", files=(("s.json", data),)))
    return cases


def corpus_cases() -> list[Case]:
    score = ("score", "{file}")
    cases = _common_file_faults("corpus", score, "corpus", "c.csv")
    header = (ROOT / "tests" / "fixtures" / "corpus" / "native_small.csv").read_text().splitlines()[0]
    cases += [Case("corpus-header-only", ("score", "{f:c.csv}"), "corpus", files=(("c.csv", header + "\n"),)),
              Case("corpus-missing-columns", ("score", "{f:c.csv}", "--format", "native"), "corpus",
                   files=(("c.csv", "model,hardware\nx,y\n"),))]
    for label, changes in (("isl-1e300", {"isl": "1e300"}), ("isl-unicode", {"isl": "١٠٢٤"}),
                           ("isl-nan", {"isl": "nan"}), ("isl-inf", {"isl": "inf"}), ("tp-huge", {"tp": "1e12"}),
                           ("beyond-context", {"isl": "10000000"}), ("ttft-inf", {"ttft_ms": "inf"}),
                           ("ttft-1e300", {"ttft_ms": "1e300"}), ("concurrency-huge", {"concurrency": "10000000"}),
                           ("model-unknown", {"model": "gpt-17"}), ("model-long", {"model": "-fp4" * 50_000}),
                           ("engine-unknown", {"engine": "tgi"}), ("hardware-unknown", {"hardware": "tpu9"}),
                           ("escapes", {"model": ESCAPES})):
        cases.append(Case(f"corpus-only-row-{label}", ("score", "{f:c.csv}"), "corpus",
                          "accepted:" if label == "model-long" else "rows in the format",
                          files=(("c.csv", _corpus_row(**changes)),)))
    return cases


def mix_cases() -> list[Case]:
    mix = ("plan-mix", "{file}")
    cases = _common_file_faults("models-yaml", mix, "models.yaml", "models.yaml")
    for label, text, what in (
            ("alias-bomb", BOMB, "models.yaml"), ("recursive-alias", "a: &a [*a]\n", "models.yaml"),
            ("deep", "models: " + "[" * 5000 + "\n", "models.yaml"), ("inf", MIX_OK + "    max_gpus: .inf\n",
                                                                     "models.yaml"),
            ("python-tag", "models: !!python/object/apply:os.system [ls]\n", "models.yaml"),
            ("top-level-list", "- a\n- b\n", "models.yaml"), ("unknown-key", MIX_OK + "    colour: red\n", "colour"),
            ("unknown-model", "models:\n  - name: gpt-17\n", "name"),
            ("cluster-absurd", "models:\n  - name: qwen3-30b-a3b\n    cluster: mi355x8x1000000\n", "cluster"),
            ("workload-context", MIX_OK + "    workload: 2048k/1k\n", "workload"),
            ("max-gpus-negative", MIX_OK + "    max_gpus: -8\n", "max_gpus"),
            ("max-gpus-unicode", MIX_OK + "    max_gpus: '١٢'\n", "max_gpus"),
            ("candidate-bad-lever", MIX_OK + "    candidates: [{tpp: 2}]\n", "candidates"),
            ("candidate-unicode", MIX_OK + "    candidates: [{tp: '١٦'}]\n", "candidates"),
            ("tier-unknown", MIX_OK + "    tiers: [gold]\n", "tiers"), ("malformed", "models: [\n", "models.yaml"),
            ("long-value", MIX_OK + f"    cluster: {LONG}\n", "cluster"),
            ("escapes", "models:\n  - name: \"\\e[2J\"\n", "name")):
        cases.append(Case(f"models-yaml-{label}", ("plan-mix", "{f:models.yaml}"), what,
                          files=(("models.yaml", text),)))
    cases += [Case("plan-mix-out-dir", ("plan-mix", "{f:models.yaml}", "--out", "{tmp}"), "--out",
                   files=(("models.yaml", MIX_OK),)),
              Case("plan-mix-out-under-file", ("plan-mix", "{f:models.yaml}", "--out", "{f:models.yaml}/r.json"),
                   "--out", files=(("models.yaml", MIX_OK),))]
    return cases


def ledger_cases() -> list[Case]:
    cases = []
    for command in (("ledger", "show", "{file}"), ("ledger", "best", "{file}"), ("tune", "--resume", "{file}"),
                    ("ledger", "compare", "{file}", "{file}")):
        kind = "ledger-" + "-".join(part for part in command[:2] if not part.startswith("{"))
        cases += _common_file_faults(kind, command, "ledger", "l.json")
        for label, text in (("nan-metric", _ledger(trial0__objective_value=float("nan")).replace("NaN", "NaN")),
                            ("infinity", _ledger().replace('"seed": 0', '"seed": Infinity')),
                            ("deep", _ledger(baseline=json.loads(_nested(200)))),
                            ("not-object", "[]"), ("wrong-schema", _ledger(schema_version=9)),
                            ("bad-config", _ledger(trial0__configuration={"tp": "١٦"})),
                            ("unknown-key", _ledger(colour="red")), ("broken", _ledger()[:500])):
            cases.append(Case(f"{kind}-{label}", tuple(a.replace("{file}", "{f:l.json}") for a in command),
                              "ledger", files=(("l.json", text),)))
    cases += [Case("ledger-show-glob", ("ledger", "show", "*"), "ledger"),
              Case("ledger-show-directory-id", ("ledger", "show", "{tmp}"), "ledger")]
    return cases


def anchor_cases() -> list[Case]:
    check = ("anchors", "check", "{file}")
    cases = _common_file_faults("anchor", check, "anchor file", "a.json")
    for label, text, what in (
            ("unknown-engine", _anchor(signature__engine="tgi"), "unknown engine"),
            ("unknown-model", _anchor(signature__model="gpt-17"), "unknown model"),
            ("unknown-gpu", _anchor(signature__accelerator="TPU9"), "unknown GPU"),
            ("schema-version", _anchor(schema_version=2), "unknown schema version"),
            ("nan", _anchor().replace('"prompt_tokens": ', '"prompt_tokens": NaN, "x": ', 1), "anchor file"),
            ("deep", _anchor(flags=json.loads(_nested(100))), "anchor file"),
            ("itl-negative", _anchor(decode_sweep__itl_ms=[-1.0] * 3, decode_sweep__batch_sizes=[1, 2, 4]),
             "anchor file"),
            ("not-object", "[]", "anchor file"), ("broken", _anchor()[:300], "anchor file"),
            ("extra-key", _anchor(colour="red"), "anchor file")):
        accepts = "accepted:" if what == "anchor file" else "refused"
        cases.append(Case(f"anchor-{label}", ("anchors", "check", "{f:a.json}"), what, accepts,
                          files=(("a.json", text),)))
    return cases


def card_cases() -> list[Case]:
    """A broken user model card in $INFERASIM_HOME/models: every command naming a model."""
    cases = []
    for label, content in (("latin1", "latin1"), ("not-json", "{"), ("deep", _nested(500)), ("nan", '{"a": NaN}'),
                           ("not-object", "[]"), ("wrong-shape", '{"name": "x"}'), ("big", "big")):
        env = (("INFERASIM_MAX_INPUT_MB", "1"),) if content == "big" else ()
        for command in (("models",), ("predict", *SMALL)):
            cases.append(Case(f"card-{label}-{command[0]}", command, "models", files=(("home/models/bad.json", content),),
                              env=(("INFERASIM_HOME", "{tmp}/home"), *env)))
    return cases


def output_cases() -> list[Case]:
    return [Case("simulate-csv-dir", ("simulate", *SMALL, "--csv", "{tmp}"), "--csv"),
            Case("simulate-csv-under-file", ("simulate", *SMALL, "--csv", "{f:x}/out.csv"), "--csv",
                 files=(("x", "file"),)),
            Case("pareto-out-file", ("pareto", *SMALL, "--out", "{f:x}"), "--out", files=(("x", "file"),)),
            Case("pareto-out-under-file", ("pareto", *SMALL, "--out", "{f:x}/deeper"), "--out",
                 files=(("x", "file"),)),
            Case("harvest-record-dir", ("harvest", "--engine", "vllm", *SMALL, "--endpoint", "http://127.0.0.1:9",
                                        "--record", "{tmp}"), "--record"),
            Case("harvest-record-under-file", ("harvest", "--engine", "vllm", *SMALL, "--endpoint",
                                               "http://127.0.0.1:9", "--record", "{f:x}/r.json"), "--record",
                 files=(("x", "file"),))]


def config_file_cases() -> list[Case]:
    """``--config @FILE`` on every command that takes a configuration."""
    cases = []
    for command in (("predict", *SMALL), ("check", *SMALL), ("simulate", *SMALL), ("memory", *SMALL),
                    ("deploy", *SMALL), ("harvest", "--engine", "vllm", *SMALL, "--dry-run")):
        head = command[0]
        cases += _common_file_faults(f"config-file-{head}", (*command, "--config", "@{file}"), "--config", "c.yaml")
        for label, text, what in (("list", "- tp\n", "--config"), ("bomb", BOMB, "--config"),
                                  ("deep", "tp: " + "[" * 5000, "--config"), ("unknown-lever", "tpp: 2\n", "tpp"),
                                  ("unicode", "tp: '١٦'\n", "tp"), ("inf", "kv_memory_fraction: .inf\n", "--config"),
                                  ("lines-bad", "tp=1\nconcurrency=lots\n", "concurrency")):
            cases.append(Case(f"config-file-{head}-{label}", (*command, "--config", "@{f:c.yaml}"), what,
                              files=(("c.yaml", text),)))
    return cases


def deploy_cases() -> list[Case]:
    """`deploy`: a hostile plan-mix report, ledger or trial number."""
    plan = {"slots": [{"model": "Qwen3-30B-A3B", "tier": "bulk", "pick": {"cluster": "h100x1", "engine": "vllm",
                                                                          "configuration": {"tp": 1}}}]}
    bad_plans = {"not-json": "{", "no-slots": "{}", "slots-not-list": '{"slots": 3}',
                 "cluster-number": json.dumps({"slots": [{**plan["slots"][0], "pick": {"cluster": 5, "engine": 7,
                                                                                       "configuration": {"tp": 1}}}]}),
                 "config-unicode": json.dumps({"slots": [{**plan["slots"][0], "pick": {"cluster": "h100x1",
                                                                                       "configuration": {"tp": "١٦"}}}]}),
                 "config-list": json.dumps({"slots": [{**plan["slots"][0], "pick": {"cluster": "h100x1",
                                                                                    "configuration": [1, 2]}}]}),
                 "model-missing": json.dumps({"slots": [{"tier": "bulk", "pick": {"configuration": {}}}]}),
                 "nan": '{"slots": NaN}', "deep": '{"slots": ' + _nested(500) + "}"}
    cases = _common_file_faults("deploy-plan", ("deploy", "--plan", "{file}", "--slot", "qwen3-30b-a3b/bulk"),
                                "--plan", "p.json")
    for label, text in bad_plans.items():
        cases.append(Case(f"deploy-plan-{label}", ("deploy", "--plan", "{f:p.json}", "--slot", "qwen3-30b-a3b/bulk"),
                          "" if label in ("cluster-number", "config-unicode", "config-list", "model-missing") else
                          "--plan", files=(("p.json", text),)))
    cases += [Case("deploy-slot-missing", ("deploy", "--plan", "{f:p.json}"), "--slot", files=(("p.json", json.dumps(plan)),)),
              Case("deploy-slot-unknown", ("deploy", "--plan", "{f:p.json}", "--slot", "kimi-k3/gold"), "--slot",
                   files=(("p.json", json.dumps(plan)),)),
              Case("deploy-trial-out-of-range", ("deploy", "{f:l.json}", "--trial", "999"), "--trial",
                   files=(("l.json", _ledger()),)),
              Case("deploy-port-zero", ("deploy", *SMALL, "--port", "0"), "--port"),
              Case("deploy-port-unicode", ("deploy", *SMALL, "--port", "٨٠٨٠"), "--port"),
              Case("deploy-out-file", ("deploy", *SMALL, "--out", "{f:x}"), "--out", files=(("x", "file"),)),
              Case("deploy-nothing", ("deploy",), "deploy", "LEDGER")]
    cases += [Case(f"deploy-ledger-{label}", ("deploy", "{f:l.json}"), "ledger", files=(("l.json", text),))
              for label, text in (("nan", _ledger().replace('"seed": 0', '"seed": NaN')), ("latin1", "latin1"),
                                  ("bad-config", _ledger(trial0__configuration={"router": ESCAPES})))]
    return cases


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
