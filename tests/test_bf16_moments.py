"""BF16 Adam moments of Megatron-Bridge's DeepSeek-V3 recipe (issues 12/13): the model recipe of
containers 25.09 .. 26.06.01 turns on Megatron-Core's precision-aware optimizer with
exp_avg_dtype = exp_avg_sq_dtype = bfloat16 ([bf16_moments] in mbridge_recipes.toml); validate maps
it to [memory] exp_avg_dtype / exp_avg_sq_dtype, which shrink the optimizer state 12 -> 8 B/param."""

from __future__ import annotations

import pytest

from simulator.loading import scenario_from_dict
from simulator.memory import memory_footprint
from simulator.validate.cases import build_case
from simulator.validate.recipes import bf16_moments_for, catalog, parse_catalog
from simulator.validate.runs import read_runs_csv

RUNS = {r.run_id: r for r in read_runs_csv("scenarios/published/calibration_runs.csv")}


def test_catalog_lists_the_deepseek_containers() -> None:
    moments = catalog().bf16_moments
    assert moments["deepseek"] >= {"25.09", "25.11", "26.04", "26.06.01"}
    assert "26.08" not in moments["deepseek"]  # v0.6.0: only the *_partial_cg_dev configs set it


def test_bf16_moments_for_rows() -> None:
    note = bf16_moments_for("mbridge_26.04_DeepSeekV3_DGX-GB200_256gpu_mxfp8", "DeepSeekV3", False)
    assert "v0.4.0" in note and "0fbfe7d3e" in note
    assert bf16_moments_for("mbridge_26.08_DeepSeekV3_DGX-GB200_256gpu_mxfp8", "DeepSeekV3", False) == ""
    assert bf16_moments_for("mbridge_26.04_DeepSeekV3_DGX-GB200_256gpu_mxfp8", "DeepSeekV3", True) == ""
    assert bf16_moments_for("mbridge_26.04_Qwen3_30B_a3B_DGX-GB200_8gpu_mxfp8", "Qwen3_30B_a3B", False) == ""


@pytest.mark.parametrize(
    ("run_id", "expected"),
    [
        ("mbridge_26.04_DeepSeekV3_DGX-GB200_256gpu_mxfp8", True),
        ("mbridge_25.09_DeepSeekV3_DGX-H100_1024gpu_na", True),
        ("mbridge_26.08_DeepSeekV3_DGX-GB200_256gpu_mxfp8", False),
        ("mbridge_26.04_Qwen3_235B_a22B_DGX-GB200_256gpu_mxfp8", False),
    ],
)
def test_recipe_lands_in_the_scenario(run_id: str, expected: bool) -> None:
    if run_id not in RUNS:
        pytest.skip(f"{run_id} not in the calibration runs")
    case = build_case(RUNS[run_id])
    memory = case.scenario.get("memory", {})
    got = memory.get("exp_avg_dtype") == "bf16" and memory.get("exp_avg_sq_dtype") == "bf16"
    assert got == expected
    assert any("[bf16_moments]" in a for a in case.assumptions) == expected


def test_optimizer_part_shrinks_by_a_third() -> None:
    """Distributed optimizer: 4 (fp32 master) + 2 + 2 bytes per parameter of the shard against
    4 + 4 + 4: exactly 8/12 of the fp32-moment optimizer state."""
    base = {
        "model": {"preset": "qwen3-30b-a3b", "seq_len": 2048},
        "cluster": {"topology": "dgx-h100", "num_gpus": 8},
        "parallel": {"micro_batch": 1, "global_batch": 16, "ep": 8, "zero": 1},
    }
    fp32 = memory_footprint(scenario_from_dict(base)).parts_bytes["optimizer"]
    bf16 = memory_footprint(
        scenario_from_dict({**base, "memory": {"exp_avg_dtype": "bf16", "exp_avg_sq_dtype": "bf16"}})
    ).parts_bytes["optimizer"]
    assert bf16 == pytest.approx(fp32 * 8 / 12, rel=1e-12)


def test_unknown_family_or_container_is_refused() -> None:
    head = '[container."26.04"]\nrelease = "v0.4.0"\ncommit = "0fbfe7d"\n[family]\ndeepseek = "deepseek"\n'
    with pytest.raises(ValueError, match="not a \\[family\\] key"):
        parse_catalog(head + '[bf16_moments]\nkimi = ["26.04"]\n')
    with pytest.raises(ValueError, match="not \\[container"):
        parse_catalog(head + '[bf16_moments]\ndeepseek = ["26.10"]\n')
