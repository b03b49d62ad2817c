#!/usr/bin/env python
"""Fit the system-level residuals of simulator/catalog/efficiency.toml to published runs.

    python benchmarks/calibrate.py            # fit, report, write efficiency.toml
    python benchmarks/calibrate.py --dry-run  # fit and report only
    python benchmarks/calibrate.py --only megatron-core/hopper [--only ...]  # refit these groups only

What is fitted (docs/calibration.md): level 2 of a two-level calibration. Kernel speeds come
from the kernel model (simulator/kernels.py), fitted by benchmarks/fit_kernels.py to published
microbenchmarks only. Here only the residuals of a training job are fitted, the fields of
`simulator.specs.GPUEfficiency` (sustained_clock_fraction, kernel_launch_s,
microbatch_overhead_s, nccl_bw_fraction, overlap_slowdown), each bounded to the physical
range in PARAMS, one set per GPU architecture (FIT_PLAN: the SKUs of one architecture share
it, so a GPU with more of everything is never predicted slower), on all dense rows of every
source of that architecture. Never a parameter per run or per source.

Rows: the dense rows of scenarios/published/calibration_runs.csv that `mfusim validate` can
simulate, split deterministically: within each (source, GPU, dtype) group ordered by SHA-256 of
the id, even positions fit, odd positions held out (never seen by the optimizer).

How: the objective is the mean |log(predicted / measured)| over the fit rows plus a weak pull
toward [default], minimized with scipy.optimize (Nelder–Mead in a transformed space: logit
within each range, so every trial point is physical). The optimizer evaluates the closed form
(simulator.analytic), corrected per row by the engine/closed-form ratio at the current point;
the engine refreshes the ratio after each round. Final errors are from the engine.

Second stage, MoE rows (`--moe-only` reruns only this stage): per (stack, architecture) group with
MoE rows, the one residual of the eager TE GroupedLinear path, `expert_gemm_overhead_s` (time per
eager per-expert GEMM, simulator/program.py EXPERT_GEMM_OVERHEAD_NOTE), bounded to
specs.EXPERT_GEMM_OVERHEAD_RANGE_S, with the group's dense residuals held at their fitted values
(dense rows do not run the path, so the first stage does not see it). Rows: the MoE rows of the
CSV that `mfusim validate` simulates on the architecture's GPUs (MOE_GPUS), split by the same
sha256 rule; objective: mean |log(predicted / measured)| over the fit rows, engine-evaluated,
minimized by scipy.optimize.minimize_scalar (bounded) inside the grid cell around the best of
MOE_GRID_POINTS evenly spaced values (the objective is not convex across the range).

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
from simulator.specs import EXPERT_GEMM_OVERHEAD_RANGE_S, GPUEfficiency, Scenario

FIT_DTYPES = ("bf16", "fp16", "fp8")
# Groups whose published dense rows also use a recipe outside FIT_DTYPES: Blackwell's dense
# Megatron-Bridge rows are largely MXFP8 (the kernel model carries its speed), so leaving them
# out would halve that group's rows. `--dtypes` overrides this for every group.
FIT_DTYPES_OF_GROUP: dict[str, tuple[str, ...]] = {
    "megatron-core/blackwell": ("bf16", "fp8", "mxfp8"),
}
# (software stack, GPU architecture, GPU types) fitted together, on all dense rows of every
# source of that stack (simulator/stacks.py STACK_OF_SOURCE). System residuals do not depend on
# the dtype (the kernel model carries FP8 vs BF16), and the SKUs of one architecture share them,
# so a GPU with more of everything is never predicted slower.
FIT_PLAN: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("megatron-core", "hopper", ("h100-sxm",)),
    ("megatron-core", "blackwell", ("b200", "gb200", "gb300")),
    ("composer-fsdp", "hopper", ("h100-sxm",)),
    ("composer-fsdp", "ampere", ("a100-80gb", "a100-40gb")),
    ("megatron-2021", "ampere", ("a100-80gb", "a100-40gb")),
)
SUBSET_RULE = (
    "dense rows in scenarios/published/calibration_runs.csv usable by `mfusim validate`; within each "
    "(source, GPU, dtype) group ordered by sha256(id): even positions fit, odd positions held out"
)
# The per-GPU tables `mfusim run` uses hold the default stack (Megatron-Core + Transformer Engine).
# architecture -> (catalog GPUs, where their default-stack residuals come from, why, where their
# hardware residuals come from). The framework's residuals (launch gaps, host overhead per
# micro-batch, achieved NCCL fraction, overlap slowdown) belong to the stack; the sustained clock
# under load belongs to the chip and its power limit (HARDWARE_RESIDUALS), so a GPU whose
# architecture has no default-stack run takes it from its own architecture's best-determined fit
# (most rows), never from another chip's.
DEFAULT_STACK_TABLES: tuple[tuple[str, tuple[str, ...], str, str, str | None], ...] = (
    (
        "hopper",
        ("h100-sxm", "h200", "h800", "h100-sxm-96gb"),
        "megatron-core/hopper",
        "fitted (H200/H800/H100-96GB: same GH100 die)",
        None,
    ),
    (
        "blackwell",
        ("b200", "gb200", "b300", "gb300"),
        "megatron-core/blackwell",
        "fitted (B300: same SM design)",
        None,
    ),
    (
        "ampere",
        ("a100-80gb", "a100-40gb"),
        "megatron-core/hopper",
        "no published Megatron-Core A100 run: the stack's framework residuals (host, launch, NCCL, "
        "overlap) from its Hopper fit",
        "composer-fsdp/ampere",
    ),
)
HARDWARE_RESIDUALS = ("sustained_clock_fraction",)  # properties of the chip, not of the software
# The MoE stage's rows: every GPU of the architecture the stack table applies to (validate applies
# `[stacks.<stack>.<arch>]` to each of them), from DEFAULT_STACK_TABLES.
MOE_GPUS: dict[str, tuple[str, ...]] = {arch: gpus for arch, gpus, *_ in DEFAULT_STACK_TABLES}
MOE_GRID_POINTS = 8  # evenly spaced over the range, ends included, before the bounded refinement
MOE_SUBSET_RULE = (
    "MoE rows of the stack in scenarios/published/calibration_runs.csv usable by `mfusim validate` "
    "on the architecture's GPUs, every dtype; the dense rule's sha256 split"
)

PRIOR_WEIGHT = 0.02  # pull toward [default] (per transformed unit², averaged over parameters)


# ----------------------------------------------------------------------------- parameters
@dataclass(frozen=True, slots=True)
class Param:
    name: str
    kind: str  # "fraction" (logit) | "log" | "slowdown" (logit of x / 0.5)
    low: float
    high: float


PARAMS = (  # physical ranges (docs/calibration.md)
    Param(
        "sustained_clock_fraction", "fraction", 0.80, 1.0
    ),  # power/thermal-limited clocks vs benchmark boost
    Param("kernel_launch_s", "fraction", 0.0, 10e-6),  # unhidden launch gap per kernel: 0-10 us
    Param("microbatch_overhead_s", "fraction", 0.0, 20e-3),  # host work per micro-batch and phase: 0-20 ms
    Param("nccl_bw_fraction", "fraction", 0.50, 0.95),  # NCCL in a job vs line rate (nccl-tests: ~0.82-0.96)
    Param("overlap_slowdown", "fraction", 0.0, 0.30),  # compute slowdown beside overlapped communication
)


# The second stage's one parameter (docs/calibration.md): time per eager per-expert GEMM
MOE_PARAM = Param("expert_gemm_overhead_s", "fraction", *EXPERT_GEMM_OVERHEAD_RANGE_S)


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


def decode(x: np.ndarray, base: GPUEfficiency | None = None) -> GPUEfficiency:
    """The PARAMS at `x`; every other field (the MoE stage's residual) as in `base`."""
    values = {p.name: _from_unit(p, float(v)) for p, v in zip(PARAMS, x, strict=True)}
    return replace(base, **values) if base is not None else GPUEfficiency(**values)


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


def load_rows(
    csv_path: Path, gpus: Sequence[str], dtypes: Sequence[str] | None = V.TARGET_DTYPES, *, moe: bool = False
) -> list[Row]:
    """The dense rows (or with `moe` the MoE rows) of `dtypes` (None: every dtype) on `gpus`."""
    cases = []
    for run in V.read_runs_csv(csv_path):
        case = V.build_case(run)
        if isinstance(case, V.Case) and case.is_moe == moe and (dtypes is None or case.dtype in dtypes):
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
def minimize(
    f: Callable[[np.ndarray], float],
    x0: np.ndarray,
    step: float = 0.4,
    max_evals: int = 300,
    tol: float = 1e-5,
) -> tuple[np.ndarray, float, int]:
    """scipy.optimize.minimize (Nelder–Mead, deterministic initial simplex of size `step`)."""
    from scipy.optimize import minimize as scipy_minimize

    n = len(x0)
    simplex = np.vstack([x0] + [x0 + step * np.eye(n)[i] for i in range(n)])
    res = scipy_minimize(
        f,
        x0,
        method="Nelder-Mead",
        options={"initial_simplex": simplex, "maxfev": max_evals, "fatol": tol, "xatol": 1e-4},
    )
    return np.asarray(res.x), float(res.fun), int(res.nfev)


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
    moe: MoeFit | None = None  # the second stage, where the group has MoE rows


@dataclass(frozen=True, slots=True)
class MoeFit:
    """The MoE stage of one (stack, architecture) group: `expert_gemm_overhead_s` fitted on its
    MoE rows with the dense residuals held (MAPE of all the group's MoE rows and of those on the
    eager path, where the parameter acts)."""

    group: str
    prior: float
    value: float
    fit_mape_before: float
    held_mape_before: float
    fit_mape: float
    held_mape: float
    num_fit: int
    num_held: int
    num_eager: int
    evals: int
    seconds: float
    gpus: tuple[str, ...] = ()


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
        eff = decode(x, prior)
        t_engine = step_times(fit_rows, eff, engine)
        t_fast = step_times(fit_rows, eff, fast)
        correction = t_engine / t_fast  # space mapping: engine ≈ correction · closed form

        def objective(z: np.ndarray, correction: np.ndarray = correction) -> float:
            t = correction * step_times(fit_rows, decode(z, prior), fast)
            data = float(np.sum(weights * np.abs(log_ratios(fit_rows, t))))
            return data + prior_weight * float(np.mean((z - x_prior) ** 2))

        x, value, n = minimize(objective, x, step=0.5 if k == 0 else 0.2, max_evals=max_evals)
        evals += n
        log(
            f"[{gpu}] round {k + 1}/{rounds}: objective {value:.4f} after {n} evaluations ({time.time() - t0:.0f} s)"
        )
    fitted = decode(x, prior)  # the dense rows do not run the eager expert path: its residual stays the prior
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


def with_moe_residual(scn: Scenario, dense: GPUEfficiency | None, overhead_s: float) -> Scenario:
    """`scn` (its stack's residuals applied) with the dense stage's fitted PARAMS (None: as they
    are) and `expert_gemm_overhead_s` = `overhead_s`; every other field (the precision recipe's)
    stays the GPU's."""
    values = {p.name: getattr(dense, p.name) for p in PARAMS} if dense is not None else {}
    return with_efficiency(scn, replace(scn.gpu.efficiency, **values, expert_gemm_overhead_s=overhead_s))


def calibrate_moe(
    group: str,
    rows: Sequence[Row],
    dense: GPUEfficiency | None,
    *,
    log: Callable[[str], None],
    prior_s: float | None = None,
) -> MoeFit:
    """The MoE stage of one group: `expert_gemm_overhead_s` minimizing the mean |log ratio| of the
    fit rows (engine), the dense residuals held at `dense` (None: the stack table's)."""
    from scipy.optimize import minimize_scalar

    from simulator.program import eager_expert_path

    t0 = time.time()
    engine = engine_evaluator()
    fit_rows = [r for r in rows if r.fit]
    held_rows = [r for r in rows if not r.fit]
    prior = default_efficiency().expert_gemm_overhead_s if prior_s is None else prior_s
    low, high = MOE_PARAM.low, MOE_PARAM.high
    evals = 0

    def times(rs: Sequence[Row], x: float) -> np.ndarray:
        return np.array([engine(with_moe_residual(r.scenario, dense, x)).step_time_s for r in rs])

    def objective(x: float) -> float:
        nonlocal evals
        evals += 1
        return float(np.mean(np.abs(log_ratios(fit_rows, times(fit_rows, x)))))

    def mape(rs: Sequence[Row], x: float) -> float:
        return float(np.mean(np.abs(errors_pct(rs, times(rs, x))))) if rs else float("nan")

    fit_before, held_before = mape(fit_rows, prior), mape(held_rows, prior)
    log(
        f"[{group} MoE] {len(fit_rows)} fit rows, {len(held_rows)} held out; prior "
        f"{prior * 1e6:.1f} us: MAPE fit {fit_before:.1f}%, held {held_before:.1f}%"
    )
    grid = np.linspace(low, high, MOE_GRID_POINTS)
    values = [objective(float(x)) for x in grid]
    best = int(np.argmin(values))
    lo, hi = float(grid[max(best - 1, 0)]), float(grid[min(best + 1, len(grid) - 1)])
    res = minimize_scalar(objective, bounds=(lo, hi), method="bounded", options={"xatol": 1e-8})
    value = float(res.x) if float(res.fun) <= values[best] else float(grid[best])
    log(f"[{group} MoE] {value * 1e6:.2f} us after {evals} evaluations ({time.time() - t0:.0f} s)")
    return MoeFit(
        group=group,
        prior=prior,
        value=value,
        fit_mape_before=fit_before,
        held_mape_before=held_before,
        fit_mape=mape(fit_rows, value),
        held_mape=mape(held_rows, value),
        num_fit=len(fit_rows),
        num_held=len(held_rows),
        num_eager=sum(1 for r in rows if eager_expert_path(r.scenario)),
        evals=evals,
        seconds=time.time() - t0,
        gpus=tuple(sorted({r.gpu for r in rows})),
    )


def moe_groups_rows(csv_path: Path, groups: Sequence[str]) -> dict[str, list[Row]]:
    """The MoE stage's rows of each `stack/arch` group (MOE_GPUS of the architecture, the stack's
    sources), split by the dense rule; groups without MoE fit rows are left out."""
    from simulator.stacks import stack_of_source

    all_gpus = tuple(sorted({g for grp in groups for g in MOE_GPUS.get(grp.partition("/")[2], ())}))
    rows = load_rows(csv_path, all_gpus, None, moe=True)
    out = {}
    for group in groups:
        stack, _, arch = group.partition("/")
        mine = [
            r for r in rows if r.gpu in MOE_GPUS.get(arch, ()) and stack_of_source(r.case.source_key) == stack
        ]
        if any(r.fit for r in mine):
            out[group] = mine
    return out


# ----------------------------------------------------------------------------- output
def _format_value(value: float) -> str:
    return f"{value:.4g}" if abs(value) >= 1e-3 and abs(value) < 1e4 else f"{value:.4e}"


def group_members(group: str) -> tuple[str, ...]:
    return next((gpus for st, arch, gpus in FIT_PLAN if f"{st}/{arch}" == group), ())


def efficiency_section(res: FitResult, today: str, gpu: str = "") -> str:
    stack, _, arch = res.gpu.partition("/")
    lines = [
        f"[{gpu or f'stacks.{stack}.{arch}'}]",
        f"# Written by benchmarks/calibrate.py on {today} (docs/calibration.md); do not edit by hand.",
        f"# Stack {stack} on {arch} ({', '.join(group_members(res.gpu))}).",
        f"# Subset rule: {SUBSET_RULE}. Dtypes: {', '.join(res.dtypes)}.",
        f"# {res.num_fit} fit rows, {res.num_held} held-out rows; MAPE (engine) fit {res.fit_mape:.1f}% "
        f"(prior {res.fit_mape_before:.1f}%), held out {res.held_mape:.1f}% (prior {res.held_mape_before:.1f}%).",
    ]
    for param in PARAMS:  # the fitted residuals only (recipes.toml holds the precision recipes')
        lines.append(f"{param.name} = {_format_value(getattr(res.fitted, param.name))}")
    if res.moe is not None:
        lines += moe_block(res.moe, today)
    return "\n".join(lines) + "\n"


MOE_BLOCK_START = "# MoE stage"


def moe_block(moe: MoeFit, today: str) -> list[str]:
    """The MoE stage's lines at the end of a `[stacks.<stack>.<arch>]` table."""
    return [
        f"{MOE_BLOCK_START} (benchmarks/calibrate.py, {today}): {MOE_PARAM.name} on the group's MoE rows "
        f"({', '.join(moe.gpus)}), the residuals above held.",
        f"# Subset rule: {MOE_SUBSET_RULE}. {moe.num_eager} of the {moe.num_fit + moe.num_held} rows run the eager path.",
        f"# {moe.num_fit} fit rows, {moe.num_held} held-out rows; MAPE (engine) fit {moe.fit_mape:.1f}% "
        f"(prior {moe.fit_mape_before:.1f}%), held out {moe.held_mape:.1f}% (prior {moe.held_mape_before:.1f}%).",
        f"{MOE_PARAM.name} = {_format_value(moe.value)}",
    ]


def replace_moe_block(section: str, moe: MoeFit, today: str) -> str:
    """A stack table's text with its MoE stage lines (if any) replaced by `moe`'s."""
    lines = section.rstrip("\n").split("\n")
    if any(line.startswith(MOE_BLOCK_START) for line in lines):
        start = next(i for i, line in enumerate(lines) if line.startswith(MOE_BLOCK_START))
        end = next(i for i, line in enumerate(lines) if line.startswith(f"{MOE_PARAM.name} ="))
        lines = lines[:start] + lines[end + 1 :]
    else:
        lines = [line for line in lines if not line.startswith(f"{MOE_PARAM.name} =")]
    return "\n".join(lines + moe_block(moe, today)) + "\n"


def default_stack_section(
    gpu: str, group: str, eff: GPUEfficiency, today: str, why: str, hardware: tuple[str, GPUEfficiency] | None
) -> str:
    lines = [
        f"[{gpu}]",
        f"# Written by benchmarks/calibrate.py on {today}: default stack (Megatron-Core + TE) residuals,",
        f"# from [stacks.{group.replace('/', '.')}]: {why}.",
    ]
    if hardware is not None:
        hw_group, hw_eff = hardware
        eff = replace(eff, **{name: getattr(hw_eff, name) for name in HARDWARE_RESIDUALS})
        lines.append(
            f"# {', '.join(HARDWARE_RESIDUALS)} (the chip's, not the stack's) from [stacks.{hw_group.replace('/', '.')}]."
        )
    for param in (
        *PARAMS,
        MOE_PARAM,
    ):  # the fitted residuals only (recipes.toml holds the precision recipes')
        lines.append(f"{param.name} = {_format_value(getattr(eff, param.name))}")
    return "\n".join(lines) + "\n"


def default_stack_sections(
    fitted: dict[str, GPUEfficiency], today: str, changed: frozenset[str] | None = None
) -> list[tuple[str, str]]:
    """The per-GPU tables from the fitted stack tables (`group` -> residuals); with `changed`,
    only those that take a value from one of the `changed` groups."""
    sections = []
    for _arch, gpus, group, why, hw_group in DEFAULT_STACK_TABLES:
        if group not in fitted or (hw_group is not None and hw_group not in fitted):
            continue
        if changed is not None and group not in changed and hw_group not in changed:
            continue
        hardware = (hw_group, fitted[hw_group]) if hw_group is not None else None
        sections += [
            (gpu, default_stack_section(gpu, group, fitted[group], today, why, hardware)) for gpu in gpus
        ]
    return sections


def _stack_groups() -> list[tuple[str, str]]:
    return [(st, arch) for st, arch, _ in FIT_PLAN]


def stack_tables_in(text: str) -> dict[str, GPUEfficiency]:
    """The `[stacks.<stack>.<arch>]` residuals already in an efficiency.toml text (`stack/arch` ->)."""
    stacks = tomllib.loads(text).get("stacks", {})
    names = {f.name for f in fields(GPUEfficiency)}
    return {
        f"{st}/{arch}": GPUEfficiency(**{k: v for k, v in table.items() if k in names})
        for st, arch in _stack_groups()
        if (table := stacks.get(st, {}).get(arch))
    }


def write_efficiency(
    results: Sequence[FitResult], path: Path, *, only: bool = False, changed: frozenset[str] | None = None
) -> None:
    """Replace (or append) the fitted stacks' tables and the per-GPU default-stack tables.

    `only` (calibrate.py --only): every other table of the file stays byte for byte as it is;
    the per-GPU tables are rewritten only where they take a value from a refitted group (or from
    one of `changed`)."""
    text = path.read_text(encoding="utf-8")
    today = date.today().isoformat()
    sections = [(f"stacks.{res.gpu.replace('/', '.')}", efficiency_section(res, today)) for res in results]
    fitted = stack_tables_in(text)  # the file being written, not the installed catalog
    fitted.update({res.gpu: res.fitted for res in results})
    if changed is None and only:
        changed = frozenset(res.gpu for res in results)
    sections += default_stack_sections(fitted, today, changed)
    for header, section in sections:
        # a table runs from its header to the next header (comments above it belong to it)
        pattern = re.compile(rf"^\[{re.escape(header)}\]\n(?:(?!\[).*\n?)*", re.MULTILINE)
        match = pattern.search(text)
        if match:
            text = text[: match.start()] + section + "\n" + text[match.end() :]
        else:
            text = text.rstrip("\n") + "\n\n" + section
    path.write_text(text.rstrip("\n") + "\n", encoding="utf-8")


def write_moe(results: Sequence[MoeFit], path: Path) -> None:
    """`--moe-only`: each group's MoE stage lines in its `[stacks.*]` table (the dense residuals
    and their header stay as they are) and the per-GPU tables taking a value from it; every other
    table byte for byte."""
    text = path.read_text(encoding="utf-8")
    today = date.today().isoformat()
    for moe in results:
        header = f"stacks.{moe.group.replace('/', '.')}"
        pattern = re.compile(rf"^\[{re.escape(header)}\]\n(?:(?!\[).*\n?)*", re.MULTILINE)
        match = pattern.search(text)
        if match is None:
            raise SystemExit(f"calibrate.py --moe-only: no [{header}] table in {path}: fit the group first")
        section = replace_moe_block(match.group(0).rstrip("\n") + "\n", moe, today)
        text = text[: match.start()] + section + "\n" + text[match.end() :]
    path.write_text(text.rstrip("\n") + "\n", encoding="utf-8")
    write_efficiency([], path, changed=frozenset(m.group for m in results))


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


def _with_moe(res: FitResult, moe: MoeFit) -> FitResult:
    return replace(res, moe=moe, fitted=replace(res.fitted, expert_gemm_overhead_s=moe.value))


def print_moe(results: Sequence[MoeFit]) -> None:
    if not results:
        return
    print(
        f"{'MoE stage':<24} {'fit rows':>8} {'held':>5} {'eager':>5} {'MAPE fit':>9} {'(prior)':>8} "
        f"{'MAPE held':>10} {'(prior)':>8} {MOE_PARAM.name}"
    )
    for m in results:
        at_bound = (
            " (at a bound of its range)"
            if m.value <= MOE_PARAM.low or m.value >= MOE_PARAM.high * 0.999
            else ""
        )
        print(
            f"{m.group:<24} {m.num_fit:>8} {m.num_held:>5} {m.num_eager:>5} {m.fit_mape:>8.1f}% "
            f"{m.fit_mape_before:>7.1f}% {m.held_mape:>9.1f}% {m.held_mape_before:>7.1f}% "
            f"{m.prior * 1e6:.2f} -> {m.value * 1e6:.2f} us{at_bound}"
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--csv", type=Path, default=published_runs_csv(), help="published runs (SPEC §5)")
    parser.add_argument(
        "--groups",
        default=",".join(f"{st}/{arch}" for st, arch, _ in FIT_PLAN),
        help="stack/architecture groups to fit (FIT_PLAN)",
    )
    parser.add_argument(
        "--only",
        action="append",
        default=None,
        metavar="STACK/ARCH",
        help="refit only this group (repeatable; overrides --groups): every other table of "
        "efficiency.toml stays as it is, and docs/accuracy_table.md is not rewritten",
    )
    parser.add_argument("--rounds", type=int, default=3, help="engine-correction rounds")
    parser.add_argument("--max-evals", type=int, default=300, help="Nelder-Mead evaluations per round")
    parser.add_argument(
        "--dtypes",
        default=None,
        help="dtypes of the rows to fit for every group (default: FIT_DTYPES, or FIT_DTYPES_OF_GROUP)",
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
    parser.add_argument(
        "--tables-only",
        action="store_true",
        help="fit nothing: rebuild the per-GPU default-stack tables from the fitted [stacks.*] tables",
    )
    parser.add_argument(
        "--moe-only",
        action="store_true",
        help="fit only the MoE stage (expert_gemm_overhead_s) of the groups (--only / --groups) with MoE "
        "rows, the dense residuals held as efficiency.toml has them",
    )
    parser.add_argument("--out", type=Path, default=catalog_file("efficiency.toml"), help="file to write")
    args = parser.parse_args(argv)

    log = _log
    from simulator.stacks import stack_of_source

    if args.tables_only:
        write_efficiency([], args.out)
        print(f"wrote {args.out} (per-GPU tables only)")
        return 0

    known = [f"{st}/{arch}" for st, arch, _ in FIT_PLAN]
    if args.only:
        unknown = [g for g in args.only if g not in known]
        if unknown:
            print(
                f"calibrate.py: --only {unknown[0]}: not a fitted group ({', '.join(known)})", file=sys.stderr
            )
            return 2
        groups = tuple(dict.fromkeys(args.only))
    else:
        groups = tuple(g.strip() for g in args.groups.split(",") if g.strip())
    if args.moe_only:
        moe_results = [
            calibrate_moe(group, mine, None, log=log)
            for group, mine in moe_groups_rows(args.csv, groups).items()
        ]
        print_moe(moe_results)
        if not args.dry_run and moe_results:
            write_moe(moe_results, args.out)
            print(f"wrote {args.out} (MoE stage only)")
        return 0
    forced = tuple(d.strip() for d in args.dtypes.split(",") if d.strip()) if args.dtypes else None
    plan = {f"{st}/{arch}": (st, gpus) for st, arch, gpus in FIT_PLAN if f"{st}/{arch}" in groups}
    dtypes_of = {g: forced or FIT_DTYPES_OF_GROUP.get(g, FIT_DTYPES) for g in plan}
    all_gpus = tuple(sorted({gpu for _, gpus in plan.values() for gpu in gpus}))
    rows = load_rows(args.csv, all_gpus, tuple(sorted({d for ds in dtypes_of.values() for d in ds})))
    jobs = []
    for group, (stack, gpus) in plan.items():
        dtypes = dtypes_of[group]
        mine = [
            r
            for r in rows
            if r.gpu in gpus and stack_of_source(r.case.source_key) == stack and r.case.dtype in dtypes
        ]
        if not any(r.fit for r in mine):
            log(f"[{group}] no fit rows; skipped")
            continue
        jobs.append((group, mine, args.rounds, args.max_evals, args.prior_weight, args.weighting, dtypes))
    # The GPU types are independent fits: run them side by side (each is deterministic, so the
    # result does not depend on --jobs).
    if args.jobs > 1 and len(jobs) > 1:
        with ProcessPoolExecutor(max_workers=args.jobs) as pool:
            results = list(pool.map(_fit_job, jobs))
    else:
        results = [_fit_job(job) for job in jobs]
    # the MoE stage, holding each group's dense result
    moe_rows = moe_groups_rows(args.csv, [r.gpu for r in results])
    results = [
        _with_moe(r, calibrate_moe(r.gpu, moe_rows[r.gpu], r.fitted, log=log)) if r.gpu in moe_rows else r
        for r in results
    ]
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
    print_moe([r.moe for r in results if r.moe is not None])
    if not args.dry_run and results:
        write_efficiency(results, args.out, only=bool(args.only))
        print(f"wrote {args.out}")
    if args.only:
        log("--only: docs/accuracy_table.md not rewritten (other groups may be mid-refit)")
    elif args.accuracy_dir is not None and not args.dry_run:
        every = [*rows, *(r for mine in moe_rows.values() for r in mine)]  # both stages' rows
        write_accuracy(
            args.csv, args.accuracy_dir, {r.case.run_id: "fit" if r.fit else "held-out" for r in every}
        )
    return 0


def write_accuracy(csv_path: Path, out_dir: Path, roles: dict[str, str]) -> None:
    """`mfusim validate` on every row with the new catalog: docs/accuracy_table.md + histogram."""
    from simulator import stacks

    stacks._stack_tables.cache_clear()  # re-read the efficiency.toml just written
    report = V.validate_runs(V.read_runs_csv(csv_path), V.default_simulate(), csv_path=str(csv_path))
    table = out_dir / "accuracy_table.md"
    header = (
        "# Accuracy table (generated)\n\n"
        f"Written by `python benchmarks/calibrate.py` on {date.today().isoformat()} from `mfusim validate` "
        "on the shipped published runs with the calibrated catalog. Discussion: docs/accuracy.md. "
        "Error % = (predicted - measured) / measured of the compared quantity (tokens/s per GPU or "
        "TFLOP/s per GPU in the source's FLOP convention); `fit` rows were used by the calibration, "
        "`held-out` rows were not (MoE rows: by the MoE stage, which fits only expert_gemm_overhead_s), "
        "`-` rows are outside both stages' sets.\n\n"
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
