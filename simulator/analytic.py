"""Closed-form step estimate: the fast path for sweeps (issue 5).

The same costed `Program` as the engine (so the same kernels, collectives and
efficiencies), but the pipeline replaced by its closed form instead of an event replay.
With T_s = forward + backward time of one micro-batch on stage s (all its chunks):

* GPipe / 1F1B: the first micro-batch crosses every stage, the other m−1 are paced by the
  slowest stage: T = Σ_s T_s + (m−1)·max_s T_s (+ p2p hops). Equal stages give
  (m + p − 1)·T, i.e. bubble (p−1)/m (Narayanan et al. 2021 §2.2).
* interleaved: m·max_s T_s + (p−1)/v · mean_s T_s — bubble (p−1)/(v·m).
* ZB-H1, ZB-V, DualPipe, DualPipeV: the schedule's own order replayed with these durations
  (schedules.replay: the engine's dependencies without simpy); on balanced stages their
  bubbles are the closed forms of schedules.bubble_closed_form_s, e.g. ZB-H1 (p−1)(T_F+T_B−T_W).

DP gradient reduction overlaps the last micro-batch's backward; ZeRO parameter gathers
overlap the first forward; the optimizer follows a pipeline-wide sync. The engine stays the
reference: `mfusim sweep --engine auto` ranks with this estimate and re-simulates the best.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable

from .comm import CommModel
from .engine.dataloader import LoaderModel, LoaderState, loader_cycle, steady_loader_state
from .metrics import StepReport, step_report
from .program import Block, Program, build_program, stage_orders
from .schedules import (
    SPLIT_BACKWARD_SCHEDULES,
    ChunkTimes,
    Replay,
    is_split_backward,
    microbatches_per_chunk,
    overlapped_pairs,
    replay,
)
from .specs import Scenario
from .timeline import CATEGORIES, repeat_runs_by_stage

REPLAYED_SCHEDULES = (*SPLIT_BACKWARD_SCHEDULES, "interleaved")  # zb-h1, zb-v, dualpipe, dualpipev


def estimate_step(scn: Scenario, comm_model: CommModel | None = None) -> StepReport:
    program = build_program(scn, comm_model)
    step_time_s, by_stage = estimate_program(program)
    return step_report(scn, program, step_time_s, by_stage)


def _pipeline_time_s(program: Program, per_stage_s: list[float]) -> float:
    p, v, m = program.pp, program.vp, program.num_microbatches
    hops = sum(st.p2p_s for st in program.stages[:-1]) * 2
    slowest = max(per_stage_s)
    if p == 1:
        return m * per_stage_s[0]
    if program.schedule == "interleaved":
        return m * slowest + (p - 1) / v * (sum(per_stage_s) / p) + hops / v
    return sum(per_stage_s) + (m - 1) * slowest + hops


def _replayed(program: Program, data_s: Callable[[float], float] | None = None) -> Replay:
    """Interleaved, zero-bubble and DualPipe orders have no closed form exact on unequal stages
    (Megatron's interleaved warm-up is off by up to 25% on small m): play the same orders the
    engine plays (schedules.replay, no simpy) with the program's durations; `data_s` feeds the
    first stage from a dataloader."""
    times = [
        [
            ChunkTimes(
                c.forward.duration_s,
                c.backward.duration_s,
                c.backward_input.duration_s,
                c.backward_weight.duration_s,
                c.forward_paired.duration_s if c.forward_paired is not None else None,
                c.backward_paired.duration_s if c.backward_paired is not None else None,
            )
            for c in st.chunks
        ]
        for st in program.stages
    ]
    hops = [st.p2p_s for st in program.stages]
    orders = stage_orders(program)
    m = program.num_microbatches
    return replay(program.schedule, program.pp, program.vp, m, times, hops, orders, data_s, _gates(program))


def _fed_replay(program: Program) -> tuple[Replay, float]:
    """The pipeline fed by the dataloader in its steady state, as the engine runs it
    (engine/replay.py `run_step`): a first pass from a full buffer gives when the first stage
    would have asked for each batch had it never waited, and the step without the waits; the
    loader alone over previous steps gives the state a step starts from (`steady_loader_state`);
    the pipeline is played again from that state. The loader is the engine's own pure model
    (workers, bounded prefetch buffer, a worker holding its batch while the buffer is full).
    As the engine (engine/replay.py `_loader_cycle_step`), steps are played one after another,
    each from the loader state the previous one left, until a start state repeats; also returns
    the mean step over that cycle (the last step's replay stands for the cycle's DP exposure)."""
    lat, workers = program.dataloader_latency_s, program.dataloader_workers
    capacity = max(1, workers * program.dataloader_prefetch)
    full = LoaderState(workers * program.dataloader_prefetch, (0.0,) * workers)
    first = _served(LoaderModel.from_state(lat, workers, capacity, full))
    requests: list[float] = []
    got_s: list[float] = []  # when each batch was handed out (non-decreasing: first come, first served)
    waited_s = [0.0]  # running total of the waits, per hand-out

    def first_pass(asked_s: float) -> float:
        # had it never waited: the ask less the waits already over when it is made (SimpyLoader)
        requests.append(asked_s - waited_s[bisect.bisect_right(got_s, asked_s)])
        got = first(asked_s)
        got_s.append(got)
        waited_s.append(waited_s[-1] + got - asked_s)
        return got

    played = _replayed(program, first_pass)
    step_s, _ = _after_pipeline(program, played, played.makespan_s)
    state = steady_loader_state(lat, workers, capacity, requests, step_s - waited_s[-1])

    def step(start: LoaderState) -> tuple[tuple[float, Replay], LoaderState]:
        model = LoaderModel.from_state(lat, workers, capacity, start)
        played = _replayed(program, _served(model))
        step_s, _ = _after_pipeline(program, played, played.makespan_s)
        return (step_s, played), model.state(step_s)

    results, first_in_cycle, found = loader_cycle(state, step, 1e-9 * lat)
    steps_s = [r[0] for r in results]
    played = results[-1][1]
    cycle = steps_s[first_in_cycle:]
    mean_s = sum(cycle) / len(cycle)
    if not found or program.dataloader_jitter > 0:  # draining, or jittered: the loader's rate (engine)
        mean_s = max(mean_s, len(requests) * lat / workers)
    return played, mean_s


def _served(loader: LoaderModel) -> Callable[[float], float]:
    """Takes from one buffer, first come first served (DualPipe's two entry stages share it):
    a batch asked for before the previous one was handed out is handed out after it, as the
    engine's simpy Store queues its gets."""
    last_s = 0.0

    def take(asked_s: float) -> float:
        nonlocal last_s
        last_s = loader.take(max(asked_s, last_s))
        return last_s

    return take


def _gates(program: Program) -> list[dict[int, tuple[float, float]]] | None:
    """ZeRO-1/2 parameter gathers overlapped with the first forward of each chunk, as the engine
    runs them (engine/dpstream.py `ParamGathers`): all launched at the start, one after another
    on the DP stream; per stage and chunk, when its first bucket and when all of them are in
    (its first forward waits for the first before it starts, for all before it hands on)."""
    if not (program.gathers_per_step and program.overlap_param_gather):
        return None
    out = []
    for st in program.stages:
        done, first, gates = 0.0, 0.0, {}
        for c, ch in enumerate(st.chunks):
            for j, d in enumerate(ch.param_gather_s):
                done += d
                if j == 0:
                    first = done
            if ch.param_gather_s:
                gates[c] = (first, done)
        out.append(gates)
    return out


def _grad_exposed_s(program: Program, stage: int, r: Replay) -> float:
    """The stage's gradient reduction left after its last task, on its DP stream as the engine
    runs it: ZeRO gathers launched at the start, each chunk's buckets spread over its last
    backward (or W), one collective after another."""
    st = program.stages[stage]
    free = 0.0
    if program.gathers_per_step and program.overlap_param_gather:
        free = sum(sum(c.param_gather_s) for c in st.chunks)
    tasks, starts, ends = r.tasks[stage], r.start_s[stage], r.end_s[stage]
    split = is_split_backward(tasks)
    last = {
        t.chunk: i
        for i, t in enumerate(tasks)
        if t.phase == "W" or (t.phase == "B" and (t.microbatch, t.chunk) not in split)
    }
    for i in sorted(last.values()):
        buckets = st.chunks[tasks[i].chunk].grad_bucket_s
        n = len(buckets)
        for j, d in enumerate(buckets):
            launch = starts[i] + (ends[i] - starts[i]) * (j + 1) / n
            free = max(launch, free) + d
    return max(0.0, free - ends[-1]) if ends else 0.0


def _grad_exposed_closed_s(program: Program, stage: int, end_s: float) -> float:
    """`_grad_exposed_s` without a replay (1F1B / GPipe: one chunk per stage): the stage's last
    backward ends at `end_s`, its buckets launch spread over that backward and run one after
    another on the DP stream, behind the ZeRO gathers launched at the step's start, as the engine
    runs them (chunks' last backwards back to back, chunk 0's last)."""
    st = program.stages[stage]
    free = 0.0
    if program.gathers_per_step and program.overlap_param_gather:
        free = sum(sum(c.param_gather_s) for c in st.chunks)
    start = end_s - sum(c.backward.duration_s for c in st.chunks)
    for c in reversed(st.chunks):
        bwd, buckets = c.backward.duration_s, c.grad_bucket_s
        for j, d in enumerate(buckets):
            free = max(start + bwd * (j + 1) / len(buckets), free) + d
        start += bwd
    return max(0.0, free - end_s)


def _blocks_run(program: Program, stage: int) -> dict[Block, int]:
    """How often the stage runs each block under its order (overlapped F&B pairs use their own
    blocks; a split backward its B and W parts)."""
    order = stage_orders(program)[stage]
    split = is_split_backward(order)
    partners = {j for _, j in overlapped_pairs(order)}
    out: dict[Block, int] = {}
    for i, t in enumerate(order):
        ch = program.stages[stage].chunks[t.chunk]
        if t.phase == "F":
            block = ch.forward_paired if t.paired and ch.forward_paired is not None else ch.forward
        elif t.phase == "W":
            block = ch.backward_weight
        elif (t.microbatch, t.chunk) in split:
            block = ch.backward_input
        elif i in partners and ch.backward_paired is not None:
            block = ch.backward_paired
        else:
            block = ch.backward
        out[block] = out.get(block, 0) + 1
    return out


def _after_pipeline(program: Program, replayed: Replay | None, pipe_s: float) -> tuple[float, list[float]]:
    """(step time, each stage's exposed DP seconds): after its last task (or the closed form's
    pipeline time `pipe_s`) a stage finishes its exposed gradient reduction and ZeRO gathers,
    all stages sync, then the optimizer runs."""
    ends, dp_exposed = [], []
    # torch.distributed.pipelining (grad_reduce_waits): each chunk's last backward waits for its
    # reduction before sending on, so the last micro-batch's backward, which passes every chunk
    # of every stage, is delayed by all of them
    chain = sum(sum(c.grad_bucket_s) for st in program.stages for c in st.chunks)
    for s, st in enumerate(program.stages):
        grads = sum(sum(c.grad_bucket_s) for c in st.chunks)
        if program.grad_reduce_waits:
            exposed = grads
        elif replayed is not None and program.overlap_grad_reduce:
            exposed = _grad_exposed_s(program, s, replayed)
        elif program.overlap_grad_reduce:
            exposed = _grad_exposed_closed_s(program, s, pipe_s) if grads else 0.0
        else:
            exposed = grads
        gathers = [c.param_gather_s for c in st.chunks if c.param_gather_s]
        total_ag = sum(sum(g) for g in gathers)
        waits = 0.0  # gather waits inside the replayed pipeline (its end times include them)
        if program.gathers_per_step and gathers:
            if program.overlap_param_gather and replayed is not None:
                waits = replayed.gate_wait_s[s]
            elif program.overlap_param_gather:
                first_fwd = st.chunks[0].forward.duration_s
                exposed += gathers[0][0] + max(0.0, total_ag - gathers[0][0] - first_fwd)
            else:
                exposed += total_ag
        dp_exposed.append(exposed + waits)
        stage_end_s = replayed.end_s[s][-1] if replayed is not None and replayed.end_s[s] else pipe_s
        ends.append(stage_end_s + (chain if program.grad_reduce_waits else exposed) + st.embedding_sync_s)
    return max(ends) + max(st.optimizer_s for st in program.stages), dp_exposed


def estimate_program(program: Program) -> tuple[float, tuple[dict[str, float], ...]]:
    """(step time, per-stage breakdown) of a costed program without the event engine."""
    m = program.num_microbatches
    per_stage, work = [], []
    for st in program.stages:
        share = [microbatches_per_chunk(program.schedule, program.pp, m, c.chunk) / m for c in st.chunks]
        fwd = sum(c.forward.duration_s * f for c, f in zip(st.chunks, share, strict=True))
        bwd = sum(c.backward.duration_s * f for c, f in zip(st.chunks, share, strict=True))
        per_stage.append(fwd + bwd)
        cats = dict.fromkeys(CATEGORIES, 0.0)
        if any(c.forward_paired is not None for c in st.chunks):  # DualPipe: per task, as replayed
            for block, runs in _blocks_run(program, st.stage).items():
                for seg in block.segments:
                    cats[seg.category] += seg.duration_s * runs
        else:
            for c in st.chunks:
                runs = microbatches_per_chunk(program.schedule, program.pp, m, c.chunk)
                for block in (c.forward, c.backward):
                    for seg in block.segments:
                        cats[seg.category] += seg.duration_s * runs
        work.append(cats)
    # the combined 1F1B (EP overlap) pairs tasks: replayed as the engine runs it
    replayed = _replayed(program) if program.schedule in REPLAYED_SCHEDULES or program.ep_overlap else None
    pipe_s = replayed.makespan_s if replayed is not None else _pipeline_time_s(program, per_stage)
    step_s, dp_exposed = _after_pipeline(program, replayed, pipe_s)
    if program.dataloader_latency_s > 0:
        replayed, mean_s = _fed_replay(program)
        _, dp_exposed = _after_pipeline(program, replayed, replayed.makespan_s)
        step_s = mean_s  # the time beyond a stage's work is waiting: bubble below

    by_stage = []
    for st, cats, exposed in zip(program.stages, work, dp_exposed, strict=True):
        cats = dict(cats)
        cats["dp_comm"] += exposed
        cats["pp_comm"] += st.embedding_sync_s
        cats["optimizer"] = st.optimizer_s
        busy = sum(cats.values())
        if busy > step_s:  # the closed form under-estimated this stage: stretch to its own work
            step_s = busy
        cats["bubble"] += step_s - busy
        by_stage.append(cats)
    for cats in by_stage:  # keep every stage summing to the (possibly raised) step time
        cats["bubble"] += step_s - sum(cats.values())
    optimizer_s = tuple(st.optimizer_s for st in program.stages)
    return repeat_runs_by_stage(step_s, tuple(by_stage), optimizer_s, program.pipeline_runs)
