"""Pictures of a simulated step and of a sweep (issue 7).

Every public function returns a `matplotlib.figure.Figure` drawn on an Agg canvas: no
pyplot, no global backend switch, nothing shown. Save with `fig.savefig("step.png")`;
in a notebook the figure displays itself.

* `pipeline_gantt(timeline, report)`: the pipeline as a Gantt chart, stages as rows,
  forward / backward / recompute / exposed communication colored, idle bubbles hatched.
* `breakdown_bars(report)`: the stacked time breakdown of each stage (seconds and %).
* `step_figure(timeline, report)`: both, one above the other (`mfusim run --plot`).
* `sweep_mfu_figure(rows)`: MFU over the configurations of a sweep (`mfusim sweep --plot`).

Seconds are SI inside; the axes show ms or s, whichever reads better.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from .metrics import StepReport
from .specs import ModelSpec
from .timeline import CATEGORIES, MAIN_STREAM, Span, Timeline
from .units import MS_S

# Phases drawn on the Gantt chart: `compute` spans split into forward and backward.
PHASES = (
    "forward",
    "backward",
    "recompute",
    "tp_comm",
    "cp_comm",
    "ep_comm",
    "pp_comm",
    "dp_comm",
    "dataloader",
    "optimizer",
    "host_bound",
    "gpu_spread",
    "other",
    "bubble",
)
COLORS = {
    "forward": "#4C72B0",
    "backward": "#55A868",
    "compute": "#4C72B0",
    "recompute": "#8172B2",
    "tp_comm": "#C44E52",
    "cp_comm": "#DD8452",
    "ep_comm": "#DA8BC3",
    "pp_comm": "#E07BB0",
    "dp_comm": "#937860",
    "dataloader": "#E5B800",
    "optimizer": "#404040",
    "host_bound": "#8C564B",
    "gpu_spread": "#BCBD22",
    "other": "#A0A0A0",
    "bubble": "#FFFFFF",
}
LABELS = {
    "forward": "forward",
    "backward": "backward",
    "compute": "compute (fwd+bwd)",
    "recompute": "recompute",
    "tp_comm": "TP comm (exposed)",
    "cp_comm": "CP comm (exposed)",
    "ep_comm": "EP comm (exposed)",
    "pp_comm": "PP send/recv (exposed)",
    "dp_comm": "DP comm (exposed)",
    "dataloader": "waiting for data",
    "optimizer": "optimizer",
    "host_bound": "waiting for the host (CPU issue)",
    "gpu_spread": "waiting for the slowest GPU",
    "other": "other",
    "bubble": "bubble (idle)",
}
BUBBLE_HATCH = "////"
BUBBLE_EDGE = "#9A9A9A"
SIDE_ALPHA = 0.75

# The schedule phase a span carries (Span.phase) -> its Gantt color class.
PHASE_CLASS = {"F": "forward", "B": "backward", "W": "backward"}


# ----------------------------------------------------------------------------- helpers
def _new_figure(width_in: float, height_in: float) -> Figure:
    fig = Figure(figsize=(width_in, height_in), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def phase_of(span: Span, default: str = "compute") -> str:
    """The Gantt color class of a span: compute splits into forward and backward by the phase
    of the schedule task it belongs to (Span.phase); a compute span without one gets `default`."""
    if span.category != "compute":
        return span.category
    return PHASE_CLASS.get(span.phase, default)


def _compute_default(timeline: Timeline) -> str:
    """When some compute spans are backward, the ones without a phase are drawn as forward."""
    for s in timeline.spans:
        if s.category == "compute" and PHASE_CLASS.get(s.phase) == "backward":
            return "forward"
    return "compute"


def _time_unit(step_time_s: float) -> tuple[float, str]:
    """(seconds per axis unit, unit name): ms below 2 s, else s."""
    return (MS_S, "ms") if step_time_s < 2.0 else (1.0, "s")


def _chunk_color(color: str, chunk: int) -> tuple[float, float, float]:
    """Later model chunks of an interleaved schedule in lighter shades of their phase."""
    r, g, b = to_rgb(color)
    k = 0.0 if chunk <= 0 else min(0.55, 0.22 * chunk)
    return (r + (1 - r) * k, g + (1 - g) * k, b + (1 - b) * k)


def _merged(spans: Iterable[Span], key: Any) -> list[tuple[float, float, Span]]:
    """Adjacent spans of the same key merged into (start_s, end_s, first span) blocks."""
    out: list[tuple[float, float, Span]] = []
    tol = 1e-12
    for s in sorted(spans, key=lambda x: (x.start_s, x.end_s)):
        if out and key(out[-1][2]) == key(s) and abs(out[-1][1] - s.start_s) <= tol * max(1.0, s.start_s):
            out[-1] = (out[-1][0], s.end_s, out[-1][2])
        else:
            out.append((s.start_s, s.end_s, s))
    return out


def _task_key(span: Span) -> tuple[str, int, int]:
    """Which task a span belongs to: its name's first word ("F3", "B3.1", "W3") and indices."""
    head = span.name.split(" ", 1)[0] if span.name else ""
    return (head, span.microbatch, span.chunk)


def _legend_handles(keys: Iterable[str]) -> list[Patch]:
    handles = []
    for k in keys:
        if k == "bubble":
            handles.append(
                Patch(facecolor=COLORS[k], edgecolor=BUBBLE_EDGE, hatch=BUBBLE_HATCH, label=LABELS[k])
            )
        else:
            handles.append(Patch(facecolor=COLORS[k], edgecolor="none", label=LABELS.get(k, k)))
    return handles


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


# ----------------------------------------------------------------------------- Gantt
GANTT_MAIN_H = 0.62  # height of a stage's GPU row, in rows (stages are 1 apart)
GANTT_SIDE_H = 0.2  # height of the thin lane beneath it (work beside the GPU timeline)


def _axes_width_px(ax: Axes) -> float:
    """The width of `ax` in pixels on its root figure (a SubFigure climbs to it)."""
    fig: Any = ax.figure
    while fig is not None and not isinstance(fig, Figure):  # a SubFigure: climb to the root figure
        fig = getattr(fig, "figure", None) if getattr(fig, "figure", None) is not fig else None
    width_in = float(fig.get_size_inches()[0]) if isinstance(fig, Figure) else 10.0
    return width_in * (fig.dpi if isinstance(fig, Figure) else 100.0) * ax.get_position().width


def _spans_by_stage(timeline: Timeline) -> tuple[dict[int, list[Span]], dict[int, list[Span]]]:
    """Spans with a duration, per stage: (on the GPU's main stream, beside it)."""
    main_by_stage: dict[int, list[Span]] = {st: [] for st in range(timeline.num_stages)}
    side_by_stage: dict[int, list[Span]] = {st: [] for st in range(timeline.num_stages)}
    for sp in timeline.spans:
        if sp.duration_s > 0:
            (main_by_stage if sp.stream == MAIN_STREAM else side_by_stage).setdefault(sp.stage, []).append(sp)
    return main_by_stage, side_by_stage


def _draw_phase_bars(ax: Axes, y: float, main: list[Span], default: str, unit_s: float) -> set[str]:
    """One stage's GPU row colored by phase (bubbles hatched); returns the phases drawn."""

    def phase(span: Span) -> str:
        return phase_of(span, default)

    present: set[str] = set()
    by_color: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for start, end, sp in _merged(main, key=lambda x: (phase(x), x.microbatch, x.chunk)):
        ph = phase(sp)
        present.add(ph)
        by_color.setdefault((ph, max(sp.chunk, 0)), []).append((start / unit_s, (end - start) / unit_s))
    yrange = (y - GANTT_MAIN_H / 2, GANTT_MAIN_H)
    for (ph, chunk), xr in by_color.items():
        if ph == "bubble":
            ax.broken_barh(
                xr, yrange, facecolors=COLORS[ph], edgecolors=BUBBLE_EDGE, hatch=BUBBLE_HATCH, linewidth=0.0
            )
        else:
            ax.broken_barh(
                xr, yrange, facecolors=_chunk_color(COLORS.get(ph, "#A0A0A0"), chunk), linewidth=0.0
            )
    return present


def _draw_task_outlines(
    ax: Axes, y: float, main: list[Span], unit_s: float, px_per_unit: float, label_microbatches: bool
) -> None:
    """One outline (and its micro-batch number) per task: a forward or backward of one micro-batch
    on one chunk, including the exposed communication inside it. Too narrow to see: left out."""
    tasks = _merged(
        (x for x in main if x.microbatch >= 0 and x.category not in ("bubble", "pp_comm", "dataloader")),
        key=_task_key,
    )
    outlines = [(a / unit_s, (b - a) / unit_s) for a, b, _ in tasks if (b - a) / unit_s * px_per_unit >= 4]
    if outlines:
        ax.broken_barh(
            outlines,
            (y - GANTT_MAIN_H / 2, GANTT_MAIN_H),
            facecolors="none",
            edgecolors="white",
            linewidth=0.7,
        )
    if not label_microbatches:
        return
    for start, end, sp in tasks:
        text = str(sp.microbatch)
        if (end - start) / unit_s * px_per_unit < 6.5 * len(text) + 4:
            continue
        ax.text(
            (start + end) / 2 / unit_s,
            y,
            text,
            ha="center",
            va="center",
            fontsize=7,
            color="white",
            clip_on=True,
        )


def _draw_side_lane(ax: Axes, y: float, side: list[Span], unit_s: float) -> set[str]:
    """Work beside the GPU timeline (overlapped communication, transfers, loading) as a thin lane
    under the stage's row; returns the categories drawn."""
    side_by_cat: dict[str, list[tuple[float, float]]] = {}
    for start, end, sp in _merged(side, key=lambda x: (x.category, x.stream)):
        side_by_cat.setdefault(sp.category, []).append((start / unit_s, (end - start) / unit_s))
    for cat, xr in side_by_cat.items():
        ax.broken_barh(
            xr,
            (y + GANTT_MAIN_H / 2, GANTT_SIDE_H),
            facecolors=COLORS.get(cat, "#A0A0A0"),
            alpha=SIDE_ALPHA,
            linewidth=0,
        )
    return set(side_by_cat)


def _style_gantt_axes(ax: Axes, timeline: Timeline, report: StepReport, unit_s: float, unit: str) -> None:
    """Limits, stage labels, time axis and the title (schedule and bubble share)."""
    ax.set_xlim(0, timeline.step_time_s / unit_s)
    ax.set_ylim(timeline.num_stages - 0.5 + GANTT_SIDE_H, -0.5)
    ax.set_yticks(range(timeline.num_stages))
    ax.set_yticklabels([f"stage {i}" for i in range(timeline.num_stages)])
    ax.set_xlabel(f"time within the step ({unit})")
    ax.grid(axis="x", color="#DDDDDD", linewidth=0.6)
    ax.set_axisbelow(True)
    bubble = report.breakdown_s.get("bubble", 0.0) / report.step_time_s if report.step_time_s > 0 else 0.0
    par = report.parallel
    ax.set_title(
        f"Pipeline timeline: pp={par.pp}, vp={par.vp}, {par.num_microbatches} micro-batches"
        f"{f' in {par.pipeline_runs} runs' if par.pipeline_runs > 1 else ''}, "
        f"schedule {par.schedule}  |  bubble {_pct(bubble)} of the step",
        fontsize=10,
    )


def _gantt_legend(ax: Axes, report: StepReport, present: set[str], side_present: set[str]) -> None:
    """The legend right of the chart: the phases drawn, then the thin lanes' categories."""
    keys = [k for k in ("forward", "backward", "compute", *PHASES[2:]) if k in present]
    handles = _legend_handles(keys)
    for cat in (c for c in CATEGORIES if c in side_present):
        name = LABELS.get(cat, cat).replace(" (exposed)", "")
        handles.append(
            Patch(facecolor=COLORS.get(cat, "#A0A0A0"), alpha=SIDE_ALPHA, label=f"thin lane: {name}")
        )
    title = "GPU is doing" + ("\n(lighter shade: later model chunk)" if report.parallel.vp > 1 else "")
    ax.legend(
        handles=handles,
        loc="upper left",
        bbox_to_anchor=(1.005, 1.0),
        fontsize=8,
        frameon=False,
        title=title,
        title_fontsize=8,
    )


def draw_pipeline_gantt(
    ax: Axes, timeline: Timeline, report: StepReport, *, label_microbatches: bool = True
) -> None:
    """Draw the pipeline Gantt chart on `ax` (see `pipeline_gantt`): per stage its GPU row by
    phase, the task outlines and micro-batch numbers, the thin lane beside it; then axes, legend."""
    unit_s, unit = _time_unit(timeline.step_time_s)
    px_per_unit = _axes_width_px(ax) / max(timeline.step_time_s / unit_s, 1e-30)
    default = _compute_default(timeline)
    main_by_stage, side_by_stage = _spans_by_stage(timeline)
    present: set[str] = set()
    side_present: set[str] = set()
    for stage in range(timeline.num_stages):
        main = main_by_stage[stage]
        present |= _draw_phase_bars(ax, stage, main, default, unit_s)
        _draw_task_outlines(ax, stage, main, unit_s, px_per_unit, label_microbatches)
        side_present |= _draw_side_lane(ax, stage, side_by_stage[stage], unit_s)
    _style_gantt_axes(ax, timeline, report, unit_s, unit)
    _gantt_legend(ax, report, present, side_present)


def pipeline_gantt(timeline: Timeline, report: StepReport) -> Figure:
    """The step's pipeline as a Gantt chart: one row per stage, its GPU timeline colored by phase.

    Forward, backward, recomputation and exposed communication are colored; bubbles are
    hatched white (the GPU idles); micro-batch numbers are written on blocks wide enough.
    A thin lane under each row shows what runs beside it (overlapped DP/TP comm, P2P, data).
    """
    height = 1.6 + 0.42 * timeline.num_stages
    fig = _new_figure(13.0, min(height, 14.0))
    ax = fig.add_subplot(1, 1, 1)
    draw_pipeline_gantt(ax, timeline, report)
    fig.suptitle(_headline(report), fontsize=11)
    return fig


def _headline(report: StepReport) -> str:
    return (
        f"{report.name}: step {report.step_time_s:.3g} s, MFU {_pct(report.mfu)}, HFU {_pct(report.hfu)}, "
        f"{report.tokens_per_s:,.0f} tokens/s on {report.num_gpus:,} GPUs"
    )


# ----------------------------------------------------------------------------- breakdown
def draw_breakdown_bars(ax: Axes, report: StepReport) -> None:
    """Stacked horizontal bars of each stage's breakdown (and the mean) on `ax`."""
    step = report.step_time_s
    unit_s, unit = _time_unit(step)
    rows = [("mean", report.breakdown_s)] + [
        (f"stage {i}", b) for i, b in enumerate(report.breakdown_by_stage_s)
    ]
    if len(rows) == 2:  # one stage: the mean is the stage
        rows = rows[1:]
    used = [c for c in CATEGORIES if any(r[1].get(c, 0.0) > 0 for r in rows)]
    for y, (_, bd) in enumerate(rows):
        left = 0.0
        for c in used:
            w = bd.get(c, 0.0)
            if w <= 0:
                continue
            kw: dict[str, Any] = {"color": COLORS[c], "edgecolor": "white", "linewidth": 0.4}
            if c == "bubble":
                kw = {"color": COLORS[c], "edgecolor": BUBBLE_EDGE, "hatch": BUBBLE_HATCH, "linewidth": 0.0}
            ax.barh(y, w / unit_s, left=left / unit_s, height=0.7, **kw)
            if step > 0 and w / step >= 0.06:
                dark = c not in ("bubble", "dataloader", "other")
                ax.text(
                    (left + w / 2) / unit_s,
                    y,
                    f"{100 * w / step:.0f}%",
                    ha="center",
                    va="center",
                    fontsize=7,
                    color="white" if dark else "black",
                )
            left += w
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([r[0] for r in rows])
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlim(0, step / unit_s * 1.001 if step > 0 else 1.0)
    ax.set_xlabel(f"time per step ({unit})")
    if step > 0:

        def to_pct(x: Any) -> Any:
            return x * (unit_s / step * 100.0)

        def from_pct(p: Any) -> Any:
            return p * (step / 100.0 / unit_s)

        top = ax.secondary_xaxis("top", functions=(to_pct, from_pct))
        top.set_xlabel("% of the step", fontsize=8)
        top.tick_params(labelsize=8)
    ax.grid(axis="x", color="#DDDDDD", linewidth=0.6)
    ax.set_axisbelow(True)
    ax.set_title(
        "Where the step time goes (exclusive categories; hidden communication counts as compute)", fontsize=10
    )
    ax.legend(
        handles=_legend_handles(used),
        loc="upper left",
        bbox_to_anchor=(1.005, 1.0),
        fontsize=8,
        frameon=False,
    )


def breakdown_bars(report: StepReport) -> Figure:
    """The time breakdown of every pipeline stage as stacked bars, in seconds and in % of the step."""
    n = len(report.breakdown_by_stage_s) + 1
    fig = _new_figure(12.0, min(2.0 + 0.32 * n, 12.0))
    ax = fig.add_subplot(1, 1, 1)
    draw_breakdown_bars(ax, report)
    fig.suptitle(_headline(report), fontsize=11)
    return fig


def step_figure(timeline: Timeline, report: StepReport) -> Figure:
    """`mfusim run --plot`: the pipeline Gantt chart above the per-stage breakdown."""
    p = timeline.num_stages
    gantt_h = 1.2 + 0.42 * p
    bars_h = 1.4 + 0.3 * (p + (1 if p > 1 else 0))
    total = min(gantt_h + bars_h + 0.6, 20.0)
    fig = _new_figure(14.0, total)
    gs = fig.add_gridspec(2, 1, height_ratios=[gantt_h, bars_h])
    draw_pipeline_gantt(fig.add_subplot(gs[0]), timeline, report)
    draw_breakdown_bars(fig.add_subplot(gs[1]), report)
    fig.suptitle(_headline(report), fontsize=12, fontweight="bold")
    return fig


def breakdown_comparison(
    reports: Sequence[StepReport],
    labels: Sequence[str] | None = None,
    *,
    title: str = "Where the step time goes",
) -> Figure:
    """Several runs side by side: each one's mean breakdown as % of its step, with its MFU and HFU.

    For what-if comparisons (TP inside vs across nodes, overlap on/off, recomputation
    choices): the bars all have length 100%, the label says what each run achieves.
    """
    names = list(labels) if labels is not None else [r.name for r in reports]
    if len(names) != len(reports):
        raise ValueError(f"{len(reports)} reports but {len(names)} labels")
    fig = _new_figure(12.0, min(1.8 + 0.5 * len(reports), 12.0))
    ax = fig.add_subplot(1, 1, 1)
    used = [c for c in CATEGORIES if any(r.breakdown_s.get(c, 0.0) > 0 for r in reports)]
    for y, rep in enumerate(reports):
        step = rep.step_time_s
        left = 0.0
        for c in used:
            frac = rep.breakdown_s.get(c, 0.0) / step if step > 0 else 0.0
            if frac <= 0:
                continue
            kw: dict[str, Any] = {"color": COLORS[c], "edgecolor": "white", "linewidth": 0.4}
            if c == "bubble":
                kw = {"color": COLORS[c], "edgecolor": BUBBLE_EDGE, "hatch": BUBBLE_HATCH, "linewidth": 0.0}
            ax.barh(y, 100 * frac, left=100 * left, height=0.7, **kw)
            if frac >= 0.06:
                dark = c not in ("bubble", "dataloader", "other")
                ax.text(
                    100 * (left + frac / 2),
                    y,
                    f"{100 * frac:.0f}%",
                    ha="center",
                    va="center",
                    fontsize=7,
                    color="white" if dark else "black",
                )
            left += frac
        ax.text(101, y, f"MFU {_pct(rep.mfu)}\nHFU {_pct(rep.hfu)}", va="center", fontsize=8)
    ax.set_yticks(range(len(reports)))
    ax.set_yticklabels(names, fontsize=8)
    ax.set_ylim(len(reports) - 0.5, -0.5)
    ax.set_xlim(0, 100)
    ax.set_xlabel("% of the step")
    ax.grid(axis="x", color="#DDDDDD", linewidth=0.6)
    ax.set_axisbelow(True)
    ax.set_title(title, fontsize=11)
    ax.legend(
        handles=_legend_handles(used), loc="upper left", bbox_to_anchor=(1.09, 1.0), fontsize=8, frameon=False
    )
    return fig


def flops_per_token_figure(model: ModelSpec, seq_lens: Sequence[int]) -> Figure:
    """FLOPs per token of `model` by sequence length: 6Ψ, 6Ψ + 12·L·h·s (PaLM App. B) and the
    exact count (every matmul, full s×s attention), and how far 6Ψ falls short."""
    from . import flops

    ms = [dataclasses.replace(model, seq_len=int(s)) for s in seq_lens]
    six = [flops.flops_per_token_6psi(m) for m in ms]
    attn = [flops.flops_per_token_6psi_attn(m) for m in ms]
    exact = [flops.flops_per_token_exact(m) for m in ms]
    fig = _new_figure(12.0, 4.2)
    ax, ax2 = fig.subplots(1, 2)
    ax.plot(seq_lens, [x / 1e9 for x in six], "o-", label="6Ψ (seed notes)")
    ax.plot(seq_lens, [x / 1e9 for x in attn], "s-", label="6Ψ + 12·L·h·s")
    ax.plot(seq_lens, [x / 1e9 for x in exact], "^-", label="exact (all matmuls + logits)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("sequence length s (tokens)")
    ax.set_ylabel("GFLOP per token (forward + backward)")
    ax.set_title(f"{model.name}: FLOPs per training token", fontsize=10)
    ax.grid(color="#DDDDDD", linewidth=0.6)
    ax.legend(fontsize=8)
    ax2.plot(seq_lens, [100 * (1 - a / e) for a, e in zip(six, exact, strict=True)], "o-", label="6Ψ misses")
    ax2.plot(
        seq_lens,
        [100 * (1 - a / e) for a, e in zip(attn, exact, strict=True)],
        "s-",
        label="6Ψ + 12·L·h·s misses",
    )
    ax2.set_xscale("log", base=2)
    ax2.set_xlabel("sequence length s (tokens)")
    ax2.set_ylabel("% of the exact FLOPs not counted")
    ax2.set_title("How wrong the approximation is (MFU is understated by as much)", fontsize=10)
    ax2.grid(color="#DDDDDD", linewidth=0.6)
    ax2.legend(fontsize=8)
    return fig


# ----------------------------------------------------------------------------- sweeps
def _get(row: Any, key: str, default: Any = None) -> Any:
    if isinstance(row, Mapping):
        return row.get(key, default)
    if dataclasses.is_dataclass(row) and not isinstance(row, type):
        return getattr(row, key, default)
    to_dict = getattr(row, "to_dict", None)
    if callable(to_dict):
        return to_dict().get(key, default)
    return getattr(row, key, default)


def _float(value: Any) -> float | None:
    if value is None or value == "":
        return None
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def config_label(row: Any) -> str:
    """A short name of one configuration: `tp8 pp16 dp8 mb1 vp2 sel zero1`."""
    parts = []
    for key in ("tp", "pp", "dp", "cp", "ep", "vp"):
        v = _get(row, key)
        if v in (None, ""):
            continue
        if key in ("cp", "ep", "vp") and str(v) == "1":
            continue
        parts.append(f"{key}{v}")
    mb = _get(row, "micro_batch")
    if mb not in (None, ""):
        parts.append(f"mb{mb}")
    rc = _get(row, "recompute")
    if rc not in (None, "", "none"):
        parts.append({"selective": "sel", "full": "full-rc"}.get(str(rc), str(rc)))
    sp = _get(row, "sequence_parallel")
    if str(sp).lower() in ("true", "1") and str(_get(row, "tp", "1")) != "1":
        parts.append("sp")
    z = _get(row, "zero")
    if z not in (None, "", 0, "0"):
        parts.append(f"zero{z}")
    return " ".join(parts)


def sweep_mfu_figure(rows: Sequence[Any], *, top: int = 25, title: str | None = None) -> Figure:
    """MFU over the configurations of a sweep.

    `rows` are sweep results: mappings (e.g. `csv.DictReader` rows of `mfusim sweep --out`)
    or objects with the SPEC §3 columns (`tp, pp, dp, ..., status, mfu`). Left: every
    simulated configuration ranked by MFU (memory-infeasible ones marked). Right: the
    `top` best that fit in memory, named. Invalid rows are counted, not drawn.
    """
    scored = []
    invalid = 0
    for r in rows:
        status = str(_get(r, "status", "ok") or "ok")
        mfu = _float(_get(r, "mfu"))
        if status == "invalid" or mfu is None:
            invalid += 1
            continue
        scored.append((mfu, status == "ok", r))
    scored.sort(key=lambda t: t[0], reverse=True)
    fig = _new_figure(14.0, max(4.0, min(2.0 + 0.26 * min(top, max(len(scored), 1)), 12.0)))
    gs = fig.add_gridspec(1, 2, width_ratios=[1.0, 1.5])
    ax_rank = fig.add_subplot(gs[0])
    ax_top = fig.add_subplot(gs[1])
    n_fit = sum(1 for s in scored if s[1])
    if scored:
        xs = list(range(1, len(scored) + 1))
        ax_rank.scatter(
            [x for x, s in zip(xs, scored, strict=True) if s[1]],
            [100 * s[0] for s in scored if s[1]],
            s=12,
            color="#4C72B0",
            label=f"fits in memory ({n_fit})",
            zorder=3,  # above the crosses: on a busy sweep they hid every fitting point
        )
        ax_rank.scatter(
            [x for x, s in zip(xs, scored, strict=True) if not s[1]],
            [100 * s[0] for s in scored if not s[1]],
            s=12,
            marker="x",
            color="#C44E52",
            label=f"does not fit ({len(scored) - n_fit})",
        )
        ax_rank.legend(fontsize=8, loc="upper right")
    ax_rank.set_xlabel("configuration rank")
    ax_rank.set_ylabel("predicted MFU (%)")
    ax_rank.set_ylim(bottom=0)
    ax_rank.grid(color="#DDDDDD", linewidth=0.6)
    ax_rank.set_title(
        f"All {len(scored)} simulated configurations"
        + (f" ({invalid} invalid, not shown)" if invalid else ""),
        fontsize=10,
    )

    fitting = [b for b in scored if b[1]]
    best = (fitting or scored)[:top]
    above = sum(1 for b in scored if not b[1] and best and b[0] > best[0][0]) if fitting else 0
    ys = range(len(best))
    ax_top.barh(
        list(ys),
        [100 * b[0] for b in best],
        height=0.7,
        color=["#4C72B0" if b[1] else "#F2B8BA" for b in best],
        hatch=None,
        edgecolor=["none" if b[1] else "#C44E52" for b in best],
    )
    for y, b in zip(ys, best, strict=True):
        ax_top.text(
            100 * b[0], y, f" {100 * b[0]:.1f}%" + ("" if b[1] else " (OOM)"), va="center", fontsize=7
        )
    ax_top.set_yticks(list(ys))
    ax_top.set_yticklabels([config_label(b[2]) for b in best], fontsize=7)
    ax_top.set_ylim(len(best) - 0.5, -0.5)
    xmax = max((100 * b[0] for b in best), default=1.0)
    ax_top.set_xlim(0, xmax * 1.18 + 1e-9)
    ax_top.set_xlabel("predicted MFU (%)")
    ax_top.grid(axis="x", color="#DDDDDD", linewidth=0.6)
    ax_top.set_axisbelow(True)
    top_title = f"Top {len(best)} by MFU" + (" that fit in memory" if fitting else " (none fits in memory)")
    if above:
        top_title += f"\n({above} faster configurations do not fit, left: red x)"
    ax_top.set_title(top_title, fontsize=10)
    fig.suptitle(title or "Sweep: predicted MFU of every configuration", fontsize=12)
    return fig


def save_figure(fig: Figure, path: str, *, dpi: int = 120, flag: str = "--plot") -> None:
    """Write a figure (PNG, SVG or PDF by the file's extension), atomically: a temporary file
    renamed into place (simulator.outputs), so an interrupted save leaves no torn picture."""
    from .outputs import atomic_path

    fmt = Path(path).suffix.lstrip(".").lower() or None
    with atomic_path(path, flag) as tmp:
        fig.savefig(tmp, dpi=dpi, format=fmt)
