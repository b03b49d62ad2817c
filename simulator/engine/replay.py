"""Replaying one step: the stage processes under a clock, and what the step looked like.

`run_step` is the engine's front door: it picks the clock (local time when nothing random and
no dataloader is involved, simpy otherwise), the recorder (spans only when asked for), and
starts the step from the dataloader's steady state when there is one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from ..program import Program, stage_orders
from ..schedules import PAIRED_SCHEDULES
from ..specs import VariabilitySpec
from ..timeline import CATEGORIES, MAIN_STREAM, Span, Timeline, repeat_runs
from .clock import BARRIER, LocalClock, LocalMailbox, Pending, SimpyBarrier, SimpyClock, SimpyMailbox
from .dataloader import LoaderState, SimpyLoader, loader_cycle, steady_loader_state
from .noise import Noise
from .quiet import QuietStage
from .recorder import Recorder, SpanRecorder, SumRecorder
from .routing import route_for
from .stage import StageProcess
from .steady import extended_step


@dataclass(frozen=True, slots=True)
class Replay:
    """One replayed step: the timeline, and for the dataloader's steady state, when stage 0 would
    have asked for data with no stall, and the step time without the data waits."""

    timeline: Timeline
    requests_s: tuple[float, ...] = ()
    unstalled_s: float = 0.0
    end_state: LoaderState | None = None  # the loader when the next step starts


def _close(recorder: Recorder, ends_s: list[float]) -> Timeline:
    step_time = max(ends_s)
    for s, end in enumerate(ends_s):
        recorder.add(s, "bubble", "wait for step end", end, step_time)
    return recorder.timeline(step_time)


def replay_simpy(program: Program, noise: Noise, recorder: Recorder, loader: LoaderState | None) -> Replay:
    """The step in global simpy time (jitter, stragglers, the dataloader)."""
    import simpy  # only here: a quiet step needs none of it (start-up time)

    env = simpy.Environment()
    clock = SimpyClock(env, SimpyMailbox(env), SimpyBarrier(env, program.pp))
    feed = SimpyLoader(env, program, loader, recorder) if loader is not None else None
    route = route_for(program.schedule, program.pp, program.vp)
    orders = stage_orders(program)
    stages = [
        StageProcess(s, program, orders[s], route, clock, recorder, noise, feed) for s in range(program.pp)
    ]
    procs = [env.process(st.run()) for st in stages]
    env.run(until=simpy.AllOf(env, procs))
    timeline = _close(recorder, [st.end_s for st in stages])
    if feed is None:
        return Replay(timeline)
    end = feed.state_at(timeline.step_time_s)
    return Replay(timeline, tuple(feed.requests_s), timeline.step_time_s - feed.wait_s, end)


def replay_local(program: Program, noise: Noise, recorder: Recorder, tight: bool = True) -> Replay:
    """The step with every stage in its own time (nothing random, no dataloader): a stage runs
    until it needs a message not yet sent, and is woken when it is. Quiet stages that only sum
    run the tight loop of quiet.py (`tight=False`: StageProcess, which it equals bit for bit)."""
    box = LocalMailbox()
    route = route_for(program.schedule, program.pp, program.vp)
    orders = stage_orders(program)
    paired = program.schedule in PAIRED_SCHEDULES or program.ep_overlap
    quiet = tight and noise.rng is None and isinstance(recorder, SumRecorder) and not paired
    kind = QuietStage if quiet else StageProcess
    stages = [
        kind(s, program, orders[s], route, LocalClock(s, box), recorder, noise, None)
        for s in range(program.pp)
    ]
    procs = [st.run() for st in stages]
    box.runnable.extend(range(program.pp))
    at_barrier: list[int] = []
    finished = 0
    while box.runnable:
        s = box.runnable.popleft()
        try:
            token = next(procs[s])
        except StopIteration:
            finished += 1
            continue
        if isinstance(token, Pending):
            box.parked[token.key] = stages[s].clock
        elif token == BARRIER:
            at_barrier.append(s)
            if len(at_barrier) == program.pp:
                _release(stages, at_barrier, box)
    if finished != program.pp:
        raise RuntimeError(
            f"pipeline schedule {program.schedule!r} deadlocked: a stage waits for data never sent"
        )
    return Replay(_close(recorder, [st.end_s for st in stages]))


def _release(stages: list[StageProcess], at_barrier: list[int], box: LocalMailbox) -> None:
    """Everyone has arrived: all continue from the last arrival."""
    t = max(stages[s].clock.now for s in at_barrier)
    for s in at_barrier:
        stages[s].clock.now = t
    box.runnable.extend(at_barrier)


def steady_step(program: Program, compress: bool = True) -> Timeline:
    """A step where nothing varies: extended from short replays when it can be, else in full."""

    def local(prog: Program) -> Timeline:
        return replay_local(prog, Noise.for_spec(VariabilitySpec(), 1, 1), SumRecorder(prog.pp)).timeline

    extended = extended_step(program, local) if compress else None
    return extended if extended is not None else local(program)


def run_step(
    program: Program,
    variability: VariabilitySpec | None = None,
    group_size: int = 1,
    replicas: int = 1,
    detail: bool = False,
    compress: bool = True,
) -> Timeline:
    """Simulate one steady-state step of `program`; return the recorded timeline. `detail`
    records every op as a span (traces, plots); otherwise only each stage's seconds per category.
    `compress` lets a step where nothing varies between micro-batches be extended from three
    short replays (steady.py) instead of replayed in full.

    With a dataloader, the buffer at the start of a step is what the previous steps left:
    a first pass (buffer full) gives the step period and when stage 0 asks for data; the
    loader alone is then run over a few previous periods to find an approximate steady state,
    and consecutive steps are simulated from there until they cycle; the step is the mean over
    the cycle (`_loader_cycle_step`).

    With `program.pipeline_runs` > 1 the replayed run is repeated (timeline.repeat_runs).
    """
    timeline = _run_once(program, variability, group_size, replicas, detail, compress)
    optimizer_s = tuple(st.optimizer_s for st in program.stages)
    return repeat_runs(timeline, optimizer_s, program.pipeline_runs, program.num_microbatches)


def _run_once(
    program: Program,
    variability: VariabilitySpec | None,
    group_size: int,
    replicas: int,
    detail: bool,
    compress: bool,
) -> Timeline:
    """One pipeline run of `program` (the whole step unless pipeline_runs > 1)."""
    spec = variability or VariabilitySpec()

    def recorder(spans: bool) -> Recorder:
        return SpanRecorder(program.pp) if spans else SumRecorder(program.pp)

    def noise() -> Noise:  # every pass draws the same numbers
        return Noise.for_spec(spec, group_size, replicas)

    if program.dataloader_latency_s <= 0:
        quiet = noise().rng is None
        if quiet and not detail:
            return steady_step(program, compress)
        return replay_simpy(program, noise(), recorder(detail), None).timeline
    workers = program.dataloader_workers
    full = LoaderState(workers * program.dataloader_prefetch, (0.0,) * workers)
    first = replay_simpy(program, noise(), recorder(False), full)
    state = steady_loader_state(
        program.dataloader_latency_s,
        workers,
        max(1, full.buffered),
        list(first.requests_s),
        first.unstalled_s,
    )
    return _loader_cycle_step(
        program,
        state,
        len(first.requests_s),
        lambda st, spans: replay_simpy(program, noise(), recorder(spans), st),
        detail,
    )


def _loader_cycle_step(
    program: Program,
    state: LoaderState,
    batches: int,
    replay: Callable[[LoaderState, bool], Replay],
    detail: bool,
) -> Timeline:
    """The mean step over the loader's cycle. Steps are replayed one after another, each from
    the loader state the previous one left, from `state` (the approximate steady state) until a
    step starts from a state an earlier one started from: the steps in between are one whole
    cycle. A loader-bound pipeline's steps need not all be alike (workers out of phase deliver
    batches unevenly across steps); one of them is not the step period, and could be slower with
    faster hardware even though the long-run period (max and + of the durations) cannot be. The
    mean over a whole cycle is that period; the breakdown is the mean of the cycle's breakdowns,
    so it still sums to the step time. One replay when the first step leaves the state it
    started from (a loader that keeps up, or one whose steps are all alike)."""

    starts: list[LoaderState] = []

    def step(start: LoaderState) -> tuple[Timeline, LoaderState]:
        starts.append(start)
        done = replay(start, False)
        assert done.end_state is not None
        return done.timeline, done.end_state

    steps, first, cycle_found = loader_cycle(state, step, 1e-9 * program.dataloader_latency_s)
    cycle = steps[first:]
    # with spans (traces, plots): the cycle's first step replayed again, recording them -- the
    # step the breakdown is (or, over a longer cycle, the first of those it is the mean of); the
    # approximate steady state's first step, recorded before, could be a transient one, longer or
    # shorter than the step reported (a trace of loader jitter ran past its step's end)
    spans = replay(starts[first], True).timeline.spans if detail else ()
    if cycle_found and len(cycle) == 1:
        return replace(cycle[0], spans=spans)
    n = len(cycle)
    by_stage = [t.breakdown_by_stage_s() for t in cycle]
    mean = tuple({c: sum(b[s][c] for b in by_stage) / n for c in CATEGORIES} for s in range(program.pp))
    step_s = sum(t.step_time_s for t in cycle) / n
    if not cycle_found or program.dataloader_jitter > 0:
        # Still in the transient: a loader just slower than the pipeline drains what it had
        # buffered by a little each step, and the steps run at the pipeline's pace until it is
        # gone (hundreds of steps near the boundary). In the long run no step is shorter than
        # its batches' loading time over the workers; the extra time is waiting for data (stage
        # 0; the other stages wait for stage 0: bubble). With jitter every replayed step draws
        # the same latencies (noise() is reseeded), so the cycle's steps run at that one
        # sample's pace, which was below the mean-1 latency's bound by up to 23% (jitter 1.0):
        # the bound holds for the mean step whatever the draws.
        bound_s = batches * program.dataloader_latency_s / program.dataloader_workers
        if bound_s > step_s:
            for s, cats in enumerate(mean):
                cats["dataloader" if s == 0 else "bubble"] += bound_s - step_s
            step_s = bound_s
    # with spans: the cycle's first step's, the cycle's mean as the breakdown
    return Timeline(_pad_to_step(spans, step_s, program.pp), step_s, program.pp, by_stage_s=mean)


LOADER_WAIT_SPAN = "wait for data (the loader's mean pace)"


def _pad_to_step(spans: tuple[Span, ...], step_s: float, stages: int) -> tuple[Span, ...]:
    """The recorded step's spans, each stage's main timeline lengthened to the reported step with
    the time it waits for data (stage 0: dataloader; later stages wait for stage 0: bubble), as
    the breakdown charges it. The step the loader's mean pace holds a jittery loader-bound
    pipeline to is longer than the one replayed step recorded: its trace ended 1.4% before the
    step it reported, and the trace's per-stage sums missed that time."""
    if not spans:
        return spans
    ends = dict.fromkeys(range(stages), 0.0)
    for sp in spans:
        if sp.stream == MAIN_STREAM:
            ends[sp.stage] = max(ends[sp.stage], sp.end_s)
    pads = tuple(
        Span(stage, MAIN_STREAM, "dataloader" if stage == 0 else "bubble", LOADER_WAIT_SPAN, end, step_s)
        for stage, end in ends.items()
        if end < step_s
    )
    return spans + pads
