"""What Megatron-Core's MoE token dispatchers send over expert parallelism, and how fast the
DeepEP / HybridEP kernels move it (issue 13).

* `alltoall`: NCCL. The dispatcher permutes one copy of a token per chosen expert before the
  all-to-all (Megatron-Core moe/token_dispatcher.py, MoEAlltoAllTokenDispatcher:
  `permute(hidden_states, routing_map)`), so a token routed to two experts of one rank crosses
  the fabric twice.
* `allgather`: NCCL. MoEAllGatherTokenDispatcher all-gathers every token of the TP x EP group to
  every rank and reduce-scatters the outputs back, whatever the routing.
* `deepep` / `hybridep` (`--moe-token-dispatcher-type flex`): the communication kernel does the
  global permute itself and sends a token once per destination *rank* (Megatron-LM
  docs/discussions/deepseek-v3-gb200-optimization at eb0783b6d3, §2.1.1: the flex dispatcher
  "fuses the global permute into the communication kernel, eliminating the need to explicitly copy
  the tokens top-k times"); across nodes, once per destination *node* over RDMA, then forwarded
  over NVLink to the ranks there (DeepSeek-V3, arXiv 2412.19437 §3.2.1: "each token ... will be
  transmitted via IB to the GPUs with the same in-node index on its target nodes ... instantly
  forwarded via NVLink to specific GPUs that host their target experts"; HybridEP: "no redundant
  communication during data distribution", same Megatron-LM guide §2.5; its buffers show it,
  DeepEP hybrid-ep branch docs/Hybrid-EP_Implementation.md §4: the RDMA buffer holds
  max_tokens_per_rank x (nodes - 1) rows, one per (token, remote node), and a rank's NVLink
  buffer one slot per token of the group). The expected ranks and nodes a token reaches are
  taken under uniform routing (`expected_groups_hit`): Megatron-Core's forced balancing draws
  random router logits (--moe-router-force-load-balancing, every Megatron-Bridge perf recipe).
  `routing = "round_robin"` (NeMo AutoModel's benchmark gate) puts a token's experts side by side
  instead (`round_robin_groups_hit`).

The kernels' own speed inside one NVLink domain is a published measurement, not the fabric's:
`DISPATCHER_ALGBW_GBPS`. DeepEP's intranode kernels copy with SM loads/stores and scale with the
SMs they are given; over a Multi-Node NVLink domain of more than 16 ranks its combine falls to
~1/3 of its dispatch (a community port, "not well-optimized": the guide §2.2.1 measured ~400 GB/s
dispatch and ~190 GB/s combine on EP32 with 24 SMs). HybridEP copies with TMA and is near the
fabric's rate from 16 SMs on.
"""

from __future__ import annotations

import bisect
import math

# Algorithm bandwidth, GB/s -- received token bytes per rank / time -- of (BF16 dispatch, FP8
# dispatch, combine) by EP ranks inside one NVLink domain and SMs given to the kernels. Source:
# deepseek-ai/DeepEP branch hybrid-ep, docs/README_Hybrid-EP.md, "GB200 Platform" (4,096 tokens
# per rank, hidden 7,168, top-8, 8 local experts, random uniform router; tests/test_hybrid_ep.py
# divides the received hidden states' bytes, FP8 with its 1x128 scales, by the time).
# deepep: "DeepEP Performance Results" (Torch API: DeepEP's kernels write the output tensors).
# hybridep: "Kernel Only" -- the Torch API figures add HybridEP's copy from its registered buffer
# to a PyTorch tensor (10-20% of the communication time), which Megatron-Core fuses into the
# permute that follows the dispatch (Megatron-LM guide §2.5).
# Consistency with the guide's EP32 figure for DeepEP (24 SMs, ~400 / ~190 GB/s): the 24-rank
# row gives 450 / 164 at 24 SMs.
DISPATCHER_ALGBW_GBPS: dict[str, dict[int, dict[int, tuple[float, float, float]]]] = {
    "deepep": {
        8: {16: (362.01, 248.86, 310.21), 24: (512.72, 350.97, 425.95), 32: (615.78, 447.76, 519.57)},
        16: {16: (328.80, 242.51, 278.34), 24: (442.47, 338.87, 378.32), 32: (520.76, 393.72, 442.51)},
        24: {16: (324.64, 258.33, 126.53), 24: (450.22, 351.05, 163.62), 32: (502.84, 405.04, 207.10)},
    },
    "hybridep": {
        8: {16: (750.15, 620.98, 684.27), 32: (764.03, 713.98, 737.13)},
        16: {16: (661.93, 577.17, 600.75), 32: (706.95, 650.48, 666.26)},
        24: {16: (637.80, 360.12, 565.53), 32: (665.97, 577.96, 639.80)},
        32: {16: (629.79, 286.93, 547.25), 32: (642.23, 538.86, 605.15)},
        36: {16: (612.85, 260.53, 543.27), 32: (632.31, 489.27, 596.99)},
    },
}
# Across nodes, the same figures for the RDMA leg -- (token, node) pairs including the sender's own
# node (DeepEP's `num_rdma_token_sent`; HybridEP tests/utils.py count_rdma_send_from_routing_map
# "to align with the implementation in the DeepEP, we do not set the local node map to zeros")
# times the token bytes, per time -- by EP ranks and SMs, on H100/H800 nodes of 8 with one CX7
# 400 Gb/s NIC per GPU. hybridep: docs/README_Hybrid-EP.md "H100 Platform", Kernel Only (same
# test as above). deepep: DeepEP docs/legacy.md "Normal kernels with NVLink and RDMA forwarding"
# (H800, DeepEP V1, the kernels Megatron-Core's deepep backend runs; tests/test_internode.py
# tunes chunk sizes at 24 SMs; FP8 dispatch and BF16 combine only: BF16 dispatch moves the
# combine's bytes and is taken at the combine's rate).
DISPATCHER_RDMA_ALGBW_GBPS: dict[str, dict[int, dict[int, tuple[float, float, float]]]] = {
    "deepep": {16: {24: (43.0, 43.0, 43.0)}, 32: {24: (57.0, 58.0, 57.0)}, 64: {24: (50.0, 51.0, 50.0)}},
    "hybridep": {
        16: {4: (44.40, 34.00, 52.00), 8: (76.80, 62.00, 68.00), 16: (71.71, 68.48, 62.95)},
        32: {4: (52.60, 38.50, 51.00), 8: (54.50, 51.30, 56.40), 16: (57.69, 55.35, 57.46)},
        64: {4: (48.00, 37.50, 46.00), 8: (50.55, 46.63, 51.03), 16: (49.97, 46.52, 49.77)},
    },
}
RDMA_TABLE_ARCHITECTURES = ("hopper",)
# The NVLink-domain table was measured on Blackwell (GB200; DeepEP's B200 EP8 rows of the same page agree within
# 4%). On Hopper DeepEP's intranode kernels are NVLink-bound (DeepEP docs/legacy.md: 153 / 158
# GB/s on H800, ~160 GB/s NVLink), which the fabric model already gives: no table there.
TABLE_ARCHITECTURES = ("blackwell",)
FLEX_DISPATCHERS = ("deepep", "hybridep")


def expected_groups_hit(num_experts: int, groups: int, top_k: int) -> float:
    """Expected number of `groups` equal, disjoint expert groups (ranks or nodes) that a token's
    `top_k` distinct experts fall in, under uniform routing: g·(1 − C(E − E/g, k) / C(E, k))."""
    if groups <= 1:
        return 1.0
    per = num_experts / groups
    miss = 1.0
    for i in range(top_k):
        miss *= max(num_experts - per - i, 0.0) / (num_experts - i)
    return groups * (1.0 - miss)


def round_robin_groups_hit(num_experts: int, groups: int, top_k: int) -> float:
    """Mean number of `groups` equal, contiguous expert groups (ranks or nodes: Megatron-Core and
    NeMo AutoModel give EP rank r the experts [r·E/ep, (r+1)·E/ep)) that a token's `top_k` experts
    fall in under round-robin routing, token t -> experts (t·k + j) mod E, j < k. That is NeMo
    AutoModel's FakeBalancedGate with noise 0, the gate of its published MoE benchmarks
    (NVIDIA-NeMo/Automodel nemo_automodel/components/moe/layers.py@89e3a9fd, `indices =
    arange(n_tokens * k).view(-1, k) % n_exp`; docs/performance-summary.md: "Fake balanced gate is
    enabled"). A token's experts are adjacent, so they share one or two ranks and usually one
    node, where uniform routing reaches `expected_groups_hit` of them. The starts t·k mod E run
    through the multiples of gcd(k, E) equally often; the mean is over those."""
    if groups <= 1:
        return 1.0
    step = math.gcd(top_k, num_experts)
    starts = range(0, num_experts, step)
    hit = 0
    for s in starts:
        hit += len({((s + j) % num_experts) * groups // num_experts for j in range(top_k)})
    return hit / len(starts)


def _interp(points: dict[int, tuple[float, float, float]], sms: int, col: int) -> float:
    xs = sorted(points)
    if sms <= xs[0]:
        # below the fewest SMs measured the kernels are SM-bound: bandwidth in proportion (DeepEP
        # GB200 EP8 16 -> 24 SMs: x1.42 for x1.5; HybridEP H100 EP16 4 -> 8 SMs: x1.73 for x2)
        return points[xs[0]][col] * max(sms, 1) / xs[0]
    if sms >= xs[-1]:
        return points[xs[-1]][col]
    j = bisect.bisect_left(xs, sms)
    x0, x1 = xs[j - 1], xs[j]
    y0, y1 = points[x0][col], points[x1][col]
    return y0 + (y1 - y0) * (sms - x0) / (x1 - x0)


def kernel_algbw_bytes_per_s(dispatcher: str, ranks: int, sms: int, op: str, rdma: bool = False) -> float:
    """Published algorithm bandwidth of `dispatcher`'s `op` ("dispatch_bf16", "dispatch_fp8",
    "combine") with `ranks` EP ranks in one NVLink domain (`rdma`: in the whole EP group, the
    RDMA-leg table) and `sms` SMs: the row of the smallest measured rank count >= ranks (the
    largest beyond the table), linear in SMs between measured counts, in proportion to the SMs below
    the fewest measured and held above the most."""
    table = (DISPATCHER_RDMA_ALGBW_GBPS if rdma else DISPATCHER_ALGBW_GBPS)[dispatcher]
    sizes = sorted(table)
    row = next((r for r in sizes if r >= ranks), sizes[-1])
    col = ("dispatch_bf16", "dispatch_fp8", "combine").index(op)
    return _interp(table[row], sms, col) * 1e9
