"""Robustness and output-contract defects (round 2, robust4 lane).

Each test pins one defect found by hand or by a throwaway combination fuzzer: before its fix
the input crashed, wrote the wrong thing or offered an impossible change; now it is refused
with exit status 2 and one line naming the flag or key, or handled as documented.
"""

from __future__ import annotations

import gzip
import json
import os
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import SMALL_PLANNER_SCENARIO, SMALL_SCENARIO, CliResult

from simulator.cli import scenario_path
from simulator.loading import load_scenario
from simulator.schedules import bubble_closed_form_s
from simulator.specs import Scenario
from simulator.whatif import candidate_variants


def _refused(result: CliResult, key: str) -> None:
    assert result.code == 2, (result.code, result.err)
    assert len(result.err_lines) == 1, result.err
    assert "Traceback" not in result.err
    assert key in result.err, result.err


# ----------------------------------------------------------------------------- '-' as an output
@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["run", "{small}", "--trace", "-"], "--trace"),
        (["run", "{small}", "--json", "--trace", "-"], "--trace"),
        (["run", "{small}", "--plot", "-"], "--plot"),
        (["compare", "{small}", "{small}", "--plot", "-"], "--plot"),
        (["sweep", "{planner}", "--out", "-"], "--out"),
        (["sweep", "{planner}", "--export-best", "-"], "--export-best"),
        (["sweep", "{planner}", "--export-top", "2", "-"], "--export-top"),
        (["sweep", "{planner}", "--plot", "-"], "--plot"),
        (["validate", "--out", "-"], "--out"),
    ],
)
def test_dash_as_an_output_file_is_refused_naming_the_flag(
    argv: list[str],
    flag: str,
    run_cli: Callable[[list[str]], CliResult],
    write_file: Callable[..., Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # `run --trace -` wrote a 270 kB file literally named '-' in the working directory (and the
    # same for every other output flag). Standard output carries the report or the --json
    # object, so '-' cannot mean it: refused before any work, and nothing is written.
    small = write_file(SMALL_SCENARIO, name="small.toml")
    planner = write_file(SMALL_PLANNER_SCENARIO, name="planner.toml")
    monkeypatch.chdir(tmp_path)
    before = set(os.listdir(tmp_path))
    result = run_cli([a.format(small=small, planner=planner) for a in argv])
    _refused(result, flag)
    assert "'-'" in result.err
    assert result.out == ""
    assert set(os.listdir(tmp_path)) == before  # no file named '-' (or anything else) appeared


# ----------------------------------------------------------------------------- run --samples seeds
LOADER_JITTER = """
[dataloader]
microbatch_latency_ms = 200.0
workers = 1
prefetch = 1
jitter = 0.5
seed = 3
"""


def _json(result: CliResult) -> dict:
    assert result.code == 0, result.err
    return json.loads(result.out)


def test_samples_offset_each_file_seed_so_no_sample_repeats(
    run_cli: Callable[[list[str]], CliResult], write_file: Callable[..., Path]
) -> None:
    # One base (`[variability] seed`, 0) served both generators: with `[dataloader] seed = 3`
    # sample 0 ran loader seed 3 and sample 3 ran loader seed 3 too, a copy of sample 0 among
    # four "independent" steps. Now sample i runs each file seed + i (docs/variability.md).
    path = write_file(SMALL_PLANNER_SCENARIO.split("[sweep]")[0] + LOADER_JITTER)
    stats = _json(run_cli(["run", str(path), "--json", "--samples", "4"]))["samples"]["step_time_s"]
    steps = [
        _json(
            run_cli(
                [
                    "run",
                    str(path),
                    "--json",
                    "--set",
                    f"dataloader.seed={3 + i}",
                    "--set",
                    f"variability.seed={i}",
                ]
            )
        )["step_time_s"]
        for i in range(4)
    ]
    assert len(set(steps)) == 4, steps  # the loader jitter makes every seed's step its own
    assert stats["min"] == min(steps) and stats["max"] == max(steps)
    assert stats["mean"] == pytest.approx(sum(steps) / 4, rel=1e-12)
    # --seed S still seeds both generators S + i: sample 0 of --seed 3 is loader seed 3, var seed 3
    seeded = _json(run_cli(["run", str(path), "--json", "--samples", "4", "--seed", "3"]))
    assert seeded["step_time_s"] == steps[0]  # only the loader draws here: its seed 3 is sample 0's


def test_samples_past_the_largest_loader_seed_are_refused_naming_the_key(
    run_cli: Callable[[list[str]], CliResult], write_file: Callable[..., Path]
) -> None:
    text = SMALL_PLANNER_SCENARIO.split("[sweep]")[0] + LOADER_JITTER.replace(
        "seed = 3", f"seed = {2**63 - 1}"
    )
    path = write_file(text)
    assert run_cli(["run", str(path), "--json"]).code == 0  # one step at the largest seed is fine
    result = run_cli(["run", str(path), "--json", "--samples", "2"])
    _refused(result, "dataloader.seed")
    assert path.name in result.err


def test_samples_are_the_same_with_trace_and_plot(
    run_cli: Callable[[list[str]], CliResult], write_file: Callable[..., Path], tmp_path: Path
) -> None:
    # the main sample is replayed in detail for --trace/--plot: the statistics must not notice
    text = SMALL_PLANNER_SCENARIO.split("[sweep]")[0] + LOADER_JITTER
    text += "\n[variability]\ncompute_jitter = 0.1\nnetwork_jitter = 0.1\nseed = 3\n"
    path = write_file(text)
    plain = run_cli(["run", str(path), "--json", "--samples", "5"])
    traced = run_cli(
        [
            "run",
            str(path),
            "--json",
            "--samples",
            "5",
            "--trace",
            str(tmp_path / "t.json"),
            "--plot",
            str(tmp_path / "p.png"),
        ]
    )
    assert plain.code == traced.code == 0, traced.err
    assert plain.out == traced.out
    other = _json(run_cli(["run", str(path), "--json", "--samples", "5", "--seed", "40"]))
    assert other["samples"] != json.loads(plain.out)["samples"]


# ----------------------------------------------------------------------------- whatif schedule levers
# The tiers whatif.SCHEDULE_TIER documents (and cites), restated: a lever never leads down.
TIERS = {"gpipe": 0, "1f1b": 0, "interleaved": 1, "zb-h1": 1, "zb-v": 2, "dualpipe": 2, "dualpipev": 2}
PIPELINE_LEVERS = ("interleave_vp", "schedule_")


def _teaching_with(schedule: str, vp: int) -> tuple[Path, list[tuple[str, object]], Scenario]:
    path = scenario_path("teaching-pp4")
    sets: list[tuple[str, object]] = [("parallel.schedule", schedule), ("parallel.vp", vp)]
    return path, sets, load_scenario(path, sets)


@pytest.mark.parametrize(
    ("schedule", "vp", "offered"),
    [
        (
            "1f1b",
            1,
            {
                "interleave_vp2",
                "interleave_vp3",
                "interleave_vp4",
                "schedule_zb_h1",
                "schedule_zb_v",
                "schedule_dualpipe",
                "schedule_dualpipev",
            },
        ),
        (
            "gpipe",
            1,
            {
                "interleave_vp2",
                "interleave_vp3",
                "interleave_vp4",
                "schedule_zb_h1",
                "schedule_zb_v",
                "schedule_dualpipe",
                "schedule_dualpipev",
            },
        ),
        (
            "interleaved",
            2,
            {
                "interleave_vp3",
                "interleave_vp4",
                "schedule_zb_h1",
                "schedule_zb_v",
                "schedule_dualpipe",
                "schedule_dualpipev",
            },
        ),
        # interleaved's bubble (p-1)(F+B+W)/v is ZB-H1's (p-1)(F+B-W) at v = 3 (T_F = T_B = T_W):
        # between these peers only the smaller closed form is a lever
        ("interleaved", 3, {"interleave_vp4", "schedule_zb_v", "schedule_dualpipe", "schedule_dualpipev"}),
        ("interleaved", 4, {"schedule_zb_v", "schedule_dualpipe", "schedule_dualpipev"}),
        (
            "zb-h1",
            1,
            {
                "interleave_vp4",
                "schedule_zb_v",
                "schedule_dualpipe",
                "schedule_dualpipev",
            },
        ),
        ("zb-v", 2, {"schedule_dualpipe", "schedule_dualpipev"}),
        ("dualpipe", 2, {"schedule_zb_v", "schedule_dualpipev"}),
        ("dualpipev", 2, {"schedule_zb_v", "schedule_dualpipe"}),
    ],
)
def test_schedule_levers_never_lead_to_a_lower_tier(schedule: str, vp: int, offered: set[str]) -> None:
    # whatif on a zb-v baseline offered ZB-H1 and interleaved 1F1B (vp 2-4) as levers: schedules
    # with a larger bubble than the one it runs (ZB-V: ZB-H1's memory, smaller bubble; Qi et al.
    # 2024), listed at -2.5 to -4.1 points; from interleaved vp = 4 it offered vp = 2 and 3, and
    # from llama3-70b-512-h100's interleaved vp = 5, ZB-H1 at -3.4 points.
    path, base_sets, scn = _teaching_with(schedule, vp)
    variants = [v for v in candidate_variants(scn) if v.key.startswith(PIPELINE_LEVERS)]
    assert {v.key for v in variants if v.build is not None} == offered
    for v in variants:
        if v.build is None:
            assert v.skipped, v.key  # every lever not offered says why
            continue
        built = v.build().parallel
        assert TIERS[built.schedule] >= TIERS[schedule], v.key
        if built.schedule == schedule == "interleaved":
            assert built.vp > vp
        if {built.schedule, schedule} == {"interleaved", "zb-h1"}:
            m = scn.parallel.num_microbatches
            assert bubble_closed_form_s(built.schedule, 4, built.vp, m, 1, 1, 1) < bubble_closed_form_s(
                schedule, 4, vp, m, 1, 1, 1
            )
        # the change names every key it sets, each an actual change, and `--set` of it is the lever
        sets = list(base_sets)
        section = ""
        for part in v.change.split(", "):
            key, old, arrow, new = part.split(" ")
            assert arrow == "->" and old != new, v.change  # "vp 2 -> 2" is not a change
            section, _, name = key.rpartition(".") if "." in key else (section, "", key)
            sets.append((f"{section}.{name}", int(new) if new.isdigit() else new))
        assert load_scenario(path, sets).parallel == built, v.change


def test_zb_v_whatif_names_why_zb_h1_is_not_a_lever(run_cli: Callable[[list[str]], CliResult]) -> None:
    result = run_cli(["whatif", "teaching-pp4", "--json", "--set", "parallel.schedule=zb-v"])
    assert result.code == 0, result.err
    data = json.loads(result.out)
    assert not any(
        lv["key"] == "schedule_zb_h1" or lv["key"].startswith("interleave") for lv in data["levers"]
    )
    skipped = {lv["key"]: lv["skipped"] for lv in data["skipped"]}
    assert "smaller pipeline bubble" in skipped["schedule_zb_h1"]
    assert "smaller pipeline bubble" in skipped["interleave_vp4"]


# ----------------------------------------------------------------------------- topo on small clusters
@pytest.mark.parametrize(
    ("gpus", "nodes", "leaves"), [(1, 1, 0), (8, 1, 0), (12, 2, 8), (16, 2, 8), (1024, 128, 32)]
)
def test_topo_counts_agree_with_its_tiers(
    gpus: int, nodes: int, leaves: int, run_cli: Callable[[list[str]], CliResult]
) -> None:
    # `topo dgx-h100 --gpus 1` said num_leaf_switches 8 next to tiers[0].switches 0 (one node
    # needs no switch), tiers[].gpus_per_group 16 for 12 GPUs, and printed "1 = 1 nodes x 8",
    # "12 = 2 nodes x 8"
    data = json.loads(run_cli(["topo", "dgx-h100", "--gpus", str(gpus), "--json"]).out)
    assert (data["num_gpus"], data["num_nodes"]) == (gpus, nodes)
    assert data["num_leaf_switches"] == data["tiers"][0]["switches"] == leaves
    assert data["num_spine_switches"] == sum(t["switches"] for t in data["tiers"][1:2])
    assert data["tiers"][-1]["gpus_per_group"] == gpus  # the top tier holds every GPU, no more
    text = run_cli(["topo", "dgx-h100", "--gpus", str(gpus)]).out
    line = next(ln for ln in text.splitlines() if ln.startswith("GPUs"))
    numbers = [int(x.replace(",", "")) for x in re.findall(r"[\d,]+", line)]
    assert numbers[0] == gpus
    if gpus % 8 == 0:
        assert numbers[1] * numbers[2] == gpus  # "N = nodes x 8" is arithmetic that holds
    else:
        assert str(gpus % 8) in line  # the partly used node is named with what it holds


# ----------------------------------------------------------------------------- sweep --set of a swept key
def test_sweep_says_when_a_set_value_is_swept_over(
    run_cli: Callable[[list[str]], CliResult], write_file: Callable[..., Path]
) -> None:
    # `sweep --set parallel.tp=2` ran every tp of the default grid without a word: the value the
    # user typed was replaced per configuration. Now a warning names the axis and the spelling
    # that pins it; the sweep itself is unchanged (the override may be needed for the base).
    path = write_file(SMALL_PLANNER_SCENARIO)  # [sweep] tp = [1, 2], pp = [1, 2], micro_batch = [1, 2]
    argv = ["sweep", str(path), "--json", "--jobs", "1", "--engine", "analytic"]
    plain = run_cli(argv)
    pinned = run_cli([*argv, "--set", "parallel.tp=2", "--set", "parallel.dp=2"])
    assert plain.code == pinned.code == 0, pinned.err
    warnings = [ln for ln in pinned.err_lines if "warning" in ln]
    assert len(warnings) == 2, pinned.err
    assert "--set parallel.tp=2" in warnings[0] and "--set sweep.tp=[2]" in warnings[0]
    assert "parallel.dp=2" in warnings[1] and "sweep.dp" in warnings[1]
    assert {r["tp"] for r in json.loads(pinned.out)["top"]} == {1, 2}  # swept over, as it says
    assert json.loads(pinned.out)["num_configurations"] == json.loads(plain.out)["num_configurations"]
    # the spelling the warning gives does pin it, and says nothing
    only = run_cli([*argv, "--set", "sweep.tp=[2]", "--set", "parallel.tp=2", "--set", "parallel.dp=2"])
    assert only.code == 0, only.err
    assert [ln for ln in only.err_lines if "warning" in ln and "parallel.tp" in ln] == []
    assert {r["tp"] for r in json.loads(only.out)["top"]} == {2}
    # a key the sweep does not vary is applied and not warned about
    other = run_cli([*argv, "--set", "parallel.recompute=full"])
    assert not [ln for ln in other.err_lines if "warning" in ln], other.err
    assert {r["recompute"] for r in json.loads(other.out)["top"]} == {"full"}


# ----------------------------------------------------------------------------- --trace file names
@pytest.mark.parametrize("name", ["t.png", "t.csv", "t", "t.gz", "t.json.txt"])
def test_trace_name_of_another_format_is_refused(
    name: str, run_cli: Callable[[list[str]], CliResult], write_file: Callable[..., Path], tmp_path: Path
) -> None:
    # `run --trace t.png` wrote the JSON trace into a .png (as `sweep --out x.parquet` once wrote
    # CSV); the trace is JSON, gzip-compressed on .json.gz
    small = write_file(SMALL_SCENARIO, name="small.toml")
    result = run_cli(["run", str(small), "--trace", str(tmp_path / name)])
    _refused(result, "--trace")
    assert ".json.gz" in result.err
    assert not (tmp_path / name).exists()


@pytest.mark.parametrize("name", ["T.JSON", "t.json", "STEP.JSON.GZ", "step.json.gz"])
def test_trace_names_in_any_case_are_written_in_their_format(
    name: str, run_cli: Callable[[list[str]], CliResult], write_file: Callable[..., Path], tmp_path: Path
) -> None:
    # an upper-case .GZ was accepted as gzip by name but written as plain JSON
    small = write_file(SMALL_SCENARIO, name="small.toml")
    target = tmp_path / name
    assert run_cli(["run", str(small), "--trace", str(target)]).code == 0
    raw = target.read_bytes()
    text = gzip.decompress(raw) if name.lower().endswith(".gz") else raw
    assert json.loads(text)["traceEvents"]


def test_seed_without_randomness_says_it_changes_nothing(
    run_cli: Callable[[list[str]], CliResult], write_file: Callable[..., Path]
) -> None:
    # `run --seed 3` on a step with no random draw printed the same step without a word
    quiet = write_file(SMALL_PLANNER_SCENARIO.split("[sweep]")[0], name="quiet.toml")
    plain, seeded = (
        run_cli(["run", str(quiet), "--json"]),
        run_cli(["run", str(quiet), "--json", "--seed", "3"]),
    )
    assert plain.out == seeded.out and seeded.code == 0
    assert plain.err_lines == [] and seeded.err_lines == [
        "note: no [variability] and no dataloader jitter: --seed changes nothing"
    ]
    jittery = write_file(SMALL_PLANNER_SCENARIO.split("[sweep]")[0] + LOADER_JITTER, name="jittery.toml")
    result = run_cli(["run", str(jittery), "--json", "--seed", "4"])
    assert result.code == 0 and not [ln for ln in result.err_lines if "--seed" in ln]
    assert result.out != run_cli(["run", str(jittery), "--json"]).out  # there it does change the step


# ----------------------------------------------------------------------------- --plot x.pgf without TeX
def test_pgf_plot_without_tex_is_refused_before_the_work(
    run_cli: Callable[[list[str]], CliResult],
    write_file: Callable[..., Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # `run --plot p.pgf` simulated the step and then died in matplotlib's PGF backend:
    # "mfusim: internal error: RuntimeError: 'xelatex' not found", exit 1
    import argparse
    import shutil

    from simulator.cli.common import plot_path

    small = write_file(SMALL_SCENARIO, name="small.toml")
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None)
    for argv in (["run", str(small)], ["compare", str(small), str(small)]):
        result = run_cli([*argv, "--plot", str(tmp_path / "p.pgf")])
        _refused(result, "--plot")
        assert "xelatex" in result.err and ".pdf" in result.err
    assert not (tmp_path / "p.pgf").exists()
    with pytest.raises(argparse.ArgumentTypeError):
        plot_path("--plot")("p.pgf")
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: f"/usr/bin/{name}")
    assert plot_path("--plot")("p.pgf") == "p.pgf"  # with TeX installed the name is fine
    assert plot_path("--plot")("p.png") == "p.png"


# ----------------------------------------------------------------------------- --set sweep.* outside sweep
@pytest.mark.parametrize(
    ("command", "override", "own"),
    [
        (["run"], "sweep.tp=[1, 2]", "--set parallel.tp=VALUE"),
        (["whatif"], "sweep.num_gpus=[8, 16]", "--set cluster.num_gpus=VALUE"),
        (["compare", "{s}"], "sweep.recompute=['full']", "--set parallel.recompute=VALUE"),
        # whatif plans no run (it has no --tokens): a [run] value was dropped the same way
        (["whatif"], "run.tokens=1e12", "does not plan the whole run"),
    ],
)
def test_set_of_a_sweep_key_outside_sweep_is_refused(
    command: list[str],
    override: str,
    own: str,
    run_cli: Callable[[list[str]], CliResult],
    write_file: Callable[..., Path],
) -> None:
    # run, whatif and compare simulated the scenario's own values and dropped `--set sweep.tp=...`
    # without a word
    small = str(write_file(SMALL_SCENARIO, name="small.toml"))
    argv = [command[0], small, *(a.format(s=small) for a in command[1:]), "--json"]
    assert run_cli(argv).code == 0
    result = run_cli([*argv, "--set", override])
    _refused(result, "--set " + override.partition("=")[0])
    assert own in result.err


# ----------------------------------------------------------------------------- trace of a loader-held step
def test_trace_of_a_jittery_loader_bound_step_tiles_the_reported_step(
    run_cli: Callable[[list[str]], CliResult], write_file: Callable[..., Path], tmp_path: Path
) -> None:
    # A loader-bound step with jitter is held to the loader's mean pace (batches x latency /
    # workers), longer than the one step the trace records: the trace ended 30 ms (1.4%) before
    # the 2.154 s step it came with, and its per-stage sums missed that wait for data.
    from conftest import trace_sums_by_stage

    text = SMALL_PLANNER_SCENARIO.split("[sweep]")[0] + (
        "[dataloader]\nmicrobatch_latency_ms = 500.0\nworkers = 2\nprefetch = 2\njitter = 0.3\nseed = 0\n"
    )
    text = text.replace('topology = "dgx-a100"\nnum_gpus = 8', 'topology = "dgx-h100"\nnum_gpus = 16')
    text = text.replace("tp = 1\npp = 2", "tp = 2\npp = 2")
    path = write_file(text)
    trace = tmp_path / "t.json"
    report = _json(run_cli(["run", str(path), "--json", "--trace", str(trace)]))
    step = report["step_time_s"]
    m = report["parallel"]["num_microbatches"]
    assert step >= m * 0.5 / 2  # held to the loader's pace: m batches of 0.5 s over 2 workers
    sums = trace_sums_by_stage(json.loads(trace.read_text())["traceEvents"])
    for stage, breakdown in enumerate(report["breakdown_by_stage_s"]):
        assert sum(sums[stage].values()) == pytest.approx(step, rel=1e-6), stage
        wait = "dataloader" if stage == 0 else "bubble"
        assert sums[stage][wait] == pytest.approx(breakdown[wait], rel=1e-3), stage


@pytest.mark.parametrize("engine", ["des", "analytic"])
def test_sweep_refine_outside_engine_auto_is_refused(
    engine: str, run_cli: Callable[[list[str]], CliResult], write_file: Callable[..., Path]
) -> None:
    # `sweep --engine des --refine 5` dropped --refine silently (des re-simulates nothing; it
    # simulates every configuration with the engine)
    path = write_file(SMALL_PLANNER_SCENARIO)
    argv = ["sweep", str(path), "--json", "--jobs", "1", "--engine", engine]
    assert run_cli(argv).code == 0
    result = run_cli([*argv, "--refine", "5"])
    _refused(result, "--refine")
    assert "--engine auto" in result.err
    auto = run_cli(["sweep", str(path), "--json", "--jobs", "1", "--engine", "auto", "--refine", "5"])
    assert auto.code == 0, auto.err
    rows = [r for r in json.loads(auto.out)["top"] if r["status"] == "ok"]
    assert sum(r["engine"] == "des" for r in rows) >= min(5, len(rows))  # there it does what it says
