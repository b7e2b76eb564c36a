"""The one input layer: every file and every number a user (or a file, or an LLM) hands
the product comes through here (PRODUCT.md §6).

Files: :func:`read_text` is the one reader. It refuses what is not a regular file, reads
at most the stated size limit (:data:`DEFAULT_MAX_INPUT_MB`, override with
``$INFERASIM_MAX_INPUT_MB`` or per call), decodes strict UTF-8 (a BOM is dropped; any
other encoding is an error naming the file, the offending byte and the encoding
expected) and drops control characters that no text format needs. :func:`parse_json` and
:func:`parse_yaml` parse on top of it with a nesting limit (:data:`MAX_DEPTH`), no
``NaN``/``Infinity`` constants, and for YAML the safe loader with limits on aliases and
on the size the document would expand to (an alias bomb is refused before it is built).

Numbers: :func:`parse_number` accepts ASCII digits only (``int()`` would take Arabic-Indic
digits and ``1_000``), finite values only, inside a stated range; :func:`check_number`
does the same for a value a parser already produced (JSON, YAML, a CLI option).

Output: :func:`check_output_file` and :func:`check_output_dir` run before any work, so a
bad ``--out`` fails in a second rather than after the search it was meant to save.

Errors quote at most :data:`QUOTE_CHARS` characters of the offending input
(:func:`quote`), with control characters removed. This module sits in the bottom layer,
beside :class:`InputError`, because every layer reads user input — the levers
themselves parse values from ``--config`` and from the LLM.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
import tempfile
from pathlib import Path
from typing import Any

from levers.errors import InputError

DEFAULT_MAX_INPUT_MB = 256
MAX_INPUT_ENV = "INFERASIM_MAX_INPUT_MB"
MAX_DEPTH = 64                  # nesting of JSON/YAML documents (ledgers nest ~5 deep)
MAX_YAML_ALIASES = 100
MAX_YAML_NODES = 200_000        # nodes the document expands to, aliases counted as copies
QUOTE_CHARS = 200
BYTES_PER_MB = 1024 * 1024

# C0 controls but tab/newline/carriage return, DEL, C1 controls, and the bidirectional
# overrides that make a terminal show text in another order than it is stored.
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_CONTROL_OR_CR = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?", re.ASCII)
_INTEGER = re.compile(r"[+-]?\d+", re.ASCII)
MAX_NAME_BYTES, MAX_PATH_BYTES = 255, 4095   # Linux's NAME_MAX and PATH_MAX less its terminator
MAX_INTEGER_DIGITS = 30      # no lever or option counts past this; longer text is out of range, not read
MAX_INTEGER_BITS = 100       # 2**100 > 1e30: a parsed integer past it is out of range (as 30 digits of text)
TOO_MANY_DIGITS = "integer string conversion"   # Python's ValueError past 4,300 digits (JSON, YAML)


# --- text ------------------------------------------------------------------------------

def strip_controls(text: str) -> str:
    """``text`` without control characters (newlines and tabs kept)."""
    return _CONTROL.sub("", text)


def quote(value: Any, limit: int = QUOTE_CHARS) -> str:
    """``'value'`` for an error message: one line, no control characters, at most
    ``limit`` characters of the input (the rest is counted, not echoed)."""
    is_text = isinstance(value, str)
    if isinstance(value, int) and value.bit_length() > MAX_INTEGER_BITS:   # repr() refuses past 4,300 digits
        raw = f"<an integer of about {int(value.bit_length() * math.log10(2)):,} digits>"
    else:
        raw = value if is_text else repr(value)
    text = _CONTROL_OR_CR.sub(" ", raw[: limit * 4]).replace("\n", " ")
    if len(text) > limit:
        return f"'{text[:limit]}...' ({len(raw):,} characters)" if is_text else f"{text[:limit]}... ({len(raw):,} characters)"
    return f"'{text}'" if is_text else text


def bounded(message: str, limit: int = 5 * QUOTE_CHARS) -> str:
    """A whole message on one line, control characters removed, at most ~``limit``
    characters: the head and the tail (where "accepted: ..." is) are kept."""
    text = _CONTROL_OR_CR.sub(" ", message if len(message) <= 4 * limit else
                              message[: 2 * limit] + message[-2 * limit:]).replace("\n", " ")
    if len(text) <= limit:
        return text
    tail = limit // 3
    return f"{text[: limit - tail]} ... {text[-tail:]}"


# --- numbers ---------------------------------------------------------------------------

def _range_text(low: float | None, high: float | None, integer: bool) -> str:
    kind = "an integer" if integer else "a number"
    if low is not None and high is not None:
        return f"{kind} from {_show(low)} to {_show(high)}"
    if low is not None:
        return f"{kind} >= {_show(low)}"
    if high is not None:
        return f"{kind} <= {_show(high)}"
    return f"a finite {'integer' if integer else 'number'}"


def _show(value: float) -> str:
    """A number as given: a whole one with separators, another at full precision
    (``:g`` rounded 0.4999999 to 0.5 in "0.5 is out of range (0.5 to 0.9)")."""
    return f"{int(value):,}" if float(value).is_integer() and abs(value) < 1e18 else repr(float(value))


def parse_number(text: Any, what: str, *, integer: bool = False, low: float | None = None,
                 high: float | None = None) -> int | float:
    """A number from text: ASCII digits, finite, in ``[low, high]`` (module docstring)."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return check_number(text, what, integer=integer, low=low, high=high)
    raw = str(text).strip() if text is not None else ""
    accepted = _range_text(low, high, integer)
    if not raw.isascii() or not (_INTEGER if integer else _NUMBER).fullmatch(raw):
        if integer and raw.isascii() and _NUMBER.fullmatch(raw) and float(raw).is_integer():
            return check_number(float(raw), what, integer=True, low=low, high=high)
        raise InputError(what, f"{quote(raw)} is not {'an integer' if integer else 'a number'}", accepted)
    if integer and len(raw.lstrip("+-").lstrip("0")) > MAX_INTEGER_DIGITS:   # Python reads at most 4,300
        raise InputError(what, f"{quote(raw)} is out of range", accepted)
    value = int(raw) if integer else float(raw)
    return check_number(value, what, integer=integer, low=low, high=high)


def is_number(value: Any) -> bool:
    """A number as JSON or YAML gives it (a boolean is not one)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_number(value: Any, what: str, *, integer: bool = False, low: float | None = None,
                 high: float | None = None) -> int | float:
    """``value`` if it is a finite (whole, for ``integer``) number in ``[low, high]``."""
    accepted = _range_text(low, high, integer)
    if not is_number(value):
        raise InputError(what, f"{quote(value)} is not a number", accepted)
    if isinstance(value, int) and value.bit_length() > MAX_INTEGER_BITS:   # YAML / JSON ints: float() overflows
        raise InputError(what, f"an integer of more than {MAX_INTEGER_DIGITS} digits is out of range", accepted)
    if isinstance(value, float) and not math.isfinite(value):
        raise InputError(what, f"{value} is not a finite number", accepted)
    if integer and isinstance(value, float):
        if not value.is_integer():
            raise InputError(what, f"{value:g} is not a whole number", accepted)
        value = int(value)
    if (low is not None and value < low) or (high is not None and value > high):
        shown = _show(value) if abs(value) < 1e18 else f"{float(value):.3g}"
        raise InputError(what, f"{shown} is out of range", accepted)
    return value


# --- files -----------------------------------------------------------------------------

def max_input_bytes() -> int:
    """The size limit of one input file (``$INFERASIM_MAX_INPUT_MB``, default 256 MB)."""
    raw = os.environ.get(MAX_INPUT_ENV, "").strip()
    if not raw:
        return DEFAULT_MAX_INPUT_MB * BYTES_PER_MB
    megabytes = parse_number(raw, f"${MAX_INPUT_ENV}", low=1, high=1_000_000)
    return int(megabytes * BYTES_PER_MB)


def check_input_file(path: str | Path, what: str, *, max_bytes: int | None = None,
                     expected: str = "a file") -> int:
    """Refuse what is missing, not a regular file (a folder, device, pipe: /dev/zero would
    never end) or over the size limit; the file's size in bytes otherwise. For readers
    that stream a file themselves; :func:`read_text` calls it too."""
    file = Path(path)
    limit = max_input_bytes() if max_bytes is None else max_bytes
    name = f"{what} {quote(str(file))}" if what else quote(str(file))
    try:
        info = file.stat()
    except FileNotFoundError:
        raise InputError(name, "cannot be read (no such file)", expected) from None
    except OSError as error:
        raise InputError(name, f"cannot be read ({error.strerror or error})", expected) from None
    if stat.S_ISDIR(info.st_mode):
        raise InputError(name, "is a directory", expected)
    if not stat.S_ISREG(info.st_mode):
        raise InputError(name, "is not a regular file (a device, pipe or socket)", expected)
    if info.st_size > limit:
        raise InputError(name, f"is {info.st_size / BYTES_PER_MB:,.1f} MB, over the {limit / BYTES_PER_MB:,.0f} MB "
                         "input limit", f"a smaller file, or raise the limit with ${MAX_INPUT_ENV}=MB")
    return info.st_size


def read_bytes(path: str | Path, what: str, *, max_bytes: int | None = None, expected: str = "a file") -> bytes:
    """The bytes of a regular file, at most ``max_bytes`` (default :func:`max_input_bytes`)."""
    file = Path(path)
    limit = max_input_bytes() if max_bytes is None else max_bytes
    name = f"{what} {quote(str(file))}" if what else quote(str(file))
    check_input_file(file, what, max_bytes=limit, expected=expected)
    try:
        with file.open("rb") as handle:
            data = handle.read(limit + 1)
    except OSError as error:
        raise InputError(name, f"cannot be read ({error.strerror or error})", expected) from None
    if len(data) > limit:
        raise InputError(name, f"grew past the {limit / BYTES_PER_MB:,.0f} MB input limit while being read",
                         f"a smaller file, or raise the limit with ${MAX_INPUT_ENV}=MB")
    return data


def decode_text(data: bytes, name: str, expected: str = "UTF-8 text") -> str:
    """Strict UTF-8 (BOM dropped), control characters removed; a clear error otherwise."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise InputError(name, "is UTF-16 text, not UTF-8", f"{expected} (UTF-8 encoded: save it as UTF-8)")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        byte = data[error.start:error.start + 1].hex()
        raise InputError(name, f"is not UTF-8 text (byte 0x{byte} at offset {error.start:,})",
                         f"{expected} (UTF-8 encoded)") from None
    return strip_controls(text) if _CONTROL.search(text) else text


def read_text(path: str | Path, what: str, *, max_bytes: int | None = None, expected: str = "a UTF-8 text file") -> str:
    """The one file reader (module docstring): bounded, regular, UTF-8, no controls."""
    name = f"{what} {quote(str(path))}" if what else quote(str(path))
    return decode_text(read_bytes(path, what, max_bytes=max_bytes, expected=expected), name, expected)


# --- JSON ------------------------------------------------------------------------------

def _integer_limit(error: ValueError, what: str, expected: str) -> InputError | None:
    """Python's refusal of an integer past 4,300 digits (JSON and YAML readers) as bad
    input; None for another ValueError."""
    if TOO_MANY_DIGITS not in str(error):
        return None
    return InputError(what, "holds an integer of more than 4,300 digits", expected)


def comma_items(text: str, what: str, accepted: str) -> list[str]:
    """The stripped items of a comma list; an empty item (',' or 'a,,b') is refused, not
    dropped (`pareto --modes ','` swept every point to say none was in no mode)."""
    items = [item.strip() for item in text.split(",")]
    if not all(items):
        raise InputError(what, f"{quote(text)} holds an empty item", f"a comma list of {accepted}")
    return items


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def parse_json(text: str, what: str, *, expected: str = "a JSON document", document: bool = True) -> Any:
    """JSON text to Python, never NaN/Infinity. A ``document`` (ledger, anchor, card:
    small files a person may read back) is also held to :data:`MAX_DEPTH` and has the
    control characters of its strings removed (:func:`clean_document`); bulk records
    (traces) skip that walk, their fixed-shape schemas bound them instead."""
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as error:
        raise InputError(what, f"is not valid JSON (line {error.lineno}, column {error.colno}: {error.msg})",
                         expected) from None
    except ValueError as error:  # NaN / Infinity, or an integer of over 4,300 digits
        raise _integer_limit(error, what, expected) or InputError(
            what, f"is not valid JSON ({bounded(str(error))})", expected) from None
    except RecursionError:
        raise InputError(what, f"nests deeper than {MAX_DEPTH} levels", expected) from None
    return clean_document(value, what, expected) if document else value


def load_json(path: str | Path, what: str, *, expected: str = "a JSON file", max_bytes: int | None = None,
              document: bool = True) -> Any:
    """Read (bounded, UTF-8) and parse a JSON file (:func:`parse_json`)."""
    name = f"{what} {quote(str(path))}" if what else quote(str(path))
    text = read_text(path, what, max_bytes=max_bytes, expected=expected)
    return parse_json(text, name, expected=expected, document=document)


def clean_document(value: Any, what: str, expected: str = "") -> Any:
    """``value`` with control characters removed from every string (keys too), refused
    when it nests deeper than :data:`MAX_DEPTH` or holds a non-finite number (YAML's
    ``.inf``). Depth is checked first, so rebuilding it cannot recurse too far."""
    check_depth(value, what, MAX_DEPTH, expected)
    return _cleaned(value, what, expected)


def _cleaned(value: Any, what: str, expected: str, path: str = "") -> Any:
    """``path``: where ``value`` sits (``tiers.realtime.ttft_s``, ``models[0]``), named when refused."""
    if isinstance(value, str):
        return strip_controls(value) if _CONTROL.search(value) else value
    if isinstance(value, float) and not math.isfinite(value):
        where = f"{quote(path)} " if path else ""
        raise InputError(what, f"{where}holds a non-finite number ({value})", expected or "finite numbers")
    if isinstance(value, dict):
        return {_cleaned(key, what, expected, path): _cleaned(item, what, expected, _key_path(path, key))
                for key, item in value.items()}
    if isinstance(value, list):
        return [_cleaned(item, what, expected, f"{path}[{i}]") for i, item in enumerate(value)]
    return value


def _key_path(path: str, key: Any) -> str:
    name = strip_controls(str(key))[:40]
    return f"{path}.{name}" if path else name


def check_depth(value: Any, what: str, max_depth: int = MAX_DEPTH, expected: str = "") -> None:
    """Refuse a document nested deeper than ``max_depth`` (iterative: no recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        for child in children:
            if isinstance(child, (dict, list)):
                if depth + 1 > max_depth:
                    raise InputError(what, f"nests deeper than {max_depth} levels", expected or "a shallower document")
                stack.append((child, depth + 1))


# --- YAML ------------------------------------------------------------------------------

def parse_yaml(text: str, what: str, *, expected: str = "a YAML document") -> Any:
    """YAML text to Python with the safe loader, bounded aliases, expansion and depth."""
    import yaml  # here: only models.yaml needs it, and the bottom layer stays light

    loader = yaml.SafeLoader(text)
    try:
        try:
            node = loader.get_single_node()
        except RecursionError:
            raise InputError(what, f"nests deeper than {MAX_DEPTH} levels", expected) from None
        if node is None:
            return None
        _check_yaml_node(node, what, expected)
        try:
            document = loader.construct_document(node)
        except ValueError as error:         # the int constructor, past 4,300 digits
            found = _integer_limit(error, what, expected)
            if found is None:
                raise
            raise found from None
        return clean_document(document, what, expected)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(error, "problem", None) or "cannot parse"
        raise InputError(what, f"malformed YAML{where}: {bounded(str(problem))}", expected) from None
    finally:
        loader.dispose()


def _check_yaml_node(root: Any, what: str, expected: str) -> None:
    """Expanded size (an alias counts as a full copy), alias count and depth."""
    import yaml

    sizes: dict[int, int] = {}
    seen_as_child: dict[int, int] = {}
    aliases = 0
    # Post-order walk without recursion: (node, depth, children expanded?)
    stack: list[tuple[Any, int, bool]] = [(root, 1, False)]
    visiting: set[int] = set()
    while stack:
        node, depth, expanded = stack.pop()
        key = id(node)
        if depth > MAX_DEPTH:
            raise InputError(what, f"nests deeper than {MAX_DEPTH} levels", expected)
        children = _yaml_children(node, yaml)
        if expanded:
            visiting.discard(key)
            sizes[key] = 1 + sum(sizes[id(child)] for child in children)
            if sizes[key] > MAX_YAML_NODES:
                raise InputError(what, f"expands to more than {MAX_YAML_NODES:,} nodes (aliases counted as copies)",
                                 f"{expected} without an alias bomb")
            continue
        if key in sizes:
            continue
        if key in visiting:
            raise InputError(what, "has a recursive alias", expected)
        visiting.add(key)
        stack.append((node, depth, True))
        if isinstance(node, yaml.MappingNode):
            _check_unique_keys(node, what, expected, yaml)
        for child in children:
            seen_as_child[id(child)] = seen_as_child.get(id(child), 0) + 1
            if seen_as_child[id(child)] > 1:
                aliases += 1
                if aliases > MAX_YAML_ALIASES:
                    raise InputError(what, f"uses more than {MAX_YAML_ALIASES} aliases", expected)
            if id(child) not in sizes:
                stack.append((child, depth + 1, False))


def _check_unique_keys(node: Any, what: str, expected: str, yaml: Any) -> None:
    """A mapping names each key once: YAML loaders keep the last of two silently, so
    ``tp: 8`` then ``tp: 4`` would price tp=4 without a word (``<<`` merges may repeat)."""
    seen: set[str] = set()
    for key, _ in node.value:
        if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
            if key.value in seen:
                raise InputError(what, f"repeats the key {quote(key.value)} at line {key.start_mark.line + 1}",
                                 f"{expected} with each key once")
            seen.add(key.value)


def _yaml_children(node: Any, yaml: Any) -> list:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def load_yaml(path: str | Path, what: str, *, expected: str = "a YAML file", max_bytes: int | None = None) -> Any:
    """Read (bounded, UTF-8) and parse a YAML file with the safe, bounded loader."""
    name = f"{what} {quote(str(path))}" if what else quote(str(path))
    return parse_yaml(read_text(path, what, max_bytes=max_bytes, expected=expected), name, expected=expected)


# --- output paths ----------------------------------------------------------------------

def _nearest_existing(path: Path) -> Path:
    current = path
    while not current.exists():
        if current.parent == current:
            break
        current = current.parent
    return current


def _check_path_text(path: str | Path, what: str, accepted: str, *, file: bool) -> None:
    """An empty path, a file path ending in a folder separator, and names longer than the
    file system takes are refused with the option's name (an empty --out wrote into the
    working directory, 'newdir/' wrote a file named newdir, and a 300-character name
    failed later as a bare "File name too long")."""
    text = str(path)
    if not text.strip():
        raise InputError(what, "is empty", accepted)
    if file and text.endswith(("/", os.sep)):
        raise InputError(f"{what} {quote(text)}", "ends in a folder separator", accepted)
    longest = max((len(os.fsencode(part)) for part in Path(text).parts), default=0)
    if longest > MAX_NAME_BYTES or len(os.fsencode(text)) > MAX_PATH_BYTES:
        raise InputError(f"{what} {quote(text)}", "is too long for a file system",
                         f"{accepted}, each name at most {MAX_NAME_BYTES} bytes")


def check_output_file(path: str | Path, what: str) -> Path:
    """A file we may create or replace: not a directory, its folder creatable and writable."""
    _check_path_text(path, what, "a file path (its folder is created if missing)", file=True)
    target = Path(path).expanduser()
    name = f"{what} {quote(str(target))}"
    if target.is_dir():
        raise InputError(name, "is a directory", "a file path (its folder is created if missing)")
    if target.exists() and not target.is_file():
        raise InputError(name, "is not a regular file", "a file path")
    if target.exists() and not os.access(target, os.W_OK):
        raise InputError(name, "is not writable", "a file path you may write")
    _check_folder(target.parent, name)
    return target


def check_output_dir(path: str | Path, what: str) -> Path:
    """A folder we may create or write into."""
    _check_path_text(path, what, "a folder path (created if missing)", file=False)
    target = Path(path).expanduser()
    name = f"{what} {quote(str(target))}"
    if target.exists() and not target.is_dir():
        raise InputError(name, "exists and is not a directory", "a folder path (created if missing)")
    _check_folder(target, name)
    return target


def _check_folder(folder: Path, name: str) -> None:
    existing = _nearest_existing(folder if str(folder) else Path("."))
    if not existing.is_dir():
        raise InputError(name, f"cannot be created: {quote(str(existing))} is a file, not a folder",
                         "a path under a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise InputError(name, f"cannot be written: {quote(str(existing))} is not writable",
                         "a path under a folder you may write")
    try:        # permissions are not the whole story (/proc, a read-only mount): try, leave nothing
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as error:
        raise InputError(name, f"cannot be written under {quote(str(existing))} "
                               f"({error.strerror or type(error).__name__})",
                         "a path under a folder you may write") from None
