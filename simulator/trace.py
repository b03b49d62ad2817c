"""Chrome Trace Event / Perfetto export of one simulated step (issue 7).

Layout: one *process* per pipeline stage (the GPU that stands for that stage's TP/CP
group), one *thread* per stream of that stage — `compute` (the GPU's own exclusive
timeline, which tiles [0, step_time_s]), then `tp`, `dp`, `pp`, `data` (work that runs
beside it). Every `Span` becomes one complete event (`"ph": "X"`) with its name, its
category as `cat`, and `args` (FLOPs, message bytes, micro-batch, model chunk). Only the
compute thread carries the SPEC §4 categories as `cat` (they tile the step, so they sum to
the breakdown); overlapped work beside it is `cat = "<stream>-stream.<category>"`.

Format: "Trace Event Format", Google, 2016 (the JSON Object Format with `traceEvents`;
`ts`/`dur` in microseconds). Loads in ui.perfetto.dev and chrome://tracing. Seconds
become microseconds here, with `units.s_to_us`, and nowhere else.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .metrics import StepReport
from .timeline import MAIN_STREAM, Span, Timeline
from .units import s_to_us

# Thread order inside each stage's process: the GPU's own timeline first.
STREAM_ORDER = (MAIN_STREAM, "tp", "cp", "ep", "dp", "pp", "data")
STREAM_LABELS = {
    MAIN_STREAM: "compute (GPU timeline)",
    "tp": "tp comm",
    "cp": "cp comm",
    "ep": "ep comm",
    "dp": "dp comm",
    "pp": "pp send/recv",
    "data": "dataloader",
}


def pid_of(stage: int) -> int:
    """Process id of a pipeline stage (1-based: some trace tools treat pid 0 as the idle task)."""
    return stage + 1


def _stream_ids(timeline: Timeline) -> dict[str, int]:
    """Thread id of each stream: the fixed order first, then any other stream by name."""
    seen = {s.stream for s in timeline.spans}
    ordered = [s for s in STREAM_ORDER if s in seen or s == MAIN_STREAM]
    ordered += sorted(seen - set(ordered))
    return {name: i + 1 for i, name in enumerate(ordered)}


def event_category(span: Span) -> str:
    """`cat` of a span's event: its SPEC category on the GPU's own (compute) timeline;
    `<stream>-stream.<category>` for work beside it (e.g. `dp-stream.dp_comm`, overlapped).

    So summing `dur` by `cat` over a stage's events gives exactly its `breakdown_by_stage_s`,
    with nothing counted twice; the plain category is also in `args.category`.
    """
    if span.stream == MAIN_STREAM:
        return span.category
    return f"{span.stream}-stream.{span.category}"


def _span_event(span: Span, tid: int) -> dict[str, Any]:
    return {
        "name": span.name,
        "cat": event_category(span),
        "ph": "X",
        "ts": s_to_us(span.start_s),
        "dur": s_to_us(span.duration_s),
        "pid": pid_of(span.stage),
        "tid": tid,
        "args": {
            "stage": span.stage,
            "stream": span.stream,
            "category": span.category,
            "flops": span.flops,
            "message_bytes": span.message_bytes,
            "microbatch": span.microbatch,
            "chunk": span.chunk,
        },
    }


def _metadata_events(timeline: Timeline, report: StepReport, tids: dict[str, int]) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    streams_by_stage: dict[int, set[str]] = {st: {MAIN_STREAM} for st in range(timeline.num_stages)}
    for s in timeline.spans:
        streams_by_stage.setdefault(s.stage, {MAIN_STREAM}).add(s.stream)
    pp = report.parallel.pp
    for stage in sorted(streams_by_stage):
        label = f"stage {stage}" + (f" of {pp}" if pp > 1 else "")
        pid = pid_of(stage)
        events.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": label}})
        events.append(
            {"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0, "args": {"sort_index": stage}}
        )
        for stream in sorted(streams_by_stage[stage], key=lambda n: tids[n]):
            tid = tids[stream]
            name = STREAM_LABELS.get(stream, stream)
            events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}})
            events.append(
                {"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid, "args": {"sort_index": tid}}
            )
    return events


MAX_EVENTS = 400_000  # beyond this, per-op spans are merged per task so the UI stays usable


def coarsened_spans(spans: tuple[Span, ...] | list[Span]) -> list[Span]:
    """Adjacent spans of one task merged per category: `F3 qkv`, `F3 fc1`, ... -> `F3 compute`.

    Only back-to-back spans of the same stage, stream, category, micro-batch, chunk and task
    (first word of the name) merge; FLOPs and bytes add up, so every per-category sum is kept.
    """
    out: list[Span] = []
    ordered = sorted(spans, key=lambda s: (s.stage, s.stream, s.start_s, s.end_s))
    for s in ordered:
        task = s.name.split(" ", 1)[0]
        if out:
            last = out[-1]
            same = (
                last.stage == s.stage
                and last.stream == s.stream
                and last.category == s.category
                and last.microbatch == s.microbatch
                and last.chunk == s.chunk
                and last.name.split(" ", 1)[0] == task
                and abs(last.end_s - s.start_s) <= 1e-12 * max(1.0, s.start_s)
            )
            if same:
                out[-1] = Span(
                    last.stage,
                    last.stream,
                    last.category,
                    f"{task} {last.category}",
                    last.start_s,
                    s.end_s,
                    microbatch=last.microbatch,
                    chunk=last.chunk,
                    flops=last.flops + s.flops,
                    message_bytes=last.message_bytes + s.message_bytes,
                )
                continue
        out.append(s)
    return out


def chrome_trace_events(
    timeline: Timeline, report: StepReport, *, max_events: int | None = MAX_EVENTS
) -> list[dict[str, Any]]:
    """The trace's event list: metadata (process/thread names) then one "X" event per span
    (per task and category when the timeline has more than `max_events` spans)."""
    tids = _stream_ids(timeline)
    events = _metadata_events(timeline, report, tids)
    spans: list[Span] | tuple[Span, ...] = timeline.spans
    if max_events is not None and len(spans) > max_events:
        spans = coarsened_spans(spans)
    ordered = sorted(spans, key=lambda s: (s.stage, tids[s.stream], s.start_s, s.end_s))
    events.extend(_span_event(s, tids[s.stream]) for s in ordered)
    return events


def chrome_trace(
    timeline: Timeline, report: StepReport, *, max_events: int | None = MAX_EVENTS
) -> dict[str, Any]:
    """The whole JSON object: `traceEvents` plus a summary of the step under `otherData`."""
    return {
        "traceEvents": chrome_trace_events(timeline, report, max_events=max_events),
        "displayTimeUnit": "ms",
        "otherData": {
            "name": report.name,
            "num_gpus": report.num_gpus,
            "step_time_s": report.step_time_s,
            "mfu": report.mfu,
            "hfu": report.hfu,
            "tokens_per_s": report.tokens_per_s,
            "time_unit": "ts and dur are microseconds",
        },
    }


def write_chrome_trace(
    timeline: Timeline, report: StepReport, path: str | Path, *, max_events: int | None = MAX_EVENTS
) -> Path:
    """Write the trace of one simulated step to `path` (open it in ui.perfetto.dev).

    Every span is an event unless there are more than `max_events` (None: no limit); then
    per-op spans are merged per task and category, which keeps every sum.
    """
    out = Path(path)
    with open(out, "w", encoding="utf-8") as f:
        json.dump(chrome_trace(timeline, report, max_events=max_events), f, separators=(",", ":"))
        f.write("\n")
    return out


def category_totals_s(events: list[dict[str, Any]], stream: str = MAIN_STREAM) -> dict[int, dict[str, float]]:
    """Seconds per category per pipeline stage on one stream, read back from trace events.

    The inverse check of the export: on the `compute` stream it equals the report's
    `breakdown_by_stage_s`.
    """
    out: dict[int, dict[str, float]] = {}
    for e in events:
        if e.get("ph") != "X" or e.get("args", {}).get("stream") != stream:
            continue
        per = out.setdefault(int(e["args"]["stage"]), {})
        cat = e["args"]["category"]
        per[cat] = per.get(cat, 0.0) + float(e["dur"]) / s_to_us(1.0)
    return out
