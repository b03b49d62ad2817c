"""One pipeline stage as a process: for each task of its schedule, receive → compute → send
(as picotron's 1F1B loop reads), then the end of the step: the exposed part of the gradient
reduction, the pipeline-wide sync, the optimizer and (without overlap) the ZeRO gathers.

The process only talks to its clock (clock.py), so the same code runs in global simpy time or
in the stage's own local time. Every wait is recorded as a span of the category that caused it,
so the stage's main timeline tiles [0, its end].
"""

from __future__ import annotations

import math
from typing import Any

from ..program import Block, Program
from ..schedules import Task, is_split_backward
from .dataloader import SimpyLoader
from .dpstream import DPStream, ParamGathers
from .noise import Noise
from .recorder import Recorder
from .routing import MessageKey, Route, downstream, link_stage, message_key, upstream


def last_grad_tasks(tasks: tuple[Task, ...], split: set[tuple[int, int]]) -> dict[int, int]:
    """Index of the task after which each chunk's gradients are final: its last W, or its last
    whole backward (a B whose weight gradient is not split off)."""
    return {
        t.chunk: i
        for i, t in enumerate(tasks)
        if t.phase == "W" or (t.phase == "B" and (t.microbatch, t.chunk) not in split)
    }


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
        self.s, self.program, self.route = stage, program, route
        self.clock, self.rec, self.noise, self.loader = clock, recorder, noise, loader
        self.st = program.stages[stage]
        self.tasks = tasks
        self.split = is_split_backward(tasks)  # (micro-batch, chunk) whose B leaves its W for later
        self.last_grad = last_grad_tasks(tasks, self.split)
        self.received: set[int] = set()  # indices of tasks whose input is already in (paired F&B)
        self.dp = DPStream(stage, recorder, noise)
        self.gathers = ParamGathers()
        self.overlap_gathers = program.zero in (1, 2) and program.overlap_param_gather
        self.slow = 1.0
        self.nominal_busy_s = 0.0  # compute this stage would do without jitter
        self.actual_busy_s = 0.0
        self.busy_sq_s2 = 0.0
        self.end_s = 0.0

    # ------------------------------------------------------------------ the step
    def run(self):
        self.slow = self.noise.straggler_factor()
        if self.overlap_gathers:
            self.gathers.launch(self.dp, [ch.param_gather_s for ch in self.st.chunks])
        for idx, task in enumerate(self.tasks):
            if idx not in self.received:
                yield from self._receive(task)
            if task.paired and idx + 1 < len(self.tasks):  # DualPipe's F&B start together
                yield from self._receive(self.tasks[idx + 1])
                self.received.add(idx + 1)
            start, end = yield from self._compute(task)
            yield from self._send(task)
            self._reduce_grads(idx, task, start, end)
        yield from self._finish()

    def _hold(self, seconds: float):
        ev = self.clock.hold(seconds)
        if ev is not None:
            yield ev

    # ------------------------------------------------------------------ receive
    def _receive(self, task: Task):
        src = upstream(self.route, task, self.s)
        if task.phase == "F":
            if src is None:
                if self.loader is not None:
                    yield from self.loader.take(self.s, task.microbatch)
            else:
                key = message_key("F", task.microbatch, src)
                yield from self._wait(key, f"activation mb{task.microbatch}", task)
            yield from self._wait_gather(self.gathers.wait_before_s(task.chunk, self.clock.now), task.chunk)
        elif task.phase == "B" and src is not None:
            key = message_key("B", task.microbatch, src)
            yield from self._wait(key, f"gradient mb{task.microbatch}", task)

    def _wait(self, key: MessageKey, what: str, task: Task):
        """Wait for a neighbour's data; waiting while it is on the wire is pp_comm, before that bubble."""
        clock = self.clock
        t0 = clock.now
        ev = clock.arrival(key)
        if ev is not None:
            yield ev
        t1 = clock.now
        wire = min(clock.wire_s(key), t1 - t0)
        mb, c = task.microbatch, task.chunk
        self.rec.add(self.s, "bubble", f"wait {what}", t0, t1 - wire, microbatch=mb, chunk=c)
        self.rec.add(self.s, "pp_comm", f"recv {what}", t1 - wire, t1, microbatch=mb, chunk=c)

    def _wait_gather(self, seconds: float, chunk: int):
        if seconds > 0:
            t0 = self.clock.now
            yield from self._hold(seconds)
            self.rec.add(self.s, "dp_comm", "wait param allgather", t0, self.clock.now, chunk=chunk)

    # ------------------------------------------------------------------ compute
    def _block(self, task: Task) -> tuple[Block, str]:
        ch = self.st.chunks[task.chunk]
        if task.phase == "F":
            block, label = ch.forward, f"F{task.microbatch}"
        elif task.phase == "B":
            block = ch.backward_input if (task.microbatch, task.chunk) in self.split else ch.backward
            label = f"B{task.microbatch}"
        else:
            block, label = ch.backward_weight, f"W{task.microbatch}"
        return block, (label + f".{task.chunk}" if self.program.vp > 1 else label)

    def _compute(self, task: Task):
        block, label = self._block(task)
        start = self.clock.now
        factor = self.noise.compute_factor() * self.slow
        end = self.rec.block(self.s, block, start, factor, task, label)
        yield from self._hold(end - start)
        summary = self.rec.summary(block)
        busy = summary.busy_s
        self.nominal_busy_s += busy
        self.busy_sq_s2 += busy * busy
        self.actual_busy_s += (end - start) - (summary.duration_s - busy)
        return start, end

    # ------------------------------------------------------------------ send
    def _send(self, task: Task):
        if task.phase == "F":
            yield from self._wait_gather(self.gathers.wait_after_s(task.chunk, self.clock.now), task.chunk)
            self.gathers.seen.add(task.chunk)
        dst = downstream(self.route, task, self.s)
        if dst is None:
            return
        here = (self.s, task.chunk)
        link = link_stage(self.route, here, dst)
        transfer_s = self.program.stages[link].p2p_s if link is not None else 0.0
        d = transfer_s * self.noise.network_factor()
        now = self.clock.now
        name = f"send {task.phase} mb{task.microbatch}"
        self.rec.add(
            self.s, "pp_comm", name, now, now + d, stream="pp", microbatch=task.microbatch, chunk=task.chunk
        )
        self.clock.post(message_key(task.phase, task.microbatch, here), d)

    def _reduce_grads(self, idx: int, task: Task, start: float, end: float) -> None:
        """With overlap, a chunk's gradient buckets are reduced as its last backward produces them."""
        buckets = self.st.chunks[task.chunk].grad_bucket_s
        if self.program.overlap_grad_reduce and self.last_grad.get(task.chunk) == idx and buckets:
            n = len(buckets)
            times = [start + (end - start) * (j + 1) / n for j in range(n)]
            self.dp.launch(buckets, times, "grad reduce", task.chunk)

    # ------------------------------------------------------------------ end of step
    def _finish(self):
        clock, rec, s = self.clock, self.rec, self.s
        if not self.program.overlap_grad_reduce:
            for c, ch in reversed(list(enumerate(self.st.chunks))):
                self.dp.launch(ch.grad_bucket_s, [clock.now] * len(ch.grad_bucket_s), "grad reduce", c)
        # this stage's gradient reduction, and the slowest DP replica
        t0 = clock.now
        std = self.noise.spec.compute_jitter * math.sqrt(self.busy_sq_s2)
        skew = self.noise.replica_skew_s(self.actual_busy_s, self.nominal_busy_s * self.slow, std)
        target = max(self.dp.free_s, clock.now) + skew
        if target > clock.now:
            yield from self._hold(target - clock.now)
            rec.add(s, "dp_comm", "grad reduce (exposed)", t0, clock.now)
        # all stages synchronize (global grad-norm), then the optimizer
        t0 = clock.now
        yield clock.barrier()
        rec.add(s, "bubble", "wait for other stages", t0, clock.now)
        t0 = clock.now
        yield from self._hold(self.st.optimizer_s)
        rec.add(s, "optimizer", "optimizer step", t0, clock.now)
        if self.program.zero in (1, 2) and not self.overlap_gathers:
            yield from self._gather_after_optimizer()
        self.end_s = clock.now

    def _gather_after_optimizer(self):
        clock = self.clock
        end = clock.now
        for c, ch in enumerate(self.st.chunks):
            if ch.param_gather_s:
                end = self.dp.launch(
                    ch.param_gather_s, [clock.now] * len(ch.param_gather_s), "param allgather", c
                )
        if end > clock.now:
            t0 = clock.now
            yield from self._hold(end - clock.now)
            self.rec.add(self.s, "dp_comm", "param allgather (exposed)", t0, clock.now)
