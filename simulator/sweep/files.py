"""The sweep's output file: rows appended line by line (CSV or JSON Lines), read back for --resume."""

from __future__ import annotations

import csv
import io
import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from ..console import sanitize_json
from ..errors import ConfigError
from .columns import COLUMNS, STATUSES


# ----------------------------------------------------------------------------- output files
def _is_jsonl(path: Path) -> bool:
    return path.suffix.lower() in (".jsonl", ".ndjson")


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else ""
    return str(value)


class RowWriter:
    """Appends rows to the output file, one complete line at a time, flushed."""

    def __init__(self, fh: TextIO, jsonl: bool) -> None:
        self._fh = fh
        self._jsonl = jsonl
        self._buf = io.StringIO()
        self._csv = csv.writer(self._buf, lineterminator="\n")

    def header(self) -> None:
        if not self._jsonl:
            self._csv.writerow(COLUMNS)
            self._emit()

    def write(self, rows: Iterable[Mapping[str, Any]]) -> None:
        for row in rows:
            if self._jsonl:
                self._buf.write(json.dumps({c: sanitize_json(row.get(c)) for c in COLUMNS}) + "\n")
            else:
                self._csv.writerow([_cell(row.get(c)) for c in COLUMNS])
        self._emit()

    def _emit(self) -> None:
        # one write() of whole lines, then flush: a kill leaves at most one partial last line
        self._fh.write(self._buf.getvalue())
        self._fh.flush()
        self._buf.seek(0)
        self._buf.truncate()


TEXT_COLUMNS = frozenset(("status", "reason", "schedule", "recompute", "engine"))


def _parse_cell(column: str, text: str) -> Any:
    """A CSV cell back to the Python value whose str() it is; otherwise the text itself.

    Only exact round trips are parsed, so a row's key (the str() of its configuration cells)
    is the same read back as when it was written, whatever a user put in the [sweep] table.
    """
    if column in TEXT_COLUMNS:
        return text
    if text in ("True", "False"):
        return text == "True"
    for conv in (int, float):
        try:
            value = conv(text)
        except ValueError:
            continue
        if str(value) == text:
            return value
    return text


def _coerce(row: Mapping[str, Any]) -> dict[str, Any]:
    """A row read back from a file, with numbers and booleans as Python values."""
    out: dict[str, Any] = {}
    for c in COLUMNS:
        v = row.get(c)
        if v is None or v == "":
            out[c] = "" if c == "reason" else None
        elif isinstance(v, str):
            out[c] = _parse_cell(c, v)
        else:
            out[c] = v  # JSON Lines: already typed
    return out


def read_existing(path: Path) -> list[dict[str, Any]]:
    """Rows of a previous run of this sweep; cuts a truncated last line off the file.

    Only whole lines are kept: everything after the last newline (a row being written when
    the sweep was killed) is removed — after the file has been recognized as ours. A header
    (CSV) or a line (JSON Lines) that differs from ours is an error, so a file written by
    something else is neither truncated nor appended to.
    """
    if not path.exists() or path.stat().st_size == 0:
        return []
    raw = path.read_bytes()
    cut = raw.rfind(b"\n") + 1
    text = raw[:cut].decode("utf-8", errors="replace")
    tail = raw[cut:].decode("utf-8", errors="replace")
    lines = [line for line in text.split("\n")[:-1] if line.strip()]
    foreign = ConfigError(
        f"{path} was not written by this version of `mfusim sweep` (its columns differ); "
        "remove it or give another --out",
        key="--resume",
    )
    rows: list[dict[str, Any]] = []
    header_line = ",".join(COLUMNS)
    if _is_jsonl(path):
        if not lines and not ("{" + json.dumps(COLUMNS[0])).startswith(tail[: len(COLUMNS[0]) + 3]):
            raise foreign
        for line in lines:
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                raise foreign from None
            if not isinstance(obj, dict) or tuple(obj) != COLUMNS:
                raise foreign
            if obj.get("status") in STATUSES:
                rows.append(_coerce(obj))
    elif not lines:
        if not header_line.startswith(tail):  # not even a partial header of ours
            raise foreign
    else:
        if lines[0] != header_line:
            raise foreign
        for rec in csv.reader(lines[1:]):
            if len(rec) != len(COLUMNS):
                continue
            row = dict(zip(COLUMNS, rec, strict=True))
            if row["status"] in STATUSES:
                rows.append(_coerce(row))
    if cut < len(raw):
        with open(path, "r+b") as fh:
            fh.truncate(cut)
    return rows


def rewrite_atomically(path: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    """Replace the output file by `rows` (write a temporary file, then rename over it)."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, "w", encoding="utf-8", newline="") as fh:
        writer = RowWriter(fh, _is_jsonl(path))
        writer.header()
        writer.write(rows)
        os.fsync(fh.fileno())
    os.replace(tmp, path)
