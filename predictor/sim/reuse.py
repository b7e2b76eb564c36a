"""Reusing a replay a process has already run when nothing it reads differs (issue 13 speed).

A search prices hundreds of configurations, and many differ only in levers the DES cannot
see at that load: at 16 clients a running cap of 64 or 1,024, a graph-capture limit of 128
or 512, an attention or MoE backend the step model prices the same. In the README's main
job 120 of 300 search trials (42% of its DES time) replayed exactly what an earlier trial
had replayed. The replay is deterministic: it is a function of the deployment it builds
(layouts, limits, KV pools, links, host times: everything but the step models), of the
workload, its seed and length, of the options and stop rules, and of the answers its
step models give. So every replay is recorded (:class:`RecordingModel` wraps each step
model and keeps every call that reaches it, with its answer and the attributes read),
and a later replay whose deployment :func:`fingerprint` and inputs are equal first asks
its own step models every recorded question, in order. Only if every answer is
bit-identical (and so every attribute) would the replay take the same path; then its
result is the recorded one. The first different answer ends the check and the replay
runs (the check costs at most the step-model calls of the recorded replay, which a
replay makes anyway). Nothing is approximated: a reused result is the replay's own.

Two limits are compared by what the replay reached, not by value: a running cap and
a rank's KV tokens that no check of the replay ever met (`Bounds`: the most running and
waiting requests a cap was checked against, the most tokens any KV check compared with
the pool) give the same replay, so a cap of 256 or 1,024 at 16 clients, or a graph-
capture limit that moves the KV pool by 1%, reuses it too. Each limit is compared on its
own: a cap the replay never met reuses it even when its KV pool, the same in both, was
full (an agentic replay's prefix cache fills it: 19 of the main job's trials differed
from an earlier one in the running cap alone and were replayed before).

A run that was not stopped early is also filed under "no stop rules" (its stop checks
changed nothing), so the confirm step's first replication of a search trial that ran to
the end is the trial's own replay.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict, deque
from collections.abc import Callable
from enum import Enum
from typing import Any

import numpy as np

REPLAYS_KEPT = 256              # recorded replays per process (least recently used go first)
LOG_LIMIT = 50_000              # step-model calls above which a replay is not kept ...
CALLS_KEPT = 400_000            # ... and all kept replays' calls at most (~100 MB)
PER_KEY = 64                    # replays kept under one key (other limits, other step models)
OPENING_CALLS = 24              # calls that narrow the candidates before a full check
SAMPLE_EVERY = 37               # the check asks every 37th recorded call before all of them
_SKIPPED = frozenset({"uid"})   # radix-cache node ids: a global counter, not an input
#: limits a replay may never reach: compared through `Bounds`, not the fingerprint
_RELAXED = frozenset({("Limits", "running_cap"), ("PoolShape", "capacity_tokens"),
                      ("PoolCapacity", "kv_capacity_tokens")})

DECODE, PREFILL, MIXED = 0, 1, 2
_ABSENT = object()              # an attribute the step model does not have


class RecordingModel:
    """A step model that keeps every call reaching it (and every attribute read)."""

    def __init__(self, model: Any, index: int, log: list) -> None:
        self._model = model
        self._index = index
        self._log = log
        self._attributes: dict[str, Any] = {}

    def decode_us(self, batch: int, context_tokens: float) -> float:
        us = self._model.decode_us(batch, context_tokens)
        self._log.append((self._index, DECODE, (batch, context_tokens), us))
        return us

    def prefill_us(self, num_tokens: int, num_seqs: int = 1, context_tokens: float = 0.0) -> float:
        us = self._model.prefill_us(num_tokens, num_seqs, context_tokens)
        self._log.append((self._index, PREFILL, (num_tokens, num_seqs, context_tokens), us))
        return us

    def mixed_us(self, prefill_tokens: int, decode_batch: int, context_tokens: float,
                 prefill_context_tokens: float = 0.0) -> float:
        us = self._model.mixed_us(prefill_tokens, decode_batch, context_tokens, prefill_context_tokens)
        self._log.append((self._index, MIXED, (prefill_tokens, decode_batch, context_tokens, prefill_context_tokens), us))
        return us

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        value = getattr(self._model, name, _ABSENT)
        self._attributes[name] = value
        if value is _ABSENT:
            raise AttributeError(name)
        if callable(value):
            raise AttributeError(f"the DES asked its step model for '{name}', which a recorded replay "
                                 "cannot check: add it to predictor.sim.reuse.RecordingModel")
        setattr(self, name, value)           # later reads are plain attribute reads
        return value


_CALLS: dict[int, Callable[..., float]] = {
    DECODE: lambda model, args: model.decode_us(*args),
    PREFILL: lambda model, args: model.prefill_us(*args),
    MIXED: lambda model, args: model.mixed_us(*args),
}


@dataclasses.dataclass
class Recording:
    """What one replay asked its step models, and what it produced."""

    models: list[RecordingModel] = dataclasses.field(default_factory=list)
    log: list = dataclasses.field(default_factory=list)

    def factory(self, inner: Callable[[Any], Any]) -> Callable[[Any], RecordingModel]:
        """``inner`` with every model it returns wrapped (one wrapper per model object)."""
        wrapped: dict[int, RecordingModel] = {}

        def make(config: Any) -> RecordingModel:
            model = inner(config)
            found = wrapped.get(id(model))
            if found is None:
                found = wrapped[id(model)] = RecordingModel(model, len(self.models), self.log)
                self.models.append(found)
            return found
        return make


@dataclasses.dataclass(frozen=True)
class Bounds:
    """Per pool (entry, then decode): the running cap and KV tokens per rank, and after a
    replay the most that any check compared with them (``Rank.peak_demand``,
    ``KvPool.peak_tokens``). A replay whose peaks stayed within both replays' limits never
    met a limit: the two limits gave it the same path."""

    limits: tuple[tuple[int, int], ...]
    peaks: tuple[tuple[int, int], ...] = ()

    @staticmethod
    def of(deployment: Any) -> Bounds:
        pools = [p for p in (deployment.entry, deployment.decode) if p is not None]
        limits = tuple((p.replicas[0].limits.running_cap, p.units[0].pool.shape.capacity_tokens) for p in pools)
        peaks = tuple((max(r.peak_demand for r in p.units), max(r.pool.peak_tokens for r in p.units))
                      for p in pools)
        return Bounds(limits, peaks)

    def serve(self, limits: tuple[tuple[int, int], ...]) -> bool:
        """Whether this replay (its peaks) is also the replay under ``limits``: each limit
        is the same, or one the replay never met under either value (a running cap of 64
        or 256 at 16 clients on the same KV pool, which the prefix cache does fill)."""
        if limits == self.limits:
            return True
        return len(limits) == len(self.limits) == len(self.peaks) and all(
            (cap == other_cap or demand <= min(cap, other_cap))
            and (capacity == other_capacity or tokens <= min(capacity, other_capacity))
            for (cap, capacity), (other_cap, other_capacity), (demand, tokens)
            in zip(self.limits, limits, self.peaks))


@dataclasses.dataclass(frozen=True)
class _Kept:
    attributes: tuple[dict[str, Any], ...]
    log: tuple
    result: Any
    bounds: Bounds


class ReplayStore:
    """Recorded replays by key, a few per key (other limits or other step models behind
    the same key); least recently used dropped beyond :data:`REPLAYS_KEPT`."""

    def __init__(self, limit: int = REPLAYS_KEPT) -> None:
        self.limit = limit
        self._kept: OrderedDict[int, tuple[tuple, _Kept]] = OrderedDict()   # serial -> (key, replay)
        self._by_key: dict[tuple, list[int]] = {}
        self._serial = 0
        self._calls = 0             # logged calls over the kept replays
        self.reused = self.checked = 0

    def find(self, key: tuple, recording: Recording, limits: tuple[tuple[int, int], ...]) -> Any | None:
        """A kept result for ``key`` that never met ``limits`` and whose recorded calls the
        new step models answer alike. Replays behind one key ask the same first questions
        until an answer differs, so the candidates are first narrowed on their opening
        calls (:data:`OPENING_CALLS`, each asked once), then checked in full."""
        candidates = [serial for serial in reversed(self._by_key.get(key, ()))
                      if self._kept[serial][1].bounds.serve(limits)]
        inner = [m._model for m in recording.models]
        answers: dict[tuple, float | None] = {}
        for depth in range(OPENING_CALLS):
            if len(candidates) <= 1:
                break
            narrowed = []
            for serial in candidates:
                log = self._kept[serial][1].log
                if depth >= len(log):
                    narrowed.append(serial)
                    continue
                index, kind, args, us = log[depth]
                if (index, kind, args) not in answers:
                    answers[(index, kind, args)] = _answer(inner, index, kind, args)
                if answers[(index, kind, args)] == us:
                    narrowed.append(serial)
            candidates = narrowed
        for serial in candidates:
            kept = self._kept[serial][1]
            self.checked += 1
            if _answers_alike(kept, recording.models):
                self._kept.move_to_end(serial)
                self.reused += 1
                return kept.result
        return None

    def keep(self, keys: tuple[tuple, ...], recording: Recording, result: Any, bounds: Bounds) -> None:
        if len(recording.log) > LOG_LIMIT:
            return
        kept = _Kept(tuple(dict(m._attributes) for m in recording.models), tuple(recording.log), result, bounds)
        for key in keys:
            serials = self._by_key.setdefault(key, [])
            if len(serials) >= PER_KEY:
                self._drop(serials[0])
            self._serial += 1
            self._kept[self._serial] = (key, kept)
            self._by_key[key].append(self._serial)
            self._calls += len(kept.log)
        while self._kept and (len(self._kept) > self.limit or self._calls > CALLS_KEPT):
            self._drop(next(iter(self._kept)))

    def _drop(self, serial: int) -> None:
        key, kept = self._kept.pop(serial)
        self._calls -= len(kept.log)
        serials = self._by_key[key]
        serials.remove(serial)
        if not serials:
            del self._by_key[key]

    def __len__(self) -> int:
        return len(self._kept)

    def clear(self) -> None:
        self._kept.clear()
        self._by_key.clear()
        self._calls = 0


def _answer(models: list[Any], index: int, kind: int, args: tuple) -> float | None:
    try:
        return _CALLS[kind](models[index], args) if index < len(models) else None
    except Exception:  # noqa: BLE001 - a model that cannot answer a recorded call is not alike
        return None


def _answers_alike(kept: _Kept, models: list[RecordingModel]) -> bool:
    if len(models) != len(kept.attributes):
        return False
    inner = [m._model for m in models]
    try:
        for model, attributes in zip(inner, kept.attributes):
            for name, value in attributes.items():
                if not _same(getattr(model, name, _ABSENT), value):
                    return False
        for calls in (kept.log[::SAMPLE_EVERY], kept.log):    # a sample first: most misses cost little
            for index, kind, args, us in calls:
                if _CALLS[kind](inner[index], args) != us:
                    return False
    except Exception:  # noqa: BLE001 - a model that cannot answer a recorded call is not alike
        return False
    return True


def _same(a: Any, b: Any) -> bool:
    if a is _ABSENT or b is _ABSENT:
        return a is b
    try:
        return bool(a == b) and type(a) is type(b)
    except Exception:  # noqa: BLE001 - incomparable values are not the same
        return False


class Same:
    """Hashes and compares by identity, holding its object (so the id is not reused)."""

    __slots__ = ("obj",)

    def __init__(self, obj: Any) -> None:
        self.obj = obj

    def __hash__(self) -> int:
        return id(self.obj)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Same) and other.obj is self.obj


def workload_key(workload: Any) -> tuple | None:
    """A frozen workload's fields, an unhashable field (the agentic profile: loaded once
    per process and never changed) by identity; None if a field is neither."""
    if not dataclasses.is_dataclass(workload):
        return None
    parts: list[Any] = [type(workload).__qualname__]
    for field in dataclasses.fields(workload):
        value = getattr(workload, field.name)
        try:
            hash(value)
        except TypeError:
            value = Same(value)
        parts.append((field.name, value))
    return tuple(parts)


def fingerprint(obj: Any) -> Any:
    """A hashable value equal for two object graphs that hold the same data: every field of
    every object reached (by type name and field name), step models by their recording
    index, except the limits `Bounds` compares. Built on a freshly built deployment (no
    request state yet)."""
    return _walk(obj, {})


def _walk(obj: Any, seen: dict[int, int]) -> Any:
    if obj is None or isinstance(obj, (bool, int, float, str, bytes)):
        return (type(obj).__name__, obj)
    if isinstance(obj, Enum):
        return (type(obj).__qualname__, obj.value)
    if isinstance(obj, RecordingModel):
        return ("model", obj._index)
    if isinstance(obj, np.generic):
        return (type(obj).__name__, obj.item())
    key = id(obj)
    if key in seen:
        return ("ref", seen[key])
    seen[key] = len(seen)
    if isinstance(obj, np.ndarray):
        return ("ndarray", obj.dtype.str, obj.shape, obj.tobytes())
    if isinstance(obj, (list, tuple, deque)):
        return (type(obj).__name__, tuple(_walk(item, seen) for item in obj))
    if isinstance(obj, (set, frozenset)):
        return (type(obj).__name__, frozenset(_walk(item, seen) for item in obj))
    if isinstance(obj, dict):
        return ("dict", tuple((_walk(k, seen), _walk(v, seen)) for k, v in obj.items()))
    if isinstance(obj, type):
        return ("type", obj.__module__, obj.__qualname__)
    if callable(obj) and hasattr(obj, "__code__"):
        cells = tuple(_walk(cell.cell_contents, seen) for cell in (obj.__closure__ or ()))
        return ("function", obj.__module__, obj.__qualname__, cells, _walk(obj.__defaults__, seen))
    if hasattr(obj, "__self__") and hasattr(obj, "__func__"):
        return ("method", obj.__func__.__qualname__, _walk(obj.__self__, seen))
    fields = []
    kind = type(obj).__qualname__
    for name in _names(obj):
        if name in _SKIPPED or (kind, name) in _RELAXED:
            continue
        value = getattr(obj, name, _walk)
        fields.append((name, "unset" if value is _walk else _walk(value, seen)))
    return (type(obj).__module__, type(obj).__qualname__, tuple(fields))


def _names(obj: Any) -> list[str]:
    names: list[str] = []
    for cls in type(obj).__mro__:
        slots = cls.__dict__.get("__slots__", ())
        names.extend([slots] if isinstance(slots, str) else slots)
    names.extend(getattr(obj, "__dict__", {}).keys())
    return sorted(set(names) - {"__dict__", "__weakref__"})


STORE = ReplayStore()
