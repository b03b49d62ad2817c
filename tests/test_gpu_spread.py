"""Per-GPU speed spread (simulator/gpu_spread.py): a synchronous step waits for its slowest GPU.

The closed form — nominal paced time × (1 + σ·E[max of N standard normals]) — is checked against
order-statistics identities and Monte Carlo draws, including a Monte Carlo of the 1F1B schedule
with static per-GPU speeds (TP groups wait for their slowest member, the slowest stage paces the
micro-batches, the data-parallel replicas wait for the slowest replica).
"""

from __future__ import annotations

import math
import tomllib
from typing import Any

import numpy as np
import pytest
from conftest import SMALL_SCENARIO

from simulator.errors import ConfigError
from simulator.gpu_spread import (
    SPREAD_CATEGORY,
    architecture_spread,
    bubble_fraction,
    expected_max_std_normal,
    gpu_speed_spread,
    slowest_gpu_factor,
    spread_wait_s,
)
from simulator.loading import scenario_from_dict
from simulator.simulate import simulate


def test_expected_max_known_values() -> None:
    assert expected_max_std_normal(1) == 0.0
    # E[max of 2] = 1/sqrt(pi); E[max of 3] = 3 / (2 sqrt(pi)) (closed forms of order statistics)
    assert expected_max_std_normal(2) == pytest.approx(1.0 / math.sqrt(math.pi), abs=1e-6)
    assert expected_max_std_normal(3) == pytest.approx(1.5 / math.sqrt(math.pi), abs=1e-6)
    # tabulated expected largest normal order statistics (Harter 1961): n = 8, 100, 1000
    assert expected_max_std_normal(8) == pytest.approx(1.42360, abs=1e-4)
    assert expected_max_std_normal(100) == pytest.approx(2.50759, abs=1e-4)
    assert expected_max_std_normal(1000) == pytest.approx(3.24144, abs=1e-4)


@pytest.mark.parametrize("n", [8, 128, 2048])
def test_expected_max_against_monte_carlo(n: int) -> None:
    rng = np.random.default_rng(12)
    maxima = rng.standard_normal((4000, n)).max(axis=1)
    stderr = maxima.std(ddof=1) / math.sqrt(len(maxima))
    assert abs(expected_max_std_normal(n) - maxima.mean()) < 4 * stderr


def test_expected_max_grows_with_n_and_slower_than_sqrt_2_ln_n() -> None:
    values = [expected_max_std_normal(n) for n in (2, 8, 64, 512, 4096, 32768)]
    assert all(b > a for a, b in zip(values, values[1:], strict=False))
    for n, v in zip((2, 8, 64, 512, 4096, 32768), values, strict=True):
        assert v < math.sqrt(2 * math.log(n))  # the classical upper bound on the expected maximum


def test_pipeline_monte_carlo_brackets_closed_form() -> None:
    """tp 8 × pp 4 × dp 16 = 512 GPUs, 16 micro-batches, σ = H200's 1.04%: the closed form is
    exact for the paced part and an upper bound on the fill/drain, by at most
    σ·(E[M_N] − E[M_tp])·bubble share."""
    tp, pp, dp, m, sigma = 8, 4, 16, 16, 0.01041
    rng = np.random.default_rng(5)
    draws = 3000
    speeds = 1.0 + sigma * rng.standard_normal((draws, dp, pp, tp))
    stage_t = (1.0 / speeds).max(axis=3)  # a TP group waits for its slowest member in every layer
    per_replica = stage_t.sum(axis=2) + (m - 1) * stage_t.max(axis=2)
    step = per_replica.max(axis=1)  # gradient sync: the slowest replica
    nominal = m + pp - 1
    mc = step.mean() / nominal
    stderr = step.std(ddof=1) / math.sqrt(draws) / nominal
    closed = 1.0 + slowest_gpu_factor(sigma, tp * pp * dp)
    bubble_share = (pp - 1) / nominal
    slack = sigma * (expected_max_std_normal(tp * pp * dp) - expected_max_std_normal(tp)) * bubble_share
    assert mc - 4 * stderr <= closed <= mc + slack + 4 * stderr + 2e-3  # 2e-3: 1/(1+x) vs 1−x, 2nd order
    assert closed - 1.0 > 0.6 * (mc - 1.0)  # and it is most of the effect, not a bound far away


def hopper(dp: int, **cluster: Any) -> dict[str, Any]:
    data = tomllib.loads(SMALL_SCENARIO)
    data["cluster"].update(topology="dgx-h100", num_gpus=4 * dp, **cluster)
    data["parallel"].update(dp=dp, global_batch=4 * dp)
    return data


def test_hopper_default_is_the_cited_spread_and_ampere_has_none() -> None:
    assert architecture_spread("h100-sxm") == pytest.approx(0.045 / 4.322, rel=2e-3)
    assert architecture_spread("b200") == pytest.approx(0.104 / 4.322, rel=2e-3)
    assert architecture_spread("a100-80gb") == 0.0
    scn = scenario_from_dict(hopper(4))
    assert gpu_speed_spread(scn) == architecture_spread("h100-sxm")
    small = scenario_from_dict(tomllib.loads(SMALL_SCENARIO))  # dgx-a100
    assert simulate(small).report.breakdown_s[SPREAD_CATEGORY] == 0.0


def test_wait_grows_with_the_gpu_count_and_sums_into_the_step() -> None:
    waits, fractions = [], []
    for dp in (1, 4, 32):
        rep = simulate(scenario_from_dict(hopper(dp))).report
        b = rep.breakdown_s
        assert sum(b.values()) == pytest.approx(rep.step_time_s, rel=1e-9)
        par = scenario_from_dict(hopper(dp)).parallel
        frac = bubble_fraction(par.schedule, par.pp, par.vp, par.num_microbatches)
        paced = max(s["compute"] + s["recompute"] for s in rep.breakdown_by_stage_s) * (1 + frac)
        factor = slowest_gpu_factor(architecture_spread("h100-sxm"), 4 * dp)
        assert b[SPREAD_CATEGORY] == pytest.approx(factor * paced, rel=1e-9)
        waits.append(b[SPREAD_CATEGORY])
        fractions.append(b[SPREAD_CATEGORY] / rep.step_time_s)
    assert waits[0] < waits[1] < waits[2]
    assert fractions[0] < fractions[1] < fractions[2]


def test_key_sets_or_disables_it() -> None:
    off = simulate(scenario_from_dict(hopper(8, gpu_speed_spread=0))).report
    on = simulate(scenario_from_dict(hopper(8))).report
    wide = simulate(scenario_from_dict(hopper(8, gpu_speed_spread=0.03))).report
    assert off.breakdown_s[SPREAD_CATEGORY] == 0.0
    assert off.step_time_s < on.step_time_s < wide.step_time_s
    # with no spread the step is the nominal one: only the new category differs
    assert on.step_time_s - off.step_time_s == pytest.approx(on.breakdown_s[SPREAD_CATEGORY], rel=1e-9)
    assert on.to_dict()["kernels"]["system"]["gpu_speed_spread"] == architecture_spread("h100-sxm")


@pytest.mark.parametrize("bad", [-0.01, 0.6, "x", True, float("nan")])
def test_bad_values_are_refused_naming_the_key(bad: object) -> None:
    with pytest.raises(ConfigError) as err:
        scenario_from_dict(hopper(2, gpu_speed_spread=bad))
    assert err.value.key == "cluster.gpu_speed_spread"


def test_spread_wait_fills_the_data_wait_first() -> None:
    """A stage that already waits for its data absorbs the slowest GPU's extra kernel time: the
    wait is factor × paced × (1 + bubble) less that stage's data wait, never negative, the
    busiest remainder over the stages."""
    f = 0.01
    stages = [{"compute": 1.0, "dataloader": 0.004}, {"compute": 0.8, "recompute": 0.1}]
    assert spread_wait_s(stages, f) == pytest.approx(max(0.01 - 0.004, 0.009))
    assert spread_wait_s([{"compute": 1.0, "dataloader": 0.5}], f) == 0.0
    assert spread_wait_s([{"compute": 1.0, "dataloader": 0.002}], f, bubble=0.5) == pytest.approx(0.013)
