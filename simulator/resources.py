"""Where the shipped data lives: topologies/, scenarios/ and the GPU/model catalogs.

In a wheel, `topologies/` and `scenarios/` are installed inside the package
(pyproject maps them there); in a source checkout or an editable install they are
the top-level folders of the repository. Nothing is read at import time.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent


def data_dir(name: str) -> Path:
    """`topologies` or `scenarios`: the installed copy, else the checkout's folder."""
    installed = _PACKAGE_DIR / name
    if installed.is_dir():
        return installed
    return _PACKAGE_DIR.parent / name


def catalog_file(name: str) -> Path:
    return _PACKAGE_DIR / "catalog" / name


def topology_names() -> list[str]:
    return sorted(p.stem for p in data_dir("topologies").glob("*.toml"))


def scenario_names() -> list[str]:
    """Shipped scenarios, runnable by name (`mfusim run llama3-70b-512-h100`)."""
    return sorted(p.stem for p in data_dir("scenarios").glob("*.toml"))


def published_runs_csv() -> Path:
    return data_dir("scenarios") / "published" / "calibration_runs.csv"
