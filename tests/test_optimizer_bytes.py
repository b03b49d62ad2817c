"""The optimizer step's HBM traffic per parameter (issue 12): fused Adam with fp32 master weights,
plus the fp32 copy of 16-bit gradient buffers and fp16's loss-scale unscaling (Megatron's
Float16OptimizerWithFloat16Params.step: copy grads, unscale + inf check, clip, Adam, copy params)."""

from __future__ import annotations

import pytest

from simulator.kernels import kernel_params
from simulator.loading import scenario_from_dict
from simulator.program import (
    ADAM_BYTES_PER_PARAM,
    FP16_UNSCALE_BYTES_PER_PARAM,
    GRAD_16BIT_COPY_BYTES_PER_PARAM,
    GRAD_CLIP_BYTES_PER_PARAM,
    adam_bytes_per_param,
    build_program,
)

MODEL = {"name": "t", "layers": 8, "hidden": 4096, "heads": 32, "vocab": 32000, "seq_len": 2048}


def scn(dtype: str, grad_reduce_dtype: str = ""):
    return scenario_from_dict(
        {
            "model": MODEL,
            "cluster": {"topology": "dgx-a100", "num_gpus": 8},
            "parallel": {"tp": 8, "global_batch": 4},
            "precision": {"dtype": dtype},
            "kernels": {"grad_reduce_dtype": grad_reduce_dtype} if grad_reduce_dtype else {},
        }
    )


def test_bytes_per_param_by_gradient_dtype() -> None:
    # bf16 with fp32 main grads: Adam only (34 B)
    assert adam_bytes_per_param(scn("bf16")) == ADAM_BYTES_PER_PARAM == 34
    # bf16 grads (--grad-reduce-in-bf16): + the 16->32 copy (r2 + w4), zeroing 2 B instead of 4
    assert adam_bytes_per_param(scn("bf16", "bf16")) == 34 + 6 - 2
    # fp16: 16-bit grads copied, and unscaled + checked for inf/NaN in fp32 (r4 + w4)
    assert (
        adam_bytes_per_param(scn("fp16"))
        == 34 + GRAD_16BIT_COPY_BYTES_PER_PARAM + FP16_UNSCALE_BYTES_PER_PARAM
    )
    assert adam_bytes_per_param(scn("fp16")) == 46


def test_optimizer_time_is_the_bytes_at_the_streaming_bandwidth() -> None:
    """Closed form: params x bytes/param / (HBM x memory_bw_fraction), whatever the kernel count."""
    times = {}
    for dtype in ("bf16", "fp16"):
        s = scn(dtype)
        prog = build_program(s)
        stage = prog.stages[0]
        bw = s.gpu.hbm_bandwidth_bytes_per_s * kernel_params(s.gpu).memory_bw_fraction
        per_param = adam_bytes_per_param(s) + GRAD_CLIP_BYTES_PER_PARAM
        params = sum(c.params_local for c in stage.chunks)
        assert stage.optimizer_s == pytest.approx(params * per_param / bw, rel=0.02)
        times[dtype] = stage.optimizer_s
    assert times["fp16"] > times["bf16"]


def test_expert_optimizer_shards_over_expert_dp_not_dp() -> None:
    """Megatron-Core's distributed optimizer steps the dense parameters in 1/dp shards but each
    rank's routed experts in 1/expert_dp shards (one optimizer instance per expert-DP group), as
    memory.py counts their states. Qwen3-30B on 8 GPUs with ep = 8: expert_dp = 1, so every rank
    steps all of its 16 experts; ep = 2 (expert_dp = 4) steps a quarter of its 64."""
    from simulator.flops import layer_params_per_rank

    for ep in (8, 2):
        s = scenario_from_dict(
            {
                "model": {"preset": "qwen3-30b-a3b", "seq_len": 4096},
                "cluster": {"topology": "dgx-h100", "num_gpus": 8},
                "parallel": {"ep": ep, "global_batch": 64, "zero": 1},
            }
        )
        m, par = s.model, s.parallel
        assert par.expert_dp == 8 // ep
        stage = build_program(s).stages[0]
        params = sum(c.params_local for c in stage.chunks)
        expert = sum(layer_params_per_rank(m, par, m.is_moe_layer(i)).expert for i in range(m.layers))
        opt_params = (params - expert) / par.dp + expert / par.expert_dp
        bw = s.gpu.hbm_bandwidth_bytes_per_s * kernel_params(s.gpu).memory_bw_fraction
        per_param = adam_bytes_per_param(s) + GRAD_CLIP_BYTES_PER_PARAM
        assert stage.optimizer_s == pytest.approx(opt_params * per_param / bw, rel=0.02)
        # the experts dominate: far more than sharding everything over dp would give
        assert stage.optimizer_s > (3 if ep == 8 else 1.5) * params / par.dp * per_param / bw
