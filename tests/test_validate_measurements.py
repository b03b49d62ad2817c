"""validate: an impossible measurement is one unusable row with its reason; it never reaches
the aggregates (issue 18)."""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

import pytest

from simulator.resources import published_runs_csv
from simulator.validate import read_runs_csv, validate_runs
from simulator.validate.cases import Unusable, build_case, measurement_problem


def _rows() -> tuple[list[str], list[dict[str, str]]]:
    text = published_runs_csv().read_text(encoding="utf-8-sig")
    reader = csv.DictReader(io.StringIO(text))
    return list(reader.fieldnames or []), list(reader)


def _first_usable(rows: list[dict[str, str]], tmp_path: Path) -> tuple[list[str], dict[str, str]]:
    header, _ = _rows()
    for row in rows:
        path = tmp_path / "one.csv"
        _write(path, header, [row])
        case = build_case(read_runs_csv(path)[0])
        if not isinstance(case, Unusable):
            return header, row
    raise AssertionError("no usable row in the shipped CSV")


def _matching_step(path: Path) -> float:
    """The stand-in step time at which the first row of `path` is predicted exactly as measured."""
    from simulator.validate.conventions import predicted_value
    from simulator.validate.runner import scenario_for

    case = build_case(read_runs_csv(path)[0])
    assert not isinstance(case, Unusable)
    p1 = predicted_value(case, scenario_for(case), 1.0)
    return 1.0 if case.metric == "iteration_time_s" else p1 / case.measured


def _write(path: Path, header: list[str], rows: list[dict[str, str]]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=header)
        w.writeheader()
        w.writerows(rows)


class _Report:
    def __init__(self, step_time_s: float) -> None:
        self.step_time_s = step_time_s
        self.mfu = 0.4
        self.memory = None


class _FixedStep:
    """A stand-in simulator: every scenario takes `step_time_s` at 40% MFU (keeps the test fast)."""

    def __init__(self, step_time_s: float) -> None:
        self.report = _Report(step_time_s)

    def __call__(self, scenario: object) -> object:
        return self


@pytest.mark.parametrize(
    ("column", "value", "needle"),
    [
        ("measured_mfu_pct", "500", "above 100%"),
        ("measured_mfu_pct", "nan", "not a finite"),
        ("iteration_time_s", "inf", "not a finite"),
        ("iteration_time_s", "-3", "not positive"),
        ("tokens_per_s", "0", "not positive"),
    ],
)
def test_impossible_measurement_is_unusable(tmp_path: Path, column: str, value: str, needle: str) -> None:
    header, rows = _rows()
    header, good = _first_usable(rows, tmp_path)
    if column not in header:
        pytest.skip(f"{column} not in the shipped CSV")
    bad = dict(good, **{column: value, "run_id": "bad-row"} if "run_id" in header else {column: value})
    path = tmp_path / "runs.csv"
    _write(path, header, [good, bad])
    runs = read_runs_csv(path)
    step = _matching_step(path)
    assert measurement_problem(runs[0]) is None
    problem = measurement_problem(runs[1])
    assert problem is not None and needle in problem and column in problem
    report = validate_runs(runs, _FixedStep(step), progress=False)
    assert len(report.results) == 1 and len(report.unusable) == 1
    assert "impossible measurement" in report.unusable[0].reason
    mape, n = report.mape()
    assert n == 1 and math.isfinite(mape)


def test_measurement_implying_mfu_over_one_is_unusable(tmp_path: Path) -> None:
    header, rows = _rows()
    header, good = _first_usable(rows, tmp_path)
    path = tmp_path / "runs.csv"
    _write(path, header, [good])
    step = _matching_step(path)  # the good row: implied MFU = the stand-in's 40%
    case = build_case(read_runs_csv(path)[0])
    assert not isinstance(case, Unusable)
    column = case.metric if case.metric in header else "measured_tflops_per_gpu"
    # 1000x the measured throughput (or 1/1000 of the step time): 400% of peak
    factor = 1 / 1000 if column == "iteration_time_s" else 1000
    fast = dict(good, **{column: str(float(good[column]) * factor)})
    _write(path, header, [good, fast])
    report = validate_runs(read_runs_csv(path), _FixedStep(step), progress=False)
    assert len(report.results) == 1 and len(report.unusable) == 1, report.unusable
    assert "above 100% of peak" in report.unusable[0].reason
