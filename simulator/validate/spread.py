"""Data that disagrees with itself, and the MoE accuracy table (issue 13).

The same published configuration (model, GPU, GPUs, split, batch, precision) is measured again in
later container releases, sometimes far faster (Qwen3-30B-A3B on 16 H100: 10,494 vs 5,275
tokens/s/GPU). Such groups are reported as the data's own spread -- an uncertainty no simulator
can beat -- and never fitted: the simulator is calibrated per GPU type, not per release.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from .cases import RowResult

SPREAD_RATIO = 1.2  # max/min measured above this: the data disagrees with itself
RELEASE = re.compile(r"^mbridge_(\d+)\.(\d+)(?:\.(\d+))?_")
MOE_FAMILIES = (
    ("DeepSeek-V3", re.compile(r"deepseek[-_ ]?v3", re.I)),
    ("Kimi-K2", re.compile(r"kimi[-_ ]?k2", re.I)),
    ("GPT-OSS-120B", re.compile(r"gpt[-_ ]?oss", re.I)),
    ("Qwen3-235B-A22B", re.compile(r"qwen3[-_ ]?235b", re.I)),
    ("Qwen3-30B-A3B", re.compile(r"qwen3[-_ ]?30b", re.I)),
    ("Mixtral", re.compile(r"mixtral", re.I)),
)


def moe_family(result: RowResult) -> str:
    name = str(result.case.scenario.get("model", {}).get("name", "")) + " " + result.case.run_id
    for family, pattern in MOE_FAMILIES:
        if pattern.search(name):
            return family
    return "other MoE"


def release(run_id: str) -> tuple[int, ...]:
    """The container release in a Megatron-Bridge row id (26.04.01 -> (26, 4, 1)); () if none."""
    m = RELEASE.match(run_id)
    return tuple(int(g) for g in m.groups() if g is not None) if m else ()


def config_key(result: RowResult) -> tuple[Any, ...]:
    """What makes two rows the same experiment for the simulator: the scenario it simulates
    (model without its display name, cluster, split, batch, precision) and the compared metric --
    everything but the software release and its MoE routing mode: a '(tokendrop)' row (padded to
    capacity, load_imbalance = 1) stays in its force-balanced configuration's group, as the
    release's launch recipe does. The split is the published one: a release's launch recipe (EP
    overlap, recompute modules) is part of the release, not of the configuration, so rows of
    different releases stay one group and their recipes are reported."""
    sc = result.case.scenario
    model = {k: v for k, v in sc.get("model", {}).items() if k != "name"}
    moe = {k: v for k, v in model.get("moe", {}).items() if k != "load_imbalance"}
    model = {k: v for k, v in model.items() if k != "moe"} | ({"moe": moe} if moe else {})
    parallel = result.case.published_parallel or sc.get("parallel", {})
    return (
        json.dumps(model, sort_keys=True),
        json.dumps(sc.get("cluster", {}), sort_keys=True),
        json.dumps(parallel, sort_keys=True),
        result.case.dtype,
        result.case.metric,
    )


def spread_groups(results: Iterable[RowResult], ratio: float = SPREAD_RATIO) -> list[dict[str, Any]]:
    """Groups of rows of one configuration whose measurements differ by more than `ratio`."""
    groups: dict[tuple[Any, ...], list[RowResult]] = defaultdict(list)
    for r in results:
        groups[config_key(r)].append(r)
    out = []
    for rows in groups.values():
        measured = [r.case.measured for r in rows]
        lo, hi = min(measured), max(measured)
        if len(rows) > 1 and lo > 0 and hi / lo > ratio:
            first = rows[0].case
            out.append(
                {
                    "model": str(first.scenario.get("model", {}).get("name", "")),
                    "gpu": first.gpu,
                    "num_gpus": first.scenario.get("cluster", {}).get("num_gpus"),
                    "rows": [r.case.run_id for r in sorted(rows, key=lambda r: r.case.measured)],
                    "measured_min": lo,
                    "measured_max": hi,
                    "ratio": hi / lo,
                    "predicted": rows[0].predicted,
                    "predicted_min": min(r.predicted for r in rows),
                    "predicted_max": max(r.predicted for r in rows),
                    "recipes": sorted({r.case.recipe_settings or "-" for r in rows}),
                }
            )
    return sorted(out, key=lambda g: -g["ratio"])


def newest_per_config(results: Iterable[RowResult]) -> list[RowResult]:
    """Each configuration's row from its latest release (rows without a release kept)."""
    best: dict[tuple[Any, ...], RowResult] = {}
    for r in results:
        key = config_key(r)
        if key not in best or release(r.case.run_id) > release(best[key].case.run_id):
            best[key] = r
    return list(best.values())


def best_constant_error_pct(measured: list[float]) -> float:
    """The least total |c/m − 1| (in %) any single prediction c reaches over measurements m: the
    minimum of a convex piecewise-linear function, at one of the measurements (a weighted median,
    weights 1/m)."""
    return 100.0 * min(sum(abs(c / m - 1.0) for m in measured) for c in measured)


def spread_floor_pct(rows: list[RowResult]) -> float:
    """The MAPE no simulator can go below on `rows`: rows that simulate the very same scenario (the
    same inputs after the release's launch recipe, so the same prediction, whatever the model) but
    were measured apart contribute the best a single prediction can do; every other row 0."""
    groups: dict[tuple[str, str], list[float]] = defaultdict(list)
    for r in rows:
        sc = {k: v for k, v in r.case.scenario.items() if k != "name"}
        groups[(json.dumps(sc, sort_keys=True, default=str), r.case.metric)].append(r.case.measured)
    total = sum(best_constant_error_pct(ms) for ms in groups.values() if len(ms) > 1)
    return total / len(rows) if rows else float("nan")


def _mape(rows: list[RowResult]) -> dict[str, Any]:
    errs = [abs(r.error_pct) for r in rows]
    return {
        "mape_pct": sum(errs) / len(errs) if errs else float("nan"),
        "rows": len(errs),
        "bias_pct": sum(r.error_pct for r in rows) / len(rows) if rows else float("nan"),
        "spread_floor_pct": spread_floor_pct(rows),
    }


def moe_summary(results: Iterable[RowResult]) -> dict[str, Any]:
    """MoE rows: MAPE overall and per family, over all rows and over each configuration's newest
    release, with the data-spread groups."""
    moe = [r for r in results if r.case.is_moe]
    newest = newest_per_config(moe)
    families = sorted({moe_family(r) for r in moe})
    return {
        "all": _mape(moe),
        "newest_release": _mape(newest),
        "by_family": {
            f: {
                "all": _mape([r for r in moe if moe_family(r) == f]),
                "newest_release": _mape([r for r in newest if moe_family(r) == f]),
            }
            for f in families
        },
        "data_spread": spread_groups(moe),
    }
