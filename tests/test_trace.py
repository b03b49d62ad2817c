"""Chrome/Perfetto trace export: valid JSON, microseconds, sums equal to the report."""

from __future__ import annotations

import json
import math

import pytest

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
            work.append(Span(s, "compute", "compute", f"F{i}", a, a + fwd_s, microbatch=i, flops=1e12))
        for j in range(m):
            a = t_bwd0 + (p - 1 - s + j) * bwd_s
            work.append(
                Span(s, "compute", "compute", f"B{m - 1 - j}", a, a + bwd_s, microbatch=m - 1 - j, flops=2e12)
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
        if e["args"]["stream"] == "compute":
            assert e["cat"] in CATEGORIES
        else:  # overlapped work never reuses a breakdown category name
            assert e["cat"] not in CATEGORIES and e["cat"].endswith(e["args"]["category"])
        assert e["dur"] >= 0
        assert {"flops", "message_bytes", "microbatch", "chunk"} <= set(e["args"])
    # microseconds: the last event ends at step_time_s * 1e6
    end_us = max(e["ts"] + e["dur"] for e in xs)
    assert end_us == pytest.approx(report.step_time_s * 1e6, rel=1e-9)
    first_fwd = next(e for e in xs if e["name"] == "F0" and e["args"]["stage"] == 1)
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
    # one thread id per stream, the same in every process
    xs = [e for e in events if e["ph"] == "X"]
    tids = {}
    for e in xs:
        tids.setdefault(e["args"]["stream"], set()).add(e["tid"])
    assert all(len(v) == 1 for v in tids.values())
    assert len({next(iter(v)) for v in tids.values()}) == len(tids)


def _check_sums(tl: Timeline, report: StepReport, events: list[dict]) -> None:
    totals = category_totals_s(events)
    for stage, expected in enumerate(report.breakdown_by_stage_s):
        got = totals.get(stage, {})
        for cat in CATEGORIES:
            want = expected.get(cat, 0.0)
            assert got.get(cat, 0.0) == pytest.approx(want, rel=1e-6, abs=1e-12 * report.step_time_s), (
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


def _sum_by_cat_per_pid(events: list[dict]) -> dict[int, dict[str, float]]:
    """What a user does with the trace: add up `dur` by `cat` in each process."""
    names = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    out: dict[int, dict[str, float]] = {}
    for e in events:
        if e["ph"] == "X":
            stage = int(names[e["pid"]].split()[1])
            per = out.setdefault(stage, {})
            per[e["cat"]] = per.get(e["cat"], 0.0) + e["dur"] * 1e-6
    return out


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
    sums = _sum_by_cat_per_pid(events)
    assert sorted(sums) == list(range(len(report["breakdown_by_stage_s"])))
    for stage, expected in enumerate(report["breakdown_by_stage_s"]):
        for cat, seconds in expected.items():
            assert sums[stage].get(cat, 0.0) == pytest.approx(seconds, rel=1e-6, abs=1e-9), (stage, cat)
    # and over the whole trace: the mean over stages is breakdown_s
    for cat, seconds in report["breakdown_s"].items():
        total = sum(s.get(cat, 0.0) for s in sums.values()) / len(sums)
        assert total == pytest.approx(seconds, rel=1e-6, abs=1e-9), cat


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
    assert any(e["name"] == "F0 compute" for e in small)
