"""Megatron-Bridge MoE launch recipes: the settings a published row ran with that its table does
not show (simulator/catalog/mbridge_recipes.toml, issue 13). An entry applies only to a row whose
own layout equals the recipe's exactly; everything else keeps the source defaults."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from ..resources import catalog_file
from ..specs import RECOMPUTE_MODULES

RECIPES_FILE = "mbridge_recipes.toml"
LAYOUT_KEYS = ("tp", "pp", "vp", "ep", "micro_batch", "global_batch")


@dataclass(frozen=True, slots=True)
class Recipe:
    name: str
    model: str  # regular expression on the row's model name (lower case)
    containers: str  # prefix of the row id after "mbridge_"
    gpu: str  # the CSV's GPU label
    dtype: str  # the simulated dtype
    layout: tuple[tuple[str, int], ...]
    ep_comm_overlap: bool
    recompute_modules: tuple[str, ...]
    fused_grouped_mlp: bool = False  # cutedsl_fused_grouped_mlp -> [kernels] fused_grouped_mlp


def _recipe(table: Mapping[str, Any]) -> Recipe:
    where = f"{RECIPES_FILE} recipe {table.get('name')!r}"
    layout = table.get("layout", {})
    if sorted(layout) != sorted(LAYOUT_KEYS):
        raise ValueError(f"{where}: layout needs exactly {', '.join(LAYOUT_KEYS)}")
    modules = tuple(table.get("recompute_modules", ()))
    unknown = [m for m in modules if m not in RECOMPUTE_MODULES]
    if unknown:
        raise ValueError(f"{where}: unknown recompute module(s) {unknown}")
    return Recipe(
        name=table["name"],
        model=table["model"],
        containers=table["containers"],
        gpu=table["gpu"],
        dtype=table["dtype"],
        layout=tuple((k, int(layout[k])) for k in LAYOUT_KEYS),
        ep_comm_overlap=bool(table["ep_comm_overlap"]),
        recompute_modules=modules,
        fused_grouped_mlp=bool(table.get("fused_grouped_mlp", False)),
    )


@cache
def recipes() -> tuple[Recipe, ...]:
    data = tomllib.loads(catalog_file(RECIPES_FILE).read_text(encoding="utf-8"))
    return tuple(_recipe(t) for t in data.get("recipe", ()))


def matching_recipe(
    run_id: str, model_name: str, gpu: str, dtype: str, layout: Mapping[str, int]
) -> Recipe | None:
    """The recipe whose GPU, dtype and whole layout equal this row's, if any."""
    rid = run_id.lower()
    for r in recipes():
        if not rid.startswith(f"mbridge_{r.containers}"):
            continue
        if r.gpu != gpu or r.dtype != dtype or not re.search(r.model, model_name.lower()):
            continue
        if all(layout.get(k) == v for k, v in r.layout):
            return r
    return None
