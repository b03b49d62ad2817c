"""Chrome Trace Event / Perfetto export of one simulated step (issue 7).

Layout: one *process* per pipeline stage (the GPU that stands for that stage's TP/CP
group), one *thread* per stream of that stage — `compute` (the GPU's own exclusive
timeline, which tiles [0, step_time_s]), then `tp`, `dp`, `pp`, `data` (work that runs
beside it). Every `Span` becomes one complete event (`"ph": "X"`) with its name, its
category as `cat`, and `args` (phase, micro-batch, model chunk, FLOPs, message bytes).
The name is the operation without its micro-batch (`F qkv`, `B fc1 dgrad`, `send F`), so
per-op statistics in a trace viewer group all micro-batches; the micro-batch is in `args`.
`cat` is always one of the breakdown categories (docs/reference.md); only the compute
thread tiles the step, so summing `dur` by `cat` over a stage's compute thread gives its
`breakdown_by_stage_s`, and work on the other threads is marked `args.overlapped = true`.
The report's wait for the slowest GPU (`gpu_spread`, Hopper and Blackwell), which the engine
does not replay, closes every compute thread as one span (simulate.py), so the threads end at
`step_time_s` as the report does. With a jittery dataloader whose steps cycle through
different lengths the step is the cycle's mean and the trace shows the cycle's first step.

Timestamps are whole nanoseconds: each span's start and end are rounded to integer ns and
`dur = end - start`, written as microseconds with three decimals. Trace viewers convert
`ts` and `dur` to integer ns separately (Perfetto: `llround(us * 1000)`); with raw float
microseconds back-to-back spans then overlapped by 1 ns and the later one was dropped
(101 of 947 spans of teaching-pp4, issue 17). Importers that truncate instead of rounding
(older Perfetto releases: `int64(us * 1000)`) can still see a 1 ns overlap where a decimal
like 1792.686 parses to a double just below it (6 of 947 spans of teaching-pp4). Spans of
one thread that would still overlap
partially (concurrent transfers on a comm stream) go to an extra lane (`tp comm #2`), so
every thread is properly nested.

Format: "Trace Event Format", Google, 2016 (the JSON Object Format with `traceEvents`;
`ts`/`dur` in microseconds). Loads in ui.perfetto.dev and chrome://tracing. A path ending
in `.gz` is written gzip-compressed (Perfetto opens it as is). Seconds become nanoseconds
here, with `units.s_to_ns`, and nowhere else.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path
from typing import Any

from .metrics import StepReport
from .timeline import MAIN_STREAM, Span, Timeline
from .units import s_to_ns, us_to_s

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


_TASK_LABEL = re.compile(r"^([FBW])\d+(?:\.\d+)?(?= |$)")  # "F3", "B12.1": phase, micro-batch, chunk
_MICROBATCH_WORD = re.compile(r" mb\d+\b")  # "send F mb3", "wait activation mb3"


def op_name(span_name: str) -> str:
    """A span's name without its micro-batch and chunk: `F3.1 qkv` -> `F qkv`,
    `send F mb3` -> `send F` (they are in the event's `args`)."""
    return _MICROBATCH_WORD.sub("", _TASK_LABEL.sub(r"\1", span_name))


def _phase(span_name: str) -> str:
    match = _TASK_LABEL.match(span_name)
    return match.group(1) if match else ""


def event_category(span: Span) -> str:
    """`cat` of a span's event: its breakdown category, whatever thread it is on. Work beside
    the GPU's own timeline (overlapped communication, the dataloader) is told apart by its
    thread and `args.overlapped`, never by a second category name."""
    return span.category


_NsSpan = tuple[int, int, Span]  # (start ns, end ns, span)


def _lanes(spans: list[_NsSpan]) -> list[list[_NsSpan]]:
    """Split one thread's spans into lanes with no overlap at all (first lane that is free).

    The compute stream tiles the step, so it always stays one lane; a comm stream whose
    transfers run concurrently gets as many lanes as it has transfers in flight at once."""
    lanes: list[list[_NsSpan]] = []
    lane_end: list[int] = []
    for item in sorted(spans, key=lambda x: (x[0], x[1])):
        for i, t in enumerate(lane_end):
            if t <= item[0]:
                lanes[i].append(item)
                lane_end[i] = item[1]
                break
        else:
            lanes.append([item])
            lane_end.append(item[1])
    return lanes


def _threads(spans: list[Span] | tuple[Span, ...]) -> dict[tuple[int, str], list[list[_NsSpan]]]:
    """Every span with its edges in whole ns, grouped by (stage, stream) and split in lanes."""
    by_thread: dict[tuple[int, str], list[_NsSpan]] = {}
    for span in spans:
        a = s_to_ns(span.start_s)
        b = max(a, s_to_ns(span.end_s))
        by_thread.setdefault((span.stage, span.stream), []).append((a, b, span))
    return {key: _lanes(items) for key, items in by_thread.items()}


def _thread_ids(threads: dict[tuple[int, str], list[list[_NsSpan]]]) -> dict[tuple[str, int], int]:
    """Thread id of each (stream, lane), the same in every stage's process: the GPU's own
    timeline first, then the fixed stream order, then any other stream by name."""
    lanes_of: dict[str, int] = {MAIN_STREAM: 1}
    for (_, stream), lanes in threads.items():
        lanes_of[stream] = max(lanes_of.get(stream, 1), len(lanes))
    ordered = [st for st in STREAM_ORDER if st in lanes_of]
    ordered += sorted(set(lanes_of) - set(ordered))
    tids: dict[tuple[str, int], int] = {}
    for stream in ordered:
        for lane in range(lanes_of[stream]):
            tids[(stream, lane)] = len(tids) + 1
    return tids


def _us(ns: int) -> float:
    """Whole nanoseconds as microseconds: at most three decimals when written as JSON."""
    return ns / 1000


def _span_event(start_ns: int, end_ns: int, span: Span, tid: int) -> dict[str, Any]:
    return {
        "name": op_name(span.name),
        "cat": event_category(span),
        "ph": "X",
        "ts": _us(start_ns),
        "dur": _us(end_ns - start_ns),
        "pid": pid_of(span.stage),
        "tid": tid,
        "args": {
            "stage": span.stage,
            "stream": span.stream,
            "category": span.category,
            "overlapped": span.stream != MAIN_STREAM,
            "phase": _phase(span.name),
            "microbatch": span.microbatch,
            "chunk": span.chunk,
            "flops": span.flops,
            "message_bytes": span.message_bytes,
        },
    }


def _metadata_events(
    num_stages: int,
    report: StepReport,
    threads: dict[tuple[int, str], list[list[_NsSpan]]],
    tids: dict[tuple[str, int], int],
) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    lanes_by_stage: dict[int, dict[str, int]] = {st: {MAIN_STREAM: 1} for st in range(num_stages)}
    for (stage, stream), lanes in threads.items():
        lanes_by_stage.setdefault(stage, {MAIN_STREAM: 1})[stream] = len(lanes)
    pp = report.parallel.pp
    for stage in sorted(lanes_by_stage):
        label = f"stage {stage}" + (f" of {pp}" if pp > 1 else "")
        pid = pid_of(stage)
        events.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": label}})
        events.append(
            {"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0, "args": {"sort_index": stage}}
        )
        present = [(st, lane) for st, n in lanes_by_stage[stage].items() for lane in range(n)]
        for stream, lane in sorted(present, key=lambda k: tids[k]):
            tid = tids[(stream, lane)]
            name = STREAM_LABELS.get(stream, stream) + (f" #{lane + 1}" if lane else "")
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
                    phase=last.phase,
                )
                continue
        out.append(s)
    return out


def chrome_trace_events(
    timeline: Timeline, report: StepReport, *, max_events: int | None = MAX_EVENTS
) -> list[dict[str, Any]]:
    """The trace's event list: metadata (process/thread names) then one "X" event per span
    (per task and category when the timeline has more than `max_events` spans)."""
    spans: list[Span] | tuple[Span, ...] = timeline.spans
    if max_events is not None and len(spans) > max_events:
        spans = coarsened_spans(spans)
    threads = _threads(spans)
    tids = _thread_ids(threads)
    events = _metadata_events(timeline.num_stages, report, threads, tids)
    for (_stage, stream), lanes in sorted(threads.items(), key=lambda kv: (kv[0][0], tids[(kv[0][1], 0)])):
        for lane, items in enumerate(lanes):
            events.extend(_span_event(a, b, span, tids[(stream, lane)]) for a, b, span in items)
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
            "time_unit": "ts and dur are microseconds, whole nanoseconds (3 decimals)",
        },
    }


def write_chrome_trace(
    timeline: Timeline, report: StepReport, path: str | Path, *, max_events: int | None = MAX_EVENTS
) -> Path:
    """Write the trace of one simulated step to `path` (open it in ui.perfetto.dev);
    gzip-compressed when the name ends in `.gz` (`step.json.gz`, any case: `STEP.JSON.GZ` was
    written as plain JSON under a gzip name).

    Every span is an event unless there are more than `max_events` (None: no limit); then
    per-op spans are merged per task and category, which keeps every sum.
    """
    out = Path(path)
    text = json.dumps(chrome_trace(timeline, report, max_events=max_events), separators=(",", ":")) + "\n"
    if out.suffix.lower() == ".gz":
        out.write_bytes(gzip.compress(text.encode("utf-8"), mtime=0))
    else:
        out.write_text(text, encoding="utf-8")
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
        per[cat] = per.get(cat, 0.0) + us_to_s(float(e["dur"]))
    return out
