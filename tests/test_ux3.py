"""Report headers that say what was simulated (ux3): the accuracy line of the scenario's software
stack, "no pipeline" at pp = 1, the command line's overrides under the scenario's name, and the
exported scenarios' source named as the user named it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simulator.cli import main
from simulator.compare import compare, format_comparison
from simulator.describe import accuracy_line, accuracy_summary, accuracy_table
from simulator.loading import load_scenario
from simulator.resources import data_dir
from simulator.run import format_report
from simulator.simulate import simulate
from simulator.specs import STACK_NAMES, residuals_stack
from simulator.stacks import STACKS

A100 = data_dir("scenarios") / "gpt3-175b-1024-a100.toml"
SEED = data_dir("scenarios") / "seed-7b-64-a100.toml"  # tp 1, pp 1
TEACHING = data_dir("scenarios") / "teaching-pp4.toml"  # pp 4
# stack "megatron-deepspeed" refuses explicitly requested overlaps (loading._DS_NO_OVERLAP)
DS = [
    ("kernels.stack", "megatron-deepspeed"),
    ("parallel.overlap_grad_reduce", None),
    ("parallel.overlap_param_gather", None),
]


# ----------------------------------------------------------------------------- 1. accuracy
def test_the_stacks_tables_partition_each_pooled_group():
    """Every calibration row of a group belongs to exactly one stack: the per-stack row counts add up
    to the pooled count, and the pooled mean errors are the row-weighted means of the stacks' (each
    rounded to 0.05)."""
    table = accuracy_table()
    for arch, kinds in table.items():
        if arch == "stacks":
            continue
        for kind, precisions in kinds.items():
            for precision, pooled in precisions.items():
                parts = [
                    t[arch][kind][precision]
                    for t in table["stacks"].values()
                    if precision in t.get(arch, {}).get(kind, {})
                ]
                assert sum(p["rows"] for p in parts) == pooled["rows"], (arch, kind, precision)
                for name in ("mape_pct", "bias_pct"):
                    mean = sum(p[name] * p["rows"] for p in parts) / pooled["rows"]
                    assert mean == pytest.approx(pooled[name], abs=0.1), (arch, kind, precision, name)
    assert set(table["stacks"]) == set(STACKS)  # the stacks with a calibration run, no more


def test_megatron_2021_is_judged_by_its_own_rows():
    scn = load_scenario(A100, [("kernels.stack", "megatron-2021")])
    acc = accuracy_summary(scn)
    own = accuracy_table()["stacks"]["megatron-2021"]["ampere"]["dense"]["16bit"]
    pooled = accuracy_table()["ampere"]["dense"]["16bit"]
    assert 0 < own["rows"] < pooled["rows"]
    assert (acc["stack"], acc["residuals_of"], acc["rows"]) == ("megatron-2021", "megatron-2021", own["rows"])
    assert (acc["mape_pct"], acc["bias_pct"]) == (own["mape_pct"], own["bias_pct"])
    assert acc["all_stacks"]["rows"] == pooled["rows"]
    line = accuracy_line(scn)
    assert (
        f"on {own['rows']} published ampere dense 16bit calibration runs of the megatron-2021 stack" in line
    )


def test_a_stack_without_calibration_runs_says_so_and_names_the_borrowed_residuals():
    assert set(STACK_NAMES) - set(STACKS) == {"megatron-deepspeed"}
    assert residuals_stack("megatron-deepspeed") == "megatron-2021"
    scn = load_scenario(A100, DS)
    acc = accuracy_summary(scn)
    assert acc["stack"] == "megatron-deepspeed" and acc["residuals_of"] == "megatron-2021"
    assert acc["rows"] == 0 and acc["mape_pct"] is None and acc["bias_pct"] is None
    text = format_report(scn, simulate(scn).report)
    line = next(ln.strip() for ln in text.splitlines() if ln.strip().startswith("accuracy:"))
    assert line.startswith(
        "accuracy: no published run of the megatron-deepspeed stack in the calibration data; "
        "residuals borrowed from megatron-2021 (docs/calibration.md)"
    )
    # the pooled figure, if given, is labelled as the other stacks' and never as this stack's
    assert "calibration runs of the" not in line
    assert f"other stacks' {acc['all_stacks']['rows']} ampere dense 16bit runs" in line


def test_the_default_stack_is_not_credited_with_other_stacks_rows(capsys):
    # no Megatron-Core run on A100 is in the calibration data: the A100 scenario's line says so
    assert "ampere" not in accuracy_table()["stacks"]["megatron-core"]
    assert main(["run", str(A100), "--json"]) == 0
    acc = json.loads(capsys.readouterr().out)["accuracy"]
    assert acc["stack"] == "megatron-core" and acc["rows"] == 0 and acc["all_stacks"]["rows"] > 100
    assert "of the megatron-core stack in the calibration data" in accuracy_line(load_scenario(A100))


# ----------------------------------------------------------------------------- 2. pp = 1
def _header(text: str) -> str:
    return text.splitlines()[2]  # the tp/pp/dp line with the batch and the flags


def test_interleaved_at_pp1_runs_1f1b_says_no_pipeline_and_warns():
    base = load_scenario(SEED)
    scn = load_scenario(SEED, [("parallel.schedule", "interleaved")])
    ref, rep = simulate(base).report, simulate(scn).report
    # the premise: without a pipeline (vp = 1) the interleaved step is 1F1B's
    assert rep.step_time_s == pytest.approx(ref.step_time_s, rel=1e-12)
    head = _header(format_report(scn, rep))
    assert "no pipeline" in head and "interleaved" not in head
    assert any(
        w.startswith('parallel.schedule = "interleaved" changes nothing at pp = 1') for w in rep.warnings
    )
    assert not any("parallel.schedule" in w for w in ref.warnings)  # the default warns nothing
    assert "no pipeline" in _header(format_report(base, ref)) and "1f1b" not in _header(
        format_report(base, ref)
    )


@pytest.mark.parametrize("schedule", ["zb-h1", "zb-v", "dualpipev"])
def test_a_zero_bubble_schedule_at_pp1_is_labelled_and_warned_with_what_remains(schedule):
    ref = simulate(load_scenario(SEED)).report
    scn = load_scenario(SEED, [("parallel.schedule", schedule)])
    rep = simulate(scn).report
    # no bubble to fill: deferring the weight-gradient passes can only expose gradient reduce
    assert rep.breakdown_s["compute"] == pytest.approx(ref.breakdown_s["compute"], rel=1e-9)
    assert rep.step_time_s >= ref.step_time_s * (1 - 1e-12)
    head = _header(format_report(scn, rep))
    assert f"no pipeline ({schedule} order)" in head and "vp=" not in head
    warned = [w for w in rep.warnings if w.startswith(f'parallel.schedule = "{schedule}"')]
    assert len(warned) == 1 and "no pipeline bubble to fill at pp = 1" in warned[0]


def test_gpipe_at_pp1_is_a_real_choice_and_is_labelled_not_warned():
    # all forwards first: every micro-batch's activations are held (more memory than 1F1B's)
    scn = load_scenario(SEED, [("parallel.schedule", "gpipe")])
    rep = simulate(scn).report
    assert rep.memory.peak_bytes > simulate(load_scenario(SEED)).report.memory.peak_bytes
    assert "no pipeline (gpipe order)" in _header(format_report(scn, rep))
    assert not any("parallel.schedule" in w for w in rep.warnings)


def test_vp_at_pp1_is_refused_naming_the_key(capsys):
    assert main(["run", str(SEED), "--set", "parallel.vp=2"]) == 2
    assert "parallel.vp" in capsys.readouterr().err


def test_pp_above_1_still_shows_its_schedule():
    scn = load_scenario(TEACHING)
    par = scn.parallel
    assert par.pp > 1
    head = _header(format_report(scn, simulate(scn).report))
    assert "no pipeline" not in head and par.schedule in head


def test_compare_labels_pp1_as_no_pipeline():
    seed = load_scenario(SEED, [("parallel.schedule", "zb-v")])
    items = compare([seed, load_scenario(TEACHING)], ["seed", "teaching"])
    row = next(ln for ln in format_comparison(items).splitlines() if ln.strip().startswith("schedule"))
    assert "no pipeline (zb-v order)" in row and load_scenario(TEACHING).parallel.schedule in row


def test_sweep_rows_at_pp1_are_labelled_and_do_not_warn(capsys):
    argv = ["sweep", str(SEED), "--set", "parallel.schedule=zb-h1", "--engine", "analytic", "--jobs", "1"]
    for key, value in (("tp", "[1]"), ("pp", "[1,2]"), ("micro_batch", "[1]"), ("recompute", '["none"]')):
        argv += ["--set", f"sweep.{key}={value}"]
    argv += ["--set", "sweep.zero=[1]"]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    head = next(ln for ln in lines if " sched " in ln)
    rows = [ln for ln in lines if ln.strip()[:1].isdigit() and "%" in ln]
    by_pp = {int(r.split()[2]): r for r in rows}
    assert set(by_pp) == {1, 2}
    assert "no pipeline (zb-h1 order)" in by_pp[1] and "no pipeline" not in by_pp[2] and " zb-h1 " in by_pp[2]
    for row in rows:  # the columns after the schedule stay aligned under their headings
        assert row[head.index("recomp") :].startswith("none")
    assert "has no pipeline to schedule" not in err


# ----------------------------------------------------------------------------- 3. overrides
OVERRIDES = ["--unset", "parallel.dp", "--set", "cluster.num_gpus=8"]


def test_run_names_its_overrides_under_the_title(capsys):
    assert main(["run", str(TEACHING), *OVERRIDES]) == 0
    lines = capsys.readouterr().out.splitlines()
    title = load_scenario(TEACHING).name
    assert lines[0] == title and "4" in title  # the file's name still says 4 GPUs ...
    assert lines[1].strip() == "overrides: --unset parallel.dp, cluster.num_gpus=8"
    assert lines[2].strip().startswith("8 x ")  # ... while 8 are simulated
    assert main(["run", str(TEACHING)]) == 0
    assert "overrides:" not in capsys.readouterr().out


def test_run_json_lists_the_overrides(capsys):
    assert main(["run", str(TEACHING), *OVERRIDES, "--tokens", "1e9", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["overrides"] == ["--unset parallel.dp", "cluster.num_gpus=8", "--tokens 1e+09"]
    assert out["num_gpus"] == 8
    assert main(["run", str(TEACHING), "--json"]) == 0
    assert "overrides" not in json.loads(capsys.readouterr().out)


def test_compare_and_whatif_name_the_overrides(capsys):
    assert main(["compare", str(TEACHING), str(TEACHING), *OVERRIDES]) == 0
    assert "overrides: --unset parallel.dp, cluster.num_gpus=8 (every scenario)" in capsys.readouterr().out
    assert main(["whatif", str(TEACHING), "--set", "parallel.micro_batch=2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert (
        lines[0].startswith(load_scenario(TEACHING).name) and lines[1] == "overrides: parallel.micro_batch=2"
    )


# ----------------------------------------------------------------------------- 4. export source
def _export(capsys, scenario: str, target: Path) -> str:
    argv = ["sweep", scenario, "--engine", "analytic", "--jobs", "1", "--export-best", str(target)]
    for key, value in (("tp", "[1]"), ("pp", "[1]"), ("micro_batch", "[1]"), ("recompute", '["none"]')):
        argv += ["--set", f"sweep.{key}={value}"]
    assert main(argv) == 0
    capsys.readouterr()
    return target.read_text(encoding="utf-8").splitlines()[0]


def test_export_names_a_shipped_scenario_by_its_name_and_a_file_as_given(capsys, tmp_path, monkeypatch):
    head = _export(capsys, "seed-7b-64-a100", tmp_path / "best.toml")
    assert "from seed-7b-64-a100.toml (shipped scenario) with sweep.tp=[1]" in head
    assert str(data_dir("scenarios")) not in head
    monkeypatch.chdir(tmp_path)
    Path("mine.toml").write_text(SEED.read_text(encoding="utf-8"), encoding="utf-8")
    head = _export(capsys, "mine.toml", tmp_path / "best2.toml")
    assert "from mine.toml with sweep.tp=[1]" in head and str(tmp_path) not in head
    # the exported file runs and reproduces the configuration
    assert load_scenario(tmp_path / "best2.toml").parallel.pp == 1
