"""One pipeline stage as a process: for each task of its schedule, receive → compute → send
(as picotron's 1F1B loop reads), then the end of the step: the exposed part of the gradient
reduction, the pipeline-wide sync, the optimizer and (without overlap) the ZeRO gathers.

The process only talks to its clock (clock.py), so the same code runs in global simpy time or
in the stage's own local time. Every wait is recorded as a span of the category that caused it,
so the stage's main timeline tiles [0, its end]. What each task reads, runs and sends is worked
out once, before the step (`TaskPlan`), so the loop itself only keeps time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, NamedTuple

from ..program import Block, Program
from ..schedules import Task, is_split_backward, overlapped_pairs
from .dataloader import SimpyLoader
from .dpstream import DPStream, ParamGathers
from .noise import Noise
from .recorder import BlockSummary, Recorder
from .routing import MessageKey, Route, downstream, link_stage, message_key, upstream


def last_grad_tasks(tasks: tuple[Task, ...], split: set[tuple[int, int]]) -> dict[int, int]:
    """Index of the task after which each chunk's gradients are final: its last W, or its last
    whole backward (a B whose weight gradient is not split off)."""
    return {
        t.chunk: i
        for i, t in enumerate(tasks)
        if t.phase == "W" or (t.phase == "B" and (t.microbatch, t.chunk) not in split)
    }


class TaskPlan(NamedTuple):
    """One task, resolved: what it waits for, the block it runs, what it sends and where."""

    task: Task
    block: Block
    summary: BlockSummary
    receive: MessageKey | None  # the neighbour's output it waits for
    reads_data: bool  # takes a batch from the dataloader first
    send: MessageKey | None  # the key its own output is posted under
    transfer_s: float  # point-to-point time of that output
    grads_final: bool  # the chunk's gradients are complete after it (bucket reduction starts)


@dataclass(frozen=True, slots=True)
class _Kind:
    """What all tasks of one (phase, chunk, split or not) share."""

    block: Block
    summary: BlockSummary
    src: tuple[int, int] | None
    dst: tuple[int, int] | None
    transfer_s: float


def _kind(
    stage: int,
    task: Task,
    split: bool,
    route: Route,
    recorder: Recorder,
    program: Program,
    paired: bool = False,
) -> _Kind:
    ch = program.stages[stage].chunks[task.chunk]
    if task.phase == "F":
        block = ch.forward_paired if paired and ch.forward_paired is not None else ch.forward
    elif task.phase == "B" and paired and not split and ch.backward_paired is not None:
        block = ch.backward_paired  # the B of DualPipe's overlapped F&B pair
    elif task.phase == "B":
        block = ch.backward_input if split else ch.backward
    else:
        block = ch.backward_weight
    src, dst = upstream(route, task, stage), downstream(route, task, stage)
    link = link_stage(route, (stage, task.chunk), dst) if dst is not None else None
    transfer_s = program.stages[link].p2p_s if link is not None else 0.0
    return _Kind(block, recorder.summary(block), src, dst, transfer_s)


def plan_tasks(
    stage: int, tasks: tuple[Task, ...], route: Route, recorder: Recorder, program: Program
) -> list[TaskPlan]:
    split = is_split_backward(tasks)
    last_grad = last_grad_tasks(tasks, split)
    partners = {j for _, j in overlapped_pairs(tasks)}
    kinds: dict[tuple[str, int, bool, bool], _Kind] = {}
    plans = []
    for i, t in enumerate(tasks):
        is_split = (t.microbatch, t.chunk) in split
        pair = t.paired or i in partners
        k = kinds.get((t.phase, t.chunk, is_split, pair))
        if k is None:
            k = kinds[(t.phase, t.chunk, is_split, pair)] = _kind(
                stage, t, is_split, route, recorder, program, pair
            )
        plans.append(
            TaskPlan(
                task=t,
                block=k.block,
                summary=k.summary,
                receive=message_key(t.phase, t.microbatch, k.src) if k.src is not None else None,
                reads_data=t.phase == "F" and k.src is None,
                send=message_key(t.phase, t.microbatch, (stage, t.chunk)) if k.dst is not None else None,
                transfer_s=k.transfer_s,
                grads_final=program.overlap_grad_reduce and last_grad.get(t.chunk) == i,
            )
        )
    return plans


class StageProcess:
    def __init__(
        self,
        stage: int,
        program: Program,
        tasks: tuple[Task, ...],
        route: Route,
        clock: Any,
        recorder: Recorder,
        noise: Noise,
        loader: SimpyLoader | None,
    ) -> None:
        self.s, self.program = stage, program
        self.clock, self.rec, self.noise, self.loader = clock, recorder, noise, loader
        self.st = program.stages[stage]
        self.tasks, self.route = tasks, route
        self.dp = DPStream(stage, recorder, noise)
        self.gathers = ParamGathers()
        self.overlap_gathers = program.gathers_per_step and program.overlap_param_gather
        self.slow = 1.0
        self.nominal_busy_s = 0.0  # compute this stage would do without jitter
        self.actual_busy_s = 0.0
        self.busy_sq_s2 = 0.0
        self.end_s = 0.0

    # ------------------------------------------------------------------ the step
    def run(self):
        clock, rec, noise, s = self.clock, self.rec, self.noise, self.s
        self.slow = noise.straggler_factor()
        if self.overlap_gathers:
            self.gathers.launch(
                self.dp,
                [ch.param_gather_s for ch in self.st.chunks],
                [ch.param_gather_bytes for ch in self.st.chunks],
            )
        plans = plan_tasks(s, self.tasks, self.route, rec, self.program)
        received: set[int] = set()  # tasks whose input is already in (DualPipe's paired F&B)
        for idx, plan in enumerate(plans):
            task = plan.task
            # --- receive
            if idx not in received:
                yield from self._receive(plan)
            if task.paired and idx + 1 < len(plans):  # an F&B pair starts when both inputs are in
                yield from self._receive(plans[idx + 1])
                received.add(idx + 1)
            # --- compute
            start = clock.now
            end = rec.block(s, plan.block, start, noise.compute_factor() * self.slow, task, self.program.vp)
            ev = clock.hold(end - start)
            if ev is not None:
                yield ev
            if self.noise.spec.compute_jitter > 0:  # only the replica-skew estimate needs it
                self._account(plan.summary, start, end)
            # --- send
            if task.phase == "F" and self.gathers.first_done_s:
                yield from self._gather_wait(self.gathers.wait_after_s(task.chunk, clock.now), task.chunk)
                self.gathers.seen.add(task.chunk)
            reduce = plan.grads_final and bool(self.st.chunks[task.chunk].grad_bucket_s)
            waits = reduce and self.program.grad_reduce_waits
            if waits:  # the send is queued behind the wait (torch.distributed.pipelining)
                yield from self._reduce_and_wait(task.chunk, start, end)
            if plan.send is not None:
                self._post(plan)
            if reduce and not waits:
                self._reduce_grads(task.chunk, start, end)
        yield from self._finish()

    def _hold(self, seconds: float):
        ev = self.clock.hold(seconds)
        if ev is not None:
            yield ev

    # ------------------------------------------------------------------ receive
    def _receive(self, plan: TaskPlan):
        task = plan.task
        if plan.receive is not None:
            clock = self.clock
            t0 = clock.now
            ev = clock.arrival(plan.receive)
            if ev is not None:
                yield ev
            t1 = clock.now
            self.rec.wait(self.s, task, t0, t1, min(clock.wire_s(plan.receive), t1 - t0))
        elif plan.reads_data and self.loader is not None:
            yield from self.loader.take(self.s, task.microbatch)
        if task.phase == "F" and self.gathers.first_done_s:
            yield from self._gather_wait(self.gathers.wait_before_s(task.chunk, self.clock.now), task.chunk)

    def _gather_wait(self, seconds: float, chunk: int):
        if seconds > 0:
            t0 = self.clock.now
            yield from self._hold(seconds)
            self.rec.add(self.s, "dp_comm", "wait param allgather", t0, self.clock.now, chunk=chunk)

    # ------------------------------------------------------------------ compute and send
    def _account(self, summary: BlockSummary, start: float, end: float) -> None:
        """What the replica-skew estimate needs: this stage's compute, nominal and actual."""
        busy = summary.busy_s
        self.nominal_busy_s += busy
        self.busy_sq_s2 += busy * busy
        self.actual_busy_s += (end - start) - (summary.duration_s - busy)

    def _post(self, plan: TaskPlan) -> None:
        task, key = plan.task, plan.send
        assert key is not None
        d = plan.transfer_s * self.noise.network_factor()
        now = self.clock.now
        self.rec.send(self.s, task, now, now + d, self.st.p2p_bytes)
        self.clock.post(key, d)

    def _reduce_grads(self, chunk: int, start: float, end: float) -> None:
        """With overlap, a chunk's gradient buckets are reduced as its last backward produces them;
        under torch.distributed.pipelining with FSDP (ZeRO-3) only after it: PipelineStage calls
        each FSDP group's post_backward once the chunk's backward has returned."""
        ch = self.st.chunks[chunk]
        buckets = ch.grad_bucket_s
        n = len(buckets)
        if self.program.grad_reduce_waits and self.program.zero == 3:
            times = [end] * n
        else:
            times = [start + (end - start) * (j + 1) / n for j in range(n)]
        self.dp.launch(buckets, times, "grad reduce", chunk, ch.grad_bucket_bytes)

    def _reduce_and_wait(self, chunk: int, start: float, end: float):
        """torch.distributed.pipelining (Program.grad_reduce_waits): the chunk's last backward of
        the run reduces its gradients and the compute stream waits for them
        (FSDP's _root_post_backward_final_callback, DDP's finalize) before anything else runs
        on it -- the send of this backward's input gradient, queued after, included."""
        self._reduce_grads(chunk, start, end)
        t0 = self.clock.now
        if self.dp.free_s > t0:
            yield from self._hold(self.dp.free_s - t0)
            self.rec.add(
                self.s, "dp_comm", "grad reduce (run's last backward waits)", t0, self.clock.now, chunk=chunk
            )

    # ------------------------------------------------------------------ end of step
    def _finish(self):
        clock, rec, s = self.clock, self.rec, self.s
        if not self.program.overlap_grad_reduce:
            for c, ch in reversed(list(enumerate(self.st.chunks))):
                self.dp.launch(
                    ch.grad_bucket_s,
                    [clock.now] * len(ch.grad_bucket_s),
                    "grad reduce",
                    c,
                    ch.grad_bucket_bytes,
                )
        # this stage's gradient reduction, and the slowest DP replica
        t0 = clock.now
        std = self.noise.spec.compute_jitter * math.sqrt(self.busy_sq_s2)
        skew = self.noise.replica_skew_s(self.actual_busy_s, self.nominal_busy_s * self.slow, std)
        target = max(self.dp.free_s, clock.now) + skew
        if target > clock.now:
            yield from self._hold(target - clock.now)
            rec.add(s, "dp_comm", "grad reduce (exposed)", t0, clock.now)
        if self.st.embedding_sync_s > 0:  # program.EMBEDDING_SYNC_NOTE
            t0 = clock.now
            yield from self._hold(self.st.embedding_sync_s)
            rec.add(s, "pp_comm", "tied embedding grad all-reduce (first and last stage)", t0, clock.now)
        # all stages synchronize (global grad-norm), then the optimizer
        t0 = clock.now
        yield clock.barrier()
        rec.add(s, "bubble", "wait for other stages", t0, clock.now)
        t0 = clock.now
        yield from self._hold(self.st.optimizer_s)
        rec.add(s, "optimizer", "optimizer step", t0, clock.now)
        if self.program.gathers_per_step and not self.overlap_gathers:
            yield from self._gather_after_optimizer()
        self.end_s = clock.now

    def _gather_after_optimizer(self):
        clock = self.clock
        end = clock.now
        for c, ch in enumerate(self.st.chunks):
            if ch.param_gather_s:
                end = self.dp.launch(
                    ch.param_gather_s,
                    [clock.now] * len(ch.param_gather_s),
                    "param allgather",
                    c,
                    ch.param_gather_bytes,
                )
        if end > clock.now:
            t0 = clock.now
            yield from self._hold(end - clock.now)
            self.rec.add(self.s, "dp_comm", "param allgather (exposed)", t0, clock.now)
