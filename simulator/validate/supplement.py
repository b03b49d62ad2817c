"""Settings a CSV row leaves empty that its authors published elsewhere (their launch scripts).

The data is simulator/catalog/published_configs.toml, one table per row id with the citation.
Only an empty cell is filled, and the row's notes say from where; a value the CSV gives always
wins (tests/test_validate.py checks that the shipped supplement never disagrees with the CSV).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import cache
from typing import Any

from ..resources import catalog_file
from .runs import PublishedRun

SUPPLEMENT_FILE = "published_configs.toml"
CELL_KEYS = ("micro_batch", "vp")  # CSV columns the supplement may fill
SETTING_KEYS = ("overlap_grad_reduce",)  # per-run stack settings (override the source default)


@dataclass(frozen=True, slots=True)
class Supplement:
    run_id: str
    source_match: str  # lower-case text that must occur in the row's source
    cells: tuple[tuple[str, str], ...]  # (column, value) pairs
    settings: tuple[tuple[str, Any], ...]
    cite: str


@cache
def supplements() -> dict[str, Supplement]:
    """The shipped supplement, by row id (read once)."""
    data = tomllib.loads(catalog_file(SUPPLEMENT_FILE).read_text(encoding="utf-8"))
    out: dict[str, Supplement] = {}
    for i, table in enumerate(data.get("run", [])):
        where = f"{SUPPLEMENT_FILE} run {i + 1} ({table.get('id', '?')!r})"
        unknown = set(table) - {"id", "source_match", "cite", *CELL_KEYS, *SETTING_KEYS}
        if unknown:
            raise ValueError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
        if not table.get("cite") or not table.get("source_match") or not table.get("id"):
            raise ValueError(f"{where}: id, source_match and cite are required")
        if table["id"] in out:
            raise ValueError(f"{where}: duplicate id")
        cells = tuple((k, str(int(table[k]))) for k in CELL_KEYS if k in table)
        settings = tuple((k, bool(table[k])) for k in SETTING_KEYS if k in table)
        out[table["id"]] = Supplement(
            table["id"], str(table["source_match"]).lower(), cells, settings, str(table["cite"])
        )
    return out


def supplement_for(run: PublishedRun) -> Supplement | None:
    found = supplements().get(run.run_id)
    if found is None or found.source_match not in run.source.lower():
        return None
    return found


def supplemented(run: PublishedRun, notes: list[str]) -> tuple[PublishedRun, dict[str, Any]]:
    """The row with its empty cells filled from the supplement, and the stack settings it names."""
    found = supplement_for(run)
    if found is None:
        return run, {}
    cells = dict(run.cells)
    for column, value in found.cells:
        if run.get(column):
            if run.get(column) != value:
                notes.append(f"{column}: the CSV's {run.get(column)} kept; {found.cite} gives {value}")
            continue
        cells[column] = value
        notes.append(f"{column}: not in the CSV -> {value} ({found.cite})")
    for key, setting in found.settings:
        notes.append(f"{key}: -> {str(setting).lower()} ({found.cite})")
    return PublishedRun(line=run.line, cells=cells), dict(found.settings)
