"""The CLI against hostile environments: closed or non-UTF-8 stdout, full disks, signals,
escape sequences in names, strict JSON (issue 18). Real subprocesses where the behaviour
depends on the interpreter's own streams."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import SMALL_SCENARIO

ROOT = Path(__file__).resolve().parents[1]


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("MFUSIM_DEBUG", None)
    env.update(extra)
    return env


def mfusim(*args: str, timeout: float = 120, **kw: object) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "simulator", *args],
        capture_output=True,
        timeout=timeout,
        env=kw.pop("env", None) or _env(),  # type: ignore[arg-type]
        **kw,  # type: ignore[arg-type]
    )


@pytest.fixture
def small(tmp_path: Path) -> Path:
    path = tmp_path / "small.toml"
    path.write_text(SMALL_SCENARIO)
    return path


@pytest.mark.parametrize("encoding", ["ascii", "cp1252"])
def test_non_utf8_stdout_gets_the_whole_report(small: Path, encoding: str) -> None:
    res = mfusim("run", str(small), env=_env(PYTHONIOENCODING=encoding))
    assert res.returncode == 0, res.stderr
    text = res.stdout.decode(encoding)
    assert "MFU" in text and "Where the time goes" in text
    if encoding == "ascii":
        assert "MFU(6Psi)" in text and "tp 2 . pp 2" in text


def test_mfu_calculator_on_ascii_console() -> None:
    res = mfusim(
        "mfu",
        "--model",
        "gpt3-175b",
        "--tokens-per-s",
        "1e5",
        "--gpus",
        "1024",
        "--gpu",
        "a100-80gb",
        env=_env(PYTHONIOENCODING="ascii"),
    )
    assert res.returncode == 0, res.stderr
    assert b"6Psi + 12.L.h.s" in res.stdout


def test_closed_stdout_is_one_line_and_nonzero(small: Path) -> None:
    res = subprocess.run(
        [sys.executable, "-m", "simulator", "presets"],
        capture_output=False,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        timeout=60,
        env=_env(),
        pass_fds=(),
        preexec_fn=lambda: os.close(1),
    )
    assert res.returncode != 0
    lines = res.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and "standard output" in lines[0], res.stderr


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
def test_full_disk_on_stdout_is_one_line(small: Path) -> None:
    with open("/dev/full", "w") as full:
        res = subprocess.run(
            [sys.executable, "-m", "simulator", "presets"],
            stdout=full,
            stderr=subprocess.PIPE,
            timeout=60,
            env=_env(),
        )
    assert res.returncode != 0
    lines = res.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and "no space left" in lines[0], res.stderr


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
def test_full_disk_on_trace_names_file_and_flag(small: Path, tmp_path: Path) -> None:
    link = tmp_path / "trace.json"
    link.symlink_to("/dev/full")
    res = mfusim("run", str(small), "--trace", str(link))
    err = res.stderr.decode().strip().splitlines()
    assert res.returncode == 2 and len(err) == 1
    assert "--trace" in err[0] and "trace.json" in err[0] and "disk full" in err[0]


def test_escape_sequences_in_names_are_neutralized(tmp_path: Path) -> None:
    path = tmp_path / "evil.toml"
    path.write_text(
        SMALL_SCENARIO.replace('name = "small test scenario"', 'name = "x\\u001b[2J\\u001b]0;t\\u0007y"')
    )
    res = mfusim("run", str(path))
    assert res.returncode == 0
    assert b"\x1b" not in res.stdout and b"\x07" not in res.stdout
    assert b"x\\x1b[2J" in res.stdout
    res = mfusim("run", str(path), "--json")
    assert json.loads(res.stdout)["name"] == "x\x1b[2J\x1b]0;t\x07y"  # JSON keeps the value, escaped


def _default_sigint() -> None:
    """A shell's background job starts with SIGINT ignored, and Python keeps an ignored SIGINT
    ignored (no KeyboardInterrupt): the child gets the default disposition a terminal gives it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_sigint_during_run_leaves_no_empty_outputs(small: Path, tmp_path: Path) -> None:
    big = tmp_path / "big.toml"
    big.write_text(SMALL_SCENARIO.replace("global_batch = 16", "global_batch = 4000"))
    trace, plot = tmp_path / "new.json", tmp_path / "new.png"
    proc = subprocess.Popen(
        [sys.executable, "-m", "simulator", "run", str(big), "--trace", str(trace), "--plot", str(plot)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(),
        preexec_fn=_default_sigint,
    )
    time.sleep(2.0)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert b"Traceback" not in err
    for p in (trace, plot):
        assert not p.exists() or p.stat().st_size > 0
    assert [f for f in os.listdir(tmp_path) if f.startswith(".")] == []  # no temporary file left


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_to_a_parallel_sweep_is_quiet(tmp_path: Path, sig: signal.Signals) -> None:
    from tests.test_sweep_resume import SMALL

    path = tmp_path / "s.toml"
    # engine on every configuration, thousands of micro-batches each: runs long enough to interrupt
    # (compute jitter: every task is simulated, no steady-state shortcut)
    path.write_text(
        SMALL.replace("[1, 2]", "[1, 2, 4, 8]").replace("global_batch = 64", "global_batch = 8192")
        + "[variability]\ncompute_jitter = 0.05\n"
    )
    out = tmp_path / "s.csv"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "simulator",
            "sweep",
            str(path),
            "--jobs",
            "2",
            "--engine",
            "des",
            "--out",
            str(out),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(),
        preexec_fn=_default_sigint,
    )
    deadline = time.monotonic() + 60
    while not (tmp_path / "s.csv.lock").exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    time.sleep(1.0)  # the pool is up and working
    assert proc.poll() is None, "the sweep ended before it could be interrupted"
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert b"Traceback" not in err, err.decode()[-2000:]
    assert proc.returncode in (130, 143), err.decode()[-500:]
    assert not (tmp_path / "s.csv.lock").exists()
    assert [f for f in os.listdir(tmp_path) if f.startswith(".")] == []


def test_mfu_json_is_strict() -> None:
    res = mfusim(
        "mfu", "--params", "1e300", "--tokens-per-s", "1e300", "--gpus", "1", "--gpu", "a100-80gb", "--json"
    )
    assert res.returncode == 2
    assert b"Infinity" not in res.stdout


def test_fifo_scenario_does_not_hang(tmp_path: Path) -> None:
    fifo = tmp_path / "scn.toml"
    os.mkfifo(fifo)
    res = mfusim("run", str(fifo), timeout=30)
    assert res.returncode == 2 and b"regular file" in res.stderr


def test_seed_out_of_range_blames_the_flag(small: Path) -> None:
    res = mfusim("run", str(small), "--seed", str(2**63 - 3), "--samples", "5")
    assert res.returncode == 2 and b"--seed" in res.stderr and b"dataloader" not in res.stderr


@pytest.mark.parametrize("exc", [MemoryError, RecursionError])
def test_resource_errors_are_one_line_not_a_bug(exc: type[BaseException], monkeypatch, run_cli) -> None:
    from simulator.cli import app

    def boom(args: object) -> int:
        raise exc()

    monkeypatch.setitem(app.COMMANDS, "presets", boom)
    res = run_cli(["presets"])
    assert res.code == 2 and len(res.err_lines) == 1
    assert "bug" not in res.err and "internal error" not in res.err
