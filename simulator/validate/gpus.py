"""Published GPU labels -> the shipped topology and GPU to simulate.

The table is data: simulator/catalog/gpu_labels.toml; the part-number reading of other
spellings is here.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from functools import cache
from typing import Any

from ..resources import catalog_file

LABELS_FILE = "gpu_labels.toml"


# ----------------------------------------------------------------------------- GPUs
@dataclass(frozen=True, slots=True)
class GPUMapping:
    topology: str
    gpu: str | None = None  # catalog name overriding the topology's GPU
    inter_node: tuple[tuple[str, object], ...] = ()
    intra_node: tuple[tuple[str, object], ...] = ()
    note: str = ""


@dataclass(frozen=True, slots=True)
class GPULabels:
    labels: tuple[tuple[str, GPUMapping], ...]  # exact label -> mapping
    parts: tuple[tuple[str, str], ...]  # (part number in the label, its entry in labels), in order
    unsupported: tuple[tuple[str, str], ...]  # (needle, reason)
    grand_teton_match: tuple[str, ...]
    grand_teton: GPUMapping


def _mapping(entry: dict[str, Any]) -> GPUMapping:
    return GPUMapping(
        entry["topology"],
        gpu=entry.get("gpu"),
        inter_node=tuple(entry.get("inter_node", {}).items()),
        intra_node=tuple(entry.get("intra_node", {}).items()),
        note=entry.get("note", ""),
    )


@cache
def gpu_labels() -> GPULabels:
    """The shipped label table, simulator/catalog/gpu_labels.toml (read once)."""
    data = tomllib.loads(catalog_file(LABELS_FILE).read_text(encoding="utf-8"))
    labels = tuple((k, _mapping(v)) for k, v in data["labels"].items())
    known = dict(labels)
    parts = tuple((p["needle"], p["label"]) for p in data["part"])
    for _, label in parts:
        if label not in known:
            raise ValueError(f"{LABELS_FILE}: part label {label!r} is not in [labels]")
    teton = data["grand_teton"]
    return GPULabels(
        labels=labels,
        parts=parts,
        unsupported=tuple((u["needle"], u["reason"]) for u in data["unsupported"]),
        grand_teton_match=tuple(teton["match"]),
        grand_teton=_mapping(teton),
    )


def gpu_mapping(label: str) -> GPUMapping | str:
    """Topology for a published GPU label, or the reason it is not modeled.

    Exact labels of the shipped CSV first, then a lenient reading of other spellings
    ("NVIDIA A100 80GB", "H100 SXM5", "GB200 NVL72"): the part number decides.
    """
    table = gpu_labels()
    key = re.sub(r"[\s_]+", "", label.upper()).replace("NVIDIA", "")
    for needle, reason in table.unsupported:
        if needle in key:
            return reason
    if "H100" in key and any(m in key for m in table.grand_teton_match):
        return table.grand_teton
    by_part = dict(table.labels)
    if key in by_part:
        return by_part[key]
    for needle, part_label in table.parts:
        if needle in key:
            return by_part[part_label]
    if "H100" in key:
        if "PCIE" in key or "NVL" in key:
            return f"GPU {label!r}: H100 PCIe/NVL parts (lower clocks and power) are not in the GPU catalog"
        return by_part["H100"]
    if "A100" in key:
        if "PCIE" in key:
            return by_part["A100-PCIE-80GB"]
        return by_part["A100-40GB"] if "40G" in key else by_part["A100-80GB"]
    return f"GPU {label!r} has no topology mapping (known: {', '.join(k for k, _ in table.labels)})"
