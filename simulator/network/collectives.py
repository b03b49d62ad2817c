"""Collective algorithms costed α–β on the bottleneck links of a group's placement (issue 4, 3-5).

Message size S follows nccl-tests (network/interface.py): the AllReduce buffer, the AllGather
output, the ReduceScatter input, the All-to-All buffer per rank, the bytes one rank sends in a
send/recv. Bus factors are those of nccl-tests doc/PERFORMANCE.md: AllReduce 2(n-1)/n,
AllGather/ReduceScatter/All-to-All (n-1)/n, Broadcast 1.

A group is reduced to a `GroupShape`: n ranks on k nodes, m per node on u NICs, the load that the
*concurrent* groups (same axis, same pipeline stage, all replicas) put on the group's busiest NIC
and on its busiest oversubscribed leaf uplink. Every algorithm then costs

    time = NCCL latency(algorithm, protocol, n, k) + max over links (bytes on link / (B_link · η · f_proto))

with η = `gpu.efficiency.nccl_bw_fraction` (calibrated per GPU, the achieved fraction of a
link's bandwidth) — pipelined algorithms are limited by their slowest link, not a sum.

Algorithm menu and choice follow NCCL's tuner (NCCL src/graph/tuning.cc, ncclTopoTuneModel and
ncclTopoGetAlgoTime, v2.8-2.30): every (algorithm, protocol) pair is costed and the fastest is
taken, as NCCL does per call.
- ring (all kinds): NCCL's steps: nsteps = 2(n-1) for AllReduce, n-1 for AllGather/ReduceScatter,
  of which 2(k-1) / (k-1) cross the network; each rank sends bf·S through its links.
- double binary tree (AllReduce, k > 1): 2S per node at 0.92 of the ring's bus bandwidth (tuning.cc: tree busBw *= 0.92, algBw = busBw/2),
  plus its pipeline fill (`tree_fill_s`: one chunk per channel, NCCL's chunk schedule, across the
  tree's 2((m-1) + floor(log2 k)) hops for Simple, its network hops for LL / LL128).
- NVLS (AllReduce inside one NVSwitch-3+ node, `intra_node.nvls`): the switch reduces and
  multicasts, each GPU sends and receives S·(n+1)/n (not 2(n-1)/n·S): its buffer to every
  head's reduction plus its own share's reduce result and multicast (`nvls_traffic_factor`).
- NVLSTree (AllReduce across k > 1 NVLS nodes, NCCL >= 2.18, Simple): NVLS inside each node and
  a double binary tree over the nodes per head (a GPU with its own NIC), the stages pipelined
  chunk by chunk, so the slowest of NVLS, the NICs (2S per node and direction, S on two nodes)
  and NCCL's own ceiling (heads x perChMaxNVLSTreeBw) sets the rate (`_nvls_tree`); its fill
  follows NCCL's NVLSTree chunk schedule (`nvls_tree_chunk_bytes`).
- hierarchical (AllReduce, AllGather, ReduceScatter across nodes): intra-node reduce-scatter ->
  inter-node allreduce (ring or tree) among the m rails -> intra-node all-gather, the phases in
  sequence (not an NCCL algorithm: a bound for fabrics NCCL's flat ring / tree serve badly); with
  NVLS the two intra-node phases run on the switch. Not offered for an all-reduce where NVLSTree
  is (NCCL's own hierarchical all-reduce on NVLS nodes).
- PAT (AllGather/ReduceScatter with one rank per node, NCCL >= 2.23, Simple only): 0.75 of the
  ring's bandwidth.
- All-to-All: n-1 send/recv rounds (a hop latency each), all bytes in flight at once, bytes per
  link from the placement (intra-node peers over NVLink, the rest through the NICs and, for
  peers in other scalable units, the leaf uplinks). Send/recv: one hop, the sender's links.
Protocols (tuning.cc): LL = 8-byte stores with a 4-byte flag, half the bandwidth; LL128 = 120
useful bytes per 128 (busBw *= 0.92), NVLink fabrics only; Simple = full bandwidth, highest
latency. Latency is NCCL's own model (`NcclLatency`, tuning.cc ncclTopoTuneModel; its constants
in simulator/catalog/kernels.toml [nccl_latency], cited there): a base latency per (algorithm,
protocol) plus a latency per step on each kind of hop (NVLink, PCI, network) — a ring pays
(nsteps - nInterSteps)·intra + nInterSteps·inter, a tree 2·((n/k - 1)·intra + floor(log2 k)·inter),
NVLS its NVLink NVLS latency, NVLSTree its NVLink NVLSTree hop plus 2·floor(log2 k) network
NVLSTree hops, PAT its log and per-rank terms. The hierarchical algorithm's phases
pay the latency of the ring / tree / NVLS of their own shape (m ranks on a node, one rank per node
on each rail). Send/recv and the rounds of an all-to-all (not in NCCL's tuning model) pay the
topology's hop latency (`intra_node` / `inter_node` `latency_us`), scaled for LL by NCCL's ring
ratio of LL to Simple on that hop, plus the ring's base latency.
LL's bus bandwidth is capped per GPU generation and node count (tuning.cc llMaxBws).
NCCL's bandwidth ramp below ~1 GB (nccl-tests size sweeps, simulator/catalog/kernels.toml) is a
pipeline fill (`ramp_s`) on ring (flat and the phases of hierarchical; each hop at its own
link's rate, so a ring across nodes pays the NIC's rate only on its network steps) and
all-to-all (one piece: direct peer transfers), plus an all-reduce ring's tail (`Links.reduce_tail_chunks`),
with the window of bytes per step from the kernel model (`nccl_ring_window_bytes`;
default_comm_model passes it). NVLS follows NCCL's own chunk schedule (`nvls_time_s`): smaller
chunks for smaller messages, each with a fixed overhead, plus the pipeline fill of one round of
chunks (kernel model only: `nccl_nvls_chunk_overhead_bytes`).
Not modelled: NCCL's "plateau effect of ring" (tuning.cc: multi-node Simple ring all-reduce
latency x 1.4; the ramp covers the sub-plateau region), NCCL's 2 µs network post overhead on AMD
hosts (the host CPU is not a topology input: every host gets the 1 µs default), whether the one-node ramp's window holds on multi-node rings at mid sizes (the
one InfiniBand ring sweep found, with non-default CTAs, says it charges far too much there:
docs/calibration.md "NVLSTree"), NCCL's per-size tree correction table (a tuner-side
correction; the tree's fill is modelled instead), the choice by NCCL's own tuner (the fastest
modelled candidate is taken: NCCL's graph bandwidths are not modelled; but for its ring-or-NVLS
choice on one node, `nccl_tuner_picks_nvls`), per-channel LL128/tree
caps (ring channel counts are not modelled; a multi-node tree runs on NCCL_TREE_CHANNELS, NVLSTree
on its NVLS channels and heads), CollNet/SHARP in-network reduction.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache

from .fabric import Fabric
from .interface import bus_factor
from .placement import Placement


@dataclass(frozen=True, slots=True)
class Protocol:
    name: str
    index: int  # NCCL's protocol order (LL, LL128, Simple): the column of the latency tables
    bandwidth_fraction: float
    nvlink_only: bool = False


# NCCL src/graph/tuning.cc: LL 50% / LL128 120/128 bandwidth.
PROTOCOLS = (
    Protocol("LL", 0, 0.5),
    Protocol("LL128", 1, 0.92, nvlink_only=True),
    Protocol("Simple", 2, 1.0),
)
SIMPLE = PROTOCOLS[-1]
PerProtocol = tuple[float, float, float]  # seconds, in NCCL's protocol order


def _log2i(x: int) -> int:
    """NCCL's log2i (src/include/utils.h): floor(log2 x), 0 for x <= 1."""
    return x.bit_length() - 1 if x > 1 else 0


@dataclass(frozen=True, slots=True)
class NcclLatency:
    """NCCL's latency model (src/graph/tuning.cc ncclTopoTuneModel), per (algorithm, protocol):
    a base latency per call plus a latency per algorithm step on each kind of hop. The values are
    the catalog's ([nccl_latency] in simulator/catalog/kernels.toml, cited there), converted to
    seconds here only (`of`). Send/recv and all-to-all rounds are not part of it (topology hop
    latency, `Links.intra_latency_s` / `inter_latency_s`)."""

    base_s: dict[str, PerProtocol]  # algorithm -> baseLatencies
    hop_s: dict[tuple[str, str], PerProtocol]  # (nvlink | pci | net, algorithm) -> hwLatencies
    net_overhead_s: float  # getNetOverhead: floor of an intra-node step on a multi-node ring
    simple_overhead_factor: float  # ... x3 for Simple
    pat_rank_s: float  # PAT's linear term per rank
    pat_log_divisor: float  # PAT's log term: floor(log2 k) x net tree hop / 3.5

    @classmethod
    def of(cls, table: dict | None = None) -> NcclLatency:
        """From the catalog table (µs), or the shipped one."""
        if table is None:
            from ..kernel_catalog import nccl_latency_table

            table = nccl_latency_table()

        def per_protocol(values: list[float]) -> PerProtocol:
            a, b, c = (float(v) * 1e-6 for v in values)
            return (a, b, c)

        hops = {
            (hw, algo): per_protocol(v)
            for hw in ("nvlink", "pci", "net")
            for algo, v in table[f"{hw}_us"].items()
        }
        return cls(
            base_s={algo: per_protocol(v) for algo, v in table["base_us"].items()},
            hop_s=hops,
            net_overhead_s=float(table["net_overhead_us"]) * 1e-6,
            simple_overhead_factor=float(table["simple_overhead_factor"]),
            pat_rank_s=float(table["pat_rank_us"]) * 1e-6,
            pat_log_divisor=float(table["pat_log_divisor"]),
        )

    def ring_s(self, p: Protocol, kind: str, n: int, k: int, intra_hw: str) -> float:
        """A ring of n ranks on k nodes: base + (nsteps - nInter)·intra + nInter·inter, the intra
        step at least the network post overhead on multi-node rings, the network step the tree's
        when every node holds one rank (ppn = 1)."""
        i = p.index
        steps = 2 * (n - 1) if kind == "allreduce" else n - 1
        inter_steps = 0 if k <= 1 else (2 * (k - 1) if kind == "allreduce" else k - 1)
        intra = self.hop_s[(intra_hw, "ring")][i]
        if k > 1:
            overhead = self.net_overhead_s * (self.simple_overhead_factor if p.name == "Simple" else 1.0)
            intra = max(intra, overhead)
        inter = self.hop_s[("net", "tree" if n == k else "ring")][i]
        return self.base_s["ring"][i] + (steps - inter_steps) * intra + inter_steps * inter

    def tree_s(self, p: Protocol, n: int, k: int, intra_hw: str) -> float:
        """Double binary tree all-reduce: base + 2·((n/k - 1)·intra + floor(log2 k)·inter)."""
        i = p.index
        intra = self.hop_s[(intra_hw, "tree")][i]
        inter = self.hop_s[("net", "tree")][i]
        return self.base_s["tree"][i] + 2 * ((n // k - 1) * intra + _log2i(k) * inter)

    def pat_s(self, n: int, k: int) -> float:
        """PAT all-gather / reduce-scatter (Simple, one rank per node)."""
        i = SIMPLE.index
        log_term = _log2i(k) * self.hop_s[("net", "tree")][i] / self.pat_log_divisor
        return self.base_s["pat"][i] + log_term + n * self.pat_rank_s

    @property
    def nvls_s(self) -> float:
        """NVLS inside one NVSwitch domain: NCCL sets its latency to the NVLink NVLS hop."""
        return self.hop_s[("nvlink", "nvls")][SIMPLE.index]

    def nvls_tree_s(self, k: int) -> float:
        """NVLSTree all-reduce over k nodes (Simple only; its base latency is 0): the NVLink
        NVLSTree hop plus 2·floor(log2 k) network NVLSTree hops (tuning.cc; an InfiniBand NIC
        adds no graph latencyInter: src/transport/net_ib/init.cc sets props->latency = 0)."""
        i = SIMPLE.index
        return self.hop_s[("nvlink", "nvls_tree")][i] + 2 * _log2i(k) * self.hop_s[("net", "nvls_tree")][i]

    def p2p_ratio(self, p: Protocol, hw: str) -> float:
        """A protocol's ring step latency relative to Simple's on that hop (scales the topology's
        send/recv hop latency for all-to-all rounds)."""
        row = self.hop_s[(hw, "ring")]
        return row[p.index] / row[SIMPLE.index]

    def launch_s(self, p: Protocol) -> float:
        """The ring's base latency: the per-call cost of a send/recv group (all-to-all)."""
        return self.base_s["ring"][p.index]


# tuning.cc: `if (a == NCCL_ALGO_TREE) busBw *= .92` (v2.12+; 0.9 before).
TREE_BW_FRACTION = 0.92
# NCCL 2.23+ PAT algorithm: busBw *= 0.75 (tuning.cc, PAT refinement).
PAT_BW_FRACTION = 0.75
# NVLS AllReduce on NVSwitch gen 3 (H100/H200): nccl-tests all_reduce_perf on one DGX H100 reports
# about 480 GB/s bus bandwidth with NVLS versus ~360-370 with rings. Each head GPU moves S·(h+1)/h
# per direction through its NVLink port (`nvls_traffic_factor`), so on 8 GPUs
# 480 = 2·7/8 · 450 GB/s · η · f · 8/9 with η = 0.85 gives f ≈ 0.81 (0.72 · 9/8: the same 8-GPU
# rate as the earlier S-per-GPU prior 0.72; prior, the kernel model fits its own). Blackwell scales
# it by NCCL's nvlsEfficiency ratio 0.74/0.85 (src/graph/tuning.cc@5067397c:139-144).
NVLS_BW_FRACTION = 0.81
NVLS_BW_FRACTION_BLACKWELL = NVLS_BW_FRACTION * 0.74 / 0.85
# The most NVLS heads (and NVLS channels of one graph) NCCL builds: NCCL_MAX_NVLS_ARITY
# (src/include/device.h@5067397c; search.cc: maxChannels = min(NCCL_MAX_NVLS_ARITY, GPUs)).
NCCL_MAX_NVLS_ARITY = 32
# NCCL's view of one GPU's NVLink for its graph search and tuner (`nccl_tuner_picks_nvls`): GB/s
# per link (src/graph/topo.h@v2.27.7-1 SM90_NVLINK_BW 20.6, SM100_NVLINK_BW 40.1) against the
# link's line rate per direction (NVLink 4: 25 GB/s, 18 links = 450 GB/s on H100/H200; NVLink 5:
# 50 GB/s, 18 links = 900 GB/s on B200/GB200/B300: NVIDIA H100 / DGX B200 datasheets), and the
# intra-node search speeds (src/graph/search.cc@v2.27.7-1 sm90SpeedArrayIntra,
# sm100SpeedArrayIntra; the same at 5067397c but for sm100's 45.0).
NCCL_NVLINK_GBPS_PER_LINK = {"hopper": 20.6, "blackwell": 40.1}
NVLINK_LINE_GBPS_PER_LINK = {"hopper": 25.0, "blackwell": 50.0}
NCCL_SPEED_ARRAY_INTRA = {
    "hopper": (60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0),
    "blackwell": (90.0, 80.0, 70.0, 60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0),
}
# NCCL src/transport/nvls.cc: NVLS channels on one node (NVLS_NCHANNELS_SM90 16,
# NVLS_NCHANNELS_SM100_NVL 24) and the default chunk (NCCL_NVLS_CHUNKSIZE 128 KiB).
NVLS_CHANNELS = {"hopper": 16, "blackwell": 24}
NVLS_CHUNK_BYTES = 128 * 1024
# NCCL's tree pipeline (tree_fill_s): per-protocol buffers (src/init.cc DEFAULT_LL_BUFFSIZE =
# 8 lines x 512 threads x NCCL_STEPS x 16 B, DEFAULT_LL128_BUFFSIZE = 120 x 640 x NCCL_STEPS x 8 B,
# DEFAULT_BUFFSIZE 4 MiB; v2.26.2-1 and 5067397c), NCCL_STEPS = 8 (src/include/device.h), and
# threads x per-thread bytes below which a call drops a channel (topoGetAlgoInfo:
# NCCL_LL_MAX_NTHREADS 512 x NCCL_LL_THREAD_THRESHOLD 8, NCCL_LL128_MAX_NTHREADS 640 x 8,
# NCCL_SIMPLE_MAX_NTHREADS 512 x 64).
NCCL_STEPS = 8
NCCL_BUFFER_BYTES = {"LL": 8 * 512 * 8 * 16, "LL128": 120 * 640 * 8 * 8, "Simple": 1 << 22}
TREE_THREADS_THRESHOLD = {"LL": (512, 8), "LL128": (640, 8), "Simple": (512, 64)}
# The channels a multi-node tree runs on: NCCL runs twice its search channels (sjeaugey,
# NVIDIA/nccl#1041: "Execution channels are typically 2x the search channels"), 16 on H100 nodes
# ("the default number of SMs is 16 ... Tree would require 32 SMs", NVIDIA/nccl#1649; "Trees [0]
# ... [15]" in the 2 x 8 H100 logs of NVIDIA/nccl#1357, "Channel 15/16" in #1453).
NCCL_TREE_CHANNELS = 16
# NCCL's NVLSTree all-reduce (k > 1 nodes, NVLS inside each): its bus bandwidth per NVLS channel
# on two nodes and on more, GB/s (src/graph/tuning.cc perChMaxNVLSTreeBws, index2 = nNodes <= 2 ?
# nNodes - 1 : 2; NVIDIA/nccl 5067397c). The table appeared in v2.28.3-1 (Blackwell beyond two
# nodes 43.1 there, 80.0 at 5067397c); v2.19-v2.27 price NVLSTree as nChannels x min(bwIntra,
# bwInter on two nodes, bwInter / 2 on more), no per-channel cap (tuning.cc, v2.26.2-1 line 252).
# NCCL takes busBw = nChannels x min(intraBw, interBw, this), and an NVLS graph has one channel per
# head: a GPU with a NIC of its own, at most one per GPU and at most NCCL_MAX_NVLS_ARITY = 32
# (src/include/device.h; src/graph/search.cc: "NVLS search only tries to find NIC:GPU
# combinations to compute the heads", maxChannels = min(NCCL_MAX_NVLS_ARITY, GPUs)); 8 on a DGX
# H100 (8 x 57.7 = 462, 8 x 45.5 = 364 GB/s). `_nvls_tree` takes every GPU with a NIC as a head
# (72 on an NVL72 rack, not NCCL's 32: the network stage is far from binding either way;
# docs/calibration.md "mnnvl").
NVLS_TREE_MAX_GBPS_PER_HEAD = {"hopper": (57.7, 45.5), "blackwell": (96.0, 80.0)}
# NCCL's all-to-all across nodes (grouped send/recv, PXN through the peer rail's GPU) reaches a
# smaller fraction of the NICs' line rate than its rings do when each rank has several peers
# across the network: nccl-tests alltoall_perf on 2 x 8 A100 over 8 HDR 200 Gb/s rails, NCCL
# 2.17.1 (microsoft/mscclpp docs/performance-ndmv4.md @7f3f3669, "2 nodes, 8 gpus/node"): 37.80
# (1 GiB) and 37.81 GB/s (4 GiB) busbw = algbw x 15/16, with half of each rank's bytes crossing
# the network: 37.8 x 16/15 / 2 = 20.16 GB/s per 25 GB/s NIC, 0.806 of line rate and flat from 1
# to 4 GiB (a bandwidth, not a latency, effect), where rings on the same NICs reach Ampere's
# kernels.toml nic_bw_fraction (nccl-ib: 46-48 of 50 GB/s per NDR NIC). With one peer (same page, "2 nodes,
# 1 gpu/node") all-to-all and the ring all-gather move the same 15.48 / 15.84 GB/s: the loss comes
# with the many peer connections (8 local ranks' QPs per NIC through PXN, 128 KiB chunks each:
# NCCL_P2P_NET_CHUNKSIZE, NVIDIA/nccl src/init.cc @5067397c), which are not modelled in detail:
# the fraction is measured, and applied to the network bytes of an all-to-all whose ranks have
# more than one peer across the network (not to DeepEP / HybridEP: network/model.py).
A2A_NET_LINE_FRACTION = 37.8 * 16 / 15 / 2 / 25.0  # 0.806 of line rate, the 2 x 8 A100 row
A2A_NET_MEASURED_ARCH = "ampere"


@lru_cache(maxsize=1)
def alltoall_net_fraction() -> float:
    """NCCL's all-to-all network bytes relative to a ring's rate on the same NICs: the measured
    line-rate fraction over the ring's fraction on the architecture it was measured on."""
    from ..kernel_catalog import nic_bw_fraction

    return A2A_NET_LINE_FRACTION / nic_bw_fraction(A2A_NET_MEASURED_ARCH)


# tuning.cc (v2.19+) llMaxBws: the LL protocol's bus bandwidth ceiling in GB/s on one node, two
# nodes, more nodes, per GPU generation (Blackwell = 2x Hopper); ring LL busBw = min(cap, 0.5 busBw),
# tree LL busBw = min(cap, busBw / 3.8).
LL_MAX_GBPS = {
    "volta": (39.0, 39.0, 20.4),
    "ampere": (87.7, 22.5, 19.0),
    "hopper": (141.0, 45.0, 35.0),
    "blackwell": (2 * 141.0, 2 * 45.0, 2 * 35.0),
}
TREE_LL_BW_FRACTION = 1.0 / 3.8


def gpu_generation(gpu_name: str) -> str:
    """NCCL's tuning tables are per compute capability; map our GPU catalog names onto them."""
    name = gpu_name.lower()
    if name.startswith("v100"):
        return "volta"
    if name.startswith("a100") or name.startswith("a800"):
        return "ampere"
    if name.startswith(("b", "gb")):
        return "blackwell"
    return "hopper"


MAX_SAMPLED_NODES = 16  # nodes inspected for NIC sharing (exact for periodic placements)
MAX_SAMPLED_UNITS = 4  # scalable units inspected for leaf-uplink sharing
SCOPES = ("node", "leaf", "spine")


# ----------------------------------------------------------------------------- links
@dataclass(frozen=True, slots=True)
class Links:
    """Achieved per-direction bandwidths (η applied), the topology's send/recv hop latencies and
    NCCL's collective latency model of a cluster."""

    intra_bytes_per_s: float
    nic_bytes_per_s: float
    uplink_bytes_per_s: float
    pod_uplink_bytes_per_s: float
    rail_only: bool
    intra_latency_s: float
    inter_latency_s: float
    intra_name: str
    nvlink: bool
    nvls: bool
    nvls_fraction: float
    ll_max_bytes_per_s: tuple[float, float, float]  # LL ceiling on 1, 2, >2 nodes
    # NVLSTree's bus-bandwidth ceiling per head on 2 and on more nodes (0: no NVLSTree)
    nvls_tree_max_bytes_per_s: tuple[float, float] = (0.0, 0.0)
    # NCCL's bandwidth ramp (see `ramp_s`): bytes per step up to which the ring's / NVLS's extra
    # pipeline-fill time grows; 0 = not modelled (training jobs; `mfusim kernel` sets them)
    ring_window_bytes: float = 0.0
    # NVLS chunk schedule (`nvls_time_s`): fixed cost of one chunk, in bytes at the NVLS rate;
    # None = not modelled (training jobs; `mfusim kernel` sets it)
    nvls_chunk_overhead_bytes: float | None = None
    nvls_channels: int = 16
    # an all-reduce ring's extra time beyond its pipeline fill: that many chunk-times S/n at the
    # ring's rate (0 = off), fitted on all-reduce ring sweeps (kernels.toml); not charged to
    # reduce-scatter, whose nccl-tests sweep shows none (collective_candidates)
    reduce_tail_chunks: float = 0.0
    # NCCL's all-to-all across nodes: its NIC / uplink bytes at this fraction of a ring's rate
    p2p_net_fraction: float = field(default_factory=alltoall_net_fraction)
    # NCCL's latency model of collectives (tuning.cc; kernels.toml [nccl_latency])
    nccl: NcclLatency = field(default_factory=NcclLatency.of)
    # NCCL's own NVLink bandwidth of one GPU (GB/s, links x SM90/SM100_NVLINK_BW) and its search
    # speeds, for its tuner's ring-or-NVLS choice on one node (`nccl_tuner_picks_nvls`); 0 / ():
    # not described, the model's fastest candidate is taken
    nccl_nvlink_gbps: float = 0.0
    nccl_speeds_intra: tuple[float, ...] = ()

    @property
    def intra_hw(self) -> str:
        """NCCL's hop class inside a node: NVLink, or PCI (tuning.cc intraHw)."""
        return "nvlink" if self.nvlink else "pci"

    @classmethod
    def of(
        cls,
        fabric: Fabric,
        nccl_bw_fraction: float,
        nic_bw_fraction: float | None = None,
        ring_window_bytes: float = 0.0,
        nvls_chunk_overhead_bytes: float | None = None,
        nvls_fraction: float | None = None,
        reduce_tail_chunks: float = 0.0,
        nccl_latency: NcclLatency | None = None,
    ) -> Links:
        """`nic_bw_fraction` (default `nccl_bw_fraction`) applies to NICs and uplinks;
        `nvls_fraction` (default NVLS_BW_FRACTION, Blackwell scaled) to NVLS all-reduce."""
        topo = fabric.topology
        eta = nccl_bw_fraction
        eta_net = eta if nic_bw_fraction is None else nic_bw_fraction
        generation = gpu_generation(topo.gpu.name)
        fabric_name = topo.intra_node.fabric
        return cls(
            intra_bytes_per_s=fabric.intra_bandwidth_bytes_per_s * eta,
            nic_bytes_per_s=fabric.nic_bandwidth_bytes_per_s * eta_net,
            uplink_bytes_per_s=fabric.leaf_uplink_bytes_per_s * eta_net,
            pod_uplink_bytes_per_s=fabric.pod_uplink_bytes_per_s * eta_net,
            rail_only=fabric.rail_only,
            intra_latency_s=topo.intra_node.latency_s,
            inter_latency_s=topo.inter_node.latency_s,
            intra_name="pcie" if fabric_name == "pcie" else "nvlink",
            nvlink=fabric_name != "pcie",
            nvls=topo.intra_node.nvls and fabric_name == "nvswitch",
            nvls_fraction=nvls_fraction
            if nvls_fraction is not None
            else (NVLS_BW_FRACTION_BLACKWELL if generation == "blackwell" else NVLS_BW_FRACTION),
            ll_max_bytes_per_s=tuple(x * 1e9 for x in LL_MAX_GBPS[generation]),  # type: ignore[arg-type]
            nvls_tree_max_bytes_per_s=tuple(  # type: ignore[arg-type]
                x * 1e9 for x in NVLS_TREE_MAX_GBPS_PER_HEAD.get(generation, (0.0, 0.0))
            ),
            ring_window_bytes=ring_window_bytes,
            nvls_chunk_overhead_bytes=nvls_chunk_overhead_bytes,
            nvls_channels=NVLS_CHANNELS.get(generation, 16),
            reduce_tail_chunks=reduce_tail_chunks,
            nccl=nccl_latency if nccl_latency is not None else NcclLatency.of(),
            nccl_nvlink_gbps=round(
                fabric.intra_bandwidth_bytes_per_s / 1e9 / NVLINK_LINE_GBPS_PER_LINK[generation]
            )
            * NCCL_NVLINK_GBPS_PER_LINK[generation]
            if generation in NCCL_NVLINK_GBPS_PER_LINK and fabric_name == "nvswitch"
            else 0.0,
            nccl_speeds_intra=NCCL_SPEED_ARRAY_INTRA.get(generation, ()),
        )

    def ll_cap_bytes_per_s(self, num_nodes: int) -> float:
        return self.ll_max_bytes_per_s[min(num_nodes, 3) - 1]


# ----------------------------------------------------------------------------- group shapes
@dataclass(frozen=True, slots=True)
class UnitLoad:
    """One scalable unit the group crosses out of, on an oversubscribed fabric."""

    weight: float  # Σ over concurrent groups leaving this SU on the group's busiest leaf of 1/rails
    tree_crossings: int  # double-binary-tree edges with exactly one end in this SU
    members: int  # the group's ranks in this SU


@dataclass(frozen=True, slots=True)
class GroupShape:
    axis: str
    size: int  # n
    num_nodes: int  # k
    members_per_node: int  # m (the largest count on one node)
    nics_per_node: int  # u (the fewest distinct NICs the group uses on one of its nodes)
    scope: str  # node | leaf | spine
    nic_load: float  # Σ over groups sharing the busiest NIC of 1/u_G (1/u when alone); 0 in-node
    units: tuple[UnitLoad, ...] = ()  # empty unless oversubscribed leaf uplinks are crossed
    pods: tuple[UnitLoad, ...] = ()  # the same one tier up: oversubscribed spine -> core uplinks

    @property
    def description(self) -> str:
        return f"{self.axis} n={self.size} on {self.num_nodes} node(s), {self.scope}"


def _sample(items: list[int], limit: int) -> list[int]:
    if len(items) <= limit:
        return items
    step = (len(items) - 1) / (limit - 1)
    return sorted({items[round(i * step)] for i in range(limit)})


def double_binary_tree_edges(k: int) -> list[tuple[int, int]]:
    """(child, parent) edges of NCCL's two complementary in-order binary trees over k nodes.

    NCCL src/graph/trees.cc (ncclGetBtree / ncclGetDtree): in tree 0 rank r's parent flips r's
    lowest set bit b and sets the next one, (r ^ b) | (b << 1), or just r ^ b when that is out of
    range; tree 1 is tree 0 mirrored (r -> k-1-r) for even k, shifted by one for odd k.
    """
    parent = [-1] * k
    for r in range(1, k):
        b = r & -r
        up = (r ^ b) | (b << 1)
        parent[r] = up if up < k else r ^ b
    edges = [(r, parent[r]) for r in range(1, k)]
    if k % 2 == 0:
        edges += [(k - 1 - r, k - 1 - parent[r]) for r in range(1, k)]
    else:
        edges += [((r + 1) % k, (parent[r] + 1) % k) for r in range(1, k)]
    return edges


def analyze_group(
    fabric: Fabric, placement: Placement, axis: str, stage: int, rank: int | None = None
) -> GroupShape:
    """Shape of the group of `axis` at `stage` that holds `rank` (default: the representative
    pipeline's), with its concurrent groups' load."""
    members = placement.group(axis, stage) if rank is None else placement.members(axis, rank)
    n = len(members)
    gpn = fabric.gpus_per_node
    per_node: dict[int, set[int]] = {}
    count: dict[int, int] = {}
    for r in members:
        j = r // gpn
        per_node.setdefault(j, set()).add(fabric.nic_of(r))
        count[j] = count.get(j, 0) + 1
    nodes = sorted(per_node)
    k = len(nodes)
    m = max(count.values())
    u = min(len(s) for s in per_node.values())
    scope = fabric.scope(members)
    if k == 1:
        return GroupShape(axis, n, 1, m, u, scope, 0.0)
    rep = members[0]
    num_gpus = fabric.num_gpus
    same_stage = axis != "pp"  # concurrent groups: this stage's (a pp group spans all stages)

    # NIC sharing: every group of this axis and stage that leaves its node sends its node's
    # share through its own NICs there; the representative finishes when its busiest NIC does.
    nic_load = 0.0
    for j in _sample(nodes, MAX_SAMPLED_NODES):
        rails_of: dict[int, set[int]] = {}
        for local in range(gpn):
            r = j * gpn + local
            if r >= num_gpus:
                break
            if same_stage and placement.stage_of(r) != stage:
                continue
            first, last = placement.group_bounds(axis, r)
            if first // gpn == last // gpn:
                continue
            rails_of.setdefault(first, set()).add(fabric.nic_of_local(local))
        load: dict[int, float] = {}
        for rails in rails_of.values():
            for q in rails:
                load[q] = load.get(q, 0.0) + 1.0 / len(rails)
        nic_load = max(nic_load, max(load[q] for q in rails_of[rep]))

    units: list[UnitLoad] = []
    if scope == "spine" and fabric.topology.inter_node.oversubscription > 1.0:
        units = _unit_loads(fabric, placement, axis, stage, nodes, count, rep, fabric.nodes_per_leaf)
    pods: list[UnitLoad] = []
    if fabric.pods_oversubscribed and len({fabric.pod_of_node(j) for j in nodes}) > 1:
        pods = _unit_loads(fabric, placement, axis, stage, nodes, count, rep, fabric.nodes_per_pod)
    return GroupShape(axis, n, k, m, u, scope, nic_load, tuple(units), tuple(pods))


def _unit_loads(
    fabric: Fabric,
    placement: Placement,
    axis: str,
    stage: int,
    nodes: list[int],
    count: dict[int, int],
    rep: int,
    npl: int,
) -> list[UnitLoad]:
    """Load on the uplinks of the units (scalable units, or pods) of `npl` nodes the group
    crosses out of."""
    gpn = fabric.gpus_per_node

    def unit_of(node: int) -> int:
        return node // npl

    same_stage = axis != "pp"
    unit_members: dict[int, int] = {}
    for j in nodes:
        s = unit_of(j)
        unit_members[s] = unit_members.get(s, 0) + count[j]
    crossings: dict[int, int] = {}
    for a, b in double_binary_tree_edges(len(nodes)):
        sa, sb = unit_of(nodes[a]), unit_of(nodes[b])
        if sa != sb:
            crossings[sa] = crossings.get(sa, 0) + 1
            crossings[sb] = crossings.get(sb, 0) + 1
    out = []
    for s in _sample(sorted(unit_members), MAX_SAMPLED_UNITS):
        leaves_of: dict[int, set[int]] = {}
        for j in range(s * npl, min((s + 1) * npl, fabric.num_nodes)):
            for local in range(gpn):
                r = j * gpn + local
                if r >= fabric.num_gpus:
                    break
                if same_stage and placement.stage_of(r) != stage:
                    continue
                first, last = placement.group_bounds(axis, r)
                if unit_of(first // gpn) == unit_of(last // gpn):
                    continue
                leaves_of.setdefault(first, set()).add(fabric.leaf_rail_of_local(local))
        load: dict[int, float] = {}
        for leaves in leaves_of.values():
            for q in leaves:
                load[q] = load.get(q, 0.0) + 1.0 / len(leaves)
        weight = max(load[q] for q in leaves_of[rep])
        out.append(UnitLoad(weight, crossings.get(s, 0), unit_members[s]))
    return out


@dataclass(frozen=True, slots=True)
class P2PShape:
    """Worst sender of a send/recv pattern (pp: stage -> stage+1; other axes: one ring step)."""

    axis: str
    seconds_per_byte: float  # η applied
    latency_s: float
    bottleneck: str
    scope: str


def analyze_p2p(fabric: Fabric, placement: Placement, links: Links, axis: str, stage: int) -> P2PShape:
    """All ranks of the stage send at once (every replica), so NICs and uplinks are shared."""
    gpn = fabric.gpus_per_node
    rep = placement.representative_rank(stage)
    if axis == "pp":
        st, sc = placement.stride("tp"), placement.stride("cp")
        senders = sorted(rep + i * st + j * sc for i in range(placement.tp) for j in range(placement.cp))
    else:
        senders = list(placement.members(axis, rep))
    over = fabric.topology.inter_node.oversubscription > 1.0
    nic_cache: dict[int, dict[int, int]] = {}
    unit_cache: dict[int, dict[int, int]] = {}

    def crosses_node(r: int) -> bool:
        return r // gpn != placement.next_rank(axis, r) // gpn

    def crosses_unit(r: int) -> bool:
        return fabric.unit_of_node(r // gpn) != fabric.unit_of_node(placement.next_rank(axis, r) // gpn)

    def nic_counts(j: int) -> dict[int, int]:
        if j not in nic_cache:
            c: dict[int, int] = {}
            for local in range(gpn):
                r = j * gpn + local
                if r < fabric.num_gpus and placement.stage_of(r) == stage and crosses_node(r):
                    q = fabric.nic_of_local(local)
                    c[q] = c.get(q, 0) + 1
            nic_cache[j] = c
        return nic_cache[j]

    pods = fabric.pods_oversubscribed
    pod_cache: dict[int, dict[int, int]] = {}

    def crosses_pod(r: int) -> bool:
        return fabric.pod_of_node(r // gpn) != fabric.pod_of_node(placement.next_rank(axis, r) // gpn)

    def rail_counts(
        cache: dict[int, dict[int, int]], nodes_per_group: int, crosses: Callable[[int], bool], s: int
    ) -> dict[int, int]:
        """Senders of this stage per rail leaving node group `s` (a leaf unit or a pod of
        `nodes_per_group` nodes): they share that group's uplinks."""
        if s not in cache:
            c: dict[int, int] = {}
            first, stop = s * nodes_per_group * gpn, min((s + 1) * nodes_per_group * gpn, fabric.num_gpus)
            for r in range(first, stop):
                if placement.stage_of(r) == stage and crosses(r):
                    q = fabric.leaf_rail_of_local(r % gpn)
                    c[q] = c.get(q, 0) + 1
            cache[s] = c
        return cache[s]

    worst = (0.0, 0.0, links.intra_name)
    scope = "node"
    for r in _sample(senders, MAX_SAMPLED_NODES):
        dst = placement.next_rank(axis, r)
        if dst == r:
            continue
        if r // gpn == dst // gpn:
            cand = (1.0 / links.intra_bytes_per_s, links.intra_latency_s, links.intra_name)
        else:
            nic = nic_counts(r // gpn)[fabric.nic_of(r)]
            spb, name = nic / links.nic_bytes_per_s, "nic"
            rail = fabric.leaf_rail_of_local(r % gpn)
            if over and crosses_unit(r):
                unit = fabric.unit_of_node(r // gpn)
                up = rail_counts(unit_cache, fabric.nodes_per_leaf, crosses_unit, unit)[rail]
                if up / links.uplink_bytes_per_s > spb:
                    spb, name = up / links.uplink_bytes_per_s, "leaf-uplink"
            if pods and crosses_pod(r):
                pod = fabric.pod_of_node(r // gpn)
                up = rail_counts(pod_cache, fabric.nodes_per_pod, crosses_pod, pod)[rail]
                if up / links.pod_uplink_bytes_per_s > spb:
                    spb, name = up / links.pod_uplink_bytes_per_s, "pod-uplink"
            cand = (spb, links.inter_latency_s, name)
        scope = max(scope, fabric.scope([r, dst]), key=SCOPES.index)
        if (cand[0], cand[1]) > (worst[0], worst[1]):
            worst = cand
    return P2PShape(axis, worst[0], worst[1], worst[2], scope)


# ----------------------------------------------------------------------------- costing
@dataclass(frozen=True, slots=True)
class Candidate:
    time_s: float
    algorithm: str
    bottleneck: str
    bandwidth_time_s: float
    # False: NCCL's tuner would not pick it here (`nccl_tuner_picks_nvls`); still costed, for
    # NCCL_ALGO forcing it
    nccl_choice: bool = True


def _inter_time(
    shape: GroupShape, links: Links, node_bytes: float, crossing: Callable[[UnitLoad], float]
) -> tuple[float, str]:
    """Bytes leaving each node through its NICs (shared by concurrent groups), and leaving each
    oversubscribed scalable unit through its leaf uplinks."""
    t_nic = node_bytes * shape.nic_load / links.nic_bytes_per_s
    t_up = max((u.weight * crossing(u) / links.uplink_bytes_per_s for u in shape.units), default=0.0)
    t_pod = max((u.weight * crossing(u) / links.pod_uplink_bytes_per_s for u in shape.pods), default=0.0)
    return max((t_nic, "nic"), (t_up, "leaf-uplink"), (t_pod, "pod-uplink"), key=lambda x: x[0])


def ramp_s(
    steps: int,
    piece_bytes: float,
    window_bytes: float,
    seconds_per_byte: float,
    network_hops: int | None = None,
    intra_seconds_per_byte: float = 0.0,
) -> float:
    """NCCL's bandwidth ramp, as nccl-tests sweeps show it (azure-bench in kernels.toml): below
    about a gigabyte the achieved bus bandwidth stays well under its plateau by more than the
    latency explains; the time in excess of latency + bytes / bandwidth grows with the message
    and saturates (A100 ring: ~40 us at 1 MB, ~170 us from 32 MB on). Modelled as a pipeline
    fill: the first piece of each rank's share (S/n, at most `window_bytes` = NCCL's bytes in
    flight per step over all channels) crosses steps - 1 hops before the pipeline streams.

    A fill is the sum of its stages' times, each at its own link's rate: with `network_hops`
    given (a ring across nodes), only that many of the steps - 1 hops cross the network at the
    bottleneck's `seconds_per_byte`; the rest are NVLink hops inside a node at
    `intra_seconds_per_byte` (NCCL's ring order visits a node's m GPUs over NVLink before
    leaving it through a NIC: 2(k-1) of the 2(n-1) all-reduce steps cross the network,
    src/graph/tuning.cc nInterSteps). Without `network_hops` every hop runs at
    `seconds_per_byte` (one node: every hop is the same link). 0 when the window is 0."""
    if window_bytes <= 0 or steps <= 1:
        return 0.0
    piece = min(piece_bytes, window_bytes)
    hops = steps - 1
    if network_hops is None:
        return hops * piece * seconds_per_byte
    net = min(network_hops, hops)
    return piece * (net * seconds_per_byte + (hops - net) * intra_seconds_per_byte)


def tree_channels(size_bytes: float, p: Protocol) -> int:
    """The channels NCCL runs a tree call on (src/enqueue.cc topoGetAlgoInfo, v2.26.2-1 and
    5067397c): NCCL_TREE_CHANNELS, one fewer while the message is under channels x threads x
    the protocol's per-thread threshold (src/include/device.h, src/graph/tuning.cc
    threadThresholds: LL 512 threads x 8 B, LL128 640 x 8 B, Simple 512 x 64 B)."""
    threads, threshold = TREE_THREADS_THRESHOLD[p.name]
    nc = NCCL_TREE_CHANNELS
    while nc >= 2 and size_bytes < nc * threads * threshold:
        nc -= 1
    return nc


def tree_chunk_bytes(p: Protocol, size_bytes: float, channels: int, n: int, k: int) -> int:
    """NCCL's tree chunk (src/enqueue.cc calcCollChunking, v2.26.2-1 and 5067397c): a step of
    the protocol's buffer (buffSize / NCCL_STEPS; one step per chunk on a tree), LL's half of
    it, LL128's 120 of 128 bytes; LL128 halves it (not below 128 KiB) while a channel's share
    holds fewer than nstepsLL128 x 64 / ppn chunks, then (not below 32 KiB) fewer than
    nstepsLL128 x 16 / ppn, with nstepsLL128 = 1 + floor(log2 k) + 0.1 ppn (integer
    division of the bytes, as NCCL's)."""
    c = NCCL_BUFFER_BYTES[p.name] // NCCL_STEPS
    if p.name == "LL":
        return c // 2
    if p.name == "Simple":
        return c
    c = c // 16 * 15
    ppn = n / k
    steps = 1 + _log2i(k) + 0.1 * ppn
    per_channel = int(size_bytes) // channels
    while per_channel // c < steps * 64 / ppn and c > 131072:
        c //= 2
    while per_channel // c < steps * 16 / ppn and c > 32768:
        c //= 2
    return c


def tree_fill_s(
    p: Protocol, size_bytes: float, n: int, k: int, intra_seconds_per_byte: float, net_seconds_per_byte: float
) -> float:
    """A multi-node tree all-reduce's pipeline fill: NCCL's tree kernel (src/device/all_reduce.h
    runTreeSplit) streams chunk after chunk up the tree (reduce) and down it (broadcast) at
    once, every channel a chunk at a time, so the first piece (a chunk per channel,
    `tree_channels` x `tree_chunk_bytes`, at most the message) crosses all 2((m-1) +
    floor(log2 k)) hops of NCCL's tree (the chain of a node's m GPUs over NVLink, then
    floor(log2 k) network levels; the depth NCCL's latency model counts, tuning.cc) before the
    last one streams: the fill is the other hops' time for that piece, each at its own link's
    rate (as `ramp_s` does for a ring).

    Only Simple stores and forwards whole chunks on every hop (src/device/prims_simple.h: a
    receiver waits for the step's tail before it forwards). LL and LL128 carry a flag in every
    line and forward each warp's slice as soon as its lines arrive (prims_ll128.h GenericOp /
    recvReduceSendCopy, prims_ll.h), so their NVLink hops add only NCCL's per-hop latency
    (tuning.cc, in `NcclLatency.tree_s`); what still moves chunk by chunk is the network hop,
    whose proxy posts a step once the GPU has written it (src/proxy.cc, transport/net.cc): for
    LL / LL128 the pipeline is the 2 floor(log2 k) network hops."""
    if size_bytes <= 0 or k < 2:
        return 0.0
    nc = tree_channels(size_bytes, p)
    piece = min(float(nc * tree_chunk_bytes(p, size_bytes, nc, n, k)), size_bytes)
    m = n // k
    net_hops = 2 * _log2i(k)
    if p.name != "Simple":
        return ramp_s(net_hops, piece, piece, net_seconds_per_byte)
    hops = 2 * (m - 1) + net_hops
    return ramp_s(
        hops,
        piece,
        piece,
        net_seconds_per_byte,
        network_hops=net_hops,
        intra_seconds_per_byte=intra_seconds_per_byte,
    )


def nvls_chunk_bytes(size_bytes: float, concurrent_ops: int) -> int:
    """NCCL's NVLS chunk for a message (src/enqueue.cc, calcCollChunking, the same in 2.18):
    128 KiB, halved to 64 KiB below 64 x ops x chunk, 32 KiB below 8 x, 16 KiB below 2 x, with
    ops = NVLS channels x heads (ranks on the switch) working at once."""
    c = NVLS_CHUNK_BYTES
    if size_bytes < 64 * concurrent_ops * c:
        c = 65536
    if size_bytes < 8 * concurrent_ops * c:
        c = 32768
    if size_bytes < 2 * concurrent_ops * c:
        c = 16384
    return c


def nvls_time_s(links: Links, n: int, size_bytes: float) -> float:
    """NVLS all-reduce inside one NVSwitch domain: the switch reduces (multimem.ld_reduce) and
    multicasts (multimem.st), each GPU moving S once at B = NVLink rate x `nvls_fraction`.

    With `nvls_chunk_overhead_bytes` (kernel model): NCCL cuts the message into chunks of
    `nvls_chunk_bytes`, each costing a fixed overhead worth c0 bytes (its flag/barrier round trip
    through the switch), so the streaming rate is B / (1 + c0/c); and the reduce and broadcast
    stages fill a pipeline of one round of chunks, 2 x ops x c / B, of which a message smaller than
    the round pays its share S / (S + ops x c). Reproduces nccl-tests' NVLS sweeps on 8 H100/H200
    (azure-bench, kernels.toml) from 1 MiB up: the bandwidth climbs in steps at NCCL's chunk sizes.

    Monotone in the message size: just above a chunk threshold the larger chunk's lower overhead
    would make the call up to ~3% *faster* than one just below it (8 H100: 4,181 us at 1.069 GB,
    4,054 us at 1.081 GB). The published sweeps are at powers of two and cannot show such a drop,
    and a longer message never finishing sooner is the contract every cost here keeps (DESIGN.md
    invariants), so the time is held at the threshold's until the larger chunk catches up
    (`nvls_threshold_floor_s`)."""
    stream, fill = nvls_stream_fill_s(links, n, size_bytes)
    return links.nccl.nvls_s + max(stream + fill, nvls_threshold_floor_s(links, n, size_bytes))


def nvls_chunk_thresholds(concurrent_ops: int) -> tuple[tuple[float, int], ...]:
    """(size, chunk used just below it) at each step of `nvls_chunk_bytes`: 16 -> 32 KiB at
    2 x ops x 32 KiB, 32 -> 64 KiB at 8 x ops x 64 KiB, 64 -> 128 KiB at 64 x ops x 128 KiB."""
    ops = concurrent_ops
    return ((2 * ops * 32768, 16384), (8 * ops * 65536, 32768), (64 * ops * NVLS_CHUNK_BYTES, 65536))


def nvls_threshold_floor_s(links: Links, n: int, size_bytes: float) -> float:
    """The slowest one-node NVLS time (less latency) at any chunk threshold at or below
    `size_bytes`, with the smaller chunk NCCL uses just below it; 0 without the chunk model."""
    if links.nvls_chunk_overhead_bytes is None:
        return 0.0
    floor = 0.0
    for threshold, chunk in nvls_chunk_thresholds(links.nvls_channels * n):
        if threshold <= size_bytes:
            floor = max(floor, sum(nvls_stream_fill_s(links, n, threshold, chunk)))
    return floor


def nvls_tree_chunk_bytes(size_bytes: float, concurrent_ops: int, num_nodes: int) -> int:
    """NCCL's NVLSTree chunk for a message (src/enqueue.cc calcCollChunking, NCCL_ALGO_NVLS_TREE;
    the same rule in v2.26.2-1 and 5067397c): NCCL_NVLS_CHUNKSIZE (128 KiB), at most
    nvlsTreeMaxChunkSize (64 KiB on 4 or more nodes, else the chunk: src/transport/nvls.cc
    ncclNvlsTuning), then 64 KiB below 4 x ops x chunk and 32 KiB below 1 x ops x chunk, with
    ops = NVLS channels x heads working at once. (Its 256 / 128 KiB steps only cut larger
    chunks.)"""
    c = min(NVLS_CHUNK_BYTES, 65536 if num_nodes >= 4 else NVLS_CHUNK_BYTES)
    if size_bytes < 32 * concurrent_ops * c and c > 262144:
        c = 262144
    if size_bytes < 16 * concurrent_ops * c and c > 131072:
        c = 131072
    if size_bytes < 4 * concurrent_ops * c and c > 65536:
        c = 65536
    if size_bytes < concurrent_ops * c and c > 32768:
        c = 32768
    return c


def nvls_traffic_factor(heads: int) -> float:
    """Bytes one NVLS head GPU moves through its NVLink port per direction, per byte of the
    message: (h + 1) / h with h heads (min(ranks, NCCL_MAX_NVLS_ARITY) in one node, every GPU
    pulling: search.cc "Force intra-node NVLS algorithm to pull evenly from all GPUs").

    NCCL's NVLS all-reduce (src/device/all_reduce.h@5067397c, RunWorkColl<..., NCCL_ALGO_NVLS,
    NCCL_PROTO_SIMPLE>, without user-buffer registration as nccl-tests runs it): the scatter and
    gather warps copy between the user buffers and the GPU's own NVLS buffer in local memory; each
    head's reduce warps ld_reduce its 1/h of every loop through the multicast address and st it
    back (directRecvDirectSend on nvls->down). The switch reads a head's share from every member,
    the requesting GPU included, so a GPU's port sends S (its buffer, to all h reductions) plus the
    S/h it multicasts, and receives the S/h its reduction returns plus the S that all h heads'
    multicasts write. NCCL's own graph search charges the same: ncclTopoSearchTryNvls
    (src/graph/search.cc@5067397c:410-440) takes the channel's bandwidth once on every GPU's
    NVS->GPU and GPU->NVS path and twice on the head's, one channel per head, so a port's
    per-channel bandwidth is at most its NVLink rate / (h + 1). The algbw therefore falls with the
    rank count as h / (h + 1): nccl-tests NVLS busbw 370 / 420 / 440 / 460 / 480 GB/s on 4 / 5 / 6 /
    7 / 8 H100 (NVIDIA/nccl#1455; 2(n-1)/(n+1) gives 370 / 411 / 441 / 463 / 480 from the 8-GPU
    figure)."""
    if heads < 1:
        raise ValueError(f"NVLS needs at least one head, got {heads}")
    return (heads + 1) / heads


def nvls_heads(ranks_on_switch: int) -> int:
    """NCCL's NVLS heads on one switch domain: one per GPU, at most NCCL_MAX_NVLS_ARITY."""
    return min(ranks_on_switch, NCCL_MAX_NVLS_ARITY)


def nvls_stream_fill_s(
    links: Links, n: int, size_bytes: float, chunk_bytes: int | None = None, heads: int | None = None
) -> tuple[float, float]:
    """`nvls_time_s` less its latency, as (streaming time, pipeline fill); fill 0 without the
    chunk model. `chunk_bytes`: NCCL's chunk when not the one-node NVLS schedule's
    (`nvls_chunk_bytes`; NVLSTree cuts its own, `nvls_tree_chunk_bytes`). `heads`: the NVLS heads
    (default `nvls_heads(n)`); a head moves `nvls_traffic_factor(heads)` x S per direction."""
    h = nvls_heads(n) if heads is None else heads
    B = links.intra_bytes_per_s * links.nvls_fraction / nvls_traffic_factor(h)
    c0 = links.nvls_chunk_overhead_bytes
    if c0 is None:
        return size_bytes / B, 0.0
    ops = links.nvls_channels * n
    c = nvls_chunk_bytes(size_bytes, ops) if chunk_bytes is None else chunk_bytes
    fill = 2 * ops * c / B * size_bytes / (size_bytes + ops * c)
    return size_bytes / B * (1 + c0 / c), fill


def collective_candidates(kind: str, shape: GroupShape, links: Links, size_bytes: float) -> list[Candidate]:
    """Every applicable (algorithm, protocol) with its time; the caller takes the fastest."""
    n, k, m = shape.size, shape.num_nodes, shape.members_per_node
    S = size_bytes
    out: list[Candidate] = []
    protocols = [p for p in PROTOCOLS if links.nvlink or not p.nvlink_only]
    a_i, a_e = links.intra_latency_s, links.inter_latency_s  # send/recv hops (all-to-all)
    nccl, hw = links.nccl, links.intra_hw
    B_i = links.intra_bytes_per_s

    ll_cap = links.ll_cap_bytes_per_s(k)

    def add(
        name: str,
        p: Protocol,
        latency: float,
        parts: list[tuple[float, str]],
        frac: float = 1.0,
        bus_bytes: float = 0.0,
    ) -> None:
        t_bw, neck = max(parts, key=lambda x: x[0])
        if name == "tree" and p.name == "LL":
            t_bw /= TREE_LL_BW_FRACTION
        else:
            t_bw /= p.bandwidth_fraction * frac
        if p.name == "LL" and bus_bytes / ll_cap > t_bw:
            t_bw, neck = bus_bytes / ll_cap, "ll-protocol"
        label = f"{name}/{p.name}"
        out.append(Candidate(latency + t_bw, label, "latency" if latency > t_bw else neck, t_bw))

    intra = links.intra_name
    if kind in ("allreduce", "allgather", "reducescatter", "broadcast"):
        # ring (NCCL: nsteps, nInterSteps)
        bf = bus_factor(kind, n)
        X = bf * S
        steps = 2 * (n - 1) if kind == "allreduce" else n - 1
        inter_steps = 2 * (k - 1) if kind == "allreduce" else k - 1
        parts = [(X / B_i if m > 1 else 0.0, intra)]
        if k > 1:
            parts.append(_inter_time(shape, links, X, lambda u: X))
        t_ring = max(x[0] for x in parts)
        fill = ramp_s(
            steps,
            S / n,
            links.ring_window_bytes,
            t_ring / X if X > 0 else 0.0,
            network_hops=inter_steps if k > 1 else None,
            intra_seconds_per_byte=1.0 / B_i,
        )
        if kind == "allreduce" and X > 0:
            # all-reduce only: nccl-tests' ring reduce-scatter on 8 H100 runs at or above all-gather
            # (NVIDIA/nccl#1047: 354 GB/s busbw at 2 GiB, 362 at 8 GiB; #1281: ~360 vs ~350), and
            # NCCL's reduce-scatter ring (src/device/reduce_scatter.h runRing, 5067397c) pipelines its
            # last recvReduceCopy chunk by chunk as all-gather does its last directRecv: no S/n tail
            fill += links.reduce_tail_chunks * (S / n) * t_ring / X
        for p in protocols:
            lat = nccl.ring_s(p, kind, n, k, hw)
            add("ring", p, lat + fill / p.bandwidth_fraction, parts, bus_bytes=X)
    if kind == "allreduce" and k > 1:
        # double binary tree: 2S per node, S/2 per tree edge and direction
        parts = [
            (2 * S / B_i if m > 1 else 0.0, intra),
            _inter_time(shape, links, 2 * S, lambda u: u.tree_crossings * S / 2),
        ]
        # pipeline fill (tree_fill_s): the first piece crosses the tree's 2((m-1) + floor(log2 k))
        # hops, NVLink hops at NVLink's rate and network hops at the NICs' (the bytes one node
        # sends per tree byte: the stream's network time per byte of its 2S)
        t_net_tree = parts[1][0]
        for p in protocols:
            fill = tree_fill_s(p, S, n, k, 1.0 / B_i, t_net_tree / (2 * S) if S > 0 else 0.0)
            f_fill = TREE_LL_BW_FRACTION if p.name == "LL" else p.bandwidth_fraction * TREE_BW_FRACTION
            lat = nccl.tree_s(p, n, k, hw) + fill / f_fill
            add("tree", p, lat, parts, TREE_BW_FRACTION, bus_bytes=2 * S)
    if kind == "allreduce" and k == 1 and links.nvls and n > 1:
        B_nvls = B_i * links.nvls_fraction / nvls_traffic_factor(nvls_heads(n))
        picks = nccl_tuner_picks_nvls(links, n, S)
        out.append(Candidate(nvls_time_s(links, n, S), "nvls/Simple", intra, S / B_nvls, picks))
    if kind == "allreduce" and k > 1 and links.nvls and min(m, shape.nics_per_node) >= 2:
        out.append(_nvls_tree(shape, links, S))
    nvls_tree = kind == "allreduce" and k > 1 and links.nvls and min(m, shape.nics_per_node) >= 2
    if kind in ("allreduce", "allgather", "reducescatter") and k > 1 and m > 1 and not nvls_tree:
        out.extend(_hierarchical(kind, shape, links, S, protocols))
    if kind in ("allgather", "reducescatter") and k > 1 and m == 1:
        X = (n - 1) / n * S

        def pat_cross(u: UnitLoad) -> float:
            # PAT's step i talks to the rank 2^i away: the steps beyond this SU's span leave it
            frac_out = 1.0 - math.log2(max(u.members, 1)) / math.log2(n)
            return u.members * X * frac_out

        # NCCL runs PAT with the Simple protocol only (tuning.cc)
        add("pat", SIMPLE, nccl.pat_s(n, k), [_inter_time(shape, links, X, pat_cross)], PAT_BW_FRACTION)
    if kind == "alltoall":
        x_intra = (m - 1) / n * S
        node_bytes = m * (n - m) / n * S
        if links.rail_only and k > 1 and m > 1:
            # no network path between rails: the bytes for peers on other rails first cross
            # NVLink to the GPU on the peer's rail (PXN), (m−1)/m of the inter-node bytes
            x_intra += (n - m) / n * S * (m - 1) / m
        parts = [(x_intra / B_i, intra)]
        if k > 1:
            t_net, neck_net = _inter_time(
                shape, links, node_bytes, lambda u: u.members * (n - u.members) / n * S
            )
            if n - m > 1:  # several peers across the network per rank (alltoall_net_fraction)
                t_net /= links.p2p_net_fraction
            parts.append((t_net, neck_net))
        # each peer's S/n goes straight to it (no forwarding hops as in a ring): a pipeline of
        # depth one, so the bandwidth ramp (ramp_s) adds one piece, at the bottleneck's rate
        t_a2a = max(x[0] for x in parts)
        fill = ramp_s(2, S / n, links.ring_window_bytes, t_a2a / ((n - 1) / n * S))
        for p in protocols:
            if p.name == "LL128":  # NCCL's p2p uses Simple, and LL below NCCL_P2P_LL_THRESHOLD
                continue
            # a grouped all-to-all is n-1 send/recv pairs scheduled in rounds (peer = rank ± i);
            # each round pays one hop: m-1 inside the node, n-m across the network
            hops = (m - 1) * a_i * nccl.p2p_ratio(p, hw) + (n - m) * a_e * nccl.p2p_ratio(p, "net")
            lat = nccl.launch_s(p) + hops
            add("p2p", p, lat + fill / p.bandwidth_fraction, parts, bus_bytes=(n - 1) / n * S)
    return out


def _nvls_tree(shape: GroupShape, links: Links, S: float) -> Candidate:
    """NCCL's NVLSTree all-reduce across k > 1 NVLS nodes (NCCL >= 2.18; Simple only): inside each
    node the switch reduces and multicasts (NVLS), each of the node's heads (a GPU with its own
    NIC) runs a double binary tree over the nodes on its share, and NCCL's kernel pipelines the
    three chunk by chunk (src/device/all_reduce.h, NVLS_TREE: scatter / reduce / tree-up /
    tree-down / broadcast warps work at once), so the slowest stage sets the rate, not their sum:
    - NVLS: each head moves S·(h+1)/h through the switch as in one node (`nvls_time_s`, less its
      latency; `nvls_traffic_factor`, the heads that the NIC count allows);
    - network: per node and direction 2S (interior in one tree, leaf in the other), S on two nodes,
      where each node is the root of one tree (tuning.cc "Handle 2 node case of NVLSTree": interBw
      x 2), through the node's NICs as the flat tree's bytes;
    - NCCL's own ceiling, heads x perChMaxNVLSTreeBw of bus bandwidth (NVLS_TREE_MAX_GBPS_PER_HEAD).
    Latency: NcclLatency.nvls_tree_s."""
    n, k, m = shape.size, shape.num_nodes, shape.members_per_node
    heads = min(m, shape.nics_per_node)
    chunk = nvls_tree_chunk_bytes(S, links.nvls_channels * heads, k)
    t_intra, fill_intra = nvls_stream_fill_s(links, m, S, chunk, heads=min(heads, NCCL_MAX_NVLS_ARITY))
    node_bytes = S if k == 2 else 2 * S
    t_net, neck_net = _inter_time(shape, links, node_bytes, lambda u: u.tree_crossings * S / 2)
    cap = heads * links.nvls_tree_max_bytes_per_s[0 if k <= 2 else 1]
    t_cap = bus_factor("allreduce", n) * S / cap if cap > 0 else 0.0
    t_bw, neck = max(
        (t_intra, links.intra_name), (t_net, neck_net), (t_cap, "nvlstree-cap"), key=lambda x: x[0]
    )
    # pipeline fill: the NVLS reduce / broadcast stages' (nvls_stream_fill_s, with NVLSTree's
    # chunk) and, as a ring's (ramp_s), the first piece of each head's share crossing the
    # 2·floor(log2 k) network hops of its tree (up, then down). That piece is one chunk per NVLS
    # channel (the head sends chunk `headRank` of each channel's loop through its own NIC:
    # src/device/all_reduce.h, NVLS_TREE), at most S/heads. Channel c runs tree c % 2
    # (src/graph/connect.cc, nvls.treeUp = treeUp[c%2]): on two nodes, where the trees are each
    # other's mirror, half the channels go up one direction of the link while the other half go up
    # the other, which is the stream's S per node and direction (against 2S beyond two nodes, where
    # an interior node takes two children's pieces), so a hop moves the piece at the stream's
    # NIC time per byte of 2S per head
    piece = min(float(links.nvls_channels * chunk), S / heads)
    fill_net = ramp_s(2 * _log2i(k) + 1, piece, piece, t_net * heads / (2 * S) if S > 0 else 0.0)
    lat = links.nccl.nvls_tree_s(k)
    t = lat + t_bw + fill_intra + fill_net
    return Candidate(t, "nvlstree/Simple", "latency" if lat > t_bw else neck, t_bw)


def _hierarchical(
    kind: str, shape: GroupShape, links: Links, S: float, protocols: list[Protocol]
) -> list[Candidate]:
    """Intra-node reduce-scatter -> inter-node collective over k nodes on m rails -> intra-node
    all-gather (for AllReduce; one intra phase for AllGather/ReduceScatter), phases in sequence."""
    k, m = shape.num_nodes, shape.members_per_node
    B_i = links.intra_bytes_per_s
    nccl, hw = links.nccl, links.intra_hw
    out = []
    intra_phases = 2 if kind == "allreduce" else 1
    # inter-node phase: m rails each run the collective over k nodes on S/m bytes
    node_bytes = (2 if kind == "allreduce" else 1) * (k - 1) / k * S
    t_ring, neck_ring = _inter_time(shape, links, node_bytes, lambda u: node_bytes)
    t_tree, neck_tree = _inter_time(shape, links, 2 * S, lambda u: u.tree_crossings * S / 2)
    # each ring phase pipelines as the flat ring does (ramp_s): m-1 steps of S/m inside the node,
    # (k-1) or 2(k-1) steps of S/(m k) across it
    W = links.ring_window_bytes
    fill_intra = ramp_s(m - 1, S / m, W, 1.0 / B_i)
    inter_steps = (2 if kind == "allreduce" else 1) * (k - 1)
    fill_inter = ramp_s(inter_steps, S / (m * k), W, t_ring / (node_bytes / m) if node_bytes > 0 else 0.0)
    for p in protocols:
        f = p.bandwidth_fraction
        # LL's bus-bandwidth ceiling applies phase by phase (one node inside, k nodes across)
        cap_1 = links.ll_cap_bytes_per_s(1) if p.name == "LL" else math.inf
        cap_k = links.ll_cap_bytes_per_s(k) if p.name == "LL" else math.inf
        intra_bw_t = max((m - 1) / m * S / (B_i * f), (m - 1) / m * S / cap_1)
        # each intra phase is a one-node ring of m ranks, the inter phase a ring (or tree) of one
        # rank per node on each rail, with NCCL's latencies of those shapes
        intra_t = intra_phases * (intra_bw_t + fill_intra / f + nccl.ring_s(p, "allgather", m, 1, hw))
        intra_label = "ring"
        if kind == "allreduce" and links.nvls:
            nvls_t = S * nvls_traffic_factor(nvls_heads(m)) / (B_i * links.nvls_fraction) + nccl.nvls_s
            if nvls_t < intra_t:
                intra_t, intra_label = nvls_t, "nvls"
        if kind == "allreduce":
            ring_t = max(t_ring / f, node_bytes / cap_k) + fill_inter / f + nccl.ring_s(p, kind, k, k, hw)
            # each rail's tree (one rank per node, S/m bytes) fills as the flat tree does
            rail_fill = tree_fill_s(p, S / m, k, k, 0.0, m * t_tree / (2 * S) if S > 0 else 0.0)
            f_fill = TREE_LL_BW_FRACTION if p.name == "LL" else f * TREE_BW_FRACTION
            tree_t = (
                max(t_tree / (f * TREE_BW_FRACTION), 2 * S / cap_k)
                + rail_fill / f_fill
                + nccl.tree_s(p, k, k, hw)
            )
            if ring_t <= tree_t:
                inter_t, inter_label, neck = ring_t, "ring", neck_ring
            else:
                inter_t, inter_label, neck = tree_t, "tree", neck_tree
        else:
            inter_t, inter_label, neck = (
                max(t_ring / f, node_bytes / cap_k) + fill_inter / f + nccl.ring_s(p, kind, k, k, hw),
                "ring",
                neck_ring,
            )
        total = intra_t + inter_t
        bottleneck = neck if inter_t >= intra_t else links.intra_name
        out.append(Candidate(total, f"hierarchical({intra_label}+{inter_label})/{p.name}", bottleneck, total))
    return out


def best(cands: list[Candidate]) -> Candidate:
    """The fastest candidate NCCL's tuner would run (`Candidate.nccl_choice`), else the fastest."""
    chosen = [c for c in cands if c.nccl_choice] or cands
    return min(chosen, key=lambda c: c.time_s)


def nccl_graph_speed(speeds: tuple[float, ...], per_gpu_gbps: float, uses_per_channel: float) -> float:
    """The per-channel bandwidth NCCL's graph search settles on: the largest of its speeds whose
    channels fit the GPU's NVLink (`uses_per_channel` x speed <= its NCCL bandwidth; search.cc
    ncclTopoCompute lowers the speed until a solution is found)."""
    fits = [v for v in speeds if uses_per_channel * v <= per_gpu_gbps]
    return max(fits) if fits else 0.0


def nccl_tuner_picks_nvls(links: Links, n: int, size_bytes: float) -> bool:
    """Whether NCCL's tuner runs NVLS rather than a ring for an all-reduce of n ranks on one
    NVSwitch node (src/graph/tuning.cc@v2.27.7-1:267-276, 324; it takes the fastest by its
    own model, time = latency + size / algBw, not by what the kernels then reach):
    - NVLS: its graph has one channel per head (all n GPUs, at most 32), each GPU's NVLink path
      charged (n + 1) x the channel's speed (search.cc ncclTopoSearchTryNvls, the head's twice),
      so speed = the largest search speed <= NVLink / (n + 1); busBw = channels x speed and
      algBw = busBw x 5/6.
    - ring (Simple): as many channels as fit at a search speed, busBw = channels x speed (the
      largest product over the speeds the search tries, down to 0.49 of its first: search.cc
      "Decrease bw until we find a solution", speedArray[i+1] / bwInter > .49), algBw = busBw x
      n / (2(n - 1)).
    On 4 H100/H200 NVLS prices at 4 x 60 x 5/6 = 200 GB/s algbw (60: the sm90 array's top,
    370.8 / 5 = 74) against a ring's 360 x 4/6 = 240, so NCCL picks ring there (mle-net: 4 of 8
    H200, ring, identical with NVLS off) and NVLS from 5 ranks; on B200, ring at 4 and 5, NVLS
    from 6 (mle-net: p6-b200, NCCL 2.27.7). From v2.28.3 NCCL prices NVLS as channels x speed x
    nvlsEfficiency x (channels - 1)/channels x 2 x n / (2(n - 1)) instead (tuning.cc@5067397c:
    307-323): the same choice on Hopper at 2-8 ranks, ring at 6 B200 (docs/calibration.md
    "kstream"). Without NCCL's NVLink description (`Links.nccl_nvlink_gbps` 0) NVLS is kept."""
    L, speeds = links.nccl_nvlink_gbps, links.nccl_speeds_intra
    if L <= 0 or not speeds:
        return True
    h = nvls_heads(n)
    v_nvls = nccl_graph_speed(speeds, L, h + 1)
    if v_nvls <= 0:
        return False
    alg_nvls = h * v_nvls * 5.0 / 6.0
    fitting = [v for v in speeds if v <= L]
    window = [v for v in fitting if v > 0.49 * fitting[0]] if fitting else []
    ring_bus = max((math.floor(L / v) * v for v in window), default=0.0)
    alg_ring = ring_bus * n / (2 * (n - 1))
    hw = links.intra_hw
    # NCCL's time: latency (us) + bytes / (1000 x algBw in GB/s), i.e. seconds here
    t_nvls = links.nccl.nvls_s + size_bytes / (alg_nvls * 1e9)
    t_ring = (
        links.nccl.ring_s(SIMPLE, "allreduce", n, 1, hw) + size_bytes / (alg_ring * 1e9)
        if alg_ring > 0
        else math.inf
    )
    return t_nvls <= t_ring
