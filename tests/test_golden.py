"""Golden outputs: `mfusim run --json` of every shipped scenario equals tests/golden/<name>.json.

A difference means behaviour changed. If it is meant, regenerate with
`python tests/golden/regen.py` and give the reason (and the effect on accuracy) in the commit
message and the CHANGELOG.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

GOLDEN = Path(__file__).resolve().parent / "golden"
sys.path.insert(0, str(GOLDEN))
from regen import golden_json, shipped_scenarios  # noqa: E402

REL_TOL = 1e-9


def _diff(expected, actual, where: str = "") -> list[str]:
    if isinstance(expected, dict) and isinstance(actual, dict):
        out = [f"{where}.{k}: missing" for k in expected if k not in actual]
        out += [f"{where}.{k}: unexpected" for k in actual if k not in expected]
        for k in expected.keys() & actual.keys():
            out += _diff(expected[k], actual[k], f"{where}.{k}")
        return out
    if isinstance(expected, list) and isinstance(actual, list):
        if len(expected) != len(actual):
            return [f"{where}: length {len(expected)} -> {len(actual)}"]
        return [
            d
            for i, (e, a) in enumerate(zip(expected, actual, strict=True))
            for d in _diff(e, a, f"{where}[{i}]")
        ]
    if isinstance(expected, float) or isinstance(actual, float):
        if isinstance(expected, bool) or isinstance(actual, bool):
            return [] if expected == actual else [f"{where}: {expected!r} -> {actual!r}"]
        if not math.isclose(float(expected), float(actual), rel_tol=REL_TOL, abs_tol=1e-12):
            return [f"{where}: {expected!r} -> {actual!r}"]
        return []
    return [] if expected == actual else [f"{where}: {expected!r} -> {actual!r}"]


@pytest.mark.parametrize("scenario", shipped_scenarios(), ids=lambda p: p.stem)
def test_run_json_matches_golden(scenario: Path) -> None:
    golden = GOLDEN / f"{scenario.stem}.json"
    assert golden.is_file(), f"no golden output for {scenario.name}: run python tests/golden/regen.py"
    diffs = _diff(json.loads(golden.read_text()), golden_json(scenario))
    assert not diffs, f"{scenario.name} differs from its golden output:\n" + "\n".join(diffs[:20])


def test_every_golden_has_a_scenario() -> None:
    names = {p.stem for p in shipped_scenarios()}
    orphans = [g.name for g in GOLDEN.glob("*.json") if g.stem not in names]
    assert not orphans, f"golden files without a shipped scenario: {orphans}"
