"""The planner's commands (issue 15): run --tokens, --set, compare, sweep --rank-by/--export, presets."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from simulator.cli import main
from tests.conftest import SMALL_PLANNER_SCENARIO

SMALL = SMALL_PLANNER_SCENARIO + "num_gpus = [8, 16]\n"  # [sweep] also over cluster size


@pytest.fixture()
def small(tmp_path: Path) -> Path:
    path = tmp_path / "small.toml"
    path.write_text(SMALL)
    return path


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def _error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    return err


def test_run_by_name_with_a_plan(capsys: pytest.CaptureFixture[str]) -> None:
    out = _json(
        capsys, ["run", "llama3-70b-512-h100", "--json", "--tokens", "15e12", "--usd-per-gpu-hour", "2"]
    )
    plan = out["plan"]
    gpu_hours = 15e12 / out["tokens_per_s"] / 3600 * out["num_gpus"] / plan["goodput"]
    assert plan["gpu_hours"] == pytest.approx(gpu_hours, rel=1e-12)
    assert plan["cost_usd"] == pytest.approx(2 * gpu_hours, rel=1e-12)
    assert plan["days"] == pytest.approx(gpu_hours / out["num_gpus"] / 24, rel=1e-12)
    assert sum(plan["time_fractions"].values()) == pytest.approx(1.0)
    # what was simulated
    assert (out["gpu"], out["dtype"], out["seq_len"]) == ("h100-sxm", "bf16", 8192)
    assert out["model"]["name"] == "llama3-70b" and "mfusim_version" in out and out["warnings"] == []


def test_run_text_shows_the_plan(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "teaching-pp4", "--tokens", "1e9"]) == 0
    text = capsys.readouterr().out
    assert "Whole run" in text and "goodput" in text and "GPU-hours" in text


def test_set_changes_the_scenario_and_is_validated(capsys: pytest.CaptureFixture[str], small: Path) -> None:
    out = _json(
        capsys, ["run", str(small), "--json", "--set", "parallel.tp=2", "--set", "cluster.num_gpus=16"]
    )
    assert (out["parallel"]["tp"], out["num_gpus"], out["parallel"]["dp"]) == (2, 16, 4)
    assert "--set parallel.tp" in _error(capsys, ["run", str(small), "--set", "parallel.tp=two"])
    assert "--set parallel.tpp" in _error(capsys, ["run", str(small), "--set", "parallel.tpp=2"])
    assert "--set" in _error(capsys, ["run", str(small), "--set", "parallel.tp"])
    assert "--usd-per-gpu-hour" in _error(capsys, ["run", str(small), "--usd-per-gpu-hour", "2"])
    assert "no such file" in _error(capsys, ["run", "no-such-scenario"])


def test_whatif_takes_set(capsys: pytest.CaptureFixture[str], small: Path) -> None:
    assert "--set parallel.pp" in _error(capsys, ["whatif", str(small), "--set", "parallel.pp=3"])


def test_compare(capsys: pytest.CaptureFixture[str], small: Path, tmp_path: Path) -> None:
    out = _json(capsys, ["compare", str(small), "teaching-pp4", "--json", "--tokens", "1e9"])
    labels = [s["label"] for s in out["scenarios"]]
    assert labels == ["small", "teaching-pp4"]
    assert out["best_mfu"] == max(out["scenarios"], key=lambda s: s["mfu"])["label"]
    assert all("plan" in s and s["plan"]["tokens"] == 1e9 for s in out["scenarios"])
    plot = tmp_path / "cmp.png"
    assert main(["compare", str(small), "teaching-pp4", "--plot", str(plot)]) == 0
    assert "MFU" in capsys.readouterr().out and plot.stat().st_size > 0


def test_sweep_rank_by_cost_fills_the_plan_columns(
    capsys: pytest.CaptureFixture[str], small: Path, tmp_path: Path
) -> None:
    out = tmp_path / "s.csv"
    argv = ["sweep", str(small), "--engine", "analytic", "--jobs", "1", "--out", str(out), "--json"]
    res = _json(capsys, argv + ["--rank-by", "cost", "--tokens", "1e10", "--usd-per-gpu-hour", "2"])
    costs = [r["cost_usd"] for r in res["top"]]
    assert costs == sorted(costs) and res["model"]["name"] == "gpt3-1.3b"
    rows = [r for r in csv.DictReader(out.open()) if r["status"] == "ok"]
    for r in rows:
        gpu_hours = 1e10 / float(r["tokens_per_s"]) / 3600 * int(r["num_gpus"]) / float(r["goodput"])
        assert float(r["gpu_hours"]) == pytest.approx(gpu_hours, rel=1e-9)
        assert float(r["cost_usd"]) == pytest.approx(2 * gpu_hours, rel=1e-9)
    days = _json(capsys, argv + ["--rank-by", "time_to_train", "--tokens", "1e10"])["top"]
    assert [r["time_to_train_days"] for r in days] == sorted(r["time_to_train_days"] for r in days)
    assert "--rank-by" in _error(capsys, ["sweep", str(small), "--rank-by", "cost"])


def test_export_best_runs_and_reproduces_the_row(
    capsys: pytest.CaptureFixture[str], small: Path, tmp_path: Path
) -> None:
    best = tmp_path / "out" / "best.toml"
    best.parent.mkdir()
    top_dir = tmp_path / "top"
    argv = ["sweep", str(small), "--engine", "des", "--jobs", "1", "--json"]
    res = _json(capsys, argv + ["--export-best", str(best), "--export-top", "3", str(top_dir)])
    row = res["top"][0]
    ran = _json(capsys, ["run", str(best), "--json"])
    assert ran["mfu"] == pytest.approx(row["mfu"], rel=1e-9)
    assert ran["parallel"]["tp"] == row["tp"] and ran["num_gpus"] == row["num_gpus"]
    files = sorted(top_dir.glob("*.toml"))
    assert len(files) == 3
    for f, r in zip(files, res["top"][:3], strict=True):
        assert _json(capsys, ["run", str(f), "--json"])["mfu"] == pytest.approx(r["mfu"], rel=1e-9)
    assert "--export-best" in _error(capsys, ["sweep", str(small), "--export-best", str(small)])


def test_presets_lists_the_shipped_scenarios(capsys: pytest.CaptureFixture[str]) -> None:
    out = _json(capsys, ["presets", "--json"])
    assert "llama3-70b-512-h100" in out["scenarios"]
    assert out["gpus"]["h100-sxm"]["board_power_w"] == 700.0


def test_export_top_rows_are_engine_checked(
    capsys: pytest.CaptureFixture[str], small: Path, tmp_path: Path
) -> None:
    """With --engine auto, --export-top K has the engine re-simulate the best K, so every exported
    file reproduces its row exactly."""
    top_dir = tmp_path / "top"
    argv = ["sweep", str(small), "--jobs", "1", "--json", "--refine", "1", "--export-top", "4", str(top_dir)]
    res = _json(capsys, argv)
    assert [r["engine"] for r in res["top"][:4]] == ["des"] * 4
    for f, r in zip(sorted(top_dir.glob("*.toml")), res["top"][:4], strict=True):
        assert _json(capsys, ["run", str(f), "--json"])["mfu"] == pytest.approx(r["mfu"], rel=1e-9)


def test_resume_with_another_run_table_replans_the_old_rows(
    capsys: pytest.CaptureFixture[str], small: Path, tmp_path: Path
) -> None:
    """The resume fingerprint leaves [run] out (a plan is arithmetic on a row): rows read back are
    re-planned with the current tokens and price, in the result and in the file."""
    out = tmp_path / "s.csv"
    argv = ["sweep", str(small), "--engine", "analytic", "--jobs", "1", "--out", str(out), "--json"]
    first = _json(capsys, argv + ["--tokens", "1e10", "--usd-per-gpu-hour", "2"])
    again = _json(
        capsys, argv + ["--resume", "--tokens", "2e10", "--usd-per-gpu-hour", "2", "--rank-by", "cost"]
    )
    by_key = {(r["tp"], r["pp"], r["micro_batch"], r["num_gpus"]): r for r in first["top"]}
    for r in again["top"]:
        old = by_key[(r["tp"], r["pp"], r["micro_batch"], r["num_gpus"])]
        assert r["gpu_hours"] == pytest.approx(2 * old["gpu_hours"], rel=1e-9)
    for r in csv.DictReader(out.open()):
        if r["status"] == "ok":
            gpu_hours = 2e10 / float(r["tokens_per_s"]) / 3600 * int(r["num_gpus"]) / float(r["goodput"])
            assert float(r["gpu_hours"]) == pytest.approx(gpu_hours, rel=1e-9)
    plain = _json(capsys, argv + ["--resume"])  # no [run] now: the plan columns are emptied
    assert all(r["gpu_hours"] is None for r in plain["top"])
