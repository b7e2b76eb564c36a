"""JSON Schemas of every command's `--json` output, built from one vocabulary of
quantities so that a quantity has one JSON type whichever command prints it
(`configuration` is the lever object everywhere, `configuration_text` its `k=v` text,
`mode` a string or null, `files` an object of paths, ...).

`scripts/build_output_schemas.py` writes them to `agent/cli/schemas/COMMAND.schema.json`
(shipped with the package); `tests/agent/cli/test_output_schemas.py` keeps the files up to
date, validates each command's output against its schema, and checks that no property
name has two JSON types across all of them. Trial records reuse the ledger's own schema
(`ledgers/ledger.schema.json`), so a trial reads the same in `tune --json`, `ledger show`
and the ledger file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from predictor.anchors.coverage import TRANSFER_KINDS

LEDGER_SCHEMA = Path(__file__).resolve().parents[2] / "ledgers" / "ledger.schema.json"
SCHEMA_DIR = Path(__file__).resolve().parent / "schemas"
DRAFT = "https://json-schema.org/draft/2020-12/schema"

STR, INT, NUM, BOOL = ({"type": t} for t in ("string", "integer", "number", "boolean"))
OBJ = {"type": "object"}


def nullable(schema: dict) -> dict:
    return {"anyOf": [schema, {"type": "null"}]}


def arr(items: dict) -> dict:
    return {"type": "array", "items": items}


def ref(name: str) -> dict:
    return {"$ref": f"#/$defs/{name}"}


LEVER_VALUE = {"type": ["integer", "number", "string", "boolean", "null", "array"]}
INTERVAL = {"type": "array", "items": NUM, "minItems": 2, "maxItems": 2}
RECIPE = {"type": "object", "additionalProperties": STR}   # unset levers as priced (the anchor's recipe)

#: The vocabulary: a property with one of these names has this schema in every output.
QUANTITIES: dict[str, dict] = {
    "model": STR, "cluster": STR, "engine": STR, "workload": STR, "objective": STR,
    "configuration": ref("configuration"), "configuration_text": STR,
    "mode": nullable({"enum": ["anchored", "rank-only"]}), "modes": arr({"enum": ["anchored", "rank-only"]}),
    "metrics": nullable({"type": "object", "additionalProperties": nullable(NUM)}),
    "all_metrics": nullable({"type": "object", "additionalProperties": nullable(NUM)}),
    "intervals": {"type": "object", "additionalProperties": INTERVAL},
    "seed_intervals": nullable({"type": "object", "additionalProperties": INTERVAL}),
    "transfer": nullable({"enum": list(TRANSFER_KINDS)}),
    "transfer_kinds": arr({"enum": list(TRANSFER_KINDS)}),
    "calibration": nullable(OBJ),
    "flags": arr(STR), "reasons": arr(STR), "reason": nullable(STR), "legal": BOOL, "source": nullable(STR),
    "wall_s": NUM, "wall_ms": NUM, "files": {"type": "object", "additionalProperties": STR},
    "launch_files": {"type": "object", "additionalProperties": STR},
    "lm": nullable(ref("LmInfo")), "slos": arr(STR), "search_id": STR, "ledger": STR, "ledgers": arr(STR),
    "num_trials": INT, "status": STR, "stop_reason": nullable(STR), "index": INT, "tier": STR,
    "total_gpus": INT, "disaggregated": BOOL, "interactivity": nullable(NUM), "ttft_s": nullable(NUM),
    "id": STR, "where": STR, "coverage": STR, "path": STR, "name": STR, "description": STR, "aliases": arr(STR),
    "stats": OBJ, "settings": OBJ, "memory": nullable(OBJ), "warnings": arr(STR), "notes": arr(STR),
    "harvest": arr(STR), "ties": arr(INT), "context_tokens": INT, "max_concurrency": INT, "fits": BOOL,
    "workers": INT, "num_points": INT, "frontier": arr(OBJ), "pools": arr(ref("pool")), "deploy": nullable(OBJ),
}


def command_schema(title: str, properties: dict[str, Any], *, optional: tuple[str, ...] = (),
                   array: bool = False, extra: dict | bool = False) -> dict:
    """A command's output: ``properties`` maps a name to its schema, or to None to take
    the vocabulary's; every property is required unless ``optional``; nothing else is
    allowed unless ``extra`` (the schema of the other properties). ``array``: the output
    is a list of such objects."""
    resolved = {name: QUANTITIES[name] if schema is None else schema for name, schema in properties.items()}
    item = {"type": "object", "properties": resolved, "additionalProperties": extra,
            "required": [name for name in properties if name not in optional]}
    return {"$schema": DRAFT, "title": title, **({"type": "array", "items": item} if array else item)}


def either(title: str, *outputs: dict) -> dict:
    """A command whose output is one of several objects (`command_schema`s, titles dropped)."""
    return {"$schema": DRAFT, "title": title,
            "anyOf": [{k: v for k, v in out.items() if k not in ("$schema", "title")} for out in outputs]}


def _v(*names: str) -> dict[str, dict]:
    """Vocabulary properties by name."""
    return {name: QUANTITIES[name] for name in names}


TARGET = _v("model", "cluster", "engine")
POOL = {"type": "object", "required": ["role", "replicas", "gpus_per_replica", "argv", "env", "display"],
        "properties": {"role": {"enum": ["serve", "prefill", "decode"]}, "replicas": INT, "gpus_per_replica": INT,
                       "argv": arr(STR), "env": {"type": "object", "additionalProperties": STR}, "display": STR,
                       "launch_files": QUANTITIES["launch_files"], "max_model_len_tokens": INT,
                       "prefix_caching": BOOL,
                       "nodes": arr({"type": "object", "required": ["rank", "argv", "display"], "additionalProperties": False,
                                     "properties": {"rank": INT, "argv": arr(STR), "display": STR}})},
        "additionalProperties": False}
SWEEP_POINT = {"type": "object", "properties": {
    **_v("configuration", "configuration_text", "mode", "source", "metrics"), "eligible": BOOL,
    "output_throughput_per_gpu": nullable(NUM), "interactivity": nullable(NUM)}, "additionalProperties": False}


def commands() -> dict[str, dict]:
    """Every command's output schema, by file stem."""
    trial, summary = ref("TrialRecord"), ref("TrialSummary")
    return {
        "tune": command_schema("inferasim tune --json", {
            "best": nullable(trial), "top": arr(trial), "nearest_misses": arr(trial), "ties": None, "ledger": None,
            "num_trials": None, "stop_reason": None, "lm": None, "lm_note": nullable(STR), "rank_only": BOOL,
            "slo_compliance_verified": BOOL, "harvest": None, "stats": None, "warnings": None, "deploy": None}),
        "plan-mix": command_schema("inferasim plan-mix --json", {
            "source": None, "tiers": arr(OBJ), "slots": arr(ref("slot")), "entries": arr(OBJ),
            "candidates_evaluated": INT, "candidates_legal": INT, "excluded_by_max_gpus": INT,
            "same_deployment_as_priced": INT, "wall_s": None, "settings": None, "ledgers": None}),
        "deploy": command_schema("inferasim deploy --json", {
            **TARGET, **_v("configuration", "configuration_text", "disaggregated", "total_gpus", "pools", "files"),
            "kv_transfer_backend": nullable(STR), "pick": OBJ, "recipe": RECIPE, "notes": arr(STR),
            "manifests": {"type": "object", "additionalProperties": STR}}),
        "report": command_schema("inferasim report --json", {"source": None, "report": STR, "bytes": INT}),
        "predict": command_schema("inferasim predict --json", {
            **TARGET, **_v("workload", "configuration", "configuration_text", "legal", "reasons", "mode", "flags",
                           "source", "metrics", "all_metrics", "memory", "wall_ms", "seed_intervals", "intervals",
                           "transfer", "transfer_kinds", "calibration"),
            "anchor_id": nullable(STR), "breakdown": OBJ, "fusion_opportunities": arr(OBJ), "recipe": RECIPE,
            "prefill_pool": OBJ},      # disaggregated: the prefill pool's memory (`memory` is the decode pool's)
            optional=("seed_intervals", "prefill_pool")),
        "simulate": either("inferasim simulate --json", command_schema("", {
            **TARGET, **_v("workload", "configuration", "configuration_text", "modes", "flags"),
            **{k: OBJ for k in ("ttft_ms", "ttft_admission_ms", "tpot_ms", "itl_ms", "e2e_ms", "interactivity_tok_s",
                                "hit_rate")},
            "num_requests": INT, "sim_wall_s": NUM, "sim_time_s": NUM, "seed_intervals": None},
            optional=("seed_intervals",), extra=nullable(NUM)),   # the simulator's scalar metrics
            # a configuration that does not fit or is illegal: why, as predict says it (exit 1)
            command_schema("", {**TARGET, **_v("workload", "configuration", "configuration_text", "legal", "reasons",
                                               "memory", "metrics")})),
        "pareto": command_schema("inferasim pareto --json", {
            **TARGET, **_v("workload", "num_points", "workers", "wall_s", "files"), "frontier": arr(SWEEP_POINT),
            "modes": arr(STR), "num_priced": INT, "num_groups": INT, "num_illegal_families": INT,
            "num_illegal_groups": INT, "illegal_reasons": arr(OBJ), "num_excluded_by_mode": INT,
            "num_sampled_out": INT, "frontier_rule": OBJ, "num_ineligible": INT, "backend": STR,
            "points_per_s": NUM}),
        "check": command_schema("inferasim check --json", {
            **TARGET, **_v("configuration", "configuration_text", "legal", "reasons", "memory"), "recipe": RECIPE,
            "deploy_refused": nullable(STR)}),
        "memory": command_schema("inferasim memory --json", {
            **_v("model", "cluster", "engine", "configuration_text", "context_tokens", "max_concurrency", "fits",
                 "reason", "legal", "reasons"), "recipe": RECIPE,
            **{k: NUM for k in ("weights_per_gpu_gb", "activations_gb", "graph_gb", "hbm_gb", "usable_gb",
                                "kv_pool_per_gpu_gb")},
            **{k: INT for k in ("kv_bytes_per_token", "state_bytes_per_sequence", "window_bytes_per_sequence",
                                "bytes_per_sequence", "drafter_kv_bytes_per_token", "drafter_bytes_per_sequence")},
            "weights_by_component_gb": {"type": "object", "additionalProperties": NUM},
            "weight_dtypes_by_component": {"type": "object", "additionalProperties": STR}, "kv_cache_dtype": STR,
            "prefill_pool": OBJ, "prefill_layout": STR, "decode_layout": STR},   # disaggregated: the decode pool above
            optional=("prefill_pool", "prefill_layout", "decode_layout")),
        "models": command_schema("inferasim models --json", {
            **_v("name", "aliases"), "hf_id": STR, "total_params_b": NUM, "active_params_b": NUM, "layers": INT,
            "routed_experts": nullable(INT), "top_k": nullable(INT), "max_context": INT, "native_dtypes": OBJ,
            "recipes": arr(STR), "provenance": nullable(OBJ)}, array=True),
        "levers": command_schema("inferasim levers --json", {
            **_v("index", "name", "description"), "kind": STR, "optional": BOOL, "values": OBJ, "range": arr(NUM),
            "values_text": STR}, optional=("values", "range", "values_text"), array=True),
        "objectives": command_schema("inferasim objectives --json", {
            **_v("name", "aliases", "description"), "group": STR, "metric": STR, "direction": {"enum": ["max", "min"]},
            "unit": STR}, array=True),
        "anchors-list": command_schema("inferasim anchors list --json", {
            **_v("id", "engine", "model", "source", "where"), "gpu": STR, "engine_version": nullable(STR),
            "dtypes": OBJ, "widths": OBJ}, array=True),
        "anchors-check": command_schema("inferasim anchors check --json", {
            **_v("id", "where", "status", "reasons", "coverage")}, array=True),
        "ledger-list": command_schema("inferasim ledger list --json", {
            **_v("search_id", "path", "model", "cluster", "engine", "objective", "slos", "workload", "num_trials",
                 "status", "stop_reason", "lm"), "created_at": STR, "budget": INT, "best_objective": nullable(NUM),
            "problem": STR},
            optional=("created_at", "model", "cluster", "engine", "objective", "slos", "workload", "num_trials",
                      "budget", "status", "best_objective", "stop_reason", "lm", "problem"), array=True),
        "ledger-show": command_schema("inferasim ledger show --json", {
            **_v("search_id", "status", "stop_reason", "lm", "stats"), "question": OBJ, "trials_by_phase": OBJ,
            "best": nullable(summary), "nearest_misses": arr(summary), "top": arr(trial), "rejected": arr(OBJ),
            "llm": ref("LlmNotes")}),
        "ledger-best": nullable(trial) | {"$schema": DRAFT, "title": "inferasim ledger best --json"},
        "ledger-compare": command_schema("inferasim ledger compare --json", {
            "ledgers": None, "question": {"type": "object", "additionalProperties": PAIR}, "same_question": BOOL,
            "sides": arr(ref("side")), "best_configuration_differences": {"type": "object",
                                                                          "additionalProperties": PAIR}}),
        "anchors-show": command_schema("inferasim anchors show --json", {
            **_v("where", "path", "coverage"), "anchor": OBJ}),
        "harvest": command_schema("inferasim harvest --dry-run --json", {
            **TARGET, **_v("configuration", "configuration_text", "launch_files", "notes"),
            "engine_defaults": {"type": "object", "additionalProperties": STR}, "endpoint": nullable(STR),
            "launch": nullable(STR), "launch_argv": nullable(arr(STR)), "sweep": OBJ, "signature": OBJ,
            "checks": arr(OBJ)}),
        "hardware": command_schema("inferasim hardware --json", {
            **_v("name"), "vendor": {"enum": ["nvidia", "amd", "cpu"]}, "hbm_gb": NUM, "gpus_per_node": INT,
            "scale_up_domain": INT}, array=True, extra=True),   # the profile's constants: predictor.hardware
        "score": command_schema("inferasim score --json", {}, extra=True),  # predictor.corpus.report.ScoreReport
    }


PAIR = {"type": "array", "minItems": 2, "maxItems": 2}   # the two ledgers' values, side by side

DEFS: dict[str, dict] = {
    "side": {"type": "object", "properties": {
        **{n: QUANTITIES[n] for n in ("search_id", "num_trials", "stop_reason", "mode")},
        "best_objective": nullable(NUM)}, "additionalProperties": False,
        "required": ["search_id", "num_trials", "stop_reason", "mode", "best_objective"]},
    "configuration": {"type": "object", "additionalProperties": LEVER_VALUE},
    "pool": POOL,
    "slot": {"type": "object", "properties": {
        **{n: QUANTITIES[n] for n in ("model", "cluster", "tier")}, "entry": INT, "met": BOOL,
        "pick": nullable(ref("candidate")), "short_list": arr(ref("candidate")),
        "nearest_miss": nullable(ref("candidate")), "candidates_priced": INT, "candidates_qualified": INT,
        "deploy": QUANTITIES["deploy"]}, "required": ["model", "tier", "met", "pick", "short_list"]},
    "candidate": {"type": "object", "properties": {
        **{n: QUANTITIES[n] for n in ("model", "engine", "cluster", "configuration", "configuration_text",
                                      "total_gpus", "disaggregated", "interactivity", "ttft_s", "mode", "flags",
                                      "source", "intervals")},
        "output_throughput_per_gpu": nullable(NUM), "total_throughput_per_gpu": nullable(NUM),
        "headroom": nullable(NUM), "qualifies": BOOL, "ties_pick": BOOL, "workload": STR},
        "required": ["configuration", "mode"]},
}


def build() -> dict[str, dict]:
    """Each schema with the definitions it uses (ours and the ledger's) under ``$defs``."""
    ledger_defs = json.loads(LEDGER_SCHEMA.read_text(encoding="utf-8"))["$defs"]
    defs = {**ledger_defs, **DEFS}
    built = {}
    for name, schema in commands().items():
        used = _referenced(schema, defs)
        built[name] = {**schema, **({"$defs": {k: defs[k] for k in sorted(used)}} if used else {})}
    return built


def _referenced(node: Any, defs: dict[str, dict], found: set[str] | None = None) -> set[str]:
    """The definitions ``node`` refers to, directly or through other definitions."""
    found = set() if found is None else found
    if isinstance(node, dict):
        target = node.get("$ref", "")
        if target.startswith("#/$defs/") and target[8:] not in found:
            found.add(target[8:])
            _referenced(defs[target[8:]], defs, found)
        for value in node.values():
            _referenced(value, defs, found)
    elif isinstance(node, list):
        for value in node:
            _referenced(value, defs, found)
    return found


def schema_text(schema: dict) -> str:
    return json.dumps(schema, indent=1, sort_keys=True) + "\n"
