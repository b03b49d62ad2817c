"""One configuration -> one row: the evaluators (closed form, engine) and the row's numbers."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..comm import CommModel, default_comm_model
from ..errors import ConfigError
from ..memory import memory_footprint
from ..metrics import StepReport
from ..specs import Scenario
from ..units import GIB_BYTES
from .columns import COLUMNS, KEY_COLUMNS, SPEC_CONFIG_COLUMNS, STATUS_INVALID, STATUS_OK, STATUS_OOM
from .plan import build_config

# ----------------------------------------------------------------------------- evaluators
Evaluator = Callable[[Scenario, CommModel], StepReport]
ENGINES = ("analytic", "des")


def _analytic(scn: Scenario, comm: CommModel) -> StepReport:
    from ..analytic import estimate_step

    return estimate_step(scn, comm)


def _des(scn: Scenario, comm: CommModel) -> StepReport:
    from ..simulate import simulate

    return simulate(scn, comm, detail=False).report


def resolve_evaluator(engine: str) -> Evaluator:
    """The function that evaluates one configuration: 'analytic' (closed form) or 'des'."""
    if engine == "analytic":
        return _analytic
    if engine == "des":
        return _des
    raise ValueError(f"unknown engine {engine!r}; known: {', '.join(ENGINES)}")


def evaluate(scenario: Scenario, engine: str) -> StepReport:
    """One configuration's StepReport with `engine` ('analytic' or 'des')."""
    return resolve_evaluator(engine)(scenario, default_comm_model(scenario))


@dataclass(slots=True)
class CommModels:
    """Comm models shared by the configurations of one chunk.

    A comm model depends only on the cluster and the placement (num_gpus, tp, cp, dp, pp,
    ep, rank order) and memoizes its answers, so configurations that differ in micro-batch,
    recompute, ZeRO stage or vp reuse the same analysed groups (about a third of the
    closed-form cost for GPT-3 175B).
    """

    models: dict[tuple[int, ...], CommModel] = field(default_factory=dict)

    def for_scenario(self, scn: Scenario) -> CommModel:
        par = scn.parallel
        key = (scn.num_gpus, par.tp, par.cp, par.dp, par.pp, par.ep)
        model = self.models.get(key)
        if model is None:
            model = self.models[key] = default_comm_model(scn)
        return model


def _key(row: Mapping[str, Any]) -> tuple[str, ...]:
    return tuple("" if row.get(c) is None else str(row.get(c)) for c in KEY_COLUMNS)


def _empty_row(values: Mapping[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = dict.fromkeys(COLUMNS)
    for c in KEY_COLUMNS:
        row[c] = values.get(c)
    return row


def evaluate_config(
    base_scn: Scenario, values: Mapping[str, Any], engine: str, comms: CommModels | None = None
) -> dict[str, Any]:
    """One row: the configuration's cells, its status and its numbers."""
    row = _empty_row(values)
    try:
        scn = build_config(base_scn, values)
    except ConfigError as err:
        row["status"] = STATUS_INVALID
        row["reason"] = str(err)
        return row
    par = scn.parallel
    for c in SPEC_CONFIG_COLUMNS:
        row[c] = getattr(par, c)
    row["num_microbatches"] = par.num_microbatches
    try:
        comm = (comms or CommModels()).for_scenario(scn)
        report = resolve_evaluator(engine)(scn, comm)
    except ConfigError as err:
        row["status"] = STATUS_INVALID
        row["reason"] = str(err)
        return row
    except Exception as exc:  # noqa: BLE001 - one broken configuration must not end a sweep
        row["status"] = STATUS_INVALID
        row["reason"] = f"simulation failed: {type(exc).__name__}: {exc}"
        return row
    memory = report.memory if report.memory is not None else memory_footprint(scn)
    fill_numbers(row, report, memory.peak_bytes, memory.capacity_bytes, engine)
    if scn.run is not None:
        fill_plan(row, scn, report)
    if memory.fits:
        row["status"], row["reason"] = STATUS_OK, ""
    else:
        row["status"] = STATUS_OOM
        stage = max(range(len(memory.stage_peak_bytes)), key=memory.stage_peak_bytes.__getitem__, default=0)
        row["reason"] = (
            f"needs {memory.peak_bytes / GIB_BYTES:.1f} GiB per GPU (pipeline stage {stage}), "
            f"{memory.capacity_bytes / GIB_BYTES:.0f} GiB available"
        )
    return row


def fill_plan(row: dict[str, Any], scn: Scenario, report: StepReport) -> None:
    """The configuration's whole-run plan columns (the scenario's [run] table, simulator/plan.py);
    left empty when the plan is refused (e.g. checkpoints slower than failures at this size)."""
    from ..plan import plan_columns, plan_for

    try:
        row.update(plan_columns(plan_for(scn, report)))
    except ConfigError:
        pass


def refresh_plan(rows: Sequence[dict[str, Any]], scn: Scenario) -> bool:
    """Recompute the plan columns of rows read back by --resume from their own numbers and the
    scenario's current [run] (which the resume fingerprint leaves out: a plan is arithmetic on a
    row, not a simulation). Returns whether any row changed."""
    from ..flops import total_params
    from ..plan import PLAN_COLUMNS, plan_columns, plan_run

    params = float(total_params(scn.model))
    changed = False
    for row in rows:
        new: dict[str, Any] = dict.fromkeys(PLAN_COLUMNS)
        tps, n, gb = row.get("tokens_per_s"), row.get("num_gpus"), row.get("global_batch")
        if (
            scn.run is not None
            and isinstance(tps, int | float)
            and tps > 0
            and isinstance(n, int)
            and isinstance(gb, int)
        ):
            try:
                p = plan_run(
                    scn.run,
                    num_gpus=n,
                    gpu=scn.gpu,
                    params=params,
                    tokens_per_s=float(tps),
                    tokens_per_step=gb * scn.model.seq_len,
                )
                new = dict(plan_columns(p))
            except ConfigError:
                pass
        if any(row.get(k) != v for k, v in new.items()):
            row.update(new)
            changed = True
    return changed


def fill_numbers(
    row: dict[str, Any], report: StepReport, peak_bytes: float, capacity_bytes: float, engine: str
) -> None:
    row["step_time_s"] = report.step_time_s
    row["tokens_per_s"] = report.tokens_per_s
    row["mfu"] = report.mfu
    row["hfu"] = report.hfu
    row["peak_memory_gib"] = peak_bytes / GIB_BYTES
    row["capacity_gib"] = capacity_bytes / GIB_BYTES
    for c, v in report.breakdown_s.items():
        if f"{c}_s" in row:
            row[f"{c}_s"] = v
    row["engine"] = engine


def evaluate_chunk(
    base_scn: Scenario, chunk: Sequence[Mapping[str, Any]], engine: str
) -> list[dict[str, Any]]:
    """Worker task: rows for a list of configurations (resolved values, see config_cells)."""
    comms = CommModels()
    return [evaluate_config(base_scn, values, engine, comms) for values in chunk]


def _evaluate_chunk_args(args: tuple[Scenario, Sequence[Mapping[str, Any]], str]) -> list[dict[str, Any]]:
    return evaluate_chunk(*args)
