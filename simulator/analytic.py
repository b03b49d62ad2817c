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

from .comm import CommModel
from .metrics import StepReport, step_report
from .program import Block, Program, build_program, stage_orders
from .schedules import (
    SPLIT_BACKWARD_SCHEDULES,
    ChunkTimes,
    is_split_backward,
    microbatches_per_chunk,
    overlapped_pairs,
    replay,
)
from .specs import Scenario
from .timeline import CATEGORIES

REPLAYED_SCHEDULES = SPLIT_BACKWARD_SCHEDULES  # zb-h1, zb-v, dualpipe, dualpipev


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


def _replayed_pipeline_time_s(program: Program) -> float:
    """Zero-bubble and DualPipe orders have no simple closed form on unequal stages: play the
    same orders the engine plays (schedules.replay, no simpy) with the program's durations."""
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
    return replay(
        program.schedule, program.pp, program.vp, program.num_microbatches, times, hops, orders
    ).makespan_s


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
    if program.schedule in REPLAYED_SCHEDULES and program.pp > 1:
        pipe_s = _replayed_pipeline_time_s(program)
    else:
        pipe_s = _pipeline_time_s(program, per_stage)

    ends, dp_exposed = [], []
    for st in program.stages:
        grads = sum(sum(c.grad_bucket_s) for c in st.chunks)
        last_bwd = st.chunks[0].backward.duration_s if st.chunks else 0.0
        if program.overlap_grad_reduce:
            last_bucket = max((c.grad_bucket_s[-1] for c in st.chunks if c.grad_bucket_s), default=0.0)
            exposed = max(0.0, grads - last_bwd * len(st.chunks)) + last_bucket if grads else 0.0
        else:
            exposed = grads
        gathers = [c.param_gather_s for c in st.chunks if c.param_gather_s]
        total_ag = sum(sum(g) for g in gathers)
        if program.gathers_per_step and gathers:
            if program.overlap_param_gather:
                first_fwd = st.chunks[0].forward.duration_s
                exposed += gathers[0][0] + max(0.0, total_ag - gathers[0][0] - first_fwd)
            else:
                exposed += total_ag
        dp_exposed.append(exposed)
        ends.append(pipe_s + exposed)
    sync_s = max(ends)
    step_s = sync_s + max(st.optimizer_s for st in program.stages)
    step_s += _data_stall_s(program, per_stage[0])

    by_stage = []
    for st, cats, exposed in zip(program.stages, work, dp_exposed, strict=True):
        cats = dict(cats)
        cats["dp_comm"] += exposed
        cats["optimizer"] = st.optimizer_s
        busy = sum(cats.values())
        if busy > step_s:  # the closed form under-estimated this stage: stretch to its own work
            step_s = busy
        cats["bubble"] += step_s - busy
        by_stage.append(cats)
    for cats in by_stage:  # keep every stage summing to the (possibly raised) step time
        cats["bubble"] += step_s - sum(cats.values())
    return step_s, tuple(by_stage)


def _data_stall_s(program: Program, stage0_per_mb_s: float) -> float:
    """Loader throughput workers/latency against stage 0's consumption, after the buffer."""
    lat = program.dataloader_latency_s
    if lat <= 0:
        return 0.0
    m = program.num_microbatches
    ready = program.dataloader_workers * (program.dataloader_prefetch + 1)
    produce_s = max(0, m - ready) * lat / program.dataloader_workers
    consume_s = max(0, m - ready) * stage0_per_mb_s
    return max(0.0, produce_s - consume_s)
