"""The GEMM tile menu per architecture (simulator/kernels.py gemm_tiles, ARCH_GEMM_TILES)."""

from __future__ import annotations

import math

import pytest

from simulator import kernels as K
from simulator.loading import gpu_by_name

TOLERANCE = 0.10


def test_tile_menu_per_architecture_is_symmetric() -> None:
    """Ampere adds cuBLAS's sm80 96x128 and 160x128 tiles to the common menu, each in both
    orientations (the model does not know whether the caller swapped rows and columns, as PyTorch
    does for the column-major library); Hopper and Blackwell keep the common menu."""
    a100 = K.gemm_tiles(gpu_by_name("a100-80gb"))
    assert set(K.GEMM_TILES) < set(a100)
    assert {(96, 128), (128, 96), (160, 128), (128, 160)} <= set(a100)
    assert K.gemm_tiles(gpu_by_name("a100-40gb")) == a100
    for name in ("h100-sxm", "h200", "b200", "gb300"):
        assert K.gemm_tiles(gpu_by_name(name)) == K.GEMM_TILES, name
    for menu in (K.GEMM_TILES, a100):
        assert len(set(menu)) == len(menu)
        assert {(tn, tm) for tm, tn in menu} == set(menu)


@pytest.mark.parametrize(
    ("size", "tile", "ctas"),
    # NCU captures of cuBLAS (CUDA 12.6) FP16 GEMMs on a 108-SM GA100 (A800 80GB PCIe):
    # sm80_xmma_gemm_..._tilesize96x128x32_stage4 with a grid of 88 CTAs at 1024^3,
    # ..._tilesize160x128x32_stage4 with 208 at 2048^3 (frezcirno/Texo
    # docs/gemm-wmma-pipeline-aligned-ncu.md@f3e0ea90)
    [(1024, {96, 128}, 88), (2048, {160, 128}, 208)],
)
def test_a100_square_gemms_pick_the_tiles_cublas_runs(size: int, tile: set[int], ctas: int) -> None:
    """The model's fastest plan for these square GEMMs is the tile cuBLAS was measured running,
    with its grid: one partial wave of 88 CTAs at 1024^3 (a 128x128 tile would leave 44 of 108 SMs
    idle), two waves of 208 at 2048^3 (a 128x128 tile needs three of 256)."""
    gpu = gpu_by_name("a100-80gb")
    plan = K.gemm_plan(gpu, "fp16", size, size, size)
    assert {plan.tile_m, plan.tile_n} == tile
    assert plan.split_k == 1
    assert math.ceil(size / plan.tile_m) * math.ceil(size / plan.tile_n) == ctas
    assert plan.waves == math.ceil(ctas / gpu.num_sms)


def test_more_tiles_never_slow_a_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    """The plan is the fastest over the menu: adding Ampere's tiles can only keep or shorten a
    GEMM's time, and shortens it where the common menu quantizes badly (1024^3: 64 CTAs of
    128x128 on 108 SMs)."""
    gpu = gpu_by_name("a100-80gb")
    shapes = [(1024, 1024, 1024), (2048, 2048, 2048), (1024, 2145, 1024), (4096, 4096, 4096)]
    shapes += [(802816, 192, 768), (8192, 3072, 1024), (512, 12288, 4096), (333, 777, 999)]
    with_tiles = {s: K.gemm_time_s(gpu, "bf16", *s) for s in shapes}
    monkeypatch.setitem(K.ARCH_GEMM_TILES, "ampere", ())
    assert K.gemm_tiles(gpu) == K.GEMM_TILES
    without = {s: K.gemm_time_s(gpu, "bf16", *s) for s in shapes}
    for s in shapes:
        assert with_tiles[s] <= without[s], s
    assert with_tiles[(1024, 1024, 1024)] < 0.9 * without[(1024, 1024, 1024)]


def test_azure_a100_small_gemms_within_tolerance() -> None:
    """Azure's cuBLASLt FP16 GEMMs on A100 (superbench cublaslt_gemm): 1024^3 at 119.4 TFLOP/s and
    2048^3 at 221.8, the two that the common tile menu missed by 19%."""
    figures = {
        f.label: f for f in K.shipped_figures(kinds=("gemm",)) if f.gpu == "a100-80gb" and "azure" in f.source
    }
    # compared at their sustained clock (kernels.toml clock = "sustained": 10,000 warm-up iterations)
    for label, measured in (
        ("gemm fp16 1x1024x1024x1024 sustained", 119.4),
        ("gemm fp16 1x2048x2048x2048 sustained", 221.8),
    ):
        f = figures[label]
        assert f.measured == measured and not f.reference_only
        assert abs(f.error) <= TOLERANCE, (label, f.error)
