"""Chrome/Perfetto trace export: valid JSON, microseconds, sums equal to the report."""

from __future__ import annotations

import json
import math

import pytest
from conftest import trace_sums_by_stage

from simulator.metrics import StepReport
from simulator.specs import ParallelConfig
from simulator.timeline import CATEGORIES, Span, Timeline
from simulator.trace import category_totals_s, chrome_trace_events, write_chrome_trace


def gpipe_step(
    p: int = 4, m: int = 8, fwd_s: float = 1e-3, opt_s: float = 2e-4
) -> tuple[Timeline, StepReport]:
    """A hand-made GPipe step: all forwards, then all backwards (2x), idle time as bubble spans."""
    bwd_s = 2 * fwd_s
    spans: list[Span] = []
    t_bwd0 = (p - 1 + m) * fwd_s
    t_opt = t_bwd0 + (p - 1 + m) * bwd_s
    step = t_opt + opt_s
    for s in range(p):
        work = []
        for i in range(m):
            a = (s + i) * fwd_s
            work.append(
                Span(s, "compute", "compute", f"F{i}", a, a + fwd_s, microbatch=i, flops=1e12, phase="F")
            )
        for j in range(m):
            a = t_bwd0 + (p - 1 - s + j) * bwd_s
            work.append(
                Span(
                    s,
                    "compute",
                    "compute",
                    f"B{m - 1 - j}",
                    a,
                    a + bwd_s,
                    microbatch=m - 1 - j,
                    flops=2e12,
                    phase="B",
                )
            )
        work.append(Span(s, "compute", "optimizer", "optimizer", t_opt, step))
        t = 0.0
        for w in sorted(work, key=lambda x: x.start_s):
            if w.start_s > t + 1e-15:
                spans.append(Span(s, "compute", "bubble", "bubble", t, w.start_s))
            spans.append(w)
            t = w.end_s
        if s < p - 1:
            for i in range(m):
                a = (s + i + 1) * fwd_s
                spans.append(
                    Span(
                        s,
                        "pp",
                        "pp_comm",
                        f"send act {i}",
                        a - 0.1 * fwd_s,
                        a,
                        microbatch=i,
                        message_bytes=2**20,
                    )
                )
        spans.append(
            Span(s, "dp", "dp_comm", "grad reduce-scatter", t_opt - 0.5 * bwd_s, t_opt, message_bytes=3e8)
        )
    tl = Timeline(spans=tuple(spans), step_time_s=step, num_stages=p)
    par = ParallelConfig(pp=p, dp=1, micro_batch=1, global_batch=m, schedule="gpipe")
    report = StepReport(
        name="hand-made gpipe",
        num_gpus=p,
        parallel=par,
        step_time_s=step,
        tokens_per_step=m * 1024,
        model_flops_per_step=3e12 * m * p,
        hardware_flops_per_step=3e12 * m * p,
        six_psi_flops_per_step=2.9e12 * m * p,
        peak_flop_per_s=312e12,
        breakdown_by_stage_s=tuple(tl.breakdown_by_stage_s()),
    )
    return tl, report


def test_handmade_step_tiles_the_step() -> None:
    tl, report = gpipe_step()
    for stage in report.breakdown_by_stage_s:
        assert math.isclose(sum(stage.values()), report.step_time_s, rel_tol=1e-9)
    # GPipe closed form: bubble = (p-1)(f+b) per stage on average
    assert report.breakdown_s["bubble"] == pytest.approx(3 * 3e-3, rel=1e-9)


def test_trace_is_json_with_microseconds(tmp_path) -> None:
    tl, report = gpipe_step()
    path = write_chrome_trace(tl, report, tmp_path / "step.json")
    data = json.loads(path.read_text())
    events = data["traceEvents"]
    xs = [e for e in events if e["ph"] == "X"]
    assert len(xs) == len(tl.spans)
    for e in xs:
        assert {"name", "cat", "ts", "dur", "pid", "tid", "args"} <= set(e)
        assert e["cat"] in CATEGORIES and e["cat"] == e["args"]["category"]  # no "pp-stream.pp_comm"
        assert e["args"]["overlapped"] == (e["args"]["stream"] != "compute")
        assert e["dur"] >= 0
        assert {"flops", "message_bytes", "microbatch", "chunk", "phase"} <= set(e["args"])
    # microseconds: the last event ends at step_time_s * 1e6
    end_us = max(e["ts"] + e["dur"] for e in xs)
    assert end_us == pytest.approx(report.step_time_s * 1e6, rel=1e-9)
    first_fwd = next(
        e for e in xs if e["name"] == "F" and e["args"]["microbatch"] == 0 and e["args"]["stage"] == 1
    )
    assert first_fwd["ts"] == pytest.approx(1000.0)  # stage 1 starts after one 1 ms forward
    assert first_fwd["dur"] == pytest.approx(1000.0)


def test_trace_metadata_names_processes_and_threads() -> None:
    tl, report = gpipe_step(p=3)
    events = chrome_trace_events(tl, report)
    procs = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert sorted(procs) == [1, 2, 3]  # pid = stage + 1
    assert all("stage" in n for n in procs.values())
    threads = {(e["pid"], e["args"]["name"]) for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    names = {n for _, n in threads}
    assert any(n.startswith("compute") for n in names)
    assert any(n.startswith("dp") for n in names) and any(n.startswith("pp") for n in names)
    # one stream per thread id, the same in every process
    xs = [e for e in events if e["ph"] == "X"]
    streams_of_tid: dict[int, set[str]] = {}
    for e in xs:
        streams_of_tid.setdefault(e["tid"], set()).add(e["args"]["stream"])
    assert all(len(v) == 1 for v in streams_of_tid.values())
    assert streams_of_tid[1] == {"compute"}


def _check_sums(tl: Timeline, report: StepReport, events: list[dict]) -> None:
    """Per-stage category sums of the compute thread equal the report, within the whole-ns
    rounding of the span edges (at most 1 ns per span)."""
    totals = category_totals_s(events)
    for stage, expected in enumerate(report.breakdown_by_stage_s):
        got = totals.get(stage, {})
        for cat in CATEGORIES:
            want = expected.get(cat, 0.0)
            n = sum(1 for e in events if e["ph"] == "X" and e["args"]["stage"] == stage and e["cat"] == cat)
            assert got.get(cat, 0.0) == pytest.approx(want, rel=1e-9, abs=(n + 1) * 1e-9), (
                stage,
                cat,
            )


def test_compute_stream_sums_match_report() -> None:
    tl, report = gpipe_step(p=4, m=16)
    _check_sums(tl, report, chrome_trace_events(tl, report))


def test_engine_trace_sums_match_report(tmp_path) -> None:
    from simulator.cli import scenario_path
    from simulator.loading import load_scenario
    from simulator.simulate import simulate

    result = simulate(load_scenario(scenario_path(None)), detail=True)
    path = write_chrome_trace(result.timeline, result.report, tmp_path / "t.json")
    data = json.loads(path.read_text())
    _check_sums(result.timeline, result.report, data["traceEvents"])
    xs = [e for e in data["traceEvents"] if e["ph"] == "X"]
    assert max(e["ts"] + e["dur"] for e in xs) == pytest.approx(result.report.step_time_s * 1e6, rel=1e-6)


def test_cli_trace_summed_against_json(tmp_path, capsys) -> None:
    from simulator.cli import main

    scn = tmp_path / "s.toml"
    scn.write_text(
        'name = "small"\n[model]\npreset = "gpt3-1.3b"\n[cluster]\ntopology = "dgx-a100"\nnum_gpus = 16\n'
        "[parallel]\ntp = 2\npp = 4\nmicro_batch = 1\nglobal_batch = 16\nvp = 2\n"
        "[dataloader]\nmicrobatch_latency_ms = 30\nworkers = 1\n"
    )
    trace = tmp_path / "t.json"
    assert main(["run", str(scn), "--json", "--trace", str(trace)]) == 0
    report = json.loads(capsys.readouterr().out)
    events = json.loads(trace.read_text())["traceEvents"]
    sums = trace_sums_by_stage(events)
    assert sorted(sums) == list(range(len(report["breakdown_by_stage_s"])))
    for stage, expected in enumerate(report["breakdown_by_stage_s"]):
        for cat, seconds in expected.items():
            assert sums[stage].get(cat, 0.0) == pytest.approx(seconds, rel=1e-6, abs=1e-6), (stage, cat)
    # and over the whole trace: the mean over stages is breakdown_s
    for cat, seconds in report["breakdown_s"].items():
        total = sum(s.get(cat, 0.0) for s in sums.values()) / len(sums)
        assert total == pytest.approx(seconds, rel=1e-6, abs=1e-6), cat


def test_large_timelines_are_coarsened_keeping_sums() -> None:
    from simulator.trace import coarsened_spans

    tl, report = gpipe_step(p=3, m=4)
    # split every forward into three back-to-back op spans, as the engine records them
    fine: list[Span] = []
    for s in tl.spans:
        if s.name.startswith("F") and s.stream == "compute":
            third = s.duration_s / 3
            for k, op in enumerate(("qkv", "attention", "mlp")):
                fine.append(
                    Span(
                        s.stage,
                        s.stream,
                        s.category,
                        f"{s.name} {op}",
                        s.start_s + k * third,
                        s.start_s + (k + 1) * third if k < 2 else s.end_s,
                        microbatch=s.microbatch,
                        flops=s.flops / 3,
                    )
                )
        else:
            fine.append(s)
    tl_fine = Timeline(tuple(fine), tl.step_time_s, tl.num_stages)
    merged = coarsened_spans(tl_fine.spans)
    assert len(merged) == len(tl.spans)
    assert sum(s.flops for s in merged) == pytest.approx(sum(s.flops for s in tl.spans))
    full = chrome_trace_events(tl_fine, report, max_events=None)
    small = chrome_trace_events(tl_fine, report, max_events=10)
    assert (
        len([e for e in small if e["ph"] == "X"]) == len(tl.spans) < len([e for e in full if e["ph"] == "X"])
    )
    _check_sums(tl_fine, report, small)
    assert any(e["name"] == "F compute" and e["args"]["microbatch"] == 0 for e in small)


# ---------------------------------------------------------------- lossless in trace viewers (issue 17)
def _partial_overlaps(events: list[dict]) -> int:
    """Spans a viewer drops: converted to integer ns the way Perfetto does (`llround(us * 1000)`,
    `ts` and `dur` separately), any span on a thread that starts inside another and ends after it.
    Nested spans are allowed; back-to-back spans must not overlap by even 1 ns."""
    by_thread: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for e in events:
        if e["ph"] == "X":
            start = round(e["ts"] * 1000)
            by_thread.setdefault((e["pid"], e["tid"]), []).append((start, start + round(e["dur"] * 1000)))
    bad = 0
    for spans in by_thread.values():
        open_ends: list[int] = []
        for start, end in sorted(spans, key=lambda x: (x[0], -x[1])):
            while open_ends and open_ends[-1] <= start:
                open_ends.pop()
            if open_ends and end > open_ends[-1]:
                bad += 1
                continue
            open_ends.append(end)
    return bad


SMALL_SCENARIOS = {
    "vp2-dataloader": "[parallel]\ntp = 2\npp = 4\nmicro_batch = 1\nglobal_batch = 16\nvp = 2\n"
    "[dataloader]\nmicrobatch_latency_ms = 30\nworkers = 1\n",
    "zero1-dp-overlap": "[parallel]\ntp = 2\npp = 2\ndp = 4\nzero = 1\nmicro_batch = 1\nglobal_batch = 32\n",
}


def _small(tmp_path, name: str) -> str:
    path = tmp_path / f"{name}.toml"
    path.write_text(
        f'name = "{name}"\n[model]\npreset = "gpt3-1.3b"\n[cluster]\ntopology = "dgx-a100"\nnum_gpus = 16\n'
        + SMALL_SCENARIOS[name]
    )
    return str(path)


@pytest.mark.parametrize(
    "scenario",
    ["teaching-pp4", "gpt3-175b-1024-a100", "seed-7b-64-a100", "vp2-dataloader", "zero1-dp-overlap"],
)
def test_trace_has_whole_ns_spans_that_never_partially_overlap(tmp_path, scenario) -> None:
    from simulator.cli import main
    from simulator.resources import data_dir

    if scenario in SMALL_SCENARIOS:
        path = _small(tmp_path, scenario)
    else:
        path = str(data_dir("scenarios") / f"{scenario}.toml")
    trace = tmp_path / "t.json.gz"
    assert main(["run", path, "--trace", str(trace)]) == 0
    import gzip

    raw = gzip.decompress(trace.read_bytes()).decode()
    events = json.loads(raw)["traceEvents"]
    xs = [e for e in events if e["ph"] == "X"]
    assert len(xs) > 100
    for e in xs:  # whole nanoseconds: at most three decimals of microseconds in the file
        for key in ("ts", "dur"):
            assert round(e[key], 3) == e[key], e
    assert _partial_overlaps(xs) == 0
    # names without the micro-batch: per-op statistics group all micro-batches
    import re

    assert not any(re.match(r"^[FBW]\d", e["name"]) or re.search(r"\bmb\d", e["name"]) for e in xs)
    assert {e["cat"] for e in xs} <= set(CATEGORIES)


def test_partial_overlap_check_catches_float_microseconds() -> None:
    """The check is not vacuous: two back-to-back spans written as float microseconds whose
    separately rounded ends overlap by 1 ns are caught; the same spans as whole ns are not."""
    bad = [  # 0.6 ns + 1000.6 ns ends at 1001.2 ns, where the next span starts
        {"ph": "X", "pid": 1, "tid": 1, "ts": 0.0006, "dur": 1.0006},
        {"ph": "X", "pid": 1, "tid": 1, "ts": 1.0012, "dur": 2.0},
    ]
    first_end_ns = round(bad[0]["ts"] * 1000) + round(bad[0]["dur"] * 1000)
    assert first_end_ns == round(bad[1]["ts"] * 1000) + 1  # a 1 ns overlap in a viewer
    assert _partial_overlaps(bad) == 1
    nested = [
        {"ph": "X", "pid": 1, "tid": 1, "ts": 0.0, "dur": 10.0},
        {"ph": "X", "pid": 1, "tid": 1, "ts": 2.0, "dur": 3.0},
    ]
    assert _partial_overlaps(nested) == 0


def test_op_names_drop_the_microbatch() -> None:
    from simulator.trace import op_name

    assert op_name("F3 qkv") == "F qkv"
    assert op_name("B12.1 fc1 dgrad") == "B fc1 dgrad"
    assert op_name("send F mb3") == "send F"
    assert op_name("wait activation mb17") == "wait activation"
    assert op_name("optimizer step") == "optimizer step"
    assert op_name("F3") == "F"


def test_comm_spans_carry_their_message_bytes(tmp_path) -> None:
    """DP gradient buckets and ZeRO parameter gathers, and pipeline sends, say how many bytes they
    move (issue 17: "param allgather" spans had message_bytes 0): a ZeRO-1 step's gathers move the
    16-bit parameters of the stage, its reduce-scatters the fp32 gradients (Megatron's buckets)."""
    from simulator.loading import load_scenario
    from simulator.program import build_program
    from simulator.simulate import simulate

    scn = load_scenario(_small(tmp_path, "zero1-dp-overlap"))
    result = simulate(scn, detail=True)
    events = chrome_trace_events(result.timeline, result.report)
    xs = [e for e in events if e["ph"] == "X"]
    program = build_program(scn)
    for stage, st in enumerate(program.stages):
        gathered = sum(
            e["args"]["message_bytes"]
            for e in xs
            if e["name"] == "param allgather" and e["args"]["stage"] == stage
        )
        reduced = sum(
            e["args"]["message_bytes"]
            for e in xs
            if e["name"] == "grad reduce" and e["args"]["stage"] == stage
        )
        params = sum(ch.params_local for ch in st.chunks)
        assert gathered == pytest.approx(2 * params, rel=1e-9)  # bf16 parameters, once per step
        assert reduced == pytest.approx(4 * params, rel=1e-9)  # fp32 gradients
    sends = [e for e in xs if e["name"].startswith("send ")]
    m = scn.model
    act = scn.parallel.micro_batch * m.seq_len * m.hidden * 2 / scn.parallel.tp
    assert sends and all(e["args"]["message_bytes"] == pytest.approx(act) for e in sends)
