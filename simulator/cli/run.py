"""`mfusim run`: simulate one step and show it (SPEC §3-4)."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from typing import TYPE_CHECKING

from ..errors import ConfigError
from .common import (
    TRACE_SUFFIXES,
    check_suffix,
    check_writable,
    load_cli_scenario,
    override_texts,
    print_json,
    scenario_error,
    scenario_inputs,
    scenario_path,
)

if TYPE_CHECKING:
    from ..specs import Scenario

MAX_SEED = 2**63 - 1


def check_sample_seeds(base_seed: int, samples: int, key: str) -> None:
    """`--samples N` offsets the seeds by 0, 1, ..., N-1: all must be valid seeds, and the error
    blames the flag (or key) that set the base."""
    if base_seed + samples - 1 > MAX_SEED:
        raise ConfigError(
            f"with --samples {samples} the seeds run from {base_seed} to {base_seed + samples - 1}, "
            f"over the largest seed {MAX_SEED}; use a seed of at most {MAX_SEED - samples + 1}",
            key=key,
        )


def sample_scenario(scn: Scenario, seed: int | None, i: int) -> Scenario:
    """Sample `i`'s scenario (docs/variability.md): both generators seeded `seed + i` under
    `--seed`, else each of the file's two seeds (`[variability]`, `[dataloader]`) plus `i`.
    Sample 0 is the file's own step, and no two samples share both seeds (with one base for
    both, `[dataloader] seed = 3` made sample 3 a copy of sample 0)."""
    from ..simulate import with_seed

    if seed is not None:
        return with_seed(scn, seed + i)
    return replace(
        scn,
        dataloader=replace(scn.dataloader, seed=scn.dataloader.seed + i),
        variability=replace(scn.variability, seed=scn.variability.seed + i),
    )


def cmd_run(args: argparse.Namespace) -> int:
    from ..budget import check_run
    from ..describe import add_summary
    from ..outputs import atomic_path, same_file
    from ..plan import format_plan, plan_for
    from ..progress import Progress
    from ..run import comm_model_for, format_report, format_samples, sample_stats
    from ..simulate import seeds_matter, simulate

    scn = load_cli_scenario(args.scenario, args)
    inputs = scenario_inputs(scenario_path(args.scenario))
    if args.trace is not None:
        check_suffix(args.trace, "--trace", TRACE_SUFFIXES)
    trace_path = check_writable(args.trace, "--trace", inputs) if args.trace is not None else None
    plot_path = check_writable(args.plot, "--plot", inputs) if args.plot else None
    if trace_path is not None and plot_path is not None and same_file(trace_path, plot_path):
        raise ConfigError(f"{args.plot} is also the --trace file; give two different files", key="--plot")
    try:
        comm = comm_model_for(scn, getattr(args, "comm_model", "topology"))
    except ConfigError as err:  # a refusal found while building the network names the file
        raise scenario_error(err, scenario_path(args.scenario)) from None
    if args.seed is not None:
        check_sample_seeds(args.seed, args.samples, "--seed")
    else:
        for key, file_seed in (
            ("variability.seed", scn.variability.seed),
            ("dataloader.seed", scn.dataloader.seed),
        ):
            try:
                check_sample_seeds(file_seed, args.samples, key)
            except ConfigError as err:
                raise err.with_file(str(scenario_path(args.scenario))) from None
    identical = args.samples > 1 and not seeds_matter(scn)  # every seed gives the same step
    if identical:
        sys.stderr.write(
            f"note: no [variability] and no dataloader jitter: the {args.samples} samples are identical "
            "(simulated once)\n"
        )
    elif args.seed is not None and not seeds_matter(scn):
        # the step has no random draw: say that the flag changes nothing (it was silently ignored)
        sys.stderr.write("note: no [variability] and no dataloader jitter: --seed changes nothing\n")
    runs = 1 if identical else args.samples
    check_run(scn, samples=runs, trace=trace_path is not None, plot=plot_path is not None, comm_model=comm)
    steps = runs + (trace_path is not None) + (plot_path is not None)
    progress = Progress(steps if steps > 1 else 0, "run", unit="steps")  # silent off a terminal
    try:
        result = simulate(scn, comm, seed=args.seed, detail=trace_path is not None or plot_path is not None)
    except ConfigError as err:  # a refusal found only while costing the step still names the file
        raise scenario_error(err, scenario_path(args.scenario)) from None
    report = result.report
    progress.update()
    samples = [report] * args.samples if identical else [report]
    for i in range(1, runs):
        samples.append(simulate(sample_scenario(scn, args.seed, i), comm).report)
        progress.update()

    # the plan runs at the mean step time when steps are sampled (jitter, stragglers)
    mean_step_s = sum(r.step_time_s for r in samples) / len(samples)
    plan = (
        plan_for(scn, report, tokens_per_s=scn.tokens_per_step / mean_step_s) if scn.run is not None else None
    )
    warnings = list(report.warnings) + (list(plan.warnings) if plan is not None else [])
    for w in warnings:
        sys.stderr.write(f"warning: {w}\n")
    if report.memory is not None and not report.memory.fits:
        # the warning said what does not fit, not what to do about it
        target = f" {args.scenario}" if args.scenario else ""
        sys.stderr.write(
            f"hint: `mfusim whatif{target}` (same --set flags) simulates the ways to fit (ZeRO stage, "
            "recomputation, pipeline stages, micro-batch) and ranks them by MFU\n"
        )
    # --- trace and plot hooks (simulator/trace.py, simulator/plots.py)
    if trace_path is not None:
        from ..trace import write_chrome_trace

        with atomic_path(trace_path, "--trace") as tmp:
            write_chrome_trace(result.timeline, report, tmp)
        progress.update()
        sys.stderr.write(f"wrote trace {trace_path} (open in ui.perfetto.dev)\n")
    if plot_path is not None:
        from ..plots import step_figure

        fig = step_figure(result.timeline, report)
        with atomic_path(plot_path, "--plot") as tmp:
            fig.savefig(tmp, dpi=120, bbox_inches="tight", format=plot_path.suffix.lstrip(".").lower())
        progress.update()
        sys.stderr.write(f"wrote plot {plot_path}\n")

    progress.close()
    stats = sample_stats(samples) if args.samples > 1 else None
    if args.json:
        out = add_summary(report.to_dict(), scn)
        overrides = override_texts(args)
        if overrides:  # the name is the file's; the values simulated are these overrides'
            out["overrides"] = overrides
        out["warnings"] = warnings  # the step's and the plan's
        if plan is not None:
            out["plan"] = plan.to_dict()
        if stats is not None:
            out["samples"] = stats
        print_json(out)
    else:
        print(format_report(scn, report, override_texts(args)))
        if plan is not None:
            print(format_plan(plan))
        if stats is not None:
            print(format_samples(stats))
    return 0
