"""This round's new inputs across the commands (newkeys audit): `[parallel] cp_comm_type` and local
attention (`sliding_window`, `attention_chunk_size`, `layer_types` / `layer_pattern`). The outputs
must say which implementation and which windows a step ran with, since both move the step: two
scenarios that differ only there used to print identical configurations in `run` and `compare`
and identical `parallel` objects in `run --json`."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from simulator.cli import main
from simulator.loading import scenario_from_dict
from simulator.simulate import simulate
from simulator.specs import CP_COMM_TYPES

SCENARIO = """
name = "newkeys"
[model]
layers = 4
hidden = 4096
heads = 32
kv_heads = 8
ffn_hidden = 14336
vocab = 32000
seq_len = 8192
gated_mlp = true
{model_extra}
[cluster]
topology = "dgx-h100"
num_gpus = 8
[parallel]
tp = 1
pp = 1
cp = {cp}
micro_batch = 1
global_batch = {dp}
cp_comm_type = "{comm}"
[precision]
dtype = "bf16"
"""


def _write(tmp_path: Path, name: str, cp: int = 2, comm: str = "a2a", model_extra: str = "") -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(SCENARIO.format(cp=cp, dp=8 // cp, comm=comm, model_extra=model_extra))
    return path


def _run_json(capsys: pytest.CaptureFixture[str], path: Path) -> dict:
    assert main(["run", str(path), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_run_json_names_the_cp_implementation_above_cp_1(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    a2a = _run_json(capsys, _write(tmp_path, "a2a", comm="a2a"))
    ag = _run_json(capsys, _write(tmp_path, "ag", comm="allgather"))
    assert a2a["parallel"]["cp_comm_type"] == "a2a"
    assert ag["parallel"]["cp_comm_type"] == "allgather"
    assert a2a["step_time_s"] != ag["step_time_s"]  # the key moves the step: the output must say it
    # at cp = 1 it changes nothing and is left out (as the goldens, all at cp = 1, have it)
    one = _run_json(capsys, _write(tmp_path, "one", cp=1, comm="allgather"))
    assert "cp_comm_type" not in one["parallel"]


def test_run_text_names_the_cp_implementation(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["run", str(_write(tmp_path, "ag", comm="allgather"))]) == 0
    assert "cp 2 (allgather);" in capsys.readouterr().out
    assert main(["run", str(_write(tmp_path, "one", cp=1, comm="allgather"))]) == 0
    out = capsys.readouterr().out
    assert "· cp 1;" in out and "allgather" not in out


def test_compare_shows_the_cp_implementation_and_the_windows(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    window = 'sliding_window = 1024\nlayer_pattern = ["sliding", "full"]'
    files = [
        _write(tmp_path, "a2a", comm="a2a"),
        _write(tmp_path, "ag", comm="allgather"),
        _write(tmp_path, "swa", comm="a2a", model_extra=window),
    ]
    assert main(["compare", *map(str, files)]) == 0
    lines = capsys.readouterr().out.splitlines()
    comm = next(line for line in lines if line.strip().startswith("cp_comm_type"))
    assert comm.split()[1:] == ["a2a", "allgather", "a2a"]
    local = next(line for line in lines if line.strip().startswith("local attention"))
    assert local.split()[2:] == ["-", "-", "window", "1024", "x", "2"]  # 2 of the 4 layers
    # neither row on scenarios without CP or windows
    plain = [_write(tmp_path, "p1", cp=1), _write(tmp_path, "p2", cp=1, comm="p2p")]
    assert main(["compare", *map(str, plain)]) == 0
    out = capsys.readouterr().out
    assert "cp_comm_type" not in out and "local attention" not in out


@pytest.mark.parametrize("pattern", [None, ["sliding", "full"], ["chunked", "full"]])
def test_cp_comm_type_changes_nothing_at_cp_1_on_local_attention(pattern: list[str] | None) -> None:
    model = {"layers": 4, "hidden": 2048, "heads": 16, "kv_heads": 4, "ffn_hidden": 8192, "vocab": 32000}
    model |= {"seq_len": 4096, "sliding_window": 512, "attention_chunk_size": 1024}
    if pattern is None:
        del model["attention_chunk_size"]
    else:
        model["layer_pattern"] = pattern
        del model["sliding_window" if pattern[0] == "chunked" else "attention_chunk_size"]
    steps = {
        comm: simulate(
            scenario_from_dict(
                {
                    "name": "t",
                    "model": model,
                    "cluster": {"topology": "dgx-h100", "num_gpus": 8},
                    "parallel": {"tp": 2, "cp": 1, "micro_batch": 1, "global_batch": 8, "cp_comm_type": comm},
                    "precision": {"dtype": "bf16"},
                }
            )
        ).report.step_time_s
        for comm in CP_COMM_TYPES
    }
    assert len(set(steps.values())) == 1, steps


def test_sweep_over_cp_refuses_p2p_windows_per_row(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A sweep over cp on a windowed model with the p2p ring marks the cp > 1 rows invalid, naming
    parallel.cp_comm_type, and still simulates cp = 1 (no crash, no silent change of implementation)."""
    window = (
        'sliding_window = 1024\nlayer_pattern = ["sliding", "full"]\n[sweep]\ncp = [1, 2]\ntp = [1]\npp = [1]'
    )
    path = _write(tmp_path, "sw", cp=1, comm="p2p", model_extra=window)
    out = tmp_path / "sweep.csv"
    assert main(["sweep", str(path), "--out", str(out)]) == 0
    capsys.readouterr()
    rows = {int(r["cp"]): r for r in csv.DictReader(out.open())}
    assert rows[1]["status"] == "ok"
    assert rows[2]["status"] == "invalid" and "parallel.cp_comm_type" in rows[2]["reason"]
    assert rows[2]["cp_comm_type"] == "p2p" and rows[2]["mfu"] == ""


@pytest.mark.parametrize(
    ("override", "key", "words"),
    [
        # an unknown entry of a pattern is the pattern's key (it was blamed on layer_types, not given)
        ('model.layer_pattern=["sliding","bogus"]', "model.layer_pattern", "unknown layer type 'bogus'"),
        (
            "model.sliding_window=0",
            "model.sliding_window",
            "layer_types / layer_pattern marks sliding layers",
        ),
        ('model.layer_pattern=["full"]', "model.sliding_window", "no layer of layer_types / layer_pattern"),
        ("parallel.cp_comm_type=bogus", "parallel.cp_comm_type", "must be one of p2p, allgather, a2a"),
        ("parallel.cp_comm_type=p2p", "parallel.cp_comm_type", "over sliding-window layers is not modeled"),
    ],
)
def test_set_errors_on_the_new_keys_name_them(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, override: str, key: str, words: str
) -> None:
    window = 'sliding_window = 1024\nlayer_pattern = ["sliding", "full"]'
    path = _write(tmp_path, "swa", comm="a2a", model_extra=window)
    assert main(["run", str(path), "--set", override]) == 2
    err = capsys.readouterr().err
    assert key in err and words in err, err
    if "bogus" in override:
        assert "model.layer_types" not in err  # the key the user did not write
    assert len(err.strip().splitlines()) == 1  # one line, no traceback


def test_unfused_a2a_refusal_names_the_all_to_all(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """The refusal of a2a on unfused attention cited only TE's all-gather CP."""
    path = _write(tmp_path, "a2a", comm="a2a")
    assert main(["run", str(path), "--set", "kernels.attention=unfused"]) == 2
    err = capsys.readouterr().err
    assert "parallel.cp_comm_type" in err and "all-to-all CP" in err, err


def test_sweep_names_the_cp_implementation_of_a_configuration() -> None:
    """The sweep's one-line configuration names (largest closed-form gap, faster OOM rows) left out
    cp_comm_type, so a sweep over it named two different configurations alike."""
    from simulator.sweep.report import config_name

    row = {
        "tp": 1,
        "pp": 1,
        "dp": 4,
        "cp": 2,
        "ep": 1,
        "vp": 1,
        "micro_batch": 1,
        "recompute": "none",
        "zero": 0,
    }
    assert config_name({**row, "cp_comm_type": "a2a"}) != config_name({**row, "cp_comm_type": "allgather"})
    assert config_name({**row, "cp_comm_type": "a2a"}).endswith("cp_comm_type a2a")
    one = {**row, "cp": 1, "dp": 8}
    assert config_name({**one, "cp_comm_type": "a2a"}) == config_name({**one, "cp_comm_type": "p2p"})


@pytest.mark.parametrize(
    "argv",
    [
        "attention --gpu h100-sxm --seq 4096 --heads 32 --head-dim 128 --window 128".split(),
        "attention --gpu b200 --seq 4096 --heads 32 --head-dim 128 --pass bwd".split(),
        ["allreduce", "--topology", "dgx-h100", "--gpus", "4", "--bytes", "1e9"],
        ["allgather", "--topology", "dgx-b200", "--gpus", "16", "--bytes", "1e8", "--gpus-per-node", "8"],
        ["gemm", "--gpu", "h100-sxm", "--m", "4096", "--n", "4096", "--k", "4096"],
        ["memory", "--gpu", "h100-sxm", "--bytes", "1e9"],
    ],
)
def test_kernel_json_fields_are_documented(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    """`mfusim kernel ... --json` (its `window` key new this round) had no section in docs/reference.md:
    the kernel parsers' --json sits one level down, where the documentation check did not look."""
    from simulator.cli import reference

    assert main(["kernel", *argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["time_s"] > 0
    missing = [k for k in out if not reference.json_meaning("kernel", k)]
    assert not missing, missing
