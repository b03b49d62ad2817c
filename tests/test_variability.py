"""Step-to-step variability (issue 8, docs/variability.md): seeds, jitter, stragglers.

`mfusim run --samples N` simulates N steps with seeds seed, seed+1, ... and reports the step
time and MFU as mean, p50 and p99. A straggler in a synchronous job costs more as the job
grows: every step waits for the slowest of the dp replicas, so the chance that *some* GPU
is slow rises as 1 − (1 − p)^(GPUs).
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import SMALL_SCENARIO, dump_toml

from simulator.loading import scenario_from_dict
from simulator.simulate import simulate


def scenario(dp: int = 4, **variability: Any) -> dict[str, Any]:
    """The small scenario with `dp` replicas of the same pipeline (tp 2, pp 2, 4 micro-batches)."""
    data = tomllib.loads(SMALL_SCENARIO)
    data["cluster"]["num_gpus"] = 4 * dp
    data["parallel"].update(dp=dp, global_batch=4 * dp)
    data["variability"].update(variability)
    return data


@pytest.fixture
def run_json(run_cli, write_file: Callable[..., Path]) -> Callable[..., dict[str, Any]]:
    def run(data: dict[str, Any], *flags: str) -> dict[str, Any]:
        path = write_file(dump_toml(data), "variability.toml")
        res = run_cli(["run", str(path), "--json", *flags])
        assert res.code == 0, res.err
        return json.loads(res.out)

    return run


JITTERY = {
    "compute_jitter": 0.1,
    "network_jitter": 0.2,
    "straggler_probability": 0.01,
    "straggler_slowdown": 1.5,
}


def test_same_seed_identical_json(run_cli, write_file: Callable[..., Path]) -> None:
    path = write_file(dump_toml(scenario(**JITTERY, seed=11)))
    first = run_cli(["run", str(path), "--json", "--samples", "8"])
    second = run_cli(["run", str(path), "--json", "--samples", "8"])
    assert first.code == second.code == 0
    assert first.out == second.out  # byte for byte
    third = run_cli(["run", str(path), "--json", "--samples", "8", "--seed", "11"])
    assert third.out == first.out  # --seed 11 is the file's own seed


def test_simulate_deterministic_per_seed() -> None:
    scn = scenario_from_dict(scenario(**JITTERY))
    a = simulate(scn, seed=5).report.to_dict()
    b = simulate(scn, seed=5).report.to_dict()
    assert a == b


@pytest.mark.parametrize(
    "variability",
    [
        {"compute_jitter": 0.1},
        {"network_jitter": 0.3},
        {"straggler_probability": 0.3, "straggler_slowdown": 2.0},
    ],
    ids=["compute", "network", "straggler"],
)
def test_different_seeds_differ(variability: dict[str, float], run_json) -> None:
    data = scenario(**variability)
    steps = {run_json(data, "--seed", str(seed))["step_time_s"] for seed in range(6)}
    assert len(steps) > 1


def test_seed_in_file_matters(run_json) -> None:
    a = run_json(scenario(compute_jitter=0.1, seed=1))
    b = run_json(scenario(compute_jitter=0.1, seed=2))
    a_again = run_json(scenario(compute_jitter=0.1, seed=1))
    assert a["step_time_s"] != b["step_time_s"]
    assert a == a_again


def test_dataloader_jitter_varies_a_stalling_loader(run_json) -> None:
    data = scenario()
    data["dataloader"].update(microbatch_latency_ms=50.0, workers=1, prefetch=0, jitter=0.5)
    steps = {run_json(data, "--seed", str(seed))["step_time_s"] for seed in range(4)}
    assert len(steps) > 1
    assert run_json(data)["breakdown_s"]["dataloader"] > 0


def test_zero_variability_samples_identical(run_json) -> None:
    data = scenario()  # all zero
    single = run_json(data)
    out = run_json(data, "--samples", "6")
    st = out["samples"]["step_time_s"]
    assert out["samples"]["n"] == 6
    assert st["p50"] == st["p99"] == st["min"] == st["max"] == single["step_time_s"]
    assert st["mean"] == pytest.approx(st["p50"], rel=1e-12)  # a mean of equal floats: up to an ulp off
    mfu = out["samples"]["mfu"]
    assert mfu["mean"] == pytest.approx(mfu["p50"], rel=1e-12) and mfu["p50"] == pytest.approx(single["mfu"])


def test_straggler_with_slowdown_one_is_deterministic(run_json) -> None:
    data = scenario(straggler_probability=0.5, straggler_slowdown=1.0)
    st = run_json(data, "--samples", "5")["samples"]["step_time_s"]
    assert st["min"] == st["max"]
    assert scenario_from_dict(data).variability.is_deterministic


def test_samples_report_shape(run_json) -> None:
    out = run_json(scenario(**JITTERY), "--samples", "20")
    s = out["samples"]
    assert s["n"] == 20
    st, mfu = s["step_time_s"], s["mfu"]
    assert {"mean", "p50", "p99"} <= set(st) and {"mean", "p50", "p99"} <= set(mfu)
    assert st["min"] <= st["p50"] <= st["p99"] <= st["max"]
    assert st["min"] <= st["mean"] <= st["max"]
    # for MFU the bad tail is the low one: "p1" is its 1st percentile, the MFU 99% of steps beat
    assert mfu["p1"] <= mfu["p50"]
    assert mfu["p99"] == mfu["p1"]  # the round-1 key, kept as an alias
    assert 0 < mfu["p1"] and mfu["mean"] <= 1


def test_jitter_never_speeds_up_the_mean(run_json) -> None:
    """Mean-one noise on durations that meet at max() (sync points) can only lengthen the step."""
    det = run_json(scenario())["step_time_s"]
    for variability in ({"compute_jitter": 0.2}, {"network_jitter": 0.5}):
        mean = run_json(scenario(**variability), "--samples", "30")["samples"]["step_time_s"]["mean"]
        assert mean >= det * 0.999


DPS = (1, 8, 64, 512)


def test_straggler_cost_grows_with_dp(run_json) -> None:
    """Same pipeline, more replicas: the expected step time relative to the deterministic one grows.

    p = 0.5% per GPU per step, slowdown 2x. With dp replicas of a tp=2 stage the chance that a
    stage waits for a straggler is 1 − 0.995^(2·dp): about 1% at dp = 1, 8% at 8, 47% at 64 and
    99% at 512 -- the price of a straggler is paid by the whole synchronous job.
    """
    ratios = []
    for dp in DPS:
        det = run_json(scenario(dp=dp))["step_time_s"]
        noisy = run_json(
            scenario(dp=dp, straggler_probability=0.005, straggler_slowdown=2.0), "--samples", "60"
        )
        ratios.append(noisy["samples"]["step_time_s"]["mean"] / det)
    assert ratios == sorted(ratios), ratios
    assert ratios[0] < 1.1  # rarely hit with 4 GPUs
    assert ratios[-1] > ratios[0] + 0.3  # nearly always hit with 2048 GPUs
    assert all(r <= 2.0 + 1e-9 for r in ratios)  # never worse than every GPU at half speed


def test_straggler_p99_exceeds_p50_at_moderate_scale(run_json) -> None:
    out = run_json(scenario(dp=16, straggler_probability=0.005, straggler_slowdown=2.0), "--samples", "60")
    st = out["samples"]["step_time_s"]
    assert st["p99"] > 1.2 * st["p50"]  # the tail is the straggler


def test_samples_without_variability_simulate_once(run_cli, write_file: Callable[..., Path]) -> None:
    """No jitter, no stragglers, no loader jitter: every seed gives the same step, so N samples
    are one simulation, said so on stderr, and their spread is zero."""
    path = write_file(dump_toml(scenario()), "quiet.toml")
    res = run_cli(["run", str(path), "--json", "--samples", "7"])
    assert res.code == 0
    assert "identical" in res.err
    stats = json.loads(res.out)["samples"]
    assert stats["n"] == 7
    assert stats["step_time_s"]["min"] == stats["step_time_s"]["max"]
    noisy = run_cli(
        ["run", str(write_file(dump_toml(scenario(**JITTERY)), "noisy.toml")), "--json", "--samples", "3"]
    )
    assert noisy.code == 0 and "identical" not in noisy.err
