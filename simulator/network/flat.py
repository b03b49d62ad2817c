"""The flat α–β collective model (`--comm-model flat`): NCCL bus factors on the slowest link.

No topology graph and no contention; the reference the topology model (model.py) refines.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..specs import Scenario
from .interface import CollectiveCost, axis_sizes, bus_factor


@dataclass(frozen=True, slots=True)
class FlatCommModel:
    """α–β with NCCL bus factors on the slowest link a group uses; no contention.

    A group that fits in one node (placement TP innermost, then CP, DP, PP) runs at the
    per-GPU NVLink/PCIe bandwidth; one that spans nodes is limited by the per-GPU share of
    the node's NICs. Latency: ring, (n−1) steps (2(n−1) for AllReduce) of the link latency.
    """

    scenario: Scenario

    def group_size(self, axis: str) -> int:
        return axis_sizes(self.scenario)[axis]

    def _stride(self, axis: str) -> int:
        sizes = axis_sizes(self.scenario)
        if axis == "dp_shard":
            return self._stride("dp")
        if axis == "dp_replicate":
            return self._stride("dp") * sizes["dp_shard"]
        if axis == "edp":
            return self._stride("dp") * sizes["ep"]
        stride = 1
        for a in self.scenario.topology.rank_order:
            if a == axis:
                return stride
            stride *= sizes[a]
        return stride

    def _spans_nodes(self, axis: str, n: int) -> bool:
        return self._stride(axis) * n > self.scenario.topology.gpus_per_node

    def collective(self, kind: str, axis: str, message_bytes: float, stage: int = 0) -> CollectiveCost:
        topo = self.scenario.topology
        eff = self.scenario.gpu.efficiency.nccl_bw_fraction
        n = 2 if kind == "sendrecv" else self.group_size(axis)
        if n <= 1 or message_bytes <= 0:
            return CollectiveCost(0.0, "none", "", 0.0)
        inter = self._spans_nodes(axis, n) if kind != "sendrecv" else self._stride("pp") >= topo.gpus_per_node
        if inter:
            if kind == "sendrecv":  # one GPU's transfer uses its own rail's NIC
                nic_per_gpu = topo.nic_bandwidth_per_node_bytes_per_s / topo.gpus_per_node
            else:  # ring: every GPU of the node sends through the node's NICs at once
                nic_per_gpu = topo.nic_bandwidth_per_node_bytes_per_s / min(
                    topo.gpus_per_node, self._stride(axis)
                )
            bw = min(topo.intra_node.link_bandwidth_bytes_per_s, nic_per_gpu)
            latency = topo.inter_node.latency_s
            link = "nic"
        else:
            bw = topo.intra_node.link_bandwidth_bytes_per_s
            latency = topo.intra_node.latency_s
            link = topo.intra_node.fabric
        busbw = bw * eff
        steps = 2 * (n - 1) if kind == "allreduce" else (n - 1)
        if kind in ("sendrecv", "broadcast"):
            steps = 1
        t = steps * latency + bus_factor(kind, n) * message_bytes / busbw
        return CollectiveCost(t, "ring", link, busbw)
