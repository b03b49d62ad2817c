"""`mfusim sweep`: every configuration of a scenario's [sweep] table, ranked (SPEC §3)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from ..errors import ConfigError
from ..sweep import format_table, load_sweep_scenario, result_json, run_sweep, write_plot
from .common import check_writable


def cmd_sweep(args: argparse.Namespace) -> int:
    scn = load_sweep_scenario(args.scenario)
    out = None
    if args.out:
        if args.resume and Path(args.out).is_dir():
            raise ConfigError(f"{args.out} is a directory; give a file name", key="--out")
        out = check_writable(args.out, "--out")
    elif args.resume:
        raise ConfigError("--resume needs --out FILE (the file to continue)", key="--resume")
    if args.plot:
        check_writable(args.plot, "--plot")
    if out is not None and not args.resume and out.stat().st_size > 0:
        sys.stderr.write(f"mfusim sweep: overwriting {out} (--resume continues it instead)\n")
    progress_stream = sys.stderr
    result = run_sweep(
        scn,
        engine=args.engine,
        jobs=args.jobs or os.cpu_count() or 1,
        top=args.top,
        refine=args.refine,
        rank_by=args.rank_by,
        out=out,
        resume=args.resume,
        dask=args.dask,
        progress=progress_stream,
    )
    failed = sum(1 for r in result.rows if str(r.get("reason") or "").startswith("simulation failed"))
    if failed:
        sys.stderr.write(
            f"mfusim sweep: warning: {failed} configurations failed in the simulator (see their reason)\n"
        )
    if args.plot:
        write_plot(args.plot, scn, result, args.top)
    if args.json:
        sys.stdout.write(
            json.dumps(result_json(scn, result, args.top, args.rank_by), indent=2, allow_nan=False) + "\n"
        )
    else:
        sys.stdout.write(format_table(scn, result, args.top, args.rank_by))
    return 0
