"""Figures render to PNG with the expected axes, titles and legends (Agg, nothing shown)."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest
from matplotlib.figure import Figure
from test_trace import gpipe_step  # noqa: E402  (tests/ is on sys.path under pytest)

from simulator.plots import (
    breakdown_bars,
    config_label,
    phase_of,
    pipeline_gantt,
    step_figure,
    sweep_mfu_figure,
)
from simulator.timeline import Span

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _png(fig: Figure, tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    fig.savefig(path, dpi=60)
    assert path.read_bytes()[:8] == PNG_MAGIC
    assert path.stat().st_size > 5_000
    return path


def _texts(fig: Figure) -> list[str]:
    return [t.get_text() for t in fig.findobj(match=lambda o: hasattr(o, "get_text"))]


def test_phase_of_splits_forward_and_backward_by_the_task_phase() -> None:
    def sp(name: str, cat: str = "compute", phase: str = "") -> Span:
        return Span(0, "compute", cat, name, 0.0, 1.0, phase=phase)

    assert phase_of(sp("F3 qkv", phase="F")) == "forward"
    assert phase_of(sp("B12 qkv dgrad", phase="B")) == "backward"
    assert phase_of(sp("W12 qkv wgrad", phase="W")) == "backward"  # zero-bubble weight gradient
    # the phase decides, not the op's name ("backward" in a forward op's name)
    assert phase_of(sp("F3 backward-compatible kernel", phase="F")) == "forward"
    assert phase_of(sp("B3", phase="")) == "compute"  # no task phase: the default class
    assert phase_of(sp("bubble", "bubble")) == "bubble"
    assert phase_of(sp("recompute 3", "recompute", phase="B")) == "recompute"


def test_engine_spans_carry_their_task_phase() -> None:
    from simulator.loading import load_scenario
    from simulator.resources import data_dir
    from simulator.simulate import simulate

    result = simulate(load_scenario(data_dir("scenarios") / "teaching-pp4.toml"), detail=True)
    compute = [s for s in result.timeline.spans if s.category == "compute" and s.stream == "compute"]
    assert compute and {s.phase for s in compute} <= {"F", "B", "W"}
    assert {"F", "B"} <= {s.phase for s in compute}
    # each span's name starts with its task (e.g. "F3 ...", "B3.1 ..."): the phase agrees with it
    assert all(s.name.startswith(s.phase) for s in compute)


def test_pipeline_gantt(tmp_path: Path) -> None:
    tl, report = gpipe_step(p=4, m=8)
    fig = pipeline_gantt(tl, report)
    ax = fig.axes[0]
    assert "Pipeline timeline" in ax.get_title() and "bubble" in ax.get_title()
    assert "ms" in ax.get_xlabel()
    assert [t.get_text() for t in ax.get_yticklabels()] == [f"stage {i}" for i in range(4)]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert {"forward", "backward", "bubble (idle)", "optimizer"} <= set(legend)
    # micro-batch numbers are written on the blocks: 0..7 appear for forward and backward on each stage
    labels = [t.get_text() for t in ax.texts]
    assert labels.count("0") == 2 * 4
    assert fig._suptitle is not None and "MFU" in fig._suptitle.get_text()
    _png(fig, tmp_path, "gantt.png")


def test_breakdown_bars(tmp_path: Path) -> None:
    tl, report = gpipe_step(p=4, m=8)
    fig = breakdown_bars(report)
    ax = fig.axes[0]
    assert "Where the step time goes" in ax.get_title()
    assert ax.get_xlabel().startswith("time per step")
    assert [t.get_text() for t in ax.get_yticklabels()] == ["mean"] + [f"stage {i}" for i in range(4)]
    assert any("% of the step" in t for t in _texts(fig))
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == ["compute (fwd+bwd)", "bubble (idle)", "optimizer"]
    # the bars of each stage add up to the step time (in ms on the axis)
    widths: dict[float, float] = {}
    for patch in ax.patches:
        y = round(patch.get_y() + patch.get_height() / 2, 6)
        widths[y] = widths.get(y, 0.0) + patch.get_width()
    for total in widths.values():
        assert total == pytest.approx(report.step_time_s * 1e3, rel=1e-9)
    _png(fig, tmp_path, "bars.png")


def test_step_figure_has_both_panels(tmp_path: Path) -> None:
    tl, report = gpipe_step(p=2, m=4)
    fig = step_figure(tl, report)
    titles = [a.get_title() for a in fig.axes]
    assert any(t.startswith("Pipeline timeline") for t in titles)
    assert any(t.startswith("Where the step time goes") for t in titles)
    _png(fig, tmp_path, "step.png")


def _sweep_rows() -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for i, (tp, pp) in enumerate([(1, 1), (2, 1), (2, 2), (4, 2), (8, 1), (8, 4)]):
        status = ("ok", "ok", "infeasible_memory", "ok", "invalid", "ok")[i]
        rows.append(
            {
                "tp": tp,
                "pp": pp,
                "dp": 64 // (tp * pp),
                "cp": 1,
                "vp": 1,
                "micro_batch": 1,
                "recompute": "selective",
                "sequence_parallel": True,
                "zero": 1,
                "status": status,
                "mfu": "" if status == "invalid" else 0.3 + 0.02 * i,
            }
        )
    return rows


def test_sweep_mfu_figure_from_dicts_and_csv(tmp_path: Path) -> None:
    rows = _sweep_rows()
    fig = sweep_mfu_figure(rows, top=3)
    ax_rank, ax_top = fig.axes[:2]
    assert "MFU" in ax_rank.get_ylabel() and "MFU" in ax_top.get_xlabel()
    assert "5 simulated" in ax_rank.get_title() and "1 invalid" in ax_rank.get_title()
    assert [t.get_text() for t in ax_top.get_yticklabels()][0] == "tp8 pp4 dp2 mb1 sel sp zero1"
    _png(fig, tmp_path, "sweep.png")
    # a faster configuration that does not fit is not recommended on the right, only counted
    rows_oom = rows + [{**rows[0], "tp": 4, "pp": 4, "dp": 4, "status": "infeasible_memory", "mfu": 0.9}]
    fig_oom = sweep_mfu_figure(rows_oom, top=3)
    top_labels = [t.get_text() for t in fig_oom.axes[1].get_yticklabels()]
    assert top_labels[0] == "tp8 pp4 dp2 mb1 sel sp zero1" and len(top_labels) == 3
    assert "1 faster configurations do not fit" in fig_oom.axes[1].get_title()
    # the same from a CSV as `mfusim sweep --out` writes it (all strings)
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(rows[0]))
    w.writeheader()
    w.writerows(rows)
    buf.seek(0)
    fig2 = sweep_mfu_figure(list(csv.DictReader(buf)))
    assert "5 simulated" in fig2.axes[0].get_title()


def test_config_label_skips_defaults() -> None:
    assert (
        config_label(
            {"tp": 2, "pp": 4, "dp": 8, "cp": 1, "vp": 2, "micro_batch": 2, "recompute": "none", "zero": 0}
        )
        == "tp2 pp4 dp8 vp2 mb2"
    )


def test_engine_step_figure(tmp_path: Path) -> None:
    from simulator.cli import scenario_path
    from simulator.loading import load_scenario
    from simulator.simulate import simulate

    result = simulate(load_scenario(scenario_path(None)), detail=True)
    fig = step_figure(result.timeline, result.report)
    _png(fig, tmp_path, "engine_step.png")


def test_breakdown_comparison_and_flops_figure(tmp_path: Path) -> None:
    from simulator.loading import model_preset
    from simulator.plots import breakdown_comparison, flops_per_token_figure

    _, r1 = gpipe_step(p=4, m=4)
    _, r2 = gpipe_step(p=4, m=16)
    fig = breakdown_comparison([r1, r2], ["m = 4", "m = 16"], title="bubbles")
    ax = fig.axes[0]
    assert ax.get_title() == "bubbles" and ax.get_xlabel() == "% of the step"
    assert [t.get_text() for t in ax.get_yticklabels()] == ["m = 4", "m = 16"]
    assert sum("MFU" in t.get_text() for t in ax.texts) == 2
    _png(fig, tmp_path, "compare.png")
    with pytest.raises(ValueError):
        breakdown_comparison([r1], ["a", "b"])
    fig2 = flops_per_token_figure(model_preset("llama2-7b"), [2048, 8192, 32768])
    assert "sequence length" in fig2.axes[0].get_xlabel()
    assert "GFLOP" in fig2.axes[0].get_ylabel()
    _png(fig2, tmp_path, "flops.png")
