"""The work budget (issue 18): what would run for minutes is refused up front, naming the knob
and the limit; what the shipped scenarios ask for is accepted."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator import budget
from simulator.errors import ConfigError
from simulator.loading import load_scenario
from simulator.resources import data_dir
from tests.conftest import SMALL_SCENARIO


def _scenario(tmp_path: Path, pp: int, global_batch: int, jitter: float = 0.0) -> Path:
    text = (
        SMALL_SCENARIO.replace("layers = 4", f"layers = {pp}")
        .replace("num_gpus = 16", f"num_gpus = {pp}")
        .replace("tp = 2", "tp = 1")
        .replace("pp = 2", f"pp = {pp}")
        .replace("dp = 4", "dp = 1")
        .replace("global_batch = 16", f"global_batch = {global_batch}")
        .replace("compute_jitter = 0.0", f"compute_jitter = {jitter}")
    )
    path = tmp_path / "s.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("name", sorted(p.stem for p in data_dir("scenarios").glob("*.toml")))
def test_shipped_scenarios_fit_with_trace_and_plot(name: str) -> None:
    scn = load_scenario(data_dir("scenarios") / f"{name}.toml")
    budget.check_run(scn, trace=True, plot=True)
    budget.check_whatif(scn, 20)


def test_jittered_step_beyond_the_budget_names_global_batch(tmp_path: Path) -> None:
    # 64 stages x 3,900 micro-batches with jitter: every task replayed in simpy (~50 s, measured)
    scn = load_scenario(_scenario(tmp_path, 64, 3900, jitter=0.05))
    with pytest.raises(ConfigError) as info:
        budget.check_run(scn)
    assert info.value.key == "parallel.global_batch" and "budget" in info.value.message
    assert str(info.value.file).endswith("s.toml")
    smaller = load_scenario(_scenario(tmp_path, 64, 1500, jitter=0.05))
    budget.check_run(smaller)  # one step: ~20 s
    with pytest.raises(ConfigError) as info:
        budget.check_run(smaller, samples=3)
    assert info.value.key == "--samples" and "--samples 2 or fewer" in info.value.message


def test_trace_size_is_budgeted(tmp_path: Path) -> None:
    scn = load_scenario(_scenario(tmp_path, 64, 3900))
    budget.check_run(scn)  # quiet: extended from short replays
    with pytest.raises(ConfigError) as info:
        budget.check_run(scn, trace=True)
    assert info.value.key == "--trace" and "spans" in info.value.message and "GiB" in info.value.message
    with pytest.raises(ConfigError) as info:
        budget.check_run(scn, plot=True)
    assert info.value.key == "--plot"


def test_spans_estimate_counts_what_the_engine_records(tmp_path: Path) -> None:
    from simulator.simulate import simulate

    scn = load_scenario(_scenario(tmp_path, 4, 64))
    spans = len(simulate(scn, detail=True).timeline.spans)
    assert 0.8 * spans <= budget.estimated_spans(scn) <= 1.3 * spans


def test_sweep_size_is_budgeted() -> None:
    budget.check_sweep(1728, engine="auto", jobs=2, refine=3, step_s=1.0)
    with pytest.raises(ConfigError) as info:
        budget.check_sweep(10**6, engine="analytic", jobs=2, refine=3, step_s=1.0)
    assert info.value.key == "sweep" and "configurations" in info.value.message
    with pytest.raises(ConfigError):
        budget.check_sweep(500, engine="des", jobs=2, refine=3, step_s=1.0)


def test_budget_can_be_raised_for_a_faster_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    scn = load_scenario(_scenario(tmp_path, 64, 3900))
    monkeypatch.setenv(budget.ENV_BUDGET, "1e9")
    with pytest.raises(ConfigError, match="GiB"):  # memory still bounds the trace
        budget.check_run(scn, trace=True)
    monkeypatch.setenv(budget.ENV_BUDGET, "-1")
    with pytest.raises(ConfigError, match=budget.ENV_BUDGET):
        budget.check_run(scn, samples=2)


def test_cli_refusal_is_one_line(tmp_path: Path, run_cli) -> None:
    path = _scenario(tmp_path, 64, 3900)
    res = run_cli(["run", str(path), "--trace", str(tmp_path / "t.json")])
    assert res.code == 2 and len(res.err_lines) == 1 and "--trace" in res.err
    assert not (tmp_path / "t.json").exists()
