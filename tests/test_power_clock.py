"""Power-limited clock by kernel mix (issue 12, hopper-scale; simulator/clocks.py).

A GPU at its board power limit holds a clock f/f_boost = min(1, r · D^(−1/3)), where D is the
step's tensor activity (tensor FLOP rate relative to a saturating GEMM) and r a saturating GEMM's
sustained / burst throughput (H200: MSMF / MAMF). Tests check the closed form, its limits, the
activity of known kernel mixes and that larger models run at a lower clock."""

from __future__ import annotations

from dataclasses import replace

import pytest

from simulator import clocks as C
from simulator import kernels as K
from simulator import program as P
from simulator.costs import Device
from simulator.loading import gpu_by_name, scenario_from_dict
from simulator.specs import Scenario
from tests.conftest import kernel_model_with


# ----------------------------------------------------------------------------- the law
def test_power_law_closed_form() -> None:
    r = 0.8416  # H200 BF16 MSMF / MAMF
    assert C.power_limited_clock(1.0, r) == pytest.approx(r)  # a saturating GEMM: the MSMF
    assert C.power_limited_clock(0.8, r) == pytest.approx(r * 0.8 ** (-1 / 3))
    # at or below D = r³ the power limit does not bind: the boost clock
    assert C.power_limited_clock(r**3, r) == pytest.approx(1.0)
    assert C.power_limited_clock(0.3, r) == 1.0
    assert C.power_limited_clock(0.9, 1.0) == 1.0  # r = 1: not modelled
    assert C.power_limited_clock(0.0, r) == 1.0


def test_power_law_monotone_and_power_consistent() -> None:
    """Lower clock for more activity; the dynamic power D · f³ it implies is the same budget."""
    r = 0.8638
    acts = [0.65 + 0.05 * i for i in range(8)]
    clocks = [C.power_limited_clock(a, r) for a in acts]
    assert all(b < a for a, b in zip(clocks, clocks[1:], strict=False))
    for a, f in zip(acts, clocks, strict=True):
        assert a * f**3 == pytest.approx(r**3)


def test_ratios_are_the_published_msmf_over_mamf() -> None:
    """stas00/ml-engineering compute/accelerator/README.md (fast-mamf @ 082816f): H200 SXM and
    B200 SXM, BF16 and FP8, burst (MAMF) and sustained (MSMF) TFLOP/s from one session."""
    p = K.params_for_architecture("hopper")
    assert p.sustained_gemm_ratio("bf16") == pytest.approx(708.5 / 841.9, abs=1e-4)
    assert p.sustained_gemm_ratio("fp8") == pytest.approx(1288.7 / 1491.9, abs=1e-4)
    b = K.params_for_architecture("blackwell")
    assert b.sustained_gemm_ratio("bf16") == pytest.approx(1456.3 / 1770.9, abs=1e-4)
    assert b.sustained_gemm_ratio("fp8") == pytest.approx(2795.7 / 3435.2, abs=1e-4)
    assert b.sustained_gemm_ratio("mxfp8") == b.sustained_gemm_ratio("fp8")  # 8-bit tensor cores
    # not measured on Volta: no power-limited clock
    assert K.params_for_architecture("volta").sustained_gemm_ratio("bf16") == 1.0


def test_ampere_ratio_is_the_ga100_sustained_over_burst_pair_at_400_w() -> None:
    """No A100 MSMF is published. frezcirno/Texo docs/gemm-wmma-large.md@207e7ab8 times one cuBLAS
    FP16 4096^3 kernel on an A800 80GB PCIe (GA100, 108 SMs, 1,410 MHz boost like A100 SXM4, 300 W)
    both ways: 551.072 us in one launch at the boost clock, 650.967 us warmed. Inverting the law
    f = r · D^(-1/3) at that GEMM's modelled activity D gives the 300 W board's r; the 400 W SXM4
    board sustains (400/300)^(1/3) more (the cube law of clocks.py at equal SMs and peak)."""
    a100 = gpu_by_name("a100-80gb")
    t = K.gemm_time_s(a100, "fp16", 4096, 4096, 4096)
    d = 2.0 * 4096**3 / t / K.saturated_gemm_flop_per_s(a100, "fp16")
    assert 0.9 < d < 1.0
    r_300w = (551.072 / 650.967) * d ** (1 / 3)
    r = K.params_for_architecture("ampere").sustained_gemm_ratio("bf16")
    assert r == pytest.approx(r_300w * (400.0 / 300.0) ** (1 / 3), abs=5e-4)
    assert a100.board_power_w == 400.0
    # the law reproduces the pair it came from, scaled back to the 300 W board
    f_300w = C.power_limited_clock(d, r, (300.0 / 400.0) ** (1 / 3))
    assert f_300w == pytest.approx(551.072 / 650.967, abs=5e-4)
    # both A100 SKUs: 400 W on 108 SMs at the same peak, the reference's clock
    assert C.power_clock_factor(gpu_by_name("a100-40gb")) == pytest.approx(1.0)


# ----------------------------------------------------------------------------- activity
def test_activity_of_a_saturating_gemm_is_one_and_memory_zero() -> None:
    h100 = gpu_by_name("h100-sxm")
    d = Device(h100, "bf16")
    sat = K.saturated_gemm_flop_per_s(h100, "bf16")
    flops = 2.0 * 8192**3
    gemm = P.Segment("compute", "fc1", flops / (sat * d.clock), flops, 0.0)
    mem = P.Segment("compute", "swiglu", gemm.duration_s, 0.0, 1e9)
    assert P.tensor_activity(d, [P._Phase((gemm,))]) == pytest.approx(1.0)
    assert P.tensor_activity(d, [P._Phase((gemm, mem))]) == pytest.approx(0.5)
    # exposed communication is not kernel time
    comm = P.Segment("tp_comm", "tp allgather", 1.0, 0.0, 1e9)
    assert P.tensor_activity(d, [P._Phase((gemm, comm))]) == pytest.approx(1.0)


def test_fp8_attention_counts_16_bit_and_causal_half() -> None:
    h100 = gpu_by_name("h100-sxm")
    d = Device(h100, "fp8")
    sat16 = K.saturated_gemm_flop_per_s(h100, "bf16")
    full = 1e12  # the segment's full s×s FLOPs; a fused causal kernel executes half
    att = P.Segment("compute", "attention (cudnn)", 0.5 * full / (sat16 * d.clock), full, 0.0)
    assert P.tensor_activity(d, [P._Phase((att,))]) == pytest.approx(1.0)
    unfused = P.Segment("compute", "attention (unfused)", full / (sat16 * d.clock), full, 0.0)
    assert P.tensor_activity(d, [P._Phase((unfused,))]) == pytest.approx(1.0)


# ----------------------------------------------------------------------------- in a step
def _scn(
    hidden: int, layers: int, heads: int, ffn: int, tp: int, gpu: str = "h100-sxm", dtype: str = "fp8"
) -> Scenario:
    topo = {"a100-80gb": "dgx-a100", "b200": "dgx-b200", "gb200": "gb200-nvl72"}.get(gpu, "dgx-h100")
    return scenario_from_dict(
        {
            "name": "t",
            "model": {
                "layers": layers,
                "hidden": hidden,
                "heads": heads,
                "kv_heads": 8,
                "ffn_hidden": ffn,
                "vocab": 128256,
                "seq_len": 8192,
                "gated_mlp": True,
            },
            "cluster": {"topology": topo, "num_gpus": 8, "gpu": gpu},
            "parallel": {"global_batch": 16, "tp": tp, "pp": 1, "dp": 8 // tp, "sequence_parallel": tp > 1},
            "precision": {"dtype": dtype},
        }
    )


def test_larger_models_run_at_a_lower_clock() -> None:
    """Llama-3 8B → 70B → 405B widths on H100 in FP8: GEMMs take a larger share of the layer
    (attention's share ∝ s/h falls), so the activity rises and the clock falls."""
    small = P.build_program(_scn(4096, 2, 32, 14336, 1))
    mid = P.build_program(_scn(8192, 2, 64, 28672, 4))
    large = P.build_program(_scn(16384, 2, 128, 53248, 8))
    assert small.tensor_activity < mid.tensor_activity < large.tensor_activity < 1.0
    assert small.power_clock >= mid.power_clock > large.power_clock
    r8 = K.params_for_architecture("hopper").sustained_gemm_ratio("fp8")
    for prog in (small, mid, large):
        assert prog.power_clock == pytest.approx(C.power_limited_clock(prog.tensor_activity, r8))
        assert r8 <= prog.power_clock <= 1.0


def test_blackwell_sku_power_goes_into_the_power_limited_clock() -> None:
    """B200 and GB200 in FP8 at Llama-3 405B width: the clock is min(1, k · r · D^(−1/3)) with
    B200's measured r and the SKU's board-power factor k (GB200: 1,200 W on B200's SMs at an 11%
    higher datasheet clock, k < 1), so GB200 runs the same mix at a lower fraction of its boost."""
    r8 = K.params_for_architecture("blackwell").sustained_gemm_ratio("fp8")
    progs = {g: P.build_program(_scn(16384, 2, 128, 53248, 8, gpu=g)) for g in ("b200", "gb200")}
    for g, prog in progs.items():
        k = C.power_clock_factor(gpu_by_name(g))
        assert 0.0 < prog.tensor_activity < 1.0
        assert prog.power_clock == pytest.approx(C.power_limited_clock(prog.tensor_activity, r8, k))
        assert prog.power_clock < 1.0  # a large dense layer: the power limit binds
    assert C.power_clock_factor(gpu_by_name("gb200")) < 1.0
    assert progs["gb200"].power_clock < progs["b200"].power_clock


def test_power_clock_slows_the_tensor_kernels_only() -> None:
    scn = _scn(16384, 2, 128, 53248, 8)
    prog = P.build_program(scn)
    d = Device(scn.gpu, scn.dtype)
    fast = replace(d, power_clock=1.0)
    slow = replace(d, power_clock=prog.power_clock)
    from simulator.costs import matmul_time_s, memory_op_time_s

    t_fast = matmul_time_s(fast, 8192, 6656, 16384) - fast.launch_s
    t_slow = matmul_time_s(slow, 8192, 6656, 16384) - slow.launch_s
    assert t_slow == pytest.approx(t_fast / prog.power_clock)
    assert memory_op_time_s(slow, 1e9) == memory_op_time_s(fast, 1e9)


def test_ampere_training_steps_keep_the_boost_clock_of_the_mix() -> None:
    """Ampere's measured ratio sets only the power-saturated microbenchmarks' clock: the activity
    law is off there (`activity_law` 0, kernels.toml says why), so an A100 training step's clock
    stays inside its fitted residual, as before the ratio was measured -- even for a 70B-wide
    layer, whose mix (tensor activity 0.87 > r^3 = 0.78) the law would slow by 3.6%."""
    p = K.params_for_architecture("ampere")
    assert p.sustained_gemm_ratio("bf16") < 1.0
    assert p.training_gemm_ratio("bf16") == 1.0
    assert not C.has_activity_law(gpu_by_name("a100-80gb"))
    prog = P.build_program(_scn(8192, 2, 64, 28672, 8, gpu="a100-80gb", dtype="bf16"))
    assert prog.power_clock == 1.0 and prog.tensor_activity == 0.0  # the law is not evaluated
    # a switch, not a weight: anything but 0 or 1 is refused
    from simulator.errors import ConfigError

    with kernel_model_with("ampere", activity_law=0.5):
        with pytest.raises(ConfigError, match="activity_law"):
            K.params_for_architecture("ampere")
    # Hopper and Blackwell apply it: their training ratio is the measured one
    for arch in ("hopper", "blackwell"):
        q = K.params_for_architecture(arch)
        assert q.training_gemm_ratio("fp8") == q.sustained_gemm_ratio("fp8") < 1.0


def test_each_stage_holds_the_clock_of_its_own_mix() -> None:
    """Every pipeline stage's GPUs run at the power-limited clock of their own kernel mix: a stage
    of transformer layers alone at the one-layer clock, the first with the embedding and the last
    with the logits and loss at the clock of theirs (GPU Boost's power loop is per GPU). One clock
    from one layer's mix on every stage made a faster HBM slow the logits stage down."""
    scn = scenario_from_dict(
        {
            "name": "pp4",
            "model": {
                "layers": 8,
                "hidden": 16384,
                "heads": 128,
                "kv_heads": 8,
                "ffn_hidden": 53248,
                "vocab": 128256,
                "seq_len": 8192,
                "gated_mlp": True,
            },
            "cluster": {"topology": "dgx-h100", "num_gpus": 32},
            "parallel": {"global_batch": 16, "tp": 8, "pp": 4, "sequence_parallel": True},
            "precision": {"dtype": "fp8"},
        }
    )
    prog = P.build_program(scn)
    clocks = prog.stage_power_clocks
    assert len(clocks) == 4 and all(c < 1.0 for c in clocks)
    # the middle stages hold layers only: the one-layer clock
    coster = P._Coster(scn, P.default_comm_model(scn))
    layer_device, layer_activity = P.power_limited_device(coster)
    assert clocks[1] == pytest.approx(layer_device.power_clock, rel=1e-12)
    assert clocks[2] == clocks[1]
    # the first and last stages: their own mix (the embedding's and the loss's memory-bound kernels
    # lower the activity, the 16-bit logits GEMM at its own saturated rate)
    assert clocks[0] != clocks[1] and clocks[3] != clocks[1]
    r8 = K.params_for_architecture("hopper").sustained_gemm_ratio("fp8")
    assert prog.power_clock == min(clocks) and prog.tensor_activity >= layer_activity
    assert prog.power_clock == pytest.approx(C.power_limited_clock(prog.tensor_activity, r8))


def test_faster_memory_never_slows_a_logits_heavy_stage() -> None:
    """A faster HBM shortens memory-bound kernels, raises a mix's activity and lowers its clock,
    but never slows the stage that runs the mix: with D = S/T the stage takes
    T_mem + T_clocked·D^(1/3)/(k·r), whose derivative in T_mem is 1 − (T_clocked/T)·D^(1/3)/(3·k·r) > 0.
    Checked where it bit: a large-vocabulary last stage on Blackwell, pp = 2."""
    data = {
        "name": "logits-heavy",
        "model": {
            "layers": 2,
            "hidden": 4096,
            "heads": 32,
            "ffn_hidden": 128,
            "vocab": 256000,
            "seq_len": 2048,
        },
        "cluster": {"topology": "dgx-b200", "num_gpus": 2},
        "parallel": {"pp": 2, "global_batch": 16},
    }
    scn = scenario_from_dict(data)
    from simulator.simulate import simulate

    base = simulate(scn).report.step_time_s
    for factor in (1.1, 2.0, 4.0):
        gpu = replace(scn.gpu, hbm_bandwidth_bytes_per_s=scn.gpu.hbm_bandwidth_bytes_per_s * factor)
        faster = replace(scn, topology=replace(scn.topology, gpu=gpu))
        prog = P.build_program(faster)
        assert prog.stage_power_clocks[0] != prog.stage_power_clocks[1]
        assert simulate(faster).report.step_time_s <= base * (1 + 1e-9)
