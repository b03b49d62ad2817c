"""The cluster as a networkx graph (SPEC §2): GPUs, NVSwitch/PCIe switch, NICs, leaves, spine.

Edges carry `bandwidth_bytes_per_s` (one direction) and `latency_s`; the latency of a route is
the sum along it, so GPU->GPU is `intra_node.latency_us` inside a node and
`inter_node.latency_us` between nodes. The collective model never walks this graph (it uses the
same structure analytically, see fabric.py); build it for inspection, plots and tests, and pass
`nodes=` to build only the part of a large cluster that a group touches.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from .fabric import Fabric

if TYPE_CHECKING:
    import networkx as nx


def build_graph(fabric: Fabric, nodes: Iterable[int] | None = None) -> nx.Graph:
    """The graph of the whole cluster, or of the given nodes plus the leaves/spine they use."""
    import networkx as nx  # only here: a simulation never walks the graph (start-up time)

    topo = fabric.topology
    gpn = fabric.gpus_per_node
    intra_bw = fabric.intra_bandwidth_bytes_per_s
    nic_bw = fabric.nic_bandwidth_bytes_per_s
    half_intra = topo.intra_node.latency_s / 2
    half_inter = topo.inter_node.latency_s / 2
    g = nx.Graph(
        name=topo.name,
        intra_fabric=topo.intra_node.fabric,
        inter_fabric=topo.inter_node.fabric,
        oversubscription=topo.inter_node.oversubscription,
    )
    node_ids = range(fabric.num_nodes) if nodes is None else sorted(set(nodes))
    leaves: set[str] = set()
    for node in node_ids:
        sw = fabric.switch_name(node)
        g.add_node(sw, kind="switch", fabric=topo.intra_node.fabric, node=node)
        for q in range(fabric.num_rails):
            nic = fabric.nic_name(node, q)
            leaf = fabric.leaf_name(node, q)
            g.add_node(nic, kind="nic", node=node, rail=q)
            if leaf not in leaves:
                g.add_node(leaf, kind="leaf", unit=fabric.unit_of_node(node))
                leaves.add(leaf)
            g.add_edge(nic, leaf, bandwidth_bytes_per_s=nic_bw, latency_s=half_inter, kind="nic-leaf")
        for local in range(gpn):
            gpu = node * gpn + local
            if gpu >= fabric.num_gpus:
                break
            name = fabric.gpu_name(gpu)
            g.add_node(name, kind="gpu", node=node, local=local)
            g.add_edge(name, sw, bandwidth_bytes_per_s=intra_bw, latency_s=half_intra, kind="intra")
            # GPUDirect RDMA path to the GPU's NIC (PCIe); the NIC's own rate is the limit.
            g.add_edge(
                name,
                fabric.nic_name(node, fabric.nic_of_local(local)),
                bandwidth_bytes_per_s=nic_bw,
                latency_s=0.0,
                kind="gpu-nic",
            )
    # a spine joins the leaves (rail-only: one spine per rail, none when one leaf per rail suffices)
    if fabric.num_scalable_units > 1 or (len(leaves) > 1 and not fabric.rail_only):
        for leaf in sorted(leaves):
            spine = fabric.spine_name(int(leaf.rsplit("leaf", 1)[1]))
            if spine not in g:
                g.add_node(spine, kind="spine")
            g.add_edge(
                leaf,
                spine,
                bandwidth_bytes_per_s=fabric.leaf_uplink_bytes_per_s,
                latency_s=0.0,
                kind="uplink",
            )
    return g


def route_latency_s(graph: nx.Graph, path: list[tuple[str, str]]) -> float:
    return float(sum(graph.edges[u, v]["latency_s"] for u, v in path))


def route_bottleneck_bytes_per_s(graph: nx.Graph, path: list[tuple[str, str]]) -> float:
    return float(min(graph.edges[u, v]["bandwidth_bytes_per_s"] for u, v in path))
