"""The MXFP8 fused grouped MLP's CuTe DSL epilogues (issue 13, qwen30; program.CUTEDSL_EPILOGUE_NOTE):
Transformer Engine 2.16's ForwardGroupedMLP_CuTeGEMMSwiGLU_MXFP8 writes fc1's GLU output, scaled by
the routing probability, already in MXFP8 (rowwise and columnwise) from fc1's GEMM epilogue, and its
backward applies the GLU derivative and quantizes fc1's output gradient in fc2's dgrad epilogue
(transformer_engine/pytorch/ops/fused/{forward,backward}_grouped_mlp.py@4220403e). So the layer
loses exactly the activation kernels and two of the four expert quantize kernels, and gains the
epilogues' closed-form extra bytes; BF16 and the eager path are unchanged.
"""

from __future__ import annotations

from typing import Any

import pytest

from simulator.comm import default_comm_model
from simulator.loading import scenario_from_dict
from simulator.program import QUANT_BYTES_PER_ELEMENT, _Coster
from simulator.simulate import simulate
from simulator.specs import Scenario

SEQ, EP, MB = 4096, 8, 2


def _scn(dtype: str, fused: bool) -> Scenario:
    data: dict[str, Any] = {
        "model": {"preset": "qwen3-30b-a3b", "seq_len": SEQ, "layers": 4, "moe": {"load_imbalance": 1.0}},
        "cluster": {"topology": "dgx-b200", "num_gpus": 8},
        "parallel": {"ep": EP, "micro_batch": MB, "global_batch": 8 * MB},
        "precision": {"dtype": dtype},
        "kernels": {"moe_dispatcher": "hybridep", "fused_grouped_mlp": fused},
    }
    return scenario_from_dict(data)


def _parts(scn: Scenario) -> dict[str, list[Any]]:
    coster = _Coster(scn, default_comm_model(scn))
    coster.stage = 0
    fwd, b_in, b_w, _, _ = coster.layer(True)
    return {"fwd": list(fwd.parts), "bwd": list(b_in.parts) + list(b_w.parts)}


def _gpu_s(parts: dict[str, list[Any]]) -> float:
    return sum(s.duration_s for p in parts.values() for s in p if s.category != "host_bound")


def test_epilogue_replaces_activation_and_two_quantizes() -> None:
    eager, fused = _parts(_scn("mxfp8", False)), _parts(_scn("mxfp8", True))
    m = _scn("mxfp8", True).model
    rows, f, a = SEQ * MB * m.top_k, m.expert_ffn, 2  # balanced: every EP rank sees T·top_k copies
    names = {k: [s.name for s in v] for k, v in fused.items()}
    assert "expert act" not in names["fwd"] and "expert act bwd" not in names["bwd"]
    assert "expert act" in [s.name for s in eager["fwd"]]
    # the experts' quantize kernels: fc1's input forward and fc2's output gradient backward remain
    quant = [
        s
        for s in fused["fwd"]
        if s.name == "mxfp8 quantize"
        and s.message_bytes == QUANT_BYTES_PER_ELEMENT["mxfp8"] * rows * m.hidden
    ]
    assert len(quant) == 1
    assert not [
        s
        for s in fused["fwd"]
        if s.name.startswith("mxfp8 quantize")
        and s.message_bytes == QUANT_BYTES_PER_ELEMENT["mxfp8"] * rows * f
    ]
    assert not [
        s
        for s in fused["bwd"]
        if s.name.startswith("mxfp8 quantize")
        and s.message_bytes == QUANT_BYTES_PER_ELEMENT["mxfp8"] * rows * 2 * f
    ]
    # the epilogues' extra bytes, closed form: the GLU output written as two MXFP8 copies with 1/32
    # scales; backward the 16-bit pre-activation (2f wide) read and fc1's output gradient written as
    # two MXFP8 copies, instead of fc2's 16-bit dgrad output (f wide)
    mx = 2 * (1 + 1 / 32)
    (fwd_epi,) = [s for s in fused["fwd"] if s.name == "expert fc1 epilogue (GLU, quantize)"]
    (bwd_epi,) = [s for s in fused["bwd"] if s.name == "expert fc2 dgrad epilogue (dGLU, quantize)"]
    assert fwd_epi.message_bytes == pytest.approx(mx * rows * f, rel=1e-12)
    assert bwd_epi.message_bytes == pytest.approx((a + mx) * rows * 2 * f - a * rows * f, rel=1e-12)
    # the fusion moves fewer bytes than the kernels it replaces, so the layer gets faster
    gone = [s for s in eager["fwd"] + eager["bwd"] if s.name.startswith("expert act")]
    assert sum(s.message_bytes for s in gone) > fwd_epi.message_bytes + bwd_epi.message_bytes
    assert _gpu_s(fused) < _gpu_s(eager)


def test_bf16_fused_grouped_mlp_keeps_its_activation() -> None:
    """The CuTe DSL path is MXFP8 only (ForwardGroupedMLP_CuTeGEMMSwiGLU_MXFP8): a BF16 fused
    grouped MLP still runs the activation as its own kernel."""
    fused = _parts(_scn("bf16", True))
    assert "expert act" in [s.name for s in fused["fwd"]]
    assert not [s for p in fused.values() for s in p if "epilogue" in s.name]


def test_step_faster_with_the_epilogue() -> None:
    eager = simulate(_scn("mxfp8", False)).report.step_time_s
    fused = simulate(_scn("mxfp8", True)).report.step_time_s
    assert fused < eager
