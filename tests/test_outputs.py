"""simulator.outputs: no clobbering, atomic replacement, one writer per file (issue 18)."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest

from simulator.errors import ConfigError
from simulator.outputs import atomic_output, check_output, output_lock, same_file, write_text


def test_output_equal_to_an_input_is_refused(tmp_path: Path) -> None:
    inp = tmp_path / "scenario.toml"
    inp.write_text("x = 1\n")
    with pytest.raises(ConfigError) as info:
        check_output(inp, "--trace", [inp])
    assert "--trace" in str(info.value) and "input" in str(info.value)
    assert inp.read_text() == "x = 1\n"


@pytest.mark.parametrize("kind", ["relative", "symlink", "hardlink", "dotdot"])
def test_aliases_of_an_input_are_refused(tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    inp = tmp_path / "topo.toml"
    inp.write_text("x = 1\n")
    (tmp_path / "sub").mkdir()
    if kind == "relative":
        monkeypatch.chdir(tmp_path)
        out: Path = Path("topo.toml")
    elif kind == "symlink":
        out = tmp_path / "link.toml"
        out.symlink_to(inp)
    elif kind == "hardlink":
        out = tmp_path / "hard.toml"
        os.link(inp, out)
    else:
        out = tmp_path / "sub" / ".." / "topo.toml"
    assert same_file(out, inp)
    with pytest.raises(ConfigError):
        check_output(out, "--out", [tmp_path / "other.toml", inp])


def test_check_output_creates_nothing(tmp_path: Path) -> None:
    out = tmp_path / "new.json"
    assert check_output(out, "--trace", []) == out
    assert sorted(os.listdir(tmp_path)) == []


@pytest.mark.parametrize("kind", ["dir", "fifo", "socket", "missing-dir", "broken-link"])
def test_unusable_output_paths(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "out"
    sock = None
    if kind == "dir":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        path = tmp_path / "s"
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
    elif kind == "missing-dir":
        path = tmp_path / "nope" / "out.csv"
    else:
        path.symlink_to(tmp_path / "nowhere" / "x")
    try:
        with pytest.raises(ConfigError) as info:
            check_output(path, "--out", [])
        assert info.value.key == "--out"
    finally:
        if sock is not None:
            sock.close()


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_read_only_directory(tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        with pytest.raises(ConfigError) as info:
            check_output(ro / "x.csv", "--out", [])
        assert "--out" in str(info.value) and str(ro) in str(info.value)
    finally:
        ro.chmod(0o700)


def test_character_device_is_written_directly() -> None:
    assert check_output("/dev/null", "--trace", []) == Path("/dev/null")
    with atomic_output("/dev/null", "--trace") as fh:
        fh.write("discarded")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_atomic_output_replaces_only_on_success(tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    out.write_text("old\n")
    with pytest.raises(RuntimeError), atomic_output(out, "--out") as fh:
        fh.write("half of the new")
        raise RuntimeError("interrupted")
    assert out.read_text() == "old\n"
    assert os.listdir(tmp_path) == ["out.txt"]  # no temporary file left
    write_text(out, "--out", "new\n")
    assert out.read_text() == "new\n"
    assert os.listdir(tmp_path) == ["out.txt"]


def test_interrupted_new_output_leaves_nothing(tmp_path: Path) -> None:
    out = tmp_path / "trace.json"
    with pytest.raises(KeyboardInterrupt), atomic_output(out, "--trace") as fh:
        fh.write("{")
        raise KeyboardInterrupt
    assert os.listdir(tmp_path) == []


def test_atomic_output_keeps_mode_and_follows_symlink(tmp_path: Path) -> None:
    real = tmp_path / "real.csv"
    real.write_text("a\n")
    real.chmod(0o640)
    link = tmp_path / "link.csv"
    link.symlink_to(real)
    write_text(link, "--out", "b\n")
    assert link.is_symlink() and real.read_text() == "b\n"
    assert stat.S_IMODE(real.stat().st_mode) == 0o640


def test_new_file_gets_the_umask_mode(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        write_text(tmp_path / "n.txt", "--out", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "n.txt").stat().st_mode) == 0o644


def test_disk_full_names_file_and_flag(tmp_path: Path) -> None:
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    with pytest.raises(ConfigError) as info, atomic_output("/dev/full", "--trace") as fh:
        fh.write("x" * 100_000)
    msg = str(info.value)
    assert "/dev/full" in msg and "--trace" in msg and "disk full" in msg


def test_second_writer_is_refused_and_lock_released(tmp_path: Path) -> None:
    out = tmp_path / "sweep.csv"
    with output_lock(out, "--out"):
        assert (tmp_path / "sweep.csv.lock").exists()
        with pytest.raises(ConfigError) as info, output_lock(out, "--out"):
            pass
        assert "another mfusim" in str(info.value) and "--out" in str(info.value)
    assert not (tmp_path / "sweep.csv.lock").exists()
    with output_lock(out, "--out"):  # free again
        pass


def test_lock_of_a_dead_process_is_free(tmp_path: Path) -> None:
    """flock belongs to the open file: when the holder dies the kernel drops it, so a stale
    lock file from a killed sweep does not block the next one."""
    lock = tmp_path / "sweep.csv.lock"
    lock.write_text("")
    with output_lock(tmp_path / "sweep.csv", "--out"):
        pass
