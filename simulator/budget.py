"""The work budget: refuse, before simulating, what would not finish in about a minute (issue 18).

Every command that simulates estimates its work first from what it is about to do —
pipeline tasks (pp·vp·micro-batches), spans recorded for `--trace`/`--plot`, `--samples`,
what-if variants, sweep configurations — with the per-unit costs below, and refuses with one
line (exit 2) naming the knob to turn and the limit when the estimate is over the budget.

The costs were measured on the project's reference machine (2 cores shared with other jobs,
`benchmarks/bench_budget.py` prints them) and are deliberately the slow end of what we saw,
so that anything accepted finishes within about 60 s and 2 GB there:

* a step where nothing varies between micro-batches is extended from three short replays
  (engine/steady.py): its cost hardly depends on the number of micro-batches; if the
  extension does not apply it is replayed task by task without simpy (~40 µs per task);
* jitter, stragglers or a dataloader need the simpy replay: ~0.2 ms per task (twice with a
  dataloader, whose steady state takes a first pass);
* `--trace` and `--plot` record every op: ~25 µs and ~600 B per span to simulate, ~40 µs and
  ~600 B more per span to write the trace, ~60 µs per span to draw the plot;
* the closed form evaluates a sweep configuration in ~5 ms per worker.

`MFUSIM_WORK_BUDGET_S` (seconds, default 40) raises or lowers the budget for a faster or
slower machine; it is read once per check and never changes a result, only what is accepted.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from .errors import ConfigError
from .specs import Scenario

BUDGET_S = 40.0  # estimated seconds; measured costs are the slow end, so real runs stay under 60 s
BUDGET_BYTES = 1.5 * 2**30  # estimated peak memory of what scales with the input
ENV_BUDGET = "MFUSIM_WORK_BUDGET_S"

STEP_OVERHEAD_S = 0.05  # costing the program, building the report
LOCAL_S_PER_TASK = 40e-6  # full replay without simpy (a quiet step the extension cannot shorten)
SIMPY_S_PER_TASK = 200e-6  # jitter / stragglers / dataloader: the simpy replay
SPAN_SIM_S = 25e-6  # --trace/--plot: recording one span
SPAN_SIM_BYTES = 600.0
SPAN_TRACE_S = 40e-6  # building and writing one trace event
SPAN_TRACE_BYTES = 600.0
SPAN_PLOT_S = 60e-6  # drawing one span (matplotlib)
SPANS_PER_SEGMENT = 1.15  # spans per costed op segment (plus waits, bubbles, DP buckets)
ANALYTIC_S_PER_CONFIG = 5e-3  # one sweep configuration by the closed form, per worker
TASK_BYTES = 2_000.0  # the simpy replay's memory per task


def budget_s() -> float:
    """The budget in estimated seconds (MFUSIM_WORK_BUDGET_S, else BUDGET_S)."""
    text = os.environ.get(ENV_BUDGET)
    if not text:
        return BUDGET_S
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(f"must be a number of seconds, got {text!r}", key=ENV_BUDGET) from None
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(f"must be a positive number of seconds, got {text!r}", key=ENV_BUDGET)
    return value


def pipeline_tasks(scn: Scenario) -> int:
    par = scn.parallel
    return par.pp * par.vp * par.num_microbatches


def is_quiet(scn: Scenario) -> bool:
    """Nothing varies between micro-batches: the step can be extended from short replays."""
    from .engine.noise import is_quiet as quiet_spec

    return quiet_spec(scn.variability) and scn.dataloader.microbatch_latency_s <= 0


def step_seconds(scn: Scenario) -> float:
    """Estimated seconds of one step without spans."""
    tasks = pipeline_tasks(scn)
    if is_quiet(scn):
        return STEP_OVERHEAD_S + tasks * LOCAL_S_PER_TASK  # the worst case: no extension
    passes = 2 if scn.dataloader.microbatch_latency_s > 0 else 1
    return STEP_OVERHEAD_S + passes * tasks * SIMPY_S_PER_TASK


def estimated_spans(scn: Scenario, comm_model: object | None = None) -> int:
    """Spans a detailed step records: op segments per micro-batch of every stage × micro-batches."""
    from .program import build_program

    program = build_program(scn, comm_model)  # type: ignore[arg-type]
    per_mb = sum(
        len(c.forward.segments) + len(c.backward.segments) for st in program.stages for c in st.chunks
    )
    return int(per_mb * program.num_microbatches * SPANS_PER_SEGMENT) + 4 * program.pp


@dataclass(frozen=True, slots=True)
class Estimate:
    seconds: float
    bytes: float


def _refuse(key: str, what: str, est: Estimate, advice: str, file: str | None = None) -> None:
    limit = budget_s()
    over_time = est.seconds > limit
    over_memory = est.bytes > BUDGET_BYTES
    if not (over_time or over_memory):
        return
    cost = f"about {est.seconds:,.0f} s" + (f" and {est.bytes / 2**30:.1f} GiB" if over_memory else "")
    limits = f"the work budget of {limit:g} s ({ENV_BUDGET})" + (
        f" and {BUDGET_BYTES / 2**30:.1f} GiB" if over_memory else ""
    )
    raise ConfigError(f"{what} would take {cost}, over {limits}; {advice}", key=key, file=file)


def check_run(
    scn: Scenario,
    *,
    samples: int = 1,
    trace: bool = False,
    plot: bool = False,
    comm_model: object | None = None,
) -> None:
    """`mfusim run`: the step (with spans for --trace/--plot), then samples − 1 more steps."""
    tasks = pipeline_tasks(scn)
    step = step_seconds(scn)
    par = scn.parallel
    knob_tasks = (
        f"pp*vp*micro-batches = {par.pp}*{par.vp}*{par.num_microbatches} = {tasks:,} pipeline tasks"
        + ("" if is_quiet(scn) else " (replayed one by one: jitter, stragglers or a dataloader)")
    )
    _refuse(
        "parallel.global_batch",
        f"one step of {knob_tasks}",
        Estimate(step, tasks * TASK_BYTES),
        "raise parallel.micro_batch or lower parallel.global_batch",
        file=scn.source or None,
    )
    if samples > 1:
        est = Estimate(step * samples, tasks * TASK_BYTES)
        most = max(1, int(budget_s() / step))
        _refuse("--samples", f"{samples:,} samples of ~{step:.2g} s", est, f"use --samples {most:,} or fewer")
    if trace or plot:
        spans = estimated_spans(scn, comm_model)
        seconds = (
            step
            + spans * SPAN_SIM_S
            + (spans * SPAN_TRACE_S if trace else 0)
            + (spans * SPAN_PLOT_S if plot else 0)
        )
        memory = spans * (SPAN_SIM_BYTES + (SPAN_TRACE_BYTES if trace else 0))
        flag = "--plot" if plot and not trace else "--trace"
        _refuse(
            flag,
            f"recording {spans:,} spans for {' and '.join(f for f, on in (('--trace', trace), ('--plot', plot)) if on)}",
            Estimate(seconds, memory),
            "trace or plot a smaller step (fewer micro-batches: raise micro_batch or lower global_batch)",
        )


def check_whatif(scn: Scenario, variants: int) -> None:
    """`mfusim whatif`: the baseline and every variant, each one step."""
    step = step_seconds(scn)
    _refuse(
        "parallel.global_batch",
        f"the baseline and {variants} what-if variants of ~{step:.2g} s each",
        Estimate(step * (variants + 1), pipeline_tasks(scn) * TASK_BYTES),
        "simulate a smaller step (raise micro_batch or lower global_batch)",
        file=scn.source or None,
    )


def check_sweep(configs: int, *, engine: str, jobs: int, refine: int, step_s: float) -> None:
    """`mfusim sweep`: `configs` by the closed form (or the engine), spread over `jobs` workers,
    plus the engine on the best `refine` with --engine auto. `step_s`: the engine's estimate for
    one configuration (the base scenario's)."""
    workers = max(1, min(jobs, os.cpu_count() or 1))
    if engine == "des":
        seconds = configs * step_s / workers
    else:
        seconds = configs * ANALYTIC_S_PER_CONFIG / workers + (refine * step_s if engine == "auto" else 0.0)
    _refuse(
        "sweep",
        f"{configs:,} configurations ({engine}, {workers} worker{'s' if workers > 1 else ''})",
        Estimate(seconds, 0.0),
        "narrow the [sweep] lists or split the sweep into several",
    )
