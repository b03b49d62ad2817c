"""Collective-communication cost: the interface the workload costing uses.

A `CommModel` answers "how long does this collective of this many bytes take for the
group of parallel axis `axis` that pipeline stage `stage` belongs to". The engine never
calls it: the costing step (simulator/program.py) does, before simulation, so a
better network model plugs in without touching the engine.

Message-size convention (nccl-tests): `message_bytes` is the full buffer S — the AllReduce
buffer, the AllGather *output*, the ReduceScatter *input*, the All-to-All buffer per rank.
Bus factors (NCCL docs, "Performance" / nccl-tests PERFORMANCE.md):
AllReduce 2(n−1)/n, AllGather and ReduceScatter (n−1)/n, All-to-All (n−1)/n, Broadcast 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ..specs import Scenario

KINDS = ("allreduce", "allgather", "reducescatter", "alltoall", "broadcast", "sendrecv")


def bus_factor(kind: str, n: int) -> float:
    """Bytes each rank must move per byte of message, for a bandwidth-optimal algorithm."""
    if n <= 1:
        return 0.0
    if kind == "allreduce":
        return 2.0 * (n - 1) / n
    if kind in ("allgather", "reducescatter", "alltoall"):
        return (n - 1) / n
    if kind in ("broadcast", "sendrecv"):
        return 1.0
    raise ValueError(f"unknown collective kind {kind!r}")


@dataclass(frozen=True, slots=True)
class CollectiveCost:
    time_s: float
    algorithm: str = "ring"
    bottleneck: str = ""
    bus_bandwidth_bytes_per_s: float = 0.0


class CommModel(Protocol):
    def collective(self, kind: str, axis: str, message_bytes: float, stage: int = 0) -> CollectiveCost:
        """Time of one collective on the `axis` group ('tp','cp','dp','ep') of pipeline `stage`;
        for axis 'pp' and kind 'sendrecv', the transfer from `stage` to `stage + 1`."""
        ...

    def group_size(self, axis: str) -> int: ...


def axis_sizes(scn: Scenario) -> dict[str, int]:
    par = scn.parallel
    return {
        "tp": par.tp,
        "cp": par.cp,
        "dp": par.dp,
        "ep": par.ep,
        "pp": par.pp,
        "dp_shard": par.shard_size,  # HSDP shard group: consecutive dp ranks
        "dp_replicate": par.dp_replicas,  # the same shard position of every shard group
        # expert-data-parallel: the same position of every EP group (placement.py)
        "edp": par.dp // par.ep if par.dp % par.ep == 0 else 1,
    }
