"""`mfusim whatif`: how much each lever would raise MFU."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .common import load_cli_scenario, override_texts, print_json

if TYPE_CHECKING:
    from ..whatif import WhatIf


def _print_table(result: WhatIf, out: Any, overrides: Sequence[str] = ()) -> None:
    base = result.baseline
    step = base.step_time_s
    bd = (
        sorted(((v / step, k) for k, v in base.breakdown_s.items() if v > 0), reverse=True)
        if step > 0
        else []
    )
    out.write(
        f"{result.scenario_name}: baseline MFU {100 * base.mfu:.1f}%, HFU {100 * base.hfu:.1f}%, "
        f"step {step:#.4g} s, {base.tokens_per_s:,.0f} tokens/s on {base.num_gpus:,} GPUs\n"
    )
    if overrides:  # the name is the file's; the values simulated are the overridden ones
        from ..run import overrides_line

        out.write(overrides_line(overrides) + "\n")
    out.write(result.headline + "\n")
    out.write("breakdown: " + ", ".join(f"{k} {100 * f:.1f}%" for f, k in bd) + "\n\n")
    rows = [("#", "lever", "MFU", "gain", "step (s)", "tokens/s", "mem", "change")]
    for i, lv in enumerate(result.applied, 1):
        mem = "" if lv.fits is None else ("fits" if lv.fits else "OOM")
        rows.append(
            (
                str(i),
                lv.name,
                f"{100 * (lv.mfu or 0):.1f}%",
                # rounded first, so a tiny loss prints "+0.0" rather than a negative zero "-0.0"
                f"{round(100 * (lv.gain or 0), 1) + 0.0:+.1f}",
                f"{lv.step_time_s or 0:#.4g}",
                f"{lv.tokens_per_s or 0:,.0f}",
                mem,
                lv.change,
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    right = {0, 2, 3, 4, 5}
    for r in rows:
        cells = [
            c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))
        ]
        out.write("  ".join(cells).rstrip() + "\n")
    notes = [(i, lv) for i, lv in enumerate(result.applied, 1) if lv.note]
    if notes:
        out.write("\nnotes:\n")
        for i, lv in notes:
            out.write(f"  {i}. {lv.note}\n")
    if result.skipped:
        out.write("\nnot applicable:\n")
        for lv in result.skipped:
            out.write(f"  - {lv.name}: {lv.skipped}\n")
    out.write(
        "\ngain = points of MFU over the baseline; MFU counts the baseline model's FLOPs per token;"
        " OOM = does not fit in GPU memory (never recommended).\n"
    )


def cmd_whatif(args: argparse.Namespace) -> int:
    """`mfusim whatif [SCENARIO] [--json]`."""
    from ..budget import check_whatif
    from ..describe import add_summary
    from ..memory import memory_footprint
    from ..whatif import analyze, candidate_variants, fit_variants

    scenario = load_cli_scenario(getattr(args, "scenario", None), args)
    variants = candidate_variants(scenario)
    if not memory_footprint(scenario).fits:
        variants = fit_variants(scenario) + variants
    n = sum(1 for v in variants if v.build is not None)
    check_whatif(scenario, n)
    sys.stderr.write(f"whatif: simulating the baseline and {n} variants of {scenario.name}\n")
    result = analyze(scenario, progress=True)
    if getattr(args, "json", False):
        print_json(add_summary(result.to_dict(), scenario))
    else:
        _print_table(result, sys.stdout, override_texts(args))
    return 0
