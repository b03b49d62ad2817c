"""[precision] fp8_recipe (issues 12/13): per-tensor FP8 with delayed scaling (Megatron-Core's
default) or current scaling (Transformer Engine Float8CurrentScaling, Megatron-Bridge's FP8
preset): current scaling reads each 16-bit GEMM input once more for its amax
(quantizer.cpp Float8CurrentScalingQuantizer::quantize_impl), and the attention output projection
keeps its 16-bit input instead of an FP8 copy (Megatron-Core >= 0.15, memory.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from simulator.comm import default_comm_model
from simulator.costs import Device
from simulator.errors import ConfigError
from simulator.loading import scenario_from_dict
from simulator.memory import proj_saves_original_input, scenario_layer_activations
from simulator.program import (
    FP8_CURRENT_AMAX_READ_BYTES,
    FP8_CURRENT_KERNELS_PER_TENSOR,
    _Coster,
    build_program,
    power_limited_device,
    quant_bytes_per_element,
)
from simulator.resources import data_dir
from simulator.validate.cases import build_case
from simulator.validate.recipes import fp8_recipe_for
from simulator.validate.runs import read_runs_csv

MODEL = {"name": "t", "layers": 4, "hidden": 2048, "heads": 16, "vocab": 32000, "seq_len": 2048}


def scn(recipe: str | None, dtype: str = "fp8", topology: str = "dgx-b200"):
    precision: dict[str, object] = {"dtype": dtype}
    if recipe is not None:
        precision["fp8_recipe"] = recipe
    return scenario_from_dict(
        {
            "model": MODEL,
            "cluster": {"topology": topology, "num_gpus": 8},
            "parallel": {"tp": 8, "sequence_parallel": True, "global_batch": 8},
            "precision": precision,
        }
    )


def cast_bytes(s) -> float:
    prog = build_program(s)
    ch = prog.stages[0].chunks[0]
    return sum(
        seg.message_bytes
        for block in (ch.forward, ch.backward)
        for seg in block.segments
        if seg.name == "fp8 cast"
    )


def test_default_is_delayed_and_unchanged() -> None:
    assert scn(None).fp8_recipe == "delayed"
    assert (
        build_program(scn(None)).stages[0].chunks[0].forward
        == build_program(scn("delayed")).stages[0].chunks[0].forward
    )


@pytest.mark.parametrize(("topology", "delayed"), [("dgx-b200", 3.0), ("dgx-h100", 4.0)])
def test_quantize_bytes_closed_form(topology: str, delayed: float) -> None:
    """Delayed: read 2 + write 1 (+ the transposed copy on Hopper); current: + one 2-byte read."""
    gpu = scn(None, topology=topology).gpu
    d = Device(gpu, "fp8")
    assert quant_bytes_per_element(d) == pytest.approx(delayed)
    assert quant_bytes_per_element(d, "current") == pytest.approx(delayed + FP8_CURRENT_AMAX_READ_BYTES)
    assert FP8_CURRENT_AMAX_READ_BYTES == 2.0  # one read of a 16-bit element
    assert quant_bytes_per_element(Device(gpu, "mxfp8"), "current") == quant_bytes_per_element(
        Device(gpu, "mxfp8")
    )


def test_current_scaling_moves_five_thirds_of_the_cast_bytes_on_blackwell() -> None:
    """Like for like: under delayed scaling TE's LayerNormLinear writes the norm output in FP8
    itself (program.py TE_FP8_NORM_NOTE), so the qkv and fc1 inputs (T x h each, gathered over
    sequence parallelism) have no cast kernel; add back the 3 bytes per element it would move."""
    s = scn("delayed")
    fused = MODEL["layers"] * 2 * 3.0 * s.parallel.micro_batch * MODEL["seq_len"] * MODEL["hidden"]
    delayed, current = cast_bytes(scn("delayed")) + fused, cast_bytes(scn("current"))
    assert delayed > 0
    assert current == pytest.approx(delayed * 5.0 / 3.0)
    assert build_program(scn("current")).stages[0].chunks[0].forward.duration_s > (
        build_program(scn("delayed")).stages[0].chunks[0].forward.duration_s
    )


def test_current_scaling_keeps_no_fp8_copy_of_the_attention_output() -> None:
    d, c = scn("delayed"), scn("current")
    assert not proj_saves_original_input(d) and proj_saves_original_input(c)
    # one byte per element of the projection's input: s·h/tp elements per GPU (micro-batch 1)
    saved = scenario_layer_activations(d, moe=False).stored - scenario_layer_activations(c, moe=False).stored
    assert saved == pytest.approx(1 * MODEL["seq_len"] * MODEL["hidden"] / 8)


@pytest.mark.parametrize("dtype", ["bf16", "mxfp8", "nvfp4"])
def test_refused_without_per_tensor_fp8(dtype: str) -> None:
    with pytest.raises(ConfigError) as err:
        scn("current", dtype=dtype)
    assert err.value.key == "precision.fp8_recipe"


def test_unknown_recipe_refused() -> None:
    with pytest.raises(ConfigError) as err:
        scn("blockwise")
    assert err.value.key == "precision.fp8_recipe"


def test_validate_maps_megatron_bridge_fp8_rows_to_current_scaling() -> None:
    assert "current_scaling" in fp8_recipe_for("mbridge_26.04_LLAMA3_70B_x", "fp8")
    assert fp8_recipe_for("mbridge_26.04_LLAMA3_70B_x", "mxfp8") == ""
    assert fp8_recipe_for("mbridge_25.09_LLAMA3_70B_x", "fp8") == ""  # 25.09 publishes no precision
    assert fp8_recipe_for("nemo2407_pretrain_LLAMA3-8B_8gpu", "fp8") == ""
    runs = {r.run_id: r for r in read_runs_csv(data_dir("scenarios") / "published" / "calibration_runs.csv")}
    case = build_case(runs["mbridge_26.04_LLAMA3_70B_DGX-H100_64gpu_fp8"])
    assert case.scenario["precision"]["fp8_recipe"] == "current"
    assert any(a.startswith("precision: fp8_recipe = current") for a in case.assumptions)


def _cast_segments(s) -> list:
    ch = build_program(s).stages[0].chunks[0]
    return [seg for block in (ch.forward, ch.backward) for seg in block.segments if "fp8 cast" in seg.name]


def _moe(recipe: str):
    return scenario_from_dict(
        {
            "model": {"preset": "qwen3-30b-a3b", "seq_len": 2048, "layers": 2},
            "cluster": {"topology": "dgx-h100", "num_gpus": 8, "gpu": "h100-sxm"},
            "parallel": {"ep": 8, "micro_batch": 1, "global_batch": 8},
            "precision": {"dtype": "fp8", "fp8_recipe": recipe},
        }
    )


@pytest.mark.parametrize("moe", [False, True])
def test_current_scaling_launches_three_kernels_per_quantized_tensor(moe: bool) -> None:
    """Float8CurrentScalingQuantizer::quantize_impl runs compute-amax, compute-scale and cast: three
    kernels per tensor, each with the kernel's fixed cost, where delayed scaling runs one. Closed
    form on every cast segment: duration = bytes / bandwidth + kernels x (latency + launch), with
    current scaling's kernel count exactly 3x delayed's (the eager GroupedLinear quantizes each of
    Qwen3-30B's 16 local experts apart: 48 kernels per expert cast)."""
    s_d, s_c = (_moe(r) if moe else scn(r, topology="dgx-h100") for r in ("delayed", "current"))
    coster = _Coster(s_c, default_comm_model(s_c))
    dev, _ = power_limited_device(coster)
    p = dev.params
    bw = dev.gpu.hbm_bandwidth_bytes_per_s * p.memory_bw_fraction * p.memory_bw_scale("copy")
    fixed = p.memory_latency_s + dev.launch_s
    assert fixed > 0

    def kernels(seg) -> float:
        return (seg.duration_s - seg.message_bytes / bw) / fixed

    # Megatron-Core's delayed scaling casts no norm-fused GEMM input (program.py TE_FP8_NORM_NOTE),
    # so the casts pair one to one on a stack whose norms write 16-bit output (composer-fsdp)
    s_d, s_c = (replace(x, kernels=replace(x.kernels, stack="composer-fsdp")) for x in (s_d, s_c))
    segs_d, segs_c = _cast_segments(s_d), _cast_segments(s_c)
    assert len(segs_d) == len(segs_c) > 0
    assert any(seg.name.endswith("(per expert)") for seg in segs_c) == moe
    for sd, sc in zip(segs_d, segs_c, strict=True):
        k_d, k_c = kernels(sd), kernels(sc)
        # whole kernels (consecutive casts of one pass may be merged into one segment)
        assert k_d == pytest.approx(round(k_d), abs=1e-6) and round(k_d) >= 1
        assert k_c == pytest.approx(round(k_c), abs=1e-6)
        if sc.name.endswith("(per expert)"):
            # delayed: one fused multi-tensor cast per tensor; current: three per local expert
            assert round(k_c) == FP8_CURRENT_KERNELS_PER_TENSOR * (128 // 8) * round(k_d)
        else:
            assert round(k_c) == FP8_CURRENT_KERNELS_PER_TENSOR * round(k_d)
    assert FP8_CURRENT_KERNELS_PER_TENSOR == 3
