"""The MoE router runs as a plain 16-bit PyTorch matmul whatever the training recipe (issue 13,
moe-small): Megatron-Core's TopKRouter.gating calls moe_utils.router_gating_linear on a
non-Transformer-Engine weight, so FP8/MXFP8 autocast neither quantizes its input nor runs it on
the 8-bit tensor cores."""

from __future__ import annotations

import pytest

from simulator.costs import Device, matmul_pass_times_s, matmul_time_s
from simulator.loading import scenario_from_dict
from simulator.program import _Coster, default_comm_model, power_limited_device

MOE = {
    "name": "moe",
    "layers": 4,
    "hidden": 2048,
    "heads": 16,
    "vocab": 32000,
    "seq_len": 4096,
    "moe": {"num_experts": 128, "top_k": 8, "expert_ffn_hidden": 768},
}


def _layer(dtype: str):
    scn = scenario_from_dict(
        {
            "model": MOE,
            "cluster": {"topology": "dgx-b200", "num_gpus": 8},
            "parallel": {"ep": 8, "micro_batch": 2, "global_batch": 64},
            "precision": {"dtype": dtype},
        }
    )
    coster = _Coster(scn, default_comm_model(scn))
    coster.device, _ = power_limited_device(coster)
    fwd, b_in, b_w, _, _ = coster.layer(True)
    return scn, coster.device, fwd.parts, b_in.parts, b_w.parts


@pytest.mark.parametrize("dtype", ["fp8", "mxfp8"])
def test_router_is_a_16_bit_gemm_without_quantization(dtype):
    scn, device, fwd, b_in, b_w = _layer(dtype)
    names = [p.name for p in fwd]
    i = names.index("router")
    # the op after the router is its softmax/top-k, not a quantize kernel of its input
    assert "quantize" not in names[i + 1] and "cast" not in names[i + 1]
    tokens = scn.parallel.micro_batch * scn.model.seq_len
    bf16 = Device(device.gpu, "bf16", device.power_clock)
    # each pass at its own shape (costs.gemm_pass_shape), all three in 16 bits
    passes = matmul_pass_times_s(bf16, tokens, scn.model.num_experts, scn.model.hidden)
    expected = passes[0]
    for parts, name, want in zip(
        (fwd, b_in, b_w), ("router", "router dgrad", "router wgrad"), passes, strict=True
    ):
        seg = next(p for p in parts if p.name == name)
        assert seg.duration_s == pytest.approx(want, rel=1e-12)
        assert seg.flops == pytest.approx(2.0 * tokens * scn.model.num_experts * scn.model.hidden)
    # and slower than the same GEMM on the 8-bit tensor cores would be
    assert expected > matmul_time_s(device, tokens, scn.model.num_experts, scn.model.hidden)
