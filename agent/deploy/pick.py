"""What to deploy: a ledger's best trial (or any trial by index), the pick of one
plan-mix slot (from the report `plan-mix --out` writes), or a configuration given as
`--config` on a model, cluster and engine. Each is resolved to the same record, a
:class:`Pick`, with the metrics it was priced with when there are some.

Files are read through the one input layer (`levers.inputs`); a trial index out of
range, a slot that is not in the report or has no pick, is an `InputError` naming what
exists.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ledgers.review import best_record, unfinished_note
from ledgers.store import load_ledger
from levers.configuration import Configuration, configuration_from_dict, from_partial, parse_config_text
from levers.errors import InputError, accepted_list, did_you_mean
from levers.inputs import load_json
from predictor.cards.registry import load_card
from predictor.target import Target, recorded_target
from predictor.workload import PREDICT_CONTEXT_TOKENS, parse_workload

PLAN_EXPECTED = "the JSON report of inferasim plan-mix --out"


@dataclass(frozen=True)
class Pick:
    target: Target
    config: Configuration
    origin: str                        # where the pick came from, for people
    mode: str | None = None            # anchored / rank-only, when it was priced
    metrics: dict[str, Any] | None = None
    priced_context: float | None = None  # the workload's (`WorkloadSpec.priced_context_tokens`)

    def to_json(self) -> dict[str, Any]:
        return {"origin": self.origin, "mode": self.mode, "metrics": self.metrics}


def from_ledger(reference: str, trial: int | None = None) -> Pick:
    """The best trial of a search, or trial ``trial`` (any phase, legal or not: an
    illegal one is refused when its command is built)."""
    ledger = load_ledger(reference)
    if trial is None:
        record = best_record(ledger)
        if record is None:
            raise InputError("ledger", f"{ledger.search_id} has no best trial (no trial met the SLOs)",
                             "--trial N for one of its trials (inferasim ledger show)")
    elif 0 <= trial < len(ledger.trials):
        record = ledger.trials[trial]
    else:
        raise InputError("--trial", f"{trial} is not a trial of {ledger.search_id}",
                         f"0 .. {len(ledger.trials) - 1}")
    if record.configuration is None:
        raise InputError("--trial", f"trial #{record.index} was refused before it had a configuration "
                         f"({record.reason})", "a priced trial (inferasim ledger show)")
    target = recorded_target(ledger.model, ledger.cluster, ledger.engine, f"ledger {ledger.search_id}")
    which = "best trial" if trial is None else "trial"
    return Pick(target, configuration_from_dict(record.configuration),
                f"{ledger.search_id}: {which} #{record.index}{unfinished_note(ledger, reference)}", record.mode, record.metrics,
                parse_workload(ledger.workload).priced_context_tokens)


def from_plan(path: str, slot: str | None) -> Pick:
    """The pick of ``MODEL/TIER`` in a plan-mix report."""
    report = load_json(path, "--plan", expected=PLAN_EXPECTED)
    slots = report.get("slots") if isinstance(report, dict) else None
    if not isinstance(slots, list) or not all(isinstance(s, dict) for s in slots):
        raise InputError(f"--plan {path}", "has no 'slots' list", PLAN_EXPECTED)
    names = [f"{s.get('model')}/{s.get('tier')}" for s in slots]
    if slot is None:
        raise InputError("--slot", "a plan-mix report needs the slot to deploy", accepted_list(names))
    model, _, tier = slot.rpartition("/")     # the model may be its Hugging Face id (Qwen/Qwen3-32B/bulk)
    if not model:
        model, tier = tier, ""
    tier, hash_, entry = tier.partition("#")
    try:
        model = load_card(model).name
    except InputError:        # not a model at all: no slot below has it (the slot is wrong, not a --model flag)
        pass
    wanted = f"{model}/{tier}"
    matches = [s for s, name in zip(slots, names) if name == wanted and (not hash_ or str(s.get("entry")) == entry)]
    if not matches:
        raise InputError("--slot", f"no slot '{slot}' in {path}" + did_you_mean(wanted, names), accepted_list(names))
    if len(matches) > 1:        # the model is listed more than once in the models.yaml
        entries = [f"{wanted}#{s.get('entry')} ({s.get('cluster')})" for s in matches]
        raise InputError("--slot", f"'{slot}' names {len(matches)} slots of {path}",
                         "MODEL/TIER#ENTRY, ENTRY its models.yaml index: " + ", ".join(entries))
    chosen = matches[0]
    pick = chosen.get("pick")
    if not isinstance(pick, dict):
        raise InputError("--slot", f"{wanted} has no pick (nothing met the tier)",
                         accepted_list(n for s, n in zip(slots, names) if isinstance(s.get("pick"), dict)))
    for key, kind in (("cluster", str), ("engine", str), ("configuration", dict)):
        if pick.get(key) is not None and not isinstance(pick[key], kind):
            raise InputError(f"--plan {path}", f"{wanted}: pick.{key} is a {type(pick[key]).__name__}",
                             f"{PLAN_EXPECTED} ({key}: {'a mapping of lever: value' if kind is dict else 'text'})")
    target = recorded_target(chosen["model"], pick.get("cluster"), pick.get("engine"), f"--plan {path}: {wanted}")
    metrics = {key: pick.get(key) for key in ("output_throughput_per_gpu", "interactivity", "ttft_s")}
    workload = pick.get("workload")           # the context its price chose the anchor at (older reports: none)
    context = parse_workload(workload).priced_context_tokens if isinstance(workload, str) else None
    return Pick(target, configuration_from_dict(pick.get("configuration") or {}), f"{path}: {wanted}", pick.get("mode"),
                metrics, context)


def from_config(target: Target, texts: list[str] | None) -> Pick:
    """``--config`` pairs over the lever defaults on a resolved target."""
    config = from_partial(parse_config_text(texts))    # its recipe as `predict` prices it
    return Pick(target, config, "--config", priced_context=PREDICT_CONTEXT_TOKENS)
