"""Bad files: each file kind the product reads (traces, corpus CSV, models.yaml, ledgers,
anchors, user model cards, --config files, plan-mix reports) x encoding, size, what is not
a regular file, nesting, NaN/Infinity, aliases, wrong shapes and non-physical values."""

from __future__ import annotations

import json

from tests.bad_inputs.case import (
    BOMB,
    CSV_TRACE_HEADER,
    ESCAPES,
    LONG,
    MIX_OK,
    MOONCAKE_OK,
    ROOT,
    SESSION_OK,
    SMALL,
    Case,
    _anchor,
    _corpus_row,
    _ledger,
    _nested,
)


def _file_kind_cases(kind: str, command: tuple[str, ...], names: str, name: str,
                     contents: list[tuple[str, object, str]], env: tuple = ()) -> list[Case]:
    return [Case(f"{kind}-{label}", tuple(a.replace("{file}", f"{{f:{name}}}") for a in command), what,
                 files=((name, content),), env=env)
            for label, content, what in contents]


def _common_file_faults(kind: str, command: tuple[str, ...], names: str, name: str) -> list[Case]:
    """Encoding, size, and what is not a regular file: the same for every file kind."""
    swap = lambda target: tuple(a.replace("{file}", target) for a in command)
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
        "length-boolean": {**record, "input_length": True}, "hash-id-boolean": {**record, "hash_ids": [True]},
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
            # YAML reads 1e400 (no dot) as text, which a float field would turn into inf
            ("tier-overflow", MIX_OK + "tiers:\n  fast: {interactivity: 1e400}\n", "interactivity"),
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
    """A broken user model card in $INFERASIM_HOME/models, asked for by name: the message
    names it (the other models still load: `tests/predictor/cards`)."""
    cases = []
    for label, content in (("latin1", "latin1"), ("not-json", "{"), ("deep", _nested(500)), ("nan", '{"a": NaN}'),
                           ("not-object", "[]"), ("wrong-shape", '{"name": "x"}'), ("big", "big")):
        env = (("INFERASIM_MAX_INPUT_MB", "1"),) if content == "big" else ()
        for command in (("predict", "--model", "bad", "--cluster", "h100x1"),
                        ("memory", "--model", "bad", "--cluster", "h100x1")):
            cases.append(Case(f"card-{label}-{command[0]}", command, "--model", files=(("home/models/bad.json", content),),
                              env=(("INFERASIM_HOME", "{tmp}/home"), *env)))
    return cases


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
                                  ("lines-bad", "tp=1\nconcurrency=lots\n", "concurrency"),
                                  ("duplicate-key", "tp: 1\nconcurrency: 4\ntp: 2\n", "--config")):
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
              Case("deploy-nothing", ("deploy",), "deploy", "LEDGER"),
              # a ledger's or report's pick names its own layout: an override was silently ignored
              Case("deploy-ledger-config", ("deploy", "{f:l.json}", "--config", "tp=4"), "--config",
                   files=(("l.json", _ledger()),)),
              Case("deploy-plan-engine", ("deploy", "--plan", "{f:p.json}", "--slot", "qwen3-30b-a3b/bulk",
                                          "--engine", "sglang"), "--engine", files=(("p.json", json.dumps(plan)),)),
              Case("deploy-slot-without-plan", ("deploy", *SMALL, "--slot", "a/b"), "--slot")]
    cases += [Case(f"deploy-ledger-{label}", ("deploy", "{f:l.json}"), "ledger", files=(("l.json", text),))
              for label, text in (("nan", _ledger().replace('"seed": 0', '"seed": NaN')), ("latin1", "latin1"),
                                  ("bad-config", _ledger(trial0__configuration={"router": ESCAPES})))]
    return cases


