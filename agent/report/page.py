"""HTML primitives for the report pages: every string from a ledger or report is escaped
(a ledger carries LLM text, which is untrusted); tables carry a numeric sort key per cell
so a click on a header sorts by the number, not its formatted text; the page is one
document with its style and its few lines of script inline (no network, no external
file), so it opens from a mail attachment or an archive the same way.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from agent.cli.render import number

STYLE = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;color:#1d232a;background:#fafbfc}
main{max-width:1180px;margin:0 auto;padding:24px 28px 60px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:34px 0 8px;border-bottom:1px solid #d9dee3;padding-bottom:4px}
.sub{color:#5b6570;margin:0 0 18px}
table{border-collapse:collapse;width:100%;margin:8px 0 14px;background:#fff;font-size:13px}
th,td{border:1px solid #e1e5ea;padding:5px 8px;text-align:left;vertical-align:top;overflow-wrap:break-word}
th{background:#f0f3f6;cursor:pointer}td.n{text-align:right;font-variant-numeric:tabular-nums}
tr.best td{background:#eef7ee}code,pre{font:12px ui-monospace,Menlo,Consolas,monospace}
pre{background:#fff;border:1px solid #e1e5ea;padding:8px 10px;white-space:pre-wrap;word-break:break-all}
dl{display:grid;grid-template-columns:max-content 1fr;gap:3px 16px;margin:6px 0}dt{color:#5b6570}dd{margin:0}
figure{margin:10px 0;background:#fff;border:1px solid #e1e5ea;padding:6px}figure svg{width:100%;height:auto}
figcaption{color:#5b6570;font-size:12px;padding:4px 2px}.note{color:#5b6570;font-size:12.5px}
"""
SCRIPT = """
document.querySelectorAll("table.sortable th").forEach(function (header, column) {
  header.addEventListener("click", function () {
    var body = header.closest("table").tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    var down = header.dataset.order !== "asc";
    header.dataset.order = down ? "asc" : "desc";
    rows.sort(function (a, b) {
      var x = a.cells[column].dataset.sort, y = b.cells[column].dataset.sort;
      var p = parseFloat(x), q = parseFloat(y);
      var c = (!isNaN(p) && !isNaN(q)) ? p - q : String(x).localeCompare(String(y));
      return down ? c : -c;
    });
    rows.forEach(function (row) { body.appendChild(row); });
  });
});
document.body.dataset.ready = "1";
"""


def esc(value: object) -> str:
    return html.escape("" if value is None else str(value), quote=True)


@dataclass(frozen=True, slots=True)
class Cell:
    """One table cell: shown text, the sort key (a number when there is one), class."""

    text: str
    sort: str = ""
    numeric: bool = False

    @classmethod
    def of(cls, value: object, shown: str | None = None) -> "Cell":
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return cls(shown if shown is not None else number(value), repr(float(value)), True)
        text = shown if shown is not None else ("-" if value is None else str(value))
        return cls(text, text)


def table(headers: Sequence[str], rows: Iterable[Sequence[Cell | object]], css: str = "sortable",
          row_classes: Sequence[str] | None = None) -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = []
    for index, row in enumerate(rows):
        cells = [c if isinstance(c, Cell) else Cell.of(c) for c in row]
        klass = f' class="{esc(row_classes[index])}"' if row_classes and row_classes[index] else ""
        body.append(f"<tr{klass}>" + "".join(
            f'<td data-sort="{esc(c.sort)}"{" class=n" if c.numeric else ""}>{esc(c.text)}</td>' for c in cells)
            + "</tr>")
    return f'<table class="{esc(css)}"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def definitions(items: Iterable[tuple[str, object]]) -> str:
    return "<dl>" + "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in items) + "</dl>"


def section(title: str, *parts: str) -> str:
    return f"<section><h2>{esc(title)}</h2>{''.join(parts)}</section>"


def paragraph(text: str, css: str = "") -> str:
    klass = f' class="{esc(css)}"' if css else ""
    return f"<p{klass}>{esc(text)}</p>"


def pre(lines: Iterable[str]) -> str:
    return "<pre>" + esc("\n".join(lines)) + "</pre>"


def figure(svg: str, caption: str) -> str:
    """An inline SVG (already markup, made by matplotlib here) with its caption."""
    return f"<figure>{svg}<figcaption>{esc(caption)}</figcaption></figure>"


def document(title: str, subtitle: str, body: Iterable[str]) -> str:
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">"
            f"<title>{esc(title)}</title><style>{STYLE}</style></head><body><main>"
            f"<h1>{esc(title)}</h1><p class=\"sub\">{esc(subtitle)}</p>{''.join(body)}</main>"
            f"<script>{SCRIPT}</script></body></html>\n")
