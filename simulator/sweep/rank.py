"""Ranking the feasible rows of a sweep."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from .. import argcheck
from ..plan import RANK_KEYS
from .columns import STATUS_OK


def _rank_value(row: Mapping[str, Any], rank_by: str) -> float:
    """Higher is better: `--rank-by` mfu | tokens_per_s | time_to_train | cost (simulator/plan.py)."""
    column, higher_is_better = RANK_KEYS.get(rank_by, (rank_by, True))
    v = row.get(column)
    if not isinstance(v, int | float) or isinstance(v, bool):
        return -math.inf
    return float(v) if higher_is_better else -float(v)


def rank_rows(rows: Iterable[Mapping[str, Any]], rank_by: str) -> list[dict[str, Any]]:
    """The ok rows, best first by `rank_by` (a key of plan.RANK_KEYS; anything else is a
    ValueError: ranking by an unknown column would silently give an empty or reversed list)."""
    argcheck.one_of("rank_by", rank_by, tuple(RANK_KEYS))
    ok = [dict(r) for r in rows if r.get("status") == STATUS_OK and _rank_value(r, rank_by) > -math.inf]
    ok.sort(key=lambda r: -_rank_value(r, rank_by))  # stable: ties keep sweep order
    return ok
