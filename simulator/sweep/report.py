"""A sweep's ranked table, JSON and plot."""

from __future__ import annotations

import io
from collections import Counter
from collections.abc import Mapping
from typing import Any

from ..specs import Scenario, schedule_label
from ..timeline import CATEGORIES
from .columns import SPEC_CONFIG_COLUMNS, STATUS_INVALID, STATUS_OK, STATUS_OOM
from .driver import SweepResult
from .rank import _rank_value

# ----------------------------------------------------------------------------- report
# the configuration columns of SPEC §3 that the ranked table shows (all but global_batch, which is
# fixed unless swept; a swept one is added as an extra column)
TABLE_KEYS = tuple(c for c in SPEC_CONFIG_COLUMNS if c != "global_batch")
SHORT = {
    "compute": "comp",
    "recompute": "recomp",
    "tp_comm": "tp-com",
    "cp_comm": "cp-com",
    "ep_comm": "ep-com",
    "pp_comm": "pp-com",
    "dp_comm": "dp-com",
    "bubble": "bubble",
    "dataloader": "data",
    "optimizer": "optim",
    "host_bound": "host",
    "gpu_spread": "slowest",
    "other": "other",
}


def format_table(scn: Scenario, result: SweepResult, top: int, rank_by: str) -> str:
    out = io.StringIO()
    c = result.counts
    total = sum(c.values())
    out.write(
        f"{scn.name}: {total} configurations — {c[STATUS_OK]} ok, {c[STATUS_OOM]} infeasible_memory, "
        f"{c[STATUS_INVALID]} invalid\n"
    )
    out.write(f"ranked by {rank_by}; evaluated with: {result.engine_note}\n")
    if result.engine == "auto":
        out.write(
            "(--engine auto: every configuration by the closed form; the best re-simulated by the "
            "discrete-event engine until the top ones are all engine-checked (engine = des); one ranking, "
            "by the engine's numbers wherever it ran)\n"
        )
    if result.largest_gap is not None and result.largest_gap_row is not None:
        r = result.largest_gap_row
        out.write(
            f"largest closed-form/engine gap over the {_checked(result)} engine-checked configurations: "
            f"{100 * result.largest_gap:.1f}% of MFU ({config_name(r)}: closed form "
            f"{100 * r['closed_form_mfu']:.1f}%, engine {100 * r['mfu']:.1f}%)\n"
        )
    best = list(result.ranked[:top])
    if not best:
        out.write("no configuration is valid and fits in memory\n")
    else:
        cats = [k for k in CATEGORIES if any((r.get(f"{k}_s") or 0.0) > 0 for r in best)]
        extra = [k for k in result.swept_keys if k not in TABLE_KEYS]
        # "no pipeline" at pp = 1 (with the order of passes that still shapes the step, if any)
        sched = [schedule_label(r["schedule"], r["pp"], 1) for r in best]
        sw = max(11, *(len(x) for x in sched))
        head = (
            f"{'#':>3} {'tp':>3} {'pp':>3} {'dp':>5} {'cp':>2} {'ep':>2} {'vp':>2} {'mb':>3} {'sched':<{sw}} "
            f"{'recomp':<9} {'sp':<2} {'z':>1} "
            + "".join(f"{k:>{max(len(k), 6)}} " for k in extra)
            + f"{'engine':<8} {'MFU':>6} {'HFU':>6} {'tokens/s':>10} {'step s':>8} {'GiB':>5} |"
        )
        planned = any(r.get("time_to_train_days") is not None for r in best)
        head += "".join(f" {SHORT[k]:>6}" for k in cats) + "  (% of step)"
        head += f" | {'days':>7} {'USD':>12}\n" if planned else "\n"
        out.write(head)
        for i, r in enumerate(best, 1):
            step = r.get("step_time_s") or 0.0
            line = (
                f"{i:>3} {r['tp']:>3} {r['pp']:>3} {r['dp']:>5} {r['cp']:>2} {r['ep']:>2} {r['vp']:>2} "
                f"{r['micro_batch']:>3} {sched[i - 1]:<{sw}} {r['recompute']:<9} "
                f"{'y' if r['sequence_parallel'] else 'n':<2} {r['zero']:>1} "
                + "".join(f"{r.get(k)!s:>{max(len(k), 6)}} " for k in extra)
                + f"{r.get('engine') or '':<8} {100 * r['mfu']:>5.1f}% {100 * r['hfu']:>5.1f}% "
                f"{r['tokens_per_s']:>10,.0f} {step:>8.3f} {r['peak_memory_gib']:>5.1f} |"
            )
            line += "".join(f" {100 * (r.get(f'{k}_s') or 0.0) / step if step else 0.0:>5.1f}%" for k in cats)
            if planned:  # the whole-run plan of a scenario with [run] (simulator/plan.py)
                days, usd = r.get("time_to_train_days"), r.get("cost_usd")
                line += " " * 13 + f" | {'-' if days is None else f'{days:.1f}':>7} "
                line += f"{'-' if usd is None else f'{usd:,.0f}':>12}"
            out.write(line + "\n")
    faster_oom = [
        r
        for r in result.rows
        if r.get("status") == STATUS_OOM and best and _rank_value(r, rank_by) > _rank_value(best[0], rank_by)
    ]
    if faster_oom:
        r = max(faster_oom, key=lambda r: _rank_value(r, rank_by))
        out.write(
            f"{len(faster_oom)} configurations that do not fit in memory would rank higher; the best of them "
            f"({config_name(r)}) at {100 * r['mfu']:.1f}% MFU {r['reason']}\n"
        )
    if c[STATUS_INVALID]:
        invalid = [str(r.get("reason")) for r in result.rows if r.get("status") == STATUS_INVALID]
        reasons = Counter(_reason_kind(reason) for reason in invalid)
        example: dict[str, str] = {}
        for reason in invalid:  # each kind shown by its first configuration's own words
            example.setdefault(_reason_kind(reason), reason)
        out.write("invalid configurations by reason (one example each):\n")
        for kind, n in reasons.most_common(6):
            out.write(f"  {n:>6}  {example[kind]}\n")
    return out.getvalue()


def _checked(result: SweepResult) -> int:
    return sum(1 for r in result.rows if r.get("engine") == "des" and r.get("closed_form_mfu") is not None)


def config_name(row: Mapping[str, Any]) -> str:
    """`tp 8, pp 16, dp 8, cp 1, ep 1, vp 1, micro_batch 1, recompute selective, zero 1`."""
    keys = ("tp", "pp", "dp", "cp", "ep", "vp", "micro_batch", "recompute", "zero")
    name = ", ".join(f"{k} {row.get(k)}" for k in keys)
    if row.get("cp_comm_type") and str(row.get("cp")) not in ("1", "None"):  # it moves the step at cp > 1
        name += f", cp_comm_type {row['cp_comm_type']}"
    return name


def _reason_kind(reason: str) -> str:
    """A reason without its numbers, to group invalid configurations (never shown: the summary
    prints one real reason of each group)."""
    head = reason.split(": ", 1)
    key = head[0] if len(head) == 2 else ""
    msg = head[-1]
    words = []
    for w in msg.split():
        words.append("N" if any(ch.isdigit() for ch in w) else w)
        if len(words) >= 14:
            break
    return (f"{key}: " if key else "") + " ".join(words)


def result_json(scn: Scenario, result: SweepResult, top: int, rank_by: str) -> dict[str, Any]:
    return {
        "name": scn.name,
        "num_configurations": len(result.rows),
        "counts": result.counts,
        "rank_by": rank_by,
        "engines": result.engine_note,
        "largest_closed_form_engine_gap": result.largest_gap,
        "top": [dict(r) for r in result.ranked[:top]],
    }


def write_plot(path: str, scn: Scenario, result: SweepResult, top: int) -> None:
    from ..plots import save_figure, sweep_mfu_figure

    fig = sweep_mfu_figure(
        list(result.rows), top=max(top, 10), title=f"{scn.name}: predicted MFU of every configuration"
    )
    save_figure(fig, path)
