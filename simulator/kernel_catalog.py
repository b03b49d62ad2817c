"""simulator/catalog/kernels.toml as data: the parsed file and the GPU -> architecture map.

Shared by the kernel model (simulator/kernels.py) and the collective model's default comm model
(simulator/network/model.py, NCCL's bandwidth-ramp window), which must not import each other.
"""

from __future__ import annotations

import tomllib
from functools import lru_cache
from typing import Any

from .resources import catalog_file


@lru_cache(maxsize=1)
def kernel_data() -> dict[str, Any]:
    """simulator/catalog/kernels.toml, parsed once (read-only)."""
    with open(catalog_file("kernels.toml"), "rb") as fh:
        return tomllib.load(fh)


def architecture(gpu_name: str) -> str:
    arch = kernel_data()["architectures"].get(gpu_name)
    if arch is None:
        return "hopper"  # a GPU defined by a user's topology file: Hopper-class kernels
    return str(arch)


def ring_window_bytes(gpu_name: str) -> float:
    """NCCL's ring bandwidth-ramp window of the GPU's architecture ([model.<arch>]
    nccl_ring_window_bytes, fitted by benchmarks/fit_kernels.py); 0 if absent."""
    table = kernel_data()["model"].get(architecture(gpu_name), {})
    return float(table.get("nccl_ring_window_bytes", 0.0))


def reduce_tail_chunks(gpu_name: str) -> float:
    """Chunk-times S/n an all-reduce ring adds beyond its pipeline fill ([model.<arch>]
    nccl_reduce_tail_chunks; reduce-scatter carries none, network/collectives.py); 0 if absent."""
    table = kernel_data()["model"].get(architecture(gpu_name), {})
    return float(table.get("nccl_reduce_tail_chunks", 0.0))


def nic_bw_fraction(arch: str) -> float:
    """The fraction of NIC line rate NCCL's rings reach on `arch` ([model.<arch>] nic_bw_fraction,
    not fitted: nccl-tests over InfiniBand)."""
    return float(kernel_data()["model"][arch]["nic_bw_fraction"])


def nccl_latency_table() -> dict[str, Any]:
    """NCCL's tuning-model latencies ([nccl_latency], µs; NVIDIA/nccl src/graph/tuning.cc), as
    written; simulator/network/collectives.py NcclLatency.of converts them."""
    return dict(kernel_data()["nccl_latency"])
