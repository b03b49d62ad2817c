"""The network: collectives routed over an NVLink/InfiniBand topology (issue 4).

- interface.py: the CommModel protocol, CollectiveCost, NCCL bus factors (message-size convention)
- flat.py: FlatCommModel, α–β on the slowest link (`--comm-model flat`)
- fabric.py: the cluster of a TopologySpec (nodes, rails, leaves, spine, bandwidths, routes)
- graph.py: the same cluster as a networkx graph (inspection, tests)
- placement.py: ranks -> GPUs and the TP/CP/DP/EP/PP groups
- collectives.py: NCCL algorithms costed α–β on the bottleneck links, with contention
- model.py: TopologyCommModel, the CommModel `mfusim run` uses (default_comm_model)
- summary.py: a topology in plain numbers (for `mfusim topo`)
"""

from __future__ import annotations

from .collectives import GroupShape, P2PShape, double_binary_tree_edges
from .fabric import Fabric
from .flat import FlatCommModel
from .graph import build_graph
from .interface import CollectiveCost, CommModel, bus_factor
from .model import TopologyCommModel, default_comm_model
from .placement import Placement
from .summary import topology_summary

__all__ = [
    "CollectiveCost",
    "CommModel",
    "FlatCommModel",
    "bus_factor",
    "default_comm_model",
    "Fabric",
    "GroupShape",
    "P2PShape",
    "Placement",
    "TopologyCommModel",
    "build_graph",
    "double_binary_tree_edges",
    "topology_summary",
]
