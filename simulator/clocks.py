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

The calibrated `sustained_clock_fraction` (efficiency.toml) is the reference SKU's; the other
SKUs of the architecture get it times this factor, capped at the boost clock (1.0). This is a
law with no per-chip parameter: B200 (1,000 W, 148 SMs) is the reference of Blackwell; GB200
(1,200 W, 148 SMs, a 2.5 PF datasheet peak, i.e. an 11% higher boost clock) gets 0.956, B300
(1,100 W, 160 SMs at B200's 2.25 PF) 1.087 and GB300 (1,400 W, 160 SMs, 2.5 PF) 1.061 — GB300
sustains 11% more than GB200 at the same datasheet peak. Hopper and Ampere SKUs share power per
SM and per-SM peak, so their factor is exactly 1. The reference SKUs are in
simulator/catalog/kernels.toml `[clock_reference]`.
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
    from .kernels import kernel_data
    from .loading import load_gpu_catalog

    name = kernel_data().get("clock_reference", {}).get(arch)
    ref = load_gpu_catalog().get(name) if name else None
    if ref is None:
        return None
    return ref.board_power_w, ref.num_sms, ref.peak_bf16_flop_per_s


@lru_cache(maxsize=64)
def _factor(name: str) -> float:
    from .kernels import kernel_data
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


def sustained_clock_fraction(gpu: GPUSpec) -> float:
    """Compute throughput under sustained training load relative to the microbenchmarks."""
    return min(1.0, gpu.efficiency.sustained_clock_fraction * power_clock_factor(gpu))
