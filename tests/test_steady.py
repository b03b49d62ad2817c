"""Compressed replay (simulator/engine/steady.py): a step extended from three short replays
equals the full replay to 1e-9 relative — on every shipped scenario and a sample of the
published-run cases `mfusim validate` builds (benchmarks/bench_engine.py checks all of them).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from simulator.engine import steady
from simulator.engine.replay import steady_step
from simulator.errors import ConfigError
from simulator.loading import load_scenario
from simulator.program import Program, build_program
from simulator.resources import data_dir
from simulator.timeline import CATEGORIES
from simulator.validate.cases import Case, build_case
from simulator.validate.runner import scenario_for
from simulator.validate.runs import read_runs_csv

SCENARIOS = sorted((Path(__file__).resolve().parent.parent / "scenarios").glob("*.toml"))
REL = 1e-9


def _validate_programs(every: int) -> list[tuple[str, Program]]:
    runs = read_runs_csv(data_dir("scenarios") / "published" / "calibration_runs.csv")
    cases = [c for c in (build_case(r) for r in runs) if isinstance(c, Case)]
    out = []
    for case in cases[::every]:
        try:
            program = build_program(scenario_for(case))
        except ConfigError:  # validate reports the row as unusable
            continue
        if steady.probe_sizes(program) is not None:
            out.append((case.run_id, program))
    return out


def _assert_same(extended, full) -> None:
    assert extended.step_time_s == pytest.approx(full.step_time_s, rel=REL)
    for a, b in zip(extended.breakdown_by_stage_s(), full.breakdown_by_stage_s(), strict=True):
        for c in CATEGORIES:
            assert a[c] == pytest.approx(b[c], rel=REL, abs=REL * full.step_time_s), c


def _check(program: Program) -> bool:
    """Whether the program was extended; when it was, it equals the full replay."""
    extended = steady.extended_step(program, lambda p: steady_step(p, compress=False))
    if extended is not None:
        _assert_same(extended, steady_step(program, compress=False))
    return extended is not None


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_shipped_scenarios_extend_exactly(path: Path) -> None:
    program = build_program(load_scenario(path))
    _check(program)
    _check(replace(program, num_microbatches=4 * program.num_microbatches))
    _check(replace(program, num_microbatches=16 * program.num_microbatches))


def test_published_run_cases_extend_exactly() -> None:
    checked = [name for name, program in _validate_programs(every=20) if _check(program)]
    assert len(checked) >= 3, checked


def test_a_cycle_catching_up_on_the_slowest_stage_is_not_extended() -> None:
    """The Qwen3-235B GB200 rows of validate (1F1B, pp 8, m 256): the last stage never waits in
    the probes (m = 16 ... 32), but a cycle through the other stages with a slightly longer
    cycle time catches up on it and from m ≈ 76 on makes it wait (+0.09% per period). The
    probes' increments agree and no stage's waiting shrinks; the shrinking slack of its inputs
    (Timeline.slack_s) refuses the extension (it was 0.07% short of the full replay)."""
    runs = read_runs_csv(data_dir("scenarios") / "published" / "calibration_runs.csv")
    ids = {"mbridge_26.02_Qwen3_235B_a22B_DGX-GB200_256gpu_mxfp8"}
    cases = [c for c in (build_case(r) for r in runs) if isinstance(c, Case) and c.run_id in ids]
    assert cases, "the Qwen3-235B GB200 row is gone from the calibration set"
    program = build_program(scenario_for(cases[0]))
    for m in (program.num_microbatches, 4 * program.num_microbatches):
        _check(replace(program, num_microbatches=m))  # refused, or exact


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe", "zb-h1"])
def test_cost_independent_of_microbatches(schedule: str) -> None:
    """The probes depend on pp and the schedule, not on m: m = 64 and m = 4096 replay the same
    short pipelines, and both are extended (equal stages: periodic from the first pipeline)."""
    scn = load_scenario(data_dir("scenarios") / "teaching-pp4.toml")
    program = replace(build_program(scn), schedule=schedule)
    short = steady.probe_sizes(replace(program, num_microbatches=64))
    long = steady.probe_sizes(replace(program, num_microbatches=4096))
    assert short is not None and short == long
    assert _check(replace(program, num_microbatches=4096))


def test_slack_from_the_warm_up_is_not_extended() -> None:
    """llama3-405b (interleaved, a slower first stage) is not periodic for hundreds of
    micro-batches: extension is refused (or, if accepted, exact)."""
    program = build_program(load_scenario(data_dir("scenarios") / "llama3-405b-16k-h100.toml"))
    longer = replace(program, num_microbatches=8 * program.num_microbatches)
    _check(longer)
