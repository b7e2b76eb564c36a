"""models.yaml for `inferasim plan-mix` (PRODUCT.md §5) and the latency tiers (METHOD §7).

The file is a boundary, so it is read in two passes and nothing runs on a bad file:
pydantic (``extra="forbid"``) checks its shape, then every value is resolved against
the catalogues (model cards, engines, clusters, workloads, levers, tiers). Every
rejection is an :class:`InputError` whose ``what`` is the file and the key path
(``models.yaml: models[2].max_gpus``) and whose ``accepted`` says what would do. The
file is read through the input layer (:mod:`levers.inputs`: bounded, UTF-8, the safe
YAML loader with limits on aliases, expansion and depth, no ``.inf``/``.nan``).

Tiers: the four of METHOD §7 (realtime / interactive / responsive / bulk). A top-level
``tiers:`` is either a mapping, which overrides fields of a named tier or adds a tier
(every model without its own ``tiers:`` list then plans for every tier, the added ones
included), or a list of tier names, which every model without its own list plans for.
Each tier bounds a statistic of interactivity from below (default the median over
requests of 1/TPOT) and of TTFT from above (default the mean from arrival); an absent
bound is ``null``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from levers.catalog import ENGINES, parse_engine
from levers.configuration import Configuration, from_partial, parse_partial
from levers.errors import InputError, accepted_list
from levers.inputs import is_number, parse_yaml, quote, read_text
from objectives.objectives import LATENCY_STATS
from objectives.slo import SLO
from predictor.cards.registry import load_card
from predictor.hardware import DEFAULT_CLUSTER, parse_cluster
from predictor.step.speculation import ACCEPTANCE_ACCEPTED, parse_acceptance, read_acceptance_file
from predictor.target import check_workload_context, resolve_target
from predictor.units import MS_PER_S
from predictor.workload import AGENTIC, WorkloadSpec, parse_workload

AUTO = "auto"
TTFT_CAP_SHARE = 0.5  # METHOD §7: predicted TTFT must be at most half the cap
Stat = Literal["mean", "p50", "p90", "p95", "p99", "p999"]


@dataclass(frozen=True, slots=True)
class Tier:
    """One latency tier: an interactivity floor (tok/s per user) and a TTFT cap (s);
    ``None`` = no bound on that side (METHOD §7)."""

    name: str
    interactivity_floor: float | None
    ttft_cap_s: float | None
    interactivity_stat: str = "p50"
    ttft_stat: str = "mean"

    @property
    def slos(self) -> tuple[SLO, ...]:
        """The qualification bounds: interactivity >= floor, TTFT <= half the cap."""
        bounds = []
        if self.interactivity_floor is not None:
            bounds.append(SLO("interactivity", self.interactivity_stat, ">=", self.interactivity_floor))
        if self.ttft_cap_s is not None:
            bounds.append(SLO("ttft", self.ttft_stat, "<=", self.ttft_cap_s * TTFT_CAP_SHARE * MS_PER_S))
        return tuple(bounds)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "interactivity": self.interactivity_floor, "ttft_s": self.ttft_cap_s,
                "interactivity_stat": self.interactivity_stat, "ttft_stat": self.ttft_stat,
                "qualify": [str(slo) for slo in self.slos]}


DEFAULT_TIERS: dict[str, Tier] = {
    "realtime": Tier("realtime", 150.0, 1.0),
    "interactive": Tier("interactive", 70.0, 2.5),
    "responsive": Tier("responsive", 25.0, 10.0),
    "bulk": Tier("bulk", None, None),
}


@dataclass(frozen=True, slots=True)
class ModelPlan:
    """One resolved `models:` entry. ``candidates`` None = the seed planner's set."""

    index: int
    name: str                      # the card name
    cluster: str                   # canonical cluster spec
    engines: tuple[str, ...] | None  # None = the default engine for the model there
    workload: WorkloadSpec
    candidates: tuple[Configuration, ...] | None
    tiers: tuple[str, ...]
    max_gpus: int | None


@dataclass(frozen=True, slots=True)
class MixSpec:
    source: str
    models: tuple[ModelPlan, ...]
    tiers: dict[str, Tier]          # every tier a model may plan for, in file order


# -- the file's shape (pydantic) ------------------------------------------------------


class TierFields(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    interactivity: float | None = Field(None, gt=0)
    ttft_s: float | None = Field(None, gt=0)
    interactivity_stat: Stat = "p50"
    ttft_stat: Stat = "mean"


class ModelEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    name: str
    engines: list[str] | None = Field(None, min_length=1)
    cluster: str | None = None
    workload: str | None = None
    candidates: Literal["auto"] | list[dict[str, Any]] = AUTO
    tiers: list[str] | None = Field(None, min_length=1)
    max_gpus: int | None = Field(None, ge=1)
    acceptance: str | None = None   # this traffic's speculation (`--acceptance`'s text forms; a list: L(1), L(2), ...)

    @field_validator("max_gpus", mode="before")
    @classmethod
    def _count(cls, value: Any) -> Any:
        if isinstance(value, bool):     # YAML's `true` is not a GPU count (pydantic would read 1)
            raise ValueError("expected a whole number of GPUs, not a boolean")
        return value

    @field_validator("acceptance", mode="before")
    @classmethod
    def _acceptance_text(cls, value: Any) -> Any:
        """Numbers and lists of numbers as `--acceptance` text; anything else but text refused."""
        if value is None or isinstance(value, str):
            return value
        if is_number(value):
            return str(value)
        if isinstance(value, list) and value and all(is_number(v) for v in value):
            return ",".join(str(v) for v in value)
        raise ValueError("expected acceptance text, a number or a list of numbers")

    @field_validator("candidates", mode="before")
    @classmethod
    def _auto_or_partials(cls, value: Any) -> Any:
        if isinstance(value, str) and value.strip().lower() == AUTO:
            return AUTO
        if isinstance(value, list) and value and all(isinstance(item, dict) for item in value):
            return value
        raise ValueError(f"expected 'auto' or a non-empty list of lever mappings, got {value!r}")


class MixFile(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    models: list[ModelEntry] = Field(min_length=1)
    tiers: dict[str, TierFields | None] | list[str] = Field(default_factory=dict)

    @field_validator("tiers", mode="before")
    @classmethod
    def _some_tiers(cls, value: Any) -> Any:
        if isinstance(value, list) and not value:   # as a model's `tiers: []` is: no tier is not "every tier"
            raise ValueError("an empty list selects no tier")
        return value


ACCEPTED_BY_FIELD = {
    "models": "a non-empty list of model entries",
    "name": "a model name or alias (see `inferasim models`)",
    "engines": f"a non-empty list of engines: {accepted_list(ENGINES)}",
    "cluster": "GPU[xPER_NODE[xNODES]], e.g. mi355x, mi355x8x2",
    "workload": "agentic, 1k/1k, 8k/1k or ISL/OSL",
    "candidates": "'auto' or a list of partial configurations (lever: value mappings)",
    "tiers": "a non-empty list of tier names (file level: also a mapping of tier fields)",
    "max_gpus": "a positive integer (GPUs per deployment)",
    "acceptance": ACCEPTANCE_ACCEPTED + " (a file path is not read here)",
    "interactivity": "a positive number of tok/s per user, or null (no floor)",
    "ttft_s": "a positive number of seconds, or null (no cap)",
    "interactivity_stat": accepted_list(LATENCY_STATS),
    "ttft_stat": accepted_list(LATENCY_STATS),
}


def key_path(loc: tuple[Any, ...]) -> str:
    """``('models', 2, 'max_gpus')`` -> ``models[2].max_gpus``."""
    text = ""
    for part in loc:
        if part == "[key]":             # pydantic's tag of a mapping's key: the key itself is named
            continue
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _branch_errors(error: ValidationError, data: Any) -> list[dict[str, Any]]:
    """The errors of the union branch the input took (file-level ``tiers`` is a mapping or
    a list), with pydantic's branch tag dropped from the key path."""
    given = data.get("tiers") if isinstance(data, dict) else None
    taken = "list[" if isinstance(given, list) else "dict["
    kept = []
    for item in error.errors():
        loc = tuple(item["loc"])
        if len(loc) > 1 and loc[0] == "tiers" and isinstance(loc[1], str) and loc[1].startswith(("dict[", "list[")):
            if not isinstance(given, (dict, list)) and loc[1].startswith("list["):
                continue
            if isinstance(given, (dict, list)) and not loc[1].startswith(taken):
                continue
            item = {**item, "loc": (loc[0], *loc[2:])}
        kept.append(item)
    return kept


def _shape_error(source: str, error: ValidationError, data: Any = None) -> InputError:
    errors = _branch_errors(error, data)
    errors.sort(key=lambda item: item["type"] != "extra_forbidden")   # an unknown key first: it explains
    first = errors[0]                                                   # the missing one beside it (modelz)
    loc = tuple(first["loc"])
    more = len(errors) - 1
    suffix = f" (and {more} more problem{'s' if more > 1 else ''})" if more else ""
    if first["type"] == "extra_forbidden":
        parent = TierFields if loc[0] == "tiers" else ModelEntry if loc[0] == "models" else MixFile
        return InputError(f"{source}: {key_path(loc)}", f"unknown key '{loc[-1]}'{suffix}",
                          "keys " + accepted_list(parent.model_fields))
    if first["type"] == "missing":
        return InputError(f"{source}: {key_path(loc)}", f"required key '{loc[-1]}' is missing{suffix}",
                          ACCEPTED_BY_FIELD.get(str(loc[-1]), ""))
    field = next((str(p) for p in reversed(loc) if isinstance(p, str) and p in ACCEPTED_BY_FIELD), "")
    message = first["msg"].removeprefix("Value error, ")
    return InputError(f"{source}: {key_path(loc)}", f"{message} (got {quote(first.get('input'), 80)}){suffix}",
                      ACCEPTED_BY_FIELD.get(field, ""))


# -- reading and resolving ----------------------------------------------------------


def load_mix_file(path: str | Path) -> MixSpec:
    """Read, validate and resolve a models.yaml; InputError on any problem."""
    source = str(path)
    text = read_text(path, "", expected="a models.yaml (UTF-8 YAML with a 'models:' list)")
    return parse_mix_text(text, source)


def parse_mix_text(text: str, source: str = "models.yaml") -> MixSpec:
    data = parse_yaml(text, source, expected="a YAML mapping with a 'models:' list (see examples/models.yaml)")
    if not isinstance(data, dict):
        raise InputError(source, "is empty" if data is None else f"the top level is a {type(data).__name__}, not a mapping",
                         "a YAML mapping with a 'models:' list (see examples/models.yaml)")
    try:
        parsed = MixFile.model_validate(data)
    except ValidationError as error:
        raise _shape_error(source, error, data) from None
    tiers, planned = file_tiers(source, parsed.tiers)
    models = tuple(_resolve_entry(source, index, entry, tiers, planned) for index, entry in enumerate(parsed.models))
    return MixSpec(source, models, tiers)


def file_tiers(source: str, given: Mapping[str, TierFields | None] | list[str]) -> tuple[dict[str, Tier], tuple[str, ...]]:
    """(every known tier, the tiers a model without its own list plans for)."""
    if isinstance(given, list):
        for i, name in enumerate(given):
            if name not in DEFAULT_TIERS:
                raise InputError(f"{source}: tiers[{i}]", f"unknown tier '{name}'",
                                 accepted_list(DEFAULT_TIERS) + ", or a mapping that defines new tiers")
        return dict(DEFAULT_TIERS), tuple(dict.fromkeys(given)) or tuple(DEFAULT_TIERS)
    tiers = resolve_tiers(given)
    return tiers, tuple(tiers)


def resolve_tiers(overrides: Mapping[str, TierFields | None]) -> dict[str, Tier]:
    """Default tiers, with named fields overridden and new tiers added (unset = no bound;
    a name with no fields keeps the default tier, or adds one without bounds)."""
    tiers = dict(DEFAULT_TIERS)
    for name, fields in overrides.items():
        base = tiers.get(name, Tier(name, None, None))
        if fields is None:
            tiers[name] = base
            continue
        given = fields.model_fields_set
        tiers[name] = Tier(
            name,
            fields.interactivity if "interactivity" in given else base.interactivity_floor,
            fields.ttft_s if "ttft_s" in given else base.ttft_cap_s,
            fields.interactivity_stat if "interactivity_stat" in given else base.interactivity_stat,
            fields.ttft_stat if "ttft_stat" in given else base.ttft_stat,
        )
    return tiers


def _relocated(error: InputError, what: str) -> InputError:
    return InputError(what, error.problem, error.accepted)


def _resolve_entry(source: str, index: int, entry: ModelEntry, tiers: dict[str, Tier],
                   planned: tuple[str, ...]) -> ModelPlan:
    at = f"{source}: models[{index}]"
    try:
        card = load_card(entry.name)
    except InputError as error:
        raise _relocated(error, f"{at}.name") from None
    try:
        cluster = parse_cluster(entry.cluster or DEFAULT_CLUSTER).spec
    except InputError as error:
        raise _relocated(error, f"{at}.cluster") from None
    engines = None
    if entry.engines is not None:
        engines = tuple(str(_engine(name, f"{at}.engines[{i}]")) for i, name in enumerate(entry.engines))
        for i, engine in enumerate(engines):    # an engine that does not run on the entry's GPUs
            try:
                resolve_target(card.name, cluster, engine)
            except InputError as error:
                raise _relocated(error, f"{at}.engines[{i}]") from None
    try:
        workload = AGENTIC if entry.workload is None else parse_workload(entry.workload)
        check_workload_context(card, workload.context_tokens, workload.name)
    except InputError as error:
        raise _relocated(error, f"{at}.workload") from None
    workload = _with_acceptance(workload, entry.acceptance, f"{at}.acceptance", source)
    candidates = None
    if entry.candidates != AUTO:
        candidates = tuple(_candidate(item, f"{at}.candidates[{i}]") for i, item in enumerate(entry.candidates))
    names = tuple(dict.fromkeys(entry.tiers)) if entry.tiers else planned
    for i, name in enumerate(names):
        if name not in tiers:
            raise InputError(f"{at}.tiers[{i}]", f"unknown tier '{name}'", accepted_list(tiers))
    return ModelPlan(index, card.name, cluster, engines, workload, candidates, names, entry.max_gpus)


def _with_acceptance(workload: WorkloadSpec, acceptance: str | None, what: str, source: str) -> WorkloadSpec:
    """A model's traffic acceptance (`--acceptance`'s text forms, `ModelEntry.acceptance`);
    a file named by a relative path is read beside the models file ``source``."""
    if acceptance is None:
        return workload

    def reader(path: str) -> str:       # its error is relocated to ``what``: the problem names the file
        where = Path(source).parent / path
        try:
            return read_acceptance_file(where, f"{what} file")
        except InputError as error:
            raise InputError(what, f"{quote(str(where), 120)} {error.problem}", error.accepted) from None

    try:
        return replace(workload, acceptance=parse_acceptance(acceptance, reader))
    except InputError as error:
        raise _relocated(error, what) from None


def _engine(name: str, what: str) -> str:
    try:
        return parse_engine(name)
    except InputError as error:
        raise _relocated(error, what) from None


def _candidate(item: Mapping[str, Any], what: str) -> Configuration:
    """A listed candidate = the lever defaults plus what it names (as `predict --config`)."""
    partial: dict[str, Any] = {}
    for name, value in item.items():
        try:
            partial.update(parse_partial({str(name): value}))
        except InputError as error:
            raise _relocated(error, f"{what}.{name}") from None
    return from_partial(partial)
