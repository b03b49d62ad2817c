"""The eager expert GEMMs on Blackwell (Transformer Engine GroupedLinear's multi-stream cuBLASLt
path) against the one published Blackwell figure of that path, and what it says about the per-expert
cost the eager MoE rows of `mfusim validate` miss (issue 13; docs/accuracy.md, "Per-expert cost of
the eager multi-stream path on Blackwell").

NVIDIA/TransformerEngine pull request #3134 ("Single-launch CUTLASS grouped GEMM for per-tensor
NVFP4", closed in favour of #3175) times `general_grouped_gemm` on SM100 with
`benchmarks/linear/benchmark_grouped_linear.py --compare-nvfp4-grouped-gemm` (the PR's head,
bebf1b99): 8 experts x 128 tokens, N = K = 2048, TN (fprop), per-tensor NVFP4, operands quantized
once and untimed. Its "pure" row pre-swizzles the scales of both backends: the multi-stream path
(NVTE_NVFP4_CUTLASS_GROUPED_GEMM=0: `multi_stream_cublas_gemm`, one cuBLASLt GEMM per expert on
compute stream i % 4, each NVFP4 GEMM preceded by its own per-tensor alpha kernel,
`nvte_nvfp4_compute_per_tensor_scale`, cublaslt_gemm.cu:382 @v2.14) takes 0.267 ms, one CUTLASS
grouped launch through the direct binding 0.069 ms; the "dispatch" row (scale swizzle in the timer)
0.272 and 0.184 ms. The timer (`_nvfp4_gg_time_us`) records a CUDA event, calls the Python
function, records a second event and synchronizes, from an idle GPU: the interval is the larger of
the host's issue time of the call and the GPU's execution, so it is wall time, not kernel time.

What the model says of that row (B200, NVFP4, burst clock): the 8 GEMMs run in 24 us on 4 streams
(80 us one at a time), a tenth of 0.267 ms, so the published time is the host issuing the call,
~25-33 us per expert GEMM ((0.267 - 0.069) / 8 and 0.267 / 8): a Python-to-C++ conversion of each
expert's two operands, cuBLASLt's per-GEMM descriptors and heuristic query (~5-10 us a GEMM with
them created per call, NVIDIA/raft#1736), the alpha kernel's and the GEMM's launches. The host
model (simulator/hostbound.py) already charges a quantized GroupedLinear's forward 60 us per local
expert (EXPERT_OPS + EXPERT_QUANT_OPS at HOST_OP_S), above that, and the GEMM op alone (HOST_OP_S)
not above it. So the figure supports no per-expert GPU cost on top of the GEMMs, nor more host
issue per expert than the model has: it is not a price for the ~20-45 us per eager per-expert GEMM
the MoE residuals ask for.
"""

from __future__ import annotations

from simulator.clocks import sustained_clock_fraction
from simulator.costs import Device, grouped_matmul_time_s
from simulator.hostbound import EXPERT_OPS, EXPERT_QUANT_OPS, HOST_OP_S
from simulator.loading import load_gpu_catalog
from simulator.program import TE_GEMM_STREAMS

# NVIDIA/TransformerEngine#3134, description, table "TN (fprop)", SM100, per-tensor NVFP4,
# row "8e x 128", N = K = 2048 (1,024 tokens), seconds. Only this row of the table is quoted here:
# the stored copy of the thread available to this project cuts the table after it.
PR3134_EXPERTS, PR3134_TOKENS, PR3134_N, PR3134_K = 8, 128, 2048, 2048
PR3134_MULTI_STREAM_PURE_S = 0.267e-3
PR3134_MULTI_STREAM_DISPATCH_S = 0.272e-3  # +5 us: the scales swizzled in one call for the list
PR3134_CUTLASS_PURE_S = 0.069e-3  # one grouped launch, direct binding, alpha precomputed
PR3134_CUTLASS_DISPATCH_S = 0.184e-3


def _burst_b200() -> Device:
    # a microbenchmark of a few hundred microseconds runs at the boost clock (simulator/clocks.py)
    gpu = load_gpu_catalog()["b200"]
    return Device(gpu, "nvfp4", 1.0 / sustained_clock_fraction(gpu))


def _gemms_s(streams: int) -> float:
    return grouped_matmul_time_s(
        _burst_b200(), PR3134_TOKENS, PR3134_N, PR3134_K, PR3134_EXPERTS, False, streams
    )


def test_published_multi_stream_time_is_not_the_gemms_device_time() -> None:
    """The 8 small NVFP4 GEMMs take the GPU a small fraction of the published wall time, on 4
    streams or one at a time: the 0.267 ms are the host's issue of the call, so they price no GPU
    cost per expert GEMM."""
    assert _gemms_s(TE_GEMM_STREAMS) < PR3134_MULTI_STREAM_PURE_S / 5.0
    assert _gemms_s(1) < PR3134_MULTI_STREAM_PURE_S / 2.0


def test_published_per_expert_issue_cost_lies_within_the_host_model() -> None:
    """Per expert GEMM the multi-stream call costs 25-33 us more than nothing and at most what the
    whole call took; the host model charges the GEMM op alone no more than that (HOST_OP_S), and a
    quantized GroupedLinear's forward per local expert (the GEMM, the weight-quantizer call, the
    input's quantize kernel) no less than the whole call's share."""
    lower = (PR3134_MULTI_STREAM_PURE_S - PR3134_CUTLASS_PURE_S) / PR3134_EXPERTS
    upper = PR3134_MULTI_STREAM_PURE_S / PR3134_EXPERTS
    per_expert_forward_s = (EXPERT_OPS[0] + EXPERT_QUANT_OPS[0]) * HOST_OP_S
    assert HOST_OP_S <= lower <= upper <= per_expert_forward_s


def test_the_single_launch_row_is_host_dominated_too() -> None:
    """Even the one-launch CUTLASS row (0.069 ms) is several times the model's device time of the
    same GEMMs as one grouped kernel: in this benchmark both backends' times are host-dominated,
    so their difference (~25 us per expert) is the multi-stream path's host issue, not device time."""
    assert _gemms_s(0) < PR3134_CUTLASS_PURE_S / 3.0
