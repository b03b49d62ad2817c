"""`mfusim schema`: the JSON Schema of scenario files (issue 17), for editors that complete keys."""

from __future__ import annotations

import argparse
import sys


def cmd_schema(args: argparse.Namespace) -> int:
    from ..resources import scenario_schema_file

    sys.stdout.write(scenario_schema_file().read_text(encoding="utf-8"))
    return 0
