"""Run time of each teaching notebook (nbclient, a python3 kernel of this interpreter).

Not a test (tests/test_notebooks.py checks that they run without errors): the goal is under a
minute each on a laptop; run `python benchmarks/bench_notebooks.py` and read the numbers.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

NOTEBOOK_DIR = Path(__file__).resolve().parent.parent / "notebooks"


def main() -> None:
    for path in sorted(NOTEBOOK_DIR.glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        with tempfile.TemporaryDirectory() as tmp:
            client = NotebookClient(
                nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": tmp}}
            )
            t0 = time.perf_counter()
            client.execute()
            print(f"{path.name:<40} {time.perf_counter() - t0:6.1f} s")


if __name__ == "__main__":
    main()
