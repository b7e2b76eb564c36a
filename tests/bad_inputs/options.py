"""Bad command lines: every numeric option, the text options, output paths."""

from __future__ import annotations

from tests.bad_inputs.case import (
    CSV_TRACE_HEADER,
    ESCAPES,
    LONG,
    MODEL,
    MOONCAKE_OK,
    SMALL,
    Case,
    _corpus_row,
)

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
               ("inf", "inf"), ("negative", "-5"), ("overflow", "1e400"), ("word", "abc"), ("forty-nines", "9" * 40),
               ("past-python-int-digits", "9" * 4301)]


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
                  ("long", f"tp={LONG}", "tp", "accepted:"),
                  ("int-digits", "concurrency=" + "9" * 4301, "concurrency", "accepted:"), ("layout", "prefill_layout=TP١", "prefill_layout",
                                                               "accepted:"),
                  ("fusion", "fusions=warp_drive", "fusions", "accepted:"), ("escapes", f"router={ESCAPES}",
                                                                            "router", "accepted:"))]
    for command in (["predict", *SMALL], ["pareto", *SMALL], ["tune", *SMALL]):
        c += [Case(f"{command[0]}-workload-{name}", (*command, "--workload", value), "--workload", accepts)
              for name, value, accepts in (("unicode", "١k/1k", "accepted:"), ("huge", "99999999999/1", "accepted:"),
                                          ("beyond-context", "2048k/1k", "ISL + OSL <="),
                                          ("garbage", "lots", "accepted:"), ("zero", "0/1", "accepted:"),
                                          ("float-overflow", "1" + "0" * 309 + "/1k", "accepted:"))]
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
          Case("anchors-list-gpu", ("anchors", "list", "--gpu", "tpu"), "--gpu"),
          Case("anchors-list-empty-engine", ("anchors", "list", "--engine", ""), "--engine"),
          Case("levers-empty-engine", ("levers", "--engine", ""), "--engine"),
          Case("deploy-empty-model-path", ("deploy", *SMALL, "--config", "tp=1", "--model-path", " "), "--model-path"),
          Case("deploy-empty-image", ("deploy", *SMALL, "--config", "tp=1", "--image", ""), "--image"),
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
          Case("score-where-with-protocol", ("score", "{f:c.csv}", "--protocol", "in-ladder", "--anchor-where", "tp=1"),
               "--anchor-where", files=(("c.csv", _corpus_row()),)),
          Case("simulate-trace-and-workload", ("simulate", *SMALL, "--workload", "1k/1k", "--trace", "{f:t.jsonl}"),
               "--trace", files=(("t.jsonl", MOONCAKE_OK),)),
          Case("simulate-open-loop-concurrency", ("simulate", *SMALL, "--trace", "{f:t.csv}", "--concurrency", "4"),
               "--concurrency", files=(("t.csv", CSV_TRACE_HEADER + "0.0,100,10\n0.5,200,20\n"),)),
          Case("simulate-requests-cap", ("simulate", *SMALL, "--requests", "1000000000000"), "--requests",
               "--allow-large"),
          Case("config-lever-twice", ("check", *SMALL, "--config", "tp=8,tp=4"), "--config", "given twice"),
          # predict has no --allow-large: its cap is the same 1,000,000 (README)
          Case("predict-requests-cap", ("predict", *SMALL, "--workload", "agentic", "--requests", "1000001"),
               "--requests", "1,000,000"),
          Case("harvest-batches-above-running-cap", ("harvest", "--engine", "vllm", *SMALL, "--dry-run", "--batches",
                                                     "1,4096"), "--batches"),
          # an engine argument restating a launch flag would relabel what is measured
          Case("harvest-engine-arg-override", ("harvest", "--engine", "vllm", *SMALL, "--dry-run",
                                               "--engine-arg", "--tensor-parallel-size", "--engine-arg", "2"),
               "--engine-arg"),
          # an endpoint that cannot answer is refused now, not after --ready-timeout
          Case("harvest-endpoint-not-a-url", ("harvest", "--engine", "vllm", *SMALL, "--dry-run", "--endpoint",
                                              "notaurl"), "--endpoint"),
          Case("harvest-endpoint-port", ("harvest", "--engine", "vllm", *SMALL, "--dry-run", "--endpoint",
                                         "http://127.0.0.1:99999"), "--endpoint"),
          Case("harvest-endpoint-scheme", ("harvest", "--engine", "vllm", *SMALL, "--dry-run", "--endpoint",
                                           "ftp://127.0.0.1:21"), "--endpoint"),
          # Ray retries an unreachable head without end: refused before it is asked
          Case("pareto-out-empty", ("pareto", *SMALL, "--out", ""), "--out", "a folder path"),
          Case("simulate-csv-folder", ("simulate", *SMALL, "--requests", "20", "--csv", "{tmp}/newdir/"), "--csv",
               "a file path"),
          Case("deploy-out-empty", ("deploy", *SMALL, "--config", "tp=1", "--out", ""), "--out", "a folder path"),
          Case("pareto-ray-unreachable", ("pareto", *SMALL, "--ray", "127.0.0.1:1"), "--ray"),
          Case("pareto-ray-not-an-address", ("pareto", *SMALL, "--ray", "nonsense"), "--ray")]
    return c


def output_cases() -> list[Case]:
    return [Case("simulate-csv-dir", ("simulate", *SMALL, "--csv", "{tmp}"), "--csv"),
            # writable by its mode bits, yet nothing can be created there
            Case("simulate-csv-under-proc", ("simulate", *SMALL, "--csv", "/proc/x.csv"), "--csv"),
            Case("deploy-out-under-proc", ("deploy", *SMALL, "--config", "tp=1", "--out", "/proc/x"), "--out"),
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


