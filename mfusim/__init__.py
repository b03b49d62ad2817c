"""mfusim's Python API: the commands as functions (issue 15; README "Python API").

    import mfusim
    scn = mfusim.load_scenario("llama3-70b-512-h100", overrides={"parallel.tp": 4})
    report = mfusim.simulate(scn)               # one step: report.mfu, .step_time_s, .breakdown_s
    p = mfusim.plan(scn, report, tokens=15e12, usd_per_gpu_hour=2.0)   # days, GPU-hours, cost, MWh
    rows = mfusim.sweep(scn).ranked             # the [sweep] table, best first
    side = mfusim.compare("a.toml", "b.toml")   # several scenarios, side by side

The package `simulator` underneath stays importable; this module only gathers its front doors.
Bad input raises `mfusim.ConfigError` (naming the key), as the command line prints it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from simulator import __version__
from simulator.errors import ConfigError
from simulator.metrics import StepReport
from simulator.plan import Plan, RunSpec
from simulator.specs import Scenario

if TYPE_CHECKING:
    from simulator.compare import Compared
    from simulator.sweep import SweepResult

__all__ = [
    "ConfigError",
    "Plan",
    "RunSpec",
    "Scenario",
    "StepReport",
    "__version__",
    "compare",
    "load_scenario",
    "plan",
    "simulate",
    "sweep",
]

ScenarioLike = Scenario | str | Path | Mapping[str, Any]
Overrides = Mapping[str, Any] | Iterable[str] | None


def _overrides(overrides: Overrides) -> list[tuple[str, Any]]:
    from simulator.overrides import parse_override, parse_unset

    if overrides is None:
        return []
    if isinstance(overrides, Mapping):
        out = []
        for key, value in overrides.items():
            if not isinstance(key, str):
                raise ConfigError(
                    f"override keys are dotted strings like 'parallel.tp', got {key!r}", key="overrides"
                )
            parse_unset(key, flag="overrides")  # checks the key's shape (a key, no "=value")
            out.append((key, value))
        return out
    if isinstance(overrides, str):
        return [parse_override(overrides, flag="overrides")]
    if not isinstance(overrides, Iterable):
        raise ConfigError(
            f"expected a mapping {{'parallel.tp': 4}} or 'key=value' strings, got {type(overrides).__name__}",
            key="overrides",
        )
    return [parse_override(str(text), flag="overrides") for text in overrides]


def load_scenario(source: ScenarioLike, overrides: Overrides = None) -> Scenario:
    """A scenario from a file path, a shipped scenario's name (`mfusim presets` lists them) or
    a dict of the file's tables (`{"model": {"preset": "llama3-8b"}, "cluster": {...}, ...}`).

    `overrides` change file values before validation, as `--set` does: a mapping
    `{"parallel.tp": 4}` or strings `["parallel.tp=4"]`. A mapping value `None` removes the key
    (or table) so its default applies, as `--unset` does: `{"parallel.dp": None}`.
    """
    from simulator.loading import load_scenario as _load
    from simulator.loading import resolve_scenario_path, scenario_from_dict
    from simulator.overrides import apply_overrides, attribute_error, check_unsets

    if isinstance(source, Scenario):
        if overrides:
            raise ConfigError(
                "overrides need a scenario file or name, not a loaded Scenario", key="overrides"
            )
        return source
    if isinstance(source, Mapping):
        sets = _overrides(overrides)
        try:
            data = apply_overrides(source, sets, "overrides")
            check_unsets(data, sets, scenario_from_dict, "overrides")
            return scenario_from_dict(data)
        except ConfigError as err:
            raise attribute_error(err, sets, "overrides") from None
    if not isinstance(source, str | Path):
        raise ConfigError(
            f"expected a scenario path, name or dict of tables, got {type(source).__name__}", key="source"
        )
    return _load(resolve_scenario_path(source), _overrides(overrides), "overrides")


def _scenario(source: ScenarioLike) -> Scenario:
    return source if isinstance(source, Scenario) else load_scenario(source)


def simulate(scenario: ScenarioLike, *, seed: int | None = None, comm_model: str = "topology") -> StepReport:
    """One training step, as `mfusim run`: MFU, HFU, step time, tokens/s, breakdown, memory."""
    from simulator.comm import FlatCommModel, default_comm_model
    from simulator.simulate import simulate as _simulate

    scn = _scenario(scenario)
    if comm_model not in ("topology", "flat"):
        raise ConfigError(f"must be 'topology' or 'flat', got {comm_model!r}", key="comm_model")
    comm = FlatCommModel(scn) if comm_model == "flat" else default_comm_model(scn)
    return _simulate(scn, comm, seed=seed).report


def plan(scenario: ScenarioLike, report: StepReport | None = None, **run: Any) -> Plan:
    """The whole-run plan: days, GPU-hours, cost, energy, goodput, checkpoint interval.

    Keyword arguments are the `[run]` keys in their file units (`tokens=15e12`,
    `usd_per_gpu_hour=2.0`, `gpu_failures_per_year=0.17`, `checkpoint_interval_min=30`, ...);
    they override the scenario's own `[run]` table and are validated like it. Without
    `report`, the step is simulated first.
    """
    from simulator.loading import run_from_table, run_to_table
    from simulator.plan import plan_for

    scn = _scenario(scenario)
    table = run_to_table(scn.run) if scn.run is not None else {}
    table.update(run)
    if not table:
        raise ConfigError("no [run] table in the scenario: give tokens=...", key="run.tokens")
    spec = run_from_table(table)
    if report is None:
        report = simulate(scn)
    elif not isinstance(report, StepReport):
        raise ConfigError(
            f"expected a StepReport from mfusim.simulate, got {type(report).__name__}", key="report"
        )
    elif (report.name, report.num_gpus, report.tokens_per_step) != (
        scn.name,
        scn.num_gpus,
        scn.tokens_per_step,
    ):
        # the plan takes tokens/s from the report and GPUs, batch and power from the scenario
        raise ConfigError(
            f"is the step of {report.name!r} ({report.num_gpus} GPUs, {report.tokens_per_step} tokens "
            f"per step), not of {scn.name!r} ({scn.num_gpus} GPUs, {scn.tokens_per_step} tokens per step)",
            key="report",
        )
    return plan_for(scn, report, spec)


def sweep(
    scenario: ScenarioLike,
    *,
    engine: str = "auto",
    jobs: int = 1,
    refine: int = 3,
    rank_by: str = "mfu",
    out: str | Path | None = None,
) -> SweepResult:
    """Every configuration of the scenario's `[sweep]` table; `.ranked` lists the feasible ones
    best first, `.rows` all of them (the columns of `mfusim sweep --out`)."""
    from simulator.loading import resolve_scenario_path
    from simulator.plan import check_rank_by
    from simulator.sweep import load_sweep_scenario, run_sweep

    if isinstance(scenario, str | Path):
        # a sweep's [parallel] may be valid only together with its swept values
        scn = load_sweep_scenario(resolve_scenario_path(scenario))
    else:
        scn = _scenario(scenario)
    check_rank_by(scn, rank_by)
    return run_sweep(
        scn, engine=engine, jobs=jobs, refine=refine, rank_by=rank_by, out=Path(out) if out else None
    )


def compare(*scenarios: ScenarioLike, run: Mapping[str, Any] | None = None) -> tuple[Compared, ...]:
    """Several scenarios side by side; each item has `.label`, `.report` and `.plan` (with a
    `[run]` table, or the `run` mapping of `[run]` keys given here for all of them).

    The `run` keys override each scenario's own `[run]` keys, as `mfusim.plan(**run)` and
    `mfusim compare --tokens/--set run.KEY=...` do (a scenario's own table used to win, so
    the API planned another run than the command for such a scenario)."""
    from dataclasses import replace

    from simulator.compare import compare as _compare
    from simulator.loading import run_from_table, run_to_table

    if not scenarios:
        raise ConfigError("give at least one scenario", key="scenarios")
    loaded = [_scenario(s) for s in scenarios]
    labels = [
        Path(s).stem if isinstance(s, str | Path) else sc.name
        for s, sc in zip(scenarios, loaded, strict=True)
    ]
    if run is not None:
        run_from_table(dict(run))  # a bad key or value is refused once, naming it
        loaded = [
            replace(sc, run=run_from_table({**(run_to_table(sc.run) if sc.run is not None else {}), **run}))
            for sc in loaded
        ]
    return _compare(loaded, labels)
