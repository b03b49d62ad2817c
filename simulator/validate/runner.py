"""Running the cases through the simulator."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from ..errors import ConfigError
from ..progress import Progress
from ..specs import Scenario
from .cases import Case, Unusable, build_case
from .columns import METRIC_HFU, METRIC_ITERATION_TIME, METRIC_MFU
from .conventions import predicted_value
from .results import RowResult, ValidationReport
from .runs import PublishedRun
from .sources import source_rules

# ----------------------------------------------------------------------------- running
SimulateFn = Callable[[Scenario], Any]  # returns a StepReport (or an object with .report)


def default_simulate() -> SimulateFn:
    """The discrete-event engine's `simulate`, returning its StepReport (a module function, so
    that `validate --jobs` can hand it to worker processes)."""
    return simulate_report


def simulate_report(scenario: Scenario) -> Any:
    from ..simulate import simulate

    result = simulate(scenario)
    return getattr(result, "report", result)


def scenario_for(case: Case, source: str = "") -> Scenario:
    """The row's scenario, with the system residuals of its source's software stack."""
    from ..loading import scenario_from_dict
    from ..stacks import stack_of_source, with_stack

    scn = scenario_from_dict(case.scenario, source=source or case.run_id)
    return with_stack(scn, stack_of_source(case.source_key))


def evaluate(case: Case, scenario: Scenario, simulate_fn: SimulateFn) -> RowResult:
    out = simulate_fn(scenario)
    report: Any = getattr(out, "report", out)
    step = float(report.step_time_s)
    if not math.isfinite(step) or step <= 0:
        raise ValueError(f"simulated step time {step!r}")
    memory = getattr(report, "memory", None)
    fits = bool(memory.fits) if memory is not None else None
    return RowResult(
        case=case,
        predicted=predicted_value(case, scenario, step),
        step_time_s=step,
        mfu=float(report.mfu),
        memory_fits=fits,
    )


def select_runs(
    runs: Sequence[PublishedRun], gpu: str | None = None, source: str | None = None
) -> list[PublishedRun]:
    out = list(runs)
    if gpu:
        out = [r for r in out if gpu.lower() in r.gpu.lower()]
    if source:
        s = source.lower()
        out = [
            r
            for r in out
            if s in r.source.lower()
            or s in source_rules(r.source, r.run_id).key
            or r.run_id.lower().startswith(s)
        ]
    return out


MAX_IMPLIED_MFU = 1.0


def implied_mfu(result: RowResult) -> float | None:
    """The MFU the *measurement* means, by the simulated MFU scaled with measured/predicted (for
    a step time, predicted/measured): above 1 no real run can have produced it."""
    case = result.case
    if not (result.predicted > 0 and case.measured > 0 and math.isfinite(result.mfu)):
        return None
    ratio = case.measured / result.predicted
    if case.metric == METRIC_ITERATION_TIME:
        ratio = 1.0 / ratio
    if case.metric in (METRIC_MFU, METRIC_HFU):
        return case.measured / 100.0 if case.metric == METRIC_MFU else None
    return result.mfu * ratio


def _unusable(case: Case, reason: str) -> Unusable:
    """A case that could not be simulated after all, and why (never dropped silently)."""
    return Unusable(case.run_id, case.source, case.source_key, case.gpu, reason)


def validate_runs(
    runs: Sequence[PublishedRun],
    simulate_fn: SimulateFn,
    *,
    csv_path: str = "",
    progress: bool = True,
    jobs: int = 1,
) -> ValidationReport:
    """Every row simulated (or reported unusable, with why), in the rows' order. `jobs` > 1:
    rows are simulated by that many forked worker processes (the same results, in the same order)."""
    results: list[RowResult] = []
    unusable: list[Unusable] = []
    bar = Progress(len(runs), "validate", unit="rows") if progress else None
    for outcome in _outcomes(runs, simulate_fn, csv_path, jobs):
        if isinstance(outcome, Unusable):
            unusable.append(outcome)
        else:
            results.append(outcome)
        if bar is not None:
            bar.update()
    if bar is not None:
        bar.close()
    return ValidationReport(results=tuple(results), unusable=tuple(unusable), csv_path=csv_path)


def evaluate_run(run: PublishedRun, simulate_fn: SimulateFn, csv_path: str = "") -> RowResult | Unusable:
    """One row: its result, or why it could not be simulated (never dropped silently)."""
    case = build_case(run)
    if isinstance(case, Unusable):
        return case
    try:
        scenario = scenario_for(case, source=csv_path)
        result = evaluate(case, scenario, simulate_fn)
        implied = implied_mfu(result)
    except ConfigError as err:
        reason = err.message if err.key is None else f"{err.key}: {err.message}"
        return _unusable(case, f"invalid scenario: {reason}")
    except (ValueError, NotImplementedError, ArithmeticError, KeyError) as exc:
        return _unusable(case, f"simulator failed: {type(exc).__name__}: {exc}")
    if implied is not None and implied > MAX_IMPLIED_MFU:
        return _unusable(
            case,
            f"impossible measurement: {case.metric} = {case.measured:g} means an MFU of "
            f"{implied:.0%} on {scenario.num_gpus} x {scenario.gpu.name}, above 100% of peak",
        )
    return result


def _outcomes(
    runs: Sequence[PublishedRun], simulate_fn: SimulateFn, csv_path: str, jobs: int
) -> Iterator[RowResult | Unusable]:
    if jobs <= 1 or len(runs) <= 1:
        for run in runs:
            yield evaluate_run(run, simulate_fn, csv_path)
        return
    import multiprocessing
    import os
    from functools import partial

    from ..sweep.runner import pool_worker_init  # workers die quietly, with their parent

    methods = multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
    one = partial(evaluate_run, simulate_fn=simulate_fn, csv_path=csv_path)  # simulate_fn must pickle
    pool = ctx.Pool(processes=jobs, initializer=pool_worker_init, initargs=(os.getpid(),))
    try:
        yield from pool.imap(one, runs, chunksize=max(1, len(runs) // (8 * jobs)))
        pool.close()
    except BaseException:
        pool.terminate()
        raise
    finally:
        pool.join()
