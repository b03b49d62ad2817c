"""`accuracy` in every JSON output and the text report: the validation set's error on published
runs of the scenario's GPU architecture, model kind and precision class (simulator/describe.py,
simulator/catalog/accuracy.toml written by benchmarks/accuracy_report.py)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from simulator import validate as V
from simulator.describe import PRECISION_CLASS, accuracy_group_of, accuracy_summary, accuracy_table
from simulator.loading import load_scenario
from simulator.resources import catalog_file, published_runs_csv
from simulator.run import format_report
from simulator.simulate import simulate
from tests.conftest import load_benchmark

ROOT = Path(__file__).resolve().parents[1]


def _report_module():
    return load_benchmark("accuracy_report")


def test_groups_of_shipped_gpus_and_user_gpus():
    assert accuracy_group_of("h100-sxm", False, "bf16") == ("hopper", "dense", "16bit")
    assert accuracy_group_of("gb300", True, "mxfp8") == ("blackwell", "moe", "fp8")
    assert accuracy_group_of("a100-80gb", False, "fp16") == ("ampere", "dense", "16bit")
    # a GPU from a user's topology file is not judged by another chip's record
    assert accuracy_group_of("my-own-gpu", False, "bf16")[0] == "other"
    assert "other" not in accuracy_table()
    assert set(PRECISION_CLASS.values()) == {"16bit", "fp8", "fp4", "fp32"}
    assert "fp32" not in accuracy_table().get("ampere", {}).get("dense", {})


def test_run_reports_its_group_from_the_table():
    # the A100 scenario runs the default stack (megatron-core), which has no A100 calibration run:
    # its own figure is absent and the group's runs of the other stacks are named as such
    scn = load_scenario(ROOT / "scenarios" / "gpt3-175b-1024-a100.toml")
    acc = accuracy_summary(scn)
    row = accuracy_table()["ampere"]["dense"]["16bit"]
    assert acc["group"] == "ampere dense 16bit" and acc["stack"] == "megatron-core" and acc["rows"] == 0
    pooled = acc["all_stacks"]
    assert pooled["rows"] == row["rows"] > 100
    assert pooled["mape_pct"] == row["mape_pct"] and pooled["bias_pct"] == row["bias_pct"]
    text = format_report(scn, simulate(scn).report)
    assert "no published ampere dense 16bit run of the megatron-core stack" in text
    assert f"other stacks' {row['rows']} ampere dense 16bit runs" in text


def test_a_group_without_published_runs_gives_no_figure(tmp_path):
    # no V100 run is in the validation set: the report says so instead of borrowing a figure
    path = tmp_path / "v100.toml"
    path.write_text(
        'name = "v100"\n[model]\npreset = "gpt3-1.3b"\n[cluster]\ntopology = "dgx-a100"\ngpu = "v100-32gb"\n'
        "num_gpus = 8\n[parallel]\ntp = 1\npp = 1\nmicro_batch = 1\nglobal_batch = 8\n[precision]\n"
        'dtype = "fp16"\n'
    )
    scn = load_scenario(path)
    acc = accuracy_summary(scn)
    assert acc["group"] == "volta dense 16bit" and acc["rows"] == 0 and acc["mape_pct"] is None
    assert "no published volta dense 16bit run" in format_report(scn, simulate(scn).report)


def test_table_matches_validate_on_the_shipped_csv():
    """The shipped table is what `mfusim validate` gives now (regenerate with
    `python benchmarks/accuracy_report.py` after any change that moves validate)."""
    runs = V.read_runs_csv(published_runs_csv())
    report = V.validate_runs(runs, V.default_simulate(), progress=False, jobs=2)
    fresh = tomllib.loads(_report_module().accuracy_toml(report))
    with open(catalog_file("accuracy.toml"), "rb") as fh:
        shipped = tomllib.load(fh)
    assert fresh.keys() == shipped.keys()
    assert fresh["stacks"].keys() == shipped["stacks"].keys()
    by_stack = [
        ((stack, arch), kinds)
        for stack, archs in fresh.pop("stacks").items()
        for arch, kinds in archs.items()
    ]
    shipped = {**shipped, **{key: shipped["stacks"][key[0]][key[1]] for key, _ in by_stack}}
    for arch, kinds in [*fresh.items(), *by_stack]:
        for kind, precisions in kinds.items():
            for precision, row in precisions.items():
                old = shipped[arch][kind][precision]
                assert row["rows"] == old["rows"], (arch, kind, precision)
                assert row["mape_pct"] == pytest.approx(old["mape_pct"], abs=0.051), (arch, kind, precision)
                assert row["bias_pct"] == pytest.approx(old["bias_pct"], abs=0.051), (arch, kind, precision)
