"""Robustness and output-contract defects (round 2, robust4 lane).

Each test pins one defect found by hand or by a throwaway combination fuzzer: before its fix
the input crashed, wrote the wrong thing or offered an impossible change; now it is refused
with exit status 2 and one line naming the flag or key, or handled as documented.
"""

from __future__ import annotations

import json
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


# ----------------------------------------------------------------------------- run --samples seeds
LOADER_JITTER = """
[dataloader]
microbatch_latency_ms = 200.0
workers = 1
prefetch = 1
jitter = 0.5
seed = 3
"""


def _json(result: CliResult) -> dict:
    assert result.code == 0, result.err
    return json.loads(result.out)


def test_samples_offset_each_file_seed_so_no_sample_repeats(
    run_cli: Callable[[list[str]], CliResult], write_file: Callable[..., Path]
) -> None:
    # One base (`[variability] seed`, 0) served both generators: with `[dataloader] seed = 3`
    # sample 0 ran loader seed 3 and sample 3 ran loader seed 3 too, a copy of sample 0 among
    # four "independent" steps. Now sample i runs each file seed + i (docs/variability.md).
    path = write_file(SMALL_PLANNER_SCENARIO.split("[sweep]")[0] + LOADER_JITTER)
    stats = _json(run_cli(["run", str(path), "--json", "--samples", "4"]))["samples"]["step_time_s"]
    steps = [
        _json(
            run_cli(
                [
                    "run",
                    str(path),
                    "--json",
                    "--set",
                    f"dataloader.seed={3 + i}",
                    "--set",
                    f"variability.seed={i}",
                ]
            )
        )["step_time_s"]
        for i in range(4)
    ]
    assert len(set(steps)) == 4, steps  # the loader jitter makes every seed's step its own
    assert stats["min"] == min(steps) and stats["max"] == max(steps)
    assert stats["mean"] == pytest.approx(sum(steps) / 4, rel=1e-12)
    # --seed S still seeds both generators S + i: sample 0 of --seed 3 is loader seed 3, var seed 3
    seeded = _json(run_cli(["run", str(path), "--json", "--samples", "4", "--seed", "3"]))
    assert seeded["step_time_s"] == steps[0]  # only the loader draws here: its seed 3 is sample 0's


def test_samples_past_the_largest_loader_seed_are_refused_naming_the_key(
    run_cli: Callable[[list[str]], CliResult], write_file: Callable[..., Path]
) -> None:
    text = SMALL_PLANNER_SCENARIO.split("[sweep]")[0] + LOADER_JITTER.replace(
        "seed = 3", f"seed = {2**63 - 1}"
    )
    path = write_file(text)
    assert run_cli(["run", str(path), "--json"]).code == 0  # one step at the largest seed is fine
    result = run_cli(["run", str(path), "--json", "--samples", "2"])
    _refused(result, "dataloader.seed")
    assert path.name in result.err


def test_samples_are_the_same_with_trace_and_plot(
    run_cli: Callable[[list[str]], CliResult], write_file: Callable[..., Path], tmp_path: Path
) -> None:
    # the main sample is replayed in detail for --trace/--plot: the statistics must not notice
    text = SMALL_PLANNER_SCENARIO.split("[sweep]")[0] + LOADER_JITTER
    text += "\n[variability]\ncompute_jitter = 0.1\nnetwork_jitter = 0.1\nseed = 3\n"
    path = write_file(text)
    plain = run_cli(["run", str(path), "--json", "--samples", "5"])
    traced = run_cli(
        [
            "run",
            str(path),
            "--json",
            "--samples",
            "5",
            "--trace",
            str(tmp_path / "t.json"),
            "--plot",
            str(tmp_path / "p.png"),
        ]
    )
    assert plain.code == traced.code == 0, traced.err
    assert plain.out == traced.out
    other = _json(run_cli(["run", str(path), "--json", "--samples", "5", "--seed", "40"]))
    assert other["samples"] != json.loads(plain.out)["samples"]
