"""What the engine writes down as it replays: every span (for traces and plots), or only each
stage's seconds per category (everything a report needs, at a fraction of the cost)."""

from __future__ import annotations

from dataclasses import dataclass

from ..program import Block
from ..schedules import Task
from ..timeline import CATEGORIES, MAIN_STREAM, Span, Timeline

SCALED = ("compute", "recompute")  # the categories that compute jitter and stragglers stretch


@dataclass(frozen=True, slots=True)
class BlockSummary:
    """A block's seconds per category in order of first appearance, and its compute part."""

    by_category: tuple[tuple[str, float], ...]
    busy_s: float  # compute + recompute
    duration_s: float


def summarize(block: Block) -> BlockSummary:
    sums: dict[str, float] = {}
    for seg in block.segments:
        sums[seg.category] = sums.get(seg.category, 0.0) + seg.duration_s
    busy = block.seconds("compute") + block.seconds("recompute")
    return BlockSummary(tuple(sums.items()), busy, block.duration_s)


class _Summaries:
    def __init__(self) -> None:
        self._summaries: dict[int, BlockSummary] = {}

    def summary(self, block: Block) -> BlockSummary:
        found = self._summaries.get(id(block))
        if found is None:  # blocks live as long as the program: their ids stay unique
            found = self._summaries[id(block)] = summarize(block)
        return found


class SpanRecorder(_Summaries):
    """Every span, one per op of every block (`mfusim run --trace/--plot`)."""

    def __init__(self, num_stages: int) -> None:
        super().__init__()
        self.num_stages = num_stages
        self.spans: list[Span] = []

    def add(
        self, stage: int, category: str, name: str, start: float, end: float, stream: str = MAIN_STREAM, **kw
    ) -> None:
        if end > start:
            self.spans.append(Span(stage, stream, category, name, start, end, **kw))

    def block(self, stage: int, block: Block, start: float, factor: float, task: Task, vp: int) -> float:
        """Record the block's ops back to back from `start`; return when it ends."""
        label = f"{task.phase}{task.microbatch}" + (f".{task.chunk}" if vp > 1 else "")
        t = start
        for seg in block.segments:
            dur = seg.duration_s * (factor if seg.category in SCALED else 1.0)
            self.add(
                stage,
                seg.category,
                f"{label} {seg.name}",
                t,
                t + dur,
                microbatch=task.microbatch,
                chunk=task.chunk,
                flops=seg.flops,
                message_bytes=seg.message_bytes,
                phase=task.phase,
            )
            t += dur
        return t

    def wait(self, stage: int, task: Task, start: float, end: float, wire_s: float) -> None:
        """A wait for a neighbour's data: bubble until it was sent, pp_comm while on the wire."""
        what = f"{'activation' if task.phase == 'F' else 'gradient'} mb{task.microbatch}"
        mb, c = task.microbatch, task.chunk
        self.add(stage, "bubble", f"wait {what}", start, end - wire_s, microbatch=mb, chunk=c)
        self.add(stage, "pp_comm", f"recv {what}", end - wire_s, end, microbatch=mb, chunk=c)

    def send(self, stage: int, task: Task, start: float, end: float, message_bytes: float = 0.0) -> None:
        name = f"send {task.phase} mb{task.microbatch}"
        self.add(
            stage,
            "pp_comm",
            name,
            start,
            end,
            stream="pp",
            microbatch=task.microbatch,
            chunk=task.chunk,
            message_bytes=message_bytes,
        )

    def timeline(self, step_time_s: float) -> Timeline:
        return Timeline(tuple(self.spans), step_time_s, self.num_stages)


class SumRecorder(_Summaries):
    """Seconds per category on each stage's own (main) timeline; no spans."""

    def __init__(self, num_stages: int) -> None:
        super().__init__()
        self.num_stages = num_stages
        self.sums = [dict.fromkeys(CATEGORIES, 0.0) for _ in range(num_stages)]
        # unscaled blocks are only counted, and added up once at the end: (stage, block id) -> runs
        self.runs: dict[tuple[int, int], int] = {}
        self.slack_s: list[float] = []  # filled by quiet.py: 2 per stage (F, B inputs), or none

    def add(
        self, stage: int, category: str, name: str, start: float, end: float, stream: str = MAIN_STREAM, **kw
    ) -> None:
        if stream == MAIN_STREAM and end > start:
            self.sums[stage][category] += end - start

    def block(self, stage: int, block: Block, start: float, factor: float, task: Task, vp: int) -> float:
        summary = self.summary(block)
        if factor == 1.0:
            key = (stage, id(block))
            self.runs[key] = self.runs.get(key, 0) + 1
            return start + summary.duration_s
        sums = self.sums[stage]
        t = start
        for category, seconds in summary.by_category:
            end = t + (seconds * factor if category in SCALED else seconds)
            if end > t:
                sums[category] += end - t
            t = end
        return t

    def wait(self, stage: int, task: Task, start: float, end: float, wire_s: float) -> None:
        sums, sent = self.sums[stage], end - wire_s
        if sent > start:
            sums["bubble"] += sent - start
        if end > sent:
            sums["pp_comm"] += end - sent

    def send(self, stage: int, task: Task, start: float, end: float, message_bytes: float = 0.0) -> None:
        pass  # on the pp stream, beside the stage's own timeline

    def timeline(self, step_time_s: float) -> Timeline:
        for (stage, block_id), runs in self.runs.items():
            for category, seconds in self._summaries[block_id].by_category:
                self.sums[stage][category] += seconds * runs
        self.runs.clear()
        return Timeline(
            (), step_time_s, self.num_stages, by_stage_s=tuple(self.sums), slack_s=tuple(self.slack_s)
        )


Recorder = SpanRecorder | SumRecorder
