"""Inputs a combination fuzzer found mis-handled (round 2, fourteenth session's fuzz lane).

Each test pins one defect: before its fix the input crashed, printed an impossible number or
silently simulated something else; now it is refused with exit status 2 and one line naming
the key, or simulated with numbers that keep the SPEC's invariants.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from conftest import SMALL_SCENARIO, CliResult


def _refused(result: CliResult, key: str) -> None:
    assert result.code == 2, (result.code, result.err)
    assert len(result.err_lines) == 1, result.err
    assert "Traceback" not in result.err
    assert f"'{key}'" in result.err or key in result.err, result.err


def test_headroom_above_the_gpu_memory_is_refused(
    run_cli: Callable[[list[str]], CliResult], write_file: Callable[..., Path]
) -> None:
    # memory.headroom_gib above the A100's 79 GiB made capacity_gib negative (-21 GiB) in --json
    path = write_file(SMALL_SCENARIO + "\n[memory]\nheadroom_gib = 100.0\n")
    _refused(run_cli(["run", str(path), "--json"]), "memory.headroom_gib")
    # the flag takes the same check (it sets the same key)
    small = write_file(SMALL_SCENARIO, name="small.toml")
    result = run_cli(["run", str(small), "--json", "--memory-headroom", "80"])
    _refused(result, "--memory-headroom")
    # just below the GPU's memory is legal: a configuration that does not fit, never a negative one
    ok = run_cli(["run", str(small), "--json", "--memory-headroom", "79"])
    assert ok.code == 0, ok.err
    assert '"capacity_gib": -' not in ok.out
