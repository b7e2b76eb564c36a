"""The report page of a plan-mix run, from the JSON report `plan-mix --out` writes: the
tiers, each tier's picks and short lists (values with their 90% interval over the DES
replications), a figure per tier of its candidates against the interactivity floor,
illegal candidates by reason, and the deploy line of every pick.

The report file is read through the one input layer; the page shows what the file
says and recomputes nothing.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timezone
from typing import Any

from agent.cli.app import package_version
from agent.cli.render import config_text, percent, with_interval
from agent.report import figures
from agent.report.page import Cell, definitions, document, figure, paragraph, pre, section, table
from levers.errors import InputError

EXPECTED = "the JSON report of inferasim plan-mix --out"


def is_mix_report(data: Any) -> bool:
    return isinstance(data, dict) and isinstance(data.get("slots"), list) and isinstance(data.get("tiers"), list)


def mix_page(data: dict[str, Any], path: str) -> str:
    if not is_mix_report(data):
        raise InputError(path, "is neither a ledger nor a plan-mix report", EXPECTED)
    _check_shape(data, path)
    try:
        return _page(data, path)
    except InputError:
        raise
    except (KeyError, TypeError, AttributeError, ValueError) as error:   # a field of another shape inside
        raise InputError(path, f"is not a plan-mix report as plan-mix --out writes it ({type(error).__name__} "
                               "reading its fields)", EXPECTED) from None


def _check_shape(data: dict[str, Any], path: str) -> None:
    """The report's top level as plan-mix writes it: tiers and slots are records, each
    tier named, each slot naming its model and tier; settings and entries, when given, a
    record and a list. (A file of another shape read as one crashed the page, exit 3.)"""
    def record_with(items: Any, keys: tuple[str, ...]) -> bool:
        return all(isinstance(item, dict) and all(isinstance(item.get(k), str) for k in keys) for item in items)

    if not record_with(data["tiers"], ("name",)):
        raise InputError(path, "has a tier that is not a record with a name", EXPECTED)
    if not record_with(data["slots"], ("model", "tier")):
        raise InputError(path, "has a slot that is not a record naming its model and tier", EXPECTED)
    if not isinstance(data.get("settings") or {}, dict) or not isinstance(data.get("entries") or [], list):
        raise InputError(path, "has settings that are not a record or entries that are not a list", EXPECTED)


def _page(data: dict[str, Any], path: str) -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    settings = data.get("settings") or {}
    body = [section("The plan", definitions([
        ("models file", data.get("source")), ("candidates", f"{data.get('candidates_evaluated')} evaluated, "
                                                            f"{data.get('candidates_legal')} legal"),
        ("over max_gpus", data.get("excluded_by_max_gpus")),
        ("same deployment as priced", data.get("same_deployment_as_priced", 0)),
        ("wall time", f"{data.get('wall_s')} s"),
        ("settings", ", ".join(f"{k} {v}" for k, v in settings.items()) or "-")]),
        table(["tier", "interactivity floor tok/s/user", "TTFT cap s", "qualifies when"],
              [[t["name"], _bound(t.get("interactivity"), t.get("interactivity_stat")),
                _bound(t.get("ttft_s"), t.get("ttft_stat")), ", ".join(t.get("qualify") or []) or "always"]
               for t in data["tiers"]]))]
    for tier in data["tiers"]:
        slots = [s for s in data["slots"] if s.get("tier") == tier["name"]]
        if slots:
            body.append(section(f"Tier {tier['name']}", *_tier(tier, slots)))
    body.append(section("Illegal candidates", _illegal(data.get("entries") or [])))
    body.append(section("Deploy the picks", _deploys(data["slots"])))
    return document(f"inferasim plan-mix report: {path}", f"generated {stamp} by inferasim {package_version()}",
                    body)


def _bound(value: float | None, stat: str | None) -> str:
    return "none" if value is None else f"{value:g} ({stat})"


def _tier(tier: dict, slots: list[dict]) -> list[str]:
    rows, classes, points = [], [], []
    for slot in slots:
        candidates = slot.get("short_list") or ([slot["nearest_miss"]] if slot.get("nearest_miss") else [])
        for rank, candidate in enumerate(candidates, start=1):
            picked = bool(slot.get("met")) and rank == 1
            rows.append(_row(slot["model"], "pick" if picked else (str(rank) if slot.get("met") else "miss"),
                             candidate))
            classes.append("best" if picked else "")
            if candidate.get("interactivity") is not None and candidate.get("output_throughput_per_gpu") is not None:
                points.append((candidate["interactivity"], candidate["output_throughput_per_gpu"],
                               f"{slot['model']} {rank}", picked))
        if not candidates:
            rows.append([slot["model"], "-", "no legal candidate", "-", "-", "-", "-", "-", "-", "-"])
            classes.append("")
    parts = [table(["model", "rank", "engine: configuration", "GPUs", "out tok/s/GPU", "tok/s/user", "TTFT s",
                    "headroom", "mode", "ties the pick"], rows, row_classes=classes)]
    if points:
        parts.append(figure(figures.tier_svg(points, tier.get("interactivity"), f"tier {tier['name']}"),
                            "Each slot's short list (the pick starred); the dashed line is the tier's floor."))
    return parts


def _row(model: str, rank: str, c: dict) -> list:
    intervals = c.get("intervals") or {}
    return [model, rank, f"{c.get('engine')}: {config_text(c.get('configuration_text') or '')}",
            Cell.of(c.get("total_gpus")),
            Cell.of(c.get("output_throughput_per_gpu"), with_interval(c.get("output_throughput_per_gpu"),
                                                                     intervals.get("output_throughput_per_gpu"))),
            Cell.of(c.get("interactivity"), with_interval(c.get("interactivity"), intervals.get("interactivity"))),
            Cell.of(c.get("ttft_s"), with_interval(c.get("ttft_s"), intervals.get("ttft_s"))),
            Cell.of(c.get("headroom"), percent(c.get("headroom"), signed=True)), c.get("mode") or "-",
            "yes" if c.get("ties_pick") else ""]


def _illegal(entries: list[dict]) -> str:
    rows = [[e["model"], f"{e.get('illegal', 0)} of {e.get('candidates', 0)}", r["reason"], r["count"]]
            for e in entries for r in e.get("illegal_reasons") or []]
    if not rows:
        return paragraph("Every candidate was legal.")
    return table(["model", "illegal", "stage: reason", "candidates"], rows)


def _deploys(slots: list[dict]) -> str:
    lines: list[str] = []
    listed = Counter((slot.get("model"), slot.get("tier")) for slot in slots)   # a model listed twice: #ENTRY
    for slot in slots:
        deploy = slot.get("deploy")
        if not deploy:
            continue
        repeated = listed[(slot.get("model"), slot.get("tier"))] > 1
        lines.append(f"# {slot['model']}/{slot['tier']}" + (f"#{slot.get('entry')}" if repeated else ""))
        if "error" in deploy:
            lines.append(f"#   not expressible: {deploy['error']}")
            continue
        for pool in deploy.get("pools") or []:
            nodes = pool.get("nodes") or []
            lines.append(f"# {pool['role']}: {pool['replicas']} replica(s) x {pool['gpus_per_replica']} GPU(s)"
                         + (f" over {len(nodes)} nodes (HEAD_NODE: the address of node 0)" if nodes else ""))
            lines += [f"# node {n['rank']}:\n{n['display']}" for n in nodes] if nodes else [pool["display"]]
    if not lines:
        return paragraph("No slot has a pick to deploy.")
    return pre(lines) + paragraph("inferasim deploy --plan REPORT --slot MODEL/TIER writes the files and, for a "
                                  "split, the Dynamo graph and llm-d manifests.", "note")
