"""The outputs of one scenario agree with each other (SPEC §3-4): `run --json` with and without
`--trace`/`--plot`, and the trace's GPU timelines against the JSON breakdown -- on GPUs with a
per-GPU speed spread (Hopper, Blackwell), whose `gpu_spread` wait the engine does not replay,
and with a jittery dataloader, whose reported step is the mean over the loader's cycle."""

from __future__ import annotations

import gzip
import json
import re

import pytest
from conftest import trace_sums_by_stage

from simulator.cli import main

BASE = '[model]\npreset = "gpt3-1.3b"\nseq_len = 1024\n[cluster]\ntopology = "{topo}"\nnum_gpus = 16\n'
SCENARIOS = {
    # pipeline schedules on Hopper: the slowest-GPU wait is on every stage
    "h100-1f1b": ("dgx-h100", "[parallel]\ntp = 2\npp = 4\nglobal_batch = 16\n"),
    "h100-dualpipev": ("dgx-h100", '[parallel]\ntp = 2\npp = 4\nglobal_batch = 16\nschedule = "dualpipev"\n'),
    "h100-zero3": ("dgx-h100", "[parallel]\nzero = 3\nglobal_batch = 32\nreshard_after_forward = false\n"),
    # a loader slower than the pipeline, with jitter: the step is a cycle's, not the first one's
    "a100-loader-jitter": (
        "dgx-a100",
        "[parallel]\ntp = 2\npp = 2\nglobal_batch = 32\n"
        "[dataloader]\nmicrobatch_latency_ms = 40\nworkers = 1\nprefetch = 1\njitter = 0.3\nseed = 3\n",
    ),
}


def _scenario(tmp_path, name: str) -> str:
    topo, body = SCENARIOS[name]
    path = tmp_path / f"{name}.toml"
    path.write_text(f'name = "{name}"\n' + BASE.format(topo=topo) + body)
    return str(path)


def _run_json(capsys, *args: str) -> dict:
    assert main(["run", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_trace_tiles_the_reported_step_and_sums_to_its_breakdown(tmp_path, capsys, name) -> None:
    path = _scenario(tmp_path, name)
    trace = tmp_path / "t.json.gz"
    report = _run_json(capsys, path, "--trace", str(trace))
    step = report["step_time_s"]
    if name.startswith("h100"):  # the case this test is about: a wait the engine does not replay
        assert report["breakdown_s"]["gpu_spread"] > 1e-4 * step
    data = json.loads(gzip.decompress(trace.read_bytes()))
    assert data["otherData"]["step_time_s"] == step
    xs = [e for e in data["traceEvents"] if e["ph"] == "X"]
    # every span within the step, and the GPU timelines end where the step does (whole-ns edges)
    assert min(e["ts"] for e in xs) >= 0
    assert max(e["ts"] + e["dur"] for e in xs) * 1e-6 == pytest.approx(step, rel=1e-9, abs=2e-9)
    sums = trace_sums_by_stage(data["traceEvents"])
    assert sorted(sums) == list(range(report["parallel"]["pp"]))
    for stage, expected in enumerate(report["breakdown_by_stage_s"]):
        assert sum(sums[stage].values()) == pytest.approx(step, rel=1e-9, abs=1e-8), stage
        for cat, seconds in expected.items():
            # whole-ns span edges: at most a nanosecond per span
            assert sums[stage].get(cat, 0.0) == pytest.approx(seconds, rel=1e-9, abs=1e-6), (stage, cat)


@pytest.mark.parametrize("name", ["h100-1f1b", "h100-zero3", "a100-loader-jitter"])
def test_run_json_is_the_same_with_trace_and_plot(tmp_path, capsys, name) -> None:
    """SPEC §4: the JSON is a pure function of the scenario, so asking for a trace or a plot
    does not move a digit of it (the detailed replay used to add its seconds in another order)."""
    path = _scenario(tmp_path, name)
    plain = _run_json(capsys, path)
    traced = _run_json(capsys, path, "--trace", str(tmp_path / "t.json"))
    plotted = _run_json(capsys, path, "--plot", str(tmp_path / "p.png"))
    assert traced == plain
    assert plotted == plain


def test_api_simulate_detail_keeps_the_report(tmp_path) -> None:
    """`simulate(detail=True)` reports what `simulate()` does, and its timeline (what traces and
    plots draw) tiles that step: the slowest-GPU wait closes every stage."""
    from simulator.loading import load_scenario
    from simulator.simulate import simulate

    scn = load_scenario(_scenario(tmp_path, "h100-1f1b"))
    plain, detailed = simulate(scn), simulate(scn, detail=True)
    assert detailed.report == plain.report
    tl = detailed.timeline
    assert tl.step_time_s == plain.report.step_time_s
    for stage in range(tl.num_stages):
        last = max((s for s in tl.spans if s.stage == stage and s.stream == "compute"), key=lambda s: s.end_s)
        assert last.category == "gpu_spread"
        assert last.end_s == pytest.approx(tl.step_time_s, rel=1e-12)


def test_sweep_csv_rows_run_as_written(tmp_path, capsys) -> None:
    """A sweep CSV row is `run` of its configuration: its cells, booleans included, go back in
    through `--set` as they are written (docs/reference.md: sequence_parallel "true/false"; the
    CSV wrote Python's "False", which --set refuses), and give the row's numbers."""
    import csv

    path = tmp_path / "sw.toml"
    path.write_text(
        'name = "sw"\n' + BASE.format(topo="dgx-h100") + "[parallel]\nglobal_batch = 32\n"
        "[sweep]\ntp = [1, 2]\npp = [1, 2]\nsequence_parallel = [false, true]\n"
    )
    out = tmp_path / "sw.csv"
    assert main(["sweep", str(path), "--jobs", "1", "--engine", "des", "--out", str(out)]) == 0
    capsys.readouterr()
    rows = [r for r in csv.DictReader(out.open()) if r["status"] == "ok"]
    assert rows and {r["sequence_parallel"] for r in rows} == {"false", "true"}
    for row in rows:
        sets = [
            f"parallel.{k}={row[k]}"
            for k in ("tp", "pp", "dp", "micro_batch", "schedule", "sequence_parallel")
        ]
        report = _run_json(capsys, str(path), *(a for s in sets for a in ("--set", s)))
        for k in ("step_time_s", "tokens_per_s", "mfu", "hfu"):
            assert float(row[k]) == pytest.approx(report[k], rel=1e-12), (row, k)
        for cat, seconds in report["breakdown_s"].items():
            assert float(row[f"{cat}_s"]) == pytest.approx(seconds, rel=1e-12, abs=1e-15), (row, cat)


def test_api_compare_run_keys_override_like_the_command(tmp_path, capsys) -> None:
    """`mfusim.compare(..., run={...})` plans the run `mfusim compare --tokens ...` does, also
    for a scenario with its own [run] table (whose keys the command's flags override; the API
    kept the scenario's own tokens and price)."""
    import mfusim

    own = tmp_path / "own.toml"
    own.write_text(
        'name = "own"\n' + BASE.format(topo="dgx-a100") + "[parallel]\ntp = 2\npp = 2\nglobal_batch = 32\n"
        "[run]\ntokens = 1e10\nusd_per_gpu_hour = 2.5\n"
    )
    other = _scenario(tmp_path, "h100-1f1b")
    assert main(["compare", str(own), other, "--json", "--tokens", "1e11", "--usd-per-gpu-hour", "3"]) == 0
    cli = json.loads(capsys.readouterr().out)["scenarios"]
    items = mfusim.compare(str(own), other, run={"tokens": 1e11, "usd_per_gpu_hour": 3})
    for item, shown in zip(items, cli, strict=True):
        assert item.plan.to_dict() == shown["plan"]
        assert shown["plan"]["tokens"] == 1e11 and shown["plan"]["usd_per_gpu_hour"] == 3


_CHANGE = re.compile(r"([\w.]+)(?: (?:\[[^\]]*\]|'[^']*'|[^,\s]+))? -> (\[[^\]]*\]|'[^']*'|[^,\s]+)")


def _sets_of(change: str) -> list[str]:
    """A lever's `change` ("parallel.vp 1 -> 2, schedule 1f1b -> interleaved") as --set values;
    a key without a section is in the previous key's."""
    out, section = [], ""
    for key, new in _CHANGE.findall(re.sub(r" \(.*?\)$", "", change)):
        if "." in key:
            section = key.rsplit(".", 1)[0]
        else:
            key = f"{section}.{key}"
        out.append(f"{key}={new.strip(chr(39))}")
    return out


def test_whatif_lever_changes_rerun_as_the_lever(tmp_path, capsys) -> None:
    """Each schedule and micro-batch lever's `change` names every key it sets: `run --set` of
    them gives the lever's step (from vp = 2 the zb-h1 lever left out "vp 2 -> 1" and could not be
    re-run; micro_batch_x2 said "dataloader latency 10 -> 20 ms", not the key)."""
    path = tmp_path / "ilv.toml"
    path.write_text(
        'name = "ilv"\n' + BASE.format(topo="dgx-h100") + "[parallel]\npp = 4\nvp = 2\nglobal_batch = 32\n"
        "[dataloader]\nmicrobatch_latency_ms = 10\nworkers = 2\n"
    )
    assert main(["whatif", str(path), "--json"]) == 0
    levers = {lv["key"]: lv for lv in json.loads(capsys.readouterr().out)["levers"]}
    checked = ["schedule_zb_h1", "schedule_zb_v", "schedule_dualpipe", "micro_batch_x2", "interleave_vp4"]
    assert set(checked) <= set(levers)
    for key in checked:
        lever = levers[key]
        sets = _sets_of(lever["change"])
        report = _run_json(capsys, str(path), *(a for s in sets for a in ("--set", s)))
        for k in ("step_time_s", "mfu", "tokens_per_s"):
            assert report[k] == pytest.approx(lever[k], rel=1e-9), (key, lever["change"], k)
        assert report["memory"]["peak_gib_per_gpu"] == pytest.approx(lever["peak_memory_gib"], rel=1e-9), key
