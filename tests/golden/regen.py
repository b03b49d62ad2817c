"""Regenerate the golden `mfusim run --json` outputs of every shipped scenario.

Run only on purpose (a behaviour change you mean), and say why in the commit message and the
CHANGELOG:  python tests/golden/regen.py
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent


def golden_json(scenario: Path) -> dict:
    from simulator.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(["run", str(scenario), "--json"])
    if code != 0:
        raise SystemExit(f"{scenario}: exit {code}")
    return json.loads(out.getvalue())


def shipped_scenarios() -> list[Path]:
    return sorted((ROOT / "scenarios").glob("*.toml"))


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    for path in shipped_scenarios():
        target = HERE / f"{path.stem}.json"
        target.write_text(json.dumps(golden_json(path), indent=1, sort_keys=True) + "\n")
        print(f"wrote {target.relative_to(ROOT)}")
