"""`mfusim compare A B [C ...]`: scenarios side by side, with their whole-run plans (issue 15)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..errors import ConfigError
from .common import (
    check_writable,
    load_cli_scenario,
    override_texts,
    print_json,
    scenario_inputs,
    scenario_path,
)


def cmd_compare(args: argparse.Namespace) -> int:
    from ..compare import MAX_SCENARIOS, compare, comparison_figure, comparison_json, format_comparison

    if len(args.scenarios) > MAX_SCENARIOS:
        raise ConfigError(f"at most {MAX_SCENARIOS} scenarios, got {len(args.scenarios)}", key="SCENARIO")
    scenarios = [load_cli_scenario(ref, args) for ref in args.scenarios]
    inputs = [p for ref in args.scenarios for p in scenario_inputs(scenario_path(ref))]
    plot_path = check_writable(args.plot, "--plot", inputs) if args.plot else None
    labels = _labels(args.scenarios)
    items = compare(scenarios, labels)
    for item in items:
        for w in item.report.warnings + (item.plan.warnings if item.plan else ()):
            sys.stderr.write(f"warning: {item.label}: {w}\n")
    if plot_path is not None:
        from ..plots import save_figure

        save_figure(comparison_figure(items), str(plot_path))
        sys.stderr.write(f"wrote plot {plot_path}\n")
    if args.json:
        print_json(comparison_json(items))
    else:
        overrides = override_texts(args)
        if overrides:  # the same for every scenario (their names are their files')
            from ..run import overrides_line

            print(overrides_line(overrides) + " (every scenario)\n")
        print(format_comparison(items))
    return 0


def _labels(refs: list[str]) -> list[str]:
    """Each scenario's file stem; the full argument where stems repeat."""
    stems = [Path(r).stem for r in refs]
    return [s if stems.count(s) == 1 else r for s, r in zip(stems, refs, strict=True)]
