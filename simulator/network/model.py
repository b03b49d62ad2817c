"""`TopologyCommModel`: the CommModel (network/interface.py) that knows the cluster.

For the representative pipeline's stage `stage`, the group of `axis` is placed on the fabric
(placement.py), reduced to its shape and the load its concurrent groups put on shared NICs and
leaf uplinks (collectives.py), and every NCCL algorithm/protocol is costed; the fastest wins,
as NCCL's tuner picks per call. Shapes are cached per (axis, stage alignment) and costs per
(kind, axis, stage, size), on the instance, so a scenario's few dozen calls cost microseconds
after the first of each group.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import networkx as nx

from ..specs import Scenario
from .collectives import (
    Candidate,
    GroupShape,
    Links,
    P2PShape,
    analyze_group,
    analyze_p2p,
    best,
    collective_candidates,
)
from .fabric import Fabric
from .graph import build_graph
from .interface import KINDS, CollectiveCost, bus_factor
from .placement import GROUP_AXES, Placement

NONE = CollectiveCost(0.0, "none", "", 0.0)


@dataclass(frozen=True, slots=True)
class TopologyCommModel:
    """Collective times on the topology graph, with NCCL-like algorithm choice and contention."""

    scenario: Scenario
    fabric: Fabric = field(init=False, repr=False, compare=False)
    placement: Placement = field(init=False, repr=False, compare=False)
    links: Links = field(init=False, repr=False, compare=False)
    _shapes: dict[tuple[str, str, int, bool], GroupShape | P2PShape] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    _costs: dict[tuple[str, str, int, float], CollectiveCost] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        fabric = Fabric(self.scenario.topology, self.scenario.num_gpus)
        object.__setattr__(self, "fabric", fabric)
        object.__setattr__(self, "placement", Placement.of(self.scenario))
        object.__setattr__(self, "links", Links.of(fabric, self.scenario.gpu.efficiency.nccl_bw_fraction))

    # ------------------------------------------------------------------ CommModel protocol
    def group_size(self, axis: str) -> int:
        return self.placement.size(axis)

    def collective(self, kind: str, axis: str, message_bytes: float, stage: int = 0) -> CollectiveCost:
        key = (kind, axis, stage, float(message_bytes))
        hit = self._costs.get(key)
        if hit is not None:
            return hit
        cost = self._cost(kind, axis, float(message_bytes), stage)
        self._costs[key] = cost
        return cost

    # ------------------------------------------------------------------ inspection
    def shape(self, axis: str, stage: int = 0) -> GroupShape:
        """The group of `axis` at `stage`: size, nodes, scope and the load of concurrent groups."""
        shape = self._shape("collective", axis, stage)
        assert isinstance(shape, GroupShape)
        return shape

    def p2p_shape(self, axis: str, stage: int = 0) -> P2PShape:
        shape = self._shape("p2p", axis, stage)
        assert isinstance(shape, P2PShape)
        return shape

    def group_graph(self, axis: str, stage: int = 0) -> nx.Graph:
        """The part of the cluster graph that the group of `axis` at `stage` touches."""
        gpn = self.fabric.gpus_per_node
        return build_graph(self.fabric, nodes={r // gpn for r in self.placement.group(axis, stage)})

    def candidates(self, kind: str, axis: str, message_bytes: float, stage: int = 0) -> list[CollectiveCost]:
        """Every algorithm/protocol NCCL could use here, fastest first (for reports and tests)."""
        self._check(kind, axis)
        shape = self.shape(axis, stage)
        cands = collective_candidates(kind, shape, self.links, float(message_bytes))
        return sorted(
            (self._to_cost(kind, shape.size, message_bytes, c) for c in cands), key=lambda c: c.time_s
        )

    # ------------------------------------------------------------------ internals
    @staticmethod
    def _check(kind: str, axis: str) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown collective kind {kind!r}; known: {', '.join(KINDS)}")
        if axis not in GROUP_AXES:
            raise ValueError(f"unknown parallel axis {axis!r}; known: {', '.join(GROUP_AXES)}")

    def _shape(self, what: str, axis: str, stage: int) -> GroupShape | P2PShape:
        # Stages are translates of each other by stage * stride(pp) ranks; two stages whose offset
        # is a multiple of the node (or, when leaf uplinks matter, of the scalable unit) see the
        # same hardware pattern, so they share one analysis.
        fab, pl = self.fabric, self.placement
        period = fab.gpus_per_node
        if fab.topology.inter_node.oversubscription > 1.0:
            period *= fab.nodes_per_leaf
        offset = (stage * pl.stride("pp")) % period
        wraps = what == "p2p" and axis == "pp" and stage == pl.pp - 1  # last stage sends to stage 0
        key = (what, axis, offset, wraps)
        hit = self._shapes.get(key)
        if hit is None:
            if what == "p2p":
                hit = analyze_p2p(fab, pl, self.links, axis, stage)
            else:
                hit = analyze_group(fab, pl, axis, stage)
            self._shapes[key] = hit
        return hit

    def _cost(self, kind: str, axis: str, size: float, stage: int) -> CollectiveCost:
        self._check(kind, axis)
        pl = self.placement
        if size <= 0 or pl.size(axis) <= 1:
            return NONE
        if kind == "sendrecv":
            p2p = self.p2p_shape(axis, stage)
            if p2p.seconds_per_byte == 0.0:
                return NONE
            t = p2p.latency_s + size * p2p.seconds_per_byte
            return CollectiveCost(t, "p2p", p2p.bottleneck, size / t)
        shape = self.shape(axis, stage)
        c = best(collective_candidates(kind, shape, self.links, size))
        return self._to_cost(kind, shape.size, size, c)

    @staticmethod
    def _to_cost(kind: str, n: int, size: float, c: Candidate) -> CollectiveCost:
        busbw = bus_factor(kind, n) * size / c.time_s if c.time_s > 0 else 0.0
        return CollectiveCost(c.time_s, c.algorithm, c.bottleneck, busbw)


def default_comm_model(scn: Scenario) -> TopologyCommModel:
    """The comm model `mfusim run` uses: collectives on the topology graph;
    `--comm-model flat` keeps FlatCommModel (network/flat.py)."""
    return TopologyCommModel(scn)
