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

from ..schedules import is_split_backward
from .clock import LocalClock, LocalMailbox, Pending
from .recorder import SumRecorder
from .stage import StageProcess, _kind, last_grad_tasks

_PHASE_INDEX = {"F": 0, "B": 1}  # the phases that send (a W sends nothing)

# per (phase, chunk, split backward): seconds, receive base, send base (−1: none), transfer s,
# kind number (the order this stage first ran it)
_Quiet = tuple[float, int, int, float, int]


class QuietStage(StageProcess):
    """A stage of a quiet step on its own clock (see the module docstring)."""

    def run(self) -> Iterator[Any]:  # noqa: C901 — one loop on purpose: it is the engine's hot path
        clock, rec, s = self.clock, self.rec, self.s
        assert isinstance(clock, LocalClock) and isinstance(rec, SumRecorder)
        if self.overlap_gathers:
            self.gathers.launch(
                self.dp,
                [ch.param_gather_s for ch in self.st.chunks],
                [ch.param_gather_bytes for ch in self.st.chunks],
            )
        tasks = self.tasks
        split = is_split_backward(tasks)
        extras = self._extras(split)
        kinds: dict[tuple[str, int, bool], _Quiet] = {}
        blocks: list[int] = []  # id of each kind's block, in the order first run
        counts: list[int] = []
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
            mb = task.microbatch
            key = (task.phase, task.chunk, (mb, task.chunk) in split if split else False)
            kind = kinds.get(key)
            if kind is None:
                kind = kinds[key] = self._quiet_kind(task, key[2], len(blocks), blocks)
                counts.append(0)
            seconds, receive, send, transfer_s, number = kind
            # --- receive (StageProcess._receive, LocalClock.arrival, SumRecorder.wait)
            if receive >= 0:
                msg = mb * keys_per_microbatch + receive
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
            if i == next_extra and task.phase == "F":
                clock.now = now
                yield from self._gather_wait(self.gathers.wait_before_s(task.chunk, now), task.chunk)
                now = clock.now
            # --- compute (SumRecorder.block with factor 1, LocalClock.hold)
            start = now
            end = start + seconds
            now += end - start
            counts[number] += 1
            if i == next_extra and task.phase == "F":
                clock.now = now
                yield from self._gather_wait(self.gathers.wait_after_s(task.chunk, now), task.chunk)
                self.gathers.seen.add(task.chunk)
                now = clock.now
            # --- send (LocalClock.post)
            if send >= 0:
                msg = mb * keys_per_microbatch + send
                at = now + transfer_s
                landed[msg] = (at, transfer_s)
                if parked:
                    waiter = parked.pop(msg, None)
                    if waiter is not None:
                        if at > waiter.now:
                            waiter.now = at
                        runnable.append(waiter.stage)
            if i == next_extra:
                if task.phase != "F":
                    self._reduce_grads(task.chunk, start, end)
                extras.pop(0)
                next_extra = extras[0] if extras else -1
        clock.now = now
        sums["bubble"], sums["pp_comm"] = bubble, pp_comm
        if not rec.slack_s:
            rec.slack_s = [0.0] * (2 * self.program.pp)
        rec.slack_s[2 * s], rec.slack_s[2 * s + 1] = slack
        for block_id, runs in zip(blocks, counts, strict=True):
            rec.runs[(s, block_id)] = rec.runs.get((s, block_id), 0) + runs
        yield from self._finish()

    def _extras(self, split: set[tuple[int, int]]) -> list[int]:
        """Indices of the tasks that need more than receive-compute-send: each chunk's first
        forward when ZeRO gathers overlap it, each chunk's last gradient task when its buckets
        are reduced as they are produced."""
        out: set[int] = set()
        if self.overlap_gathers and any(ch.param_gather_s for ch in self.st.chunks):
            first: dict[int, int] = {}
            for i, t in enumerate(self.tasks):
                if t.phase == "F":
                    first.setdefault(t.chunk, i)
            out.update(i for c, i in first.items() if self.st.chunks[c].param_gather_s)
        if self.program.overlap_grad_reduce:
            last = last_grad_tasks(self.tasks, split)
            out.update(i for c, i in last.items() if self.st.chunks[c].grad_bucket_s)
        return sorted(out)

    def _quiet_kind(self, task: Any, split: bool, number: int, blocks: list[int]) -> _Quiet:
        k = _kind(self.s, task, split, self.route, self.rec, self.program)
        chunks = len(self.st.chunks)

        def base(place: tuple[int, int]) -> int:
            return (_PHASE_INDEX[task.phase] * self.program.pp + place[0]) * chunks + place[1]

        blocks.append(id(k.block))
        receive = base(k.src) if k.src is not None else -1
        send = base((self.s, task.chunk)) if k.dst is not None else -1
        return (k.summary.duration_s, receive, send, k.transfer_s, number)
