#!/usr/bin/env python
"""Does a per-step cost that grows with scale hide in the published series? (issue 12, scale)

    python benchmarks/scale_fit.py

A diagnosis only: nothing here is fitted into the model, and the held-out runs are read as test
data (benchmarks/heldout_report.py), never as calibration. Two tests on series of runs that keep
the per-replica layout (tp, pp, vp, micro-batch) and change only the data-parallel degree:

* pairs with the same micro-batches per replica: the per-replica work is identical, so any change
  of the measured step is a cost that grows with dp (and with N); printed next to the model's;
* strong-scaling series (one global batch, dp grows, micro-batches m per replica fall): the step
  is fitted as a + m·b by least squares, once to the measured and once to the predicted steps.
  b is the busiest stage's time per micro-batch, a the per-step part (pipeline fill/drain,
  exposed gradient reduction, optimizer, anything per step); a gap in a that does not grow with dp
  across the series is a per-step cost the model lacks, a gap in b is per-GPU throughput.

Held-out rows come from scenarios/heldout*/ (measured.toml), calibration rows from
scenarios/published/calibration_runs.csv run as `mfusim validate` runs them (measured step =
predicted step × the ratio of the row's throughput metric, predicted / measured).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from heldout_report import HELDOUT, PAPERS2, evaluate  # noqa: E402

import mfusim  # noqa: E402


@dataclass(frozen=True)
class Point:
    run_id: str
    num_gpus: int
    dp: int
    microbatches: int  # per pipeline replica and step
    layout: str  # tp, pp, vp, micro-batch: a series keeps it
    predicted_s: float
    measured_s: float


HELDOUT_SERIES: tuple[tuple[str, Path, tuple[str, ...]], ...] = (
    (
        "MegaScale Megatron-LM 175B, batch 768 (held out)",
        PAPERS2,
        tuple(f"megascale_mlm_175b_{n}gpu" for n in (256, 512, 768, 1024)),
    ),
    (
        "MegaScale Megatron-LM 175B, batch 6144 (held out)",
        PAPERS2,
        tuple(f"megascale_mlm_175b_{n}gpu" for n in (3072, 6144, 8192, 12288)),
    ),
    ("Nemotron-4 340B (held out)", HELDOUT, tuple(f"nemotron4_340b_{n}gpu" for n in (1536, 3072, 6144))),
    ("Llama 3 405B, 8k tokens (held out)", HELDOUT, ("llama3_405b_8192gpu_cp1", "llama3_405b_16384gpu_cp1")),
    (
        "Nemotron-4 15B batch ramp (held out; weak scaling, 2 micro-batches per replica)",
        PAPERS2,
        tuple(f"nemotron4_15b_{n}gpu" for n in (768, 1536, 2304)),
    ),
)
CSV_SERIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "Narayanan 2021 GPT-3 175B (calibration CSV)",
        tuple(f"narayanan21_t2_ptd_174.6B_{n}gpu" for n in (384, 768, 1536)),
    ),
    (
        "Narayanan 2021 530B (calibration CSV)",
        tuple(f"narayanan21_t2_ptd_529.6B_{n}gpu" for n in (560, 1120, 2240)),
    ),
)


def layout_of(scn: mfusim.Scenario) -> str:
    par = scn.parallel
    return f"tp {par.tp} pp {par.pp} vp {par.vp} mb {par.micro_batch}"


def heldout_points(directory: Path, ids: tuple[str, ...]) -> list[Point]:
    rows = {r.run_id: r for r in evaluate(directory)}
    out = []
    for run_id in ids:
        scn = mfusim.load_scenario(directory / f"{run_id}.toml")
        r = rows[run_id]
        out.append(point(run_id, scn, r.predicted_step_s, r.measured_step_s))
    return out


def point(run_id: str, scn: Any, predicted_s: float, measured_s: float) -> Point:
    """One run of a series: its layout and replica count from the scenario, the two step times."""
    par = scn.parallel
    return Point(
        run_id, scn.num_gpus, par.dp, par.microbatches_per_run, layout_of(scn), predicted_s, measured_s
    )


def csv_points(ids: tuple[str, ...]) -> list[Point]:
    from simulator.validate.cases import Unusable, build_case
    from simulator.validate.columns import METRIC_ITERATION_TIME
    from simulator.validate.runner import evaluate as evaluate_case
    from simulator.validate.runner import scenario_for, simulate_report
    from simulator.validate.runs import read_runs_csv

    runs = {r.run_id: r for r in read_runs_csv(ROOT / "scenarios" / "published" / "calibration_runs.csv")}
    out = []
    for run_id in ids:
        case = build_case(runs[run_id])
        if isinstance(case, Unusable):
            raise SystemExit(f"{run_id}: {case}")
        scn = scenario_for(case)
        row = evaluate_case(case, scn, simulate_report)
        if case.metric == METRIC_ITERATION_TIME:
            measured = case.measured
        else:  # a throughput: step time is inversely proportional to it
            measured = row.step_time_s * row.predicted / case.measured
        out.append(point(run_id, scn, row.step_time_s, measured))
    return out


def fit(ms: list[int], steps: list[float]) -> tuple[float, float]:
    """Least-squares a, b of step = a + m·b."""
    n = len(ms)
    mean_m, mean_s = sum(ms) / n, sum(steps) / n
    var = sum((m - mean_m) ** 2 for m in ms)
    b = sum((m - mean_m) * (s - mean_s) for m, s in zip(ms, steps, strict=True)) / var
    return mean_s - b * mean_m, b


def report(label: str, points: list[Point]) -> None:
    layouts = {p.layout for p in points}
    if len(layouts) != 1:
        raise SystemExit(f"{label}: the runs differ in layout ({', '.join(sorted(layouts))})")
    print(f"\n{label} ({points[0].layout})")
    print("  run                                      GPUs    dp    m  predicted  measured   error")
    for p in points:
        print(
            f"  {p.run_id:40s} {p.num_gpus:5d} {p.dp:5d} {p.microbatches:4d} {p.predicted_s:9.3f} "
            f"{p.measured_s:9.3f} {100 * (p.measured_s / p.predicted_s - 1):+6.1f}%"
        )
    ms = [p.microbatches for p in points]
    if len(set(ms)) >= 2:
        a_p, b_p = fit(ms, [p.predicted_s for p in points])
        a_m, b_m = fit(ms, [p.measured_s for p in points])
        print(
            f"  step = a + m·b: measured a = {a_m:.2f} s, b = {1e3 * b_m:.1f} ms; predicted a = {a_p:.2f} s, "
            f"b = {1e3 * b_p:.1f} ms  (a gap {a_m - a_p:+.2f} s, b gap {100 * (b_m / b_p - 1):+.1f}%)"
        )


def same_work_pairs(points: list[Point]) -> None:
    """Runs of one layout and one m, any series: the same per-replica work at another dp."""
    by_key: dict[tuple[str, int], list[Point]] = {}
    for p in points:
        by_key.setdefault((p.layout, p.microbatches), []).append(p)
    print("\nSame per-replica work (layout and m), larger dp:")
    for (layout, m), same in sorted(by_key.items()):
        same = sorted(same, key=lambda p: p.dp)
        for lo, hi in zip(same, same[1:], strict=False):
            print(
                f"  {lo.run_id} -> {hi.run_id} ({layout}, m {m}, dp {lo.dp} -> {hi.dp}): measured step "
                f"{100 * (hi.measured_s / lo.measured_s - 1):+.1f}%, predicted {100 * (hi.predicted_s / lo.predicted_s - 1):+.1f}%"
            )


def main() -> None:
    everything: list[Point] = []
    for label, directory, ids in HELDOUT_SERIES:
        points = heldout_points(directory, ids)
        report(label, points)
        everything += points
    for label, ids in CSV_SERIES:
        points = csv_points(ids)
        report(label, points)
        everything += points
    same_work_pairs(everything)


if __name__ == "__main__":
    main()
