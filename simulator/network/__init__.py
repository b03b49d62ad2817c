"""The network: collectives routed over an NVLink/InfiniBand topology (issue 4).

- fabric.py: the cluster of a TopologySpec (nodes, rails, leaves, spine, bandwidths, routes)
- graph.py: the same cluster as a networkx graph (inspection, tests)
- placement.py: ranks -> GPUs and the TP/CP/DP/EP/PP groups
- collectives.py: NCCL algorithms costed α–β on the bottleneck links, with contention
- model.py: TopologyCommModel, the CommModel `mfusim run` uses
- summary.py: a topology in plain numbers (for `mfusim topo`)
"""

from __future__ import annotations

from .collectives import GroupShape, P2PShape, double_binary_tree_edges
from .fabric import Fabric
from .graph import build_graph
from .model import TopologyCommModel
from .placement import Placement
from .summary import topology_summary

__all__ = [
    "Fabric",
    "GroupShape",
    "P2PShape",
    "Placement",
    "TopologyCommModel",
    "build_graph",
    "double_binary_tree_edges",
    "topology_summary",
]
