"""A new user's second pass: the README's commands run from any directory, every flag `--help`
shows is documented in docs/reference.md (and every flag the docs show exists), and the files a
command writes are named on stderr."""

from __future__ import annotations

import argparse
import json
import re
import shlex
from pathlib import Path

import pytest

from simulator.cli import main
from simulator.cli.reference import command_parsers
from simulator.loading import resolve_scenario_path

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {s for a in parser._actions for s in a.option_strings}


def _readme_commands() -> list[list[str]]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    out = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in block.splitlines():
            for part in line.split("&&"):
                words = shlex.split(part, comments=True)
                if words[:1] == ["mfusim"]:
                    out.append(words[1:])
    return out


def test_every_flag_has_help_and_a_reference_row() -> None:
    """`mfusim mfu --json` and `kernel attention --causal` had no help line, and reference.md
    documented no flag at all: each one now has both, under its command's heading."""
    reference = (ROOT / "docs" / "reference.md").read_text(encoding="utf-8")
    flags = reference.split("\n## Command-line flags\n", 1)[1]
    parsers = command_parsers()
    assert {"run", "compare", "sweep", "whatif", "mfu", "validate", "kernel gemm", "schema"} <= set(parsers)
    for command, (_, parser) in parsers.items():
        section = flags.split(f"\n### `mfusim {command}`\n", 1)[1].split("\n### ", 1)[0]
        for action in parser._actions:
            if action.help == argparse.SUPPRESS or isinstance(action, argparse._HelpAction):
                continue
            assert action.help, f"mfusim {command} {action.option_strings or action.dest}: no help text"
            for flag in action.option_strings:
                assert f"`{flag}`" in section, f"docs/reference.md: mfusim {command} {flag} not documented"


def test_every_flag_the_docs_show_exists() -> None:
    """A flag in a documented `mfusim COMMAND ...` line is one that command takes."""
    parsers = {command: _options(parser) for command, (_, parser) in command_parsers().items()}
    checked = 0
    for path in DOCS:
        for snippet in re.findall(r"(?m)(?:`|^\s*)(mfusim [a-z][^`#\n]*)", path.read_text(encoding="utf-8")):
            words = snippet.split()
            command = words[1]
            if command == "kernel":
                # `kernel gemm|attention ...`, or `kernel --algo ...` (any kind)
                kinds = [k for k in (words[2:3] or [""])[0].split("|") if f"kernel {k}" in parsers]
                kinds = kinds or [c.split()[1] for c in parsers if c.startswith("kernel ")]
                allowed = set().union(*(parsers[f"kernel {k}"] for k in kinds))
            elif command in parsers:
                allowed = parsers[command]
            else:
                continue  # prose: "mfusim turns a scenario ..."
            for flag in re.findall(r"(?<![\w-])--[a-z][a-z-]*", snippet):
                checked += 1
                assert flag in allowed | {"--help"}, f"{path.name}: `{snippet.strip()}`: {flag} is not a flag"
    assert checked >= 40


def test_readme_scenarios_resolve_outside_the_checkout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The README tour said `mfusim run scenarios/llama3-70b-512-h100.toml`, which only exists in
    the checkout: from any other directory (a pip install) it failed with exit 2. Every scenario a
    README command names resolves from an empty directory, or an earlier command wrote it."""
    monkeypatch.chdir(tmp_path)
    written: set[str] = set()
    commands = _readme_commands()
    assert len(commands) >= 15
    for argv in commands:
        if argv[0] not in ("run", "whatif", "sweep", "compare"):
            continue
        positional = [
            w for i, w in enumerate(argv[1:], 1) if not w.startswith("-") and not argv[i - 1].startswith("-")
        ]
        for name in positional:
            if name not in written:
                assert resolve_scenario_path(name).is_file(), f"README: `mfusim {' '.join(argv)}`"
        for flag in ("--export-best", "--out"):
            if flag in argv:
                written.add(argv[argv.index(flag) + 1])


def test_sweep_names_the_files_it_writes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`run --plot` said "wrote plot ..."; `sweep --out/--plot` wrote silently. The exported
    scenario's header names the flag that wrote it (it said `--export`, which does not exist)."""
    out, best = tmp_path / "s.csv", tmp_path / "best.toml"
    argv = ["sweep", "seed-7b-64-a100", "--engine", "analytic", "--jobs", "1", "--top", "1"]
    assert main([*argv, "--out", str(out), "--export-best", str(best)]) == 0
    err = capsys.readouterr().err
    rows = len(out.read_text(encoding="utf-8").splitlines()) - 1  # minus the header
    assert rows > 1 and f"wrote {rows} configurations to {out}" in err
    header = best.read_text(encoding="utf-8").splitlines()[0]
    sweep_flags = _options(command_parsers()["sweep"][1])
    named = re.findall(r"--[a-z-]+", header)
    assert named and set(named) <= sweep_flags, header


def test_out_of_memory_run_says_what_to_do(capsys: pytest.CaptureFixture[str]) -> None:
    """The warning said 79.9 GiB do not fit, not how to fit them: a hint names the command that
    ranks the ways to fit, with this scenario, and that command finds a fitting lever."""
    argv = ["llama3-70b-512-h100", "--set", "parallel.tp=4", "--set", "cluster.num_gpus=1024"]
    assert main(["run", *argv]) == 0
    out, err = capsys.readouterr()
    assert "DOES NOT FIT" in out and "does not fit in GPU memory" in err
    assert "hint: `mfusim whatif llama3-70b-512-h100` (same --set flags)" in err
    assert main(["whatif", *argv, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["cheapest_fit"]


def test_text_step_times_keep_four_significant_digits(capsys: pytest.CaptureFixture[str]) -> None:
    """`step time 20 s` (20.0003 s by `.4g`) read as a rounded guess next to whatif's 18.46:
    every text step time carries four significant digits, and the memory parts say their unit."""
    assert main(["run", "gpt3-175b-1024-a100"]) == 0
    out = capsys.readouterr().out
    step = re.search(r"step time ([0-9.]+) s", out)
    assert step is not None and len(step.group(1).replace(".", "").lstrip("0")) == 4, out[:600]
    assert re.search(r"\((fits|DOES NOT FIT)\), in GiB: weights [0-9.]+, ", out)


def test_sampled_run_and_accuracy_line_say_how_to_read_them(capsys: pytest.CaptureFixture[str]) -> None:
    """With --samples and jitter the headline is one jittered step (sample 0), not the mean the
    last line gives; the accuracy line's signed bias says which way it leans."""
    argv = ["run", "teaching-pp4", "--samples", "3", "--set", "variability.compute_jitter=0.05"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "Over 3 sampled steps" in out and "the report above is sample 0's step" in out
    assert re.search(r"\(bias [+-][0-9.]+%, > 0: predicted too fast\)", out)


def test_scenario_format_examples_load(tmp_path: Path) -> None:
    """The TOML a new user copies from docs/scenario-format.md is a valid scenario, and every
    scenario key its recipe table names is one the loader accepts."""
    from simulator.cli.reference import accepted_keys
    from simulator.loading import load_scenario

    text = (ROOT / "docs" / "scenario-format.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```toml\n(.*?)```", text, flags=re.S)
    assert blocks
    for i, block in enumerate(blocks):
        path = tmp_path / f"example{i}.toml"
        path.write_text(block, encoding="utf-8")
        scn = load_scenario(path)
        assert scn.num_gpus > 0 and scn.parallel.global_batch > 0
    keys = set(accepted_keys("scenario"))
    recipe = text.split("## From a published recipe to a scenario", 1)[1].split("\n## ", 1)[0]
    named = re.findall(r"`((?:parallel|kernels|precision|memory|model|cluster)\.[a-z_]+)", recipe)
    assert named and not [k for k in named if k not in keys]


def test_every_docs_page_ships_in_the_wheel() -> None:
    """The text output points at docs/accuracy.md, docs/variability.md, docs/plan.md ...; only
    reference.md was package data, so a pip-installed user had none of them."""
    import fnmatch
    import tomllib

    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    assert setuptools["package-dir"]["simulator.docs"] == "docs"
    patterns = setuptools["package-data"]["simulator.docs"]
    pages = sorted(p.name for p in (ROOT / "docs").glob("*.md"))
    assert "accuracy.md" in pages and "variability.md" in pages
    assert [p for p in pages if not any(fnmatch.fnmatch(p, pat) for pat in patterns)] == []
