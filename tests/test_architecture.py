"""The house's layout (docs/ARCHITECTURE.md): no import cycles between files, data flows
one way (levers -> predictor -> objectives -> agent), and `predictor/` keeps only its
short list of top-level modules; everything else lives in a sub-package named after
its noun."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("levers", "predictor", "objectives", "ledgers", "agent", "prompts")
# Lower layers never import higher ones (PRODUCT.md §1).
LAYER = {"levers": 0, "predictor": 1, "objectives": 2, "ledgers": 3, "agent": 4, "prompts": 0}
PREDICTOR_TOP_LEVEL = {
    "__init__", "analytical", "feasibility", "files", "hardware", "memory", "predict", "prediction",
    "target", "units", "workload", "benchmark", "uncertainty",
}


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """Every project module ``name`` imports, at any depth of the file (an import
    hidden in a function still makes a cycle)."""
    is_package = path.name == "__init__.py"
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = name.split(".") if is_package else name.split(".")[:-1]
                parts = parts[:len(parts) - (node.level - 1)]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            names = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        else:
            continue
        for imported in names:
            parts = imported.split(".")
            for end in range(len(parts), 0, -1):
                candidate = ".".join(parts[:end])
                if candidate in known:
                    if candidate != name:
                        targets.add(candidate)
                    break
    return targets


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {name: _imports(name, path, known) for name, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_cycles_between_files():
    assert _cycles(_graph()) == []


def test_cycle_finder_sees_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_data_flows_one_way():
    wrong = [(module, imported) for module, imports in _graph().items() for imported in imports
             if LAYER[imported.split(".")[0]] > LAYER[module.split(".")[0]]]
    assert wrong == []


def test_predictor_top_level_is_the_short_list():
    top = {path.stem for path in (ROOT / "predictor").glob("*.py")}
    assert top == PREDICTOR_TOP_LEVEL


def test_every_sub_package_says_what_it_owns():
    for init in ROOT.glob("*/**/__init__.py"):
        if init.relative_to(ROOT).parts[0] not in PACKAGES:
            continue
        tree = ast.parse(init.read_text("utf-8"))
        assert ast.get_docstring(tree), f"{init.relative_to(ROOT)} has no module docstring"
