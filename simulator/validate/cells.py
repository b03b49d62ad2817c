"""Published precision, recompute and ZeRO labels -> simulator values."""

from __future__ import annotations

import re


def parse_dtype(cell: str) -> str | None:
    """A published precision label -> simulated dtype ('' when not stated); None = not modeled."""
    text = cell.strip().lower()
    if not text:
        return ""
    if "nvfp4" in text:
        return "nvfp4"
    if "fp4" in text or "int8" in text or "int4" in text:
        return None
    if "mxfp8" in text or "fp8-mx" in text or "fp8_mx" in text:
        return "mxfp8"  # OCP microscaling: 1x32 blocks with E8M0 scales
    if "fp8" in text or "e4m3" in text:
        return "fp8"  # per-tensor scaling (delayed or current: "fp8-cs")
    if "bf16" in text or "bfloat16" in text:
        return "bf16"
    if "fp16" in text or "float16" in text or "half" in text:
        return "fp16"
    if "fp32" in text or "tf32" in text:
        return None
    return None


def parse_recompute(cell: str) -> str | None:
    """none | selective | full ('' when not stated); None = not understood."""
    text = cell.strip().lower()
    if not text:
        return ""
    if text in ("none", "no", "false", "0", "off"):
        return "none"
    if "selective" in text or "attention" in text:
        return "selective"
    if text in ("full", "yes", "true", "1", "on") or "full" in text or "uniform" in text or "block" in text:
        return "full"
    return None


def parse_zero(cell: str) -> int | None:
    """ZeRO stage of a zero_or_dist_opt cell (-1 when not stated); None = not understood."""
    text = re.sub(r"[^a-z0-9]", "", cell.lower())
    if not text:
        return -1
    table = {
        "none": 0,
        "no": 0,
        "ddp": 0,
        "0": 0,
        "zero0": 0,
        "zero1": 1,
        "1": 1,
        "distopt": 1,
        "distributedoptimizer": 1,
        "distributedadam": 1,
        "zero2": 2,
        "2": 2,
        "shardgradop": 2,
        "fsdpshardgradop": 2,
        "zero3": 3,
        "3": 3,
        "fsdp": 3,
        "fullshard": 3,
        "fsdpfullshard": 3,
        "hsdp": 3,
        "hybridshard": 3,
    }
    return table.get(text)
