"""The `mfusim` command line (SPEC §3): the only place that parses arguments and prints.

- parser.py: every command's flags
- app.py: `main`, the dispatch table and the exit codes
- common.py: shared helpers (default scenario, flag parsers, check_writable, print_json)
- one module per command: run, sweep, validate, whatif, mfu, presets, topo
"""

from __future__ import annotations

from .app import COMMANDS, main
from .common import (
    DEFAULT_SCENARIO,
    MAX_SAMPLES,
    PLOT_SUFFIXES,
    check_writable,
    one_line,
    print_json,
    scenario_path,
)
from .parser import build_parser

__all__ = [
    "COMMANDS",
    "DEFAULT_SCENARIO",
    "MAX_SAMPLES",
    "PLOT_SUFFIXES",
    "build_parser",
    "check_writable",
    "main",
    "one_line",
    "print_json",
    "scenario_path",
]
