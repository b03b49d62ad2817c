"""Blackwell SKU physics (issue 12): sustained clock from board power, Blackwell Ultra's SFU."""

from __future__ import annotations

from dataclasses import replace

import pytest

from simulator import clocks as C
from simulator import kernels as K
from simulator.loading import gpu_by_name


# ----------------------------------------------------------------------------- clock law
def test_clock_law_closed_form() -> None:
    # same SMs and peak, twice the power: f ∝ P^(1/3)
    assert C.power_clock_factor_of(2000.0, 148, 2.25e15, 1000.0, 148, 2.25e15) == pytest.approx(2 ** (1 / 3))
    # twice the SMs at the same per-SM peak and power per SM: the same clock
    assert C.power_clock_factor_of(2000.0, 296, 4.5e15, 1000.0, 148, 2.25e15) == pytest.approx(1.0)
    # a 10% higher datasheet boost clock at the same power: 10% lower fraction of the peak
    assert C.power_clock_factor_of(1000.0, 148, 2.475e15, 1000.0, 148, 2.25e15) == pytest.approx(1 / 1.1)


@pytest.mark.parametrize("sms", [132, 148, 160])
def test_clock_law_monotone_in_power(sms: int) -> None:
    powers = [600.0 + 50.0 * i for i in range(20)]
    factors = [C.power_clock_factor_of(p, sms, 2.25e15, 1000.0, 148, 2.25e15) for p in powers]
    assert all(b > a for a, b in zip(factors, factors[1:], strict=False))


def test_sustained_throughput_never_falls_with_more_power_or_sms() -> None:
    """Power-limited throughput = peak × factor ∝ SMs^(2/3) · P^(1/3): more of either never loses."""

    def throughput(p: float, n: int) -> float:
        peak = 2.25e15 * n / 148
        return peak * C.power_clock_factor_of(p, n, peak, 1000.0, 148, 2.25e15)

    for p in (800.0, 1000.0, 1400.0):
        for n in (120, 148, 160):
            assert throughput(p * 1.1, n) > throughput(p, n)
            assert throughput(p, n + 8) > throughput(p, n)


def test_catalog_clock_factors() -> None:
    # reference SKUs and SKUs sharing power per SM and per-SM peak: exactly 1
    for name in ("b200", "h100-sxm", "h200", "h800", "a100-80gb", "a100-40gb"):
        assert C.power_clock_factor(gpu_by_name(name)) == pytest.approx(1.0)
    gb200, gb300 = gpu_by_name("gb200"), gpu_by_name("gb300")
    # GB200: 1,200 W on its 152 SMs against B200's 1,000 W on 148, datasheet 2.5 vs 2.25 PF
    per_sm_power = (1200 / 152) / (1000 / 148)
    per_sm_peak = (2500 / 152) / (2250 / 148)
    assert C.power_clock_factor(gb200) == pytest.approx(per_sm_power ** (1 / 3) / per_sm_peak, rel=1e-9)
    assert gb200.num_sms == 152
    # GB300 against GB200: the same SMs (both ship 152) and datasheet peak, 1,400 vs 1,200 W
    assert gb300.num_sms == gb200.num_sms
    ratio = C.power_clock_factor(gb300) / C.power_clock_factor(gb200)
    assert ratio == pytest.approx((1400 / 1200) ** (1 / 3), rel=1e-9)
    assert 1.05 < ratio < 1.06
    # B300: B200's 148 SMs and datasheet peak at 1,100 W: the board power alone, (1.1)^(1/3)
    assert C.power_clock_factor(gpu_by_name("b300")) == pytest.approx(1.1 ** (1 / 3), rel=1e-9)


def test_b300_is_b200_silicon_at_higher_board_power() -> None:
    """The shipped B300 SXM6 AC: 148 SMs (cudaGetDeviceProperties; 160 is the full Blackwell Ultra
    implementation), B200's BF16/FP8 datasheet peaks, 1,100 W against B200's 1,000 W (nvidia-smi cap
    on a p6-b300 node, QwenLM/FlashQLA PR #29). So its only modelled compute edge over B200 is the
    cube-law clock of 100 W more (+3.2%) and the doubled SFU exponentials in attention."""
    b200, b300 = gpu_by_name("b200"), gpu_by_name("b300")
    assert b300.num_sms == b200.num_sms == 148
    assert b300.board_power_w == 1100.0 and b200.board_power_w == 1000.0
    for dtype in ("bf16", "fp16", "fp8"):
        assert b300.peak_flop_per_s(dtype) == b200.peak_flop_per_s(dtype)
    r = K.params_for_architecture("blackwell").sustained_gemm_ratio("bf16")
    sat = C.power_limited_clock(1.0, r, C.power_clock_factor(b300)) / C.power_limited_clock(1.0, r)
    assert sat == pytest.approx(1.1 ** (1 / 3), rel=1e-9)
    assert 1.03 < sat < 1.035


def test_sustained_clock_is_capped_at_the_boost_clock() -> None:
    """B300's board-power factor (> 1) lifts its power-limited clock, which stops at the boost
    clock; the fitted residual (<= 1 by its schema) is not multiplied by it on Blackwell."""
    b300 = gpu_by_name("b300")
    fast = replace(b300, efficiency=replace(b300.efficiency, sustained_clock_fraction=0.99))
    assert C.sustained_clock_fraction(fast) == 0.99
    k = C.power_clock_factor(b300)
    r = K.params_for_architecture("blackwell").sustained_gemm_ratio("bf16")
    assert k * r < 1.0 < k * r * 0.5 ** (-1 / 3)
    assert C.power_limited_clock(1.0, r, k) == pytest.approx(k * r)
    assert C.power_limited_clock(0.5, r, k) == 1.0


def test_board_power_factor_is_counted_once_on_blackwell() -> None:
    """Blackwell models the power-limited clock of the kernel mix (a measured MSMF / MAMF < 1), so
    the SKU's board-power factor scales that clock (r_SKU = k · r_B200, the same cube law) and
    the fitted residual is the same on every SKU; without the activity law (Ampere) the factor
    scales the residual as before (it is 1 there)."""
    b200, gb200, b300, gb300 = (gpu_by_name(n) for n in ("b200", "gb200", "b300", "gb300"))
    for gpu in (b200, gb200, b300, gb300):
        assert C.has_activity_law(gpu)
        assert C.sustained_clock_fraction(gpu) == pytest.approx(b200.efficiency.sustained_clock_fraction)
    assert not C.has_activity_law(gpu_by_name("a100-80gb"))
    r = K.params_for_architecture("blackwell").sustained_gemm_ratio("bf16")
    # a saturating GEMM (D = 1): the SKU's MSMF / MAMF, scaled by its board power per SM
    sat = {g.name: C.power_limited_clock(1.0, r, C.power_clock_factor(g)) for g in (b200, gb200, gb300)}
    assert sat["b200"] == pytest.approx(1456.3 / 1770.9, abs=1e-4)
    # GB200: 1,200 W on 152 SMs against B200's 1,000 W on 148, per-SM datasheet rate 2500/152 vs 2250/148
    gb200_factor = ((1200 / 152) / (1000 / 148)) ** (1 / 3) / ((2500 / 152) / (2250 / 148))
    assert sat["gb200"] == pytest.approx(r * gb200_factor, rel=1e-9)
    # GB300 sustains 5.3% more than GB200 on the same SMs and datasheet peak (1,400 vs 1,200 W)
    assert sat["gb300"] / sat["gb200"] == pytest.approx((1400 / 1200) ** (1 / 3), rel=1e-9)


def test_gpu_outside_the_catalog_gets_no_law() -> None:
    user = replace(gpu_by_name("gb300"), name="my-gpu", board_power_w=5000.0)
    assert C.power_clock_factor(user) == 1.0


def test_factor_belongs_to_the_catalog_sku() -> None:
    """A scenario that doubles a GB200's peak runs faster (the factor is the SKU's, not recomputed
    from the modified peak, so more hardware is never slower: tests/test_invariants.py)."""
    gb200 = gpu_by_name("gb200")
    doubled = replace(gb200, peak_bf16_flop_per_s=2 * gb200.peak_bf16_flop_per_s)
    assert C.power_clock_factor(doubled) == C.power_clock_factor(gb200)


# ----------------------------------------------------------------------------- Blackwell Ultra SFU
def _attention(name: str, pass_: str, head_dim: int = 128, seq: int = 8192) -> float:
    gpu = gpu_by_name(name)
    heads = 8192 // head_dim
    return K.attention_time_s(
        gpu, batch=1, seq=seq, heads=heads, head_dim=head_dim, causal=True, impl="cudnn", pass_=pass_
    )


def test_blackwell_ultra_attention_forward_speedup_matches_nvidia() -> None:
    """GB300 and GB200 share the datasheet BF16 peak and SM design; GB300's doubled MUFU.EX2 rate
    speeds the exp-bound forward. NVIDIA's Blackwell Ultra softmax blog measures ~1.35x attention
    forward throughput (FP8, DeepSeek-V3); the model's serial-softmax share x gives 1/(1 - x/2),
    x = min(efficiency, 1 - efficiency) at head dim 128 (the exps cannot be exposed for longer than
    the kernel's time beyond its MMAs at the peak)."""
    gb200_peak = gpu_by_name("gb200").peak_flop_per_s("bf16")
    gb300_peak = gpu_by_name("gb300").peak_flop_per_s("bf16")
    assert gb200_peak == gb300_peak
    speedup = _attention("gb200", "fwd") / _attention("gb300", "fwd")
    assert 1.25 < speedup < 1.5
    p = K.params_for_architecture("blackwell")
    eff = K.fused_attention_efficiency(p, "cudnn", "fwd", 8192, 128, True)
    t200 = _attention("gb200", "fwd") - p.gemm_latency_s
    t300 = _attention("gb300", "fwd") - p.gemm_latency_s
    share = min(eff, 1 - eff)
    assert t200 / t300 == pytest.approx(1 / (1 - share / 2), rel=1e-9)


def test_sfu_speedup_is_smaller_for_backward_and_large_heads() -> None:
    fwd = _attention("gb200", "fwd") / _attention("gb300", "fwd")
    bwd = _attention("gb200", "bwd") / _attention("gb300", "bwd")
    fwd_256 = _attention("gb200", "fwd", head_dim=256) / _attention("gb300", "fwd", head_dim=256)
    assert 1.0 < bwd < fwd  # one exp per score against 2.5x the FLOPs
    assert 1.0 < fwd_256 < fwd  # half the exps per FLOP


def test_sfu_only_on_blackwell_ultra() -> None:
    assert K.sfu_exp_speedup(gpu_by_name("gb300")) == K.sfu_exp_speedup(gpu_by_name("b300")) == 2.0
    for name in ("b200", "gb200", "h100-sxm", "a100-80gb"):
        assert K.sfu_exp_speedup(gpu_by_name(name)) == 1.0
    # B200 vs GB200: same SMs, so attention differs by the datasheet peak only
    latency = K.params_for_architecture("blackwell").gemm_latency_s
    ratio = (_attention("b200", "fwd") - latency) / (_attention("gb200", "fwd") - latency)
    assert ratio == pytest.approx(2500 / 2250, rel=1e-3)


@pytest.mark.parametrize("name", ["gb300", "b300", "gb200", "h100-sxm"])
@pytest.mark.parametrize("head_dim", [32, 64, 96, 128, 192, 256])
@pytest.mark.parametrize("pass_", ["fwd", "bwd"])
def test_fused_attention_never_beats_the_tensor_core_peak(name: str, head_dim: int, pass_: str) -> None:
    """Faster exponentials can only remove the kernel's time beyond its MMAs at the peak: the
    attention kernel's achieved fraction of the 16-bit dense peak stays below 1 for every head dim
    (GB300 head dim 64 forward was costed at 102% before the exposed share was bounded), and
    below GB300's MMA-plus-exposed-exp bound t >= (1 - share/2)·t_ref >= efficiency·t_ref."""
    gpu = gpu_by_name(name)
    p = K.kernel_params(gpu)
    for seq in (1024, 4096, 32768):
        t = _attention(name, pass_, head_dim=head_dim, seq=seq) - p.gemm_latency_s
        flops = K.attention_flops(1, seq, 8192 // head_dim, head_dim, True, pass_)
        fraction = flops / (t * gpu.peak_flop_per_s("bf16"))
        assert 0.0 < fraction < 1.0
        eff = K.fused_attention_efficiency(p, "cudnn", pass_, seq, head_dim, True)
        assert fraction <= 2 * eff * (1 + 1e-9)  # the SFU at most halves the exposed share


def test_exposed_exp_share_is_bounded_by_the_time_beyond_the_mmas() -> None:
    p = K.params_for_architecture("blackwell")
    for eff in (0.2, 0.43, 0.6, 0.9):
        for head_dim in (32, 64, 128, 256):
            share = K.exposed_exp_share(p, eff, head_dim, "fwd")
            assert 0.0 <= share <= 1.0 - eff + 1e-12
            assert share <= eff * p.attention_exp_mma_ratio * 128 / head_dim + 1e-12
