"""Reading a published-runs CSV into PublishedRun rows."""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError
from ..loading import read_user_text
from .columns import FLOAT_COLUMNS, INT_COLUMNS, MAX_CSV_BYTES, MEASURED_COLUMNS, REQUIRED_COLUMNS


# ----------------------------------------------------------------------------- reading
@dataclass(frozen=True, slots=True)
class PublishedRun:
    """One CSV row, as published (the cells are strings; empty = not given)."""

    line: int
    cells: Mapping[str, str]

    def get(self, column: str) -> str:
        return (self.cells.get(column) or "").strip()

    @property
    def run_id(self) -> str:
        return self.get("id") or f"line-{self.line}"

    @property
    def source(self) -> str:
        return self.get("source")

    @property
    def gpu(self) -> str:
        return self.get("gpu")

    def int_cell(self, column: str) -> int | None:
        text = self.get(column)
        return None if not text else int(float(text))

    def float_cell(self, column: str) -> float | None:
        text = self.get(column)
        return None if not text else float(text)


def _is_number(text: str, finite_only: bool = True) -> bool:
    try:
        value = float(text)
    except ValueError:
        return False
    return math.isfinite(value) or not finite_only


def read_runs_csv(path: str | Path) -> list[PublishedRun]:
    """Parse a published-runs CSV; any defect of the file is a ConfigError naming it."""
    name = str(path)
    text = read_user_text(path, "CSV", MAX_CSV_BYTES, encoding="utf-8-sig")
    try:
        reader = csv.DictReader(io.StringIO(text, newline=""))
        header = [h.strip() for h in (reader.fieldnames or [])]
        missing = [c for c in REQUIRED_COLUMNS if c not in header]
        if missing:
            raise ConfigError(
                f"missing column(s) {', '.join(missing)} (docs/reference.md, CSV files)", file=name
            )
        if not any(c in header for c in MEASURED_COLUMNS):
            raise ConfigError(
                f"no measurement column; expected one of {', '.join(MEASURED_COLUMNS)}", file=name
            )
        runs = []
        for row in reader:
            line = reader.line_num
            cells = {(k or "").strip(): (v if isinstance(v, str) else "") for k, v in row.items()}
            if not any(v.strip() for v in cells.values()):
                continue  # blank line
            run = PublishedRun(line=line, cells=cells)
            for column in INT_COLUMNS + FLOAT_COLUMNS:
                value = run.get(column)
                # a non-finite measurement is a number, just an impossible one: that row is listed
                # as unusable (build_case), the rest of the file still counts
                finite_only = column not in MEASURED_COLUMNS
                if value and not _is_number(value, finite_only=finite_only):
                    raise ConfigError(
                        f"line {line} (id {run.run_id!r}): column {column!r} must be a number, got {value!r}",
                        file=name,
                    )
            for column in INT_COLUMNS:
                value = run.get(column)
                if value and (float(value) != int(float(value)) or float(value) < 0):
                    raise ConfigError(
                        f"line {line} (id {run.run_id!r}): column {column!r} must be a non-negative integer, got {value!r}",
                        file=name,
                    )
            runs.append(run)
    except csv.Error as exc:
        raise ConfigError(f"malformed CSV: {exc}", file=name) from None
    if not runs:
        raise ConfigError("no data rows", file=name)
    return runs
