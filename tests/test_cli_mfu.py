"""`mfusim mfu` (the calculator) and `mfusim presets` (issue 2)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from simulator import flops as F
from simulator.loading import model_preset

WORKED = ["mfu", "--params", "7e9", "--tokens-per-s", "1e5", "--gpus", "64", "--gpu", "a100-80gb"]


def test_worked_example_json(run_cli) -> None:
    res = run_cli([*WORKED, "--json"])
    assert res.code == 0, res.err
    data = json.loads(res.out)
    assert abs(data["mfu"] - 0.2103) < 0.002
    assert data["mfu_6psi"] == data["mfu"]
    assert data["hfu"] == data["mfu"]  # no recompute
    assert data["num_gpus"] == 64 and data["gpu"] == "a100-80gb"
    assert data["peak_flop_per_s_per_gpu"] == 312e12
    assert data["flops_per_token_6psi"] == 42e9
    assert data["model_tflops_per_gpu"] == pytest.approx(65.625)
    assert res.err == ""


def test_worked_example_human(run_cli) -> None:
    res = run_cli(WORKED)
    assert res.code == 0
    assert "21.0%" in res.out


def _cli_command() -> list[str]:
    script = Path(sys.executable).with_name("mfusim")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "simulator"]


def test_worked_example_subprocess() -> None:
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.run(
        [*_cli_command(), *WORKED, "--json"], capture_output=True, text=True, timeout=120, env=env
    )
    assert proc.returncode == 0, proc.stderr
    assert abs(json.loads(proc.stdout)["mfu"] - 0.2103) < 0.002
    # python -m simulator is the same program
    proc = subprocess.run(
        [sys.executable, "-m", "simulator", *WORKED, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    assert abs(json.loads(proc.stdout)["mfu"] - 0.2103) < 0.002


def test_step_time_and_batch_form(run_cli) -> None:
    # 512 sequences of 2048 tokens in 10.48576 s = 100,000 tokens/s: the same run as above
    res = run_cli(
        [
            "mfu",
            "--params",
            "7e9",
            "--step-time-s",
            "10.48576",
            "--global-batch",
            "512",
            "--seq-len",
            "2048",
            "--gpus",
            "64",
            "--gpu",
            "a100-80gb",
            "--json",
        ]
    )
    assert res.code == 0, res.err
    data = json.loads(res.out)
    assert data["tokens_per_s"] == pytest.approx(1e5)
    assert abs(data["mfu"] - 0.2103) < 0.002


def test_preset_form(run_cli) -> None:
    res = run_cli(
        [
            "mfu",
            "--model",
            "llama2-7b",
            "--tokens-per-s",
            "1e5",
            "--gpus",
            "64",
            "--gpu",
            "a100-80gb",
            "--json",
        ]
    )
    assert res.code == 0, res.err
    data = json.loads(res.out)
    m = model_preset("llama2-7b")
    peak = 312e12 * 64
    assert data["mfu_6psi"] == pytest.approx(1e5 * F.flops_per_token_6psi(m) / peak, rel=1e-12)
    assert data["mfu_6psi_attn"] == pytest.approx(1e5 * F.flops_per_token_6psi_attn(m) / peak, rel=1e-12)
    assert data["mfu"] == pytest.approx(1e5 * F.flops_per_token_exact(m) / peak, rel=1e-12)
    assert data["mfu_6psi"] < data["mfu_6psi_attn"] < data["mfu"]
    assert data["hfu"] == pytest.approx(data["mfu"])
    assert data["params"] == F.total_params(m)
    assert set(data["flops_per_token"]) == {"6psi", "6psi_attn", "exact"}


def test_preset_step_time_form_uses_preset_seq_len(run_cli) -> None:
    m = model_preset("llama3-8b")
    tokens = 256 * m.seq_len
    res = run_cli(
        [
            "mfu",
            "--model",
            "llama3-8b",
            "--step-time-s",
            "2.0",
            "--global-batch",
            "256",
            "--gpus",
            "128",
            "--gpu",
            "h100-sxm",
            "--json",
        ]
    )
    assert res.code == 0, res.err
    data = json.loads(res.out)
    assert data["tokens_per_s"] == pytest.approx(tokens / 2.0)
    assert data["mfu"] == pytest.approx(tokens / 2.0 * F.flops_per_token_exact(m) / (128 * 989e12), rel=1e-3)


def test_preset_seq_len_override(run_cli) -> None:
    args = [
        "mfu",
        "--model",
        "llama3-8b",
        "--tokens-per-s",
        "1e6",
        "--gpus",
        "64",
        "--gpu",
        "h100-sxm",
        "--json",
    ]
    short = json.loads(run_cli([*args, "--seq-len", "2048"]).out)
    long = json.loads(run_cli([*args, "--seq-len", "131072"]).out)
    assert short["mfu_6psi"] == long["mfu_6psi"]  # 6Ψ ignores s
    assert long["mfu"] > 2 * short["mfu"]  # the attention term dominates at 128k


def test_recompute_full_hfu(run_cli) -> None:
    base = [
        "mfu",
        "--model",
        "gpt3-175b",
        "--tokens-per-s",
        "1.5e5",
        "--gpus",
        "1024",
        "--gpu",
        "a100-80gb",
        "--json",
    ]
    data = json.loads(run_cli([*base, "--recompute", "full"]).out)
    m = model_preset("gpt3-175b")
    share = F.logits_forward_flops(m) / F.model_forward_flops_per_sequence(m)
    assert data["hfu"] / data["mfu"] == pytest.approx(4 / 3 - share / 3, rel=1e-9)
    sel = json.loads(run_cli([*base, "--recompute", "selective"]).out)
    assert data["mfu"] == sel["mfu"] and sel["mfu"] < sel["hfu"] < data["hfu"]
    # --params alone: the seed's 8Ψ / 6Ψ
    p = json.loads(run_cli([*WORKED, "--json", "--recompute", "full"]).out)
    assert p["hfu"] / p["mfu"] == pytest.approx(8 / 6)


def test_dtype_changes_peak(run_cli) -> None:
    base = ["mfu", "--params", "7e9", "--tokens-per-s", "1e6", "--gpus", "64", "--gpu", "h100-sxm", "--json"]
    bf16 = json.loads(run_cli(base).out)
    fp8 = json.loads(run_cli([*base, "--dtype", "fp8"]).out)
    assert fp8["peak_flop_per_s_per_gpu"] == pytest.approx(2 * bf16["peak_flop_per_s_per_gpu"], rel=0.01)
    assert fp8["mfu"] == pytest.approx(bf16["mfu"] / 2, rel=0.01)


def test_mfu_above_one_warns(run_cli) -> None:
    res = run_cli(
        ["mfu", "--params", "7e9", "--tokens-per-s", "1e9", "--gpus", "8", "--gpu", "a100-80gb", "--json"]
    )
    assert res.code == 0
    assert json.loads(res.out)["mfu"] > 1
    assert "warning" in res.err and len(res.err.splitlines()) == 1


# ----------------------------------------------------------------------------- presets
MODELS = ("gpt3-175b", "gpt3-1.3b", "llama2-7b", "llama3-8b", "llama3-70b", "llama3-405b", "megatron-1t")
GPUS = ("a100-40gb", "a100-80gb", "h100-sxm", "h200", "b200")
TOPOLOGIES = ("dgx-a100", "dgx-a100-40gb", "dgx-h100", "dgx-h200", "pcie-a100")


def test_presets_lists_everything(run_cli) -> None:
    res = run_cli(["presets"])
    assert res.code == 0
    words = set(res.out.split())
    for name in (*MODELS, *GPUS, *TOPOLOGIES):
        assert name in words, name


def test_presets_json(run_cli) -> None:
    res = run_cli(["presets", "--json"])
    assert res.code == 0
    data = json.loads(res.out)
    assert set(MODELS) <= set(data["models"])
    assert set(GPUS) <= set(data["gpus"])
    assert set(TOPOLOGIES) <= set(data["topologies"])
    assert data["gpus"]["a100-80gb"]["peak_bf16_tflops"] == 312
    assert data["gpus"]["h100-sxm"]["peak_bf16_tflops"] == pytest.approx(989, rel=0.01)
    assert data["models"]["llama3-8b"]["params"] == pytest.approx(8.03e9, rel=0.01)
    # issue 13: MoE active parameters and the low-precision peaks (datasheet dense figures)
    assert data["models"]["deepseek-v3"]["active_params"] == pytest.approx(37.55e9, rel=0.005)
    assert data["models"]["llama3-8b"]["active_params"] == data["models"]["llama3-8b"]["params"]
    assert (
        data["gpus"]["b200"]["peak_nvfp4_tflops"] == 9000
        and data["gpus"]["gb300"]["peak_nvfp4_tflops"] == 15000
    )
    assert (
        data["gpus"]["b200"]["peak_mxfp8_tflops"] == 4500
        and data["gpus"]["h100-sxm"]["peak_mxfp8_tflops"] == 0
    )


def test_presets_subprocess() -> None:
    proc = subprocess.run([*_cli_command(), "presets"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    for name in (*MODELS, *GPUS, *TOPOLOGIES):
        assert name in proc.stdout
