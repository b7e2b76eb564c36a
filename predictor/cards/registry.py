"""Model cards by name: the embedded cards, the user's own, and adding one from config.json.

Embedded cards are package data (`predictor/data/models/*.json`, built from the public
configs by scripts/build_model_cards.py and read with importlib.resources). User cards live
in `$INFERASIM_HOME/models/<name>.json` (default `~/.inferasim`) and are written atomically.
Names are case-insensitive aliases (PRODUCT.md §2): the card name, the HF id, and the
name without its active-parameter suffix. An embedded card wins an alias clash, and
adding a user card under an embedded alias is refused; a card file placed in the folder
under a name already taken is skipped and said (`inferasim models`).
"""

from __future__ import annotations

import json
import os
import re
from functools import lru_cache
from importlib import resources
from pathlib import Path

from pydantic import ValidationError

from levers.errors import InputError, accepted_list, did_you_mean
from levers.inputs import load_json, quote
from predictor.cards.builder import card_aliases, card_from_hf_config
from predictor.cards.model_card import (
    COMPONENTS,
    AttentionGroup,
    AttentionKind,
    CardSource,
    Dtype,
    ModelCard,
    NativeDtypes,
)
from predictor.files import atomic_write_text

__all__ = [
    "COMPONENTS", "AttentionGroup", "AttentionKind", "CardSource", "Dtype", "ModelCard", "NativeDtypes",
    "add_card_from_config", "card_aliases", "card_from_config_json", "card_from_hf_config",
    "inferasim_home", "list_cards", "load_card", "register_card_file", "user_cards_dir",
]

_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def inferasim_home() -> Path:
    """`$INFERASIM_HOME`, default `~/.inferasim`."""
    return Path(os.environ.get("INFERASIM_HOME") or "~/.inferasim").expanduser()


def user_cards_dir() -> Path:
    return inferasim_home() / "models"


def load_card(name: str) -> ModelCard:
    """The card for a name or alias (case-insensitive); a user card file that cannot be
    read is named when it is the one asked for."""
    cards, index, problems = _catalog(str(user_cards_dir()))
    key = name.strip().lower()
    position = index.get(key)
    if position is None:
        for path, message in problems:
            if Path(path).stem.lower() == key:
                raise InputError("--model", f"the user card for {quote(name)} cannot be read: {message}",
                                 "a model card JSON as inferasim writes them (predictor/data/models), or remove the file")
        raise InputError("--model", f"unknown model {quote(name)}" + did_you_mean(name, index),
                         accepted_list(card.name for card in cards))
    return cards[position]


def list_cards() -> list[ModelCard]:
    """Every known card, embedded first then the user's, each sorted by name."""
    return list(_catalog(str(user_cards_dir()))[0])


def card_problems() -> tuple[tuple[str, str], ...]:
    """(path, problem) of every user card file skipped because it cannot be read."""
    return _catalog(str(user_cards_dir()))[2]


def card_from_config_json(path: str | Path, name: str | None = None) -> ModelCard:
    """A card from a config.json file; `name` defaults to the folder holding it."""
    path = Path(path)
    config = _read_json(path)
    name = name or (path.parent.name if path.name == "config.json" and path.parent.name else path.stem)
    source = CardSource(repo="user", path=str(path.resolve()))
    return card_from_hf_config(config, name, source, origin=str(path))


def add_card_from_config(path: str | Path, name: str) -> ModelCard:
    """Build a card from a config.json and store it as a user card, usable by `name`."""
    return _write_user_card(card_from_config_json(path, name))


def register_card_file(path: str | Path) -> ModelCard:
    """Validate a card JSON (the embedded card schema) and store it as a user card."""
    path = Path(path)
    return _write_user_card(_parse_card(_read_json(path), str(path)))


# -- storage --------------------------------------------------------------------------
def _write_user_card(card: ModelCard) -> ModelCard:
    """Store atomically (temp file + os.replace); aliases an embedded card owns are dropped."""
    if not _SAFE_NAME.match(card.name):
        raise InputError("card name", f"'{card.name}' is not a usable file name", "letters, digits, '.', '_', '-'")
    embedded = _embedded_aliases()
    if card.name.lower() in embedded:
        raise InputError("card name", f"'{card.name}' clashes with an embedded model", "a name no embedded card uses")
    card = card.model_copy(update={"aliases": tuple(a for a in card.aliases if a not in embedded)})
    folder = user_cards_dir()
    folder.mkdir(parents=True, exist_ok=True)
    text = json.dumps(card.model_dump(mode="json"), indent=1)
    atomic_write_text(folder / f"{card.name}.json", text)
    _catalog.cache_clear()
    return card


def _read_json(path: Path) -> dict:
    """A card or config.json through the input layer (bounded, UTF-8, no NaN, bounded depth)."""
    data = load_json(path, "", expected="a JSON file (a model card or a Hugging Face config.json)")
    if not isinstance(data, dict):
        raise InputError(quote(str(path)), "is not a JSON object", "a JSON object")
    return data


def _parse_card(data: dict, origin: str) -> ModelCard:
    try:
        return ModelCard.model_validate(data)
    except ValidationError as error:
        fields = sorted({".".join(str(p) for p in item["loc"]) for item in error.errors() if item["loc"]})
        whole = [item["msg"].removeprefix("Value error, ") for item in error.errors() if not item["loc"]]
        problem = "; ".join([*([f"fields: {', '.join(fields)}"] if fields else []), *whole])
        raise InputError(origin, f"not a valid model card ({problem})",
                         "a card written by inferasim (see predictor/data/models)") from None


def _embedded_cards() -> list[ModelCard]:
    folder = resources.files("predictor") / "data" / "models"
    files = sorted((item for item in folder.iterdir() if item.name.endswith(".json")), key=lambda f: f.name)
    return [_parse_card(json.loads(item.read_text()), f"embedded card {item.name}") for item in files]


@lru_cache(maxsize=1)
def _embedded() -> tuple[ModelCard, ...]:
    return tuple(sorted(_embedded_cards(), key=lambda card: card.name.lower()))


def _embedded_aliases() -> set[str]:
    return {alias for card in _embedded() for alias in (*card.aliases, card.name.lower())}


def _user_cards(folder: Path) -> tuple[list[ModelCard], tuple[tuple[str, str], ...]]:
    """The readable user cards, and (path, problem) for each file skipped: one broken file
    must not take every model down with it (as the anchor store skips a bad anchor)."""
    if not folder.is_dir():
        return [], ()
    cards, problems, taken = [], [], _embedded_aliases()
    for path in sorted(folder.glob("*.json")):
        try:
            card = _parse_card(_read_json(path), str(path))
        except InputError as error:
            problems.append((str(path), error.problem))
            continue
        if card.name.lower() in taken:   # listed twice and never the one used: said, as a broken file is
            problems.append((str(path), f"its name {quote(card.name)} is an embedded model's or another user card's "
                                        "(rename it)"))
            continue
        taken |= {card.name.lower()}
        cards.append(card)
    return cards, tuple(problems)


@lru_cache(maxsize=8)
def _catalog(user_folder: str) -> tuple[tuple[ModelCard, ...], dict[str, int], tuple[tuple[str, str], ...]]:
    """(cards, alias -> position, skipped files); keyed by the user folder so a changed
    home reloads."""
    embedded = list(_embedded())
    found, problems = _user_cards(Path(user_folder))
    user = sorted(found, key=lambda card: card.name.lower())
    cards = tuple(embedded + user)
    index: dict[str, int] = {}
    for position, card in enumerate(cards):
        for alias in (card.name.lower(), *card.aliases):
            index.setdefault(alias, position)
    return cards, index, problems
