"""`mfusim` entry point: parse, dispatch to one command module, turn errors into exit codes.

Errors a user can cause exit 2 with one line on stderr; a bug exits 1 with one line (the
traceback with MFUSIM_DEBUG=1). Each command lives in its own module `simulator/cli/<name>.py`
as `cmd_<name>(args) -> int`; heavy modules are imported inside it so `mfusim --help` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import traceback
from collections.abc import Callable, Sequence

from ..errors import EXIT_USAGE, ConfigError
from .common import one_line
from .parser import build_parser


def _lazy(name: str) -> Callable[[argparse.Namespace], int]:
    """`cmd_<name>` of simulator/cli/<name>.py, imported only when that command runs (start-up
    time: `mfusim presets` need not import networkx, simpy or matplotlib)."""

    def cmd(args: argparse.Namespace) -> int:
        return getattr(importlib.import_module(f".{name}", __package__), f"cmd_{name}")(args)

    return cmd


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    name: _lazy(name)
    for name in ("run", "compare", "sweep", "mfu", "validate", "whatif", "topo", "presets", "kernel")
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    try:
        return COMMANDS[args.command](args)
    except ConfigError as err:
        sys.stderr.write(one_line(f"mfusim {args.command}: error: {err}") + "\n")
        return EXIT_USAGE
    except KeyboardInterrupt:
        sys.stderr.write("mfusim: interrupted\n")
        return 130
    except BrokenPipeError:
        return 0
    except OSError as exc:
        # The environment refused a file operation (permissions, disk full, a path that
        # vanished): the user's to fix, so one line and exit 2 like any bad input.
        where = f"{exc.filename}: " if exc.filename else ""
        sys.stderr.write(one_line(f"mfusim {args.command}: error: {where}{exc.strerror or exc}") + "\n")
        return EXIT_USAGE
    except Exception as exc:  # a bug in mfusim, not in the user's input
        if os.environ.get("MFUSIM_DEBUG"):
            traceback.print_exc()
        sys.stderr.write(
            one_line(
                f"mfusim: internal error: {type(exc).__name__}: {exc} -- this is a bug in mfusim; "
                "please report it with the command line and input files (MFUSIM_DEBUG=1 shows the traceback)"
            )
            + "\n"
        )
        return 1
