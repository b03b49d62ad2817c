"""The multi-node tree and NVLSTree pipeline fill (issue 12, treeramp).

Oracles, written out here independently of the code, from NVIDIA/nccl v2.26.2-1 (the same at
5067397c):
  src/init.cc      buffers: LL 8 x 512 x 8 x 16 B = 512 KiB, LL128 120 x 640 x 8 x 8 B, Simple 4 MiB
  src/include/device.h  NCCL_STEPS 8; an LL128 line is 16 words, 15 of them data
  src/enqueue.cc   calcCollChunking: a tree chunk is one step (LL: half of it; LL128: 15/16 of it);
                   tree LL128 halves it (> 128 KiB) while bytes / (channels x chunk) <
                   nstepsLL128 x 64 / ppn, then (> 32 KiB) below x 16 / ppn, nstepsLL128 =
                   1 + log2i(nNodes) + 0.1 ppn; NVLSTree: 128 KiB (64 KiB on >= 4 nodes), 64 KiB
                   below 4 x ops x chunk, 32 KiB below ops x chunk, ops = 16 channels x 8 heads
  topoGetAlgoInfo  a channel fewer while bytes < channels x threads x threshold (LL128 640 x 8,
                   Simple 512 x 64)
and NVIDIA/nccl-tests#309 (2 / 4 HGX H100 nodes, NCCL 2.26.2): busbw 27.5 GB/s at 1 MiB and 469.1
at 16 GiB on 16 ranks; 24.7 and 365.5 on 32."""

from __future__ import annotations

import pytest

from simulator import kernels as K
from simulator.network import TopologyCommModel
from simulator.network.collectives import (
    PROTOCOLS,
    nvls_tree_chunk_bytes,
    tree_channels,
    tree_chunk_bytes,
    tree_fill_s,
)
from tests.test_network import GiB, MiB, make

LL, LL128, SIMPLE = PROTOCOLS


def test_tree_chunk_is_nccls_step() -> None:
    for size in (MiB, GiB):
        assert tree_chunk_bytes(SIMPLE, size, 16, 16, 2) == 4 * MiB // 8
        assert tree_chunk_bytes(LL, size, 16, 16, 2) == 8 * 512 * 8 * 16 // 8 // 2
    # LL128 on 2 x 8 (nstepsLL128 2.8: thresholds 22.4 and 5.6 chunks per channel of 16)
    full = 120 * 640 * 8 * 8 // 8 // 16 * 15
    assert full == 576000
    assert tree_chunk_bytes(LL128, GiB, 16, 16, 2) == 576000  # 116 chunks per channel
    assert tree_chunk_bytes(LL128, 64 * MiB, 16, 16, 2) == 144000  # 29 >= 22.4 after two halvings
    assert tree_chunk_bytes(LL128, 16 * MiB, 16, 16, 2) == 72000  # stops at 128 KiB, 14 >= 5.6
    assert tree_chunk_bytes(LL128, 4 * MiB, 16, 16, 2) == 36000  # 7 >= 5.6
    assert tree_chunk_bytes(LL128, MiB, 16, 16, 2) == 18000  # not below 32 KiB once under it
    # 4 x 8 (nstepsLL128 3.8: 30.4 and 7.6): 64 MiB stops at 72000 (29 < 30.4)
    assert tree_chunk_bytes(LL128, 64 * MiB, 16, 32, 4) == 72000
    assert tree_chunk_bytes(LL128, 4 * MiB, 16, 32, 4) == 18000


def test_tree_channels_drop_only_for_small_messages() -> None:
    for p in PROTOCOLS:
        assert tree_channels(MiB, p) == 16
    assert tree_channels(40960, LL128) == 8  # 8 x 640 x 8 = 40960
    assert tree_channels(256 * 1024, SIMPLE) == 8  # 8 x 512 x 64
    assert tree_channels(1, SIMPLE) == 1


def test_nvls_tree_chunk_schedule() -> None:
    ops = 16 * 8
    assert nvls_tree_chunk_bytes(GiB, ops, 2) == 128 * 1024
    assert nvls_tree_chunk_bytes(4 * ops * 128 * 1024, ops, 2) == 128 * 1024  # 64 MiB
    assert nvls_tree_chunk_bytes(4 * ops * 128 * 1024 - 1, ops, 2) == 64 * 1024
    assert nvls_tree_chunk_bytes(ops * 64 * 1024 - 1, ops, 2) == 32 * 1024  # below 8 MiB
    assert nvls_tree_chunk_bytes(GiB, ops, 4) == 64 * 1024  # nvlsTreeMaxChunkSize on >= 4 nodes
    assert nvls_tree_chunk_bytes(ops * 64 * 1024 - 1, ops, 4) == 32 * 1024


def test_tree_fill_closed_form() -> None:
    """2 x 8, Simple: the tree is 2((8 - 1) + 1) = 16 hops deep and Simple stores and forwards a
    whole step on each (prims_simple.h): the first piece (16 channels x chunk) crosses the 15 hops
    before the last one streams, 2 network hops and 13 NVLink hops. LL / LL128 forward line by
    line over NVLink (prims_ll128.h): only the network hops move chunk by chunk, one of the two
    counted in the stream."""
    net, nvl = 1 / 376e9, 1 / 353e9
    simple_piece = 16 * 512 * 1024.0
    assert tree_fill_s(SIMPLE, GiB, 16, 2, nvl, net) == pytest.approx(simple_piece * (2 * net + 13 * nvl))
    ll128_piece = 16 * 36000.0  # LL128 at 4 MiB
    assert tree_fill_s(LL128, 4 * MiB, 16, 2, nvl, net) == pytest.approx(ll128_piece * net)
    # 4 nodes: 4 network hops, 3 of them in the fill; NVLink's rate does not enter for LL128
    assert tree_fill_s(LL128, 4 * MiB, 32, 4, nvl, net) == pytest.approx(16 * 18000.0 * 3 * net)
    assert tree_fill_s(LL128, 4 * MiB, 32, 4, 0.0, net) == tree_fill_s(LL128, 4 * MiB, 32, 4, nvl, net)
    # a message smaller than the piece fills with itself
    small = 64 * 1024.0
    nc = tree_channels(small, SIMPLE)
    assert nc * 512 * 1024 > small
    assert tree_fill_s(SIMPLE, small, 16, 2, nvl, net) == pytest.approx(small * (2 * net + 13 * nvl))
    # one node: no tree across nodes, no fill
    assert tree_fill_s(SIMPLE, GiB, 8, 1, nvl, net) == 0.0


@pytest.mark.parametrize("nodes", [2, 4])
def test_busbw_rises_with_size_toward_the_plateau(nodes: int) -> None:
    """nccl-tests#309's sweeps rise from ~6% of the plateau at 1 MiB (27.5 / 469.1, 24.7 / 365.5)
    to it at 16 GiB; the model's default all-reduce rises monotonically the same way."""
    busbw = [
        K.collective("dgx-h100", "allreduce", 8 * nodes, 2.0**p).busbw_bytes_per_s for p in range(20, 35)
    ]
    assert all(b <= a * (1 + 1e-12) for b, a in zip(busbw, busbw[1:], strict=False))
    assert busbw[0] < 0.1 * busbw[-1]


def test_algorithm_switch_on_two_h100_nodes() -> None:
    """Small messages run the flat LL128 tree (lowest latency), larger ones NVLSTree once its
    pipeline fills (from 32 MiB on 2 nodes, 128 MiB on 4); no stand-in hierarchical all-reduce
    where NCCL has NVLSTree (it stays for A100 nodes and for all-gather). (NCCL's own tuner runs
    NVLSTree from ~1 MiB on 2 nodes: docs/calibration.md treeramp.)"""
    for nodes, switch in ((2, 32 * MiB), (4, 128 * MiB)):
        assert K.collective("dgx-h100", "allreduce", 8 * nodes, switch / 2).algorithm == "tree/LL128"
        for size in (switch, 256 * MiB, 16 * GiB):
            assert K.collective("dgx-h100", "allreduce", 8 * nodes, size).algorithm == "nvlstree/Simple"
    h100 = TopologyCommModel(make("dgx-h100", 16))
    assert not any("hierarchical" in c.algorithm for c in h100.candidates("allreduce", "dp", 4 * MiB))
    assert any("hierarchical" in c.algorithm for c in h100.candidates("allgather", "dp", 4 * MiB))
    a100 = TopologyCommModel(make("dgx-a100", 16))
    assert any("hierarchical" in c.algorithm for c in a100.candidates("allreduce", "dp", 4 * MiB))


@pytest.mark.parametrize(
    "topology,nodes", [("dgx-h100", 2), ("dgx-h100", 4), ("dgx-h100", 8), ("dgx-a100", 4)]
)
def test_more_bytes_never_take_less_time_across_chunk_steps(topology: str, nodes: int) -> None:
    """NCCL's chunk doubles with the message (a larger fill, a smaller per-chunk overhead): the
    time must still never fall with more bytes, on either side of each step."""
    steps = [2**p for p in range(16, 35)] + [4 * 128 * 128 * 1024, 128 * 64 * 1024, 128 * 32 * 1024]
    sizes = sorted({s + d for s in steps for d in (-1, 0, 1)})
    algos: list[str | None] = [None, "tree"] + (["nvlstree"] if topology == "dgx-h100" else [])
    for algo in algos:
        prev = 0.0
        for size in sizes:
            t = K.collective(topology, "allreduce", 8 * nodes, float(size), algo).time_s
            assert t >= prev * (1 - 1e-12), (algo, size)
            prev = t


@pytest.mark.parametrize("nodes", [2, 4])
def test_tree_never_slower_with_more_nic_or_nvlink_bandwidth(nodes: int) -> None:
    def tree(scn, size: float) -> float:  # noqa: ANN001
        return min(
            c.time_s
            for c in TopologyCommModel(scn).candidates("allreduce", "dp", size)
            if c.algorithm.startswith("tree/")
        )

    base = make("dgx-h100", 8 * nodes)
    faster_nic = make("dgx-h100", 8 * nodes, inter={"nic_Gbps": 800})
    faster_link = make("dgx-h100", 8 * nodes, intra={"link_GBps_per_direction": 900})
    for size in (MiB, 16 * MiB, GiB):
        t = tree(base, size)
        assert tree(faster_nic, size) <= t * (1 + 1e-12)
        assert tree(faster_link, size) <= t * (1 + 1e-12)
