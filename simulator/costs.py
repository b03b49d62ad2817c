"""Compute cost of one op in a training step (DESIGN.md §4): the kernel model plus the
system-level residuals of a training job.

Two levels (docs/calibration.md):
* the kernel's own time comes from simulator/kernels.py — GEMMs with cuBLAS-like tile, split-K
  and stream-K choices, attention by implementation (FlashAttention-2/-3, cuDNN, unfused),
  memory-bound kernels at the achievable HBM bandwidth — fitted only to the published
  microbenchmarks of simulator/catalog/kernels.toml;
* a training job adds what the microbenchmarks do not see, from the GPU's `efficiency`
  (simulator/catalog/efficiency.toml, fitted end-to-end within physical ranges): compute runs
  at `sustained_clock_fraction` of the benchmark clocks (power/thermal limits under load), and
  every kernel pays `kernel_launch_s` of host/launch gap.

Pure functions, no state.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from . import kernels as kernel_model
from .clocks import sustained_clock_fraction
from .specs import GPUSpec
from .units import DTYPE_BYTES

FP8_NEEDS_MULTIPLE = 16  # FP8 tensor cores: dimensions in multiples of 16 elements
HALF_NEEDS_MULTIPLE = 8  # 16-bit tensor cores: multiples of 8 (NVIDIA matmul performance guide)
# Unaligned dimensions fall back to padded or non-tensor-core paths (NVIDIA "Matrix
# Multiplication Background" guide, §"Tensor Core requirements": about a third slower).
UNALIGNED = 0.65
TILE_M = 128  # row tile of grouped (MoE) GEMM kernels (CUTLASS grouped GEMM, TE GroupedLinear)


@dataclass(frozen=True, slots=True)
class Device:
    """What the cost functions need of a GPU in one precision."""

    gpu: GPUSpec
    dtype: str
    # the power-limited clock of this step's kernel mix relative to the benchmarks' boost clock
    # (simulator/clocks.py power_limited_clock; program.py sets it per pipeline stage from that
    # stage's whole kernel mix)
    power_clock: float = 1.0
    # [precision] fp8_recipe of an "fp8" device: "blockwise" runs its GEMMs as blockwise-scaled
    # kernels (`gemm_dtype`, kernels.BLOCKWISE_PROMOTION_NOTE)
    fp8_recipe: str = "delayed"

    @property
    def gemm_dtype(self) -> str:
        """The kernel dtype of this device's layer GEMMs (kernels.gemm_plan)."""
        return "fp8_blockwise" if self.dtype == "fp8" and self.fp8_recipe == "blockwise" else self.dtype

    @property
    def peak_flop_per_s(self) -> float:
        return self.gpu.peak_flop_per_s(self.dtype)

    @property
    def attention_peak_flop_per_s(self) -> float:
        """Attention runs in 16-bit even in FP8 training (Transformer Engine keeps the
        FlashAttention kernels in BF16)."""
        return self.gpu.peak_flop_per_s("fp16" if self.dtype == "fp16" else "bf16")

    @property
    def element_bytes(self) -> float:
        return DTYPE_BYTES[self.dtype]

    @property
    def activation_bytes(self) -> int:
        """Activations stay 16-bit even in FP8 training (Transformer Engine keeps BF16 I/O)."""
        return 2

    @property
    def params(self) -> kernel_model.KernelParams:
        return kernel_model.kernel_params(self.gpu)

    @property
    def clock(self) -> float:
        # the calibrated reference-SKU clock, scaled by the board-power law, times the
        # power-limited clock of the step's kernel mix (simulator/clocks.py)
        return sustained_clock_fraction(self.gpu) * self.power_clock

    @property
    def launch_s(self) -> float:
        return self.gpu.efficiency.kernel_launch_s


def alignment_factor(dim: int, dtype: str) -> float:
    """Tensor-core friendliness of one GEMM dimension (NVIDIA matmul performance guide)."""
    return 1.0 if dim % alignment_multiple(dtype) == 0 else UNALIGNED


def alignment_multiple(dtype: str) -> int:
    """Elements a GEMM dimension must be a multiple of for the tensor-core path: 8-bit 16;
    MX/NVFP4 block scaling 32 (TE requires dims divisible by 32); 16-bit 8."""
    return {"fp8": FP8_NEEDS_MULTIPLE, "mxfp8": 32, "nvfp4": 32}.get(dtype, HALF_NEEDS_MULTIPLE)


def matmul_efficiency(device: Device, m: int, n: int, k: int, count: int = 1) -> float:
    """Achieved fraction of the dense peak of one (batched) GEMM in a training step, launch gap
    excluded (what `matmul_time_s` charges the math)."""
    if m <= 0 or n <= 0 or k <= 0 or count <= 0:
        return 0.0
    t = matmul_time_s(device, m, n, k, count) - device.launch_s
    return 2.0 * m * n * k * count / (device.peak_flop_per_s * t)


def matmul_time_s(device: Device, m: int, n: int, k: int, count: int = 1, out_bytes: int = 2) -> float:
    """`count` independent GEMMs of (m×k)·(k×n) in one batched/grouped kernel (attention heads,
    the local experts of an MoE layer). `out_bytes`: HBM bytes moved per output element (2: a
    16-bit output written; the kernel model's memory floor)."""
    if m <= 0 or n <= 0 or k <= 0 or count <= 0:
        return 0.0
    shape = min(alignment_factor(d, device.dtype) for d in (m, n, k))
    t = kernel_model.gemm_time_s(device.gpu, device.gemm_dtype, m, n, k, count, device.params, out_bytes)
    return t / (device.clock * shape) + device.launch_s


GEMM_PASSES = ("fprop", "dgrad", "wgrad")


def gemm_pass_shape(pass_: str, m: int, n: int, k: int) -> tuple[int, int, int]:
    """(m, n, k) of one training pass of the layer GEMM Y[m×n] = X[m×k]·W[k×n] (m tokens):
    the forward "fprop"; the input gradient dX = dY·Wᵀ, "dgrad": output m×k, reduction over n;
    the weight gradient dW = Xᵀ·dY, "wgrad": output k×n, reduction over the m tokens.
    Transformer Engine issues them as three cuBLASLt GEMMs (transformer_engine/pytorch/module/
    linear.py @d0067d0d: general_gemm layouts "TN", "NN" and "NT"). All three do 2·m·n·k FLOPs;
    the output tiles, waves and split-K of each follow its own shape in the kernel model. The
    layout itself is not costed: the kernel model has no layout term, and FP8's TN-only Hopper
    GEMMs get their transposed operands from TE's cast-transpose, charged with the fp8 cast."""
    if pass_ == "fprop":
        return m, n, k
    if pass_ == "dgrad":
        return m, k, n
    if pass_ == "wgrad":
        return k, n, m
    raise ValueError(f"GEMM pass {pass_!r}: not one of {GEMM_PASSES}")


def wgrad_output_bytes(main_grad_bytes: int, fused_accumulation: bool) -> int:
    """HBM bytes per element a weight-gradient GEMM moves through its output. With gradient
    accumulation fusion (Megatron-LM's default, --no-gradient-accumulation-fusion turns it off:
    megatron/training/arguments.py @d98e8a64) the GEMM accumulates into the parameter's main_grad
    buffer, beta = 1: it reads and writes main_grad (TE linear.py / grouped_linear.py @d0067d0d:
    out = main_grad, accumulate = True; Megatron-Core tensor_parallel/layers.py
    wgrad_gemm_accum_fp32 for its own linear layers), fp32 by default (memory.py
    grad_reduce_bytes_per_param). Otherwise it writes a 16-bit gradient. A short-k expert wgrad
    writes a whole k×n gradient per expert from a few hundred tokens: there this traffic, not the
    math, sets its time (the kernel model's memory floor)."""
    return 2 * main_grad_bytes if fused_accumulation else 2


def matmul_pass_times_s(
    device: Device, m: int, n: int, k: int, count: int = 1, wgrad_out_bytes: int = 2
) -> tuple[float, float, float]:
    """(fprop, dgrad, wgrad) times of `count` layer GEMMs Y[m×n] = X[m×k]·W[k×n], each pass
    at its own shape (`gemm_pass_shape`). `wgrad_out_bytes`: HBM bytes per element of the weight
    gradient (`wgrad_output_bytes`)."""
    fprop, dgrad = (matmul_time_s(device, *gemm_pass_shape(p, m, n, k), count) for p in GEMM_PASSES[:2])
    wgrad = matmul_time_s(device, *gemm_pass_shape("wgrad", m, n, k), count, wgrad_out_bytes)
    return fprop, dgrad, wgrad


def memory_op_time_s(device: Device, moved_bytes: float, kernels: int = 1, kind: str = "copy") -> float:
    """Memory-bound kernels (norm, activation, residual, softmax, optimizer) moving `moved_bytes`,
    at the achievable bandwidth of their kind (simulator/kernels.py MEMORY_KINDS)."""
    p = device.params
    scale = p.memory_bw_scale(kind)
    if moved_bytes <= 0:
        return 0.0
    bw = device.gpu.hbm_bandwidth_bytes_per_s * p.memory_bw_fraction * scale
    return moved_bytes / bw + kernels * (p.memory_latency_s + device.launch_s)


def attention_time_s(
    device: Device,
    impl: str,
    pass_: str,
    *,
    batch: int,
    seq_q: int,
    seq_kv: int,
    heads: int,
    head_dim: int,
    causal: bool = True,
    window: tuple[str, int] = ("full", 0),
) -> float:
    """Self-attention of `batch`·`heads` heads, `seq_q` queries over `seq_kv` keys (causal by
    default; a context-parallel ring step between different chunks is not). `window`: the layer's
    mask (ModelSpec.attention_window): a sliding window or chunks (kernels.SLIDING_WINDOW_NOTE)."""
    kind, size = window
    t = kernel_model.attention_time_s(
        device.gpu,
        batch=batch,
        seq=seq_q,
        seq_kv=seq_kv,
        heads=heads,
        head_dim=head_dim,
        causal=causal,
        impl=impl,
        pass_=pass_,
        params=device.params,
        window=size if kind == "sliding" else 0,
        chunk=size if kind == "chunked" else 0,
    )
    return t / device.clock + device.launch_s


def grouped_matmul_time_s(
    device: Device,
    m: int,
    n: int,
    k: int,
    groups: int,
    uneven: bool = False,
    streams: int = 0,
    pass_: str = "fprop",
    wgrad_out_bytes: int = 2,
) -> float:
    """A grouped GEMM (Transformer Engine GroupedLinear / CUTLASS grouped GEMM: one kernel for the
    local experts of an MoE layer), `groups` GEMMs of (m_i×k)·(k×n) with mean m_i = m tokens.

    Few tokens per expert cost through the tile/wave quantization of the kernel model
    (`matmul_time_s`). A group's token rows are the GEMM's outer dimension, never its leading
    one (activations are [tokens, hidden] row-major), and quantized experts are padded to the
    recipe's alignment by TE's Fp8Padding (costed with the dispatch), so exactly balanced routing
    (every expert the same count: ModelSpec.uneven_expert_counts false) costs m rounded up to that
    alignment rather than an unaligned-shape penalty. Uneven routing (dropless, and forced
    balancing, whose random logits spread the counts) leaves each group's last row tile on
    average half full: the kernel runs
    m/TILE_M + 1/2 row tiles per group, costed between the neighbouring whole-tile shapes.
    Both are non-decreasing in m, so more tokens on an expert never make its GEMMs faster.

    `streams` > 0: the groups are separate GEMMs, `streams` of them in flight at a time, as
    Transformer Engine's GroupedLinear runs them (`general_grouped_gemm` -> C++
    `nvte_multi_tensor_gemm` -> `multi_stream_cublas_gemm`: one cuBLASLt GEMM per expert, GEMM i on
    compute stream i % 4; the CUTLASS grouped kernel only on Hopper with NVTE_USE_CUTLASS_GROUPED_GEMM;
    TE_MULTI_STREAM_NOTE in program.py). The GEMMs in flight share the SMs as one batch of
    `streams`, so the layer pays one wave tail and one kernel latency per round of `streams`
    GEMMs instead of one for all `groups`: full rounds, then the remainder. A sum of
    non-decreasing terms, so still non-decreasing in m.

    `pass_` (`gemm_pass_shape`): the training pass of the experts' Y = X·W this is. "dgrad"
    (dX = dY·Wᵀ) keeps the m token rows as its outer dimension, its output m×k reduced over n.
    "wgrad" (dW = Xᵀ·dY) reduces over each expert's m tokens: a k×n output per expert with a
    short reduction (TE grouped_linear.py @d0067d0d: general_grouped_gemm layout "NT" over
    m_splits), so the token count sets its k-loop, not its tiles. The kernel model's k-loop is
    linear in k (no k-block quantization), so uneven routing costs the mean m there; the tokens
    are padded to the recipe's alignment as in the forward. `wgrad_out_bytes`: HBM bytes per
    element of its k×n output (`wgrad_output_bytes`).
    """
    if m <= 0 or n <= 0 or k <= 0 or groups <= 0:
        return 0.0
    if pass_ == "dgrad":
        return grouped_matmul_time_s(device, m, k, n, groups, uneven, streams)
    if pass_ == "wgrad":
        if 0 < streams < groups:
            rounds, rest = divmod(groups, streams)
            one_round = grouped_matmul_time_s(device, m, n, k, streams, False, 0, "wgrad", wgrad_out_bytes)
            return rounds * one_round + grouped_matmul_time_s(
                device, m, n, k, rest, False, 0, "wgrad", wgrad_out_bytes
            )
        need = alignment_multiple(device.dtype)
        return matmul_time_s(device, k, n, math.ceil(m / need) * need, groups, wgrad_out_bytes)
    if pass_ != "fprop":
        raise ValueError(f"GEMM pass {pass_!r}: not one of {GEMM_PASSES}")
    if 0 < streams < groups:
        rounds, rest = divmod(groups, streams)
        return rounds * grouped_matmul_time_s(device, m, n, k, streams, uneven) + grouped_matmul_time_s(
            device, m, n, k, rest, uneven
        )
    if not uneven:
        need = alignment_multiple(device.dtype)
        return matmul_time_s(device, math.ceil(m / need) * need, n, k, groups)
    tiles = max(1.0, m / TILE_M + 0.5)
    lo = math.floor(tiles)
    t_lo = matmul_time_s(device, lo * TILE_M, n, k, groups)
    t_hi = matmul_time_s(device, (lo + 1) * TILE_M, n, k, groups)
    return t_lo + (tiles - lo) * (t_hi - t_lo)
