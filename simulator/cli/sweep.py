"""`mfusim sweep`: every configuration of a scenario's [sweep] table, ranked (SPEC §3)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ..console import one_line
from ..errors import ConfigError
from ..plan import check_rank_by
from .common import (
    check_suffix,
    check_writable,
    flag_names,
    override_texts,
    print_json,
    scenario_inputs,
    scenario_label,
    scenario_overrides,
    scenario_path,
)

if TYPE_CHECKING:
    from ..specs import Scenario
    from ..sweep import SweepResult

MAX_EXPORT = 10_000  # --export-top K
DEFAULT_REFINE = 3  # --engine auto: the best configurations the engine re-simulates


def _export_targets(
    args: argparse.Namespace, inputs: list[Path]
) -> tuple[Path | None, tuple[int, Path] | None]:
    from ..outputs import check_output

    best = check_output(args.export_best, "--export-best", inputs) if args.export_best is not None else None
    top = None
    if args.export_top:
        k_text, directory = args.export_top
        if not directory:
            raise ConfigError("empty directory name", key="--export-top")
        if directory == "-":
            raise ConfigError("'-' is not a directory to write scenarios into; give one", key="--export-top")
        try:
            k = int(k_text)
        except ValueError:
            raise ConfigError(f"K must be an integer, got {k_text!r}", key="--export-top") from None
        if not 1 <= k <= MAX_EXPORT:
            raise ConfigError(f"K must be from 1 to {MAX_EXPORT:,}, got {k}", key="--export-top")
        top = (k, Path(directory))
    return best, top


def _export(
    args: argparse.Namespace,
    path: Path,
    scn: Scenario,
    result: SweepResult,
    best: Path | None,
    top: tuple[int, Path] | None,
) -> None:
    """--export-best / --export-top: the ranked rows as runnable scenario files."""
    from ..export import export_rows, top_targets
    from ..loading import read_toml
    from ..overrides import apply_overrides

    if not result.ranked:
        raise ConfigError(
            "no configuration is valid and fits in memory: nothing to export",
            key="--export-best" if best else "--export-top",
        )
    data = apply_overrides(read_toml(path), scenario_overrides(args))
    # the scenario as the user named it, and the overrides the exported values include
    texts = override_texts(args)
    source = one_line(scenario_label(args.scenario) + (f" with {', '.join(texts)}" if texts else ""))
    base_dir = path.resolve().parent
    if best is not None:
        export_rows(data, base_dir, result.ranked[:1], [best], rank_by=args.rank_by, source=source)
        sys.stderr.write(f"wrote {best} (rank 1 by {args.rank_by}; run it with `mfusim run {best}`)\n")
    if top is not None:
        k, directory = top
        rows = list(result.ranked[:k])
        targets = top_targets(directory, rows)
        export_rows(data, base_dir, rows, targets, rank_by=args.rank_by, source=source, flag="--export-top")
        sys.stderr.write(f"wrote {len(targets)} scenarios to {directory}\n")


SWEEP_OUT_SUFFIXES = (".csv", ".jsonl", ".ndjson")


def _announce_grid(scn) -> None:
    """Say which axes the sweep chose itself (tp/pp absent from [sweep], or no [sweep] at all)."""
    from ..sweep.plan import plan_sweep

    given = {k for k, _ in scn.sweep}
    plan = plan_sweep(scn)
    chosen = [(k, v) for k, v in plan.axes if k in ("tp", "pp") and k not in given]
    if not chosen:
        return
    what = "no [sweep] table: sweeping the default grid" if not given else "not in [sweep], swept by default:"
    axes = " × ".join(f"{k} in {{{', '.join(str(x) for x in v)}}}" for k, v in chosen)
    sys.stderr.write(f"mfusim sweep: {what} {axes} ({plan.size:,} configurations; docs/reference.md)\n")


def _warn_overrides_the_sweep_replaces(args: argparse.Namespace, scn) -> None:
    """A `--set` of a key the sweep sets per configuration (an axis: tp and pp always, every
    [sweep] key; dp, derived from num_gpus / (tp·pp·cp) unless swept) does not pin it: say so,
    with the spelling that does (`--set parallel.tp=2` was silently swept over 1, 2, 4, 8)."""
    from ..overrides import parse_override
    from ..sweep.plan import plan_sweep

    axes = dict(plan_sweep(scn).axes)
    for text in getattr(args, "overrides", None) or []:
        key, value = parse_override(text)
        section, _, name = key.partition(".")
        raw = text.partition("=")[2].strip()
        if (section == "parallel" or key == "cluster.num_gpus") and name in axes:
            if tuple(axes[name]) == (value,):
                continue  # the sweep runs that value only: nothing is lost
            values = ", ".join(str(v) for v in axes[name])
            sys.stderr.write(
                f"mfusim sweep: warning: --set {key}={raw} does not pin {name}: the sweep varies it "
                f"({name} in {{{values}}}); --set sweep.{name}=[{raw}] sweeps that value only\n"
            )
        elif key == "parallel.dp":
            sys.stderr.write(
                f"mfusim sweep: warning: --set parallel.dp={raw} only makes the base scenario valid: each "
                "configuration's dp is num_gpus / (tp·pp·cp); --set sweep.dp=[N] sweeps one dp\n"
            )


def cmd_sweep(args: argparse.Namespace) -> int:
    from ..sweep import format_table, load_sweep_scenario, result_json, run_sweep, write_plot

    path = scenario_path(args.scenario)
    try:
        scn = load_sweep_scenario(path, scenario_overrides(args))
    except ConfigError as err:
        raise flag_names(err) from None
    check_rank_by(scn, args.rank_by, key="--rank-by")
    _warn_overrides_the_sweep_replaces(args, scn)
    inputs = scenario_inputs(path)
    export_best, export_top = _export_targets(args, inputs)
    out = None
    if args.out is not None:
        check_suffix(args.out, "--out", SWEEP_OUT_SUFFIXES)
        out = check_writable(args.out, "--out", inputs)
    elif args.resume:
        raise ConfigError("--resume needs --out FILE (the file to continue)", key="--resume")
    if args.dask is not None and not args.dask.strip():
        raise ConfigError("empty scheduler address (host:port, or 'local')", key="--dask")
    if args.dask is not None and args.dask.strip() != "local" and args.jobs is not None:
        # the scheduler's own workers run the chunks: the count was dropped silently
        raise ConfigError(
            f"sets local worker processes; with --dask {args.dask} the Dask cluster's own workers run the "
            "sweep (--jobs N with --dask local starts a LocalCluster of N workers)",
            key="--jobs",
        )
    if args.plot:
        check_writable(args.plot, "--plot", inputs + ([out] if out is not None else []))
    if out is not None and not args.resume and out.is_file() and out.stat().st_size > 0:
        sys.stderr.write(f"mfusim sweep: overwriting {out} (--resume continues it instead)\n")
    if args.refine is not None and args.engine != "auto":
        # --engine des simulates every configuration with the engine, analytic none: the count
        # was dropped silently
        raise ConfigError(f"applies to --engine auto only (got --engine {args.engine})", key="--refine")
    refine = args.refine if args.refine is not None else DEFAULT_REFINE
    from ..budget import check_sweep, step_seconds
    from ..sweep import plan_sweep

    jobs = args.jobs or os.cpu_count() or 1
    check_sweep(plan_sweep(scn).size, engine=args.engine, jobs=jobs, refine=refine, step_s=step_seconds(scn))
    progress_stream = sys.stderr
    _announce_grid(scn)
    result = run_sweep(
        scn,
        engine=args.engine,
        jobs=args.jobs or os.cpu_count() or 1,
        top=args.top,
        # exported configurations are the engine's, so the files reproduce their rows exactly
        refine=max(refine, export_top[0] if export_top else 0),
        rank_by=args.rank_by,
        out=out,
        resume=args.resume,
        dask=args.dask.strip() if args.dask is not None else None,
        progress=progress_stream,
    )
    failed = sum(1 for r in result.rows if str(r.get("reason") or "").startswith("simulation failed"))
    if failed:
        sys.stderr.write(
            f"mfusim sweep: warning: {failed} configurations failed in the simulator (see their reason)\n"
        )
    if out is not None:  # as run's --trace/--plot: say where every configuration went
        sys.stderr.write(f"wrote {len(result.rows)} configurations to {out}\n")
    if args.plot:
        write_plot(args.plot, scn, result, args.top)
        sys.stderr.write(f"wrote plot {args.plot}\n")
    if export_best is not None or export_top is not None:
        _export(args, path, scn, result, export_best, export_top)
    if args.json:
        from ..describe import add_summary

        summary = add_summary(result_json(scn, result, args.top, args.rank_by), scn)
        print_json(summary)
    else:
        sys.stdout.write(format_table(scn, result, args.top, args.rank_by))
    return 0
