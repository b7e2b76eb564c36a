"""The input layer (levers.inputs): one reader for every file, strict numbers, bounded
quotes, safe JSON/YAML, output paths checked before any work."""

import json
import os
import time

import pytest

from levers.errors import InputError
from levers.inputs import (
    MAX_DEPTH,
    bounded,
    check_number,
    check_output_dir,
    check_output_file,
    load_json,
    parse_json,
    parse_number,
    parse_yaml,
    quote,
    read_text,
)


def message(call, *args, **kwargs) -> str:
    with pytest.raises(InputError) as caught:
        call(*args, **kwargs)
    return caught.value.message


@pytest.mark.parametrize("text", ["١٢", "１２", "1_000", "nan", "inf", "-Infinity", "0x10", "", " ", "1e", "--1"])
def test_numbers_are_ascii_and_finite(text):
    assert "(accepted:" in message(parse_number, text, "--requests")


def test_numbers_in_range_and_whole():
    assert parse_number(" 12 ", "--n", integer=True, low=1, high=20) == 12
    assert parse_number("8.0", "--n", integer=True) == 8
    assert parse_number("2.5e3", "--x", low=0) == 2500.0
    assert "out of range (accepted: an integer from 1 to 10)" in message(parse_number, "11", "--n", integer=True,
                                                                          low=1, high=10)
    assert "is not a whole number" in message(check_number, 2.5, "--n", integer=True)
    assert "not a finite number" in message(check_number, float("nan"), "--x")
    assert "is not a number" in message(check_number, True, "--x")
    assert "out of range" in message(parse_number, "1e300", "isl", integer=True, low=1, high=1e7)
    # a value just outside is said as given, not rounded onto the bound
    assert "0.4999999 is out of range (accepted: a number from 0.5 to 0.9)" in message(
        parse_number, "0.4999999", "kv_memory_fraction", low=0.5, high=0.9)
    assert "1000000.4 is out of range" in message(parse_number, "1000000.4", "arrival_rate", high=1e6)


def test_an_integer_past_what_python_reads_is_out_of_range_not_a_crash():
    """Python refuses int() of over 4,300 digits (a ValueError that escaped as an internal
    error, exit 3); inline, in YAML and in JSON it is bad input, said in a bounded line."""
    huge = "9" * 4301
    text = message(parse_number, huge, "--concurrency", integer=True, low=1, high=65536)
    assert "out of range (accepted: an integer from 1 to 65,536)" in text and len(text) < 400
    assert "out of range" in message(parse_number, "1" + "0" * 40, "tp", integer=True, low=1)
    assert parse_number("0" * 50 + "8", "tp", integer=True) == 8          # leading zeros are not digits
    for parse, document in ((parse_yaml, f"tp: {huge}"), (parse_json, f'{{"tp": {huge}}}')):
        assert "holds an integer of more than 4,300 digits" in message(parse, document, "--config @f")
    # parsed integers past float's range or repr's limit (YAML hex and binary have no digit limit)
    for value in (10 ** 400, parse_yaml("x: 0x" + "f" * 4000, "f")["x"], parse_yaml("x: 0b1" + "0" * 5000, "f")["x"]):
        assert "out of range" in message(check_number, value, "concurrency", integer=True, low=1, high=65536)
        assert "digits>" in quote(value) and len(quote(value)) < 80
    from levers.configuration import parse_config_text

    for lever in ("tp", "replicas", "kv_memory_fraction"):     # a choice, a count, a fraction
        with pytest.raises(InputError, match=lever):
            parse_config_text(f"{lever}: 0x" + "f" * 4000)


def test_quotes_and_messages_are_bounded_and_clean():
    shown = quote("a\x1b[2J" * 10_000)
    assert len(shown) < 260 and "\x1b" not in shown and "characters)" in shown
    text = bounded("x" * 100_000 + " (accepted: a number)")
    assert len(text) < 1100 and text.endswith("(accepted: a number)")


def test_files_are_regular_bounded_and_utf8(tmp_path, monkeypatch):
    good = tmp_path / "good.txt"
    good.write_bytes(b"\xef\xbb\xbfhello \x1b[31mred\x07\n")
    assert read_text(good, "--trace") == "hello [31mred\n"
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"ok\xff\xfe")
    assert "is not UTF-8 text (byte 0xff at offset 2)" in message(read_text, bad, "--trace")
    utf16 = tmp_path / "utf16.txt"
    utf16.write_bytes("hi".encode("utf-16"))
    assert "UTF-16" in message(read_text, utf16, "--trace")
    assert "is a directory" in message(read_text, tmp_path, "--trace")
    assert "no such file" in message(read_text, tmp_path / "missing", "--trace")
    assert "not a regular file" in message(read_text, "/dev/zero", "--trace")
    big = tmp_path / "big.txt"
    big.write_bytes(b"x" * (2 * 1024 * 1024))
    monkeypatch.setenv("INFERASIM_MAX_INPUT_MB", "1")
    problem = message(read_text, big, "--trace")
    assert "over the 1 MB input limit" in problem and "INFERASIM_MAX_INPUT_MB" in problem
    monkeypatch.setenv("INFERASIM_MAX_INPUT_MB", "3")
    assert len(read_text(big, "--trace")) == 2 * 1024 * 1024


def test_json_refuses_constants_depth_and_cleans_strings(tmp_path):
    assert "NaN is not a JSON number" in message(parse_json, '{"a": NaN}', "ledger")
    assert "Infinity" in message(parse_json, '[Infinity]', "ledger")
    assert f"nests deeper than {MAX_DEPTH}" in message(parse_json, "[" * 100_000 + "]" * 100_000, "ledger")
    assert f"nests deeper than {MAX_DEPTH}" in message(parse_json, "[" * 80 + "]" * 80, "ledger")
    assert parse_json('{"k\\u001b": "v\\u009b[2J"}', "ledger") == {"k": "v[2J"}
    path = tmp_path / "doc.json"
    path.write_text(json.dumps({"a": [1, 2]}))
    assert load_json(path, "anchor file") == {"a": [1, 2]}
    # bulk records skip the document walk but keep the constants rule
    assert parse_json("[" * 80 + "]" * 80, "trace", document=False)
    assert "NaN" in message(parse_json, "[NaN]", "trace", document=False)


BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{b}: &{b} [{', '.join([f'*{a}'] * 9)}]\n" for a, b in zip("abcdefgh", "bcdefghi"))


def test_yaml_is_safe_and_bounded():
    started = time.perf_counter()
    problem = message(parse_yaml, BOMB, "models.yaml")
    assert "expands to more than" in problem and len(problem) < 300
    assert time.perf_counter() - started < 2.0
    assert "recursive alias" in message(parse_yaml, "a: &a [*a]", "models.yaml")
    assert "non-finite" in message(parse_yaml, "a: .inf", "models.yaml")
    assert "'tiers.fast.ttft_s' holds a non-finite number" in message(parse_yaml, "tiers: {fast: {ttft_s: .inf}}",
                                                                       "models.yaml")
    assert "'models[1].x' holds a non-finite number (nan)" in message(parse_yaml, "models: [{}, {x: .nan}]", "m.yaml")
    assert "malformed YAML" in message(parse_yaml, "a: !!python/object/apply:os.system [ls]", "models.yaml")
    assert "nests deeper" in message(parse_yaml, "[" * 10_000, "models.yaml")
    small = "base: &base {tp: 8}\nmodels:\n  - {name: a, candidates: [*base, *base]}\n"
    assert parse_yaml(small, "models.yaml")["models"][0]["candidates"] == [{"tp": 8}, {"tp": 8}]


def test_output_paths_are_checked_before_work(tmp_path):
    assert "is a directory" in message(check_output_file, tmp_path, "--csv")
    afile = tmp_path / "file"
    afile.write_text("x")
    assert "is a file, not a folder" in message(check_output_file, afile / "out.csv", "--csv")
    assert "is not a directory" in message(check_output_dir, afile, "--out")
    assert check_output_dir(tmp_path / "new" / "deep", "--out") == tmp_path / "new" / "deep"
    assert check_output_file(tmp_path / "new" / "x.json", "--out").name == "x.json"
    # the option is named before the file system refuses: empty, a folder for a file, too long
    assert message(check_output_dir, "", "--out").startswith("--out: is empty")
    assert "ends in a folder separator" in message(check_output_file, f"{tmp_path}/newdir/", "-o")
    long_name = message(check_output_dir, tmp_path / ("n" * 300), "--out")
    assert long_name.startswith("--out '") and "too long for a file system" in long_name and "255 bytes" in long_name
    assert "too long" in message(check_output_file, "/".join(["d" * 200] * 30), "--csv")
    if os.geteuid() != 0:  # root writes anywhere
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        assert "not writable" in message(check_output_file, locked / "x.json", "--out")
