"""What a topology describes, in plain numbers (shown by `mfusim topo`)."""

from __future__ import annotations

from typing import Any

from .. import units
from .fabric import Fabric


def topology_summary(fabric: Fabric) -> dict[str, Any]:
    """Plain-number description (human units, as printed); the keys are stable for --json."""
    topo = fabric.topology
    inter = topo.inter_node
    gbyte = units.GIGA
    return {
        "name": topo.name,
        "gpu": topo.gpu.name,
        "num_gpus": fabric.num_gpus,
        "gpus_per_node": fabric.gpus_per_node,
        "num_nodes": fabric.num_nodes,
        "intra_node_fabric": topo.intra_node.fabric,
        "nvls": topo.intra_node.nvls,
        "intra_node_GBps_per_gpu": fabric.intra_bandwidth_bytes_per_s / gbyte,
        "intra_node_latency_us": topo.intra_node.latency_s / units.US_S,
        "inter_node_fabric": inter.fabric,
        "nics_per_node": inter.nics_per_node,
        "nic_Gbps": inter.nic_bandwidth_bytes_per_s * units.BITS_PER_BYTE / gbyte,
        "nic_GBps_per_gpu": fabric.node_nic_bandwidth_bytes_per_s / fabric.gpus_per_node / gbyte,
        "nic_GBps_per_node": fabric.node_nic_bandwidth_bytes_per_s / gbyte,
        "inter_node_latency_us": inter.latency_s / units.US_S,
        "nodes_per_leaf": fabric.nodes_per_leaf,
        "num_scalable_units": fabric.num_scalable_units,
        # the leaves the tiers count: none for one node (fabric.num_leaves, the leaves one scalable
        # unit would have, said 8 on a single DGX while `tiers` said 0)
        "num_leaf_switches": fabric.switch_counts()[0],
        "num_spine_switches": fabric.num_spines,
        "num_core_switches": fabric.num_core_switches,
        "switch_radix": fabric.switch_ports,
        "planes": inter.planes,
        "num_tiers": fabric.num_tiers,
        "tiers": fabric.tiers(),
        "nodes_per_pod": fabric.nodes_per_pod,
        "num_pods": fabric.num_pods,
        "oversubscription": inter.oversubscription,
        "pod_oversubscription": inter.pod_oversubscription,
        "leaf_uplink_GBps": fabric.leaf_uplink_bytes_per_s / gbyte,
        "bisection_GBps": fabric.bisection_bytes_per_s / gbyte,
        "bisection_GBps_per_gpu": fabric.bisection_bytes_per_s / max(fabric.num_gpus // 2, 1) / gbyte,
        "rank_order": list(topo.rank_order),
    }
