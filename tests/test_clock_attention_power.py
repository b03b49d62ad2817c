"""A fused attention kernel's power in the power-limited clock (issue 12, attnpower lane).

The activity law f/f_boost = min(1, r · a^(−1/3)) of simulator/clocks.py takes the kernel mix's
power activity a. Counting only the tensor FLOP rate (a = D) under-charges a fused attention
kernel, whose softmax exponentials, FP32 rescaling and shared-memory traffic draw power its
tensor rate does not show; its tensor-saturated seconds count `attention_power_factor` times
(kernels.toml). Blackwell's factor comes from one published pair (flashinfer-ai/flashinfer
PR #2899: FlashAttention-4 BF16 on B200, 1,450 TFLOP/s at the boost clock, 1,237 at the
1,000 W limit); Hopper has no published figure and keeps 1. Tests: the cited pair is reproduced,
a GEMM-only mix does not move, more attention power never raises the clock, the boost clock
stays the cap, and a non-positive factor is refused."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

import pytest

from simulator import clocks as C
from simulator import kernels as K
from simulator import program as P
from simulator.costs import Device
from simulator.loading import gpu_by_name
from tests.conftest import kernel_model_with


@contextmanager
def _factor(value: float) -> Iterator[None]:
    """Every architecture's `attention_power_factor` set to `value` (kernel_params patched)."""
    orig = K.kernel_params
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(K, "kernel_params", lambda gpu: replace(orig(gpu), attention_power_factor=value))
        yield


def _segments(device: Device, attention_share: float, attention_d: float) -> tuple[P.Segment, ...]:
    """One second of kernels: a saturating 16-bit GEMM and a fused causal attention kernel
    (its segment counts the full s×s FLOPs, the kernel executes half) at tensor activity
    `attention_d`, attention taking `attention_share` of the time."""
    sat = K.saturated_gemm_flop_per_s(device.gpu, "bf16", device.params) * device.clock
    t_att, t_gemm = attention_share, 1.0 - attention_share
    gemm = P.Segment("compute", "fc1", t_gemm, sat * t_gemm, 0.0)
    att = P.Segment("compute", "attention (cudnn)", t_att, 2.0 * attention_d * sat * t_att, 0.0)
    return tuple(s for s in (gemm, att) if s.duration_s > 0)


def test_blackwell_factor_reproduces_the_cited_fa4_pair() -> None:
    """FA4 at D = 1,450 / 1,746 (B200's saturating BF16 rate) sustains 1,237 / 1,450 of its burst
    at the 1,000 W limit: a = (r / 0.853)^3 = 1.078 · D. Tensor activity alone (a = D) would hold
    0.875 of the burst, 2.5% too fast."""
    b200 = gpu_by_name("b200")
    p = K.params_for_architecture("blackwell")
    d_fa4 = 1450e12 / K.saturated_gemm_flop_per_s(b200, "bf16", p)
    assert d_fa4 == pytest.approx(0.830, abs=1e-3)
    r = p.training_gemm_ratio("bf16")
    measured = 1237.0 / 1450.0
    assert C.power_limited_clock(p.attention_power_factor * d_fa4, r) == pytest.approx(measured, abs=1e-3)
    assert C.power_limited_clock(d_fa4, r) > measured + 0.02  # the tensor rate alone under-charges it
    # the mix's activity counts it: a step of that kernel alone on B200
    device = Device(b200, "bf16")
    mix = P._Phase(_segments(device, 1.0, d_fa4))
    assert P.tensor_activity(device, [mix]) == pytest.approx(p.attention_power_factor * d_fa4)
    # Hopper: no published attention power figure, tensor activity only
    assert K.params_for_architecture("hopper").attention_power_factor == 1.0


@pytest.mark.parametrize("gpu", ["h100-sxm", "h100-sxm-96gb", "b200", "gb300"])
def test_gemm_only_mix_does_not_move(gpu: str) -> None:
    device = Device(gpu_by_name(gpu), "bf16")
    mem = P.Segment("compute", "swiglu", 0.3, 0.0, 1e9)
    phases = [P._Phase((*_segments(device, 0.0, 0.0), mem))]
    base = P.tensor_activity(device, phases)
    assert base == pytest.approx(1.0 / 1.3)  # 1 s of saturating GEMM, 0.3 s memory-bound
    for k in (0.5, 1.0, 1.078, 2.0):
        with _factor(k):
            assert P.tensor_activity(device, phases) == pytest.approx(base)
            assert P.power_limited_clock_of(device, P.tensor_activity(device, phases)) == pytest.approx(
                P.power_limited_clock_of(device, base)
            )


def test_unfused_attention_is_not_weighted() -> None:
    """The factor is a fused kernel's: unfused attention is GEMMs and a memory-bound softmax."""
    device = Device(gpu_by_name("b200"), "bf16")
    sat16 = K.saturated_gemm_flop_per_s(device.gpu, "bf16", device.params) * device.clock
    unfused = P.Segment("compute", "attention (unfused)", 1.0, 0.5 * sat16, 0.0)
    assert P.tensor_activity(device, [P._Phase((unfused,))]) == pytest.approx(0.5)


@pytest.mark.parametrize("gpu", ["h100-sxm-96gb", "b200"])
def test_more_attention_power_never_raises_the_clock(gpu: str) -> None:
    """Monotone in the factor and, at a factor above 1, in attention's share of an equal-activity
    mix; the boost clock stays the cap throughout."""
    device = Device(gpu_by_name(gpu), "bf16")
    for share in (0.2, 0.5, 0.8, 1.0):
        clocks = []
        for k in (1.0, 1.05, 1.078, 1.5, 2.0, 3.0):
            with _factor(k):
                d = P.tensor_activity(device, [P._Phase(_segments(device, share, 0.6))])
                clocks.append(P.power_limited_clock_of(device, d))
        assert all(0.0 < f <= 1.0 for f in clocks)
        assert all(b <= a for a, b in zip(clocks, clocks[1:], strict=False))
        assert clocks[-1] < clocks[0]  # it binds somewhere in the range
    # equal tensor activity (every kernel at D = 0.9), more of it in attention: never faster
    sat = K.saturated_gemm_flop_per_s(device.gpu, "bf16", device.params) * device.clock

    def clock_at(share: float) -> float:
        gemm = P.Segment("compute", "fc1", 1.0 - share, 0.9 * (1.0 - share) * sat, 0.0)
        att = _segments(device, share, 0.9)[-1]
        return P.power_limited_clock_of(device, P.tensor_activity(device, [P._Phase((gemm, att))]))

    with _factor(1.2):
        clocks = [clock_at(s) for s in (0.1, 0.4, 0.7)]
    assert all(b <= a for a, b in zip(clocks, clocks[1:], strict=False))
    assert clocks[-1] < clocks[0]


def test_a_step_with_more_attention_power_is_never_faster() -> None:
    """End to end: a Blackwell long-sequence step slows (a lower stage clock) when attention is
    charged more power, and by nothing when its factor is 1."""
    from simulator.loading import scenario_from_dict

    scn = scenario_from_dict(
        {
            "name": "t",
            "model": {
                "layers": 2,
                "hidden": 4096,
                "heads": 32,
                "kv_heads": 8,
                "ffn_hidden": 14336,
                "vocab": 128256,
                "seq_len": 32768,
                "gated_mlp": True,
            },
            "cluster": {"topology": "dgx-b200", "num_gpus": 8, "gpu": "b200"},
            "parallel": {"global_batch": 8, "tp": 1, "pp": 1, "dp": 8},
            "precision": {"dtype": "bf16"},
        }
    )
    steps = []
    for k in (1.0, 1.078, 2.0):
        with _factor(k):
            prog = P.build_program(scn)
            steps.append((prog.tensor_activity, prog.power_clock))
    assert steps[0][0] < steps[1][0] < steps[2][0]
    assert steps[0][1] >= steps[1][1] >= steps[2][1]
    assert steps[2][1] < steps[0][1] <= 1.0


def test_non_positive_factor_is_refused() -> None:
    from simulator.errors import ConfigError

    with kernel_model_with("blackwell", attention_power_factor=0.0):
        with pytest.raises(ConfigError, match="attention_power_factor"):
            K.params_for_architecture("blackwell")
