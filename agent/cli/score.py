"""`inferasim score CORPUS.csv`: build anchors from a measured corpus by the fixed rule,
predict every other row, report error, error factor, ranking fidelity and frontier hits
(METHOD §8, PRODUCT.md §2). Parses, calls `predictor.corpus.score.score_file`, renders."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Optional

import typer
from rich.table import Table

from agent.cli.app import app, cli_errors, console, print_json
from agent.cli.render import number, say, table
from levers.errors import InputError, accepted_list
from levers.inputs import comma_items, quote, read_text
from predictor.corpus.protocol_score import parse_protocols, score_protocols
from predictor.corpus.protocols import ALL, PROTOCOLS, Protocol
from predictor.corpus.read import CorpusRead, filter_rows, read_corpus
from predictor.corpus.report import short_reason
from predictor.corpus.score import score_corpus
from predictor.corpus.where import ACCEPTED as WHERE_ACCEPTED

FORMAT_HELP = ("Corpus format: inferencex, aiconfigurator, native, or auto (from the header). "
               "Native columns: model, hardware, engine, precision, tp, isl, osl, concurrency and at least one "
               "of ttft_ms, tpot_ms, itl_ms, output_throughput_per_gpu, throughput_per_gpu (or "
               "total_output_throughput / total_throughput); optional pp, ep, attention_dp, dcp, replicas, "
               "spec_method, spec_depth, disaggregated, prefill_layout, prefill_replicas, decode_layout, "
               "decode_replicas.")
PROTOCOL_HELP = ("Score by protocol instead (anchors on one width / length / load / layout, predictions on the "
                 "others): in-ladder, cross-width, tp4-to-8, cross-length, load, load-down, split, precision, none, "
                 "leave-model-out, or all (comma-separated). One table: median and p90 error per metric, pair "
                 "accuracy, 80%-interval coverage, absurd predictions (and how many sit on rows whose TPOT contradicts "
                 "their own chart, or, for TTFT, whose mean a stalled tail holds at over 5x the median; --json "
                 "lists each), rows that cannot be expressed.")
WHERE_HELP = ("Use the rows matching EXPR as anchor rows (e.g. 'pp=1', 'tp=8,concurrency<=64') instead of the "
              "default rule (alternate concurrencies of each deployment).")


def _met(value: bool | None) -> str:
    return {True: "yes", False: "no", None: "-"}[value]


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}%"


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _summary_table(data: dict) -> Table:
    grid = table(f"Score of {data['corpus']} ({data['format']})", [("figure", "left"), ("value", "right")],
                 wrap=(0, 1))
    rows = [
        ("rows / anchor / scored / rank-only / failed",
         f"{data['n_rows']} / {data['n_anchor_rows']} / {data['n_scored']} / {data['n_rank_only']} / {data['n_failed']}"),
        ("anchors built", str(data["n_anchors"])),
        ("TTFT APE median / p90", f"{_pct(data['ttft_median_ape'])} / {_pct(data['ttft_p90_ape'])}"),
        ("TPOT APE median / p90", f"{_pct(data['tpot_median_ape'])} / {_pct(data['tpot_p90_ape'])}"),
        ("throughput/GPU APE median / p90",
         f"{_pct(data['throughput_median_ape'])} / {_pct(data['throughput_p90_ape'])}"),
        ("error factor TTFT / TPOT / throughput",
         " / ".join(number(v) for v in data["error_factor"].values())),
        ("pair accuracy (decisive pairs)", f"{_ratio(data['pair_accuracy'])} ({data['decisive_pairs']})"),
        ("top-1 / regret median / p90", f"{_ratio(data['top1'])} / {_pct(data['regret_median'])} / "
                                         f"{_pct(data['regret_p90'])}"),
        ("frontier hits", f"{_ratio(data['frontier_hits'])} of {data['frontier_points']}"),
        ("reproduction of anchor rows: TPOT / TTFT APE median",
         f"{_pct(data['reproduction']['tpot_median_ape'])} / {_pct(data['reproduction']['ttft_median_ape'])}"),
    ]
    for name, value in rows:
        grid.add_row(name, value)
    return grid


def _targets_table(data: dict) -> Table:
    grid = table("Targets (charts that miss them, with why)",
                 [(column, "left") for column in ("target", "value", "met", "chart", "chart value", "why")],
                 wrap=(0, 3, 5))
    for key, target in data["targets"].items():
        value = target["value"]
        shown = _ratio(value) if key == "pair_accuracy" else _pct(value)
        grid.add_row(f"{key} {target['sense']} {number(target['target'])}", shown, _met(target["met"]), "", "", "")
        for miss in target["charts_missed"]:
            chart_value = _ratio(miss["value"]) if key == "pair_accuracy" else _pct(miss["value"])
            grid.add_row("", "", "", miss["chart"], chart_value, miss["why"])
    return grid


CORPUS_EXPECTED = "a UTF-8 CSV corpus with InferenceX, AIConfigurator or native columns (see --format)"


def check_scorable(read: CorpusRead, anchor_where: str | None) -> None:
    """Before any pricing: the corpus has rows, some of them usable, and ``--anchor-where``
    (when given) selects at least one of them."""
    name = f"corpus {quote(read.path)}"
    if not read.n_rows:
        raise InputError(name, "has a header but no rows", "a CSV with one measured run per row")
    if not read.rows:
        first = read.failures[0]
        raise InputError(name, f"none of its {read.n_rows:,} rows can be used (first: {first.id}: {first.reason})",
                         "rows in the format's units and names (see --format)")
    if anchor_where and anchor_where.strip():
        matched, _ = filter_rows(read.rows, anchor_where)
        if not matched:
            raise InputError("--anchor-where", f"{quote(anchor_where)} matches none of the {len(read.rows):,} usable rows",
                             WHERE_ACCEPTED)
        if len(matched) == len(read.rows):     # every row an anchor: nothing left to score
            raise InputError("--anchor-where", f"{quote(anchor_where)} matches all {len(read.rows):,} usable rows, "
                             "so no row is left to score", WHERE_ACCEPTED)


@app.command("score")
@cli_errors
def score(
    corpus: str = typer.Argument(..., help="Corpus CSV file."),
    fmt: str = typer.Option("auto", "--format", help=FORMAT_HELP),
    anchor_where: Optional[str] = typer.Option(None, "--anchor-where", help=WHERE_HELP),
    protocol: Optional[str] = typer.Option(None, "--protocol", help=PROTOCOL_HELP),
    json_out: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Score the predictor on a measured corpus: anchors from its rows, predictions for the rest."""
    protocols = _protocols(protocol) if protocol is not None else None
    if protocols is not None and anchor_where is not None:   # a protocol chooses its own anchors
        raise InputError("--anchor-where", "cannot be combined with --protocol (each protocol picks its anchors "
                         "by its own rule)", "one of --anchor-where or --protocol")
    read_text(corpus, "corpus", expected=CORPUS_EXPECTED)   # bounded, UTF-8: before the reader streams it
    try:
        read = read_corpus(corpus, fmt)
    except InputError as error:
        raise InputError(error.what, error.problem, error.accepted or CORPUS_EXPECTED) from None
    check_scorable(read, anchor_where)
    if protocols is not None:
        return _score_protocols(read, protocols, json_out)
    report = replace(score_corpus(read.rows, failures=read.failures, anchor_where=anchor_where),
                     source=read.path, format=read.format)
    data = report.to_json()
    if json_out:
        return print_json(data)
    console.print(_summary_table(data))
    console.print(_targets_table(data))
    if data["failures"]["by_reason"]:
        failures = table("Failed rows by reason", [("rows", "right"), ("reason", "left")], wrap_last=True)
        for reason, count in data["failures"]["by_reason"].items():
            failures.add_row(str(count), reason)
        console.print(failures)


def _protocols(text: str) -> tuple[Protocol, ...]:
    comma_items(text, "--protocol", accepted_list([*PROTOCOLS, ALL]))
    try:
        found = parse_protocols(text)
    except ValueError:
        found = ()
    if not found:
        raise InputError("--protocol", f"unknown protocol {quote(text)}", accepted_list([*PROTOCOLS, ALL]))
    return found


def _score_protocols(read: CorpusRead, protocols: tuple[Protocol, ...], json_out: bool) -> None:
    """Every protocol over the rows that could be read; the rest counted once, by reason
    (a protocol sees only usable rows: ten split rows without worker counts were in no
    protocol's count and no line said so)."""
    data = score_protocols(list(read.rows), protocols)
    unusable = Counter(short_reason(failure.reason) for failure in read.failures)
    data.update(corpus=read.path, format=read.format,
                read={"rows": read.n_rows, "usable": len(read.rows), "unusable_by_reason": dict(unusable.most_common())})
    if json_out:
        return print_json(data)
    console.print(protocol_table(data))
    if unusable:
        say(console, f"{read.n_rows:,} rows read, {len(read.rows):,} usable by the protocols; not usable: "
                     + "; ".join(f"{count:,} {reason}" for reason, count in unusable.most_common(5)))


def protocol_table(data: dict) -> Table:
    """One line per protocol (PROTOCOL_HELP)."""
    grid = table(f"Score of {data['corpus']} ({data['format']}) by protocol",
                 [("protocol", "left"), ("rows", "right"), ("not expressed\n/ failed", "right"),
                  ("TPOT %\nmedian / p90", "right"), ("out tok/s/GPU %\nmedian / p90", "right"),
                  ("mean TTFT %\nmedian / p90", "right"), ("pair\naccuracy", "right"),
                  ("in 80% interval\nTPOT / tput / TTFT", "right"),
                  ("absurd (on rows\ncontradicting their\nchart or stalled)", "right")])
    for line in data["protocols"]:
        cover = line["interval_coverage"]
        grid.add_row(
            line["protocol"], str(line["n"]), f"{line['n_unexpressed']} / {line['n_failed']}",
            f"{_pct(line['tpot_median_ape'])} / {_pct(line['tpot_p90_ape'])}",
            f"{_pct(line['throughput_median_ape'])} / {_pct(line['throughput_p90_ape'])}",
            f"{_pct(line['ttft_median_ape'])} / {_pct(line['ttft_p90_ape'])}", _ratio(line["pair_accuracy"]),
            " / ".join(_ratio(cover[m]) for m in ("tpot", "throughput", "ttft")),
            f"{sum(line['absurd'].values())} ({sum(line['absurd_on_contradicting_rows'].values())})")
    return grid
