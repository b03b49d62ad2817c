"""Only regular files are read: a pipe, socket or device where a file is expected is refused
up front, before anything opens it (opening a FIFO blocks forever) (issue 18)."""

from __future__ import annotations

import os
import signal
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from simulator.errors import ConfigError
from simulator.loading import load_scenario, read_user_text
from tests.conftest import SMALL_SCENARIO


@pytest.fixture(autouse=True)
def _watchdog() -> Iterator[None]:
    """A hang (the bug) fails the test after 20 s instead of blocking the suite."""

    def fail(signum: int, frame: object) -> None:
        raise TimeoutError("reading a non-regular file hung")

    old = signal.signal(signal.SIGALRM, fail)
    signal.alarm(20)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _special(tmp_path: Path, kind: str) -> tuple[Path, Callable[[], None]]:
    path = tmp_path / f"{kind}.toml"
    if kind == "fifo":
        os.mkfifo(path)
        return path, lambda: None
    if kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
        return path, sock.close
    if kind == "dir":
        path.mkdir()
        return path, lambda: None
    return Path("/dev/zero"), lambda: None


@pytest.mark.parametrize("kind", ["fifo", "socket", "dir", "device"])
def test_scenario_must_be_a_regular_file(tmp_path: Path, kind: str) -> None:
    path, close = _special(tmp_path, kind)
    try:
        with pytest.raises(ConfigError) as info:
            load_scenario(path)
        assert str(path) in str(info.value)
        assert "regular file" in str(info.value) or "directory" in str(info.value)
    finally:
        close()


def test_stdin_pipe_is_refused(tmp_path: Path) -> None:
    r, w = os.pipe()
    try:
        with pytest.raises(ConfigError, match="named pipe|regular file"):
            read_user_text(f"/proc/self/fd/{r}", "TOML")
    finally:
        os.close(r)
        os.close(w)


@pytest.mark.parametrize("which", ["topology", "hf_config"])
def test_fifo_behind_a_scenario_is_refused(tmp_path: Path, which: str) -> None:
    fifo = tmp_path / "pipe.x"
    os.mkfifo(fifo)
    text = SMALL_SCENARIO
    if which == "topology":
        text = text.replace('topology = "dgx-a100"', f'topology = "{fifo}"')
    else:
        head, rest = text.split("[model]\n", 1)
        rest = rest.split("\n[cluster]", 1)[1]
        text = f'{head}[model]\nhf_config = "{fifo}"\n\n[cluster]{rest}'
    scn = tmp_path / "s.toml"
    scn.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_scenario(scn)
    assert "pipe.x" in str(info.value), str(info.value)


def test_regular_file_through_a_symlink_is_read(tmp_path: Path) -> None:
    real = tmp_path / "real.toml"
    real.write_text(SMALL_SCENARIO)
    link = tmp_path / "link.toml"
    link.symlink_to(real)
    assert load_scenario(link).name == "small test scenario"


def _hf_scenario(tmp_path: Path, config: dict[str, object], model_extra: str = "") -> Path:
    import json as _json

    (tmp_path / "config.json").write_text(_json.dumps(config))
    head, rest = SMALL_SCENARIO.split("[model]\n", 1)
    rest = rest.split("\n[cluster]", 1)[1]
    path = tmp_path / "s.toml"
    path.write_text(
        f'{head}[model]\nhf_config = "config.json"\nseq_len = 1024\n{model_extra}\n[cluster]{rest}'
    )
    return path


HF_OK = {"num_hidden_layers": 4, "hidden_size": 512, "num_attention_heads": 8, "vocab_size": 32000}


def test_config_json_errors_name_the_json_file_and_key(tmp_path: Path) -> None:
    path = _hf_scenario(tmp_path, {**HF_OK, "num_key_value_heads": 3})
    with pytest.raises(ConfigError) as info:
        load_scenario(path)
    err = info.value
    assert err.key == "num_key_value_heads" and str(err.file).endswith("config.json")
    assert "model.kv_heads" in err.message  # what the simulator read it as


def test_a_value_the_scenario_overrides_keeps_its_toml_key(tmp_path: Path) -> None:
    path = _hf_scenario(tmp_path, HF_OK, model_extra="kv_heads = 3")
    with pytest.raises(ConfigError) as info:
        load_scenario(path)
    assert info.value.key == "model.kv_heads" and str(info.value.file).endswith("s.toml")


@pytest.mark.parametrize("where", ["top", "sweep"])
def test_3000_deep_dotted_key_is_one_clean_error(tmp_path: Path, where: str) -> None:
    key = ("sweep.tp" if where == "sweep" else "a") + ".a" * 3000
    path = tmp_path / "deep.toml"
    path.write_text(f"{key} = 1\n")
    with pytest.raises(ConfigError) as info:
        load_scenario(path)
    assert "nested" in info.value.message and len(str(info.value)) < 300


def test_validate_out_never_overwrites_the_runs_csv(tmp_path: Path, run_cli) -> None:
    from simulator.resources import published_runs_csv

    runs = tmp_path / "runs.csv"
    runs.write_bytes(published_runs_csv().read_bytes())
    link = tmp_path / "link.csv"
    link.symlink_to(runs)
    before = runs.read_bytes()
    for out in (runs, link):
        res = run_cli(["validate", str(runs), "--out", str(out)])
        assert res.code == 2 and "--out" in res.err and len(res.err_lines) == 1
    assert runs.read_bytes() == before
