"""`mfusim` entry point: parse, dispatch to one command module, turn errors into exit codes.

Errors a user can cause exit 2 with one line on stderr; a bug exits 1 with one line (the
traceback with MFUSIM_DEBUG=1). Each command lives in its own module `simulator/cli/<name>.py`
as `cmd_<name>(args) -> int`; heavy modules are imported inside it so `mfusim --help` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from ..console import StdStreamError, flush_stdout, install_console_streams, silence_stdout
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
    for name in (
        "run",
        "compare",
        "sweep",
        "mfu",
        "validate",
        "whatif",
        "topo",
        "presets",
        "schema",
        "kernel",
    )
}


class Terminated(BaseException):  # noqa: N818 - named after the signal
    """SIGTERM, raised in the main thread so `finally` blocks run: temporary output files
    are removed and sweep workers are stopped instead of left behind."""


def _on_sigterm(signum: int, frame: object) -> None:
    raise Terminated


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; standard streams are guarded for the duration (see simulator.console)."""
    real_out, real_err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = install_console_streams(real_out, real_err)
    old_term = _install(signal.SIGTERM, _on_sigterm)
    try:
        code = _main(argv)
        try:
            flush_stdout(sys.stdout)
        except StdStreamError as exc:
            _report(str(exc), real_err)
            silence_stdout()
            code = code or 1
        return code
    finally:
        if old_term is not None:
            _install(signal.SIGTERM, old_term)
        sys.stdout, sys.stderr = real_out, real_err


def shipped_label(err: ConfigError) -> ConfigError:
    """`err` naming a file installed inside the package (a shipped scenario or topology of a
    wheel install) by its short name: `gpt3-175b-1024-a100.toml (shipped scenario)`, not a
    site-packages path too long for one line."""
    if not err.file:
        return err
    from pathlib import Path

    package_dir = Path(__file__).resolve().parents[1]  # simulator/
    path = Path(err.file)
    try:
        inside = path.resolve().relative_to(package_dir)
    except (OSError, ValueError):
        return err
    kinds = {"scenarios": "shipped scenario", "topologies": "shipped topology"}
    if len(inside.parts) != 2 or inside.parts[0] not in kinds:
        return err
    label = f"{path.name} ({kinds[inside.parts[0]]})"
    return ConfigError(err.message, key=err.key, file=label, allowed=err.allowed)


def _install(signum: int, handler: Any) -> Any:
    try:
        return signal.signal(signum, handler)
    except ValueError:  # not the main thread (an embedding application): leave signals alone
        return None


def _report(line: str, stream: TextIO | None) -> None:
    """Write one error line on stderr, if stderr can still be written at all."""
    if stream is None:
        return
    try:
        stream.write(one_line(line) + "\n")
        stream.flush()
    except (OSError, ValueError, UnicodeError):
        pass


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except StdStreamError as exc:  # --help / --version onto a closed stdout
        _report(f"mfusim: error: {exc}", sys.__stderr__)
        return 1
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    name = f"mfusim {args.command}"
    try:
        return COMMANDS[args.command](args)
    except ConfigError as err:
        _report(f"{name}: error: {shipped_label(err)}", sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        _report("mfusim: interrupted", sys.stderr)
        return 130
    except Terminated:
        _report("mfusim: terminated", sys.stderr)
        return 143
    except BrokenPipeError:
        silence_stdout()  # the reader left (`| head`): not an error
        return 0
    except StdStreamError as exc:
        _report(f"{name}: error: {exc}", sys.__stderr__)
        silence_stdout()
        return 1
    except MemoryError:
        _report(
            f"{name}: error: out of memory: the input asks for more work than this machine can hold; "
            "make it smaller (fewer micro-batches, samples or configurations; see docs/limits.md)",
            sys.stderr,
        )
        return EXIT_USAGE
    except RecursionError:
        _report(f"{name}: error: an input is nested too deeply to process", sys.stderr)
        return EXIT_USAGE
    except OSError as exc:
        # The environment refused a file operation (permissions, disk full, a path that
        # vanished): the user's to fix, so one line and exit 2 like any bad input.
        where = f"{exc.filename}: " if exc.filename else ""
        _report(f"{name}: error: {where}{exc.strerror or exc}", sys.stderr)
        return EXIT_USAGE
    except Exception as exc:  # a bug in mfusim, not in the user's input
        if os.environ.get("MFUSIM_DEBUG"):
            traceback.print_exc()
        _report(
            f"mfusim: internal error: {type(exc).__name__}: {exc} -- this is a bug in mfusim; "
            "please report it with the command line and input files (MFUSIM_DEBUG=1 shows the traceback)",
            sys.stderr,
        )
        return 1
