"""What the engine records: spans on each pipeline stage's timelines.

The `compute` stream of a stage is that GPU's own timeline: its spans are exclusive and,
once the step is done, tile [0, step_time_s] exactly (idle time is recorded as explicit
`bubble` / `dataloader` / `*_comm` spans), so attribution is a sum. Other streams (`dp`,
`pp`, `tp`, `data`) show work that runs beside it (overlapped communication, transfers, the
dataloader) for traces and plots; they are not summed into the breakdown.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

CATEGORIES = (
    "compute",
    "recompute",
    "tp_comm",
    "cp_comm",
    "ep_comm",
    "pp_comm",
    "dp_comm",
    "bubble",
    "dataloader",
    "optimizer",
    "host_bound",
    # the expected wait for the slowest GPU (simulator/gpu_spread.py): added to the report, not by
    # the engine; a detailed step shows it as one span closing each stage (`with_stage_tail`)
    "gpu_spread",
    "other",
)
MAIN_STREAM = "compute"


@dataclass(frozen=True, slots=True)
class Span:
    stage: int
    stream: str
    category: str
    name: str
    start_s: float
    end_s: float
    microbatch: int = -1
    chunk: int = -1
    flops: float = 0.0
    message_bytes: float = 0.0
    phase: str = ""  # the schedule task's phase: "F" forward, "B" backward, "W" weight grad; "" none

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


@dataclass(frozen=True, slots=True)
class Timeline:
    spans: tuple[Span, ...]
    step_time_s: float
    num_stages: int
    by_stage_s: tuple[dict[str, float], ...] = ()  # kept instead of spans when none were recorded
    # per stage, forward then backward inputs: seconds each input had landed before its task asked
    # for it (quiet replays only; engine/steady.py's periodicity check reads it)
    slack_s: tuple[float, ...] = ()

    def breakdown_by_stage_s(self) -> list[dict[str, float]]:
        """Seconds per category on each stage's own timeline (sums to step_time_s)."""
        if self.by_stage_s:
            return [dict(d) for d in self.by_stage_s]
        out = [dict.fromkeys(CATEGORIES, 0.0) for _ in range(self.num_stages)]
        for s in self.spans:
            if s.stream == MAIN_STREAM:
                out[s.stage][s.category] += s.duration_s
        return out


def with_stage_tail(timeline: Timeline, category: str, end_s: float, name: str) -> Timeline:
    """`timeline` lengthened to a step of `end_s`, the time after its own end charged to
    `category` on every stage's own timeline: a wait the report adds after the replay (the
    slowest GPU's, `metrics.step_report`), drawn so that traces and plots tile the reported step
    as the JSON breakdown does. Spans, if any, get one `name` span per stage over that time."""
    start = timeline.step_time_s
    if end_s <= start:
        return timeline
    spans = timeline.spans
    if spans:
        # from where each stage's recorded timeline ends: the step's end, except for the one
        # recorded step of a longer dataloader cycle whose mean the step is (engine/replay.py)
        ends = dict.fromkeys(range(timeline.num_stages), start)
        for s in spans:
            if s.stream == MAIN_STREAM:
                ends[s.stage] = max(ends[s.stage], s.end_s)
        spans = spans + tuple(
            Span(stage, MAIN_STREAM, category, name, e, e + end_s - start) for stage, e in ends.items()
        )
    by_stage = tuple({**d, category: d.get(category, 0.0) + end_s - start} for d in timeline.by_stage_s)
    return replace(timeline, spans=spans, step_time_s=end_s, by_stage_s=by_stage)


def repeat_runs_by_stage(
    step_time_s: float,
    by_stage: tuple[dict[str, float], ...],
    optimizer_s: tuple[float, ...],
    runs: int,
) -> tuple[float, tuple[dict[str, float], ...]]:
    """A step of `runs` identical pipeline runs from the seconds of one run that ends with the
    optimizer (torch.distributed.pipelining's gradient accumulation: one `schedule.step()` per
    local batch, then one optimizer step; `[parallel] local_batch`).

    A run ends when its last stage has drained and reduced its gradients (the pipeline-wide sync
    before the optimizer): the next run's first forward on stage 0 waits for stage 0's own last
    backward, and every later stage for stage 0's output, so runs do not overlap. Each stage's
    tail after that sync -- its optimizer and the wait for the slowest stage's optimizer -- comes
    once per step; everything before it `runs` times:
        step = runs·(T − O) + O,  O = the largest optimizer time."""
    if runs <= 1:
        return step_time_s, by_stage
    top = max(optimizer_s, default=0.0)
    step = runs * (step_time_s - top) + top
    out = []
    for cats, opt in zip(by_stage, optimizer_s, strict=True):
        tail = {"optimizer": min(opt, cats.get("optimizer", 0.0))}
        tail["bubble"] = min(top - tail["optimizer"], cats.get("bubble", 0.0))
        new = {k: runs * v - (runs - 1) * tail.get(k, 0.0) for k, v in cats.items()}
        new["bubble"] = new.get("bubble", 0.0) + step - sum(new.values())  # tiles [0, step]
        out.append(new)
    return step, tuple(out)


def repeat_runs(timeline: Timeline, optimizer_s: tuple[float, ...], runs: int, microbatches: int) -> Timeline:
    """`repeat_runs_by_stage` for a replayed timeline: its spans before the pipeline-wide sync
    repeated `runs` times one after another (micro-batch numbers shifted by `microbatches` per
    run), the tail after the sync (optimizer, wait for step end) kept once, at the end."""
    if runs <= 1:
        return timeline
    step, by_stage = repeat_runs_by_stage(
        timeline.step_time_s, tuple(timeline.breakdown_by_stage_s()), optimizer_s, runs
    )
    if not timeline.spans:
        return Timeline((), step, timeline.num_stages, by_stage_s=by_stage, slack_s=timeline.slack_s)
    sync = timeline.step_time_s - max(optimizer_s, default=0.0)
    spans = []
    for r in range(runs):
        last = r == runs - 1
        shift = r * sync
        for s in timeline.spans:
            if not last and s.start_s >= sync:
                continue
            mb = s.microbatch + r * microbatches if s.microbatch >= 0 else s.microbatch
            end = s.end_s if last else min(s.end_s, sync)
            spans.append(replace(s, start_s=s.start_s + shift, end_s=end + shift, microbatch=mb))
    return Timeline(tuple(spans), step, timeline.num_stages, slack_s=timeline.slack_s)
