"""Unique prompts of a known token length (METHOD §4: "prompt length recorded",
"prefix caching off").

A prompt is a run of common English words drawn from a seeded RNG; its first two words
never repeat within one harvest, so no two timed prompts share a prefix beyond the
start token (a prefix cache, or llama.cpp's reuse of the previous prompt, finds nothing
to reuse). The length is counted with the engine's own tokenizer when it has a
tokenize API and adjusted word by word until it matches the target; otherwise the
count is left to the engine's usage report (and flagged when that is missing too).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from itertools import pairwise

MAX_ADJUSTMENTS = 8
UNIQUE_PREFIX_WORDS = 2

WORDS: tuple[str, ...] = tuple("""
time year people way day man thing woman life child world school state family student group country
problem hand part place case week company system program question work government number night point
home water room mother area money story fact month lot right study book eye job word business issue
side kind head house service friend father power hour game line end member law car city community
name president team minute idea kid body information back parent face others level office door
health person art war history party result change morning reason research girl guy moment air
teacher force education foot boy age policy process music market sense nation plan college interest
death experience effect use class control care field development role effort rate heart drug show
leader light voice wife police mind price report decision son view relationship town road arm
difference value building action model season society tax director position player record paper
space ground form event official matter center couple site project activity star table need court
oil situation cost industry figure street image phone data picture practice piece land product
doctor wall patient worker news test movie north love support technology step baby computer type
attention film tree source organization hair window evidence population truth analysis measure
summer river garden stone bridge engine signal basket letter winter
""".split())


@dataclass(frozen=True, slots=True)
class Prompt:
    text: str
    target_tokens: int
    counted_tokens: int | None     # the engine's tokenizer, when it has one


class PromptFactory:
    """Makes unique prompts (module docstring); `rng` is injected and seeded."""

    def __init__(self, rng: random.Random, count: Callable[[str], int | None]) -> None:
        self._rng, self._count = rng, count
        self._used_prefixes: set[tuple[str, ...]] = set()
        self.prompts_made = 0

    def _prefix(self) -> list[str]:
        while True:
            prefix = tuple(self._rng.choice(WORDS) for _ in range(UNIQUE_PREFIX_WORDS))
            if prefix not in self._used_prefixes:
                self._used_prefixes.add(prefix)
                return list(prefix)

    def _more(self, words: list[str], count: int) -> None:
        words.extend(self._rng.choice(WORDS) for _ in range(count))

    @staticmethod
    def _text(words: list[str]) -> str:
        return " ".join(words)

    def make(self, tokens: int) -> Prompt:
        """A new unique prompt of `tokens` tokens (counted when the engine can count)."""
        if tokens < UNIQUE_PREFIX_WORDS + 1:
            raise ValueError(f"a prompt needs at least {UNIQUE_PREFIX_WORDS + 1} tokens")
        words = self._prefix()
        self._more(words, tokens - len(words))
        counted = self._count(self._text(words))
        for _ in range(MAX_ADJUSTMENTS):
            if counted is None or counted == tokens:
                break
            if counted < tokens:
                self._more(words, tokens - counted)
            else:
                del words[max(UNIQUE_PREFIX_WORDS, len(words) - (counted - tokens)):]
            counted = self._count(self._text(words))
        self.prompts_made += 1
        return Prompt(self._text(words), tokens, counted)

    def batch(self, tokens: int, count: int) -> list[Prompt]:
        return [self.make(tokens) for _ in range(count)]


def shared_prefix_words(texts: list[str]) -> int:
    """The longest word prefix any two of `texts` share (0: all start differently)."""
    longest = 0
    split = sorted(text.split() for text in texts)
    for first, second in pairwise(split):
        common = 0
        for a, b in zip(first, second):
            if a != b:
                break
            common += 1
        longest = max(longest, common)
    return longest
