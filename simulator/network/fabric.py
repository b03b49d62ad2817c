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

from ..errors import ConfigError
from ..specs import TopologySpec

# Default switch radix by NIC speed (the switches' datasheets): NVIDIA Quantum QM8700/QM8790
# HDR = 40 ports (<= 200 Gb/s NICs), Quantum-2 QM9700 NDR = 64 ports (<= 400 Gb/s), Quantum-X800
# Q3400 XDR = 144 ports (800 Gb/s). It sets how many tiers a cluster needs and counts switches.
HDR_SWITCH_PORTS = 40
NDR_SWITCH_PORTS = 64
XDR_SWITCH_PORTS = 144
TIER_NAMES = ("leaf", "spine", "core", "super-core", "tier-5")


def clos_capacity_ports(radix: int, tiers: int) -> int:
    """End ports a non-blocking folded Clos (fat tree) of `tiers` switch levels can connect:
    k for one switch, k²/2 for two tiers, k³/4 for three, 2·(k/2)^t in general (Al-Fares et al.
    2008, "A scalable, commodity data center network architecture", §3)."""
    if tiers <= 1:
        return radix
    return 2 * (radix // 2) ** tiers


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
        """One leaf per rail in each scalable unit (rail-optimized, and rail-only)."""
        return self.topology.inter_node.fabric in ("rail-optimized", "rail-only")

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
        out = min(nic_limit, uplink_limit)
        if self.num_tiers >= 3 and self.num_pods > 1:  # and through the core: whole pods
            rails = self.num_rails if self.rail_optimized else 1
            out = min(out, half_nodes / self.nodes_per_pod * rails * self.pod_uplink_bytes_per_s)
        return out

    # ------------------------------------------------------------------ tiers
    @property
    def rail_only(self) -> bool:
        """Rail-only (Wang et al. 2023, "How to build low-cost networks for LLM training"): one
        network per rail and none between rails; cross-rail traffic first hops over NVLink to
        the GPU on the destination's rail (NCCL's PXN)."""
        return self.topology.inter_node.fabric == "rail-only"

    @property
    def switch_ports(self) -> int:
        """Ports per switch of one plane: the radix given, or the NIC speed's InfiniBand
        switch; multi-plane NICs split each port over `planes` networks of ports at 1/planes
        of the speed, so the same switch silicon offers `planes` times the ports."""
        inter = self.topology.inter_node
        radix = inter.switch_radix
        if not radix:
            nic_gbps = inter.nic_bandwidth_bytes_per_s * 8 / 1e9
            radix = (
                HDR_SWITCH_PORTS
                if nic_gbps <= 200
                else NDR_SWITCH_PORTS
                if nic_gbps <= 400
                else XDR_SWITCH_PORTS
            )
        return radix * inter.planes

    @property
    def tree_ports(self) -> int:
        """End ports one switching tree connects: every NIC port of the cluster (the rails meet
        at the spine), or one rail's (rail-only: a tree per rail)."""
        per_node = 1 if self.rail_only else self.num_rails
        return self.num_nodes * per_node

    @property
    def num_tiers(self) -> int:
        """Switch levels: as given, or the fewest a folded Clos of this radix needs for the
        cluster (98,304 GPUs on 64-port switches is three tiers, not one two-tier spine)."""
        given = self.topology.inter_node.tiers
        if self.num_nodes < 2:
            return given or 1
        needed = 1
        while clos_capacity_ports(self.switch_ports, needed) < self.tree_ports and needed < 5:
            needed += 1
        return given or needed

    def check_buildable(self) -> None:
        """Refuse a tier count too small for the cluster (exact or refused)."""
        given = self.topology.inter_node.tiers
        if given and clos_capacity_ports(self.switch_ports, given) < self.tree_ports:
            raise ConfigError(
                f"{given} tier(s) of {self.switch_ports}-port switches connect at most "
                f"{clos_capacity_ports(self.switch_ports, given):,} ports; this cluster has "
                f"{self.tree_ports:,} (use tiers = 0 for the fewest that suffice)",
                key="inter_node.tiers",
            )

    @property
    def nodes_per_pod(self) -> int:
        """Nodes under one spine group (a pod) when there is a tier above the spine: as given,
        or what a two-tier Clos of this radix holds, in whole scalable units."""
        if self.num_tiers < 3:
            return self.num_nodes
        return self._group_nodes(1)

    @property
    def num_pods(self) -> int:
        return -(-self.num_nodes // self.nodes_per_pod)

    def pod_of_node(self, node: int) -> int:
        return node // self.nodes_per_pod

    @property
    def pod_uplink_bytes_per_s(self) -> float:
        """Spine -> core capacity of one pod per rail (the unit the leaf level also uses): the
        pod's NIC bandwidth on that rail / pod_oversubscription."""
        per_node = self.nic_bandwidth_bytes_per_s * (1 if self.rail_optimized else self.num_rails)
        return self.nodes_per_pod * per_node / self.topology.inter_node.pod_oversubscription

    @property
    def pods_oversubscribed(self) -> bool:
        return (
            self.num_tiers >= 3 and self.num_pods > 1 and self.topology.inter_node.pod_oversubscription > 1.0
        )

    def _group_nodes(self, tier: int) -> int:
        """Nodes under one switch group of `tier` (0 = leaf): the scalable unit, the pod (as
        given, or what a Clos one tier shorter holds, in whole groups of the tier below), and
        the whole cluster at the top."""
        n = self.num_tiers
        if tier == 0:
            return min(self.nodes_per_leaf, self.num_nodes)
        if tier >= n - 1:
            return self.num_nodes
        if tier == 1 and self.topology.inter_node.nodes_per_pod:
            return min(self.topology.inter_node.nodes_per_pod, self.num_nodes)
        per_node = 1 if self.rail_only else self.num_rails
        below = self._group_nodes(tier - 1)
        nodes = clos_capacity_ports(self.switch_ports, tier + 1) // per_node
        return min(self.num_nodes, max(below, nodes // below * below))

    def switch_counts(self) -> list[int]:
        """Switches per tier: the leaves (one per rail per scalable unit), then each tier takes
        the uplink ports of the one below on half its ports (all of them at the top)."""
        n = self.num_tiers
        if self.num_nodes < 2:
            return [0] * n
        inter = self.topology.inter_node
        counts = [self.num_leaves]
        up_ports = self.num_leaves * self.leaf_uplink_bytes_per_s / inter.nic_bandwidth_bytes_per_s
        k = self.switch_ports
        for t in range(1, n):
            top = t == n - 1
            switches = max(1, math.ceil(up_ports / (k if top else k // 2)))
            counts.append(switches)
            over = inter.pod_oversubscription if t == 1 else 1.0
            up_ports = switches * (k // 2) / over
        return counts

    @property
    def num_spines(self) -> int:
        counts = self.switch_counts()
        return counts[1] if len(counts) > 1 else 0

    @property
    def num_core_switches(self) -> int:
        return sum(self.switch_counts()[2:])

    def tiers(self) -> list[dict[str, float | int | str]]:
        """Per switch level: its name, switch count, radix, the nodes (and GPUs) under one group
        of it, and the oversubscription of its uplinks (1.0 at the top)."""
        inter = self.topology.inter_node
        n = self.num_tiers
        counts = self.switch_counts()
        out: list[dict[str, float | int | str]] = []
        for t in range(n):
            nodes = self._group_nodes(t)
            over = inter.oversubscription if t == 0 else inter.pod_oversubscription if t == 1 else 1.0
            out.append(
                {
                    "name": ("rail " if self.rail_only else "") + TIER_NAMES[t],
                    "switches": counts[t],
                    "radix": self.switch_ports,
                    "nodes_per_group": nodes,
                    # a partly used last node holds fewer (12 GPUs on 8-GPU nodes: 12, not 16)
                    "gpus_per_group": min(nodes * self.gpus_per_node, self.num_gpus),
                    "oversubscription": over if t < n - 1 else 1.0,
                }
            )
        return out

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

    def spine_name(self, rail: int = 0) -> str:
        """The spine (one per rail on a rail-only fabric, which has none between rails)."""
        return f"spine{rail}" if self.rail_only else "spine"

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
        path = []
        if self.rail_only and nic_a != nic_b:  # no path between rails: hop over NVLink first (PXN)
            relay = a * self.gpus_per_node + next(
                loc for loc in range(self.gpus_per_node) if self.nic_of_local(loc) == nic_b
            )
            sw = self.switch_name(a)
            path += [(self.gpu_name(src_gpu), sw), (sw, self.gpu_name(relay))]
            src_gpu, nic_a = relay, nic_b
        leaf_a, leaf_b = self.leaf_name(a, nic_a), self.leaf_name(b, nic_b)
        path += [
            (self.gpu_name(src_gpu), self.nic_name(a, nic_a)),
            (self.nic_name(a, nic_a), leaf_a),
        ]
        if leaf_a != leaf_b:
            spine = self.spine_name(nic_a)
            path += [(leaf_a, spine), (spine, leaf_b)]
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
