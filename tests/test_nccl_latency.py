"""Collective latency follows NCCL's own tuning model (issue 12, nccl-lat).

The oracle is NCCL's source, written out here independently of the catalog: NVIDIA/nccl
src/graph/tuning.cc at v2.30.7-1 (73cf1122), ncclTunerConstantsDefaults and ncclTopoTuneModel.
Per protocol (LL, LL128, Simple), in µs:
  baseLatencies   ring 6.6 / 14.0 / 8.4, tree 6.8 / 14.0 / 8.4, PAT 8.0 (Simple)
  hwLatencies     NVLink ring 0.6 / 1.9 / 3.4, NVLink tree 0.6 / 1.25 / 4.0, NVLink NVLS 25 (Simple)
                  PCI ring 1.0 / 2.5 / 5.7
                  NET ring 2.7 / 4.0 / 14.0, NET tree 5.0 / 8.5 / 14.0
  getNetOverhead  1 µs (x3 for Simple) is the floor of an intra-node step on a multi-node ring.
At a message of a few bytes the bandwidth term is negligible (< 1 ns here), so a candidate's time
is its latency. The ramp (ring_window_bytes) is off in a bare TopologyCommModel.
"""

from __future__ import annotations

import math

import pytest

from simulator.network import TopologyCommModel
from simulator.network.collectives import NcclLatency
from tests.test_network import cost, make

US = 1e-6
TINY = 8.0  # bytes

BASE = {"ring": (6.6, 14.0, 8.4), "tree": (6.8, 14.0, 8.4)}
NVLINK = {"ring": (0.6, 1.9, 3.4), "tree": (0.6, 1.25, 4.0)}
PCI_RING = (1.0, 2.5, 5.7)
NET = {"ring": (2.7, 4.0, 14.0), "tree": (5.0, 8.5, 14.0)}
NET_OVERHEAD = (1.0, 1.0, 3.0)  # getNetOverhead x3 for Simple
PROTO = {"LL": 0, "LL128": 1, "Simple": 2}


def nccl_ring_us(
    kind: str, proto: str, n: int, k: int, intra_ring: tuple[float, ...] = NVLINK["ring"]
) -> float:
    """ncclTopoTuneModel's ring latency of n ranks on k nodes (all-reduce, all-gather, reduce-scatter)."""
    p = PROTO[proto]
    nsteps = 2 * (n - 1) if kind == "allreduce" else n - 1
    ninter = 0 if k == 1 else (2 * (k - 1) if kind == "allreduce" else k - 1)
    intra = intra_ring[p] if k == 1 else max(intra_ring[p], NET_OVERHEAD[p])
    inter = NET["tree" if n == k else "ring"][p]  # ppn = 1: "latencies are fully exposed"
    return BASE["ring"][p] + (nsteps - ninter) * intra + ninter * inter


def nccl_tree_us(proto: str, n: int, k: int) -> float:
    p = PROTO[proto]
    return BASE["tree"][p] + 2 * ((n // k - 1) * NVLINK["tree"][p] + int(math.log2(k)) * NET["tree"][p])


def candidates(scn, kind: str, axis: str) -> dict[str, float]:
    return {c.algorithm: c.time_s for c in TopologyCommModel(scn).candidates(kind, axis, TINY)}


@pytest.mark.parametrize("kind", ["allreduce", "allgather", "reducescatter"])
@pytest.mark.parametrize("nodes", [2, 4, 16])
def test_multinode_ring_latency_is_nccls_closed_form(kind: str, nodes: int) -> None:
    """A data-parallel ring of 8·k ranks on k DGX H100 nodes (8 per node): every protocol's ring
    costs base + (nsteps − nInterSteps)·max(NVLink hop, net overhead) + nInterSteps·NET ring hop."""
    n = 8 * nodes
    got = candidates(make("dgx-h100", n), kind, "dp")
    for proto in PROTO:
        assert got[f"ring/{proto}"] == pytest.approx(nccl_ring_us(kind, proto, n, nodes) * US, rel=1e-4), (
            proto
        )


def test_ring_of_32_on_4_nodes_in_numbers() -> None:
    """The closed form, evaluated: 62 steps of which 6 cross the network. Simple: 8.4 + 56 x 3.4 +
    6 x 14 = 282.8 µs; LL: 6.6 + 56 x 1.0 (net overhead above the 0.6 NVLink hop) + 6 x 2.7 =
    78.8 µs; LL128: 14 + 56 x 1.9 + 6 x 4 = 144.4 µs."""
    got = candidates(make("dgx-h100", 32), "allreduce", "dp")
    assert got["ring/Simple"] == pytest.approx(282.8 * US, rel=1e-4)
    assert got["ring/LL"] == pytest.approx(78.8 * US, rel=1e-4)
    assert got["ring/LL128"] == pytest.approx(144.4 * US, rel=1e-4)


@pytest.mark.parametrize("nodes", [2, 4, 8, 32])
def test_tree_latency_is_nccls_closed_form(nodes: int) -> None:
    """Double binary tree: base + 2·((n/k − 1)·NVLink tree hop + floor(log2 k)·NET tree hop)."""
    n = 8 * nodes
    got = candidates(make("dgx-h100", n), "allreduce", "dp")
    for proto in PROTO:
        assert got[f"tree/{proto}"] == pytest.approx(nccl_tree_us(proto, n, nodes) * US, rel=1e-4), proto


def test_one_rank_per_node_uses_the_tree_network_hop_and_pat() -> None:
    """TP = 8 fills each node, so the data-parallel group has one rank per node (ppn = 1): its
    ring's network steps cost NCCL's NET *tree* hop (LL 5.0 µs, not the ring's 2.7), and PAT
    (Simple only) costs 8 + floor(log2 k)·14/3.5 + 2.8·n µs."""
    nodes = 8
    scn = make("dgx-h100", 8 * nodes, tp=8)
    got = candidates(scn, "allreduce", "dp")
    assert got["ring/LL"] == pytest.approx((6.6 + 2 * (nodes - 1) * 5.0) * US, rel=1e-4)
    assert got["ring/Simple"] == pytest.approx((8.4 + 2 * (nodes - 1) * 14.0) * US, rel=1e-4)
    ag = candidates(scn, "allgather", "dp")
    assert ag["pat/Simple"] == pytest.approx((8.0 + 3 * 14.0 / 3.5 + 2.8 * nodes) * US, rel=1e-4)
    assert not any(a.startswith("pat/L") for a in ag)  # NCCL runs PAT with Simple only


def test_one_node_rings_on_nvlink_and_pcie() -> None:
    """One node: no network step, no net-overhead floor; NVLink and PCI hops from their own rows."""
    nv = candidates(make("dgx-a100", 8, tp=8), "allreduce", "tp")
    pci = candidates(make("pcie-a100", 8, tp=8), "allreduce", "tp")
    for proto in ("LL", "Simple"):
        assert nv[f"ring/{proto}"] == pytest.approx(nccl_ring_us("allreduce", proto, 8, 1) * US, rel=1e-4)
        assert pci[f"ring/{proto}"] == pytest.approx(
            nccl_ring_us("allreduce", proto, 8, 1, PCI_RING) * US, rel=1e-4
        )
    assert nv["ring/Simple"] == pytest.approx((8.4 + 14 * 3.4) * US, rel=1e-4)
    assert "ring/LL128" not in pci  # LL128 needs NVLink


def test_nvls_latency_is_nccls() -> None:
    """NVLS inside one NVSwitch node: NCCL sets the latency to hwLatencies[NVLINK][NVLS] = 25 µs."""
    got = candidates(make("dgx-h100", 8, tp=8), "allreduce", "tp")
    assert got["nvls/Simple"] == pytest.approx(25.0 * US, rel=1e-3)


def test_catalog_is_nccls_table() -> None:
    """The shipped [nccl_latency] is tuning.cc's, converted to seconds once."""
    lat = NcclLatency.of()
    for algo in ("ring", "tree"):
        assert lat.base_s[algo] == pytest.approx(tuple(x * US for x in BASE[algo]))
        assert lat.hop_s[("nvlink", algo)] == pytest.approx(tuple(x * US for x in NVLINK[algo]))
        assert lat.hop_s[("net", algo)] == pytest.approx(tuple(x * US for x in NET[algo]))
    assert lat.hop_s[("pci", "ring")] == pytest.approx(tuple(x * US for x in PCI_RING))
    assert lat.nvls_s == pytest.approx(25.0 * US)
    # NVLSTree (Simple only, base latency 0): NVLink 25 µs, NET 20.9 µs
    assert lat.hop_s[("nvlink", "nvls_tree")][2] == pytest.approx(25.0 * US)
    assert lat.hop_s[("net", "nvls_tree")][2] == pytest.approx(20.9 * US)


@pytest.mark.parametrize("kind", ["allreduce", "allgather", "reducescatter", "alltoall"])
@pytest.mark.parametrize("tp", [1, 8])
def test_small_message_time_is_monotone_in_rank_count(kind: str, tp: int) -> None:
    """More ranks never make a latency-bound collective faster: NCCL's best (algorithm, protocol)
    at 1 KiB over 1 ... 128 DGX H100 nodes (eight ranks per node, or one with TP = 8)."""
    prev = 0.0
    for nodes in (1, 2, 3, 4, 8, 16, 32, 64, 128):
        if tp == 8 and nodes == 1:
            continue
        scn = make("dgx-h100", 8 * nodes, tp=tp)
        t = cost(scn, kind, "dp" if nodes > 1 or tp == 1 else "tp", 1024).time_s
        assert t >= prev * (1 - 1e-12), (nodes, t, prev)
        prev = t
    for n in (2, 4):  # inside one node
        t1 = cost(make("dgx-a100", n, tp=n), kind, "tp", 1024).time_s
        assert cost(make("dgx-a100", 2 * n, tp=2 * n), kind, "tp", 1024).time_s >= t1


@pytest.mark.parametrize("topology", ["dgx-h100", "dgx-a100", "pcie-a100"])
@pytest.mark.parametrize("kind", ["allreduce", "allgather", "reducescatter"])
@pytest.mark.parametrize("tp", [1, 8])
def test_more_bandwidth_never_slower_at_any_size(topology: str, kind: str, tp: int) -> None:
    """NCCL's latency terms do not depend on bandwidth, so doubling the NICs' or the intra-node
    links' rate never lengthens a collective, from latency-bound to bandwidth-bound sizes, for
    many ranks per node and one (ppn = 1: PAT, the tree network hop)."""
    n = 64
    base = make(topology, n, tp=tp)
    nic = base.topology.inter_node.nic_bandwidth_bytes_per_s * 8 / 1e9
    link = base.topology.intra_node.link_bandwidth_bytes_per_s / 1e9
    faster_nic = make(topology, n, tp=tp, inter={"nic_Gbps": 2 * nic})
    faster_link = make(topology, n, tp=tp, intra={"link_GBps_per_direction": 2 * link})
    for size in (8, 4096, 2**20, 2**26, 2**30):
        t = cost(base, kind, "dp", size).time_s
        assert cost(faster_nic, kind, "dp", size).time_s <= t * (1 + 1e-12), size
        assert cost(faster_link, kind, "dp", size).time_s <= t * (1 + 1e-12), size


def test_topology_hop_latency_prices_only_send_recv_and_all_to_all() -> None:
    """NCCL's tuning model has no entry for send/recv: an all-to-all's rounds and a pipeline
    send keep the topology's latency_us; the collectives NCCL tunes do not depend on it."""
    slow = {"latency_us": 10.0}
    for kind, axis, kw in (("allreduce", "dp", {}), ("allgather", "dp", {"tp": 8})):
        assert cost(make("dgx-h100", 32, inter=slow, **kw), kind, axis, TINY).time_s == pytest.approx(
            cost(make("dgx-h100", 32, **kw), kind, axis, TINY).time_s
        )
    assert (
        cost(make("dgx-h100", 32, inter=slow), "alltoall", "dp", TINY).time_s
        > cost(make("dgx-h100", 32), "alltoall", "dp", TINY).time_s
    )
