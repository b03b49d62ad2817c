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
