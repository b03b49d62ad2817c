"""Logit memory of the loss (issues 12/13): what the cross-entropy keeps between its forward and
backward depends on the kernel the stack runs ([kernels] cross_entropy)."""

from __future__ import annotations

import pytest

from simulator.loading import scenario_from_dict
from simulator.memory import memory_footprint


def test_te_cross_entropy_keeps_16_bit_logits() -> None:
    """TE's Triton cross-entropy writes the gradient into the 16-bit logits in place: the last
    stage keeps 2 bytes per logit where the fp32-softmax losses keep 4 -- activations fall by
    exactly 2·s·b·V/t (one micro-batch, pp = 1)."""
    from simulator.memory import logit_bytes

    base = {
        "model": {"preset": "qwen3-30b-a3b", "seq_len": 2048},
        "cluster": {"topology": "dgx-h100", "num_gpus": 8},
        "parallel": {"micro_batch": 1, "global_batch": 16, "ep": 8, "zero": 1},
    }
    fused = scenario_from_dict({**base, "kernels": {"cross_entropy": "fused"}})
    te = scenario_from_dict({**base, "kernels": {"cross_entropy": "te"}})
    a = memory_footprint(fused).parts_bytes["activations"]
    b = memory_footprint(te).parts_bytes["activations"]
    m = fused.model
    assert a - b == pytest.approx(2.0 * m.seq_len * 1 * m.vocab, rel=1e-12)
    assert logit_bytes("te") == 2.0 and logit_bytes("") == logit_bytes("torch") == 4.0
