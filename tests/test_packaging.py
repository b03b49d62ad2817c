"""Every package of the source tree ships: `[tool.setuptools] packages` lists them explicitly,
so a new package missing there would install without its modules (CI installs the wheel)."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = ROOT / "pyproject.toml"


def test_every_package_is_listed_in_pyproject() -> None:
    listed = set(tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["tool"]["setuptools"]["packages"])
    found = {
        ".".join(p.parent.relative_to(ROOT).parts)
        for top in ("simulator", "mfusim")
        for p in (ROOT / top).rglob("__init__.py")
    }
    assert found and found - listed == set()
    scripts = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]["scripts"]
    assert scripts["mfusim"] == "simulator.cli:main"
