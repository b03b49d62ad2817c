"""The quiet stage: StageProcess's step as one tight loop, when nothing in it is random.

Most replays are quiet — no jitter, no straggler, no dataloader, only each stage's seconds per
category recorded (every `mfusim run` without --trace/--plot, every probe of steady.py, every
engine check of a sweep). Then a task is: wait for its input (if not yet there), run its block,
post its output. `QuietStage.run` does exactly that, with the same arithmetic in the same order
as `StageProcess.run` under a `LocalClock` and a `SumRecorder` (tests/test_engine.py compares
the two on every shipped scenario and schedule), but with no generator and no plan object per
task, integer message keys, and a yield only when a stage needs a message not yet sent. The
rare per-task extras (the overlapped ZeRO gathers before a chunk's first forward, a chunk's
gradient reduction after its last backward) run through StageProcess's own code, and so does
the end of the step (`_finish`). DualPipe's overlapped F&B pairs are not handled here: replay.py
gives those steps to StageProcess.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..schedules import Task, is_split_backward
from .clock import LocalClock, LocalMailbox, Pending, deliver
from .recorder import SumRecorder
from .stage import StageProcess, _kind

_PHASE_INDEX = {"F": 0, "B": 1}  # the phases that send (a W sends nothing)

# per (phase, chunk): seconds, receive base, send base (−1: none), transfer s, kind number
_Quiet = tuple[float, int, int, float, int]


class QuietStage(StageProcess):
    """A stage of a quiet step on its own clock (see the module docstring)."""

    def run(self) -> Iterator[Any]:  # noqa: C901 — one loop on purpose: it is the engine's hot path
        clock, rec, s = self.clock, self.rec, self.s
        assert isinstance(clock, LocalClock) and isinstance(rec, SumRecorder)
        tasks = self.tasks
        split = is_split_backward(tasks)
        table, blocks = self._kind_table(split)
        if not table:  # some backwards split, some not: the general loop
            yield from super().run()
            return
        if self.overlap_gathers:
            self.gathers.launch(
                self.dp,
                [ch.param_gather_s for ch in self.st.chunks],
                [ch.param_gather_bytes for ch in self.st.chunks],
            )
        extras = self._extras(split)
        counts = [0] * len(blocks)
        box: LocalMailbox = clock.mailbox
        landed, parked, runnable = box.landed, box.parked, box.runnable
        sums = rec.sums[s]
        bubble, pp_comm = sums["bubble"], sums["pp_comm"]
        slack = [0.0, 0.0]  # how long forward / backward inputs had waited for this stage
        keys_per_microbatch = 2 * self.program.pp * len(self.st.chunks)
        backward_keys = self.program.pp * len(self.st.chunks)  # receive bases of B inputs start here
        next_extra = extras[0] if extras else -1
        now = clock.now
        for i, task in enumerate(tasks):
            seconds, receive, send, transfer_s, number = table[task.phase][task.chunk]
            counts[number] += 1
            # --- receive (StageProcess._receive, LocalClock.arrival, SumRecorder.wait)
            if receive >= 0:
                msg = task.microbatch * keys_per_microbatch + receive
                t0 = now
                got = landed.get(msg)
                if got is None:
                    clock.now = now
                    yield Pending(msg)
                    now = clock.now
                    got = landed[msg]
                elif got[0] > now:
                    now = got[0]
                else:
                    slack[receive >= backward_keys] += now - got[0]
                if now > t0:
                    sent = now - min(got[1], now - t0)
                    if sent > t0:
                        bubble += sent - t0
                    if now > sent:
                        pp_comm += now - sent
            if i == next_extra:
                clock.now = now
                msg = task.microbatch * keys_per_microbatch + send if send >= 0 else -1
                yield from self._extra(task, seconds, msg, transfer_s)
                now = clock.now
                extras.pop(0)
                next_extra = extras[0] if extras else -1
                continue
            # --- compute (SumRecorder.block with factor 1, LocalClock.hold)
            start = now
            end = start + seconds
            now += end - start
            # --- send (LocalClock.post)
            if send >= 0:
                msg = task.microbatch * keys_per_microbatch + send
                at = now + transfer_s
                landed[msg] = (at, transfer_s)
                if parked:
                    waiter = parked.pop(msg, None)
                    if waiter is not None:
                        if at > waiter.now:
                            waiter.now = at
                        runnable.append(waiter.stage)
        clock.now = now
        sums["bubble"], sums["pp_comm"] = bubble, pp_comm
        if not rec.slack_s:
            rec.slack_s = [0.0] * (2 * self.program.pp)
        rec.slack_s[2 * s], rec.slack_s[2 * s + 1] = slack
        self._count_runs(table, blocks, counts)
        yield from self._finish()

    def _extra(self, task: Task, seconds: float, msg: int, transfer_s: float) -> Iterator[Any]:
        """Compute and send of a task with more to it (`_extras`), in StageProcess.run's order:
        the overlapped gathers around a chunk's first forward, or the gradient buckets after a
        chunk's last backward. `msg` < 0: it sends nothing."""
        clock = self.clock
        forward = task.phase == "F"
        if forward:
            yield from self._gather_wait(self.gathers.wait_before_s(task.chunk, clock.now), task.chunk)
        start = clock.now
        end = start + seconds
        clock.now += end - start
        if forward:
            yield from self._gather_wait(self.gathers.wait_after_s(task.chunk, clock.now), task.chunk)
            self.gathers.seen.add(task.chunk)
        if not forward and self.program.grad_reduce_waits:
            yield from self._reduce_and_wait(task.chunk, start, end)  # before the send
        if msg >= 0:
            deliver(clock.mailbox, msg, clock.now + transfer_s, transfer_s)
        if not forward and not self.program.grad_reduce_waits:
            self._reduce_grads(task.chunk, start, end)

    def _kind_table(self, split: set[tuple[int, int]]) -> tuple[dict[str, list[_Quiet]], list[int]]:
        """Per phase and chunk, what its tasks do, and each kind's block id (by kind number);
        ({}, []) when some backwards are split and others not (not one kind per phase and chunk)."""
        if split and not all((t.microbatch, t.chunk) in split for t in self.tasks if t.phase == "B"):
            return {}, []
        table: dict[str, list[_Quiet]] = {}
        blocks: list[int] = []
        for phase in ("F", "B", "W") if split else ("F", "B"):
            table[phase] = [
                self._quiet_kind(Task(phase, 0, c), bool(split), blocks) for c in range(len(self.st.chunks))
            ]
        return table, blocks

    def _count_runs(self, table: dict[str, list[_Quiet]], blocks: list[int], counts: list[int]) -> None:
        """Hand the blocks' run counts to the recorder in the order this stage first ran them (the
        order SumRecorder.block would have met them: its sums add up in that order)."""
        rec, s = self.rec, self.s
        assert isinstance(rec, SumRecorder)
        used = sum(1 for c in counts if c)
        seen: list[int] = []
        for t in self.tasks:
            number = table[t.phase][t.chunk][4]
            if number not in seen:
                seen.append(number)
                if len(seen) == used:
                    break
        for number in seen:
            key = (s, blocks[number])
            rec.runs[key] = rec.runs.get(key, 0) + counts[number]

    def _extras(self, split: set[tuple[int, int]]) -> list[int]:
        """Indices of the tasks that need more than receive-compute-send: each chunk's first
        forward when ZeRO gathers overlap it, each chunk's last gradient task (its last W, or
        its last whole backward) when its buckets are reduced as they are produced."""
        tasks, chunks = self.tasks, self.st.chunks
        out: set[int] = set()
        if self.overlap_gathers and any(ch.param_gather_s for ch in chunks):
            first: dict[int, int] = {}
            for i, t in enumerate(tasks):
                if t.phase == "F" and t.chunk not in first:
                    first[t.chunk] = i
                    if len(first) == len(chunks):
                        break
            out.update(i for c, i in first.items() if chunks[c].param_gather_s)
        if self.program.overlap_grad_reduce:
            last: dict[int, int] = {}
            for i in range(len(tasks) - 1, -1, -1):
                t = tasks[i]
                whole = t.phase == "W" or (t.phase == "B" and (t.microbatch, t.chunk) not in split)
                if whole and t.chunk not in last:
                    last[t.chunk] = i
                    if len(last) == len(chunks):
                        break
            out.update(i for c, i in last.items() if chunks[c].grad_bucket_s)
        return sorted(out)

    def _quiet_kind(self, task: Task, split: bool, blocks: list[int]) -> _Quiet:
        k = _kind(self.s, task, split, self.route, self.rec, self.program)
        chunks = len(self.st.chunks)

        def base(place: tuple[int, int]) -> int:
            return (_PHASE_INDEX[task.phase] * self.program.pp + place[0]) * chunks + place[1]

        number = len(blocks)
        blocks.append(id(k.block))
        receive = base(k.src) if k.src is not None else -1
        send = base((self.s, task.chunk)) if k.dst is not None else -1
        return (k.summary.duration_s, receive, send, k.transfer_s, number)
