"""Volta (V100) in the kernel model: what its kernels can run, and its GEMMs against DeepBench
(kernels.toml, deepbench / babelstream-v100; docs/calibration.md "kfig5")."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from simulator import kernels as K
from simulator.cli import main
from simulator.errors import ConfigError
from simulator.loading import gpu_by_name, scenario_from_dict

V100 = "v100-32gb"


def _kernel(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(["kernel", *argv])
        except SystemExit as exc:
            code = int(exc.code or 0)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("impl", ["fa2", "fa3", "cudnn"])
def test_fused_attention_kernels_are_refused_on_volta(impl: str) -> None:
    """FlashAttention-2 is Ampere/Ada/Hopper code, FlashAttention-3 Hopper only, cuDNN's SDPA
    needs SM80+ (specs.ATTENTION_ARCHS): on a V100 they are an error naming the key, not a number."""
    with pytest.raises(ConfigError) as err:
        K.resolve_attention(gpu_by_name(V100), impl, True)
    assert err.value.key == "kernels.attention"
    code, out, msg = _kernel(
        "attention", "--gpu", V100, "--seq", "2048", "--heads", "16", "--head-dim", "128"
    )
    assert code == 0 and "unfused" in out  # the default on Volta runs
    code, out, msg = _kernel(
        "attention", "--gpu", V100, "--seq", "2048", "--heads", "16", "--head-dim", "128", "--impl", impl
    )
    assert code == 2 and not out and "--impl" in msg and "volta" in msg
    # Ampere and Blackwell run FlashAttention-2 and cuDNN's, not FlashAttention-3 (sm80/sm90a builds
    # only: flash-attention hopper/setup.py@0251105a); Hopper runs all three
    assert K.resolve_attention(gpu_by_name("h100-sxm"), impl, True) == impl
    for other in ("a100-80gb", "b200", "gb200"):
        if impl == "fa3":
            with pytest.raises(ConfigError) as err:
                K.resolve_attention(gpu_by_name(other), impl, True)
            assert err.value.key == "kernels.attention" and "needs Hopper" in err.value.message
        else:
            assert K.resolve_attention(gpu_by_name(other), impl, True) == impl


def test_fused_attention_on_volta_is_refused_when_the_scenario_loads() -> None:
    spec = {
        "model": {"preset": "gpt3-1.3b"},
        "cluster": {"topology": "dgx-a100", "num_gpus": 8, "gpu": V100},
        "parallel": {"tp": 1, "pp": 1, "micro_batch": 1, "global_batch": 8},
        "precision": {"dtype": "fp16"},
    }
    assert scenario_from_dict(spec).gpu.name == V100  # unfused by default: loads
    with pytest.raises(ConfigError) as err:
        scenario_from_dict({**spec, "kernels": {"attention": "fa2"}})
    assert err.value.key == "kernels.attention"
    with pytest.raises(ConfigError) as err:
        scenario_from_dict({**spec, "precision": {"dtype": "bf16"}})
    assert err.value.key == "precision.dtype" and "BF16" in err.value.message
    # no dtype given: SPEC's bf16 default becomes fp16 on a GPU without BF16 tensor cores, said once
    no_dtype = {k: v for k, v in spec.items() if k != "precision"}
    scn = scenario_from_dict(no_dtype)
    assert scn.dtype == "fp16" and any("no BF16 tensor cores" in w for w in scn.warnings())
    a100 = scenario_from_dict({**no_dtype, "cluster": {"topology": "dgx-a100", "num_gpus": 8}})
    assert a100.dtype == "bf16" and not any("BF16" in w for w in a100.warnings())


def test_bf16_gemm_is_refused_on_volta_and_fp16_is_its_default() -> None:
    """V100 tensor cores are FP16-only: a BF16 GEMM is refused; without --dtype the command costs
    FP16 there (BF16 elsewhere)."""
    base = ("gemm", "--gpu", V100, "--m", "4096", "--n", "4096", "--k", "4096")
    code, out, msg = _kernel(*base, "--dtype", "bf16")
    assert code == 2 and not out and "--dtype" in msg and "BF16" in msg
    code, out, _ = _kernel(*base, "--json")
    data = json.loads(out)
    assert code == 0 and data["dtype"] == "fp16" and data["tflops"] > 0
    code, out, _ = _kernel(
        "gemm", "--gpu", "a100-80gb", "--m", "4096", "--n", "4096", "--k", "4096", "--json"
    )
    assert code == 0 and json.loads(out)["dtype"] == "bf16"


def test_volta_large_gemm_at_deepbenchs_rate_and_below_its_best() -> None:
    """DeepBench (cuBLAS, CUDA 10.1, DGX-1): FP16 4096x7000x4096 at 112.3 TFLOP/s, 7680x48000x2560
    at 105.4; the model within 10% of both and never above the 0.898 x 125 ceiling."""
    v100 = gpu_by_name(V100)
    for (m, n, k), measured in (((4096, 7000, 4096), 112.28), ((7680, 48000, 2560), 105.42)):
        tflops = 2.0 * m * n * k / K.gemm_time_s(v100, "fp16", m, n, k) / 1e12
        assert abs(tflops / measured - 1) <= 0.10, (m, n, k, tflops)
        assert tflops <= 0.898 * 125.0 * (1 + 1e-9)
