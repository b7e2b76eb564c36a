"""Which calibration prices a configuration (METHOD §2, §4): the anchor of its stack, or
the cross-model prior of its GPU, engine and dtype class, and what that choice says.

An `Anchoring` serves one prediction: it resolves the configuration's unset levers to the
anchor's recipe, builds the step model of every replica layout the prediction needs
(colocated, or both pools of a split, or whatever the DES asks for), and records each
choice: the anchors used, how the target differs from them (transfer kinds,
`predictor.anchors.coverage`), the calibration's provenance and the flags.

Priors go with a store: the shipped ones (`predictor/data/calibration_priors.json`) with the
default store, otherwise learned once from the store's own anchors (`inferasim score`
learns from the anchors of each run only).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

from levers.configuration import Configuration
from predictor.anchors.coverage import CROSS_MODEL, HARNESS, NONE
from predictor.anchors.store import AnchorStore, Selection, decode_layout, signature_for
from predictor.cards.registry import load_card
from predictor.feasibility import Feasibility, check_configuration
from predictor.step.anchored import anchored_model, takes_engine_host, with_engine_host
from predictor.step.calibration import PHYSICS, Calibration
from predictor.step.cost import Mode, StepModel
from predictor.step.priors import Priors, dtype_class, learn_from_anchors, shipped_priors
from predictor.step.simulate import SimulateStepModel
from predictor.target import Target

CHECKPOINT_LEVERS = ("weight_dtype", "expert_dtype")   # `Anchoring.recipe`: which checkpoint a stack serves


@lru_cache(maxsize=1)
def default_store() -> AnchorStore:
    return AnchorStore.default()


_LEARNED: "weakref.WeakKeyDictionary[AnchorStore, Priors]" = weakref.WeakKeyDictionary()


def store_priors(store: AnchorStore) -> Priors:
    """The cross-model priors that go with ``store`` (module docstring)."""
    found = _LEARNED.get(store)
    if found is None:
        found = shipped_priors() if store is default_store() else learn_from_anchors(store.all(), load_card)
        _LEARNED[store] = found
    return found


def prior_for(target: Target, config: Configuration, priors: Priors, *, seed: bool = False,
              harness: str | None = None) -> Calibration:
    """The prior of ``config``: what prices it with no anchor (with ``harness``'s host
    time, `predictor.step.priors.Priors.lookup`; with no harness, a question about the
    user's own deployment, its engine's front end's: `predictor.step.anchored.
    with_engine_host`), or (``seed``) what an anchor's fit for it starts from
    (`predictor.step.priors.Priors.seed`)."""
    sig = signature_for(target.card, target.cluster, target.engine, config)
    key = (target.cluster.gpu.name, str(target.engine), dtype_class(sig.weight_dtype, sig.expert_dtype))
    if seed:
        return priors.seed(*key)
    if harness is None:   # the user's own deployment: its engine's front end, not a benchmark's
        found = priors.lookup(*key)
        return replace(with_engine_host(found, str(target.engine)), source=f"{found.source}+host:{target.engine}")
    return priors.lookup(*key, harness=harness)


@dataclass
class Anchoring:
    """The calibrations of one prediction (module docstring)."""

    target: Target
    store: AnchorStore
    priors: Priors
    context_tokens: float | None = None
    acceptance: tuple[float, ...] | None = None
    harness: str | None = None          # the measured run's harness (`WorkloadSpec.harness`)
    split: bool = False                 # the deployment is disaggregated: its pools' layouts come
                                        # here as plain replicas, and their transfer kinds say split
    selections: list[Selection] = field(default_factory=list)
    calibrations: list[Calibration] = field(default_factory=list)
    _models: dict[Configuration, StepModel] = field(default_factory=dict)

    @classmethod
    def of(cls, target: Target, store: AnchorStore | None = None, priors: Priors | None = None,
           context_tokens: float | None = None, acceptance: tuple[float, ...] | None = None,
           harness: str | None = None, split: bool = False) -> Anchoring:
        store = store if store is not None else default_store()
        return cls(target, store, priors if priors is not None else store_priors(store), context_tokens, acceptance,
                   harness, split)

    def _select(self, config: Configuration, load_blind: bool = False) -> Selection:
        t = self.target
        return self.store.select(t.card, t.cluster, t.engine, config, config.concurrency,
                                 context_tokens=self.context_tokens, disaggregated=self.split, load_blind=load_blind)

    def recipe(self, config: Configuration) -> dict[str, str]:
        """The unset levers ``config`` takes from the anchor of its (decode) layout. The
        checkpoint (unset weight and expert precisions) is the one the stack's best-matching
        anchor serves whatever the load, so a sweep over concurrency prices one deployment:
        DeepSeek-R1 TP8/EP8 on B200 under SGLang took the FP4 anchor's checkpoint at one
        client and the FP8 anchor's at 256. The rest of the recipe follows the anchor that
        calibrates that checkpoint at the asked load."""
        checkpoint = {lever: value for lever, value in self._select(config, load_blind=True).recipe.items()
                      if lever in CHECKPOINT_LEVERS}
        chosen = self._select(replace(config, **checkpoint)) if checkpoint else self._select(config)
        return {**checkpoint, **chosen.recipe}

    def priced(self, config: Configuration) -> tuple[Configuration, dict[str, str]]:
        """``config`` with its unset levers taken from the anchor of its (decode) layout,
        and the levers so taken (`recipe`)."""
        taken = self.recipe(config)
        return (replace(config, **taken) if taken else config), taken

    def model(self, config: Configuration) -> StepModel:
        """The step model of one replica layout (cached per configuration)."""
        found = self._models.get(config)
        if found is None:
            found = self._models[config] = self._build(config)
        return found

    def _build(self, config: Configuration) -> StepModel:
        t = self.target
        selection = self._select(config)
        self.selections.append(selection)
        prior = prior_for(t, config, self.priors, seed=selection.anchor is not None, harness=self.harness)
        if selection.anchor is None:
            self.calibrations.append(prior)
            model = SimulateStepModel(t.card, t.cluster, t.engine, config, self.acceptance, calibration=prior,
                                      flags=(f"calibration: {prior.source}", *selection.flags))
            return model
        model = anchored_model(selection.anchor, t.card, t.cluster, t.engine, config, prior, mode=Mode.ANCHORED,
                               flags=selection.flags, acceptance=self.acceptance,
                               measured_steps=self.store.measured_steps, engine_host=self.harness is None)
        self.calibrations.append(model.calibration)
        return model

    def models(self) -> list[StepModel]:
        """Every step model built so far."""
        return list(self._models.values())

    @property
    def has_anchor(self) -> bool:
        return bool(self.selections) and all(s.anchor is not None for s in self.selections)

    @property
    def kinds(self) -> tuple[str, ...]:
        found: list[str] = []
        for selection, calibration in zip(self.selections, self.calibrations):
            if selection.anchor is None:
                # a product question's prior names its engine's host time ("+host:E")
                prior_source = calibration.source.split("+")[0]
                found.append(NONE if prior_source in (PHYSICS.source, "physics") else CROSS_MODEL)
            found.extend(selection.kinds)
            if selection.anchor is not None and self.harness is None and takes_engine_host(selection.anchor):
                found.append(HARNESS)
        return tuple(dict.fromkeys(found))

    @property
    def anchor_id(self) -> str | None:
        ids = [s.anchor.id for s in self.selections if s.anchor is not None]
        return ",".join(dict.fromkeys(ids)) or None

    def calibration_json(self) -> dict | None:
        """Each calibration's factors and provenance, with the source of the anchor it was
        fitted to (``anchor_source``: the error bars' band, `predictor.uncertainty`)."""
        if not self.calibrations:
            return None
        items = [{**c.to_json(), **({"anchor_source": s.anchor.provenance.source} if s.anchor is not None else {})}
                 for s, c in zip(self.selections, self.calibrations)]
        return items[0] if len(items) == 1 else {"pools": items}


def as_priced(target: Target, config: Configuration, store: AnchorStore | None = None,
              context_tokens: float | None = None) -> tuple[Configuration, dict[str, str]]:
    """``config`` with its unset levers as `predict` takes them (the recipe of the anchor
    that calibrates it), and the levers so taken: what `deploy` launches and `check` /
    `memory` size, so a command serves and sizes the precisions it was priced at."""
    return Anchoring.of(target, store, context_tokens=context_tokens, split=config.disaggregated).priced(config)


@dataclass(frozen=True)
class PricedCheck:
    """`check_configuration` of a candidate's levers as `predict` prices them: its unset
    precisions at the calibrating anchor's recipe (`as_priced`), as `check` and `memory`
    size them; the legality of a search, of plan-mix and of a sweep. Checked as typed,
    Llama-3.1-70B on H100 under vLLM sized BF16 weights (70.6 GB a GPU at TP2) for trials
    priced at the FP8 recipe (36.3 GB), so every ``kv_memory_fraction`` below 0.9 read
    illegal and the memory objectives could not move it. Memoised per candidate (the seed
    planner asks again for each move it weighs); ``store`` None: the default store."""

    store: Any
    priced_context_tokens: float
    _seen: dict = field(default_factory=dict, compare=False, hash=False, repr=False)

    def __call__(self, card, cluster, engine, config: Configuration, context_tokens: int) -> Feasibility:
        key = (card.name, cluster.spec, str(engine), config, context_tokens)
        found = self._seen.get(key)
        if found is None:
            priced = as_priced(Target(card, cluster, engine), config, self.store,
                               context_tokens=self.priced_context_tokens)[0]
            found = self._seen[key] = check_configuration(card, cluster, engine, priced, context_tokens)
        return found


def recipe_text(taken: dict[str, str]) -> str:
    """One line naming the levers a configuration took from its anchor's recipe."""
    return "unset levers as priced, from the calibrating anchor's recipe: " + ", ".join(
        f"{lever}={value}" for lever, value in taken.items())


def step_model_for(target: Target, config: Configuration, store: AnchorStore | None = None,
                   priors: Priors | None = None) -> StepModel:
    """The step model of ``config`` (benchmarks and tools that need one model)."""
    return Anchoring.of(target, store, priors).model(decode_layout(config) if config.disaggregated else config)
