"""Sustained compute clock of a GPU under its board power limit (issue 12, Blackwell SKUs).

Under dense tensor-core load a Blackwell GPU is power-limited: its clock settles where the
board power is spent, not at the datasheet boost clock its peak TFLOP/s assume. CMOS dynamic
power is P = a·C·V²·f (switching activity a, capacitance C) and inside the DVFS range the
supply voltage tracks the clock, V ∝ f, so P ∝ f³ per SM (Mei, Wang, Chu, "A survey and
measurement study of GPU DVFS on energy conservation", Digital Communications and Networks
2017, §2; the same cube law as the ACPI/Intel "P ∝ V²f" P-state model). A chip of `n` SMs
running the same kernels under a board power `P` therefore sustains

    f ∝ (P / n)^(1/3)

and its sustained fraction of the datasheet peak (whose boost clock is peak / (n · FLOP/clk/SM))
scales, relative to the architecture's reference SKU, by

    factor = ((P / n) / (P_ref / n_ref))^(1/3) · (peak_ref / n_ref) / (peak / n).

Where the architecture has no measured power-limited clock (below), the calibrated
`sustained_clock_fraction` (efficiency.toml) is the reference SKU's and the other SKUs of the
architecture get it times this factor, capped at the boost clock (1.0). Where it has one
(Hopper, Blackwell), the factor scales that clock instead — a saturating GEMM's sustained ratio
on the SKU is k · r_ref by the same cube law — and the fitted fraction is the non-power residual,
the same on every SKU (counted once). This is a law with no per-chip parameter: B200 (1,000 W, 148 SMs) is the reference of Blackwell; GB200
(1,200 W, 152 SMs, a 2.5 PF datasheet peak, i.e. an 8% higher boost clock per SM) gets 0.974, B300
(1,100 W on B200's 148 SMs and 2.25 PF: (1.1)^(1/3)) 1.032 and GB300 (1,400 W on GB200's 152 SMs, 2.5 PF)
1.025 — GB300 sustains (1400/1200)^(1/3) = 5.3% more than GB200 at the same SMs and datasheet peak. Hopper and Ampere SKUs share power per
SM and per-SM peak, so their factor is exactly 1. The reference SKUs are in
simulator/catalog/kernels.toml `[clock_reference]`.

Power-limited clock by workload (issue 12, hopper-scale). The same cube law sets how far the
clock falls for a given mix of kernels. Dynamic power is a·C·V²·f with V ∝ f, and the switching
activity `a` of the tensor cores is proportional to the tensor FLOP rate they sustain (Horace He,
"Strangely, Matrix Multiplications on GPUs Run Faster When Given 'Predictable' Data!",
thonking.ai 2024: random inputs draw more power than zeros and the clock drops to stay under the
board limit; Gregersen, Patel, Choukse, "Input-Dependent Power Usage in GPUs", SC24 workshop,
arXiv 2409.18324: GEMM power moves by up to ~40% with the input bits). So a workload whose
tensor activity D — its tensor FLOP rate at the boost clock relative to a saturating GEMM's — is
below 1 holds a higher clock than a saturating GEMM does:

    f / f_boost = min(1, r · D^(−1/3)),

where r is a saturating GEMM's sustained throughput relative to its short-burst (boost-clock)
throughput, measured on the same GPU in one session: the Maximum Sustainable over the Maximum
Achievable Matmul FLOPS (stas00/ml-engineering compute/accelerator/README.md, branch fast-mamf at
082816f, 2026-08: H200 SXM BF16 708.5 / 841.9 = 0.842 at 693 W, FP8 1,288.7 / 1,491.9 = 0.864;
the burst ran at 1,980 MHz and ~176 W, the sustained shape at ~1,465 / 1,374 MHz. B200 SXM BF16
1,456.3 / 1,770.9 = 0.822 at ~994 W, FP8 2,795.7 / 3,435.2 = 0.814; burst at 1,965 MHz). On
another SKU of the architecture r becomes k · r with k its board-power factor above
(GB200 0.801 in BF16, B300 0.849, GB300 0.843). The shipped
GEMM figures the kernel model reproduces are bursts at the boost clock (OpenXLA's table: one
warm-up and five timed runs per shape; MAMF: 50 warm-up and 100 timed iterations), so a training
step's kernels run at this fraction of them. The static and memory power are taken as
independent of the kernel mix (they cancel out of the ratio), and D is a property of the step's
kernel mix, not of one kernel: GPU Boost's power loop averages over many kernels.

Attention's power (issue 12, attnpower). The tensor FLOP rate under-counts a fused attention
kernel: its softmax exponentials (MUFU), FP32 rescaling and shared-memory and register traffic
draw power a GEMM at the same tensor rate does not. The mix's activity therefore counts a fused
attention kernel's tensor-saturated seconds `attention_power_factor` times (kernels.toml
[model.*]; simulator/program.py tensor_activity), the ratio of its power activity to its tensor
activity measured at the power limit and inverted through the same law: FlashAttention-4 BF16 on
B200 (flashinfer-ai/flashinfer PR #2899) runs at 1,450 TFLOP/s at the boost clock, D = 0.830,
and 1,237 at the 1,000 W limit, 0.853 of it where a = D would hold 0.875, so a = (0.8223 /
0.853)^3 = 0.896 = 1.078 · D. Hopper has no published attention-power figure and keeps 1. The
factor scales with the kernel's tensor rate (the exponentials per MMA FLOP are fixed by the head
dim), so it is a lower bound for a slower kernel: power that follows the time a kernel keeps its
SMs busy rather than its tensor rate is not in it (docs/calibration.md, "Attention's power").
"""

from __future__ import annotations

from functools import lru_cache

from .specs import GPUSpec

CLOCK_POWER_EXPONENT = 1.0 / 3.0  # f ∝ P^(1/3): P ∝ C·V²·f with V ∝ f (Mei et al. 2017)


def power_clock_factor_of(
    power_w: float,
    num_sms: int,
    peak_flop_per_s: float,
    ref_power_w: float,
    ref_sms: int,
    ref_peak_flop_per_s: float,
) -> float:
    """Sustained fraction of the datasheet peak relative to the reference SKU's (the law above)."""
    if min(power_w, num_sms, peak_flop_per_s, ref_power_w, ref_sms, ref_peak_flop_per_s) <= 0:
        return 1.0
    power_per_sm = (power_w / num_sms) / (ref_power_w / ref_sms)
    boost = (peak_flop_per_s / num_sms) / (ref_peak_flop_per_s / ref_sms)
    return float(power_per_sm**CLOCK_POWER_EXPONENT / boost)


@lru_cache(maxsize=8)
def _reference(arch: str) -> tuple[float, int, float] | None:
    from .kernel_catalog import kernel_data
    from .loading import load_gpu_catalog

    name = kernel_data().get("clock_reference", {}).get(arch)
    ref = load_gpu_catalog().get(name) if name else None
    if ref is None:
        return None
    return ref.board_power_w, ref.num_sms, ref.peak_bf16_flop_per_s


@lru_cache(maxsize=64)
def _factor(name: str) -> float:
    from .kernel_catalog import kernel_data
    from .loading import load_gpu_catalog

    arch = kernel_data()["architectures"].get(name)  # a GPU from a user's topology file: no law
    ref = _reference(arch) if arch else None
    sku = load_gpu_catalog().get(name)
    if ref is None or sku is None:
        return 1.0
    return power_clock_factor_of(sku.board_power_w, sku.num_sms, sku.peak_bf16_flop_per_s, *ref)


def power_clock_factor(gpu: GPUSpec) -> float:
    """The sustained clock of this GPU's catalog SKU relative to its architecture's reference SKU
    (1.0 for a GPU outside the catalog). A property of the named SKU, from its catalog entry: a
    scenario that changes a GPU's peaks or SMs changes its speed through them, not this factor."""
    return _factor(gpu.name)


def power_limited_clock(tensor_activity: float, saturated_ratio: float, sku_factor: float = 1.0) -> float:
    """Clock (relative to the benchmark's boost clock) a power-limited GPU holds for a kernel mix
    of `tensor_activity` D: min(1, k · r · D^(−1/3)) (the law above; r = 1 turns it off), r
    measured on the architecture's reference SKU and k its board-power factor for this SKU."""
    if saturated_ratio >= 1.0 or tensor_activity <= 0.0:
        return 1.0
    return float(min(1.0, sku_factor * saturated_ratio * tensor_activity ** (-CLOCK_POWER_EXPONENT)))


def has_activity_law(gpu: GPUSpec) -> bool:
    """Whether this GPU's architecture models the power-limited clock of the kernel mix (a
    measured r < 1 in kernels.toml); then the board-power factor scales that clock, not the
    fitted residual."""
    return _has_activity_law(gpu.name)


@lru_cache(maxsize=64)
def _has_activity_law(name: str) -> bool:
    # a property of the named GPU's architecture (every Device.clock asks: cached like _factor)
    from .kernel_catalog import architecture, kernel_data  # not .kernels: it imports this module

    table = kernel_data()["model"].get(architecture(name), {})
    ratios = (table.get("sustained_gemm_ratio_16bit", 1.0), table.get("sustained_gemm_ratio_8bit", 1.0))
    return bool(float(table.get("activity_law", 1.0))) and min(float(r) for r in ratios) < 1.0


def sustained_clock_fraction(gpu: GPUSpec) -> float:
    """Compute throughput under sustained training load relative to the microbenchmarks, beyond
    the power-limited clock of the kernel mix where the architecture models it. Counted once:
    with the activity law the board-power factor goes into that clock (r_SKU = k · r_ref, the
    same cube law), and the fitted clock is the non-power residual, the same on every SKU."""
    if has_activity_law(gpu):
        return min(1.0, gpu.efficiency.sustained_clock_fraction)
    return min(1.0, gpu.efficiency.sustained_clock_fraction * power_clock_factor(gpu))
