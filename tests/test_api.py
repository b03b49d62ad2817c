"""`import mfusim` (issue 15): the API, `--set` overrides, scenarios by name, compare, export."""

from __future__ import annotations

import json
import math
import tomllib
from pathlib import Path

import pytest

import mfusim
from simulator.compare import comparison_json, format_comparison
from simulator.describe import scenario_summary
from simulator.export import export_rows, top_targets
from simulator.loading import read_toml, resolve_scenario_path
from simulator.overrides import apply_overrides, parse_override, parse_value
from simulator.resources import data_dir, scenario_names
from tests.conftest import SMALL_PLANNER_SCENARIO

SMALL = SMALL_PLANNER_SCENARIO


@pytest.fixture()
def small(tmp_path: Path) -> Path:
    path = tmp_path / "small.toml"
    path.write_text(SMALL)
    return path


# ----------------------------------------------------------------------------- overrides
@pytest.mark.parametrize(
    "text,value",
    [("4", 4), ("2.5e12", 2.5e12), ("true", True), ('"full"', "full"), ("full", "full"), ("[1, 2]", [1, 2])],
)
def test_override_values_are_toml_literals(text: str, value: object) -> None:
    assert parse_value(text) == value
    assert parse_override(f"parallel.x={text}") == ("parallel.x", value)


@pytest.mark.parametrize("text", ["parallel.tp", "=4", "parallel..tp=4", "a b=1"])
def test_bad_override_names_the_flag(text: str) -> None:
    with pytest.raises(mfusim.ConfigError) as err:
        parse_override(text)
    assert err.value.key == "--set"


def test_overrides_create_tables_and_keep_the_original() -> None:
    data = {"parallel": {"tp": 8}}
    out = apply_overrides(data, [("parallel.tp", 4), ("run.tokens", 1e12)])
    assert out == {"parallel": {"tp": 4}, "run": {"tokens": 1e12}}
    assert data == {"parallel": {"tp": 8}}


def test_overrides_are_validated_like_the_file(small: Path) -> None:
    scn = mfusim.load_scenario(small, {"parallel.tp": 2, "cluster.num_gpus": 16})
    assert (scn.parallel.tp, scn.num_gpus, scn.parallel.dp) == (2, 16, 4)
    with pytest.raises(mfusim.ConfigError) as err:
        mfusim.load_scenario(small, ["parallel.tp=two"])
    # the Python API names its own argument, not the command line's --set flag
    assert err.value.key == "overrides parallel.tp" and "integer" in err.value.message
    with pytest.raises(mfusim.ConfigError) as err:
        mfusim.load_scenario(small, ["parallel.tpp=2"])
    assert err.value.key == "overrides parallel.tpp" and "unknown key" in err.value.message
    # an error the override causes elsewhere still says which override was in play
    with pytest.raises(mfusim.ConfigError) as err:
        mfusim.load_scenario(small, ["parallel.tp=3"])
    assert "overrides parallel.tp" in str(err.value) and "--set" not in str(err.value)


# ----------------------------------------------------------------------------- by name
def test_every_shipped_scenario_resolves_by_name() -> None:
    names = scenario_names()
    assert "llama3-70b-512-h100" in names
    for name in names:
        assert resolve_scenario_path(name) == data_dir("scenarios") / f"{name}.toml"
    with pytest.raises(mfusim.ConfigError, match="no such file"):
        resolve_scenario_path("no-such-scenario")


def test_a_file_wins_over_a_shipped_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "teaching-pp4").write_text(SMALL)
    assert resolve_scenario_path("teaching-pp4") == Path("teaching-pp4")


# ----------------------------------------------------------------------------- API
def test_api_simulate_equals_the_cli_json(capsys: pytest.CaptureFixture[str]) -> None:
    from simulator.cli import main

    report = mfusim.simulate("teaching-pp4")
    assert main(["run", str(resolve_scenario_path("teaching-pp4")), "--json"]) == 0
    cli = json.loads(capsys.readouterr().out)
    assert cli["mfu"] == pytest.approx(report.mfu, rel=1e-12)
    assert cli["step_time_s"] == pytest.approx(report.step_time_s, rel=1e-12)


def test_api_plan_arithmetic_and_overrides() -> None:
    scn = mfusim.load_scenario("llama3-70b-512-h100")
    report = mfusim.simulate(scn)
    p = mfusim.plan(scn, report, tokens=15e12, usd_per_gpu_hour=2.0)
    gpu_hours = 15e12 / report.tokens_per_s / 3600 * scn.num_gpus / p.goodput
    assert p.gpu_hours == pytest.approx(gpu_hours, rel=1e-12)
    assert p.cost_usd == pytest.approx(2.0 * gpu_hours, rel=1e-12)
    never_fails = mfusim.plan(scn, report, tokens=15e12, gpu_failures_per_year=0)
    assert never_fails.goodput == 1.0 and never_fails.gpu_hours < p.gpu_hours
    with pytest.raises(mfusim.ConfigError) as err:
        mfusim.plan(scn, report, tokens=15e12, restart_minutes=5)
    assert err.value.key == "run.restart_minutes"
    with pytest.raises(mfusim.ConfigError) as err:
        mfusim.plan(scn, report)
    assert err.value.key == "run.tokens"


def test_api_sweep_and_compare(small: Path) -> None:
    result = mfusim.sweep(small, engine="analytic")
    assert len(result.rows) == 8 and result.ranked
    assert [r["mfu"] for r in result.ranked] == sorted((r["mfu"] for r in result.ranked), reverse=True)
    items = mfusim.compare(small, "teaching-pp4", run={"tokens": 1e9})
    assert [c.label for c in items] == ["small", "teaching-pp4"]
    assert all(c.plan is not None and c.plan.tokens == 1e9 for c in items)


# ----------------------------------------------------------------------------- describe + compare
def test_json_says_what_was_simulated() -> None:
    scn = mfusim.load_scenario("llama3-70b-512-h100")
    s = scenario_summary(scn)
    assert s["gpu"] == "h100-sxm" and s["dtype"] == "bf16" and s["seq_len"] == scn.model.seq_len
    assert s["mfusim_version"] == mfusim.__version__
    assert s["model"]["name"] == "llama3-70b"
    assert s["model"]["params"] == s["model"]["active_params"]  # dense: every parameter is active
    assert 69e9 < s["model"]["params"] < 72e9


def test_compare_columns_and_strict_json(small: Path) -> None:
    items = mfusim.compare(small, "teaching-pp4")
    text = format_comparison(items)
    assert "MFU" in text and "small" in text and "teaching-pp4" in text
    out = comparison_json(items)
    json.dumps(out, allow_nan=False)
    assert out["best_mfu"] in ("small", "teaching-pp4")
    best = max(items, key=lambda c: c.report.mfu)
    assert out["best_mfu"] == best.label
    for entry, item in zip(out["scenarios"], items, strict=True):
        assert entry["mfu"] == item.report.mfu
        assert math.isclose(sum(entry["breakdown_s"].values()), entry["step_time_s"], rel_tol=1e-6)
        assert entry["gpu"] == "a100-80gb" and "plan" not in entry


# ----------------------------------------------------------------------------- export
def test_exported_best_reproduces_the_sweep_row(small: Path, tmp_path: Path) -> None:
    """The exported scenario runs, and its MFU equals the sweep row's (engine-evaluated rows)."""
    result = mfusim.sweep(small, engine="des")
    best = result.ranked[:2]
    out_dir = tmp_path / "elsewhere" / "top"
    paths = export_rows(
        read_toml(small), small.parent, best, top_targets(out_dir, best), rank_by="mfu", source=str(small)
    )
    for row, path in zip(best, paths, strict=True):
        data = tomllib.loads(path.read_text())
        assert "sweep" not in data
        scn = mfusim.load_scenario(path)
        assert scn.parallel.tp == row["tp"] and scn.parallel.micro_batch == row["micro_batch"]
        assert mfusim.simulate(scn).mfu == pytest.approx(row["mfu"], rel=1e-9)


def test_api_takes_a_dict_of_tables() -> None:
    tables = {
        "name": "inline",
        "model": {"preset": "gpt3-1.3b"},
        "cluster": {"topology": "dgx-a100", "num_gpus": 8},
        "parallel": {"tp": 2, "global_batch": 16},
        "run": {"tokens": 1e9},
    }
    scn = mfusim.load_scenario(tables, {"parallel.tp": 4})
    assert (scn.parallel.tp, scn.parallel.dp, scn.name) == (4, 2, "inline")
    assert mfusim.plan(scn).tokens == 1e9
    assert [c.label for c in mfusim.compare(tables)] == ["inline"]
    with pytest.raises(mfusim.ConfigError) as err:
        mfusim.load_scenario(tables, {"parallel.tp": "four"})
    assert err.value.key == "overrides parallel.tp"


def test_api_sweep_rank_by_the_plan_needs_a_run(small: Path) -> None:
    with pytest.raises(mfusim.ConfigError) as err:
        mfusim.sweep(small, engine="analytic", rank_by="cost")
    assert err.value.key == "rank_by"
    scn = mfusim.load_scenario(small, {"run.tokens": 1e10})
    days = [
        r["time_to_train_days"] for r in mfusim.sweep(scn, engine="analytic", rank_by="time_to_train").ranked
    ]
    assert days == sorted(days) and days
