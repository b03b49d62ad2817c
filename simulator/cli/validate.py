"""`mfusim validate`: predicted vs published measured runs (SPEC §3, §5)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ConfigError
from .common import check_suffix, check_writable, print_json

if TYPE_CHECKING:
    from ..validate import SimulateFn


def cmd_validate(args: argparse.Namespace, simulate_fn: SimulateFn | None = None) -> int:
    from .. import validate
    from ..resources import published_runs_csv

    path = Path(args.runs) if getattr(args, "runs", None) is not None else published_runs_csv()
    out = None
    if getattr(args, "out", None) is not None:
        check_suffix(args.out, "--out", (".csv",))
        out = check_writable(args.out, "--out", [path])
    for flag in ("gpu", "source"):
        if getattr(args, flag, None) is not None and not getattr(args, flag).strip():
            # a substring filter of "" matched every row: the empty value was read as no filter
            raise ConfigError(
                "an empty filter matches every row: give a GPU label or source text", key=f"--{flag}"
            )
    runs = validate.read_runs_csv(path)
    selected = validate.select_runs(
        runs, gpu=getattr(args, "gpu", None), source=getattr(args, "source", None)
    )
    if not selected:
        flag = "--gpu" if getattr(args, "gpu", None) else "--source"
        raise ConfigError(f"no row of {path} matches the filter", key=flag)
    fn = simulate_fn if simulate_fn is not None else validate.default_simulate()
    jobs = getattr(args, "jobs", 1) or 1
    report = validate.validate_runs(selected, fn, csv_path=str(path), progress=True, jobs=jobs)
    if out is not None:
        validate.write_out(report, out)
    if getattr(args, "json", False):
        from .. import __version__

        print_json({**report.to_dict(), "mfusim_version": __version__})
    else:
        sys.stdout.write(validate.format_report(report) + "\n")
    return 0
