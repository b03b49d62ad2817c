"""Robustness and output-contract defects (round 2, robust4 lane).

Each test pins one defect found by hand or by a throwaway combination fuzzer: before its fix
the input crashed, wrote the wrong thing or offered an impossible change; now it is refused
with exit status 2 and one line naming the flag or key, or handled as documented.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import SMALL_PLANNER_SCENARIO, SMALL_SCENARIO, CliResult


def _refused(result: CliResult, key: str) -> None:
    assert result.code == 2, (result.code, result.err)
    assert len(result.err_lines) == 1, result.err
    assert "Traceback" not in result.err
    assert key in result.err, result.err


# ----------------------------------------------------------------------------- '-' as an output
@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["run", "{small}", "--trace", "-"], "--trace"),
        (["run", "{small}", "--json", "--trace", "-"], "--trace"),
        (["run", "{small}", "--plot", "-"], "--plot"),
        (["compare", "{small}", "{small}", "--plot", "-"], "--plot"),
        (["sweep", "{planner}", "--out", "-"], "--out"),
        (["sweep", "{planner}", "--export-best", "-"], "--export-best"),
        (["sweep", "{planner}", "--export-top", "2", "-"], "--export-top"),
        (["sweep", "{planner}", "--plot", "-"], "--plot"),
        (["validate", "--out", "-"], "--out"),
    ],
)
def test_dash_as_an_output_file_is_refused_naming_the_flag(
    argv: list[str],
    flag: str,
    run_cli: Callable[[list[str]], CliResult],
    write_file: Callable[..., Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # `run --trace -` wrote a 270 kB file literally named '-' in the working directory (and the
    # same for every other output flag). Standard output carries the report or the --json
    # object, so '-' cannot mean it: refused before any work, and nothing is written.
    small = write_file(SMALL_SCENARIO, name="small.toml")
    planner = write_file(SMALL_PLANNER_SCENARIO, name="planner.toml")
    monkeypatch.chdir(tmp_path)
    before = set(os.listdir(tmp_path))
    result = run_cli([a.format(small=small, planner=planner) for a in argv])
    _refused(result, flag)
    assert "'-'" in result.err
    assert result.out == ""
    assert set(os.listdir(tmp_path)) == before  # no file named '-' (or anything else) appeared
