"""`TopologyCommModel`: the CommModel (network/interface.py) that knows the cluster.

For the representative pipeline's stage `stage`, the group of `axis` is placed on the fabric
(placement.py), reduced to its shape and the load its concurrent groups put on shared NICs and
leaf uplinks (collectives.py), and every NCCL algorithm/protocol is costed; the fastest wins,
as NCCL's tuner picks per call. Shapes are cached per (axis, stage alignment) and costs per
(kind, axis, stage, size), on the instance, so a scenario's few dozen calls cost microseconds
after the first of each group.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from ..ep_dispatch import FLEX_DISPATCHERS
from ..kernel_catalog import reduce_tail_chunks, ring_window_bytes
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

if TYPE_CHECKING:
    import networkx as nx

NONE = CollectiveCost(0.0, "none", "", 0.0)


@dataclass(frozen=True, slots=True)
class GroupKind:
    """One way a stage's groups of an axis sit on the fabric, and how many groups do so."""

    shape: GroupShape
    count: float


@dataclass(frozen=True, slots=True)
class TopologyCommModel:
    """Collective times on the topology graph, with NCCL-like algorithm choice and contention."""

    scenario: Scenario
    # achieved fraction of the NICs' line rate; None = the GPU's nccl_bw_fraction, as on NVLink
    # (`mfusim kernel` sets nccl-tests' own, simulator/kernels.py)
    nic_bw_fraction: float | None = None
    ring_window_bytes: float = 0.0  # NCCL's bandwidth ramp (collectives.ramp_s); 0 = off
    nvls_chunk_overhead_bytes: float | None = None  # collectives.nvls_time_s; None = off
    nvls_fraction: float | None = None  # None: collectives.NVLS_BW_FRACTION(_BLACKWELL)
    reduce_tail_chunks: float = 0.0  # collectives.Links.reduce_tail_chunks; 0 = off
    fabric: Fabric = field(init=False, repr=False, compare=False)
    placement: Placement = field(init=False, repr=False, compare=False)
    links: Links = field(init=False, repr=False, compare=False)
    _shapes: dict[tuple[str, str, int, bool], GroupShape | P2PShape] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    _costs: dict[tuple[str, str, int, float], CollectiveCost] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    _kinds: dict[tuple[str, int], tuple[GroupKind, ...]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        fabric = Fabric(self.scenario.topology, self.scenario.num_gpus)
        fabric.check_buildable()
        object.__setattr__(self, "fabric", fabric)
        object.__setattr__(self, "placement", Placement.of(self.scenario))
        eta = self.scenario.gpu.efficiency.nccl_bw_fraction
        links = Links.of(
            fabric,
            eta,
            self.nic_bw_fraction,
            self.ring_window_bytes,
            self.nvls_chunk_overhead_bytes,
            self.nvls_fraction,
            self.reduce_tail_chunks,
        )
        object.__setattr__(self, "links", links)

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
        period = self._period()
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

    def group_kinds(self, axis: str, stage: int = 0) -> tuple[GroupKind, ...]:
        """The distinct ways the groups of `axis` in pipeline stage `stage` (all replicas) sit
        on the fabric, each with how many groups share it, representative's kind first.

        A stage waits for its slowest member (every layer's collective synchronizes it, and
        synchronous data parallelism waits for the slowest replica), so a collective costs the
        slowest kind — not the representative group's, which may be the one group that fits
        in a rack (GB200 NVL72 with TP64: 7 of 8 groups straddle two racks)."""
        fab, pl = self.fabric, self.placement
        period = self._period()
        key = (axis, (stage * pl.stride("pp")) % period)
        hit = self._kinds.get(key)
        if hit is not None:
            return hit
        rep = self.shape(axis, stage)
        firsts = pl.group_firsts(axis, stage, period)
        n_groups = max(1, pl.num_ranks // (pl.pp * max(pl.size(axis), 1)))
        per_residue = n_groups / max(len(firsts), 1)
        counts: dict[GroupShape, float] = {}
        for first in sorted(firsts.values()):
            shape = rep if first == pl.group_bounds(axis, pl.representative_rank(stage))[0] else None
            if shape is None:
                shape = analyze_group(fab, pl, axis, stage, first)
            counts[shape] = counts.get(shape, 0.0) + per_residue
        kinds = [GroupKind(rep, counts.pop(rep, per_residue))]
        kinds += [GroupKind(sh, c) for sh, c in counts.items()]
        out = tuple(kinds)
        self._kinds[key] = out
        return out

    def _period(self) -> int:
        """Ranks after which the hardware pattern repeats: a node, a scalable unit when leaf
        uplinks are oversubscribed, a pod when its core uplinks are."""
        fab = self.fabric
        period = fab.gpus_per_node
        if fab.pods_oversubscribed:
            period *= fab.nodes_per_pod
        elif fab.topology.inter_node.oversubscription > 1.0:
            period *= fab.nodes_per_leaf
        return period

    def placement_warnings(self, axes: tuple[str, ...] = ("tp", "cp", "ep")) -> list[str]:
        """Groups that cross a node (NVLink domain) boundary although they could fit in one:
        the fix is fewer GPUs used per node (so the groups align) or another rank order."""
        pl, gpn = self.placement, self.fabric.gpus_per_node
        out = []
        for axis in axes:
            n = pl.size(axis)
            if n <= 1 or n > gpn:
                continue
            # every stage: with pp > 1 a stage's block of ranks may start mid-node even when
            # stage 0's does not (GB200 NVL72: 256 GPUs, ep 32, stages 2 and 6 straddle racks)
            per_stage = [self.group_kinds(axis, s) for s in range(pl.pp)]
            splits = [sum(k.count for k in kinds if k.shape.num_nodes > 1) for kinds in per_stage]
            if max(splits) <= 0:
                continue
            total = sum(k.count for k in per_stage[0])
            block = pl.stride("dp") * n if axis == "ep" else pl.stride(axis) * n
            crossing = [s for s, split in enumerate(splits) if split > 0]
            where = (
                "per stage"
                if len(crossing) == pl.pp
                else f"in stage{'s' if len(crossing) > 1 else ''} " + (", ".join(str(s) for s in crossing))
            )
            what = f"{max(splits):.0f} of {total:.0f} {axis}{n} groups {where} cross a node boundary"
            if block <= gpn:
                fit = (gpn // block) * block
                out.append(
                    f"{what} ({gpn} GPUs per node is not a multiple of their {block}-GPU block): "
                    f"use {fit} of {gpn} GPUs per node ([cluster] gpus_used_per_node = {fit}) "
                    f"to keep each group inside one"
                )
            else:
                out.append(
                    f"{what}: a rank order with {axis} innermost ([cluster] rank_order) would keep "
                    f"each group of {n} inside one node"
                )
        return out

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
        links = self.links
        if kind == "alltoall" and axis == "ep" and self.scenario.kernels.moe_dispatcher in FLEX_DISPATCHERS:
            # DeepEP / HybridEP move the EP all-to-all with their own RDMA kernels (their measured
            # speed: simulator/ep_dispatch.py), not NCCL's send/recv: the fabric at a ring's rate
            links = replace(links, p2p_net_fraction=1.0)
        worst: CollectiveCost | None = None
        for k in self.group_kinds(axis, stage):
            c = best(collective_candidates(kind, k.shape, links, size))
            cost = self._to_cost(kind, k.shape.size, size, c)
            if worst is None or cost.time_s > worst.time_s:
                worst = cost
        assert worst is not None
        return worst

    @staticmethod
    def _to_cost(kind: str, n: int, size: float, c: Candidate) -> CollectiveCost:
        busbw = bus_factor(kind, n) * size / c.time_s if c.time_s > 0 else 0.0
        return CollectiveCost(c.time_s, c.algorithm, c.bottleneck, busbw)


def default_comm_model(scn: Scenario) -> TopologyCommModel:
    """The comm model `mfusim run` uses: collectives on the topology graph, with NCCL's ring
    (and all-to-all) bandwidth ramp of the kernel model (window fitted to nccl-tests sweeps,
    kernels.toml) at the job's calibrated `nccl_bw_fraction`; `--comm-model flat` keeps
    FlatCommModel."""
    # NVLS's chunk schedule is measured on 8 ranks only (not established for the 36-72-GPU
    # NVLink domains): off in training, on in `mfusim kernel`
    name = scn.gpu.name
    return TopologyCommModel(
        scn, ring_window_bytes=ring_window_bytes(name), reduce_tail_chunks=reduce_tail_chunks(name)
    )
