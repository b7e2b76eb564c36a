"""The anchor cache and anchor selection (METHOD §4): which anchor predicts a target.

Two sources, read-only package data first: the embedded anchors
(`predictor/data/anchors/*.json`, built from public corpora) and the user's cache
(`$INFERASIM_HOME/anchors`, written by `inferasim harvest`, atomically). A user anchor
with the id of an embedded one replaces it (a re-harvest). A file that fails the schema
is skipped by the store and listed in `AnchorStore.problems` (`anchors check` shows it);
`load_anchor_file` raises for it.

Matching, coverage and preference: `predictor.anchors.coverage`.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field, replace
from functools import lru_cache
from importlib import resources
from pathlib import Path

from pydantic import ValidationError

from levers.catalog import Engine
from levers.configuration import Configuration
from levers.errors import InputError, accepted_list
from levers.inputs import bounded, load_json, quote
from predictor.anchors.anchor import BEYOND_PHYSICS, HOST_AT_BOUND, Anchor, DecodeSweep, PrefillSweep, Provenance, Signature
from predictor.anchors.coverage import (
    IN_LADDER,
    WILDCARD_BACKEND,
    WILDCARD_BUILD,
    anchor_flags,
    is_foreign,
    match_rank,
    recipe,
    same_widths,
    transfer_kinds,
)
from predictor.cards.registry import ModelCard, inferasim_home
from predictor.feasibility import pool_configs
from predictor.files import atomic_write_text
from predictor.hardware import Cluster
from predictor.step.operators import narrowest_activation
from predictor.step.transfer import fit_prefill

ID_HASH_CHARS = 6
EMBEDDED, USER = "embedded", "user"


# --- files -----------------------------------------------------------------------------

def user_anchors_dir() -> Path:
    """`$INFERASIM_HOME/anchors` (default `~/.inferasim/anchors`)."""
    return inferasim_home() / "anchors"


def _first_error(error: ValidationError) -> str:
    first = error.errors()[0]
    where = ".".join(str(part) for part in first.get("loc", ())) or "(top level)"
    return f"{where}: {first.get('msg', 'invalid')}"


def load_anchor_file(path: str | Path) -> Anchor:
    """Read and validate one anchor file; a bad file raises InputError naming the file
    and the first schema error."""
    file = Path(path)
    data = load_json(file, "anchor file", expected="an anchor JSON (predictor/data/anchor.schema.json)")
    try:
        return Anchor.model_validate(data)
    except ValidationError as error:
        raise InputError(f"anchor file {quote(str(file))}", f"schema error at {bounded(_first_error(error), 300)}",
                         "see predictor/data/anchor.schema.json") from None


def save_anchor(anchor: Anchor, directory: str | Path | None = None) -> Path:
    """Write `<id>.json` atomically (temp file in the same directory, then os.replace)."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", anchor.id):
        raise InputError("anchor id", f"'{anchor.id}' is not a safe file name", "letters, digits, . _ -")
    folder = Path(directory) if directory is not None else user_anchors_dir()
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{anchor.id}.json"
    atomic_write_text(target, anchor.model_dump_json(indent=2) + "\n")
    return target


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-")


def anchor_id_for(signature: Signature) -> str:
    """Stable, readable id: `mi355x-sglang-deepseek-r1-fp8-tp8ep8dp8-1a2b3c` (the hash
    covers the whole signature, so two builds or backends never collide)."""
    unrecorded = {"fusions"} if signature.fusions is None else set()   # ids of older anchors stay stable
    digest = hashlib.sha256(signature.model_dump_json(exclude=unrecorded).encode("utf-8")).hexdigest()[:ID_HASH_CHARS]
    widths = f"tp{signature.tp}ep{signature.ep}dp{signature.attention_dp}"
    if signature.pp > 1:
        widths += f"pp{signature.pp}"
    parts = [signature.accelerator, signature.engine, signature.model, signature.weight_dtype, widths, digest]
    return "-".join(_slug(part) for part in parts)


def build_anchor(signature: Signature, decode_sweep: DecodeSweep, prefill_tokens: tuple[int, ...],
                 prefill_ttft_ms: tuple[float, ...], provenance: Provenance, **fields) -> Anchor:
    """An anchor from measured sweeps (the harvester, corpus builders, tests): the prefill
    sweep is fitted by `transfer.fit_prefill` (METHOD §3.2) and the id derived from the
    signature. `fields`: any other Anchor field (packed_probe, host_time_ms, flags)."""
    fixed, c1, c2 = fit_prefill(prefill_tokens, prefill_ttft_ms)
    prefill = PrefillSweep(prompt_tokens=prefill_tokens, ttft_ms=prefill_ttft_ms,
                           fit_f_ms=fixed, fit_c1_ms=c1, fit_c2_ms=c2)
    return Anchor(id=anchor_id_for(signature), signature=signature, decode_sweep=decode_sweep,
                  prefill_sweep=prefill, provenance=provenance, **fields)


# --- the target's signature --------------------------------------------------------------

def decode_layout(config: Configuration) -> Configuration:
    """The replica layout anchors are matched against: the decode pool when
    disaggregated (call with a pool's own configuration to match the prefill pool)."""
    pools = pool_configs(config)
    return config if pools is None else pools[1]


def signature_for(card: ModelCard, cluster: Cluster, engine: Engine | str, config: Configuration, *,
                  engine_version: str = WILDCARD_BUILD) -> Signature:
    """The target's signature: unset dtypes from the card's native dtypes, an unset
    activation the narrowest any of its GEMMs runs (`Precisions.gemm_activation`: what a
    harvest of it measures, and as one lever value it runs every GEMM so again), unset
    backends "auto"."""
    layout = decode_layout(config)
    native = card.native_dtypes
    weight = layout.weight_dtype or native.weight.value
    activation = layout.activation_dtype or narrowest_activation(card, layout, cluster.gpu)
    expert = (layout.expert_dtype or native.expert.value) if card.is_moe else None
    return Signature(
        accelerator=cluster.gpu.name, engine=str(engine), engine_version=engine_version, model=card.name,
        weight_dtype=weight, activation_dtype=activation, expert_dtype=expert,
        kv_cache_dtype=layout.kv_cache_dtype or native.kv_cache.value,
        attention_backend=layout.attention_backend or WILDCARD_BACKEND,
        moe_backend=layout.moe_backend or WILDCARD_BACKEND, all_to_all_backend=layout.all_to_all_backend,
        graph_capture=layout.graph_capture, spec_method=layout.spec_method, spec_depth=layout.spec_depth,
        dcp=layout.dcp, tp=layout.tp, ep=layout.ep, attention_dp=layout.attention_dp, pp=layout.pp,
    )


def target_batch(config: Configuration, concurrency: int) -> int:
    """The target's decode batch per forward: clients per (decode) replica, capped by the
    running-request limit of each of its attention-DP ranks (lever 23 is per scheduler
    rank, as `predictor.analytical` and the simulator read it), per pipeline micro-batch
    (METHOD §3.6)."""
    layout = decode_layout(config)
    replicas = config.decode_replicas if config.disaggregated else config.replicas
    cap = layout.max_running_requests * max(layout.attention_dp, 1)
    per_replica = min(-(-max(concurrency, 1) // max(replicas, 1)), cap)
    return -(-per_replica // max(layout.pp, 1))


@dataclass(frozen=True)
class Selection:
    """The anchor chosen for a target (None: no anchor of this model, GPU and engine), how
    the target differs from it (`kinds`, `predictor.anchors.coverage`) and what its unset
    levers take from it (`recipe`). `covered`: the target is inside what the anchor
    measured (in-ladder)."""

    anchor: Anchor | None
    covered: bool
    flags: tuple[str, ...]
    reason: str
    kinds: tuple[str, ...] = ()
    recipe: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class StoredAnchor:
    anchor: Anchor
    where: str          # "embedded" | "user"
    path: str


class AnchorStore:
    """A set of anchors with selection by coverage (METHOD §4)."""

    def __init__(self, stored: list[StoredAnchor], problems: tuple[tuple[str, str], ...] = (),
                 measured_steps: bool = True) -> None:
        by_id: dict[str, StoredAnchor] = {}
        # Whether an anchor's own layout takes its measured decode steps (and prefills) between the
        # calibrated physics (`predictor.step.residual`); off while its points are read.
        self.measured_steps = measured_steps
        for item in stored:  # later sources (user) replace earlier ones (embedded)
            by_id[item.anchor.id] = item
        self._stored = dict(sorted(by_id.items()))
        self.problems = problems  # (path, message) of files that failed to load
        self._of_model: dict[tuple[str, str, str], list[Anchor]] = {}  # the store is immutable
        self._blind: dict[tuple, Selection] = {}     # load-blind selections (read for their recipe only)

    @classmethod
    def default(cls) -> "AnchorStore":
        """Embedded anchors, then the user's cache (re-read when either changes)."""
        return _default_store(_listing(_embedded_dir()), _listing(user_anchors_dir()))

    @classmethod
    def from_anchors(cls, anchors: list[Anchor], measured_steps: bool = True) -> "AnchorStore":
        return cls([StoredAnchor(anchor, USER, "") for anchor in anchors], measured_steps=measured_steps)

    def all(self) -> list[Anchor]:
        return [item.anchor for item in self._stored.values()]

    def entries(self) -> list[StoredAnchor]:
        return list(self._stored.values())

    def get(self, anchor_id: str) -> Anchor:
        return self.entry(anchor_id).anchor

    def entry(self, anchor_id: str) -> StoredAnchor:
        item = self._stored.get(anchor_id)
        if item is None:
            raise InputError("anchor id", f"unknown anchor '{anchor_id}'",
                             accepted_list(self._stored) or "none stored (inferasim harvest writes one)")
        return item

    def of_model(self, card: ModelCard, cluster: Cluster, engine: Engine | str) -> list[Anchor]:
        """Anchors of this model on this GPU type and engine (never a foreign one);
        memoised per (model, GPU, engine): a sweep or a search asks thousands of times."""
        key = (card.name, cluster.gpu.name, str(engine))
        found = self._of_model.get(key)
        if found is None:
            names = _model_names(card)
            found = [a for a in self.all() if not is_foreign(a, cluster.gpu.name, str(engine))
                     and a.signature.model.lower() in names]
            self._of_model[key] = found
        return list(found)

    def has_anchor(self, card: ModelCard, cluster: Cluster, engine: Engine | str) -> bool:
        return bool(self.of_model(card, cluster, engine))

    def select(self, card: ModelCard, cluster: Cluster, engine: Engine | str, config: Configuration,
               concurrency: int, *, context_tokens: float | None = None,
               engine_version: str = WILDCARD_BUILD, disaggregated: bool = False,
               load_blind: bool = False) -> Selection:
        """The anchor of this model, GPU and engine that best matches the target (METHOD §4,
        `predictor.anchors.coverage`), else none. ``disaggregated``: ``config`` is a pool of
        a split deployment (a pool's layout is priced as a plain replica); ``load_blind``:
        ranked without the load and context (which checkpoint a stack serves,
        `predictor.anchors.anchoring.Anchoring.recipe`)."""
        if load_blind:      # blind to the load: one answer per layout (the store is immutable)
            key = (card.name, cluster.spec, str(engine), replace(config, concurrency=1), engine_version, disaggregated)
            found = self._blind.get(key)
            if found is None:
                found = self._blind[key] = self._select(card, cluster, engine, config, concurrency, None,
                                                        engine_version, disaggregated, True)
            return found
        return self._select(card, cluster, engine, config, concurrency, context_tokens, engine_version,
                            disaggregated, False)

    def _select(self, card: ModelCard, cluster: Cluster, engine: Engine | str, config: Configuration,
                concurrency: int, context_tokens: float | None, engine_version: str, disaggregated: bool,
                load_blind: bool) -> Selection:
        candidates = self.of_model(card, cluster, engine)
        if not candidates:
            return Selection(None, False, (), f"no anchor for {card.name} on {cluster.gpu.name} / {engine}")
        layout = decode_layout(config)
        batch = target_batch(config, concurrency)
        ranked = _ordered(candidates, lambda a: match_rank(a, layout, card, None if load_blind else batch,
                                                           None if load_blind else context_tokens, engine_version))
        split = config.disaggregated or disaggregated
        chosen = ranked[0]
        skipped: tuple[str, ...] = ()
        held = _held_to_own_layout(chosen, layout, split)
        if held:
            # its calibration absorbed what the model missed on its own rows: it prices its
            # own layout only (`HOST_AT_BOUND`, `BEYOND_PHYSICS`); the next anchor of the
            # stack, else the priors
            skipped = (f"anchor-not-carried: {chosen.id} ({held})",)
            fallback = next((a for a in ranked if not _held_to_own_layout(a, layout, split)), None)
            if fallback is None:
                return Selection(None, False, skipped,
                                 f"{chosen.id} is held to its own layout ({held}): priced from the cross-model priors",
                                 recipe=recipe(chosen.signature, layout))
            chosen = fallback
        kinds = transfer_kinds(chosen, layout, batch, context_tokens, split)
        covered = kinds == (IN_LADDER,)
        reason = f"covered by {chosen.id}" if covered else f"calibrated by {chosen.id} ({', '.join(kinds)})"
        return Selection(chosen, covered, (*skipped, *anchor_flags(chosen, layout, kinds)), reason, kinds,
                         recipe(chosen.signature, layout))


def _held_to_own_layout(anchor: Anchor, layout: Configuration, split: bool) -> str | None:
    """The flag that keeps ``anchor`` from calibrating ``layout``, if any: a host time at
    its bound holds it to its own widths, colocated (a split's pools queue otherwise); a
    fit beyond the physical range to its own widths and precisions (its steps are its own;
    its factors describe no other layout, nor the bytes of another precision: Qwen3-32B's
    bf16 TP2 anchor on GB200 priced FP8 at TP2 2.4x slower than its own bf16)."""
    if HOST_AT_BOUND in anchor.flags and (split or not same_widths(anchor.signature, layout)):
        return HOST_AT_BOUND
    if BEYOND_PHYSICS in anchor.flags and (not same_widths(anchor.signature, layout)
                                           or _asks_other_precisions(anchor, layout)):
        return BEYOND_PHYSICS
    return None


PRECISION_LEVERS = ("weight_dtype", "activation_dtype", "expert_dtype", "kv_cache_dtype")


def _asks_other_precisions(anchor: Anchor, layout: Configuration) -> bool:
    """Whether ``layout`` asks a precision the anchor did not run (an unset lever takes
    the anchor's recipe)."""
    sig = anchor.signature
    return any(getattr(layout, name) is not None and getattr(layout, name) != getattr(sig, name)
               for name in PRECISION_LEVERS)


def _ordered(anchors: list[Anchor], key) -> list[Anchor]:
    """Sort by `key`, then newest harvest, then id (stable sorts compose)."""
    by_id = sorted(anchors, key=lambda a: a.id)
    newest = sorted(by_id, key=lambda a: _when(a.provenance.timestamp), reverse=True)
    return sorted(newest, key=key)


def _when(timestamp: str) -> str:
    """An ISO date or time sorts as itself; anything else (28 embedded corpus anchors say
    "unknown") as older than every dated anchor: as a string "unknown" sorted after every
    date, so it beat a user's fresh harvest of the same stack."""
    text = str(timestamp).strip()
    return text if text[:4].isdigit() else ""


def _model_names(card: ModelCard) -> set[str]:
    return {card.name.lower(), card.hf_id.lower(), *card.aliases}


# --- loading -----------------------------------------------------------------------------

def _embedded_dir() -> Path:
    return Path(str(resources.files("predictor") / "data" / "anchors"))


def _listing(folder: Path) -> tuple[str, tuple[tuple[str, int, int], ...]]:
    if not folder.is_dir():
        return str(folder), ()
    files = []
    for path in sorted(folder.glob("*.json")):
        stat = path.stat()
        files.append((path.name, stat.st_mtime_ns, stat.st_size))
    return str(folder), tuple(files)


@lru_cache(maxsize=8)
def _default_store(embedded: tuple, user: tuple) -> AnchorStore:
    stored: list[StoredAnchor] = []
    problems: list[tuple[str, str]] = []
    for (folder, files), where in ((embedded, EMBEDDED), (user, USER)):
        for name, _, _ in files:
            path = Path(folder) / name
            try:
                stored.append(StoredAnchor(load_anchor_file(path), where, str(path)))
            except InputError as error:
                problems.append((str(path), error.message))
    return AnchorStore(stored, tuple(problems))
