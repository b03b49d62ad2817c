"""Execute every teaching notebook and store the rendered copy under docs/notebooks/ (issue 17).

    python notebooks/render.py        # needs the [notebooks] extra (nbclient, nbformat, ipykernel)

The notebooks in this folder stay without outputs (small diffs, tests/test_notebooks.py runs
them); the executed copies in docs/notebooks/ carry every printed number and figure, so they
read on the web (GitHub renders .ipynb) without running anything. A test checks that each copy
has the same code as its source notebook and ran without errors.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

HERE = Path(__file__).resolve().parent
OUT = HERE.parent / "docs" / "notebooks"
TIMEOUT_S = 300  # per cell


def render(path: Path, out_dir: Path = OUT) -> Path:
    nb = nbformat.read(path, as_version=4)
    os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    os.environ["PYTHONPATH"] = os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")])
    client = NotebookClient(
        nb, timeout=TIMEOUT_S, kernel_name="python3", resources={"metadata": {"path": str(HERE)}}
    )
    client.execute()
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / path.name
    nbformat.write(nb, target)
    return target


def main() -> int:
    names = sys.argv[1:]
    paths = [HERE / n for n in names] if names else sorted(HERE.glob("*.ipynb"))
    for path in paths:
        print(f"rendered {render(path)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
