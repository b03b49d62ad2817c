"""[precision] fp8_recipe (issues 12/13): per-tensor FP8 with delayed scaling (Megatron-Core's
default) or current scaling (Transformer Engine Float8CurrentScaling, Megatron-Bridge's FP8
preset): current scaling reads each 16-bit GEMM input once more for its amax
(quantizer.cpp Float8CurrentScalingQuantizer::quantize_impl), and the attention output projection
keeps its 16-bit input instead of an FP8 copy (Megatron-Core >= 0.15, memory.py)."""

from __future__ import annotations

import pytest

from simulator.costs import Device
from simulator.errors import ConfigError
from simulator.loading import scenario_from_dict
from simulator.memory import proj_saves_original_input, scenario_layer_activations
from simulator.program import FP8_CURRENT_AMAX_READ_BYTES, build_program, quant_bytes_per_element
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
    delayed, current = cast_bytes(scn("delayed")), cast_bytes(scn("current"))
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
