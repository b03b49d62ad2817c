"""benchmarks/fit_kernels.py's bookkeeping, without a fit (the optimizer is replaced by one that
returns its starting point): which terms of [model.<arch>] the script sets, and that it never
copies or writes a term no figure of that architecture (or of its COPY_FROM parent) fits."""

from __future__ import annotations

import shutil
import tomllib
import types
from dataclasses import fields, replace
from pathlib import Path

import numpy as np
import pytest

from simulator.kernels import KernelParams, params_for_architecture
from simulator.resources import catalog_file
from tests.conftest import load_benchmark

ARCHS = ("hopper", "ampere", "blackwell", "volta")
NAMES = tuple(f.name for f in fields(KernelParams))


@pytest.fixture(scope="module")
def fk() -> types.ModuleType:
    return load_benchmark("fit_kernels")


def no_fit(fun: object, x0: np.ndarray, **_: object) -> types.SimpleNamespace:
    return types.SimpleNamespace(x=np.asarray(x0))


def run_steps(fk: types.ModuleType, monkeypatch: pytest.MonkeyPatch) -> dict[str, KernelParams]:
    """Every step of the script's fit (kernel terms, COPY_FROM, the derived ratios, collectives)
    from the shipped values, each least-squares call returning its start."""
    monkeypatch.setattr(fk, "least_squares", no_fit)
    base = {a: params_for_architecture(a) for a in ARCHS}
    return fk.fit_all(base)


def test_unfitted_terms_are_never_copied(fk: types.ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    shipped = {a: params_for_architecture(a) for a in ARCHS}
    # the case that was lost: Blackwell's attention power weight (a published power-limited run)
    # differs from Hopper's 1 and is fitted for neither, so COPY_FROM must not carry Hopper's over
    assert shipped["blackwell"].attention_power_factor != shipped["hopper"].attention_power_factor
    assert "attention_power_factor" not in fk.produced_terms("blackwell")
    out = run_steps(fk, monkeypatch)
    for arch in ARCHS:
        kept = [n for n in NAMES if n not in fk.produced_terms(arch)]
        assert {"activity_law", "sustained_gemm_ratio_16bit", "attention_power_factor"} <= set(kept)
        for name in kept:
            assert getattr(out[arch], name) == getattr(shipped[arch], name), (arch, name)


def test_steps_reproduce_the_shipped_values(fk: types.ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the optimizer at its start, every produced term (borrowed, derived by the ratio rules,
    snapped to a bound) is the shipped one to kernels.toml's written precision: the table is a
    fixed point of the script's bookkeeping, so a converged fit is what reproduces it."""
    shipped = {a: params_for_architecture(a) for a in ARCHS}
    out = run_steps(fk, monkeypatch)
    for arch in ARCHS:
        for name in fk.produced_terms(arch):
            got, want = fk.written(getattr(out[arch], name)), fk.written(getattr(shipped[arch], name))
            assert got == want, (arch, name)


def test_write_keeps_unproduced_terms(fk: types.ModuleType, tmp_path: Path) -> None:
    path = tmp_path / "kernels.toml"
    shutil.copy(catalog_file("kernels.toml"), path)
    shipped = {a: params_for_architecture(a) for a in ARCHS}
    # every term moved: the write must take the produced ones and leave the rest as shipped
    moved = {a: replace(p, **{n: 1.5 * getattr(p, n) + 0.25 for n in NAMES}) for a, p in shipped.items()}
    fk.write_params(moved, path)
    table = tomllib.loads(path.read_text(encoding="utf-8"))["model"]
    for arch in ARCHS:
        for name in NAMES:
            if name in fk.produced_terms(arch):
                assert fk.written(float(table[arch][name])) == fk.written(getattr(moved[arch], name))
            elif name in table[arch]:
                assert float(table[arch][name]) == getattr(shipped[arch], name), (arch, name)


def test_held_terms_never_move(fk: types.ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    """An optimizer that sends every term it is given to its upper bound: the HELD terms (earlier
    fits the default run keeps, docs/calibration.md) and what borrows them stay as shipped."""

    def to_upper(fun: object, x0: np.ndarray, bounds: tuple[np.ndarray, np.ndarray], **_: object) -> object:
        return types.SimpleNamespace(x=np.asarray(bounds[1], dtype=float))

    monkeypatch.setattr(fk, "least_squares", to_upper)
    shipped = {a: params_for_architecture(a) for a in ARCHS}
    out = fk.fit_all(dict(shipped))
    assert fk.HELD["hopper"]
    for arch, names in fk.HELD.items():
        for name in names:
            assert getattr(out[arch], name) == getattr(shipped[arch], name), (arch, name)
    for arch in ("ampere", "blackwell"):
        for name in set(fk.borrowed_terms(arch)) & set(fk.HELD["hopper"]):
            assert getattr(out[arch], name) == getattr(shipped["hopper"], name), (arch, name)
    # the rest did go to the bound: the stub reached the optimizer
    assert out["hopper"].fa2_fwd_fraction == fk.RANGES["fa2_fwd_fraction"][1]
