"""Blockwise FP8 ([precision] fp8_recipe = "blockwise": Transformer Engine Float8BlockScaling,
Megatron-Core --fp8-recipe blockwise, DeepSeek-V3 arXiv 2412.19437 §3.3) on Hopper: the GEMM kernel
(kernels.BLOCKWISE_PROMOTION_NOTE) against DeepGEMM's published H800 tables, the quantization
traffic (program.FP8_BLOCKWISE_QUANT_BYTES_PER_ELEMENT), the saved activations' scales, and the
refusals where TE does not run the recipe natively."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from simulator import kernels as K
from simulator.comm import default_comm_model
from simulator.costs import Device
from simulator.errors import ConfigError
from simulator.loading import gpu_by_name, scenario_from_dict
from simulator.memory import FP8_BYTES, layer_activation_bytes, memory_footprint
from simulator.program import (
    FP8_BLOCKWISE_QUANT_BYTES_PER_ELEMENT,
    _Coster,
    quant_bytes_per_element,
    quant_kernels_per_tensor,
)
from simulator.specs import Scenario

SCALE_BYTES_PER_ELEMENT = 4 / 128  # one fp32 scale per 1x128 tile


def _scn(topology: str = "dgx-h100", recipe: str = "blockwise", **precision: Any) -> Scenario:
    return scenario_from_dict(
        {
            "model": {"preset": "mixtral-8x7b", "layers": 2},
            "cluster": {"topology": topology, "num_gpus": 8},
            "parallel": {"ep": 8, "dp": 8, "micro_batch": 1, "global_batch": 8},
            "precision": {"dtype": "fp8", "fp8_recipe": recipe, **precision},
        }
    )


def test_promotion_hides_under_the_mma() -> None:
    """Per 128-deep k-block a tile's FP32 promotion (one FMA per accumulator element at 128 per SM
    and clock) takes 1/4 of its MMA time (2 x 128 FLOPs per element at 8,192 FP8 FLOPs per SM and
    clock), so with two consumer warpgroups (DeepSeek-V3 §3.3.2) it overlaps the other's WGMMA."""
    assert K.blockwise_promotion_ratio() == pytest.approx(0.25)
    assert K.blockwise_promotion_ratio() < 1.0
    # 8,192 FP8 FLOPs per SM and clock is the GH100 datasheet rate at its 1.83 GHz tensor clock
    for name in ("h100-sxm", "h800"):
        gpu = gpu_by_name(name)
        clock_hz = gpu.peak_flop_per_s("fp8") / (gpu.num_sms * K.HOPPER_FP8_FLOP_PER_SM_CLOCK)
        assert clock_hz == pytest.approx(1.83e9, rel=0.01)


@pytest.mark.parametrize(
    "shape", [(4096, 7168, 16384), (8192, 8192, 8192), (64, 2112, 7168), (256, 4096, 512)]
)
def test_blockwise_gemm_pays_only_its_scale_bytes(shape: tuple[int, int, int]) -> None:
    """The blockwise kernel is the per-tensor FP8 main loop with its operands' scales in the memory
    floor: never faster than the per-tensor GEMM, and slower by at most the scales' share."""
    gpu = gpu_by_name("h100-sxm")
    t8 = K.gemm_time_s(gpu, "fp8", *shape)
    tb = K.gemm_time_s(gpu, "fp8_blockwise", *shape)
    assert t8 <= tb <= t8 * (1 + SCALE_BYTES_PER_ELEMENT) * (1 + 1e-12)


def test_deepgemm_training_shapes_reproduced() -> None:
    """DeepGEMM's H800 tables (README.md@327ec92f): the nine training shapes (M = 4096 dense rows
    with K >= 1536 and the contiguous grouped rows) are checked; measured today -3.5, +8.3, -12.0,
    -7.0, +9.2% (dense) and -0.2, +10.2, -0.2, +10.2% (grouped): mean 6.7%. The -12% is 4096 x
    7168 x 16384, where DeepGEMM's 1,520 TFLOP/s is above cuBLAS's FP8 MAMF ceiling the model holds;
    the +10% the K = 2048 grouped shapes."""
    figs = [f for f in K.shipped_figures(kinds=("gemm",)) if " fp8_blockwise " in f.label]
    assert len(figs) == 22 and all(f.gpu == "h800" for f in figs)
    checked = [f for f in figs if not f.reference_only]
    assert len(checked) == 9
    errors = [abs(f.error) for f in checked]
    assert max(errors) <= 0.125, [(f.label, round(100 * f.error, 1)) for f in checked]
    assert sum(e <= 0.10 for e in errors) >= 6
    assert sum(errors) / len(errors) <= 0.08


def test_quantize_moves_two_blockwise_copies_in_one_kernel() -> None:
    """quantize_transpose_vector_blockwise: read 16-bit once, write the row-wise and column-wise
    FP8 copies each with an fp32 scale per 128 elements; no amax pass, no scale kernel."""
    d = Device(gpu_by_name("h100-sxm"), "fp8", fp8_recipe="blockwise")
    assert quant_bytes_per_element(d, "blockwise") == pytest.approx(2 + 2 * (1 + SCALE_BYTES_PER_ELEMENT))
    assert FP8_BLOCKWISE_QUANT_BYTES_PER_ELEMENT == pytest.approx(4.0625)
    assert quant_kernels_per_tensor(d, "blockwise") == 1
    assert d.gemm_dtype == "fp8_blockwise"
    assert replace(d, dtype="bf16").gemm_dtype == "bf16"  # the 16-bit output layer stays 16-bit


def _layer(scn: Scenario) -> list[Any]:
    coster = _Coster(scn, default_comm_model(scn))
    coster.stage = 0
    fwd, b_in, b_w, _, _ = coster.layer(True)
    return list(fwd.parts) + list(b_in.parts) + list(b_w.parts)


def test_layer_casts_and_gemms_against_current_scaling() -> None:
    """Same tensors quantized as under current scaling (neither fuses the norm's output cast), so
    the casts' bytes are in the ratio of the recipes' bytes per element, 4.0625 / 6; the layer's
    GEMMs are the per-tensor ones plus at most the scales' bytes."""
    blk, cur = _layer(_scn()), _layer(_scn(recipe="current"))
    names = [s.name for s in blk]
    assert names == [s.name for s in cur]

    def cast_bytes(parts: list[Any]) -> float:
        return sum(s.message_bytes for s in parts if s.name.startswith("fp8 cast"))

    assert cast_bytes(cur) > 0
    assert cast_bytes(blk) == pytest.approx(cast_bytes(cur) * FP8_BLOCKWISE_QUANT_BYTES_PER_ELEMENT / 6.0)
    gemms = 0
    for b, c in zip(blk, cur, strict=True):
        if b.flops > 0 and b.name.startswith(("expert fc", "qkv", "attn out")):
            assert c.duration_s <= b.duration_s <= c.duration_s * (1 + SCALE_BYTES_PER_ELEMENT) * (1 + 1e-9)
            gemms += 1
    assert gemms >= 12  # qkv, attn out, expert fc1, fc2: forward, dgrad, wgrad


def test_saved_activations_carry_their_scales() -> None:
    """Each FP8-saved GEMM input carries 4/128 bytes of scales per element: the layer's stored
    bytes are linear in the saved element size, so the blockwise excess is 4/128 of the FP8-saved
    elements."""
    scn = _scn()
    kw: dict[str, Any] = dict(tp=1, flash_attention=True, moe=True, fp8=True)
    one = layer_activation_bytes(scn.model, 1, **kw, fp8_saved_bytes=FP8_BYTES).stored
    two = layer_activation_bytes(scn.model, 1, **kw, fp8_saved_bytes=2 * FP8_BYTES).stored
    blk = layer_activation_bytes(
        scn.model, 1, **kw, fp8_saved_bytes=FP8_BYTES + SCALE_BYTES_PER_ELEMENT
    ).stored
    assert two > one
    assert blk - one == pytest.approx(SCALE_BYTES_PER_ELEMENT * (two - one))
    # whole scenario: more activation memory than current scaling, which saves the same tensors
    act = memory_footprint(scn).parts_bytes["activations"]
    assert act > memory_footprint(_scn(recipe="current")).parts_bytes["activations"]


@pytest.mark.parametrize("topology", ["dgx-b200", "gb200-nvl72", "dgx-a100"])
def test_refused_off_hopper(topology: str) -> None:
    """TE runs Float8BlockScaling natively on SM 9.0 only: emulated with MXFP8 on Blackwell, absent
    below SM 9.0 (fp8_blockwise_scaling.rst / quantization.py @d0067d0d)."""
    with pytest.raises(ConfigError) as err:
        _scn(topology)
    assert err.value.key == "precision.fp8_recipe"


def test_refusals_name_the_key() -> None:
    for bad in ({"fp8_param_gather": True},):
        with pytest.raises(ConfigError) as err:
            _scn(**bad)
        assert err.value.key == "precision.fp8_recipe"
    with pytest.raises(ConfigError) as err:
        scenario_from_dict(
            {
                "model": {"preset": "mixtral-8x7b", "layers": 2},
                "cluster": {"topology": "dgx-h100", "num_gpus": 8},
                "parallel": {"ep": 8, "dp": 8, "micro_batch": 1, "global_batch": 8},
                "precision": {"dtype": "bf16", "fp8_recipe": "blockwise"},
            }
        )
    assert err.value.key == "precision.fp8_recipe"
    assert _scn("dgx-h800").fp8_recipe == "blockwise"
    assert _scn("dgx-h200").fp8_recipe == "blockwise"
