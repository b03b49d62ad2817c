"""The Python API refuses nonsense arguments with a ValueError naming them (issue 18)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from simulator import flops
from simulator.loading import model_preset


@pytest.mark.parametrize(
    ("args", "name"),
    [
        ((-1.0, 1e5, 8, 312e12), "flops_per_token"),
        ((0.0, 1e5, 8, 312e12), "flops_per_token"),
        ((1e9, -5.0, 8, 312e12), "tokens_per_s"),
        ((1e9, math.nan, 8, 312e12), "tokens_per_s"),
        ((1e9, 1e5, 2.5, 312e12), "num_gpus"),
        ((1e9, 1e5, 0, 312e12), "num_gpus"),
        ((1e9, 1e5, True, 312e12), "num_gpus"),
        ((1e9, 1e5, 8, math.inf), "peak_flop_per_s"),
        ((1e9, 1e5, 8, "312e12"), "peak_flop_per_s"),
    ],
)
def test_mfu_refuses(args: tuple[object, ...], name: str) -> None:
    with pytest.raises(ValueError, match=name):
        flops.mfu(*args)  # type: ignore[arg-type]


def test_mfu_value_and_numpy_ints() -> None:
    # seed notes' worked example: 7B (6Ψ), 64 A100 at 100k tokens/s -> ~21%
    assert flops.mfu(6 * 7e9, 1e5, np.int64(64), 312e12) == pytest.approx(0.2103, abs=1e-3)
    assert flops.mfu(6 * 7e9, 0.0, 64, 312e12) == 0.0


@pytest.mark.parametrize(
    ("gb", "recompute", "name"),
    [
        (-1, "none", "global_batch"),
        (1.5, "none", "global_batch"),
        (math.nan, "none", "global_batch"),
        (0, "none", "global_batch"),
        (8, "bogus", "recompute"),
    ],
)
def test_step_flops_refuses(gb: object, recompute: str, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        flops.step_flops(model_preset("gpt3-175b"), gb, recompute)  # type: ignore[arg-type]


def test_step_flops_scales_with_batch() -> None:
    m = model_preset("gpt3-175b")
    one, eight = flops.step_flops(m, 1, "full"), flops.step_flops(m, 8, "full")
    assert eight.model == pytest.approx(8 * one.model)
    assert one.hardware > one.model


# ----------------------------------------------------------------------------- sweep
SWEEP = """\
name = "api sweep"
[model]
layers = 4
hidden = 512
heads = 8
vocab = 32000
seq_len = 512
[cluster]
topology = "dgx-a100"
num_gpus = 8
[parallel]
global_batch = 16
[sweep]
tp = [1, 2]
pp = [1, 2]
"""


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"engine": "bogus"}, "engine"),
        ({"rank_by": "bogus"}, "rank_by"),
        ({"rank_by": "step_time_s"}, "rank_by"),
        ({"jobs": 0}, "jobs"),
        ({"top": -1}, "top"),
        ({"refine": 1.5}, "refine"),
        ({"resume": True}, "resume"),
    ],
)
def test_run_sweep_refuses(tmp_path, kwargs: dict[str, object], name: str) -> None:
    from simulator.loading import load_scenario
    from simulator.sweep import run_sweep

    path = tmp_path / "s.toml"
    path.write_text(SWEEP)
    with pytest.raises(ValueError, match=name):
        run_sweep(load_scenario(path), **kwargs)  # type: ignore[arg-type]


def test_rank_rows_refuses_unknown_and_ranks_best_first() -> None:
    from simulator.sweep import rank_rows

    rows = [{"status": "ok", "mfu": m, "tokens_per_s": 1.0} for m in (0.2, 0.5, 0.3)]
    assert [r["mfu"] for r in rank_rows(rows, "mfu")] == [0.5, 0.3, 0.2]
    with pytest.raises(ValueError, match="rank_by"):
        rank_rows(rows, "step_time_s")


@pytest.mark.parametrize("seed", [-1, 2**64, 1.5, True])
def test_simulate_seed_is_blamed_as_seed(seed: object) -> None:
    from simulator.loading import load_scenario
    from simulator.resources import data_dir
    from simulator.simulate import simulate

    scn = load_scenario(data_dir("scenarios") / "teaching-pp4.toml")
    with pytest.raises(ValueError, match="seed") as info:
        simulate(scn, seed=seed)  # type: ignore[arg-type]
    assert "dataloader" not in str(info.value)
