"""Build tests/fixtures/engine_flags/ENGINE.json: the command-line options each serving
engine defines, parsed from the engine's released source (never a hand list), with
their provenance. `tests/agent/deploy/` checks every launch command `inferasim deploy`
prints against these files.

Nothing is imported or run: each file is parsed with `ast`, and options are read from
the four ways these engines declare them:
- `parser.add_argument("--flag", ...)` (argparse: vLLM, SGLang, ATOM; Dynamo's
  `add_argument(g, flag_name="--flag")` and `add_negatable_bool_argument`); an
  argument whose keywords come from `**X_kwargs["field"]` (vLLM's `get_kwargs(Config)`)
  takes its kind from the dataclass field's annotation, as vLLM's `_compute_kwargs`
  does (bool: `--flag` and `--no-flag`; bool | str: an optional value; Literal:
  choices; list/tuple/set: one or more values);
- dataclass fields of a frontend class (vLLM's `FrontendArgs`: `--field-name`);
- `A[type, "help" | Arg(...)]` fields (SGLang's arg_groups: `--field-name` or
  `cli_name`, `aliases`, `choices`; bool: a switch; Literal: choices);
- `@click.option("--flag", ...)` (TensorRT-LLM's `trtllm-serve`; `is_flag`: a switch).
Kinds: `value` (needs one value), `optional` (value optional), `switch` (no value),
`list` (one or more values). Environment variables the engine reads are listed too
(vLLM's `envs.environment_variables`, SGLang's `Envs` class attributes).

Where the sources came from (regenerate with the same command and sources):
- vLLM 0.33.0 and SGLang 0.5.23: `pip download --no-deps --only-binary :all:
  vllm==0.33.0 sglang==0.5.23` (the wheels), unzipped;
- Dynamo 1.6.1 (`python -m dynamo.frontend|vllm|sglang|trtllm` flags):
  `pip download --no-deps --only-binary :all: ai-dynamo==1.6.1`;
- TensorRT-LLM and ATOM are not on PyPI as source (TensorRT-LLM's PyPI sdist is a
  10 kB stub): `tensorrt_llm/commands/serve.py` of NVIDIA/TensorRT-LLM at 4c05a748 and
  `atom/model_engine/arg_utils.py` (0027562b), `atom/entrypoints/openai_server.py`
  (af59ebac) of ROCm/ATOM, read through a code-search mirror of GitHub (the argument
  definitions verbatim; a git checkout at those commits parses the same).

    python scripts/build_engine_flags.py vllm=/tmp/engsrc/vllm_src sglang=/tmp/engsrc/sglang_src \\
        dynamo=/tmp/engsrc/dynamo_src trtllm=/tmp/engsrc/trtllm_src atom=/tmp/engsrc/atom_src
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

OUT_DIR = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "engine_flags"


@dataclass(frozen=True)
class Source:
    engine: str
    command: tuple[str, ...]
    origin: str
    version: str
    option_files: tuple[str, ...]                  # where options are declared
    type_globs: tuple[str, ...] = ()               # dataclasses whose field types decide kinds
    frontend_classes: tuple[str, ...] = ()         # dataclasses whose fields are options
    env_file: str | None = None
    env_prefix: str = ""


SOURCES = {
    "vllm": Source("vllm", ("vllm", "serve"), "pip download --no-deps --only-binary :all: vllm==0.33.0", "0.33.0",
                   ("vllm/engine/arg_utils.py", "vllm/entrypoints/common/cli_args.py"),
                   ("vllm/config/*.py", "vllm/engine/arg_utils.py", "vllm/entrypoints/common/cli_args.py"),
                   ("FrontendArgs",), "vllm/envs.py", "VLLM_"),
    "sglang": Source("sglang", ("python", "-m", "sglang.launch_server"),
                     "pip download --no-deps --only-binary :all: sglang==0.5.23", "0.5.23",
                     ("sglang/srt/server_args.py", "sglang/srt/arg_groups/fields/*.py"),
                     ("sglang/srt/arg_groups/choices.py",), (), "sglang/srt/environ.py", "SGLANG_"),
    "dynamo": Source("dynamo", ("python3", "-m", "dynamo.<backend>"),
                     "pip download --no-deps --only-binary :all: ai-dynamo==1.6.1", "1.6.1",
                     ("dynamo/vllm/backend_args.py", "dynamo/sglang/backend_args.py", "dynamo/trtllm/backend_args.py",
                      "dynamo/frontend/frontend_args.py", "dynamo/common/configuration/groups/*.py")),
    "trtllm": Source("trtllm", ("trtllm-serve", "serve"),
                     "NVIDIA/TensorRT-LLM tensorrt_llm/commands/serve.py at 4c05a74891e4df8066f08ed4ce14b0972abe4e25 "
                     "(code-search mirror of GitHub; the click decorators of `serve`)", "4c05a748",
                     ("tensorrt_llm/commands/serve.py",)),
    "atom": Source("atom", ("python", "-m", "atom.entrypoints.openai_server"),
                   "ROCm/ATOM atom/model_engine/arg_utils.py at 0027562b997ceeec4a023e7f606e58776d2ae008 and "
                   "atom/entrypoints/openai_server.py at af59ebacc8e9fc40deec1420e6f275aa49882b5a "
                   "(code-search mirror of GitHub; the argument definitions)", "0027562b+af59ebac",
                   ("atom/model_engine/arg_utils.py", "atom/entrypoints/openai_server.py")),
}


@dataclass
class Options:
    kinds: dict[str, dict] = field(default_factory=dict)

    def add(self, names: list[str], kind: str, choices: list | None = None) -> None:
        for name in names:
            if name.startswith("-"):
                self.kinds[name] = {"kind": kind, "choices": choices}

    def add_negatable(self, names: list[str]) -> None:
        self.add(names, "switch")
        self.add(["--no-" + n[2:] for n in names if n.startswith("--")], "switch")


# -- annotations --------------------------------------------------------------------


def _members(annotation: ast.expr | None) -> list[ast.expr]:
    """The members of a union annotation (``X | Y``, ``Optional[X]``, ``Union[...]``)."""
    if annotation is None:
        return []
    if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
        return _members(annotation.left) + _members(annotation.right)
    if isinstance(annotation, ast.Subscript) and _name(annotation.value) in ("Optional", "Union"):
        inner = annotation.slice
        return [m for e in (inner.elts if isinstance(inner, ast.Tuple) else [inner]) for m in _members(e)]
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        try:
            return _members(ast.parse(annotation.value, mode="eval").body)
        except SyntaxError:
            return []
    return [annotation]


def _name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


ALIASES: dict[str, ast.expr] = {}   # module-level `Name = Literal[...]` type aliases, by name


def type_aliases(trees: list[ast.Module]) -> dict[str, ast.expr]:
    found = {}
    for tree in trees:
        for node in tree.body:
            target = node.targets[0] if isinstance(node, ast.Assign) else node.target if isinstance(node, ast.AnnAssign) else None
            value = getattr(node, "value", None)
            if isinstance(target, ast.Name) and isinstance(value, ast.Subscript) and _name(value.value) == "Literal":
                found[target.id] = value
    return found


def kind_of_annotation(annotation: ast.expr | None, bool_kind: str) -> tuple[str, list | None]:
    """(kind, choices) of a field, as vLLM's `_compute_kwargs` / SGLang's arg_utils map it."""
    members = [ALIASES.get(m.id, m) if isinstance(m, ast.Name) else m for m in _members(annotation)]
    members = [m for m in members if not (isinstance(m, ast.Constant) and m.value is None) and _name(m) != "None"]
    names = {_name(m.value) if isinstance(m, ast.Subscript) else _name(m) for m in members}
    if "bool" in names:
        return ("optional", None) if "str" in names else (bool_kind, None)
    literal = next((m for m in members if isinstance(m, ast.Subscript) and _name(m.value) == "Literal"), None)
    if literal is not None:
        values = literal.slice.elts if isinstance(literal.slice, ast.Tuple) else [literal.slice]
        return "value", [v.value for v in values if isinstance(v, ast.Constant)]
    if names & {"list", "tuple", "set", "List", "Tuple", "Set"}:
        return "list", None
    return "value", None


def class_fields(trees: list[ast.Module]) -> dict[str, tuple[list[str], dict[str, ast.expr]]]:
    """class name -> (base names, field name -> annotation)."""
    found = {}
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                annotations = {item.target.id: item.annotation for item in node.body
                               if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)}
                found.setdefault(node.name, ([_name(b) for b in node.bases], annotations))
    return found


def field_annotation(classes: dict, class_name: str, name: str) -> ast.expr | None:
    bases, annotations = classes.get(class_name, ([], {}))
    if name in annotations:
        return annotations[name]
    return next((a for a in (field_annotation(classes, b, name) for b in bases) if a is not None), None)


# -- the four declaration styles ------------------------------------------------------


def _constants(node: ast.expr | None, constants: dict[str, list]) -> list | None:
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        values = [e.value for e in node.elts if isinstance(e, ast.Constant)]
        return values if len(values) == len(node.elts) else None
    if isinstance(node, ast.Name):
        return constants.get(node.id)
    return None


def module_constants(trees: list[ast.Module]) -> dict[str, list]:
    """Module-level NAME = [constants] (choices lists)."""
    found = {}
    for tree in trees:
        for node in tree.body:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
            value = getattr(node, "value", None)
            values = _constants(value, {})
            for target in targets:
                if isinstance(target, ast.Name) and values is not None:
                    found[target.id] = values
    return found


def kwargs_classes(tree: ast.Module) -> dict[str, str]:
    """vLLM: ``x_kwargs = get_kwargs(SomeConfig)`` -> {"x_kwargs": "SomeConfig"}."""
    found = {}
    for node in ast.walk(tree):
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and _name(node.value.func) == "get_kwargs"
                and node.value.args and isinstance(node.targets[0], ast.Name)):
            found[node.targets[0].id] = _name(node.value.args[0])
    return found


def field_aliases(tree: ast.Module) -> dict[str, tuple[str, str]]:
    """vLLM: ``moe_kwargs = kernel_kwargs["moe_backend"]`` -> {"moe_kwargs": ("kernel_kwargs", "moe_backend")}."""
    found = {}
    for node in ast.walk(tree):
        if (isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name) and isinstance(node.value, ast.Subscript)
                and isinstance(node.value.value, ast.Name) and isinstance(node.value.slice, ast.Constant)):
            found[node.targets[0].id] = (node.value.value.id, node.value.slice.value)
    return found


def _splat_field(call: ast.Call, aliases: dict[str, tuple[str, str]]) -> tuple[str, str] | None:
    """(kwargs variable, field) of ``**var["field"]`` (also inside ``**{**var["field"], ...}``
    or through a local ``x = var["field"]``)."""
    for keyword in call.keywords:
        if keyword.arg is not None:
            continue
        node = keyword.value
        if isinstance(node, ast.Name) and node.id in aliases:
            return aliases[node.id]
        if isinstance(node, ast.Dict):
            node = next((v for k, v in zip(node.keys, node.values) if k is None), node)
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and isinstance(node.slice, ast.Constant):
            return node.value.id, node.slice.value
    return None


def argparse_options(tree: ast.Module, options: Options, classes: dict, constants: dict) -> None:
    variables = kwargs_classes(tree)
    aliases = field_aliases(tree)
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and _name(node.func) in ("add_argument", "add_negatable_bool_argument")):
            continue
        keywords = {k.arg: k.value for k in node.keywords if k.arg}
        names = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        names += [keywords[k].value for k in ("flag_name", "alias") if isinstance(keywords.get(k), ast.Constant)]
        names = [n for n in names if n.startswith("-")]
        if not names:
            continue
        if _name(node.func) == "add_negatable_bool_argument":
            options.add_negatable(names)
            continue
        action = keywords.get("action")
        action_name = action.value if isinstance(action, ast.Constant) else _name(action) if action else ""
        choices = _constants(keywords.get("choices"), constants)
        nargs = keywords.get("nargs")
        splat = _splat_field(node, aliases)
        if action_name in ("store_true", "store_false", "store_const", "count", "version", "help") or (
                re.search(r"Store(True|False|Const)Action$", action_name) and choices is None):
            options.add(names, "switch")
        elif action_name == "BooleanOptionalAction":
            options.add_negatable(names)
        elif action_name == "EnableDisableAction":
            options.add_negatable(names + [n.replace("--enable-", "--disable-", 1) for n in names if n.startswith("--enable-")])
        elif isinstance(nargs, ast.Constant) and nargs.value in ("?", "+", "*"):
            options.add(names, "optional" if nargs.value == "?" else "list", choices)
        elif splat is not None and splat[0] in variables:
            kind, literal = kind_of_annotation(field_annotation(classes, variables[splat[0]], splat[1]), "negatable")
            if kind == "negatable":
                options.add_negatable(names)
            else:
                options.add(names, kind, choices or literal)
        else:
            options.add(names, "value", choices)


def frontend_options(classes: dict, class_names: tuple[str, ...], options: Options) -> None:
    """vLLM: every field of the frontend dataclasses is ``--field-name`` (get_kwargs kinds)."""
    for class_name in class_names:
        seen: list[str] = [class_name]
        while seen:
            name = seen.pop()
            bases, annotations = classes.get(name, ([], {}))
            for field_name, annotation in annotations.items():
                flag = "--" + field_name.replace("_", "-")
                kind, literal = kind_of_annotation(annotation, "negatable")
                if kind == "negatable":
                    options.add_negatable([flag])
                else:
                    options.add([flag], kind, literal)
            seen += bases


def annotated_options(tree: ast.Module, options: Options, constants: dict) -> None:
    """SGLang: ``name: A[type, "help" | Arg(...)]`` class fields."""
    for node in ast.walk(tree):
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                and isinstance(node.annotation, ast.Subscript) and _name(node.annotation.value) in ("A", "Annotated")):
            continue
        parts = node.annotation.slice.elts if isinstance(node.annotation.slice, ast.Tuple) else []
        if len(parts) < 2:
            continue
        kind_type, meta = parts[0], parts[1]
        arg = {k.arg: k.value for k in meta.keywords if k.arg} if isinstance(meta, ast.Call) else {}
        if isinstance(arg.get("no_cli"), ast.Constant) and arg["no_cli"].value is True:
            continue
        if not (isinstance(meta, ast.Constant) or (isinstance(meta, ast.Call) and _name(meta.func) == "Arg")):
            continue
        cli_name = arg["cli_name"].value if isinstance(arg.get("cli_name"), ast.Constant) else None
        names = [cli_name or "--" + node.target.id.replace("_", "-")] + (_constants(arg.get("aliases"), constants) or [])
        choices = _constants(arg.get("choices"), constants)
        if "action" in arg:
            nargs = arg.get("nargs")
            options.add(names, "list" if isinstance(nargs, ast.Constant) and nargs.value in ("+", "*") else "value",
                        choices)
            continue
        kind, literal = kind_of_annotation(kind_type, "switch")
        options.add(names, kind, choices or literal)


def click_options(tree: ast.Module, options: Options) -> None:
    """TensorRT-LLM: ``@click.option("--flag", ...)`` decorators of its commands."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef):
            continue
        for decorator in node.decorator_list:
            if not (isinstance(decorator, ast.Call) and _name(decorator.func) == "option"):
                continue
            keywords = {k.arg: k.value for k in decorator.keywords if k.arg}
            raw = [a.value for a in decorator.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            names = [part for name in raw for part in name.split("/") if part.startswith("-")]
            is_flag = isinstance(keywords.get("is_flag"), ast.Constant) and keywords["is_flag"].value is True
            choices = None
            kind_type = keywords.get("type")
            if isinstance(kind_type, ast.Call) and kind_type.args:
                choices = _constants(kind_type.args[0], {})
            options.add(names, "switch" if is_flag or any("/" in n for n in raw) else "value", choices)


def env_names(tree: ast.Module, prefix: str) -> list[str]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            found |= {k.value for k in node.keys if isinstance(k, ast.Constant) and str(k.value).startswith(prefix)}
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                targets = item.targets if isinstance(item, ast.Assign) else [item.target] if isinstance(item, ast.AnnAssign) else []
                found |= {t.id for t in targets if isinstance(t, ast.Name) and t.id.startswith(prefix)}
    return sorted(found)


# -- one engine ---------------------------------------------------------------------


def _files(root: Path, globs: tuple[str, ...]) -> list[Path]:
    paths = []
    for pattern in globs:
        matched = sorted(root.glob(pattern))
        if not matched:
            raise SystemExit(f"{root}: no file matches {pattern}")
        paths += matched
    return list(dict.fromkeys(paths))


def build(source: Source, root: Path) -> dict:
    option_paths = _files(root, source.option_files)
    type_paths = _files(root, source.type_globs) if source.type_globs else []
    trees = {path: ast.parse(path.read_text(encoding="utf-8")) for path in dict.fromkeys(option_paths + type_paths)}
    classes = class_fields(list(trees.values()))
    ALIASES.clear()
    ALIASES.update(type_aliases(list(trees.values())))
    constants = module_constants(list(trees.values()))
    options = Options()
    for path in option_paths:
        argparse_options(trees[path], options, classes, constants)
        annotated_options(trees[path], options, constants)
        click_options(trees[path], options)
    frontend_options(classes, source.frontend_classes, options)
    env = []
    used = list(trees)
    if source.env_file:
        env_path = root / source.env_file
        env = env_names(ast.parse(env_path.read_text(encoding="utf-8")), source.env_prefix)
        used.append(env_path)
    files = [{"path": str(path.relative_to(root)), "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
             for path in used]
    return {
        "engine": source.engine, "command": list(source.command),
        "provenance": {"origin": source.origin, "version": source.version, "files": files,
                       "built_by": "scripts/build_engine_flags.py (ast; nothing imported or run)"},
        "options": dict(sorted(options.kinds.items())), "env": env,
    }


def main(argv: list[str]) -> None:
    pairs = [arg.split("=", 1) for arg in argv]
    if not pairs or any(len(p) != 2 or p[0] not in SOURCES for p in pairs):
        raise SystemExit(f"usage: build_engine_flags.py ENGINE=SOURCE_ROOT ... (engines: {', '.join(SOURCES)})")
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    for engine, root in pairs:
        data = build(SOURCES[engine], Path(root))
        path = OUT_DIR / f"{engine}.json"
        path.write_text(json.dumps(data, indent=1, sort_keys=False) + "\n", encoding="utf-8")
        print(f"{path}: {len(data['options'])} options, {len(data['env'])} environment variables")


if __name__ == "__main__":
    main(sys.argv[1:])
