"""`mfusim run`: simulate one step and show it (SPEC §3-4)."""

from __future__ import annotations

import argparse
import sys

from .common import check_writable, load_cli_scenario, print_json


def cmd_run(args: argparse.Namespace) -> int:
    from ..describe import add_summary
    from ..plan import format_plan, plan_for
    from ..run import comm_model_for, format_report, format_samples, sample_stats
    from ..simulate import simulate

    scn = load_cli_scenario(args.scenario, args)
    trace_path = check_writable(args.trace, "--trace") if args.trace else None
    plot_path = check_writable(args.plot, "--plot") if args.plot else None
    comm = comm_model_for(scn, getattr(args, "comm_model", "topology"))
    base_seed = args.seed if args.seed is not None else scn.variability.seed
    result = simulate(scn, comm, seed=args.seed, detail=trace_path is not None or plot_path is not None)
    report = result.report
    samples = [report]
    for i in range(1, args.samples):
        samples.append(simulate(scn, comm, seed=base_seed + i).report)

    # the plan runs at the mean step time when steps are sampled (jitter, stragglers)
    mean_step_s = sum(r.step_time_s for r in samples) / len(samples)
    plan = (
        plan_for(scn, report, tokens_per_s=scn.tokens_per_step / mean_step_s) if scn.run is not None else None
    )
    warnings = list(report.warnings) + (list(plan.warnings) if plan is not None else [])
    for w in warnings:
        sys.stderr.write(f"warning: {w}\n")
    # --- trace and plot hooks (simulator/trace.py, simulator/plots.py)
    if trace_path is not None:
        from ..trace import write_chrome_trace

        write_chrome_trace(result.timeline, report, trace_path)
        sys.stderr.write(f"wrote trace {trace_path} (open in ui.perfetto.dev)\n")
    if plot_path is not None:
        from ..plots import step_figure

        fig = step_figure(result.timeline, report)
        fig.savefig(plot_path, dpi=120, bbox_inches="tight")
        sys.stderr.write(f"wrote plot {plot_path}\n")

    stats = sample_stats(samples) if args.samples > 1 else None
    if args.json:
        out = add_summary(report.to_dict(), scn)
        out["warnings"] = warnings  # the step's and the plan's
        if plan is not None:
            out["plan"] = plan.to_dict()
        if stats is not None:
            out["samples"] = stats
        print_json(out)
    else:
        print(format_report(scn, report))
        if plan is not None:
            print(format_plan(plan))
        if stats is not None:
            print(format_samples(stats))
    return 0
