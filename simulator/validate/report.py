"""The validation report as text, CSV, Markdown and a histogram."""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .columns import METRIC_HFU, METRIC_ITERATION_TIME, METRIC_MFU, METRIC_TFLOPS, METRIC_TOKENS
from .results import ValidationReport, result_dict


# ----------------------------------------------------------------------------- output
def _fmt(value: float, metric: str) -> str:
    if metric == METRIC_TOKENS:
        return f"{value:,.0f}"
    if metric == METRIC_ITERATION_TIME:
        return f"{value:.3f}"
    return f"{value:.1f}"


UNITS = {
    METRIC_TOKENS: "tok/s/GPU",
    METRIC_TFLOPS: "TFLOP/s/GPU",
    METRIC_ITERATION_TIME: "s/step",
    METRIC_MFU: "MFU %",
    METRIC_HFU: "HFU %",
}


def format_report(report: ValidationReport) -> str:
    lines = []
    width = max([len(r.case.run_id) for r in report.results] + [2])
    width = min(width, 64)
    gw = max([len(r.case.gpu) for r in report.results] + [3])
    lines.append(
        f"{'id':<{width}}  {'gpu':<{gw}}  {'metric':<11}  {'predicted':>10}  {'measured':>10}  {'error %':>8}"
    )
    for r in report.results:
        c = r.case
        lines.append(
            f"{c.run_id[:width]:<{width}}  {c.gpu:<{gw}}  {UNITS.get(c.metric, c.metric):<11}  "
            f"{_fmt(r.predicted, c.metric):>10}  {_fmt(c.measured, c.metric):>10}  {r.error_pct:>+8.1f}"
        )
    s = report.summary()
    lines.append("")
    lines.append("Mean absolute percentage error (MAPE)")

    def floor(entry: Mapping[str, Any]) -> str:
        """The data's own floor: identical scenarios measured apart (spread_floor_pct)."""
        f = entry.get("spread_floor_pct", 0.0)
        return f"; data-spread floor {f:.1f}%" if isinstance(f, float) and f > 0.05 else ""

    def row(label: str, entry: Mapping[str, Any]) -> str:
        v = entry["mape_pct"]
        text = f"{v:6.1f}%" if isinstance(v, float) and math.isfinite(v) else "     - "
        return f"  {label:<44} {text}  ({entry['rows']} rows)"

    lines.append(row("overall", s["overall"]))
    lines.append(row("A100/H100 dense BF16/FP16 (target)", s["target_a100_h100_dense_16bit"]))
    lines.append(" by source:")
    for k, v in s["by_source"].items():
        lines.append(row("  " + k, v))
    lines.append(" by GPU:")
    for k, v in s["by_gpu"].items():
        lines.append(row("  " + k, v))
    lines.append(" by dtype:")
    for k, v in s["by_dtype"].items():
        lines.append(row("  " + k, v))
    moe = s["moe"]
    if moe["all"]["rows"]:
        lines.append(" mixture-of-experts rows (all releases / newest release per configuration):")
        lines.append(row("  MoE, all releases", moe["all"]) + floor(moe["all"]))
        lines.append(
            row("  MoE, newest release per configuration", moe["newest_release"])
            + floor(moe["newest_release"])
        )
        for family, entry in moe["by_family"].items():
            lines.append(row("  " + family, entry["all"]) + floor(entry["all"]))
        if moe["data_spread"]:
            lines.append("")
            lines.append(
                f"Data spread: {len(moe['data_spread'])} MoE configurations measured more than once "
                "disagree with themselves (max/min > 1.2; reported, not fitted):"
            )
            for g in moe["data_spread"]:
                lo, hi = g["predicted_min"], g["predicted_max"]
                predicted = f"{lo:,.0f}" if hi <= lo * 1.0005 else f"{lo:,.0f} .. {hi:,.0f}"
                recipes = len(g["recipes"])  # distinct launch recipes ("-" = none recorded)
                lines.append(
                    f"  {g['model']} on {g['num_gpus']} {g['gpu']}: {g['measured_min']:,.0f} .. "
                    f"{g['measured_max']:,.0f} (x{g['ratio']:.2f}, {len(g['rows'])} rows); predicted "
                    f"{predicted}" + (f"; {recipes} different launch recipes" if recipes > 1 else "")
                )
    mem = s["memory_disagreements"]
    if mem["rows"]:
        per_gpu = ", ".join(f"{g} {n}" for g, n in mem["by_gpu"].items())
        lines.append("")
        lines.append(
            f"Memory: {mem['rows']} of {mem['of']} rows ran although the memory model says they do not "
            f"fit ({per_gpu}); the model over-counts there or misses a memory saving the run used "
            "(column memory_fits of --out; reported, the predictions are unchanged)."
        )
    if report.unusable:
        lines.append("")
        lines.append(f"Rows not simulated ({len(report.unusable)}):")
        for u in report.unusable:
            lines.append(f"  {u.run_id}  [{u.gpu}]  {u.reason}")
    return "\n".join(lines)


OUT_COLUMNS = (
    "id",
    "source",
    "gpu",
    "dtype",
    "target",
    "status",
    "metric",
    "flop_convention",
    "predicted",
    "measured",
    "error_pct",
    "step_time_s",
    "mfu",
    "memory_fits",
    "reason",
    "assumptions",
)


def write_out(report: ValidationReport, path: Path) -> None:
    from ..outputs import atomic_output

    with atomic_output(path, "--out", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=OUT_COLUMNS)
        w.writeheader()
        for r in report.results:
            d = result_dict(r)
            d["status"] = "ok"
            d["reason"] = ""
            d["assumptions"] = "; ".join(d["assumptions"])
            d.pop("scenario", None)
            w.writerow({k: d.get(k, "") for k in OUT_COLUMNS})
        for u in report.unusable:
            w.writerow(
                {
                    "id": u.run_id,
                    "source": u.source_key,
                    "gpu": u.gpu,
                    "status": "unusable",
                    "reason": u.reason,
                }
            )


# ----------------------------------------------------------------------------- accuracy report
def error_histogram(report: ValidationReport, path: Path, title: str = "") -> None:
    """Histogram of per-row errors (%), target rows and the others stacked.

    Drawn on its own Agg canvas (no pyplot, no global backend switch), like simulator/plots.py.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    target = [r.error_pct for r in report.results if r.case.is_target]
    other = [r.error_pct for r in report.results if not r.case.is_target]
    clip = 100.0
    bins = [x * 5.0 for x in range(-20, 21)]
    fig = Figure(figsize=(8, 4.2))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.hist(
        [[max(min(e, clip), -clip) for e in target], [max(min(e, clip), -clip) for e in other]],
        bins=bins,
        stacked=True,
        label=[
            f"A100/H100 dense BF16/FP16 ({len(target)} rows)",
            f"other rows: FP8, Blackwell, MoE ({len(other)})",
        ],
        color=["tab:blue", "tab:orange"],
    )
    ax.axvline(0, color="k", lw=0.8)
    ax.set_xlabel("error of predicted throughput vs measured, % (clipped to ±100)")
    ax.set_ylabel("rows")
    ax.set_title(title or "mfusim validate: prediction error per published run")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def markdown_table(report: ValidationReport, roles: Mapping[str, str] | None = None) -> str:
    """The per-row table and the MAPE groups as Markdown (docs/accuracy_table.md)."""
    roles = roles or {}
    s = report.summary()

    def pct(entry: Mapping[str, Any]) -> str:
        v = entry["mape_pct"]
        return f"{v:.1f}%" if isinstance(v, float) and math.isfinite(v) else "-"

    out = ["| group | MAPE | rows |", "|---|---:|---:|"]
    out.append(f"| overall | {pct(s['overall'])} | {s['overall']['rows']} |")
    t = s["target_a100_h100_dense_16bit"]
    out.append(f"| **A100/H100 dense BF16/FP16** | **{pct(t)}** | {t['rows']} |")
    for title, key in (("source", "by_source"), ("GPU", "by_gpu"), ("dtype", "by_dtype")):
        for name, entry in s[key].items():
            out.append(f"| {title}: {name} | {pct(entry)} | {entry['rows']} |")
    if roles:
        for role in ("fit", "held-out"):
            errs = [abs(r.error_pct) for r in report.results if roles.get(r.case.run_id) == role]
            if errs:
                out.append(f"| calibration {role} rows | {sum(errs) / len(errs):.1f}% | {len(errs)} |")
    out.append("")
    out.append("| id | GPU | dtype | metric | predicted | measured | error % | calibration |")
    out.append("|---|---|---|---|---:|---:|---:|---|")
    for r in sorted(report.results, key=lambda r: (r.case.source_key, r.case.gpu, r.case.run_id)):
        c = r.case
        out.append(
            f"| {c.run_id} | {c.gpu} | {c.dtype} | {UNITS.get(c.metric, c.metric)} | "
            f"{_fmt(r.predicted, c.metric)} | {_fmt(c.measured, c.metric)} | {r.error_pct:+.1f} | "
            f"{roles.get(c.run_id, '-')} |"
        )
    out.append("")
    out.append(f"Rows not simulated ({len(report.unusable)}):")
    out.append("")
    for u in report.unusable:
        out.append(f"* `{u.run_id}` ({u.gpu}): {u.reason}")
    return "\n".join(out) + "\n"
