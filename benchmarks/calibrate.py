#!/usr/bin/env python
"""Fit the per-GPU efficiency parameters of simulator/catalog/efficiency.toml to published runs.

    python benchmarks/calibrate.py            # fit, report, write efficiency.toml
    python benchmarks/calibrate.py --dry-run  # fit and report only

What is fitted (docs/calibration.md): only the fields of `simulator.specs.GPUEfficiency`
(matmul_peak_fraction, matmul_ramp_flop, attention_peak_fraction, memory_bw_fraction,
kernel_launch_s, nccl_bw_fraction, overlap_slowdown), one set per GPU type (FIT_PLAN):
a100-80gb, a100-40gb and h100-sxm on their dense BF16/FP16 rows (the accuracy target);
b200, gb200 and gb300 on their dense FP8 rows, the only dense runs published for Blackwell.
h200/h800 inherit the h100-sxm fit and b300 the b200 fit (same silicon). Never a parameter per
run or per source.

On what: the dense rows of those dtypes in scenarios/published/calibration_runs.csv that
`mfusim validate` can simulate, split deterministically. Within each (source, GPU, dtype)
group the rows are ordered by SHA-256 of their id; even positions are *fit* rows, odd positions
are *held out* (never seen by the optimizer). H100 FP8 rows are not fitted (they would pull the
one set of H100 efficiencies away from the BF16 target); their error is reported by
`mfusim validate`.

How: the objective is the mean |log(predicted / measured)| over the fit rows (≈ MAPE, but
symmetric) plus a weak quadratic pull toward the prior values, minimized by a small
Nelder–Mead written here (numpy only). Parameters are optimized in a transformed space
(logit for fractions, log for times and sizes) so every trial point is valid. The
discrete-event engine costs up to ~10 s on the 1,000-GPU pipelines, so the optimizer works
on the closed-form estimate of the same costed program, corrected per row by the ratio
engine/closed-form measured at the current parameters (space mapping); the correction is
refreshed with the engine after each round. Final errors are from the engine.

Deterministic: no random numbers; the same CSV and code give the same file.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import re
import sys
import time
import tomllib
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, fields, replace
from datetime import date
from pathlib import Path

import numpy as np

from simulator import validate as V
from simulator.metrics import StepReport
from simulator.resources import catalog_file, published_runs_csv
from simulator.specs import GPUEfficiency, Scenario

FIT_DTYPES = ("bf16", "fp16")
# GPU type -> dtypes of the rows it is fitted on. A100/H100: the dense BF16/FP16 rows (the
# accuracy target). Blackwell: its only dense published runs are FP8/MXFP8 (Megatron-Bridge,
# NeMo), so it is fitted on those; its BF16 predictions then use FP8-fitted efficiencies
# (on H100 the two agree to ~15%, docs/accuracy.md), still far closer than the hand-set prior.
FIT_PLAN: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("a100-80gb", FIT_DTYPES),
    ("a100-40gb", FIT_DTYPES),
    ("h100-sxm", FIT_DTYPES),
    ("b200", ("fp8",)),
    ("gb200", ("fp8",)),
    ("gb300", ("fp8",)),
)
FIT_GPUS = tuple(gpu for gpu, _ in FIT_PLAN)
SUBSET_RULE = (
    "dense rows of the listed dtypes in scenarios/published/calibration_runs.csv usable by `mfusim validate`; "
    "within each (source, GPU, dtype) group ordered by sha256(id): even positions fit, odd positions held out"
)
# GPU types without dense 16-bit runs that share the silicon of a fitted one.
INHERIT: tuple[tuple[str, tuple[str, str]], ...] = (
    (
        "b300",
        (
            "b200",
            "Blackwell Ultra: the same dense BF16/FP8 rates as B200 in gpus.toml; only MoE/NVFP4 runs published",
        ),
    ),
    (
        "h200",
        (
            "h100-sxm",
            "same GH100 die and clocks; more and faster HBM, which the roofline takes from gpus.toml",
        ),
    ),
    ("h800", ("h100-sxm", "same GH100 die; only NVLink is cut, which its topology describes")),
)
PRIOR_WEIGHT = 0.02  # pull toward [default] (per transformed unit², averaged over parameters)


# ----------------------------------------------------------------------------- parameters
@dataclass(frozen=True, slots=True)
class Param:
    name: str
    kind: str  # "fraction" (logit) | "log" | "slowdown" (logit of x / 0.5)
    low: float
    high: float


PARAMS = (
    Param("matmul_peak_fraction", "fraction", 0.2, 0.98),
    Param("matmul_ramp_flop", "log", 1e6, 1e12),
    Param("attention_peak_fraction", "fraction", 0.1, 0.95),
    Param("memory_bw_fraction", "fraction", 0.3, 0.98),
    Param("kernel_launch_s", "log", 1e-7, 1e-4),
    Param("nccl_bw_fraction", "fraction", 0.2, 0.98),
    Param("overlap_slowdown", "fraction", 0.0, 0.5),
)


def _to_unit(p: Param, value: float) -> float:
    """Value -> unbounded coordinate."""
    if p.kind == "log":
        return math.log(min(max(value, p.low), p.high))
    span = p.high - p.low
    u = (min(max(value, p.low), p.high) - p.low) / span
    u = min(max(u, 1e-4), 1 - 1e-4)
    return math.log(u / (1 - u))


def _from_unit(p: Param, x: float) -> float:
    if p.kind == "log":
        return min(max(math.exp(x), p.low), p.high)
    u = 1.0 / (1.0 + math.exp(-x))
    if p.low == 0.0 and u < 1e-3:
        return 0.0  # the logit never reaches a bound of 0; below 0.1% of the range it is 0
    return p.low + (p.high - p.low) * u


def encode(eff: GPUEfficiency) -> np.ndarray:
    return np.array([_to_unit(p, getattr(eff, p.name)) for p in PARAMS])


def decode(x: np.ndarray) -> GPUEfficiency:
    return GPUEfficiency(**{p.name: _from_unit(p, float(v)) for p, v in zip(PARAMS, x, strict=True)})


# ----------------------------------------------------------------------------- rows
@dataclass(frozen=True, slots=True)
class Row:
    case: V.Case
    scenario: Scenario
    fit: bool

    @property
    def gpu(self) -> str:
        return self.scenario.gpu.name


def _hash(run_id: str) -> str:
    return hashlib.sha256(run_id.encode("utf-8")).hexdigest()


def split_rows(cases: Sequence[V.Case]) -> dict[str, bool]:
    """run id -> True for a fit row (even position by id hash within its source/GPU group)."""
    groups: dict[tuple[str, str, str], list[V.Case]] = {}
    for c in cases:
        groups.setdefault((c.source_key, c.gpu, c.dtype), []).append(c)
    out = {}
    for members in groups.values():
        for i, c in enumerate(sorted(members, key=lambda c: _hash(c.run_id))):
            out[c.run_id] = i % 2 == 0
    return out


def load_rows(csv_path: Path, gpus: Sequence[str], dtypes: Sequence[str] = V.TARGET_DTYPES) -> list[Row]:
    cases = []
    for run in V.read_runs_csv(csv_path):
        case = V.build_case(run)
        if isinstance(case, V.Case) and not case.is_moe and case.dtype in dtypes:
            cases.append(case)
    fit = split_rows(cases)
    rows = []
    for c in cases:
        try:
            scn = V.scenario_for(c, source=str(csv_path))
        except Exception as exc:  # noqa: BLE001 - a row the loader rejects is reported, not fatal
            print(f"  skip {c.run_id}: {exc}", file=sys.stderr)
            continue
        if scn.gpu.name in gpus:
            rows.append(Row(case=c, scenario=scn, fit=fit[c.run_id]))
    return rows


def default_efficiency(path: Path | None = None) -> GPUEfficiency:
    """The [default] table of efficiency.toml: the start and the prior of every fit, so a
    second run of this script starts from the same point as the first (reproducible)."""
    with open(path or catalog_file("efficiency.toml"), "rb") as fh:
        table = tomllib.load(fh).get("default", {})
    names = {f.name for f in fields(GPUEfficiency)}
    return GPUEfficiency(**{k: v for k, v in table.items() if k in names})


def with_efficiency(scn: Scenario, eff: GPUEfficiency) -> Scenario:
    return replace(scn, topology=replace(scn.topology, gpu=replace(scn.gpu, efficiency=eff)))


# ----------------------------------------------------------------------------- evaluation
Evaluator = Callable[[Scenario], StepReport]


def engine_evaluator() -> Evaluator:
    from simulator.simulate import simulate

    return lambda scn: simulate(scn).report


def fast_evaluator() -> Evaluator:
    """The closed form of the same costed program (simulator.analytic); the engine without it."""
    try:
        from simulator.analytic import estimate_step
    except ImportError:
        return engine_evaluator()
    return lambda scn: estimate_step(scn)


def step_times(rows: Sequence[Row], eff: GPUEfficiency, fn: Evaluator) -> np.ndarray:
    return np.array([fn(with_efficiency(r.scenario, eff)).step_time_s for r in rows])


def errors_pct(rows: Sequence[Row], times_s: np.ndarray) -> np.ndarray:
    return np.array(
        [
            100.0 * (V.predicted_value(r.case, r.scenario, float(t)) - r.case.measured) / r.case.measured
            for r, t in zip(rows, times_s, strict=True)
        ]
    )


def log_ratios(rows: Sequence[Row], times_s: np.ndarray) -> np.ndarray:
    return np.log1p(errors_pct(rows, times_s) / 100.0)


def row_weights(rows: Sequence[Row], weighting: str) -> np.ndarray:
    """Weights summing to 1: every row alike ('rows'), or every source alike ('sources', so one
    source's software stack does not set the parameters for all the others)."""
    if weighting == "rows":
        return np.full(len(rows), 1.0 / len(rows))
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.case.source_key] = counts.get(r.case.source_key, 0) + 1
    return np.array([1.0 / (len(counts) * counts[r.case.source_key]) for r in rows])


# ----------------------------------------------------------------------------- optimizer
def nelder_mead(
    f: Callable[[np.ndarray], float],
    x0: np.ndarray,
    step: float = 0.4,
    max_evals: int = 300,
    tol: float = 1e-5,
) -> tuple[np.ndarray, float, int]:
    """Nelder & Mead (1965) with the standard coefficients; deterministic initial simplex."""
    n = len(x0)
    simplex = [x0.copy()] + [x0 + step * np.eye(n)[i] for i in range(n)]
    values = [f(x) for x in simplex]
    evals = n + 1
    while evals < max_evals:
        order = np.argsort(values)
        simplex = [simplex[i] for i in order]
        values = [values[i] for i in order]
        if values[-1] - values[0] < tol:
            break
        centroid = np.mean(simplex[:-1], axis=0)
        xr = centroid + (centroid - simplex[-1])
        fr = f(xr)
        evals += 1
        if fr < values[0]:
            xe = centroid + 2.0 * (centroid - simplex[-1])
            fe = f(xe)
            evals += 1
            simplex[-1], values[-1] = (xe, fe) if fe < fr else (xr, fr)
        elif fr < values[-2]:
            simplex[-1], values[-1] = xr, fr
        else:
            inside = fr >= values[-1]
            xc = centroid + 0.5 * ((simplex[-1] if inside else xr) - centroid)
            fc = f(xc)
            evals += 1
            if fc < min(fr, values[-1]):
                simplex[-1], values[-1] = xc, fc
            else:  # shrink toward the best point
                for i in range(1, n + 1):
                    simplex[i] = simplex[0] + 0.5 * (simplex[i] - simplex[0])
                    values[i] = f(simplex[i])
                evals += n
    best = int(np.argmin(values))
    return simplex[best], values[best], evals


@dataclass(frozen=True, slots=True)
class FitResult:
    gpu: str
    prior: GPUEfficiency
    fitted: GPUEfficiency
    fit_mape_before: float
    held_mape_before: float
    fit_mape: float
    held_mape: float
    num_fit: int
    num_held: int
    evals: int
    seconds: float
    dtypes: tuple[str, ...] = FIT_DTYPES


def calibrate_gpu(
    gpu: str,
    rows: Sequence[Row],
    *,
    rounds: int,
    max_evals: int,
    log: Callable[[str], None],
    prior_weight: float = PRIOR_WEIGHT,
    weighting: str = "rows",
    dtypes: tuple[str, ...] = FIT_DTYPES,
) -> FitResult:
    t0 = time.time()
    fit_rows = [r for r in rows if r.fit]
    held_rows = [r for r in rows if not r.fit]
    prior = default_efficiency()
    engine, fast = engine_evaluator(), fast_evaluator()
    x_prior = encode(prior)

    def mape(rs: Sequence[Row], eff: GPUEfficiency) -> float:
        return float(np.mean(np.abs(errors_pct(rs, step_times(rs, eff, engine))))) if rs else float("nan")

    fit_before = mape(fit_rows, prior)
    held_before = mape(held_rows, prior)
    log(
        f"[{gpu}] {len(fit_rows)} fit rows, {len(held_rows)} held out; prior MAPE fit {fit_before:.1f}%, held {held_before:.1f}%"
    )
    x = x_prior.copy()
    evals = 0
    weights = row_weights(fit_rows, weighting)
    for k in range(rounds):
        eff = decode(x)
        t_engine = step_times(fit_rows, eff, engine)
        t_fast = step_times(fit_rows, eff, fast)
        correction = t_engine / t_fast  # space mapping: engine ≈ correction · closed form

        def objective(z: np.ndarray, correction: np.ndarray = correction) -> float:
            t = correction * step_times(fit_rows, decode(z), fast)
            data = float(np.sum(weights * np.abs(log_ratios(fit_rows, t))))
            return data + prior_weight * float(np.mean((z - x_prior) ** 2))

        x, value, n = nelder_mead(objective, x, step=0.5 if k == 0 else 0.2, max_evals=max_evals)
        evals += n
        log(
            f"[{gpu}] round {k + 1}/{rounds}: objective {value:.4f} after {n} evaluations ({time.time() - t0:.0f} s)"
        )
    fitted = decode(x)
    return FitResult(
        gpu=gpu,
        prior=prior,
        fitted=fitted,
        fit_mape_before=fit_before,
        held_mape_before=held_before,
        fit_mape=mape(fit_rows, fitted),
        held_mape=mape(held_rows, fitted),
        num_fit=len(fit_rows),
        num_held=len(held_rows),
        evals=evals,
        seconds=time.time() - t0,
        dtypes=dtypes,
    )


# ----------------------------------------------------------------------------- output
def _format_value(value: float) -> str:
    return f"{value:.4g}" if abs(value) >= 1e-3 and abs(value) < 1e4 else f"{value:.4e}"


def efficiency_section(res: FitResult, today: str) -> str:
    lines = [
        f"[{res.gpu}]",
        f"# Written by benchmarks/calibrate.py on {today} (docs/calibration.md); do not edit by hand.",
        f"# Subset rule: {SUBSET_RULE}. Dtypes: {', '.join(res.dtypes)}.",
        f"# {res.num_fit} fit rows, {res.num_held} held-out rows; MAPE (engine) fit {res.fit_mape:.1f}% "
        f"(prior {res.fit_mape_before:.1f}%), held out {res.held_mape:.1f}% (prior {res.held_mape_before:.1f}%).",
    ]
    for f in fields(GPUEfficiency):
        lines.append(f"{f.name} = {_format_value(getattr(res.fitted, f.name))}")
    return "\n".join(lines) + "\n"


def inherited_section(gpu: str, res: FitResult, today: str, why: str) -> str:
    lines = [
        f"[{gpu}]",
        f"# Written by benchmarks/calibrate.py on {today}: no dense BF16/FP16 published runs of this GPU;",
        f"# inherits the [{res.gpu}] fit ({why}).",
    ]
    for f in fields(GPUEfficiency):
        lines.append(f"{f.name} = {_format_value(getattr(res.fitted, f.name))}")
    return "\n".join(lines) + "\n"


def write_efficiency(results: Sequence[FitResult], path: Path) -> None:
    """Replace (or append) the fitted GPUs' tables (and those inheriting them); keep the rest."""
    text = path.read_text(encoding="utf-8")
    today = date.today().isoformat()
    sections = [(res.gpu, efficiency_section(res, today)) for res in results]
    for res in results:
        for gpu, (parent, why) in INHERIT:
            if parent == res.gpu:
                sections.append((gpu, inherited_section(gpu, res, today, why)))
    for gpu, section in sections:
        # a table runs from its header to the next header (comments above it belong to it)
        pattern = re.compile(rf"^\[{re.escape(gpu)}\]\n(?:(?!\[).*\n?)*", re.MULTILINE)
        match = pattern.search(text)
        if match:
            text = text[: match.start()] + section + "\n" + text[match.end() :]
        else:
            text = text.rstrip("\n") + "\n\n" + section
    path.write_text(text.rstrip("\n") + "\n", encoding="utf-8")


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


FitJob = tuple[str, list[Row], int, int, float, str, tuple[str, ...]]


def _fit_job(job: FitJob) -> FitResult:
    gpu, rows, rounds, max_evals, prior_weight, weighting, dtypes = job
    return calibrate_gpu(
        gpu,
        rows,
        rounds=rounds,
        max_evals=max_evals,
        log=_log,
        prior_weight=prior_weight,
        weighting=weighting,
        dtypes=dtypes,
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--csv", type=Path, default=published_runs_csv(), help="published runs (SPEC §5)")
    parser.add_argument("--gpus", default=",".join(FIT_GPUS), help="GPU catalog names to fit")
    parser.add_argument("--rounds", type=int, default=3, help="engine-correction rounds")
    parser.add_argument("--max-evals", type=int, default=300, help="Nelder-Mead evaluations per round")
    parser.add_argument(
        "--dtypes", default=None, help="dtypes of the rows to fit for every GPU (default: FIT_PLAN per GPU)"
    )
    parser.add_argument("--weighting", choices=("rows", "sources"), default="rows", help="objective weights")
    parser.add_argument("--prior-weight", type=float, default=PRIOR_WEIGHT, help="pull toward [default]")
    parser.add_argument(
        "--accuracy-dir",
        type=Path,
        default=Path(__file__).resolve().parents[1] / "docs",
        help="where accuracy_table.md and the histogram go",
    )
    parser.add_argument("--jobs", type=int, default=2, help="GPU types fitted in parallel (processes)")
    parser.add_argument("--dry-run", action="store_true", help="do not write efficiency.toml")
    parser.add_argument("--out", type=Path, default=catalog_file("efficiency.toml"), help="file to write")
    args = parser.parse_args(argv)

    log = _log
    gpus = tuple(g.strip() for g in args.gpus.split(",") if g.strip())
    override = tuple(d.strip() for d in args.dtypes.split(",") if d.strip()) if args.dtypes else None
    plan = {gpu: override or dict(FIT_PLAN).get(gpu, FIT_DTYPES) for gpu in gpus}
    rows = [r for r in load_rows(args.csv, gpus, ("bf16", "fp16", "fp8")) if r.case.dtype in plan[r.gpu]]
    jobs = []
    for gpu in gpus:
        mine = [r for r in rows if r.gpu == gpu]
        if not any(r.fit for r in mine):
            log(f"[{gpu}] no fit rows; skipped")
            continue
        jobs.append((gpu, mine, args.rounds, args.max_evals, args.prior_weight, args.weighting, plan[gpu]))
    # The GPU types are independent fits: run them side by side (each is deterministic, so the
    # result does not depend on --jobs).
    if args.jobs > 1 and len(jobs) > 1:
        with ProcessPoolExecutor(max_workers=args.jobs) as pool:
            results = list(pool.map(_fit_job, jobs))
    else:
        results = [_fit_job(job) for job in jobs]
    print(
        f"{'gpu':<10} {'fit rows':>8} {'held':>5} {'MAPE fit':>9} {'(prior)':>8} {'MAPE held':>10} {'(prior)':>8}"
    )
    for r in results:
        print(
            f"{r.gpu:<10} {r.num_fit:>8} {r.num_held:>5} {r.fit_mape:>8.1f}% {r.fit_mape_before:>7.1f}% "
            f"{r.held_mape:>9.1f}% {r.held_mape_before:>7.1f}%"
        )
        for f in fields(GPUEfficiency):
            print(
                f"    {f.name:<24} {_format_value(getattr(r.prior, f.name)):>11} -> {_format_value(getattr(r.fitted, f.name))}"
            )
    if not args.dry_run and results:
        write_efficiency(results, args.out)
        print(f"wrote {args.out}")
    if args.accuracy_dir is not None and not args.dry_run:
        write_accuracy(
            args.csv, args.accuracy_dir, {r.case.run_id: "fit" if r.fit else "held-out" for r in rows}
        )
    return 0


def write_accuracy(csv_path: Path, out_dir: Path, roles: dict[str, str]) -> None:
    """`mfusim validate` on every row with the new catalog: docs/accuracy_table.md + histogram."""
    report = V.validate_runs(V.read_runs_csv(csv_path), V.default_simulate(), csv_path=str(csv_path))
    table = out_dir / "accuracy_table.md"
    header = (
        "# Accuracy table (generated)\n\n"
        f"Written by `python benchmarks/calibrate.py` on {date.today().isoformat()} from `mfusim validate` "
        "on the shipped published runs with the calibrated catalog. Discussion: docs/accuracy.md. "
        "Error % = (predicted - measured) / measured of the compared quantity (tokens/s per GPU or "
        "TFLOP/s per GPU in the source's FLOP convention); `fit` rows were used by the calibration, "
        "`held-out` rows were not, `-` rows are outside the calibration set (H100 FP8, MoE, ...).\n\n"
    )
    table.write_text(header + V.markdown_table(report, roles), encoding="utf-8")
    V.error_histogram(report, out_dir / "accuracy_errors.png")
    summary = report.summary()
    print(
        f"wrote {table} and {out_dir / 'accuracy_errors.png'}: MAPE overall "
        f"{summary['overall']['mape_pct']:.1f}%, A100/H100 dense 16-bit "
        f"{summary['target_a100_h100_dense_16bit']['mape_pct']:.1f}%"
    )


if __name__ == "__main__":
    raise SystemExit(main())
