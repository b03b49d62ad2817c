"""`simulate()`: one training step of a scenario — cost it (program.py), replay it (engine/),
measure it (metrics.py)."""

from __future__ import annotations

import numbers
from dataclasses import dataclass, replace

from .comm import CommModel
from .engine import run_step
from .engine.noise import is_quiet
from .errors import ConfigError
from .gpu_spread import SPREAD_CATEGORY
from .metrics import StepReport, step_report
from .program import Program, build_program
from .specs import Scenario
from .timeline import Timeline, with_stage_tail

MAX_SEED = 2**63 - 1  # numpy's SeedSequence accepts any non-negative int; TOML integers stop here


@dataclass(frozen=True, slots=True)
class StepResult:
    report: StepReport
    timeline: Timeline
    program: Program


def with_seed(scn: Scenario, seed: int | None) -> Scenario:
    """The scenario with both random seeds (dataloader, variability) set to `seed`."""
    if seed is None:
        return scn
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or not 0 <= seed <= MAX_SEED:
        # named as the caller gave it: `seed` (the CLI's --seed is checked by its parser)
        raise ConfigError(f"must be an integer from 0 to {MAX_SEED}, got {seed!r}", key="seed")
    seed = int(seed)
    return replace(
        scn,
        dataloader=replace(scn.dataloader, seed=seed),
        variability=replace(scn.variability, seed=seed),
    )


def seeds_matter(scn: Scenario) -> bool:
    """Whether two seeds can give different steps: random variability or dataloader jitter."""
    jittery_loader = scn.dataloader.microbatch_latency_s > 0 and scn.dataloader.jitter > 0
    return not is_quiet(scn.variability) or jittery_loader


def simulate(
    scn: Scenario, comm_model: CommModel | None = None, seed: int | None = None, detail: bool = False
) -> StepResult:
    """Simulate one training step of `scn`: cost it, replay it, measure it.
    `detail=True` records every op as a span (traces and plots need them); by default only each
    stage's seconds per category are kept (all the report needs).

    The report is the same with or without `detail`: it always comes from the replay without
    spans (a detailed replay adds its seconds in another order, which moved `run --json` in the
    last digits when --trace or --plot was given). The detailed timeline then ends with the
    report's slowest-GPU wait on every stage (`timeline.with_stage_tail`), so a trace or plot
    tiles the reported step and its per-stage sums are `breakdown_by_stage_s`."""
    scn = with_seed(scn, seed)
    program = build_program(scn, comm_model)
    par = scn.parallel

    def replay(spans: bool) -> Timeline:
        return run_step(program, scn.variability, group_size=par.tp * par.cp, replicas=par.dp, detail=spans)

    timeline = replay(False)
    report = step_report(scn, program, timeline.step_time_s, tuple(timeline.breakdown_by_stage_s()))
    if detail:
        timeline = with_stage_tail(
            replay(True), SPREAD_CATEGORY, report.step_time_s, "wait for the slowest GPU"
        )
    return StepResult(report=report, timeline=timeline, program=program)
