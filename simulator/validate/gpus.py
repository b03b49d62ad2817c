"""Published GPU labels -> the shipped topology and GPU to simulate."""

from __future__ import annotations

import re
from dataclasses import dataclass


# ----------------------------------------------------------------------------- GPUs
@dataclass(frozen=True, slots=True)
class GPUMapping:
    topology: str
    gpu: str | None = None  # catalog name overriding the topology's GPU
    inter_node: tuple[tuple[str, object], ...] = ()
    intra_node: tuple[tuple[str, object], ...] = ()
    note: str = ""


# Published GPU label (upper-cased, spaces removed) -> shipped topology (+ overrides).
GPU_LABELS: tuple[tuple[str, GPUMapping], ...] = (
    ("A100-SXM-80GB", GPUMapping("dgx-a100")),
    ("A100-SXM4-80GB", GPUMapping("dgx-a100")),
    ("A100-80GB", GPUMapping("dgx-a100")),
    ("A100-SXM-40GB", GPUMapping("dgx-a100-40gb")),
    ("A100-SXM4-40GB", GPUMapping("dgx-a100-40gb")),
    ("A100-40GB", GPUMapping("dgx-a100-40gb")),
    ("A100-PCIE-80GB", GPUMapping("pcie-a100")),
    ("H100-SXM-80GB", GPUMapping("dgx-h100")),
    ("H100-SXM5-80GB", GPUMapping("dgx-h100")),
    ("H100-80GB", GPUMapping("dgx-h100")),
    ("H100", GPUMapping("dgx-h100")),
    ("H200", GPUMapping("dgx-h200")),
    (
        "H800",
        GPUMapping(
            "dgx-h100",
            gpu="h800",
            intra_node=(("link_GBps_per_direction", 200),),
            note="H800: DGX H100 network with NVLink cut to 400 GB/s bidirectional",
        ),
    ),
    ("B200", GPUMapping("dgx-b200")),
    (
        "B300",
        GPUMapping(
            "dgx-b200",
            gpu="b300",
            inter_node=(("nic_Gbps", 800),),
            note="B300: DGX B200 topology with the B300 GPU and 8x800 Gb/s ConnectX-8 NICs",
        ),
    ),
    ("GB200", GPUMapping("gb200-nvl72")),
    (
        "GB300",
        GPUMapping(
            "gb200-nvl72",
            gpu="gb300",
            inter_node=(("nic_Gbps", 800),),
            note="GB300: NVL72 rack as GB200 with the GB300 GPU and 800 Gb/s ConnectX-8 NICs",
        ),
    ),
)
UNSUPPORTED_GPUS = (("TPU", "TPUs are not modeled (no TPU catalog entry or ICI topology)"),)
# Meta's Grand Teton H100: 96 GB HBM2e, power-capped at 500 W. Not in the catalog; simulated as
# H100-SXM (same SMs and tensor cores), which over-states its clocks: expect optimism.
GRAND_TETON = GPUMapping(
    "dgx-h100",
    note="H100-SXM-96GB HBM2e at 500 W (Grand Teton) simulated as H100-SXM 80GB: same die, but its "
    "lower power cap means lower sustained clocks, so the prediction is optimistic (not in the catalog)",
)


def gpu_mapping(label: str) -> GPUMapping | str:
    """Topology for a published GPU label, or the reason it is not modeled.

    Exact labels of the shipped CSV first, then a lenient reading of other spellings
    ("NVIDIA A100 80GB", "H100 SXM5", "GB200 NVL72"): the part number decides.
    """
    key = re.sub(r"[\s_]+", "", label.upper()).replace("NVIDIA", "")
    for needle, reason in UNSUPPORTED_GPUS:
        if needle in key:
            return reason
    if "H100" in key and ("GRANDTETON" in key or "96GB" in key):
        return GRAND_TETON
    for known, mapping in GPU_LABELS:
        if key == known:
            return mapping
    by_part = dict(GPU_LABELS)
    if "GB300" in key:
        return by_part["GB300"]
    if "GB200" in key:
        return by_part["GB200"]
    if "B300" in key:
        return by_part["B300"]
    if "B200" in key:
        return by_part["B200"]
    if "H800" in key:
        return by_part["H800"]
    if "H200" in key:
        return by_part["H200"]
    if "H100" in key:
        if "PCIE" in key or "NVL" in key:
            return f"GPU {label!r}: H100 PCIe/NVL parts (lower clocks and power) are not in the GPU catalog"
        return by_part["H100"]
    if "A100" in key:
        if "PCIE" in key:
            return by_part["A100-PCIE-80GB"]
        return by_part["A100-40GB"] if "40G" in key else by_part["A100-80GB"]
    return f"GPU {label!r} has no topology mapping (known: {', '.join(k for k, _ in GPU_LABELS)})"
