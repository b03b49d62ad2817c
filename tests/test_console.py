"""simulator.console: escaping, shortening, encodings, strict JSON (issue 18)."""

from __future__ import annotations

import io
import json
import math

import pytest

from simulator.console import ConsoleStream, escape_controls, one_line, safe_repr, shorten, strict_json


def test_escape_sequences_are_neutralized() -> None:
    evil = "name\x1b[2J\x1b]0;pwned\x07\x9b31m"
    out = escape_controls(evil)
    assert "\x1b" not in out and "\x07" not in out and "\x9b" not in out
    assert "\\x1b[2J" in out
    assert escape_controls("a\nb\tc\r") == "a\nb\tc\r"


def test_one_line_is_one_bounded_line() -> None:
    msg = one_line("bad value " + "x" * 1_000_000 + "\nsecond line\x1b[31m")
    assert "\n" not in msg and "\x1b" not in msg
    assert len(msg) < 450
    assert msg.startswith("bad value ") and "chars]" in msg


def test_shorten_keeps_both_ends() -> None:
    text = "head-" + "m" * 500 + "-tail"
    out = shorten(text, 80)
    assert len(out) <= 100 and out.startswith("head-") and out.endswith("-tail")
    assert shorten("short") == "short"


def test_safe_repr_of_deep_and_huge_values() -> None:
    deep: dict[str, object] = {}
    node = deep
    for _ in range(5000):
        node["a"] = {}
        node = node["a"]  # type: ignore[assignment]
    assert len(safe_repr(deep)) <= 100
    assert len(safe_repr("v" * 10**6)) <= 100


@pytest.mark.parametrize("encoding", ["ascii", "cp1252", "latin-1"])
def test_console_stream_never_loses_the_report(encoding: str) -> None:
    raw = io.TextIOWrapper(io.BytesIO(), encoding=encoding)
    stream = ConsoleStream(raw)
    stream.write("MFU(6Ψ) 50%  tp 8 · pp 2 — 3 × 4 ███ 漢\n")
    stream.flush()
    raw.seek(0)
    text = raw.read()
    assert "MFU(6" in text and "50%" in text and "tp 8" in text and "pp 2" in text
    if encoding == "ascii":
        assert "Psi" in text and "--" in text and "3 x 4" in text and "###" in text


def test_console_stream_utf8_unchanged_but_escapes_controls() -> None:
    raw = io.StringIO()
    ConsoleStream(raw).write("Ψ · — \x1b[31mred\n")
    assert raw.getvalue() == "Ψ · — \\x1b[31mred\n"


def test_strict_json_has_no_infinity() -> None:
    text = strict_json({"mfu": math.inf, "x": [math.nan, 1.5, (2, -math.inf)], "ok": True})
    assert json.loads(text) == {"mfu": None, "x": [None, 1.5, [2, None]], "ok": True}
    assert "Infinity" not in text and "NaN" not in text


def test_one_line_cuts_each_long_value() -> None:
    msg = one_line(f"f.toml: key 'model.name': must be short, got '{'v' * 5000}'; allowed: a, b")
    assert msg.startswith("f.toml: key 'model.name': must be short, got 'vvv")
    assert msg.endswith("; allowed: a, b") and len(msg) < 160


def test_one_line_keeps_prose_with_apostrophes() -> None:
    """An apostrophe in prose ("Megatron-Core's") is not the start of a quoted value: the
    sentence between it and the next quoted value stays whole."""
    text = (
        "f.toml: key 'parallel.ep_comm_overlap': Megatron-Core's EP all-to-all overlap runs a combined "
        '1F1B: schedule = "1f1b" with pp = 1, or "interleaved" (virtual pipeline), not \'1f1b\' with pp = 2'
    )
    assert one_line(text) == text
