"""benchmarks/device_probe.py: the prepared measurement run for a lent GPU (never run in CI on a
GPU). Here: its plumbing on CPU with tiny shapes, where PyTorch is installed (skipped otherwise;
PyTorch is not a project dependency)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import load_benchmark


def _load():
    return load_benchmark("device_probe")


def test_unknown_section_is_refused(tmp_path: Path) -> None:
    probe = _load()
    assert probe.main(["--out", str(tmp_path), "--sections", "gemm,nonsense"]) == 2


def test_reps_for_stays_in_bounds() -> None:
    probe = _load()
    assert probe.reps_for(10.0) == 3  # a slow call: the floor
    assert probe.reps_for(1e-9) == 50  # a fast one: the cap
    assert probe.reps_for(0.025) == 10  # 0.25 s of calls


def test_cpu_smoke_writes_every_section(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    probe = _load()
    sections = "env,gemm,memory,recompute,experts"
    assert probe.main(["--cpu-smoke", "--out", str(tmp_path), "--sections", sections]) == 0
    data = json.loads((tmp_path / "probe.json").read_text())
    for name in sections.split(","):
        assert data.get(name), name
    gemm = [r for r in data["gemm"] if r.get("dtype") == "bf16"]
    assert gemm and all("error" not in r and r["tflops"] > 0 for r in gemm)
    rec = data["recompute"]
    assert all("error" not in r and r["fwd_bwd_ckpt_s"] > 0 for r in rec)
    assert (tmp_path / "probe.txt").read_text().count("[gemm]") == len(data["gemm"])
