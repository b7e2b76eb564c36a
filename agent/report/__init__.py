"""`inferasim report`: one self-contained HTML page for a search ledger or a plan-mix
report, readable offline and in a design review.

`page` holds the HTML primitives (escaping, tables that sort on a click, sections, the
page shell with its styles); `figures` draws the plots as inline SVG with matplotlib;
`search` and `mix` assemble the two kinds of page. Nothing on the page loads anything
from a network: styles, script and figures are inline.
"""
