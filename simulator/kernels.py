"""Kernel model: GEMM, attention, memory-bound and collective kernels, as the libraries run them.

The model reproduces the published microbenchmarks shipped in simulator/catalog/kernels.toml
(tests/test_kernels.py checks every figure within 10%); its few parameters per GPU architecture
live in the same file, fitted to those figures only (benchmarks/fit_kernels.py), never to a
training run. `mfusim kernel ...` prints it; simulator/costs.py uses it for every op of a step.

GEMM (cuBLAS/CUTLASS-style): the output is cut into tiles, one CTA per tile per SM, in waves of
`num_sms` (NVIDIA "Matrix Multiplication Background" user guide, tile and wave quantization). A
CTA's main loop runs at `gemm_peak_fraction` of its SM's share of the dense peak, reduced for
small tiles (operand traffic per FLOP ∝ 1/tm + 1/tn), plus a fixed per-tile staging cost of
`gemm_tile_overhead` k-steps (pipeline fill and epilogue). Like cuBLAS's heuristics the model
takes the fastest of a set of tile shapes (256×128 … 64×64, plus the 96×128 and 160×128 of
cuBLAS's Ampere kernels: gemm_tiles) and split-K factors (1–16, stream-K
style work splitting for GEMMs with too few output tiles to fill the GPU; the partial sums cost
a reduction through memory). A memory floor (operands + output at `gemm_memory_bw_scale` of the
streaming bandwidth: a memory-bound cuBLASLt GEMM moves its bytes at ~0.9 of a copy's rate) and a
fixed latency `gemm_latency_s` complete it. Near the ridge point, where a plan's main loop and its
HBM traffic take about the same time, the two overlap imperfectly: the plan takes their p-norm
(t_c^p + t_m^p)^(1/p) (`gemm_overlap_exponent`, fitted), 2^(1/p) of either at the ridge, the max of
the two far from it (OpenXLA's H100 table: 4096×256×2048, 20 MB of operands and output for 4.3
GFLOP, runs 13% below 1024×1024×2048, same FLOPs and tile count, 10 MB; the roofline is an upper
bound that measured kernels approach only away from its corner: Williams, Waterman, Patterson
2009, CACM 52(4)).

Attention (FlashAttention convention, Dao 2023: FLOPs = 4·b·s²·h·d, halved when causal; backward
2.5×): time = FLOPs / (16-bit peak · fraction(impl, pass) · s/(s + s½) · head-dim factor ·
causal factor) + latency. The causal factor s/(s + M(1 + 2c) + 2 s½) is the diagonal tiles computed
in full (query-tile height M) and masked at a per-implementation cost c (causal_extent).
Triton's backward (triton.ops.flash_attention) fills the GPU either with one CTA per (batch, head),
in waves of the SM count, or per 128-key block at the cost of dQ replicas through HBM, whichever
is faster (_triton_backward_s).
"unfused" composes batched GEMMs with the softmax and dropout through memory (Megatron-LM 2021-22).

Memory-bound kernels: bytes / (HBM bandwidth · `memory_bw_fraction` · kind scale) + `memory_latency_s`
per kernel. The kind scale (MEMORY_KINDS; 1 for a streaming copy) is what a framework kernel reaches
below copy speed, fitted to published microbenchmarks of the kernel the stack runs.
Collectives: simulator/network on the named topology, with nccl-tests' achieved fractions of the
line rate: `nccl_bw_fraction` on NVLink/PCIe (NCCL's protocol overhead) and `nic_bw_fraction` on the
network NICs; NCCL's own algorithm choice unless a figure names the one it was forced to (NCCL_ALGO).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import MISSING, dataclass, fields
from functools import lru_cache
from typing import Any

from .errors import ConfigError
from .kernel_catalog import architecture, kernel_data
from .specs import (
    ATTENTION_HEAD_DIM_ALIGN,
    ATTENTION_IMPLS,
    DEFAULT_ATTENTION,
    GPUSpec,
    check_attention_arch,
)
from .units import DTYPE_BYTES

# Implementations that run another's main loop and take its fitted terms: flash-attn's own Triton
# kernel (flash_attn/flash_attn_triton.py, which llm-foundry copies as attn_impl: triton) starts
# from the same Triton tutorial kernel as triton.ops.flash_attention, whose published figures
# (FlashAttention-2 paper Fig. 4) are the only ones; its backward is its own (_triton_backward_s)
ATTENTION_PARAMS_OF = {"flash-attn-triton": "triton"}
ATTENTION_PASSES = ("fwd", "bwd", "fwd+bwd")
BWD_FLOP_RATIO = 2.5  # FlashAttention backward: 5 matmuls vs 2 forward (Dao 2023, §3)
# (tile rows, tile cols) cuBLAS/CUTLASS pick from on Ampere/Hopper/Blackwell for 16/8-bit GEMMs.
GEMM_TILES = ((256, 128), (128, 256), (128, 128), (128, 64), (64, 128), (64, 64))
# Tiles an architecture's cuBLAS adds to GEMM_TILES. Ampere: cuBLAS's sm80 kernels
# sm80_xmma_gemm_f16f16_f16f32_f32_*_tilesize96x128x32_stage4 and ..._tilesize160x128x32_stage4, the
# ones cuBLAS (CUDA 12.6) selected for FP16 1024^3 (a grid of 88 CTAs = 11 x 8 tiles of 96x128) and
# 2048^3 (208 = 13 x 16 of 160x128) on a 108-SM GA100 (A800 80GB PCIe; NCU captures,
# frezcirno/Texo docs/gemm-wmma-pipeline-aligned-ncu.md@f3e0ea90 and docs/gemm-ncu-analysis.md
# @b703e18e). Both orientations: a framework's rows x columns are cuBLAS's columns x rows when it
# calls the column-major library on row-major tensors (PyTorch does), so the model, which does not
# know the caller's orientation, offers each shape both ways as GEMM_TILES does.
ARCH_GEMM_TILES: dict[str, tuple[tuple[int, int], ...]] = {
    "ampere": ((96, 128), (128, 96), (160, 128), (128, 160)),
}
SPLIT_K = (1, 2, 3, 4, 6, 8, 12, 16)
SPLIT_K_MIN_K = 256  # never split a GEMM below this many k per split
# Memory-bound kernel kinds with their own achievable bandwidth (KernelParams *_bw_scale):
# "copy" = a streaming kernel over contiguous tensors (BabelStream; eager PyTorch elementwise ops,
# e.g. relu_squared, run at this speed). "swiglu_*" = Megatron-Core's bias_swiglu_impl
# (megatron/core/fusions/fused_bias_swiglu.py, @jit_fuser = torch.compile): forward and backward
# over the two chunked halves of the fc1 output. "cross_entropy_*" = Megatron-Core's unfused
# vocab-parallel cross-entropy (megatron/core/tensor_parallel/cross_entropy.py): its fp32 passes
# over the logits, reductions over the vocabulary included. "cross_entropy_fused_*" = its fused
# ("native") cross-entropy (megatron/core/fusions/fused_cross_entropy.py, cross_entropy_loss_fusion
# = True, cross_entropy_fusion_impl = "native"): the same steps as four @jit_fuser (torch.compile)
# functions. Transformer Engine's Triton cross-entropy (cross_entropy_fusion_impl = "te") streams
# at copy speed (simulator/program.py CE_PASSES says why). "torch_layer_norm_*" = PyTorch's native
# LayerNorm (torch.nn.functional.layer_norm: one vectorized forward kernel; backward a dx kernel and
# a gamma/beta reduction kernel), which llm-foundry's LPLayerNorm calls (`[kernels] norm = "torch"`).
MEMORY_KINDS = (
    "copy",
    "swiglu_fwd",
    "swiglu_bwd",
    "cross_entropy_fwd",
    "cross_entropy_bwd",
    "cross_entropy_fused_fwd",
    "cross_entropy_fused_bwd",
    "torch_layer_norm_fwd",
    "torch_layer_norm_bwd",
)
TRITON_BWD_BLOCK = 128  # triton.ops.flash_attention backward: BLOCK_M = BLOCK_N = 128
# UNFUSED_ATTENTION_NOTE: Megatron-LM's core attention before FlashAttention (CoreAttention.forward,
# megatron/model/transformer.py:216-303@d898a8991d, the sequence-parallel merge of 2022-05-25 that
# Korthikanti et al. 2022 ran; the same sequence in the 2021 ParallelSelfAttention), per (batch, head):
#  fwd  baddbmm scores [sq, hd]x[hd, sk] (beta 0: the preallocated buffer is not read);
#       FusedScaleMaskSoftmax -> scaled_upper_triang_masked_softmax when causal (fused_softmax.py:165-175:
#       fp16/bf16, 16 < sk <= 4096, and the kernel asserts sk <= 2048; scaled_upper_triang_masked_
#       softmax.h:131-158 loads only the row's first row+1 scores, :212-226 stores all sk of them, zeros
#       above the diagonal), else scaled_masked_softmax (reads every score);
#       torch.nn.Dropout(attention_dropout) on the probabilities (:262-266): PyTorch's fused
#       native_dropout reads 2, writes the 2-byte output and a 1-byte bool mask;
#       bmm values [sq, sk]x[sk, hd]; permute(2, 0, 1, 3).contiguous() of the context (:296): one
#       read and one write of the [sq, hd] output;
#  bwd  native_dropout_backward (grad x mask x scale: read 2 + 1, write 2);
#       the softmax backward (scaled_upper_triang_masked_softmax.h:275-282 loads the output gradient
#       and the softmax output up to the diagonal only, :319-326 stores every score, in place);
#       bmm's two gradients: dP = dO.V^T (the scores' shape) and dV = P^T.dO; baddbmm's two: dQ = dS.K
#       and dK = dS^T.Q (the values' shape, reduction over sk): one scores-shaped and three
#       values-shaped GEMMs.
# Bytes per 16-bit score of the memory-bound kernels, (read, write):
UNFUSED_SOFTMAX_FWD_BYTES = (2.0, 2.0)  # halved read when causal (upper-triangular kernel)
UNFUSED_SOFTMAX_BWD_BYTES = (4.0, 2.0)  # halved read when causal
UNFUSED_DROPOUT_FWD_BYTES = 2.0 + 2.0 + 1.0  # read; write output and bool mask
UNFUSED_DROPOUT_BWD_BYTES = 2.0 + 1.0 + 2.0  # read gradient and mask; write
UNFUSED_CONTEXT_COPY_BYTES = 2.0 + 2.0  # per 16-bit context element: the permute's contiguous copy


@dataclass(frozen=True, slots=True)
class KernelParams:
    """Kernel-model parameters of one GPU architecture (simulator/catalog/kernels.toml [model.*])."""

    gemm_peak_fraction: float
    gemm_tile_overhead: float
    gemm_latency_s: float
    gemm_tile_reuse: float
    gemm_split_k_latency_s: float
    gemm_fp8_scale: float
    gemm_max_fraction: float
    memory_bw_fraction: float
    memory_latency_s: float
    fa2_fwd_fraction: float
    fa2_bwd_fraction: float
    fa3_fwd_fraction: float
    fa3_bwd_fraction: float
    cudnn_fwd_fraction: float
    cudnn_bwd_fraction: float
    triton_fwd_fraction: float
    triton_bwd_fraction: float
    fa2_fwd_seq_half: float
    fa2_bwd_seq_half: float
    fa3_fwd_seq_half: float
    fa3_bwd_seq_half: float
    cudnn_fwd_seq_half: float
    cudnn_bwd_seq_half: float
    triton_fwd_seq_half: float
    triton_bwd_seq_half: float
    fa2_head_dim_half: float
    fa3_head_dim_half: float
    cudnn_head_dim_half: float
    triton_head_dim_half: float
    fa2_causal_scale: float
    fa3_causal_scale: float
    cudnn_causal_scale: float
    triton_causal_scale: float
    attention_causal_block: float
    # nccl-tests' achieved fraction of the line rate: NVLink/PCIe inside a node (NCCL's protocol
    # overhead, ~20% on NVLink: nccl-212) and the network NICs (46-48 of 50 GB/s on NDR: nccl-ib)
    nccl_bw_fraction: float
    nic_bw_fraction: float
    # NCCL's bandwidth ramp below ~1 GB (simulator/network/collectives.py ramp_s): bytes in flight
    # per ring step, fitted to nccl-tests size sweeps
    nccl_ring_window_bytes: float
    # fixed cost of one NVLS chunk in bytes at the NVLS rate (collectives.nvls_time_s)
    nccl_nvls_chunk_overhead_bytes: float
    # NVLS all-reduce's algbw as a fraction of the achieved NVLink rate (the switch reduces;
    # network/collectives.py NVLS_BW_FRACTION is the training job's prior)
    nccl_nvls_fraction: float
    # chunk-times S/n an all-reduce ring adds beyond its pipeline fill (network/collectives.py Links;
    # not reduce-scatter: nccl-tests shows none there)
    nccl_reduce_tail_chunks: float
    # extra cost of a masked (diagonal) kv position over an unmasked one in the forward, per
    # implementation: the causal mask's index compares and selects on the score tile (the
    # backward, with 2.5x the MMA work per score, pays it / 2.5); see fused_attention_efficiency
    fa2_causal_mask_cost: float = 0.0
    fa3_causal_mask_cost: float = 0.0
    cudnn_causal_mask_cost: float = 0.0
    triton_causal_mask_cost: float = 0.0
    # FlashAttention-2's tile height (query rows forward, key rows backward) above head dim 128,
    # where it differs from `attention_causal_block` (0: the same): 64x64 tiles in both passes at
    # head dim 256 on H100 (csrc/flash_attn/src/flash_fwd_launch_template.h run_mha_fwd_hdim256:
    # two CTAs per SM; flash_bwd_launch_template.h run_mha_bwd_hdim256), 128x64 forward on A100
    fa2_fwd_wide_head_block: float = 0.0
    fa2_bwd_wide_head_block: float = 0.0
    # exp time at the MUFU rate / MMA time at the peak, head dim 128 forward (0: not modelled)
    attention_exp_mma_ratio: float = 0.0
    # share of a fused kernel's time per FLOP added by each doubling of the head dim beyond 128:
    # wider heads force smaller q/kv tiles (registers and shared memory hold d-wide rows), so
    # fewer MMAs per staged byte (fa3-paper Fig. 5e/5f: FA2 and cuDNN no faster at d256 than d128)
    fa2_head_dim_wide: float = 0.0
    fa3_head_dim_wide: float = 0.0
    cudnn_head_dim_wide: float = 0.0
    triton_head_dim_wide: float = 0.0
    # a saturating GEMM's sustained (power-limited) over its burst throughput, 16- and 8-bit
    # (simulator/clocks.py power_limited_clock; 1: no power-limited clock modelled)
    sustained_gemm_ratio_16bit: float = 1.0
    sustained_gemm_ratio_8bit: float = 1.0
    # a fused attention kernel's board power per unit of its tensor activity relative to a GEMM's
    # (its softmax exponentials, FP32 rescaling and shared-memory traffic draw power its tensor
    # FLOP rate does not count): the weight of its tensor-saturated seconds in the step's
    # activity (simulator/program.py tensor_activity; 1: not measured on this architecture)
    attention_power_factor: float = 1.0
    # whether a training step's clock follows the activity law of simulator/clocks.py with the
    # ratios above (1), or the power-limited clock stays inside the stack's fitted
    # sustained_clock_fraction as on an architecture without a measured ratio (0). The ratios
    # always set the clock of a power-saturated microbenchmark (kernels.toml clock = "sustained");
    # the law in training is a model choice validated per architecture against the training rows
    # (docs/calibration.md "kmiss": off on Ampere, where it worsens the A100 fits)
    activity_law: float = 1.0
    # a memory-bound GEMM's achieved HBM bandwidth as a fraction of the streaming-copy bandwidth
    # above (its operand loads and epilogue stores are tile-shaped, not one stream; 1: copy speed,
    # or no memory-bound GEMM measured on this architecture); the GEMM memory floor (gemm_plan)
    gemm_memory_bw_scale: float = 1.0
    # how far a GEMM's main loop hides its HBM traffic: the kernel takes (t_compute^p +
    # t_memory^p)^(1/p) with p this exponent, below the roofline's max(t_compute, t_memory) most at
    # the ridge point, where both are equal (2^(1/p) of either); 0: perfect overlap (the max)
    gemm_overlap_exponent: float = 0.0
    # achievable bandwidth of a framework memory-bound kernel kind (MEMORY_KINDS) as a fraction of
    # the streaming-copy bandwidth above (1: measured at copy speed, or not measured on this
    # architecture); fitted to that kind's [[memory]] figures (kernels.toml)
    swiglu_fwd_bw_scale: float = 1.0
    swiglu_bwd_bw_scale: float = 1.0
    cross_entropy_fwd_bw_scale: float = 1.0
    cross_entropy_bwd_bw_scale: float = 1.0
    cross_entropy_fused_fwd_bw_scale: float = 1.0
    cross_entropy_fused_bwd_bw_scale: float = 1.0
    torch_layer_norm_fwd_bw_scale: float = 1.0
    torch_layer_norm_bwd_bw_scale: float = 1.0
    # FlashAttention-2's tensor-core rate relative to the architecture's peak (multiplies its
    # fwd/bwd fractions): flash-attn 2.x issues the warp-level sm80 mma.sync on every GPU
    # (csrc/flash_attn/src/kernel_traits.h MMA_Atom<SM80_16x8x16_...>, flash-attention@0251105a),
    # and Blackwell doubles the per-SM BF16 rate to 8,192 FLOP/clk only through tcgen05.mma
    # (FlashAttention-4, arXiv 2603.05451, Sec. 2), so FA2 keeps Hopper's 4,096: 0.5 on Blackwell,
    # where the fractions are Hopper's (borrowed); 1 elsewhere. Checked, not fitted: cudnn-frontend's
    # B200 and GB300 flash_attention rows (kernels.toml, kfig4)
    fa2_mma_rate_scale: float = 1.0

    def sustained_gemm_ratio(self, dtype: str) -> float:
        low = dtype in LOW_PRECISION_GEMM_DTYPES
        return self.sustained_gemm_ratio_8bit if low else self.sustained_gemm_ratio_16bit

    def training_gemm_ratio(self, dtype: str) -> float:
        """The ratio a training step's activity law uses: 1 (no power-limited clock of the mix)
        where the architecture does not apply the law (`activity_law` 0)."""
        return self.sustained_gemm_ratio(dtype) if self.activity_law else 1.0

    def _attention(self, impl: str, term: str) -> float:
        return float(getattr(self, f"{ATTENTION_PARAMS_OF.get(impl, impl)}_{term}"))

    def attention_fraction(self, impl: str, pass_: str) -> float:
        scale = self.fa2_mma_rate_scale if ATTENTION_PARAMS_OF.get(impl, impl) == "fa2" else 1.0
        return self._attention(impl, f"{pass_}_fraction") * scale

    def attention_seq_half(self, impl: str, pass_: str) -> float:
        return self._attention(impl, f"{pass_}_seq_half")

    def attention_causal_scale(self, impl: str) -> float:
        return self._attention(impl, "causal_scale")

    def attention_causal_mask_cost(self, impl: str) -> float:
        return self._attention(impl, "causal_mask_cost")

    def attention_head_dim_half(self, impl: str) -> float:
        return self._attention(impl, "head_dim_half")

    def attention_head_dim_wide(self, impl: str) -> float:
        return self._attention(impl, "head_dim_wide")

    def memory_bw_scale(self, kind: str) -> float:
        """The achievable bandwidth of `kind` relative to a streaming copy (MEMORY_KINDS)."""
        if kind not in MEMORY_KINDS:
            raise ConfigError(
                f"memory kernel kind {kind!r}: expected one of {', '.join(MEMORY_KINDS)}", key="kind"
            )
        return 1.0 if kind == "copy" else float(getattr(self, f"{kind}_bw_scale"))


@lru_cache(maxsize=16)
def params_for_architecture(arch: str) -> KernelParams:
    table = kernel_data()["model"][arch]
    if float(table.get("activity_law", 1.0)) not in (0.0, 1.0):
        raise ConfigError(
            f"kernels.toml [model.{arch}] activity_law = {table['activity_law']!r}: expected 0 or 1",
            key="activity_law",
        )
    if float(table.get("attention_power_factor", 1.0)) <= 0.0:
        raise ConfigError(
            f"kernels.toml [model.{arch}] attention_power_factor = {table['attention_power_factor']!r}:"
            " expected a positive power ratio",
            key="attention_power_factor",
        )
    return KernelParams(
        **{
            f.name: float(table[f.name])
            for f in fields(KernelParams)
            if f.name in table or f.default is MISSING
        }
    )


def kernel_params(gpu: GPUSpec) -> KernelParams:
    return params_for_architecture(architecture(gpu.name))


def gemm_tiles(gpu: GPUSpec) -> tuple[tuple[int, int], ...]:
    """The (tile rows, tile cols) shapes cuBLAS picks from on this GPU's architecture."""
    return GEMM_TILES + ARCH_GEMM_TILES.get(architecture(gpu.name), ())


def default_attention(gpu: GPUSpec) -> str:
    return DEFAULT_ATTENTION.get(architecture(gpu.name), "fa2")


def resolve_attention(gpu: GPUSpec, attention: str, flash_attention: bool) -> str:
    """The implementation a scenario's [kernels] table selects on this GPU."""
    if not flash_attention:
        return "unfused"
    impl = attention or default_attention(gpu)
    check_attention_arch(impl, architecture(gpu.name), gpu.name, "kernels.attention")
    return impl


# ----------------------------------------------------------------------------- memory
def memory_time_s(
    gpu: GPUSpec,
    moved_bytes: float,
    params: KernelParams | None = None,
    kind: str = "copy",
    kernels: int = 1,
) -> float:
    """`kernels` memory-bound kernels of `kind` (MEMORY_KINDS) that read + write `moved_bytes` of
    HBM in total."""
    p = params or kernel_params(gpu)
    scale = p.memory_bw_scale(kind)
    if moved_bytes <= 0:
        return 0.0
    bw = gpu.hbm_bandwidth_bytes_per_s * p.memory_bw_fraction * scale
    return moved_bytes / bw + kernels * p.memory_latency_s


# ----------------------------------------------------------------------------- GEMM
# GEMM kernel dtypes that run on the 8-bit (or 4-bit) tensor-core path: `gemm_fp8_scale` applies.
# "fp8_blockwise": an "fp8" GEMM under [precision] fp8_recipe = "blockwise" (costs.Device.gemm_dtype).
LOW_PRECISION_GEMM_DTYPES = ("fp8", "mxfp8", "nvfp4", "fp8_blockwise")
# BLOCKWISE_PROMOTION_NOTE: a blockwise-scaled FP8 GEMM on Hopper (DeepSeek-V3, arXiv 2412.19437
# §3.3.2; DeepGEMM; cuBLAS 12.9 CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F / BLK128x128_32F, which
# Transformer Engine calls: common/gemm/cublaslt_gemm.cu@d0067d0d) accumulates each 128-deep k-block
# in the WGMMA's registers, then promotes it on the CUDA cores: acc += partial x (scale_a x scale_b),
# one FP32 FMA per accumulator element per k-block. Per k-block of a tm x tn tile that is
# tm*tn FMAs at BLOCKWISE_FP32_FMA_PER_SM_CLOCK against 2*tm*tn*128 MMA FLOPs at the SM's FP8 rate
# (1,978.9 TFLOP/s dense / (132 SMs x 1.83 GHz) = 8,192 FLOP/clock): 1/4 of the MMA time
# (`blockwise_promotion_ratio`). With two consumer warpgroups one promotes while the other's WGMMA
# runs ("while one warpgroup performs the promotion operation, the other is able to execute the MMA
# operation", §3.3.2), so below 1 the promotion is hidden and the main loop keeps the per-tensor
# FP8 rate; what the scales add is their bytes (units.DTYPE_BYTES["fp8_blockwise"]: 4 per 128
# elements of the 1x128 operand) in the memory floor. DeepGEMM's H800 tables (kernels.toml,
# deepgemm) are reproduced this way at training shapes.
BLOCKWISE_K_BLOCK = 128  # elements of K per scale (N_C = 128, §3.3.2)
BLOCKWISE_FP32_FMA_PER_SM_CLOCK = 128  # FP32 cores per Hopper SM (NVIDIA H100 whitepaper, GH100 SM)
HOPPER_FP8_FLOP_PER_SM_CLOCK = 8192  # dense FP8 tensor-core FLOPs per SM and clock (GH100)


def blockwise_promotion_ratio() -> float:
    """CUDA-core promotion time over tensor-core MMA time per k-block of a blockwise-scaled FP8
    GEMM tile on Hopper (BLOCKWISE_PROMOTION_NOTE); independent of the tile shape."""
    fma_clocks = 1.0 / BLOCKWISE_FP32_FMA_PER_SM_CLOCK  # per accumulator element
    mma_clocks = 2.0 * BLOCKWISE_K_BLOCK / HOPPER_FP8_FLOP_PER_SM_CLOCK
    return fma_clocks / mma_clocks


@dataclass(frozen=True, slots=True)
class GemmPlan:
    """The tile and split-K choice of the fastest plan, and its time."""

    time_s: float
    tile_m: int
    tile_n: int
    split_k: int
    waves: int


def gemm_plan(
    gpu: GPUSpec,
    dtype: str,
    m: int,
    n: int,
    k: int,
    batch: int = 1,
    params: KernelParams | None = None,
    out_bytes: int = 2,
    *,
    split: bool = True,
) -> GemmPlan:
    """Fastest (tile, split-K) plan of `batch` independent (m×k)·(k×n) GEMMs in one kernel
    (`split` False: tiles only, no split-K or stream-K, the data-parallel plans)."""
    p = params or kernel_params(gpu)
    if m <= 0 or n <= 0 or k <= 0 or batch <= 0:
        return GemmPlan(0.0, 0, 0, 1, 0)
    sms = gpu.num_sms
    scale = p.gemm_fp8_scale if dtype in LOW_PRECISION_GEMM_DTYPES else 1.0  # low-precision kernels
    # the main loop at the MMA pipe's throughput (tensor_rate_scale); the power-limited ceiling
    # below is the chip's, at the datasheet rate
    peak_per_sm = gpu.peak_flop_per_s(dtype) * p.gemm_peak_fraction * tensor_rate_scale(gpu, dtype, p) / sms
    elt = DTYPE_BYTES[dtype]
    bw = gpu.hbm_bandwidth_bytes_per_s * p.memory_bw_fraction
    # memory floor (at a memory-bound GEMM's bandwidth), and the power-limited ceiling no GEMM
    # shape beats (the MAMF search's best). Near the ridge point a plan's compute and memory times
    # do not overlap perfectly (its operand pipeline has a few stages, so a stage waiting on HBM
    # stalls the MMAs): it takes their p-norm (`gemm_overlap_exponent`), not their max
    t_mem = batch * ((m * k + k * n) * elt + m * n * out_bytes) / (bw * p.gemm_memory_bw_scale)
    t_ceiling = 2.0 * batch * m * n * k / (gpu.peak_flop_per_s(dtype) * scale * p.gemm_max_fraction)
    q = p.gemm_overlap_exponent

    def floor(t_compute: float) -> float:
        big, small = max(t_compute, t_mem), min(t_compute, t_mem)
        if q > 0 and small > 0:  # the larger times (1 + r^p)^(1/p): exactly the max when r^p < 1e-16
            big *= (1.0 + (small / big) ** q) ** (1.0 / q)
        return max(big, t_ceiling)

    best: GemmPlan | None = None

    def better(t: float, split_k: int) -> bool:
        # at a tie (a floor binds every plan) the library keeps the plain kernel: no workspace
        if best is None or t < best.time_s:
            return True
        return t == best.time_s and best.split_k != 1 and split_k == 1

    c = p.gemm_tile_reuse  # small-tile penalty 1/(1 + c(1/tm + 1/tn)), relative to 256x128
    big = 1.0 + c * (1 / 256 + 1 / 128)
    for tm, tn in gemm_tiles(gpu):
        tile_eff = big / (1.0 + c * (1 / tm + 1 / tn))
        tiles = math.ceil(m / tm) * math.ceil(n / tn) * batch
        for sk in SPLIT_K if split else (1,):
            if sk > 1 and (k / sk < SPLIT_K_MIN_K or tiles * sk > 2 * sms):
                break
            kk = math.ceil(k / sk)
            ctas = tiles * sk
            waves = math.ceil(ctas / sms)
            t_tile = 2.0 * tm * tn * (kk + p.gemm_tile_overhead) / (peak_per_sm * tile_eff)
            t = waves * t_tile
            if sk > 1:  # fp32 partial sums written and read back by the reduction
                t += batch * m * n * 4 * (sk + 1) / bw + p.gemm_split_k_latency_s
            t = floor(t) + p.gemm_latency_s
            if better(t, sk):
                best = GemmPlan(t, tm, tn, sk, waves)
        if split and tiles > sms and tiles % sms:
            # stream-K (persistent CTAs share the k-iterations of the last partial wave evenly):
            # no wave quantization, two tile overheads per SM and a fix-up of the split tiles
            work = tiles * k / sms + 2 * p.gemm_tile_overhead
            t = 2.0 * tm * tn * work / (peak_per_sm * tile_eff)
            t += m * n * 4 * 2 / bw + p.gemm_split_k_latency_s
            t = floor(t) + p.gemm_latency_s
            if better(t, 0):
                best = GemmPlan(t, tm, tn, 0, math.ceil(tiles / sms))
    assert best is not None
    return best


def saturated_gemm_flop_per_s(gpu: GPUSpec, dtype: str, params: KernelParams | None = None) -> float:
    """The best GEMM rate of this dtype at the benchmarks' boost clock: the MAMF ceiling (the
    reference a kernel's tensor activity is measured against, simulator/clocks.py)."""
    p = params or kernel_params(gpu)
    scale = p.gemm_fp8_scale if dtype in LOW_PRECISION_GEMM_DTYPES else 1.0
    return gpu.peak_flop_per_s(dtype) * scale * p.gemm_max_fraction


def tensor_rate_scale(gpu: GPUSpec, dtype: str, params: KernelParams) -> float:
    """The tensor-pipe throughput of `dtype`'s GEMM main loop relative to the 16-bit kernels'
    fraction of the dense peak: `gemm_fp8_scale` for the low-precision kernels (fitted on FP8
    GEMMs), and for NVFP4 times the GPU's `fp4_matmul_fraction` (recipes.toml): the block-scaled
    MMA's scale-factor loads and operand bandwidth bound its math rate below the datasheet FP4
    peak, a throughput property of the MMA pipe (its k-loop and per-tile staging). The kernel's
    fixed launch latency, its memory floor (operand and output bytes through HBM) and the chip's
    power-limited ceiling (`gemm_max_fraction` of the datasheet rate, the MAMF best, which also
    sets the saturating GEMM of `saturated_gemm_flop_per_s`) are not the pipe's and are not
    scaled: a faster GPU of the same silicon can then never run an NVFP4 GEMM slower."""
    if dtype not in LOW_PRECISION_GEMM_DTYPES:
        return 1.0
    if dtype == "nvfp4":
        return params.gemm_fp8_scale * gpu.efficiency.fp4_matmul_fraction
    return params.gemm_fp8_scale


def gemm_time_s(
    gpu: GPUSpec,
    dtype: str,
    m: int,
    n: int,
    k: int,
    batch: int = 1,
    params: KernelParams | None = None,
    out_bytes: int = 2,
) -> float:
    return gemm_plan(gpu, dtype, m, n, k, batch, params, out_bytes).time_s


# ----------------------------------------------------------------------------- attention
def attention_flops(
    batch: int, seq: int, heads: int, head_dim: int, causal: bool, pass_: str, window: int = 0
) -> float:
    """FLOPs in the FlashAttention benchmarks' convention (Dao 2023, benchmark_flash_attention.py).
    A causal sliding window of `window` keys counts the causal FLOPs scaled by the share of the
    causal work the window keeps (flops.LOCAL_ATTENTION_NOTE; FlashAttention-3's
    hopper/benchmark_attn.py `flops` counts a window by its visible keys the same way)."""
    f = 4.0 * batch * seq * seq * heads * head_dim / (2 if causal else 1)
    if window and causal:
        f *= _window_share(seq, window)
    return {"fwd": f, "bwd": BWD_FLOP_RATIO * f, "fwd+bwd": (1 + BWD_FLOP_RATIO) * f}[pass_]


def _window_share(seq: int, window: int) -> float:
    """Σ min(p + 1, w) / Σ (p + 1) over the s positions (flops.causal_keys)."""
    if window <= 0 or window >= seq:
        return 1.0
    return (seq * window - window * (window - 1) / 2) / (seq * (seq + 1) / 2)


# SLIDING_WINDOW_NOTE: a local (sliding-window) fused kernel skips every KV block outside the
# window: FlashAttention-2 starts query tile m at n_block_min = max(0, (m·kBlockM − window_left) /
# kBlockN) and stops at its diagonal (csrc/flash_attn/src/flash_fwd_kernel.h:90-95@0251105a), so a
# query tile of M rows streams M + N·ceil((w − 1)/N) keys once its window is inside the sequence,
# whole blocks however few of their keys it sees (w = 128 with 128-key blocks: 256 keys streamed
# for 128 visible). FlashAttention-3 (hopper/block.h n_block_min from window_size_left) and cuDNN
# (sliding_window_length, hopper/benchmark_attn.py `cudnn_spda_setup`) skip blocks the same way.
# Masking: FlashAttention-2's local kernel applies the window mask to every block it streams
# (flash_fwd_kernel.h:409 apply_mask in the main loop, which masks whenever Is_local: mask.h
# Need_masking); FlashAttention-3 masks only the diagonal block and the block at the window's left
# edge (hopper/mainloop_fwd_sm90_tma_gmma_ws.hpp n_block_min_before_local_mask), as cuDNN is
# taken to. Blocks are taken square, M = N = the implementation's causal tile (`attention_causal_block`,
# 128: causal_extent): FlashAttention-2's head-dim-64 forward runs 128 x 128
# (csrc/flash_attn/src/flash_fwd_launch_template.h run_mha_fwd_hdim64), FlashAttention-3's sm90
# head-dim-128 local kernel 128 x 128 and its head-dim-64 one 192 x 128 (hopper/tile_size.h
# tile_size_fwd_sm90), which the square 128 block approximates.
# Unfused attention computes and masks the whole score matrix whatever the window, so it is costed
# as full causal attention: Megatron-Core's DotProductAttention (megatron/core/transformer/
# dot_product_attention.py@d98e8a64: torch.baddbmm over the full [sq, sk] scores, then
# FusedScaleMaskSoftmax with window_size, whose torch path builds get_sliding_window_causal_mask
# over the whole matrix, fusions/fused_softmax.py:321), Transformer Engine's
# UnfusedDotProductAttention (attention/dot_product_attention/backends.py:505-522@d0067d0d:
# get_full_mask(window_size=...), a full s×s mask) and HF's eager_attention_forward alike. A window of at least `seq` keys is full causal attention (FlashAttention's
# flash_api.cpp drops such a window: window_size_left >= seqlen_k -> -1).
LOCAL_MASK_EVERY_BLOCK = ("fa2",)
LOCAL_ATTENTION_IMPLS = ("fa2", "fa3", "cudnn", "unfused")  # the Triton kernels take no window


def local_tile_work(seq: int, window: int, block: float, mask_cost: float, every_block: bool) -> float:
    """Mean keys of work per query tile of a causal sliding-window kernel (SLIDING_WINDOW_NOTE):
    the keys of the KV blocks it streams plus `mask_cost` per key of its masked blocks.

    Query tile i (rows iM .. iM + M - 1, square M x M blocks) with window_left = w - 1 streams
    blocks floor(max(0, iM - wl)/M) .. i. Masked: all of them (`every_block`, FlashAttention-2's
    local kernel), or (FlashAttention-3, hopper/block.h@0251105a get_n_block_min_causal_local_mask
    and get_n_block_min_before_local_mask) the diagonal block plus the blocks below
    ceil(((i+1)M - wl)/M) -- one block when wl is a multiple of M, two otherwise, none while the
    window reaches key 0 from every row of the tile."""
    m = max(1, round(block))
    n = math.ceil(seq / m)
    wl = window - 1
    kb = math.ceil(wl / m)  # blocks left of a tile's own that its window reaches

    def tile(i: int) -> tuple[int, int]:
        first = max(0, i * m - wl) // m
        streamed = i - first + 1
        if every_block:
            return streamed, streamed
        edge = max(0, math.ceil(((i + 1) * m - wl) / m) - first) if (i + 1) * m > wl else 0
        return streamed, min(streamed, 1 + edge)

    early = min(n, kb + 1)  # tiles whose window is clipped at key 0 (or just reaches it)
    streamed = masked = 0
    for i in range(early):
        s_i, m_i = tile(i)
        streamed, masked = streamed + s_i, masked + m_i
    if n > early:  # every later tile is alike
        s_i, m_i = tile(early)
        streamed, masked = streamed + (n - early) * s_i, masked + (n - early) * m_i
    return block * (streamed + mask_cost * masked) / n


def _check_attention(impl: str, pass_: str) -> None:
    if impl not in ATTENTION_IMPLS:
        raise ConfigError(f"attention implementation {impl!r}: expected one of {', '.join(ATTENTION_IMPLS)}")
    if pass_ not in ATTENTION_PASSES:
        raise ConfigError(f"attention pass {pass_!r}: expected one of {', '.join(ATTENTION_PASSES)}")


def sfu_exp_speedup(gpu: GPUSpec) -> float:
    """Exponential throughput per SM-clock relative to the architecture's reference part
    (kernels.toml [sfu_exp_speedup]: 2 on Blackwell Ultra, NVIDIA's doubled SFU)."""
    return float(kernel_data().get("sfu_exp_speedup", {}).get(gpu.name, 1.0))


def exposed_exp_share(p: KernelParams, efficiency: float, head_dim: int, pass_: str) -> float:
    """Share of a fused attention kernel's time on the reference part spent on the softmax
    exponentials, taken as not overlapped with the MMAs (NVIDIA's Blackwell Ultra softmax blog:
    on GB200 the second GEMM waits for the softmax while the tensor cores idle). The exponentials
    cost `attention_exp_mma_ratio` × the MMA time at peak for head dim 128 in the forward (one exp
    per score of 4·d FLOPs), ∝ 128/d, and a backward of 2.5× the FLOPs recomputes one exp per score;
    the kernel runs at `efficiency` of the peak, so the share is efficiency × that ratio.

    It is at most 1 − efficiency: the kernel's time beyond its MMAs at the tensor-core peak. A
    larger share would leave the MMAs less time than the peak allows (head dim 64, where the
    exponentials cost twice the MMAs: measured cuDNN forward on GB200 reaches only 43% of the peak
    at s = 32k, so most of that exp time overlaps the MMAs), and a faster SFU would then carry the
    kernel past the peak (GB300 d64 forward was costed at 102% of the BF16 dense peak)."""
    ratio = p.attention_exp_mma_ratio * 128.0 / head_dim
    if pass_ == "bwd":
        ratio /= BWD_FLOP_RATIO
    return max(0.0, min(efficiency * ratio, 1.0 - efficiency))


def fused_attention_efficiency(
    p: KernelParams, impl: str, pass_: str, seq_kv: int, head_dim: int, causal: bool, window: int = 0
) -> float:
    """Achieved fraction of the 16-bit dense peak on the FlashAttention-convention FLOPs."""
    # A CTA streams the kv blocks of one query tile: s/B blocks of work plus a fixed cost of
    # seq_half/B blocks (Q load, O write, pipeline fill), so efficiency s/(s + seq_half).
    sh = p.attention_seq_half(impl, pass_)
    if causal and 0 < window < seq_kv:
        # the convention's keys per query tile, s/2 scaled by the window's share, over the tile's
        # work (SLIDING_WINDOW_NOTE); causal_extent's terms at w >= s
        block, c = causal_block(p, impl, pass_, head_dim)
        work = local_tile_work(seq_kv, window, block, c, impl in LOCAL_MASK_EVERY_BLOCK)
        useful = 0.5 * seq_kv * _window_share(seq_kv, window)
        seq_factor = p.attention_causal_scale(impl) * useful / (work + sh)
    elif causal:
        extent = causal_extent(p, impl, pass_, head_dim)
        seq_factor = p.attention_causal_scale(impl) * seq_kv / (seq_kv + extent + 2 * sh)
    else:
        seq_factor = seq_kv / (seq_kv + sh)
    return p.attention_fraction(impl, pass_) * seq_factor * head_dim_factor(p, impl, pass_, head_dim)


def causal_extent(p: KernelParams, impl: str, pass_: str, head_dim: int = 128) -> float:
    """Key positions a causal kernel computes per query tile beyond the FLOP convention's s/2.

    Query tile i of height M (`attention_causal_block`, 128 rows in FlashAttention-2/-3 and cuDNN
    at head dim 128) streams the (i+1)·M keys up to its diagonal: on average (s + M)/2 of them,
    where the convention counts s/2. Its last M keys (the diagonal tiles) are masked, and a masked
    position costs 1 + c of an unmasked one (`{impl}_causal_mask_cost`: index compares and selects
    on the score tile; FlashAttention-2's sm80 kernel does them in the warps that issue the MMAs,
    FA3 and cuDNN overlap them with the asynchronous wgmma). Per tile: (s + M)/2 + c·M + fixed cost,
    so the causal efficiency is s/(s + M·(1 + 2c) + 2·seq_half). FlashAttention-2 runs 64-row
    tiles at head dim 256 on Hopper (`fa2_*_wide_head_block`), so its diagonal there is half as wide. The backward does 2.5x the MMA work
    per score for the same mask work, so it pays c/2.5 (as head_dim_factor's per-score term).
    With c = 0.3 the masked tiles are 40% of the work at s = 512 (M = 128) but 1.6% at 16k: why
    FlashAttention-2's causal forward loses 38% to its non-causal rate at 512 tokens on H100 and
    10% at 16k (fa3-paper Fig. 5c/5d)."""
    block, c = causal_block(p, impl, pass_, head_dim)
    return block * (1.0 + 2.0 * c)


def causal_block(p: KernelParams, impl: str, pass_: str, head_dim: int = 128) -> tuple[float, float]:
    """(query-tile height M, mask cost c per masked key) of a causal kernel (causal_extent)."""
    c = p.attention_causal_mask_cost(impl)
    if pass_ == "bwd":
        c /= BWD_FLOP_RATIO
    block = p.attention_causal_block
    if impl == "fa2" and head_dim > 128:
        block = (p.fa2_bwd_wide_head_block if pass_ == "bwd" else p.fa2_fwd_wide_head_block) or block
    return block, c


def head_dim_factor(p: KernelParams, impl: str, pass_: str, head_dim: int) -> float:
    """Efficiency at `head_dim` relative to head dim 128 (1 at 128).

    Per-score work (scaling, the softmax exponentials, masking) is the same for every head dim
    while the MMA FLOPs per score are 4·d: a fixed cost of `head_dim_half` FLOP-equivalents per
    score row gives d/(d + h). The backward does 2.5x the MMA FLOPs per score for one recomputed
    exponential per score (Dao 2023, §3.1.2), so its per-score share is h/2.5. Beyond d = 128 each
    doubling adds `head_dim_wide` of the time (smaller tiles; fa3-paper Fig. 5e/5f). Fitted to the
    FlashAttention-2/-3 papers' head-dim 64/128/256 bars (cuDNN forward d64 runs at 0.69x its
    d128 rate on H100, FlashAttention-3 at 0.77x, FlashAttention-2 at 0.88x)."""
    h = p.attention_head_dim_half(impl)
    if pass_ == "bwd":
        h /= BWD_FLOP_RATIO
    factor = (head_dim / (head_dim + h)) / (128 / (128 + h))
    if head_dim > 128:
        factor /= 1.0 + p.attention_head_dim_wide(impl) * math.log2(head_dim / 128)
    return factor


def attention_time_s(
    gpu: GPUSpec,
    *,
    batch: int,
    seq: int,
    heads: int,
    head_dim: int,
    causal: bool,
    impl: str,
    pass_: str,
    seq_kv: int | None = None,
    params: KernelParams | None = None,
    window: int = 0,
    chunk: int = 0,
) -> float:
    """One attention kernel (or the unfused sequence) over `batch`·`heads` heads of `seq` queries
    attending to `seq_kv` keys (default `seq`; context parallelism gives each rank seq/cp queries).
    `window` > 0: a causal sliding window of that many keys (SLIDING_WINDOW_NOTE); `chunk` > 0:
    causal attention within `chunk`-token chunks (Llama 4), costed as the chunks' causal attention
    batched in one kernel (a varlen launch)."""
    _check_attention(impl, pass_)
    if impl == "fa2" and head_dim % ATTENTION_HEAD_DIM_ALIGN:
        # FlashAttention-2 zero-pads q, k, v to a multiple of 8 before its kernel (specs.py
        # ATTENTION_HEAD_DIM_ALIGN: flash_attn_interface.py:481-484): the kernel runs, and is timed,
        # at the padded head dim; callers count the model's FLOPs. (A caller's averaged MLA head
        # dim pads to at most max(qk, v), the dim the kernel runs at.)
        head_dim = -(-head_dim // ATTENTION_HEAD_DIM_ALIGN) * ATTENTION_HEAD_DIM_ALIGN
    if pass_ == "fwd+bwd":
        kw: dict[str, Any] = dict(
            batch=batch, seq=seq, heads=heads, head_dim=head_dim, causal=causal, window=window, chunk=chunk
        )
        return attention_time_s(gpu, **kw, impl=impl, pass_="fwd", seq_kv=seq_kv, params=params) + (
            attention_time_s(gpu, **kw, impl=impl, pass_="bwd", seq_kv=seq_kv, params=params)
        )
    p = params or kernel_params(gpu)
    skv = seq_kv or seq
    if batch <= 0 or seq <= 0 or heads <= 0 or head_dim <= 0:
        return 0.0
    local = (0 < window < skv) or (0 < chunk < skv)
    if local:
        if not causal or skv != seq:
            raise ValueError("a sliding window or chunk is modeled for causal self-attention only")
        if impl not in LOCAL_ATTENTION_IMPLS:
            raise ConfigError(
                f"attention implementation {impl!r} takes no sliding window or chunk: one of "
                f"{', '.join(LOCAL_ATTENTION_IMPLS)}",
                key="kernels.attention",
            )
    peak = gpu.peak_flop_per_s("bf16")
    if impl == "unfused":  # the whole score matrix, masked (SLIDING_WINDOW_NOTE)
        return _unfused_attention_s(gpu, p, batch * heads, seq, skv, head_dim, causal, pass_)
    if 0 < chunk < skv:
        whole, rest = divmod(seq, chunk)
        kw = dict(heads=heads, head_dim=head_dim, causal=True, impl=impl, pass_=pass_, params=params)
        t_chunks = attention_time_s(gpu, batch=batch * whole, seq=chunk, **kw)
        return t_chunks + (
            attention_time_s(gpu, batch=batch, seq=rest, **kw) - p.gemm_latency_s if rest else 0.0
        )
    window = window if 0 < window < skv else 0
    flops = 4.0 * batch * seq * skv * heads * head_dim / (2 if causal else 1)
    if window:
        flops *= _window_share(skv, window)
    if pass_ == "bwd":
        flops *= BWD_FLOP_RATIO
    eff = fused_attention_efficiency(p, impl, pass_, skv, head_dim, causal, window)
    t = flops / (peak * eff)
    speedup = sfu_exp_speedup(gpu)
    if speedup != 1.0:  # faster exponentials shorten the exposed softmax share (Blackwell Ultra)
        share = exposed_exp_share(p, eff, head_dim, pass_)
        t *= 1.0 - share + share / speedup
    if impl in ("triton", "flash-attn-triton") and pass_ == "bwd":
        dq = "atomic" if impl == "flash-attn-triton" else "replicas"
        t = _triton_backward_s(gpu, p, t, batch, seq, skv, heads, head_dim, causal, dq=dq)
    return t + p.gemm_latency_s


def _triton_backward_s(
    gpu: GPUSpec,
    p: KernelParams,
    t_kernel: float,
    batch: int,
    seq: int,
    skv: int,
    heads: int,
    head_dim: int,
    causal: bool,
    dq: str = "replicas",
) -> float:
    """The Triton FlashAttention backward (triton python/triton/ops/flash_attention.py, as the
    FlashAttention-2 benchmark runs it: benchmarks/benchmark_flash_attention.py times both
    `sequence_parallel` settings and keeps the faster) from the time `t_kernel` of its work spread
    evenly over the GPU.

    sequence_parallel = False: one CTA per (batch, head) walks every kv block in turn (grid
    (batch·heads, 1)), so batch·heads CTAs fill the SMs in waves: with 16k tokens of 32 heads at
    4,096 tokens that is 128 CTAs on 108 A100 SMs, two waves for 1.2 waves of work.
    sequence_parallel = True: one CTA per (batch, head, 128-key block) (BLOCK = 128) fills the GPU,
    but each writes its own replica of dQ: `torch.zeros` of ceil(skv/128) dQ copies, the kernel's
    stores into them (half when causal: a key block only reaches the queries at or after it) and
    `dq.sum(0)` reading them back, three passes (2.5 causal) over replicas x dQ bytes at the
    streaming bandwidth, plus two memory-bound kernels.

    dq = "atomic": flash-attn's own Triton kernel (flash_attn/flash_attn_triton.py@eff9fe6b, the
    copy llm-foundry runs as attn_impl: triton), whose autotune also keeps the faster of the two
    grids (_bwd_kernel configs SEQUENCE_PARALLEL False / True) but accumulates dQ in one fp32
    buffer (`dq_accum`, zeroed by the config's pre_hook, `dq.copy_(dq_accum)` after): the
    per-(batch, head) CTA adds each kv block's dQ into it with a load and a store, the per-key-block
    CTAs with `tl.atomic_add`. Either way a 128 x head_dim fp32 tile per (query block, key block)
    pair, issued without waiting on it (a reduction returns nothing), so it runs under the CTA's
    matmuls: the kernel takes the longer of its math and that traffic at the streaming bandwidth
    (an upper bound: the adds resolve in L2), then the zeroing and the copy (4 + 6 bytes per dQ
    element). With 128-key blocks that traffic is 1 byte per 320 FLOP (causal or not), about a
    fifth of the math's time on A100 and H100: no replicas, so the sequence-parallel grid fills
    the GPU at any batch·heads."""
    ctas = batch * heads
    waves = math.ceil(ctas / gpu.num_sms)
    t_heads = t_kernel * waves * gpu.num_sms / ctas
    replicas = math.ceil(skv / TRITON_BWD_BLOCK)
    dq_bytes = batch * seq * heads * head_dim * 2.0
    if dq == "atomic":
        pairs = math.ceil(seq / TRITON_BWD_BLOCK) * replicas * (0.5 if causal else 1.0)
        adds = batch * heads * pairs * TRITON_BWD_BLOCK * head_dim * 4.0
        t_adds = memory_time_s(gpu, adds, p, kernels=0)
        t_accum = memory_time_s(gpu, 5.0 * dq_bytes, p, kernels=2)  # zero 4 B, copy 4 + 2 B
        return min(max(t_heads, 2.0 * t_adds), max(t_kernel, t_adds)) + t_accum
    passes = 2.5 if causal else 3.0
    t_seq = t_kernel + memory_time_s(gpu, passes * replicas * dq_bytes, p, kernels=2)
    return min(t_heads, t_seq)


def _unfused_attention_s(
    gpu: GPUSpec, p: KernelParams, count: int, sq: int, skv: int, hd: int, causal: bool, pass_: str
) -> float:
    """Scores GEMM, scale-mask-softmax and dropout through HBM, values GEMM, the context's
    contiguous copy (Megatron-LM 2021-22: UNFUSED_ATTENTION_NOTE)."""
    t_scores = gemm_time_s(gpu, "bf16", sq, skv, hd, count, p)
    t_values = gemm_time_s(gpu, "bf16", sq, hd, skv, count, p)
    scores = count * sq * skv
    bw = gpu.hbm_bandwidth_bytes_per_s * p.memory_bw_fraction
    read_share = 0.5 if causal else 1.0  # the upper-triangular kernel reads up to the diagonal
    if pass_ == "fwd":
        soft_read, soft_write = UNFUSED_SOFTMAX_FWD_BYTES
        mem_bytes = scores * (soft_read * read_share + soft_write + UNFUSED_DROPOUT_FWD_BYTES)
        mem_bytes += count * sq * hd * UNFUSED_CONTEXT_COPY_BYTES
        return t_scores + t_values + mem_bytes / bw + 3 * p.memory_latency_s
    soft_read, soft_write = UNFUSED_SOFTMAX_BWD_BYTES
    mem_bytes = scores * (soft_read * read_share + soft_write + UNFUSED_DROPOUT_BWD_BYTES)
    return t_scores + 3 * t_values + mem_bytes / bw + 2 * p.memory_latency_s


# ----------------------------------------------------------------------------- collectives
@dataclass(frozen=True, slots=True)
class CollectiveResult:
    time_s: float
    algbw_bytes_per_s: float
    busbw_bytes_per_s: float
    algorithm: str
    bottleneck: str


COLLECTIVE_ALGORITHMS = ("ring", "tree", "nvls", "nvlstree", "pat", "hierarchical", "p2p")


def collective(
    topology: str,
    kind: str,
    gpus: int,
    message_bytes: float,
    algorithm: str | None = None,
    params: KernelParams | None = None,
    gpus_per_node: int | None = None,
) -> CollectiveResult:
    """One NCCL collective of `message_bytes` (nccl-tests size convention) on `gpus` GPUs of the
    named topology, placed on consecutive GPUs (one node first), costed by simulator/network.
    `algorithm` (as NCCL_ALGO forces it: ring, tree, nvls, ...) restricts the choice to that
    algorithm's protocols; None = NCCL's fastest. `gpus_per_node`: ranks on only that many GPUs
    of each node ([cluster] gpus_used_per_node: e.g. 4 of an NVL72 rack's 72, a partition of one
    tray per rack); None = whole nodes."""
    from dataclasses import replace

    from .comm import bus_factor
    from .loading import load_topology, scenario_from_dict, use_gpus_per_node
    from .network import TopologyCommModel

    topo = load_topology(topology)
    if gpus_per_node is not None:
        try:
            topo = use_gpus_per_node(topo, gpus_per_node)
        except ConfigError as err:
            raise ConfigError(err.message, key="--gpus-per-node") from None
    if gpus < 2:
        raise ConfigError(f"--gpus {gpus}: a collective needs at least 2 GPUs", key="--gpus")
    if gpus > topo.gpus_per_node and gpus % topo.gpus_per_node:
        raise ConfigError(
            f"--gpus {gpus}: more than one node must be whole nodes of {topo.gpus_per_node}", key="--gpus"
        )
    axis = "tp" if gpus <= topo.gpus_per_node else "dp"
    heads = gpus if axis == "tp" else 8
    scn = scenario_from_dict(
        {
            "model": {
                "name": "probe",
                "layers": 1,
                "hidden": 128 * heads,
                "heads": heads,
                "vocab": 1024,
                "seq_len": 16,
            },
            "cluster": {
                "topology": topology,
                "num_gpus": gpus,
                **({"gpus_used_per_node": gpus_per_node} if gpus_per_node is not None else {}),
            },
            "parallel": {
                "tp": gpus if axis == "tp" else 1,
                "global_batch": 1 if axis == "tp" else gpus,
                "sequence_parallel": False,
            },
        }
    )
    # nccl-tests' achieved fraction of the link rate (kernel level), not a training job's
    gpu = scn.gpu
    p = params or kernel_params(gpu)
    eff = replace(gpu.efficiency, nccl_bw_fraction=p.nccl_bw_fraction)
    scn = replace(scn, topology=replace(scn.topology, gpu=replace(gpu, efficiency=eff)))
    model = TopologyCommModel(
        scn,
        nic_bw_fraction=p.nic_bw_fraction,
        ring_window_bytes=p.nccl_ring_window_bytes,
        nvls_chunk_overhead_bytes=p.nccl_nvls_chunk_overhead_bytes,
        nvls_fraction=p.nccl_nvls_fraction,
        reduce_tail_chunks=p.nccl_reduce_tail_chunks,
    )
    if algorithm is None:
        cost = model.collective(kind, axis, message_bytes)
    else:
        if algorithm not in COLLECTIVE_ALGORITHMS:
            raise ConfigError(
                f"algorithm {algorithm!r}: expected one of {', '.join(COLLECTIVE_ALGORITHMS)}", key="--algo"
            )
        # the candidate's algorithm name up to its protocol or phases ("nvls" is not "nvlstree")
        allowed = [
            c
            for c in model.candidates(kind, axis, message_bytes)
            if c.algorithm.split("/")[0].split("(")[0] == algorithm
        ]
        if not allowed:
            raise ConfigError(f"NCCL has no {algorithm} {kind} on {gpus} GPUs of {topology}", key="--algo")
        cost = allowed[0]
    algbw = message_bytes / cost.time_s if cost.time_s > 0 else 0.0
    return CollectiveResult(
        time_s=cost.time_s,
        algbw_bytes_per_s=algbw,
        busbw_bytes_per_s=algbw * bus_factor(kind, gpus),
        algorithm=cost.algorithm,
        bottleneck=cost.bottleneck,
    )


# ----------------------------------------------------------------------------- the shipped figures
@dataclass(frozen=True, slots=True)
class Figure:
    """One shipped microbenchmark and the model's value of the same quantity."""

    kind: str  # gemm | attention | memory | collective
    label: str
    gpu: str
    measured: float
    predicted: float
    unit: str
    source: str
    reference_only: bool = False  # shipped for comparison, outside what the model describes

    @property
    def error(self) -> float:
        return self.predicted / self.measured - 1.0


def shipped_figures(
    overrides: dict[str, KernelParams] | None = None,
    kinds: tuple[str, ...] = ("gemm", "attention", "memory", "collective"),
    where: Callable[[str, dict[str, Any]], bool] | None = None,
) -> list[Figure]:
    """Every figure of kernels.toml next to the model's prediction (`overrides`: architecture ->
    parameters to use instead of the shipped ones, for the fitting script; `where(kind, row)`:
    only the rows it accepts, so that a fit evaluates only the figures its residuals use)."""
    from .loading import load_gpu_catalog, load_topology

    catalog = load_gpu_catalog()

    def gpu_by_name(name: str) -> GPUSpec:
        return catalog[name]

    data = kernel_data()
    out: list[Figure] = []

    def params(gpu: GPUSpec) -> KernelParams:
        arch = architecture(gpu.name)
        return (overrides or {}).get(arch) or params_for_architecture(arch)

    for row in data.get("gemm", []) if "gemm" in kinds else []:
        if where is not None and not where("gemm", row):
            continue
        gpu = gpu_by_name(row["gpu"])
        b, m, n, k = int(row["batch"]), int(row["m"]), int(row["n"]), int(row["k"])
        t = gemm_time_s(gpu, row["dtype"], m, n, k, b, params(gpu))
        label = f"gemm {row['dtype']} {b}x{m}x{n}x{k}"
        clock = row.get("clock", "burst")
        if clock not in ("burst", "sustained"):
            raise ConfigError(f"kernels.toml: [[gemm]] {label}: clock must be burst or sustained")
        if clock == "sustained":  # measured at the power limit: the clock this GEMM's activity holds
            from .clocks import power_clock_factor, power_limited_clock

            p = params(gpu)
            activity = 2.0 * b * m * n * k / t / saturated_gemm_flop_per_s(gpu, row["dtype"], p)
            ratio = p.sustained_gemm_ratio(row["dtype"])
            t /= power_limited_clock(activity, ratio, power_clock_factor(gpu))
            label += " sustained"
        out.append(
            Figure(
                "gemm",
                label,
                gpu.name,
                row["tflops"],
                2.0 * b * m * n * k / t / 1e12,
                "TFLOP/s",
                row["source"],
                bool(row.get("reference_only", False)),
            )
        )
    for row in data.get("attention", []) if "attention" in kinds else []:
        if where is not None and not where("attention", row):
            continue
        gpu = gpu_by_name(row["gpu"])
        kw = dict(
            batch=int(row["batch"]),
            seq=int(row["seq"]),
            heads=int(row["heads"]),
            head_dim=int(row["head_dim"]),
        )
        causal = bool(row["causal"])
        t = attention_time_s(
            gpu, **kw, causal=causal, impl=row["impl"], pass_=row["pass"], params=params(gpu)
        )
        f = attention_flops(**kw, causal=causal, pass_=row["pass"])
        label = f"attention {row['impl']} {row['pass']} d{row['head_dim']} s{row['seq']}{' causal' if causal else ''}"
        out.append(
            Figure(
                "attention",
                label,
                gpu.name,
                row["tflops"],
                f / t / 1e12,
                "TFLOP/s",
                row["source"],
                bool(row.get("reference_only", False)),
            )
        )
    for row in data.get("memory", []) if "memory" in kinds else []:
        if where is not None and not where("memory", row):
            continue
        gpu = gpu_by_name(row["gpu"])
        kind = row.get("kind", "copy")
        t = memory_time_s(gpu, float(row["bytes"]), params(gpu), kind, int(row.get("kernels", 1)))
        out.append(
            Figure(
                "memory",
                f"memory {row['bytes']:.3g} B" if kind == "copy" else f"memory {kind} {row['bytes']:.3g} B",
                gpu.name,
                row["GBps"],
                row["bytes"] / t / 1e9,
                "GB/s",
                row["source"],
                bool(row.get("reference_only", False)),
            )
        )
    for row in data.get("collective", []) if "collective" in kinds else []:
        if where is not None and not where("collective", row):
            continue
        algo = row.get("algorithm")
        topo_gpu = load_topology(row["topology"]).gpu
        per_node = row.get("gpus_per_node")
        res = collective(
            row["topology"],
            row["kind"],
            int(row["gpus"]),
            float(row["bytes"]),
            algo,
            params(topo_gpu),
            None if per_node is None else int(per_node),
        )
        label = (
            f"{row['kind']} {row['topology']} x{row['gpus']}{f' ({per_node}/node)' if per_node else ''}"
            f" {row['bytes']:.3g} B{' ' + algo if algo else ''}"
        )
        out.append(
            Figure(
                "collective",
                label,
                row["topology"],
                row["busbw_GBps"],
                res.busbw_bytes_per_s / 1e9,
                "GB/s busbw",
                row["source"],
                bool(row.get("reference_only", False)),
            )
        )
    return out
