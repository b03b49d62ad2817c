"""Two models of the same step must agree where the physics says they are the same number.

* The closed form (simulator/analytic.py) is the engine's replay written as a formula: for
  GPipe and 1F1B without jitter, stragglers or data parallelism, T = Σ_s T_s + (m−1)·max_s T_s
  plus the point-to-point hops (Narayanan et al. 2021 §2.2), which is exactly what the event
  replay produces. Any difference there is a bug in one of them.
* The costed program (simulator/program.py) carries the FLOPs of every kernel it times; summed
  over stages, chunks, micro-batches and data-parallel replicas they must equal flops.py's
  count of the step (hardware FLOPs: model + recompute), whatever the split.
"""

from __future__ import annotations

from typing import Any

import pytest

from simulator import flops
from simulator.analytic import estimate_step
from simulator.loading import load_scenario, scenario_from_dict
from simulator.program import build_program
from simulator.resources import data_dir, scenario_names
from simulator.simulate import simulate
from simulator.specs import Scenario


def _pipeline(schedule: str, pp: int, microbatches: int) -> Scenario:
    return scenario_from_dict(
        {
            "model": {"preset": "gpt3-1.3b"},
            "cluster": {"topology": "dgx-a100", "num_gpus": pp},
            "parallel": {
                "tp": 1,
                "pp": pp,
                "dp": 1,
                "micro_batch": 1,
                "global_batch": microbatches,
                "schedule": schedule,
            },
        }
    )


@pytest.mark.parametrize(
    ("schedule", "pp", "microbatches"),
    [("gpipe", 2, 4), ("gpipe", 4, 8), ("1f1b", 2, 3), ("1f1b", 4, 8), ("1f1b", 4, 16), ("1f1b", 8, 8)],
)
def test_closed_form_equals_the_engine_for_gpipe_and_1f1b(schedule: str, pp: int, microbatches: int) -> None:
    scn = _pipeline(schedule, pp, microbatches)
    assert scn.variability.is_deterministic
    engine = simulate(scn).report
    closed = estimate_step(scn)
    assert closed.step_time_s == pytest.approx(engine.step_time_s, rel=1e-9)
    # the same work is done (how waits split into bubble and pp_comm is each model's attribution)
    for category in ("compute", "optimizer"):
        assert closed.breakdown_s[category] == pytest.approx(engine.breakdown_s[category], rel=1e-9)
    assert closed.mfu == pytest.approx(engine.mfu, rel=1e-9)


def _program_flops(scn: Scenario) -> float:
    program = build_program(scn)
    per_microbatch = sum(
        seg.flops
        for stage in program.stages
        for chunk in stage.chunks
        for block in (chunk.forward, chunk.backward)
        for seg in block.segments
    )
    replicas = scn.num_gpus // scn.parallel.pp  # every GPU of a stage does its share: tp·cp·dp·...
    return per_microbatch * program.num_microbatches * replicas


def _scenario(model: dict[str, Any], parallel: dict[str, Any], gpus: int) -> Scenario:
    return scenario_from_dict(
        {"model": model, "cluster": {"topology": "dgx-h100", "num_gpus": gpus}, "parallel": parallel}
    )


SPLITS = {
    "tp2-cp2-pp2-full-recompute": (
        {"preset": "llama3-8b"},
        {"tp": 2, "cp": 2, "pp": 2, "global_batch": 16, "recompute": "full"},
        16,
    ),
    "interleaved-pp4-vp2": (
        {"preset": "llama3-8b"},
        {"pp": 4, "vp": 2, "schedule": "interleaved", "global_batch": 16},
        8,
    ),
    # load_imbalance = 1: the program costs the busiest EP rank's expert GEMMs, the oracle the mean
    "moe-ep8-pp2": (
        {"preset": "mixtral-8x7b", "moe": {"load_imbalance": 1.0}},
        {"pp": 2, "ep": 8, "global_batch": 32, "zero": 1},
        16,
    ),
    "selective-tp8": (
        {"preset": "gpt3-13b"},
        {"tp": 8, "pp": 1, "global_batch": 16, "recompute": "selective"},
        16,
    ),
}


@pytest.mark.parametrize("name", sorted(SPLITS))
def test_program_flops_equal_flops_py(name: str) -> None:
    model, parallel, gpus = SPLITS[name]
    scn = _scenario(model, parallel, gpus)
    par = scn.parallel
    counted = flops.step_flops(scn.model, par.global_batch, par.recompute)
    assert _program_flops(scn) == pytest.approx(counted.hardware, rel=1e-9)


@pytest.mark.parametrize("name", scenario_names())
def test_shipped_scenarios_program_flops_equal_flops_py(name: str) -> None:
    scn = load_scenario(data_dir("scenarios") / f"{name}.toml")
    par = scn.parallel
    counted = flops.step_flops(scn.model, par.global_batch, par.recompute)
    assert _program_flops(scn) == pytest.approx(counted.hardware, rel=1e-9)
