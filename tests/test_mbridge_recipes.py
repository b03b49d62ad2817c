"""Megatron-Bridge MoE launch recipes in `mfusim validate` (simulator/catalog/mbridge_recipes.toml,
issue 13): applied only to a row whose whole layout equals the recipe's, and every recipe is a
scenario the simulator accepts."""

from __future__ import annotations

import pytest

from simulator import validate as V
from simulator.resources import published_runs_csv
from simulator.validate.recipes import LAYOUT_KEYS, matching_recipe, recipes


@pytest.fixture(scope="module")
def shipped() -> dict[str, V.PublishedRun]:
    return {r.run_id: r for r in V.read_runs_csv(published_runs_csv())}


def _case(shipped: dict[str, V.PublishedRun], run_id: str) -> V.Case:
    case = V.build_case(shipped[run_id])
    assert isinstance(case, V.Case), case
    return case


def test_recipe_of_the_same_layout_is_applied(shipped):
    """DeepSeek-V3 on 256 B200, container 26.04.01: pp 8, vp 2, ep 32 is the recipe
    B200_FP8_MX_V2 (moe_a2a_overlap, recompute mla_up_proj + mlp)."""
    case = _case(shipped, "mbridge_26.04.01_DeepSeekV3_DGX-B200_256gpu_mxfp8")
    par = case.scenario["parallel"]
    assert par["ep_comm_overlap"] is True
    assert par["recompute"] == "selective"
    assert par["recompute_modules"] == ["mla_up_proj", "mlp"]
    assert any("DEEPSEEK_V3_PRETRAIN_CONFIG_B200_FP8_MX_V2" in a for a in case.assumptions)
    scn = V.scenario_for(case)
    assert scn.parallel.recomputed_modules == ("mla_up_proj", "mlp")


def test_other_layouts_keep_the_source_defaults(shipped):
    """Same model and GPU, container 26.04, pp 16 / ep 8: no recipe of that layout at the cited
    commit -> no recompute, no EP overlap, and the row says so."""
    case = _case(shipped, "mbridge_26.04_DeepSeekV3_DGX-B200_256gpu_mxfp8")
    par = case.scenario["parallel"]
    assert par["recompute"] == "none" and "ep_comm_overlap" not in par
    assert any(a.startswith("recipe: no Megatron-Bridge recipe") for a in case.assumptions)
    # 2025 containers ran earlier recipes: never matched
    old = _case(shipped, "mbridge_25.11_DeepSeekV3_DGX-GB200_256gpu_bf16")
    assert old.scenario["parallel"]["recompute"] == "none"
    # dense rows and other sources are untouched
    dense = _case(shipped, "mbridge_26.04_LLAMA3_70B_DGX-GB300_64gpu_fp8")
    assert not any(a.startswith("recipe:") for a in dense.assumptions)


def test_matching_needs_every_layout_key():
    r = next(x for x in recipes() if x.name == "QWEN3_235B_A22B_PRETRAIN_CONFIG_H100_FP8_CS_V2")
    layout = dict(r.layout)
    rid = "mbridge_26.04_Qwen3_235B_a22B_DGX-H100_256gpu_fp8"
    assert matching_recipe(rid, "Qwen3_235B_a22B", r.gpu, r.dtype, layout) is r
    for key in LAYOUT_KEYS:
        assert (
            matching_recipe(rid, "Qwen3_235B_a22B", r.gpu, r.dtype, {**layout, key: layout[key] * 2}) is None
        )
    assert matching_recipe(rid, "Qwen3_235B_a22B", r.gpu, "bf16", layout) is None
    assert matching_recipe(rid, "Qwen3_30B_a3B", r.gpu, r.dtype, layout) is None


def test_every_recipe_matches_a_shipped_row_and_simulates(shipped):
    """No dead entries: each recipe is the layout of at least one shipped row, whose scenario
    (with the recipe's keys) the simulator accepts."""
    used = {
        a.split()[2]
        for run in shipped.values()
        if isinstance(case := V.build_case(run), V.Case)
        for a in case.assumptions
        if a.startswith("recipe: Megatron-Bridge ")
    }
    assert used == {r.name for r in recipes()}
    for run in shipped.values():
        case = V.build_case(run)
        if isinstance(case, V.Case) and any(
            a.startswith("recipe: Megatron-Bridge ") for a in case.assumptions
        ):
            V.scenario_for(case)  # raises on an invalid recipe (e.g. a module the model lacks)


def test_fused_grouped_mlp_recipe_goes_to_kernels(shipped):
    """GPT-OSS MXFP8 on 64 GB300 (26.06): GB300_FP8_MX_V2 sets cutedsl_fused_grouped_mlp ->
    [kernels] fused_grouped_mlp; the BF16 recipe of 26.04.01 does not."""
    fused = _case(shipped, "mbridge_26.06_GPTOSS120B_DGX-GB300_64gpu_mxfp8")
    assert fused.scenario["kernels"]["fused_grouped_mlp"] is True
    assert V.scenario_for(fused).kernels.fused_grouped_mlp
    eager = _case(shipped, "mbridge_26.04.01_GPTOSS120B_DGX-GB300_64gpu_bf16")
    assert "fused_grouped_mlp" not in eager.scenario.get("kernels", {})
