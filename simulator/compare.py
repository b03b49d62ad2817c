"""`mfusim compare A B ...`: several scenarios side by side (issue 15).

Each scenario is simulated as `mfusim run` would; the comparison lists MFU, HFU, step time,
tokens/s, memory and the time breakdown in one column per scenario, and the whole-run plan
when the scenario has a `[run]` table (or a shared one is given).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .metrics import StepReport
from .plan import Plan, RunSpec, plan_for
from .specs import Scenario, schedule_label
from .timeline import CATEGORIES
from .units import DAY_S, GIB_BYTES

MAX_SCENARIOS = 64  # one column each: a comparison, not a sweep


@dataclass(frozen=True, slots=True)
class Compared:
    """One scenario of a comparison: its simulated step and, with a `[run]`, its plan."""

    label: str
    scenario: Scenario
    report: StepReport
    plan: Plan | None

    def to_dict(self) -> dict[str, Any]:
        from .describe import add_summary

        out = {"label": self.label, **self.report.to_dict()}
        add_summary(out, self.scenario, self.report.warnings)
        if self.plan is not None:
            out["plan"] = self.plan.to_dict()
        return out


def compare(
    scenarios: Sequence[Scenario],
    labels: Sequence[str] | None = None,
    *,
    run: RunSpec | None = None,
    comm_model: str = "topology",
) -> tuple[Compared, ...]:
    """Simulate each scenario; plan each run with its own `[run]` table, else `run` if given."""
    from .comm import FlatCommModel, default_comm_model
    from .simulate import simulate

    names = list(labels) if labels is not None else [s.name for s in scenarios]
    if len(names) != len(scenarios):
        raise ValueError(f"{len(scenarios)} scenarios but {len(names)} labels")
    out = []
    for label, scn in zip(names, scenarios, strict=True):
        comm = FlatCommModel(scn) if comm_model == "flat" else default_comm_model(scn)
        report = simulate(scn, comm).report
        spec = scn.run if scn.run is not None else run
        out.append(Compared(label, scn, report, plan_for(scn, report, spec) if spec is not None else None))
    return tuple(out)


def comparison_json(items: Sequence[Compared]) -> dict[str, Any]:
    from . import __version__

    best = max(items, key=lambda c: c.report.mfu)
    out: dict[str, Any] = {
        "mfusim_version": __version__,
        "scenarios": [c.to_dict() for c in items],
        "best_mfu": best.label,
        "best_tokens_per_s": max(items, key=lambda c: c.report.tokens_per_s).label,
    }
    planned = [c for c in items if c.plan is not None]
    if planned:
        out["fastest_run"] = min(planned, key=lambda c: c.plan.wall_time_s if c.plan else 0.0).label
        costed = [c for c in planned if c.plan is not None and c.plan.cost_usd is not None]
        if costed:
            out["cheapest_run"] = min(costed, key=lambda c: c.plan.cost_usd or 0.0 if c.plan else 0.0).label
    return out


def _row(name: str, cells: Sequence[str]) -> str:
    return f"  {name:<24}" + "".join(f" {c:>20}" for c in cells)


def _local(scn: Scenario) -> str:
    """`window 128 x 18`, `chunk 8192 x 36` or `-`: a scenario's local-attention layers."""
    m = scn.model
    kinds = [m.attention_window(i)[0] for i in range(m.layers)]
    parts = [f"window {m.sliding_window} x {kinds.count('sliding')}"] if "sliding" in kinds else []
    parts += [f"chunk {m.attention_chunk_size} x {kinds.count('chunked')}"] if "chunked" in kinds else []
    return ", ".join(parts) or "-"


def format_comparison(items: Sequence[Compared]) -> str:
    """One column per scenario: configuration, throughput, memory, breakdown (% of step), plan."""
    reps = [c.report for c in items]
    scns = [c.scenario for c in items]
    lines = [_row("", [c.label[:20] for c in items])]

    def par(r: StepReport) -> str:
        p = r.parallel
        return f"{p.tp}/{p.pp}/{p.dp}/{p.cp}/{p.ep}"

    lines += [
        _row("model", [s.model.name[:20] for s in scns]),
        _row("GPUs", [f"{s.num_gpus:,} x {s.gpu.name}"[:20] for s in scns]),
        _row("tp/pp/dp/cp/ep", [par(r) for r in reps]),
        *(  # the CP implementation moves the step: shown when some scenario runs cp > 1
            [_row("cp_comm_type", [r.parallel.cp_comm_type if r.parallel.cp > 1 else "-" for r in reps])]
            if any(r.parallel.cp > 1 for r in reps)
            else []
        ),
        *(  # local attention (sliding windows / chunks) moves the step too
            [_row("local attention", [_local(s) for s in scns])]
            if any(s.model.has_local_attention for s in scns)
            else []
        ),
        _row("micro x count", [f"{r.parallel.micro_batch} x {r.parallel.num_microbatches}" for r in reps]),
        _row(
            "schedule",
            [schedule_label(r.parallel.schedule, r.parallel.pp, r.parallel.vp) for r in reps],
        ),
        _row("recompute / ZeRO", [f"{r.parallel.recompute} / {r.parallel.zero}" for r in reps]),
        _row("dtype", [s.dtype for s in scns]),
        "",
        _row("MFU", [f"{r.mfu:.1%}" for r in reps]),
        _row("HFU", [f"{r.hfu:.1%}" for r in reps]),
        _row("step time (s)", [f"{r.step_time_s:#.4g}" for r in reps]),
        _row("tokens/s", [f"{r.tokens_per_s:,.0f}" for r in reps]),
        _row("tokens/s per GPU", [f"{r.tokens_per_s_per_gpu:,.1f}" for r in reps]),
        _row(
            "memory GiB/GPU",
            [
                (f"{r.memory.peak_bytes / GIB_BYTES:.1f}" + ("" if r.memory.fits else " (OOM)"))
                if r.memory
                else "-"
                for r in reps
            ],
        ),
        "",
        "  time breakdown (% of step)",
    ]
    for cat in CATEGORIES:
        if any(r.breakdown_s[cat] > 0 for r in reps):
            lines.append(_row(f"  {cat}", [f"{r.breakdown_s[cat] / r.step_time_s:.1%}" for r in reps]))
    plans = [c.plan for c in items]
    if any(p is not None for p in plans):

        def cell(p: Plan | None, fmt: str, key: str) -> str:
            if p is None:
                return "-"
            v = p.to_dict()[key]
            return "-" if v is None else format(v, fmt)

        lines += [
            "",
            "  whole run",
            _row("tokens", [cell(p, ".3g", "tokens") for p in plans]),
            _row("wall-clock days", [f"{p.wall_time_s / DAY_S:.1f}" if p else "-" for p in plans]),
            _row("GPU-hours", [f"{p.gpu_hours:,.0f}" if p else "-" for p in plans]),
            _row(
                "cost (M$)",
                [f"{p.cost_usd / 1e6:,.2f}" if p and p.cost_usd is not None else "-" for p in plans],
            ),
            _row("energy (MWh)", [cell(p, ",.0f", "energy_mwh") for p in plans]),
            _row("goodput", [f"{p.goodput:.1%}" if p else "-" for p in plans]),
            _row(
                "checkpoint every (min)",
                [
                    f"{p.checkpoint_interval_s / 60:.3g}" if p and p.checkpoint_interval_s else "-"
                    for p in plans
                ],
            ),
        ]
    best = max(items, key=lambda c: c.report.mfu)
    lines += ["", f"  highest MFU: {best.label} ({best.report.mfu:.1%})"]
    return "\n".join(lines)


def comparison_figure(items: Sequence[Compared]) -> Any:
    """The breakdowns side by side (bars of 100%, MFU and HFU beside each)."""
    from .plots import breakdown_comparison

    return breakdown_comparison(
        [c.report for c in items], [c.label for c in items], title="Where the step time goes, per scenario"
    )
