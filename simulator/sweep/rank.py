"""Ranking the feasible rows of a sweep."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from .columns import STATUS_OK


def _rank_value(row: Mapping[str, Any], rank_by: str) -> float:
    v = row.get(rank_by)
    return float(v) if isinstance(v, int | float) else -math.inf


def rank_rows(rows: Iterable[Mapping[str, Any]], rank_by: str) -> list[dict[str, Any]]:
    ok = [dict(r) for r in rows if r.get("status") == STATUS_OK and r.get(rank_by) is not None]
    ok.sort(key=lambda r: -_rank_value(r, rank_by))  # stable: ties keep sweep order
    return ok
