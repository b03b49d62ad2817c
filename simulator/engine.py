"""The discrete-event engine: one training step of one representative pipeline (simpy).

This is the only module that imports simpy. It replays a costed `Program`
(simulator/program.py) under a pipeline schedule (simulator/schedules.py):

* one process per pipeline stage runs its schedule's tasks in order, waiting for the
  activation (forward) or gradient (backward) of the neighbouring stage, which arrives
  after a point-to-point transfer;
* a dataloader (workers, a prefetch buffer, latency with seeded jitter) feeds stage 0;
* each stage has a data-parallel communication stream: gradient buckets are reduced as
  the last micro-batch's backward of a chunk produces them (overlap on), or after the
  schedule (overlap off); ZeRO-1/2 parameter AllGathers run at the start of the step,
  overlapped with the first forward of each chunk, or after the optimizer;
* at the end all stages synchronize (gradient-norm clipping spans the pipeline), then
  run the optimizer.

DP replicas are identical, so only one pipeline is simulated: the event count is
O(p · v · m), independent of dp. Every wait is recorded as a span of the category that
caused it, so each stage's main timeline tiles [0, step_time] (simulator/timeline.py).
No global state: the Environment, the recorder and the random generator live per call.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import simpy

from .comm import CommModel
from .metrics import StepReport, step_report
from .program import Block, Program, Segment, build_program
from .schedules import Task, stage_tasks
from .specs import Scenario, VariabilitySpec
from .timeline import MAIN_STREAM, Span, Timeline


def lognormal(rng: np.random.Generator, cv: float, size: int | None = None):
    """Multipliers with mean 1 and coefficient of variation `cv` (lognormal: never negative)."""
    sigma2 = math.log1p(cv * cv)
    return rng.lognormal(-sigma2 / 2, math.sqrt(sigma2), size)


@dataclass(frozen=True, slots=True)
class _Noise:
    """Per-run random multipliers (all 1.0 when variability is off)."""

    rng: np.random.Generator
    spec: VariabilitySpec
    group_size: int  # GPUs that synchronize inside a block (tp·cp)
    replicas: int  # data-parallel replicas that synchronize at the end (dp)

    def compute_factor(self) -> float:
        cv = self.spec.compute_jitter
        if cv <= 0:
            return 1.0
        # the block ends when the slowest GPU of its TP/CP group ends (they sync every layer)
        return float(np.max(lognormal(self.rng, cv, self.group_size)))

    def network_factor(self) -> float:
        cv = self.spec.network_jitter
        return 1.0 if cv <= 0 else float(lognormal(self.rng, cv))

    def straggler_factor(self) -> float:
        """A stage is as slow as its slowest GPU across all replicas (synchronous DP)."""
        p = self.spec.straggler_probability
        if p <= 0 or self.spec.straggler_slowdown == 1.0:
            return 1.0
        gpus = self.group_size * self.replicas
        p_any = 1.0 - (1.0 - p) ** gpus
        return self.spec.straggler_slowdown if self.rng.random() < p_any else 1.0

    def replica_skew_s(self, own_s: float, mean_s: float, std_s: float) -> float:
        """Extra wait at the gradient sync for the slowest of the other dp−1 replicas."""
        if std_s <= 0 or self.replicas <= 1:
            return 0.0
        z = float(np.max(self.rng.standard_normal(self.replicas - 1)))
        return max(0.0, mean_s + std_s * z - own_s)


class _Recorder:
    def __init__(self) -> None:
        self.spans: list[Span] = []

    def add(
        self, stage: int, category: str, name: str, start: float, end: float, stream: str = MAIN_STREAM, **kw
    ) -> None:
        if end > start:
            self.spans.append(Span(stage, stream, category, name, start, end, **kw))


@dataclass(frozen=True, slots=True)
class _Arrival:
    event: simpy.Event
    transfer_s: float


@dataclass(frozen=True, slots=True)
class LoaderState:
    """The dataloader at the start of a step: batches buffered, and when each worker's
    batch in hand is ready (0 = ready now)."""

    buffered: int
    worker_ready_s: tuple[float, ...]


def run_step(
    program: Program,
    variability: VariabilitySpec | None = None,
    group_size: int = 1,
    replicas: int = 1,
    detail: bool = True,
) -> Timeline:
    """Simulate one steady-state step of `program`; return the recorded timeline.

    With a dataloader, the buffer at the start of a step is what the previous steps left:
    a first pass (buffer full) gives the step period and when stage 0 asks for data; the
    loader alone is then run over a few previous periods to find its steady state, and the
    step is simulated again from there.
    """
    if program.dataloader_latency_s <= 0:
        return _replay(program, variability, group_size, replicas, None, detail)[0]
    workers = program.dataloader_workers
    full = LoaderState(workers * program.dataloader_prefetch, (0.0,) * workers)
    _, requests, unstalled_period_s = _replay(program, variability, group_size, replicas, full, detail)
    state = steady_loader_state(
        program.dataloader_latency_s, workers, max(1, full.buffered), requests, unstalled_period_s
    )
    return _replay(program, variability, group_size, replicas, state, detail)[0]


def steady_loader_state(
    latency_s: float,
    workers: int,
    capacity: int,
    request_times_s: list[float],
    period_s: float,
    periods: int = 4,
) -> LoaderState:
    """Run the loader alone (deterministic latency) over `periods` previous steps whose stage 0
    would ask for batches at `request_times_s` (relative to each step's start, no stalls);
    return its state at the start of the next step. It starts full when the loader keeps up on
    average and empty when it cannot (then the buffer is dry at every step start, and starting
    full would take many periods to drain); when a batch is late, the rest of the schedule
    shifts by the wait, as the stalled pipeline would."""
    start = -periods * period_s
    loader_bound = len(request_times_s) * latency_s / workers > period_s
    if loader_bound:  # the buffer runs dry every step: start empty, workers busy (converges at once)
        done = [start + latency_s] * workers
        holding = [False] * workers
        buffered = 0
    else:  # the loader keeps up: start full, every worker holding a finished batch
        done = [start] * workers
        holding = [True] * workers
        buffered = capacity

    def advance(t: float) -> None:
        nonlocal buffered
        while True:
            running = [w for w in range(workers) if not holding[w] and done[w] <= t]
            if not running:
                return
            w = min(running, key=lambda i: done[i])
            if buffered < capacity:
                buffered += 1
                done[w] += latency_s
            else:
                holding[w] = True

    shift = 0.0
    for k in range(periods):
        for r in request_times_s:
            q = start + k * period_s + r + shift
            advance(q)
            if buffered == 0:
                w = min((i for i in range(workers) if not holding[i]), key=lambda i: done[i])
                shift += done[w] - q
                q = done[w]
                advance(q)
            buffered -= 1
            waiting = [w for w in range(workers) if holding[w]]
            if waiting:  # the oldest held batch takes the freed slot; that worker starts anew
                w = waiting[0]
                holding[w] = False
                buffered += 1
                done[w] = q + latency_s
    advance(shift)  # the new step starts `shift` later than planned
    ready = tuple(0.0 if holding[w] else max(0.0, done[w] - shift) for w in range(workers))
    return LoaderState(buffered, ready)


def _replay(
    program: Program,
    variability: VariabilitySpec | None,
    group_size: int,
    replicas: int,
    loader: LoaderState | None,
    detail: bool = True,
) -> tuple[Timeline, list[float], float]:
    """One step from the given loader state: (timeline, stage 0's data requests as they would
    be without data stalls, the step time without them)."""
    spec = variability or VariabilitySpec()
    env = simpy.Environment()
    rec = _Recorder()
    noise = _Noise(np.random.default_rng(spec.seed), spec, group_size, replicas)
    p, v, m = program.pp, program.vp, program.num_microbatches

    arrivals: dict[tuple[str, int, int, int], _Arrival] = {}

    def arrival(key: tuple[str, int, int, int]) -> _Arrival:
        if key not in arrivals:
            arrivals[key] = _Arrival(env.event(), 0.0)
        return arrivals[key]

    def send(
        key: tuple[str, int, int, int], src: int, dst: int, transfer_s: float, mb: int, chunk: int
    ) -> None:
        """Point-to-point transfer: the consumer's event fires when the data lands."""
        d = transfer_s * noise.network_factor()
        ev = arrival(key).event
        arrivals[key] = _Arrival(ev, d)
        rec.add(
            src,
            "pp_comm",
            f"send {key[0]} mb{mb}",
            env.now,
            env.now + d,
            stream="pp",
            microbatch=mb,
            chunk=chunk,
        )
        if d <= 0:
            ev.succeed()
        else:
            env.timeout(d).callbacks.append(lambda _ev: _fire(ev))

    # ---- dataloader: workers fill a bounded buffer; stage 0 takes one batch per micro-batch
    latency = program.dataloader_latency_s
    store: simpy.Store | None = None
    requests: list[float] = []
    data_wait = [0.0]
    if loader is not None:
        capacity = max(1, program.dataloader_workers * program.dataloader_prefetch)
        store = simpy.Store(env, capacity=capacity)
        store.items.extend(range(loader.buffered))
        dl_rng = np.random.default_rng(program.dataloader_seed)

        def worker(w: int):
            first = loader.worker_ready_s[w]
            if first > 0:  # finishing the batch it was loading when the step began
                yield env.timeout(first)
                rec.add(0, "dataloader", f"load (worker {w})", 0.0, env.now, stream="data")
            yield store.put(w)
            while True:
                cv = program.dataloader_jitter
                jitter = lognormal(dl_rng, cv) if cv > 0 else 1.0
                start = env.now
                yield env.timeout(latency * float(jitter))
                rec.add(0, "dataloader", f"load (worker {w})", start, env.now, stream="data")
                yield store.put(w)

        for w in range(program.dataloader_workers):
            env.process(worker(w))

    summaries: dict[int, tuple[Segment, ...]] = {}  # per-category block summaries, built once per block
    sync = env.event()
    arrived = [0]
    stage_end = [0.0] * p

    def run_block(s: int, block: Block, task: Task, label: str, slow: float):
        start = env.now
        factor = noise.compute_factor() * slow
        t = start
        if detail:
            segments = block.segments
        else:
            segments = summaries.get(id(block)) or summaries.setdefault(id(block), _by_category(block))
        for seg in segments:
            dur = seg.duration_s * (factor if seg.category in ("compute", "recompute") else 1.0)
            rec.add(
                s,
                seg.category,
                f"{label} {seg.name}",
                t,
                t + dur,
                microbatch=task.microbatch,
                chunk=task.chunk,
                flops=seg.flops,
                message_bytes=seg.message_bytes,
            )
            t += dur
        yield env.timeout(t - start)
        return start, t

    def wait_for(s: int, key: tuple[str, int, int, int], what: str, task: Task):
        """Wait for a neighbour's data; waiting while it is on the wire is pp_comm, before that bubble."""
        t0 = env.now
        ev = arrival(key).event
        if not ev.triggered:
            yield ev
        t1 = env.now
        wire = min(arrivals[key].transfer_s, t1 - t0)
        rec.add(s, "bubble", f"wait {what}", t0, t1 - wire, microbatch=task.microbatch, chunk=task.chunk)
        rec.add(s, "pp_comm", f"recv {what}", t1 - wire, t1, microbatch=task.microbatch, chunk=task.chunk)

    def stage(s: int):
        st = program.stages[s]
        tasks = stage_tasks(program.schedule, p, v, m, s)
        slow = noise.straggler_factor()
        split_backward = any(t.phase == "W" for t in tasks)
        last_grad_task = _last_grad_tasks(tasks, split_backward)
        dp_free = [0.0]
        overlap_ag = program.zero in (1, 2) and program.overlap_param_gather
        ag_first_done: dict[int, float] = {}
        ag_done: dict[int, float] = {}
        first_fwd_seen: set[int] = set()
        nominal_busy = 0.0  # compute this stage would do without jitter
        actual_busy = 0.0
        busy_sq = 0.0

        def dp_launch(
            durations: tuple[float, ...], launch_times: list[float], name: str, chunk: int
        ) -> float:
            end = dp_free[0]
            for d, t_launch in zip(durations, launch_times, strict=True):
                d *= noise.network_factor()
                start = max(t_launch, dp_free[0])
                end = start + d
                rec.add(s, "dp_comm", name, start, end, stream="dp", chunk=chunk)
                dp_free[0] = end
            return end

        if overlap_ag:
            for c, ch in enumerate(st.chunks):
                if ch.param_gather_s:
                    first = dp_launch(ch.param_gather_s[:1], [0.0], "param allgather", c)
                    ag_first_done[c] = first
                    ag_done[c] = (
                        dp_launch(
                            ch.param_gather_s[1:], [0.0] * (len(ch.param_gather_s) - 1), "param allgather", c
                        )
                        if len(ch.param_gather_s) > 1
                        else first
                    )

        for idx, task in enumerate(tasks):
            ch = st.chunks[task.chunk]
            # --- inputs
            if task.phase == "F":
                if s == 0 and task.chunk == 0:
                    if store is not None:
                        t0 = env.now
                        requests.append(t0 - data_wait[0])  # when it would ask with no stall so far
                        yield store.get()
                        data_wait[0] += env.now - t0
                        rec.add(s, "dataloader", "wait for data", t0, env.now, microbatch=task.microbatch)
                else:
                    src = (s - 1, task.chunk) if s > 0 else (p - 1, task.chunk - 1)
                    yield from wait_for(
                        s, ("F", task.microbatch, src[1], src[0]), f"activation mb{task.microbatch}", task
                    )
                if (
                    task.chunk in ag_first_done
                    and task.chunk not in first_fwd_seen
                    and env.now < ag_first_done[task.chunk]
                ):
                    t0 = env.now
                    yield env.timeout(ag_first_done[task.chunk] - env.now)
                    rec.add(s, "dp_comm", "wait param allgather", t0, env.now, chunk=task.chunk)
                block, label = ch.forward, f"F{task.microbatch}"
            elif task.phase == "B":
                if s < p - 1:
                    yield from wait_for(
                        s, ("B", task.microbatch, task.chunk, s + 1), f"gradient mb{task.microbatch}", task
                    )
                elif task.chunk < v - 1:
                    yield from wait_for(
                        s, ("B", task.microbatch, task.chunk + 1, 0), f"gradient mb{task.microbatch}", task
                    )
                block = ch.backward_input if split_backward else ch.backward
                label = f"B{task.microbatch}"
            else:
                block, label = ch.backward_weight, f"W{task.microbatch}"
            if v > 1:
                label += f".{task.chunk}"
            # --- the work itself
            start, end = yield from run_block(s, block, task, label, slow)
            busy = block.seconds("compute") + block.seconds("recompute")
            nominal_busy += busy
            busy_sq += busy * busy
            actual_busy += (end - start) - (block.duration_s - busy)
            # --- outputs
            if task.phase == "F":
                if (
                    task.chunk in ag_done
                    and task.chunk not in first_fwd_seen
                    and env.now < ag_done[task.chunk]
                ):
                    t0 = env.now
                    yield env.timeout(ag_done[task.chunk] - env.now)
                    rec.add(s, "dp_comm", "wait param allgather", t0, env.now, chunk=task.chunk)
                first_fwd_seen.add(task.chunk)
                if s < p - 1:
                    send(
                        ("F", task.microbatch, task.chunk, s), s, s + 1, st.p2p_s, task.microbatch, task.chunk
                    )
                elif task.chunk < v - 1:
                    send(("F", task.microbatch, task.chunk, s), s, 0, st.p2p_s, task.microbatch, task.chunk)
            elif task.phase == "B":
                if s > 0:
                    send(
                        ("B", task.microbatch, task.chunk, s),
                        s,
                        s - 1,
                        program.stages[s - 1].p2p_s,
                        task.microbatch,
                        task.chunk,
                    )
                elif task.chunk > 0:
                    send(
                        ("B", task.microbatch, task.chunk, s),
                        s,
                        p - 1,
                        program.stages[p - 1].p2p_s,
                        task.microbatch,
                        task.chunk,
                    )
            if program.overlap_grad_reduce and last_grad_task.get(task.chunk) == idx and ch.grad_bucket_s:
                n = len(ch.grad_bucket_s)
                times = [start + (end - start) * (j + 1) / n for j in range(n)]
                dp_launch(ch.grad_bucket_s, times, "grad reduce", task.chunk)

        if not program.overlap_grad_reduce:
            for c, ch in reversed(list(enumerate(st.chunks))):
                dp_launch(ch.grad_bucket_s, [env.now] * len(ch.grad_bucket_s), "grad reduce", c)
        # --- wait for this stage's gradient reduction, and for the slowest DP replica
        t0 = env.now
        std = noise.spec.compute_jitter * math.sqrt(busy_sq)
        skew = noise.replica_skew_s(actual_busy, nominal_busy * slow, std)
        target = max(dp_free[0], env.now) + skew
        if target > env.now:
            yield env.timeout(target - env.now)
            rec.add(s, "dp_comm", "grad reduce (exposed)", t0, env.now)
        # --- all stages synchronize (global grad-norm), then the optimizer
        arrived[0] += 1
        if arrived[0] == p:
            sync.succeed()
        t0 = env.now
        yield sync
        rec.add(s, "bubble", "wait for other stages", t0, env.now)
        t0 = env.now
        yield env.timeout(st.optimizer_s)
        rec.add(s, "optimizer", "optimizer step", t0, env.now)
        if program.zero in (1, 2) and not overlap_ag:
            gathers = [(c, ch.param_gather_s) for c, ch in enumerate(st.chunks) if ch.param_gather_s]
            end = env.now
            for c, durations in gathers:
                end = dp_launch(durations, [env.now] * len(durations), "param allgather", c)
            if end > env.now:
                t0 = env.now
                yield env.timeout(end - env.now)
                rec.add(s, "dp_comm", "param allgather (exposed)", t0, env.now)
        stage_end[s] = env.now

    procs = [env.process(stage(s)) for s in range(p)]
    env.run(until=simpy.AllOf(env, procs))
    step_time = max(stage_end)
    for s in range(p):
        rec.add(s, "bubble", "wait for step end", stage_end[s], step_time)
    return Timeline(tuple(rec.spans), step_time, p), requests, step_time - data_wait[0]


def _by_category(block: Block) -> tuple[Segment, ...]:
    """A block's segments summed per category, in order of first appearance."""
    sums: dict[str, list[float]] = {}
    for seg in block.segments:
        acc = sums.setdefault(seg.category, [0.0, 0.0, 0.0])
        acc[0] += seg.duration_s
        acc[1] += seg.flops
        acc[2] += seg.message_bytes
    return tuple(Segment(c, c, d, f, b) for c, (d, f, b) in sums.items())


def _fire(ev: simpy.Event) -> None:
    ev.succeed()


def _last_grad_tasks(tasks: list[Task], split_backward: bool) -> dict[int, int]:
    """Index of the task after which each chunk's gradients are final."""
    phase = "W" if split_backward else "B"
    out: dict[int, int] = {}
    for i, t in enumerate(tasks):
        if t.phase == phase:
            out[t.chunk] = i
    return out


# ----------------------------------------------------------------------------- the front door
@dataclass(frozen=True, slots=True)
class StepResult:
    report: StepReport
    timeline: Timeline
    program: Program


def with_seed(scn: Scenario, seed: int | None) -> Scenario:
    """The scenario with both random seeds (dataloader, variability) set to `seed`."""
    if seed is None:
        return scn
    return replace(
        scn,
        dataloader=replace(scn.dataloader, seed=seed),
        variability=replace(scn.variability, seed=seed),
    )


def simulate(
    scn: Scenario, comm_model: CommModel | None = None, seed: int | None = None, detail: bool = True
) -> StepResult:
    """Simulate one training step of `scn`: cost it, replay it, measure it.
    `detail=False` keeps one span per category per block (sweeps), not one per op."""
    scn = with_seed(scn, seed)
    program = build_program(scn, comm_model)
    par = scn.parallel
    timeline = run_step(program, scn.variability, group_size=par.tp * par.cp, replicas=par.dp, detail=detail)
    report = step_report(scn, program, timeline.step_time_s, tuple(timeline.breakdown_by_stage_s()))
    return StepResult(report=report, timeline=timeline, program=program)
