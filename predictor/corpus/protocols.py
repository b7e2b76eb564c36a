"""Scoring protocols (METHOD §8; `inferasim score --protocol`): which rows anchor and which
are predicted, the way users depend on the predictor: anchors on one width / length /
load / layout, predictions on the others.

Every protocol splits a corpus into anchor rows, target rows and rows that belong to the
protocol's targets but cannot be expressed (no anchor of the kind the protocol needs:
reported with the reason, never dropped silently). Rows outside the protocol's scope
(e.g. a disaggregated row for `cross-width`) are neither.

| protocol | anchors | targets |
|---|---|---|
| in-ladder | per ladder (stack, layout, isl, osl): the 1st, 3rd, ... concurrency and the highest | the other concurrencies of the ladder |
| cross-width | per chart (stack, isl, osl): colocated rows of its narrowest TP | colocated rows at every wider TP, each from its own chart's anchors |
| tp4-to-8 | per chart: colocated TP4 rows | colocated TP8 rows, from their chart's anchors |
| cross-length | per stack: colocated rows at 1k/1k | colocated rows at 8k/1k and 1k/8k of layouts anchored at 1k/1k |
| load | per ladder: rows at concurrency <= 16 | higher concurrencies of the ladder |
| load-down | per ladder: rows at concurrency >= 64 | concurrencies <= 16 of the ladder |
| split | per stack: colocated rows | disaggregated rows |
| precision | per deployment (model, GPU, engine, speculation, layout, isl, osl) run at two or more precisions: the most measured precision | the other precisions, each from an anchor of its own deployment's rows |
| none | none (no measurement of the scored corpus: physics and the shipped cross-model priors of other models) | every row |
| leave-model-out | per model: every other model's rows (they only teach the cross-model priors) | that model's rows |

A stack is (GPU, engine, model, precision, speculation); a chart a stack at one
(isl, osl); a layout the replica widths (TP, EP, attention DP, PP).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Callable, Iterable

from predictor.corpus.row import CorpusRow

LOAD_ANCHOR_MAX_CONCURRENCY = 16
LOAD_DOWN_ANCHOR_MIN_CONCURRENCY = 64
SHORT_LENGTH, LONG_LENGTH = 1024, 8192


class Protocol(StrEnum):
    IN_LADDER = "in-ladder"
    CROSS_WIDTH = "cross-width"
    TP4_TO_8 = "tp4-to-8"
    CROSS_LENGTH = "cross-length"
    LOAD = "load"
    LOAD_DOWN = "load-down"
    SPLIT = "split"
    PRECISION = "precision"
    NONE = "none"
    LEAVE_MODEL_OUT = "leave-model-out"


ALL = "all"
PROTOCOLS: tuple[Protocol, ...] = tuple(Protocol)


@dataclass(frozen=True)
class Split:
    """One fold of a protocol: its anchor rows and the rows they predict."""

    name: str
    anchors: tuple[CorpusRow, ...]
    targets: tuple[CorpusRow, ...]
    priors_only: bool = False      # anchors teach cross-model priors only (leave-model-out)
    # A target may be calibrated only by anchors built from rows of its own scope (key of
    # a row); the fold's priors still come from all its anchors. None: any anchor of the fold.
    scope: Callable[[CorpusRow], tuple] | None = None


@dataclass(frozen=True)
class Selection:
    protocol: Protocol
    folds: tuple[Split, ...]
    unexpressed: tuple[tuple[str, str], ...] = field(default=())   # (row id, why)

    @property
    def num_targets(self) -> int:
        return sum(len(fold.targets) for fold in self.folds)


def _ladder(row: CorpusRow) -> tuple:
    return (row.stack, row.layout_name, row.isl, row.osl)


def _chart(row: CorpusRow) -> tuple:
    return (row.stack, row.isl, row.osl)


def _grouped(rows: Iterable[CorpusRow], key: Callable[[CorpusRow], tuple]) -> dict[tuple, list[CorpusRow]]:
    groups: dict[tuple, list[CorpusRow]] = defaultdict(list)
    for row in rows:
        groups[key(row)].append(row)
    return groups


def _colocated(rows: Iterable[CorpusRow]) -> list[CorpusRow]:
    return [r for r in rows if not r.config.disaggregated]


def _layout(row: CorpusRow) -> tuple:
    c = row.config
    return (c.tp, c.ep, c.attention_dp, c.pp)


def in_ladder(rows: list[CorpusRow]) -> Selection:
    anchors, targets = [], []
    for ladder in _grouped(rows, _ladder).values():
        levels = sorted({r.concurrency for r in ladder})
        chosen = set(levels[::2]) | {levels[-1]}
        for row in ladder:
            (anchors if row.concurrency in chosen else targets).append(row)
    return Selection(Protocol.IN_LADDER, (Split("all", tuple(anchors), tuple(targets)),))


def _by_width(rows: list[CorpusRow], pick: Callable[[set[int]], tuple[set[int], set[int]] | None],
              protocol: Protocol, why: str) -> Selection:
    anchors, targets, unexpressed = [], [], []
    for chart in _grouped(_colocated(rows), _chart).values():
        widths = {r.config.tp for r in chart}
        chosen = pick(widths)
        if chosen is None:
            unexpressed += [(r.id, why) for r in chart if _is_target_width(r, protocol)]
            continue
        anchor_tps, target_tps = chosen
        anchors += [r for r in chart if r.config.tp in anchor_tps]
        targets += [r for r in chart if r.config.tp in target_tps]
    # a target's anchor is its own chart's: a layout that is the narrowest of another chart
    # (another length) would otherwise price it as a length transfer at its own width
    return Selection(protocol, (Split("all", tuple(anchors), tuple(targets), scope=_chart),), tuple(unexpressed))


def _is_target_width(row: CorpusRow, protocol: Protocol) -> bool:
    return row.config.tp == 8 if protocol is Protocol.TP4_TO_8 else True


def cross_width(rows: list[CorpusRow]) -> Selection:
    def pick(widths: set[int]):
        narrowest = min(widths)
        wider = {w for w in widths if w > narrowest}
        return ({narrowest}, wider) if wider else None
    return _by_width(rows, pick, Protocol.CROSS_WIDTH, "the chart has one TP width only")


def tp4_to_8(rows: list[CorpusRow]) -> Selection:
    def pick(widths: set[int]):
        return ({4}, {8}) if {4, 8} <= widths else None
    return _by_width(rows, pick, Protocol.TP4_TO_8, "no TP4 rows in the chart")


def cross_length(rows: list[CorpusRow]) -> Selection:
    anchors, targets, unexpressed = [], [], []
    for stack_rows in _grouped(_colocated(rows), lambda r: r.stack).values():
        short = [r for r in stack_rows if (r.isl, r.osl) == (SHORT_LENGTH, SHORT_LENGTH)]
        long = [r for r in stack_rows if (r.isl, r.osl) in ((LONG_LENGTH, SHORT_LENGTH), (SHORT_LENGTH, LONG_LENGTH))]
        anchored = {_layout(r) for r in short}
        anchors += short
        for row in long:
            if _layout(row) in anchored:
                targets.append(row)
            else:
                unexpressed.append((row.id, "no 1k/1k rows of this layout in the stack"))
    return Selection(Protocol.CROSS_LENGTH, (Split("all", tuple(anchors), tuple(targets)),), tuple(unexpressed))


def _by_load(rows: list[CorpusRow], protocol: Protocol, anchor: Callable[[int], bool],
             target: Callable[[int], bool], missing: str) -> Selection:
    """Per ladder: its rows whose concurrency ``anchor`` accepts anchor the ones ``target``
    accepts; a ladder with no anchor row leaves its targets unexpressed (``missing``)."""
    anchors, targets, unexpressed = [], [], []
    for ladder in _grouped(rows, _ladder).values():
        held = [r for r in ladder if anchor(r.concurrency)]
        asked = [r for r in ladder if target(r.concurrency)]
        if not held:
            unexpressed += [(r.id, f"no run at concurrency {missing} in the ladder") for r in asked]
            continue
        anchors += held
        targets += asked
    return Selection(protocol, (Split("all", tuple(anchors), tuple(targets)),), tuple(unexpressed))


def load(rows: list[CorpusRow]) -> Selection:
    return _by_load(rows, Protocol.LOAD, lambda c: c <= LOAD_ANCHOR_MAX_CONCURRENCY,
                    lambda c: c > LOAD_ANCHOR_MAX_CONCURRENCY, f"<= {LOAD_ANCHOR_MAX_CONCURRENCY}")


def load_down(rows: list[CorpusRow]) -> Selection:
    """The load transfer the other way: a ladder measured only under load (a served run's
    steps at hundreds of requests) asked about a few clients. The load protocol measures
    only the way up; the product carries anchors both ways."""
    return _by_load(rows, Protocol.LOAD_DOWN, lambda c: c >= LOAD_DOWN_ANCHOR_MIN_CONCURRENCY,
                    lambda c: c <= LOAD_ANCHOR_MAX_CONCURRENCY, f">= {LOAD_DOWN_ANCHOR_MIN_CONCURRENCY}")


def split(rows: list[CorpusRow]) -> Selection:
    anchors, targets, unexpressed = [], [], []
    for stack_rows in _grouped(rows, lambda r: r.stack).values():
        colocated = _colocated(stack_rows)
        disaggregated = [r for r in stack_rows if r.config.disaggregated]
        if not disaggregated:
            continue
        if not colocated:
            unexpressed += [(r.id, "no colocated rows in the stack") for r in disaggregated]
            continue
        anchors += colocated
        targets += disaggregated
    return Selection(Protocol.SPLIT, (Split("all", tuple(anchors), tuple(targets)),), tuple(unexpressed))


def _deployment(row: CorpusRow) -> tuple:
    return row.model, row.gpu, row.engine, row.spec, row.layout_name, row.isl, row.osl


def precision(rows: list[CorpusRow]) -> Selection:
    """Each deployment's other precisions from its own main precision: a target is
    calibrated only by an anchor built from its deployment's rows (`Split.scope`), not by
    an anchor of its own precision at another layout (21 of AIConfigurator's 119 targets
    were: width transfers scored as precision ones)."""
    anchors, targets = [], []
    for group in _grouped(rows, _deployment).values():
        by_precision = _grouped(group, lambda r: (r.precision,))
        if len(by_precision) < 2:
            continue
        (main,) = max(by_precision, key=lambda k: (len(by_precision[k]), k))
        for (label,), members in by_precision.items():
            (anchors if label == main else targets).extend(members)
    return Selection(Protocol.PRECISION, (Split("all", tuple(anchors), tuple(targets), scope=_deployment),))


def none(rows: list[CorpusRow]) -> Selection:
    return Selection(Protocol.NONE, (Split("all", (), tuple(rows)),))


def leave_model_out(rows: list[CorpusRow]) -> Selection:
    by_model = _grouped(rows, lambda r: (r.model,))
    folds = []
    for (model,), held in sorted(by_model.items()):
        others = tuple(r for r in rows if r.model != model)
        folds.append(Split(model, others, tuple(held), priors_only=True))
    return Selection(Protocol.LEAVE_MODEL_OUT, tuple(folds))


SELECTORS: dict[Protocol, Callable[[list[CorpusRow]], Selection]] = {
    Protocol.IN_LADDER: in_ladder, Protocol.CROSS_WIDTH: cross_width, Protocol.TP4_TO_8: tp4_to_8,
    Protocol.CROSS_LENGTH: cross_length, Protocol.LOAD: load, Protocol.LOAD_DOWN: load_down, Protocol.SPLIT: split,
    Protocol.PRECISION: precision,
    Protocol.NONE: none,
    Protocol.LEAVE_MODEL_OUT: leave_model_out,
}


def select(protocol: Protocol | str, rows: list[CorpusRow]) -> Selection:
    return SELECTORS[Protocol(protocol)](list(rows))
