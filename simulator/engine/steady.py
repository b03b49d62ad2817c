"""Compressed replay: a step's cost independent of the number of micro-batches.

When nothing varies between micro-batches (no jitter, no stragglers, no dataloader), the
pipeline is a deterministic max-plus system: after the warm-up, every stage repeats the same
pattern each `period` micro-batches (1 for GPipe, 1F1B and the zero-bubble orders; pp for
Megatron's interleaving, whose micro-batches go in groups of pp; 2 for DualPipe's two
directions), shifted by a constant time. Then the step time and every stage's seconds per
category are affine in the number of micro-batches m along m ≡ m₀ (mod period).

So three short replays with m₀, m₀ + P and m₀ + 2P micro-batches (warm-up, a few steady-state
cycles and the cool-down) give the increment per period twice; when the two agree (the replay
is in its periodic regime) the full step is extended exactly: T(m) = T(m₀+2P) + (m − m₀ − 2P)/P · Δ.

Agreeing increments are necessary, not sufficient: a slow stage that still has idle time left
over from the warm-up can grow slower than its own work for many periods, then stop waiting
(a kink; seen on llama3-405b-16k-h100 with 4x its micro-batches). In the periodic regime the
step grows at least as fast as every stage's own work (each stage runs its tasks one after
another), i.e. no stage's waiting time shrinks from one period to the next; the extension
also requires that. The kink the other way: a stage that never waits while a cycle through
other stages, with a cycle time just above its own, catches up on it by a little each period
and after many periods makes it wait (seen on the Qwen3-235B GB200 rows of validate: from m ≈ 76
on, 0.09% slower per period). Then its inputs land ever closer to when it asks for them: the
seconds they waited for it (`Timeline.slack_s`, per stage and direction) grow by less each
period, and the extension also requires that they do not. When a check fails, or the full replay is no dearer than the probes, the
caller replays in full. Tested against full replays on every shipped scenario and on the
published-run cases (tests/test_steady.py, benchmarks/bench_engine.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

from ..program import Program
from ..schedules import check_schedule
from ..timeline import CATEGORIES, Timeline

AGREE_REL = 1e-11  # the two increments must agree to this fraction of the step time


def period_microbatches(schedule: str, pp: int) -> int:
    """Micro-batches after which every stage's steady-state pattern repeats. The schedule's own
    period (pp for interleaving, 2 for DualPipe, else 1) is not enough: with unequal stages the
    critical cycle of the max-plus system can span several micro-batches (4 is seen with pp 8),
    and the cycle time repeats only after that many; a critical cycle crosses the pipeline, so
    its length divides a multiple of pp here. Every extension is checked anyway."""
    own = 2 if schedule == "dualpipe" else 1
    return math.lcm(own, pp)


def probe_sizes(program: Program, warmup_pipelines: int = 1) -> tuple[int, int, int] | None:
    """(m₀, m₀ + P, m₀ + 2P), all ≡ m (mod P) and valid for the schedule, m₀ ≥ pp ·
    `warmup_pipelines`; None unless the three probes cost at most half the full replay."""
    m, pp = program.num_microbatches, program.pp
    period = period_microbatches(program.schedule, pp)
    first = max(warmup_pipelines * pp, period)
    first += (m - first) % period  # same residue as m
    sizes = (first, first + period, first + 2 * period)
    if 2 * (3 * first + 3 * period) > m:  # worth it only at half the cost or less (failures replay twice)
        return None
    layers = max(1, sum(c.num_layers for st in program.stages for c in st.chunks))
    if any(check_schedule(program.schedule, pp, k, layers) for k in sizes):
        return None
    return sizes


def extended_step(program: Program, replay: Callable[[Program], Timeline]) -> Timeline | None:
    """The step of `program` from three short replays, or None when it cannot be extended exactly
    (probes one pipeline long first, then two; interleaved: two at once, its warm-up is longer)."""
    for warmup in (2,) if program.schedule == "interleaved" else (1, 2):
        sizes = probe_sizes(program, warmup)
        if sizes is None:
            return None
        extended = _extend(program, replay, sizes)
        if extended is not None:
            return extended
    return None


def _extend(
    program: Program, replay: Callable[[Program], Timeline], sizes: tuple[int, int, int]
) -> Timeline | None:
    probes = [replay(replace(program, num_microbatches=k)) for k in sizes]
    a, b, c = ([probe.step_time_s] + _flat(probe) for probe in probes)
    tol = AGREE_REL * c[0]
    if any(abs((z - y) - (y - x)) > tol for x, y, z in zip(a, b, c, strict=True)):
        return None
    if any(_idle(c, s) - _idle(b, s) < -tol for s in range(program.pp)):
        return None  # a stage still uses up slack from the warm-up: not the periodic regime yet
    slack = [probe.slack_s for probe in probes]
    if not all(slack) or any((z - y) - (y - x) < -tol for x, y, z in zip(*slack, strict=True)):
        return None  # inputs arrive ever closer to when they are needed: a stage will start waiting
    periods = (program.num_microbatches - sizes[2]) / (sizes[1] - sizes[0])
    out = [z + periods * (z - y) for y, z in zip(b, c, strict=True)]
    per_stage = len(CATEGORIES)
    by_stage = tuple(
        dict(zip(CATEGORIES, out[1 + s * per_stage : 1 + (s + 1) * per_stage], strict=True))
        for s in range(program.pp)
    )
    return Timeline((), out[0], program.pp, by_stage_s=by_stage)


def _idle(flat: list[float], stage: int) -> float:
    """Seconds a stage waited (bubble, point-to-point waits) in a flattened probe."""
    base = 1 + stage * len(CATEGORIES)
    return flat[base + CATEGORIES.index("bubble")] + flat[base + CATEGORIES.index("pp_comm")]


def _flat(timeline: Timeline) -> list[float]:
    return [stage[c] for stage in timeline.breakdown_by_stage_s() for c in CATEGORIES]
