"""`mfusim schema`: the JSON Schema of scenario files (issue 17), for editors that complete keys."""

from __future__ import annotations

import argparse
import sys


def cmd_schema(args: argparse.Namespace) -> int:
    from ..reference import schema_path

    sys.stdout.write(schema_path().read_text(encoding="utf-8"))
    return 0
