"""`--anchor-where EXPR`: which corpus rows become anchor rows (METHOD §8, PRODUCT.md §2).

Grammar: clauses joined by `,` or ` and `, all of which must hold. A clause is
`FIELD OP VALUE` with OP one of `=`/`==`, `!=`, `<`, `<=`, `>`, `>=`; `=` and `!=` accept
alternatives separated by `|` (`tp=4|8`). FIELD is a row field (model, gpu, engine,
precision, spec, isl, osl, concurrency, total_gpus, source, layout_name, ...) or any
lever of the row's configuration (tp, pp, ep, attention_dp, disaggregated, ...). Numbers
compare numerically, booleans accept true/false, text compares case-insensitively.
Examples: `pp=1`, `tp=8,concurrency<=64`, `disaggregated=false and isl=1024`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from levers.errors import InputError

ACCEPTED = "FIELD OP VALUE clauses joined by ',' or 'and' (OP: = != < <= > >=), e.g. pp=1 or tp=8,concurrency<=64"
_CLAUSE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(==|!=|<=|>=|=|<|>)\s*(.+?)\s*$")
_SPLIT = re.compile(r"\s*,\s*|\s+and\s+", re.IGNORECASE)
_ORDERED = {"<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b}

RowPredicate = Callable[[object], bool]


@dataclass(frozen=True, slots=True)
class Clause:
    field: str
    op: str
    values: tuple[str, ...]

    def holds(self, row) -> bool:
        actual = row.field_value(self.field)
        if self.op in ("=", "=="):
            return any(_equal(actual, value) for value in self.values)
        if self.op == "!=":
            return not any(_equal(actual, value) for value in self.values)
        left, right = _number(actual), _number(self.values[0])
        if left is None or right is None:
            raise InputError("--anchor-where", f"'{self.field} {self.op} {self.values[0]}' needs numbers", ACCEPTED)
        return _ORDERED[self.op](left, right)


def parse_where(expr: str | None) -> RowPredicate:
    """A predicate over corpus rows; None or empty selects every row."""
    if expr is None or not expr.strip():
        return lambda row: True
    clauses = []
    for text in _SPLIT.split(expr.strip()):
        match = _CLAUSE.match(text)
        if not match:
            raise InputError("--anchor-where", f"cannot parse '{text}'", ACCEPTED)
        name, op, value = match.groups()
        values = tuple(v.strip() for v in value.split("|")) if op in ("=", "==", "!=") else (value,)
        clauses.append(Clause(name.lower(), op, values))
    return lambda row: all(clause.holds(row) for clause in clauses)


def _number(value: object) -> float | None:
    if isinstance(value, bool):
        return float(value)
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def _equal(actual: object, text: str) -> bool:
    if isinstance(actual, bool):
        return text.lower() in (("true", "1", "yes") if actual else ("false", "0", "no"))
    left, right = _number(actual), _number(text)
    if left is not None and right is not None and not isinstance(actual, str):
        return left == right
    return str(actual).strip().lower() == text.strip().lower()
