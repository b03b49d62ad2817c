"""`sweep --resume` only reuses rows of this scenario, cleans the file, and one writer at a
time owns an --out (issue 18)."""

from __future__ import annotations

import csv
import fcntl
import os
from pathlib import Path

import pytest

from simulator.cli import main
from simulator.loading import load_scenario
from simulator.sweep import COLUMNS, run_sweep
from simulator.sweep.files import read_existing, scenario_fingerprint

SMALL = """\
name = "resume test"
[model]
layers = 8
hidden = 1024
heads = 16
vocab = 32000
seq_len = 1024
[cluster]
topology = "dgx-a100"
num_gpus = 8
[parallel]
global_batch = 64
[sweep]
tp = [1, 2, 4, 8]
pp = [1, 2, 4]
micro_batch = [1, 2]
"""


@pytest.fixture
def small(tmp_path: Path) -> Path:
    path = tmp_path / "small.toml"
    path.write_text(SMALL)
    return path


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_fingerprint_ignores_name_and_sweep_but_not_the_model(small: Path, tmp_path: Path) -> None:
    base = scenario_fingerprint(load_scenario(small))
    renamed = tmp_path / "renamed.toml"
    renamed.write_text(SMALL.replace('name = "resume test"', 'name = "other name"').replace("[1, 2]", "[1]"))
    assert scenario_fingerprint(load_scenario(renamed)) == base
    bigger = tmp_path / "bigger.toml"
    bigger.write_text(SMALL.replace("hidden = 1024", "hidden = 2048"))
    assert scenario_fingerprint(load_scenario(bigger)) != base


def test_resume_refuses_rows_of_another_scenario(small: Path, tmp_path: Path) -> None:
    out = tmp_path / "s.csv"
    run_sweep(load_scenario(small), engine="analytic", out=out)
    before = out.read_bytes()
    changed = tmp_path / "changed.toml"
    changed.write_text(SMALL.replace("hidden = 1024", "hidden = 2048"))
    code = main(["sweep", str(changed), "--out", str(out), "--resume", "--engine", "analytic"])
    assert code == 2
    assert out.read_bytes() == before


def test_resume_refusal_names_the_file(
    small: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "s.csv"
    run_sweep(load_scenario(small), engine="analytic", out=out)
    changed = tmp_path / "changed.toml"
    changed.write_text(SMALL.replace("seq_len = 1024", "seq_len = 2048"))
    capsys.readouterr()
    assert main(["sweep", str(changed), "--out", str(out), "--resume", "--engine", "analytic"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(out) in err[0] and "another scenario" in err[0]


@pytest.mark.parametrize(
    ("column", "bad"),
    [("mfu", "nan"), ("mfu", "inf"), ("mfu", "-5"), ("mfu", "1e308"), ("mfu", "fast"), ("step_time_s", "-1")],
)
def test_impossible_rows_are_evaluated_again(small: Path, tmp_path: Path, column: str, bad: str) -> None:
    out = tmp_path / "s.csv"
    run_sweep(load_scenario(small), engine="analytic", out=out)
    good = _rows(out)
    victim = next(i for i, r in enumerate(good) if r["status"] == "ok")
    tampered = [dict(r) for r in good]
    tampered[victim][column] = bad
    with open(out, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=COLUMNS, lineterminator="\n")
        w.writeheader()
        w.writerows(tampered)
    assert read_existing(out, scenario_fingerprint(load_scenario(small))).dropped == 1
    result = run_sweep(load_scenario(small), engine="analytic", out=out, resume=True)
    after = _rows(out)
    assert len(after) == len(good)
    assert {r["tp"] + r["pp"] + r["micro_batch"]: r["mfu"] for r in after} == {
        r["tp"] + r["pp"] + r["micro_batch"]: r["mfu"] for r in good
    }
    assert all(0 < r["mfu"] <= 1 for r in result.ranked)


def test_garbage_and_nul_lines_are_dropped_and_the_file_is_clean(small: Path, tmp_path: Path) -> None:
    out = tmp_path / "s.csv"
    run_sweep(load_scenario(small), engine="analytic", out=out)
    clean = out.read_text()
    lines = clean.splitlines(keepends=True)
    dirty = "".join(lines[:5]) + "garbage,,,\n" + "\x00\x00\x00\n" + "".join(lines[5:9]) + lines[9][:20]
    out.write_text(dirty)
    run_sweep(load_scenario(small), engine="analytic", out=out, resume=True)
    text = out.read_text()
    assert "garbage" not in text and "\x00" not in text
    rows = _rows(out)
    assert len(rows) == len(lines) - 1
    assert sorted(text.splitlines()) == sorted(clean.splitlines())


def test_concurrent_writer_is_refused(small: Path, tmp_path: Path) -> None:
    out = tmp_path / "s.csv"
    lock = tmp_path / "s.csv.lock"
    fd = os.open(lock, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # another sweep is writing s.csv
        assert main(["sweep", str(small), "--out", str(out), "--engine", "analytic"]) == 2
        assert not out.exists()
    finally:
        os.close(fd)
    assert main(["sweep", str(small), "--out", str(out), "--engine", "analytic"]) == 0
    assert not lock.exists()


@pytest.mark.parametrize("target", ["scenario", "symlink", "hardlink"])
def test_out_never_overwrites_the_scenario(small: Path, tmp_path: Path, target: str) -> None:
    before = small.read_text()
    if target == "scenario":
        out = small
    elif target == "symlink":
        out = tmp_path / "link.csv"
        out.symlink_to(small)
    else:
        out = tmp_path / "hard.csv"
        os.link(small, out)
    assert main(["sweep", str(small), "--out", str(out), "--engine", "analytic"]) == 2
    assert small.read_text() == before


def test_out_never_overwrites_the_topology(tmp_path: Path) -> None:
    from simulator.resources import data_dir

    topo = tmp_path / "my-topo.toml"
    topo.write_text((data_dir("topologies") / "dgx-a100.toml").read_text())
    scn = tmp_path / "s.toml"
    scn.write_text(SMALL.replace('topology = "dgx-a100"', 'topology = "my-topo.toml"'))
    before = topo.read_text()
    assert main(["sweep", str(scn), "--out", str(topo), "--engine", "analytic"]) == 2
    assert main(["run", str(scn), "--trace", str(topo)]) == 2
    assert topo.read_text() == before
