"""The sweep's output file: rows appended line by line (CSV or JSON Lines), read back for --resume."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import IO, Any

from ..console import sanitize_json
from ..errors import ConfigError
from ..loading import check_regular_file
from ..outputs import atomic_output
from ..specs import Scenario
from .columns import (
    COLUMNS,
    FINGERPRINT_COLUMN,
    NUMERIC_COLUMNS,
    OPTIONAL_NUMERIC_COLUMNS,
    STATUS_INVALID,
    STATUSES,
)


# ----------------------------------------------------------------------------- output files
def _is_jsonl(path: Path) -> bool:
    return path.suffix.lower() in (".jsonl", ".ndjson")


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):  # as TOML, --set and docs/reference.md spell them (not "True")
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else ""
    return str(value)


class RowWriter:
    """Appends rows to the output file, one complete line at a time, flushed."""

    def __init__(self, fh: IO[str], jsonl: bool, fingerprint: str | None = None) -> None:
        self._fh = fh
        self._jsonl = jsonl
        self._fingerprint = fingerprint
        self._buf = io.StringIO()
        self._csv = csv.writer(self._buf, lineterminator="\n")

    def header(self) -> None:
        if not self._jsonl:
            self._csv.writerow(COLUMNS)
            self._emit()

    def write(self, rows: Iterable[Mapping[str, Any]]) -> None:
        for row in rows:
            if self._fingerprint is not None:
                row = {**row, FINGERPRINT_COLUMN: self._fingerprint}
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


TEXT_COLUMNS = frozenset(("status", "reason", "schedule", "recompute", "engine", FINGERPRINT_COLUMN))


def _parse_cell(column: str, text: str) -> Any:
    """A CSV cell back to the Python value whose str() it is; otherwise the text itself.

    Only exact round trips are parsed, so a row's key (the str() of its configuration cells)
    is the same read back as when it was written, whatever a user put in the [sweep] table.
    """
    if column in TEXT_COLUMNS:
        return text
    if text in ("true", "false", "True", "False"):  # True/False: files written before booleans were lowercase
        return text in ("true", "True")
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


def scenario_fingerprint(scn: Scenario) -> str:
    """A short hash of everything in `scn` that a sweep row's numbers depend on, except what the
    row itself records (its parallel configuration and GPU count): model, hardware, topology,
    calibrated efficiencies, precision, dataloader, variability, kernels — plus the mfusim
    version. Two scenario files that simulate the same give the same fingerprint."""
    from .. import __version__

    content = asdict(replace(scn, name="", source="", sweep=()))
    for key in ("parallel", "num_gpus", "name", "source", "sweep", "run"):
        content.pop(key, None)
    content["recompute_modules"] = list(scn.parallel.recompute_modules)  # no row column of its own
    if scn.parallel.pipeline_layout:  # neither (kept out when empty: earlier files keep their print)
        content["pipeline_layout"] = list(scn.parallel.pipeline_layout)
    text = json.dumps([__version__, content], sort_keys=True, default=repr)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:FINGERPRINT_CHARS]


FINGERPRINT_CHARS = 16
_HEX = frozenset("0123456789abcdef")


def _is_fingerprint(text: object) -> bool:
    return isinstance(text, str) and len(text) == FINGERPRINT_CHARS and set(text) <= _HEX


@dataclass(frozen=True, slots=True)
class ExistingRows:
    """What --resume found in the output file: the usable rows, and what it dropped."""

    rows: list[dict[str, Any]]
    dropped: int = 0  # unreadable lines and rows with impossible numbers (re-evaluated)
    torn_tail: bool = False  # a partial last line (the sweep was killed while writing it)

    @property
    def clean(self) -> bool:
        return not self.dropped and not self.torn_tail


def _number_problem(row: Mapping[str, Any]) -> str | None:
    """Why the numbers of an ok/infeasible row cannot be a simulation's, or None."""
    if row.get("status") == STATUS_INVALID:
        return None if row.get("reason") else "an invalid row without a reason"
    for c in NUMERIC_COLUMNS:
        v = row.get(c)
        if v is None and c in OPTIONAL_NUMERIC_COLUMNS:
            continue  # no [run] table: no plan; not checked by the engine: no closed_form_mfu
        if isinstance(v, bool) or not isinstance(v, int | float):
            return f"{c} is not a number"
        if not math.isfinite(v) or v < 0:
            return f"{c} = {v}"
    if row["step_time_s"] <= 0 or row["tokens_per_s"] <= 0:
        return "step time or tokens/s not positive"
    for c in ("mfu", "hfu"):
        if not 0 < row[c] <= 1:
            return f"{c} = {row[c]} is not in (0, 1]"
    return None


def read_existing(path: Path, fingerprint: str | None = None) -> ExistingRows:
    """The rows of a previous run of this sweep in `path`, for --resume.

    The file must be ours: the header (CSV) or every line's keys (JSON Lines) must be this
    version's columns, and every row's fingerprint this scenario's (`scenario_fingerprint`);
    otherwise a ConfigError names the file and nothing is touched. Within our file, lines that
    cannot be read (a torn last line, garbage, NUL bytes) and rows with impossible numbers
    (non-finite, negative, MFU above 1, text) are dropped, so the caller re-evaluates those
    configurations and rewrites the file clean.
    """
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return ExistingRows([])
    if size == 0:
        return ExistingRows([])
    check_regular_file(path, "sweep output", key="--out")
    raw = path.read_bytes()
    cut = raw.rfind(b"\n") + 1
    torn = cut < len(raw)
    text = raw[:cut].decode("utf-8", errors="replace")
    tail = raw[cut:].decode("utf-8", errors="replace")
    lines = [line for line in text.split("\n")[:-1] if line.strip()]
    foreign = ConfigError(
        f"{path} was not written by this version of `mfusim sweep` (its columns differ); "
        "remove it or give another --out",
        key="--resume",
    )
    candidates: list[dict[str, Any]] = []
    dropped = 0
    header_line = ",".join(COLUMNS)
    if _is_jsonl(path):
        if not lines and not ("{" + json.dumps(COLUMNS[0])).startswith(tail[: len(COLUMNS[0]) + 3]):
            raise foreign
        for line in lines:
            try:
                obj = json.loads(line)
            except (json.JSONDecodeError, RecursionError):
                obj = None
            if not isinstance(obj, dict) or tuple(obj) != COLUMNS:
                dropped += 1
                continue
            candidates.append(obj)
        if lines and not candidates:
            raise foreign  # not one line is a row of ours
    elif not lines:
        if not header_line.startswith(tail):  # not even a partial header of ours
            raise foreign
    else:
        if lines[0] != header_line:
            raise foreign
        for line in lines[1:]:
            try:
                recs = list(csv.reader([line]))
            except csv.Error:
                recs = []
            if len(recs) != 1 or len(recs[0]) != len(COLUMNS) or "\x00" in line:
                dropped += 1
                continue
            candidates.append(dict(zip(COLUMNS, recs[0], strict=True)))
    rows: list[dict[str, Any]] = []
    for cand in candidates:
        mark = cand.get(FINGERPRINT_COLUMN)
        if fingerprint is not None and _is_fingerprint(mark) and mark != fingerprint:
            raise ConfigError(
                f"{path} holds the results of another scenario (fingerprint {mark}; this scenario "
                f"and mfusim version give {fingerprint}): its rows cannot be reused; remove it or give "
                "another --out",
                key="--resume",
            )
        row = _coerce(cand)
        if not _is_fingerprint(mark) or row.get("status") not in STATUSES or _number_problem(row) is not None:
            dropped += 1
            continue
        rows.append(row)
    return ExistingRows(rows, dropped, torn)


def rewrite_atomically(path: Path, rows: Sequence[Mapping[str, Any]], fingerprint: str | None = None) -> None:
    """Replace the output file by `rows` (a temporary file renamed over it)."""
    with atomic_output(path, "--out", newline="") as fh:
        writer = RowWriter(fh, _is_jsonl(path), fingerprint)
        writer.header()
        writer.write(rows)
