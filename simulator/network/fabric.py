"""The physical cluster of a TopologySpec: nodes, NICs (rails), leaf groups, spines, bandwidths.

Everything here is arithmetic on the spec, O(1) per question, so it scales to any cluster size;
`graph.py` turns the same structure into an explicit networkx graph for inspection and tests,
and `route()` gives the path a byte takes between two GPUs without building anything.

Fabric (SPEC §2):
- a node holds `gpus_per_node` GPUs on an NVSwitch (all-to-all, `link_GBps_per_direction` per GPU)
  or on a PCIe switch (same number, per GPU link to the switch);
- GPU `l` of a node uses NIC `l * rails // gpus_per_node` (one NIC per GPU on a DGX; a PCIe
  server with one NIC shares it among all its GPUs);
- `nodes_per_leaf` consecutive nodes form a scalable unit (SU). Rail-optimized: NIC `q` of every
  node of an SU plugs into the SU's leaf of rail `q` (DGX SuperPOD RA-10046 / RA-11333);
  fat-tree: all NICs of an SU plug into one logical leaf;
- a leaf's uplinks to the spine carry `downlinks / oversubscription` bytes/s (1.0 = non-blocking);
  the spine itself is non-blocking (the leaf uplinks are the narrow waist of a two-level Clos).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..specs import TopologySpec

# Switch radix used only to *count* spine switches for `mfusim topo` (the model works on the
# aggregate leaf uplink bandwidth): NVIDIA Quantum QM8700/QM8790 HDR = 40 ports (<= 200 Gb/s
# NICs), Quantum-2 QM9700 NDR = 64 ports (faster NICs). Source: the switches' datasheets.
HDR_SWITCH_PORTS = 40
NDR_SWITCH_PORTS = 64


@dataclass(frozen=True, slots=True)
class Fabric:
    """A TopologySpec instantiated for `num_gpus` GPUs (rank r lives on GPU r)."""

    topology: TopologySpec
    num_gpus: int

    # ------------------------------------------------------------------ sizes
    @property
    def gpus_per_node(self) -> int:
        return self.topology.gpus_per_node

    @property
    def num_nodes(self) -> int:
        return -(-self.num_gpus // self.gpus_per_node)

    @property
    def rail_optimized(self) -> bool:
        return self.topology.inter_node.fabric == "rail-optimized"

    @property
    def num_rails(self) -> int:
        """NICs a node's GPUs actually use (more NICs than GPUs are pooled, see nic_bandwidth)."""
        return max(1, min(self.topology.inter_node.nics_per_node, self.gpus_per_node))

    @property
    def nodes_per_leaf(self) -> int:
        return self.topology.inter_node.nodes_per_leaf

    @property
    def num_scalable_units(self) -> int:
        return -(-self.num_nodes // self.nodes_per_leaf)

    @property
    def leaves_per_unit(self) -> int:
        """Logical leaf switches per scalable unit: one per rail, or one for a plain fat tree."""
        return self.num_rails if self.rail_optimized else 1

    @property
    def num_leaves(self) -> int:
        return self.num_scalable_units * self.leaves_per_unit

    # ------------------------------------------------------------------ bandwidths (bytes/s, one direction)
    @property
    def intra_bandwidth_bytes_per_s(self) -> float:
        return self.topology.intra_node.link_bandwidth_bytes_per_s

    @property
    def nic_bandwidth_bytes_per_s(self) -> float:
        """One used NIC (rail); NICs beyond one per GPU are pooled into the GPUs' rails."""
        inter = self.topology.inter_node
        return inter.nics_per_node * inter.nic_bandwidth_bytes_per_s / self.num_rails

    @property
    def node_nic_bandwidth_bytes_per_s(self) -> float:
        return self.topology.nic_bandwidth_per_node_bytes_per_s

    @property
    def leaf_downlink_bytes_per_s(self) -> float:
        """What the nodes of one SU can push into one logical leaf."""
        per_node = self.nic_bandwidth_bytes_per_s * (1 if self.rail_optimized else self.num_rails)
        return self.nodes_per_leaf * per_node

    @property
    def leaf_uplink_bytes_per_s(self) -> float:
        """Leaf -> spine capacity of one logical leaf: downlinks / oversubscription."""
        return self.leaf_downlink_bytes_per_s / self.topology.inter_node.oversubscription

    @property
    def bisection_bytes_per_s(self) -> float:
        """One direction across the worst half/half cut of the cluster's nodes.

        Limited by the NICs of half the nodes, and — once the cut must separate scalable
        units — by the leaf uplinks of half the SUs (full-bisection Clos when oversubscription=1).
        """
        if self.num_nodes < 2:
            return 0.0
        half_nodes = self.num_nodes // 2
        nic_limit = half_nodes * self.node_nic_bandwidth_bytes_per_s
        if self.num_scalable_units < 2:
            return nic_limit
        # the cut runs through the spine: whole SUs on either side (a partial SU counts pro rata)
        units_on_one_side = half_nodes / self.nodes_per_leaf
        uplink_limit = units_on_one_side * self.leaves_per_unit * self.leaf_uplink_bytes_per_s
        return min(nic_limit, uplink_limit)

    # ------------------------------------------------------------------ counts for `mfusim topo`
    @property
    def switch_ports(self) -> int:
        nic_gbps = self.topology.inter_node.nic_bandwidth_bytes_per_s * 8 / 1e9
        return HDR_SWITCH_PORTS if nic_gbps <= 200 else NDR_SWITCH_PORTS

    @property
    def num_spines(self) -> int:
        """Spine switches of a two-level Clos: the leaves' uplink ports / switch radix."""
        if self.num_scalable_units < 2:
            return 0
        uplink_ports = (
            self.num_leaves
            * self.leaf_uplink_bytes_per_s
            / self.topology.inter_node.nic_bandwidth_bytes_per_s
        )
        return max(1, math.ceil(uplink_ports / self.switch_ports))

    # ------------------------------------------------------------------ placement of hardware
    def node_of(self, gpu: int) -> int:
        return gpu // self.gpus_per_node

    def local_of(self, gpu: int) -> int:
        return gpu % self.gpus_per_node

    def nic_of_local(self, local: int) -> int:
        return local * self.num_rails // self.gpus_per_node

    def nic_of(self, gpu: int) -> int:
        return self.nic_of_local(gpu % self.gpus_per_node)

    def unit_of_node(self, node: int) -> int:
        return node // self.nodes_per_leaf

    def leaf_rail_of_local(self, local: int) -> int:
        """Index of the leaf (within its SU) that this GPU's NIC plugs into."""
        return self.nic_of_local(local) if self.rail_optimized else 0

    # ------------------------------------------------------------------ names shared with graph.py
    @staticmethod
    def gpu_name(gpu: int) -> str:
        return f"gpu{gpu}"

    @staticmethod
    def switch_name(node: int) -> str:
        return f"node{node}/switch"

    @staticmethod
    def nic_name(node: int, nic: int) -> str:
        return f"node{node}/nic{nic}"

    def leaf_name(self, node: int, nic: int) -> str:
        rail = nic if self.rail_optimized else 0
        return f"su{self.unit_of_node(node)}/leaf{rail}"

    @staticmethod
    def spine_name() -> str:
        return "spine"

    def route(self, src_gpu: int, dst_gpu: int) -> list[tuple[str, str]]:
        """The links a byte crosses from `src_gpu` to `dst_gpu` (the graph's shortest path).

        Same node: GPU -> switch -> GPU. Otherwise GPU -> its NIC -> leaf [-> spine -> leaf]
        -> NIC -> GPU; the spine is crossed between SUs, and on a rail-optimized fabric also
        between different rails (NCCL's PXN avoids that by first hopping over NVLink to the
        GPU on the destination's rail; we cost collectives rail-aligned, see collectives.py).
        """
        if src_gpu == dst_gpu:
            return []
        a, b = self.node_of(src_gpu), self.node_of(dst_gpu)
        if a == b:
            sw = self.switch_name(a)
            return [(self.gpu_name(src_gpu), sw), (sw, self.gpu_name(dst_gpu))]
        nic_a, nic_b = self.nic_of(src_gpu), self.nic_of(dst_gpu)
        leaf_a, leaf_b = self.leaf_name(a, nic_a), self.leaf_name(b, nic_b)
        path = [
            (self.gpu_name(src_gpu), self.nic_name(a, nic_a)),
            (self.nic_name(a, nic_a), leaf_a),
        ]
        if leaf_a != leaf_b:
            path += [(leaf_a, self.spine_name()), (self.spine_name(), leaf_b)]
        path += [(leaf_b, self.nic_name(b, nic_b)), (self.nic_name(b, nic_b), self.gpu_name(dst_gpu))]
        return path

    def scope(self, gpus: list[int] | range) -> str:
        """'node', 'leaf' (one scalable unit) or 'spine': the widest level these GPUs span."""
        if len(gpus) == 0:
            return "node"
        lo, hi = min(gpus), max(gpus)
        if self.node_of(lo) == self.node_of(hi):
            return "node"
        if self.unit_of_node(self.node_of(lo)) == self.unit_of_node(self.node_of(hi)):
            return "leaf"
        return "spine"
