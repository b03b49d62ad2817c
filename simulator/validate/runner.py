"""Running the cases through the simulator."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
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
    """The discrete-event engine's `simulate`, returning its StepReport."""
    from ..simulate import simulate

    def run(scenario: Scenario) -> Any:
        result = simulate(scenario)
        return getattr(result, "report", result)

    return run


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
) -> ValidationReport:
    results: list[RowResult] = []
    unusable: list[Unusable] = []
    bar = Progress(len(runs), "validate", unit="rows") if progress else None
    for run in runs:
        case = build_case(run)
        if isinstance(case, Unusable):
            unusable.append(case)
        else:
            try:
                scenario = scenario_for(case, source=csv_path)
                result = evaluate(case, scenario, simulate_fn)
                implied = implied_mfu(result)
                if implied is not None and implied > MAX_IMPLIED_MFU:
                    unusable.append(
                        _unusable(
                            case,
                            f"impossible measurement: {case.metric} = {case.measured:g} means an MFU of "
                            f"{implied:.0%} on {scenario.num_gpus} x {scenario.gpu.name}, above 100% of peak",
                        )
                    )
                else:
                    results.append(result)
            except ConfigError as err:
                unusable.append(
                    _unusable(
                        case,
                        f"invalid scenario: {err.message if err.key is None else f'{err.key}: {err.message}'}",
                    )
                )
            except (ValueError, NotImplementedError, ArithmeticError, KeyError) as exc:
                unusable.append(_unusable(case, f"simulator failed: {type(exc).__name__}: {exc}"))
        if bar is not None:
            bar.update()
    if bar is not None:
        bar.close()
    return ValidationReport(results=tuple(results), unusable=tuple(unusable), csv_path=csv_path)
