"""Compute cost model: a roofline per kernel with per-GPU efficiencies (DESIGN.md §4).

time = max(flops / (peak · eff_matmul(m, n, k)), bytes / (hbm_bw · eff_mem)) + launch

The matmul efficiency is the product of
* `matmul_peak_fraction` — the best cuBLAS reaches on large aligned GEMMs (calibrated);
* tile quantization — a GEMM runs in 128×128 output tiles, partial tiles waste work;
* wave quantization — tiles run in waves of `num_sms`; a last partial wave idles SMs
  (NVIDIA "Matrix Multiplication Background" user guide, §"Wave quantization");
* alignment — tensor cores need dimensions that are multiples of 8 (16-bit) / 16 (8-bit)
  elements; cuBLAS pads or falls back otherwise (same guide, §"Tensor Core requirements");
* a size ramp flops/(flops + matmul_ramp_flop) for GEMMs too small to hide latency.

All parameters come from the GPU catalog (simulator/catalog/), the same for every scenario.
Pure functions, no state.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .specs import GPUSpec
from .units import DTYPE_BYTES

TILE_M = 128  # cuBLAS/CUTLASS output tile rows (typical Ampere/Hopper BF16 kernels)
TILE_N = 128  # output tile columns
# Hand-set (not calibrated) from the GEMM sweeps in NVIDIA's "Matrix Multiplication Background"
# guide: dimensions that are multiples of 8 (16 for FP8) but not 64 lose a few percent to
# partially filled tensor-core tiles; unaligned ones fall back to padded or non-tensor-core
# paths and lose about a third. The same for every GPU; `mfusim whatif` shows the lever
# ("tensor-core friendly shapes") that removes them.
ALIGNED_NOT_64 = 0.93
UNALIGNED = 0.65


@dataclass(frozen=True, slots=True)
class Device:
    """What the cost functions need of a GPU in one precision."""

    gpu: GPUSpec
    dtype: str

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
    def mem_bandwidth_bytes_per_s(self) -> float:
        return self.gpu.hbm_bandwidth_bytes_per_s * self.gpu.efficiency.memory_bw_fraction


def alignment_factor(dim: int, dtype: str) -> float:
    """Tensor-core friendliness of one GEMM dimension (NVIDIA matmul performance guide)."""
    # 8-bit: 16 elements; MX/NVFP4 block scaling: 32 (TE requires dims divisible by 32)
    need = {"fp8": 16, "mxfp8": 32, "nvfp4": 32}.get(dtype, 8)
    if dim % 64 == 0:
        return 1.0
    if dim % need == 0:
        return ALIGNED_NOT_64
    return UNALIGNED


def quantization_factor(m: int, n: int, num_sms: int, count: int = 1) -> float:
    """Useful fraction of the work in tile- and wave-quantized execution of `count` m×n
    outputs computed by one (batched/grouped) kernel."""
    tiles_m = math.ceil(m / TILE_M)
    tiles_n = math.ceil(n / TILE_N)
    tile_eff = (m * n) / (tiles_m * TILE_M * tiles_n * TILE_N)
    tiles = tiles_m * tiles_n * count
    waves = math.ceil(tiles / num_sms)
    wave_eff = tiles / (waves * num_sms)
    return tile_eff * wave_eff


def matmul_efficiency(device: Device, m: int, n: int, k: int, count: int = 1) -> float:
    eff = device.gpu.efficiency
    flops = 2.0 * m * n * k * count
    shape = min(
        alignment_factor(m, device.dtype),
        alignment_factor(n, device.dtype),
        alignment_factor(k, device.dtype),
    )
    ramp = flops / (flops + eff.matmul_ramp_flop)
    recipe = eff.fp4_matmul_fraction if device.dtype == "nvfp4" else 1.0
    return (
        eff.matmul_peak_fraction
        * quantization_factor(m, n, device.gpu.num_sms, count)
        * shape
        * ramp
        * recipe
    )


def matmul_time_s(device: Device, m: int, n: int, k: int, count: int = 1) -> float:
    """`count` independent GEMMs of (m×k)·(k×n) in one batched/grouped kernel (attention heads,
    the local experts of an MoE layer)."""
    if m <= 0 or n <= 0 or k <= 0 or count <= 0:
        return 0.0
    flops = 2.0 * m * n * k * count
    t_compute = flops / (device.peak_flop_per_s * matmul_efficiency(device, m, n, k, count))
    moved_bytes = (m * k + k * n) * device.element_bytes + m * n * device.activation_bytes
    t_memory = count * moved_bytes / device.mem_bandwidth_bytes_per_s
    return max(t_compute, t_memory) + device.gpu.efficiency.kernel_launch_s


def memory_op_time_s(device: Device, moved_bytes: float, kernels: int = 1) -> float:
    """A memory-bound kernel (norm, activation, residual, softmax, optimizer)."""
    if moved_bytes <= 0:
        return 0.0
    return moved_bytes / device.mem_bandwidth_bytes_per_s + kernels * device.gpu.efficiency.kernel_launch_s


def flash_attention_time_s(device: Device, flops: float, kernels: int = 1) -> float:
    """Fused attention (FlashAttention): compute-bound at its own achieved fraction of peak.

    `flops` is the work the kernel really does (the causal mask skips about half of the
    s×s blocks; the caller accounts for that).
    """
    if flops <= 0:
        return 0.0
    eff = device.gpu.efficiency
    return (
        flops / (device.attention_peak_flop_per_s * eff.attention_peak_fraction)
        + kernels * eff.kernel_launch_s
    )


def grouped_matmul_time_s(device: Device, m: int, n: int, k: int, groups: int, uneven: bool = False) -> float:
    """A grouped GEMM (Transformer Engine GroupedLinear / CUTLASS grouped GEMM: one kernel for the
    local experts of an MoE layer), `groups` GEMMs of (m_i×k)·(k×n) with mean m_i = m tokens.

    Few tokens per expert cost through the tile/wave quantization and the size ramp of
    `matmul_time_s`. Balanced routing gives every group the same m. Uneven routing (dropless)
    leaves each group's last row tile on average half full: the row-tile efficiency becomes
    m/(m + TILE_M/2) in place of m/(ceil(m/TILE_M)·TILE_M).
    """
    t = matmul_time_s(device, m, n, k, groups)
    if not uneven or t <= 0:
        return t
    exact = m / (math.ceil(m / TILE_M) * TILE_M)
    ragged = m / (m + TILE_M / 2)
    launch = device.gpu.efficiency.kernel_launch_s
    return (t - launch) * exact / ragged + launch
