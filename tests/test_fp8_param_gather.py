"""[precision] fp8_param_gather (issue 12): Megatron-Core's --fp8-param-gather keeps the GEMM
weights only as Transformer Engine quantized parameters (no 16-bit copy beside them), and the
data-parallel parameter all-gather moves the FP8 bytes (per-tensor FP8) or BF16 through the
gradient buffer (MXFP8, reuse_grad_buf_for_mxfp8_param_ag)."""

from __future__ import annotations

import pytest

from simulator import flops
from simulator.errors import ConfigError
from simulator.loading import scenario_from_dict
from simulator.memory import memory_footprint
from simulator.program import build_program
from simulator.validate.cases import build_case
from simulator.validate.recipes import fp8_param_gather_for
from simulator.validate.runs import read_runs_csv

H, V, LAYERS = 1024, 32000, 4
MODEL = {"name": "t", "layers": LAYERS, "hidden": H, "heads": 16, "vocab": V, "seq_len": 1024}


def scn(dtype: str, gather: bool, *, dp: int = 1, topology: str = "dgx-b200"):
    precision: dict[str, object] = {"dtype": dtype}
    if gather:
        precision["fp8_param_gather"] = True
    return scenario_from_dict(
        {
            "model": MODEL,
            "cluster": {"topology": topology, "num_gpus": dp},
            "parallel": {"global_batch": 4 * dp, "zero": 1},
            "precision": precision,
        }
    )


@pytest.mark.parametrize(("dtype", "quantized_bytes"), [("fp8", 1.0), ("mxfp8", 2 * (1 + 1 / 32))])
def test_weights_hand_count(dtype: str, quantized_bytes: float) -> None:
    """One GPU holds every layer: L layers of TE GEMM weights at their quantized size only, the
    untied embedding and output layer (2·V·h) and the final norm (h) at 2 bytes. Without the key
    each GEMM weight is 2 bytes plus its quantized copies; the ends (no TE modules) 2 bytes only."""
    s = scn(dtype, gather=True)
    layer = flops.layer_params_per_rank(s.model, s.parallel, False).total
    ends = 2 * V * H + H
    on = memory_footprint(s).parts_bytes["weights"]
    assert on == pytest.approx(LAYERS * layer * quantized_bytes + ends * 2.0, rel=1e-12)
    off = memory_footprint(scn(dtype, gather=False)).parts_bytes["weights"]
    assert off == pytest.approx(LAYERS * layer * (2.0 + quantized_bytes) + ends * 2.0, rel=1e-12)
    # the 16-bit copy of the GEMM weights is what disappears; the rest of the state is unchanged
    assert off - on == pytest.approx(LAYERS * layer * 2.0, rel=1e-12)
    for part in ("grads", "optimizer", "activations"):
        assert memory_footprint(s).parts_bytes[part] == memory_footprint(scn(dtype, False)).parts_bytes[part]


@pytest.mark.parametrize(
    ("dtype", "gather", "bytes_per_param"),
    [
        ("bf16", False, 2.0),
        ("fp8", False, 2.0),  # Megatron-Core's param buffer holds the 16-bit weights
        ("fp8", True, 1.0),  # the uint8 buffer of Float8Tensor data
        ("mxfp8", False, 2.0),
        ("mxfp8", True, 2.0),  # BF16 gathered through the gradient buffer, re-quantized after
    ],
)
def test_param_all_gather_bytes(dtype: str, gather: bool, bytes_per_param: float) -> None:
    """ZeRO-1 over 8 ranks: the per-step parameter all-gather moves every local parameter once;
    under per-tensor FP8 gather the ends (embedding, output layer, final norm: no TE module, the
    2·V·h + h the memory model keeps at 2 bytes) still move at 2 bytes."""
    prog = build_program(scn(dtype, gather, dp=8))
    ends = 2 * V * H + H if bytes_per_param < 2.0 else 0.0
    for stage in prog.stages:
        for ch in stage.chunks:
            expect = (ch.params_local - ends) * bytes_per_param + ends * 2.0
            assert sum(ch.param_gather_bytes) == pytest.approx(expect, rel=1e-9)


def test_fp8_param_gather_halves_the_gather_time() -> None:
    def gather_s(gather: bool) -> float:
        prog = build_program(scn("fp8", gather, dp=8))
        return sum(sum(ch.param_gather_s) for st in prog.stages for ch in st.chunks)

    assert 0 < gather_s(True) < gather_s(False)


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "nvfp4"])
def test_refused_without_an_fp8_dtype(dtype: str) -> None:
    with pytest.raises(ConfigError) as err:
        scn(dtype, gather=True)
    assert err.value.key == "precision.fp8_param_gather"


def test_validate_sets_it_for_megatron_bridge_llama_and_qwen3_fp8_rows() -> None:
    """The FP8-CS and MXFP8 presets of every recorded release set fp8_param_gather; NVFP4's does
    not; Kimi-K2's, GPT-OSS's and DeepSeek-V3's scripts override it per config (left at the
    default); 25.09 publishes no precision."""
    llama, dsv3 = "LLAMA3_70B", "DeepSeekV3"
    assert "bf16_with_mxfp8_mixed" in fp8_param_gather_for(f"mbridge_26.04_{llama}_x", llama, "mxfp8")
    assert "current_scaling" in fp8_param_gather_for(f"mbridge_25.11_{llama}_x", llama, "fp8")
    assert fp8_param_gather_for(f"mbridge_26.04_{llama}_x", llama, "nvfp4") == ""
    assert fp8_param_gather_for(f"mbridge_26.04_{llama}_x", llama, "bf16") == ""
    assert fp8_param_gather_for(f"mbridge_25.09_{llama}_x", llama, "mxfp8") == ""
    assert fp8_param_gather_for(f"mbridge_26.04_{dsv3}_x", dsv3, "mxfp8") == ""
    assert fp8_param_gather_for("mbridge_26.04_Qwen3_30B_a3B_x", "Qwen3_30B_a3B", "mxfp8") != ""
    assert fp8_param_gather_for("mbridge_26.04_Kimi_K2_x", "Kimi_K2", "mxfp8") == ""

    from simulator.resources import data_dir

    runs = {r.run_id: r for r in read_runs_csv(data_dir("scenarios") / "published" / "calibration_runs.csv")}
    case = build_case(runs["mbridge_26.02.01_LLAMA3_70B_DGX-GB300_64gpu_mxfp8"])
    assert case.scenario["precision"] == {"dtype": "mxfp8", "fp8_param_gather": True}
    nvfp4 = build_case(runs["mbridge_26.04_LLAMA3_70B_DGX-GB200_64gpu_nvfp4"])
    assert nvfp4.scenario["precision"] == {"dtype": "nvfp4"}
