"""The teaching notebooks run top to bottom (nbclient, a python3 kernel of this interpreter)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

NOTEBOOK_DIR = Path(__file__).resolve().parent.parent / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
TIMEOUT_S = 120  # per cell; run times: benchmarks/bench_notebooks.py

try:
    import ipykernel  # noqa: F401
    import nbformat
    from nbclient import NotebookClient
except ImportError as exc:  # pragma: no cover - depends on the environment
    pytest.skip(f"notebook execution needs nbclient, nbformat and ipykernel ({exc})", allow_module_level=True)


def test_notebooks_exist() -> None:
    names = [p.name for p in NOTEBOOKS]
    for prefix in ("01_", "02_", "03_", "04_", "05_"):
        assert any(n.startswith(prefix) for n in names), prefix


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_committed_without_outputs(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert not cell.outputs and cell.execution_count is None, (
                f"{path.name}: clear outputs before committing"
            )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nb = nbformat.read(path, as_version=4)
    # the kernel is this interpreter (the venv), started in a scratch directory
    env_path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    monkeypatch.setenv("PATH", env_path)
    client = NotebookClient(
        nb,
        timeout=TIMEOUT_S,
        kernel_name="python3",
        resources={"metadata": {"path": str(tmp_path)}},
        extra_arguments=[],
    )
    client.execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors


RENDERED_DIR = NOTEBOOK_DIR.parent / "docs" / "notebooks"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_rendered_copy_matches_its_notebook_and_ran(path: Path) -> None:
    """docs/notebooks/ holds each notebook executed (`python notebooks/render.py`), so it reads on
    the web: the same cells as the source, every code cell with its outputs, no error."""
    rendered = RENDERED_DIR / path.name
    assert rendered.is_file(), f"run `python notebooks/render.py {path.name}`"
    src, out = nbformat.read(path, as_version=4), nbformat.read(rendered, as_version=4)
    assert [c.source for c in src.cells] == [c.source for c in out.cells], (
        f"{rendered} is stale: run `python notebooks/render.py {path.name}`"
    )
    code = [c for c in out.cells if c.cell_type == "code"]
    assert all(c.execution_count is not None for c in code)
    assert not [o for c in code for o in c.outputs if o.output_type == "error"]
