"""Per-kind achievable bandwidth of framework memory-bound kernels (simulator/kernels.py
MEMORY_KINDS): the kernels Megatron-Core runs below streaming-copy speed (its torch.compile'd
SwiGLU, its unfused cross-entropy), fitted to kernels.toml's [[memory]] figures of that kind.

Invariants: a kind is never faster than a streaming copy, its achieved bandwidth never falls as
the kernel grows, a kind below copy speed on an architecture is backed by that architecture's
figures, and the step costs exactly the ops the stack runs with their kind.
"""

from __future__ import annotations

from typing import Any

import pytest

from simulator import kernels as K
from simulator.comm import default_comm_model
from simulator.costs import Device, memory_op_time_s
from simulator.errors import ConfigError
from simulator.kernel_catalog import architecture
from simulator.loading import load_gpu_catalog, scenario_from_dict
from simulator.program import CE_KINDS, CE_PASSES, _Coster
from simulator.specs import Scenario

ARCHS = ("volta", "ampere", "hopper", "blackwell")
SIZES = [10.0**e for e in range(4, 12)]


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("kind", K.MEMORY_KINDS)
def test_kind_never_beats_a_streaming_copy_and_is_monotone_in_size(arch: str, kind: str) -> None:
    p = K.params_for_architecture(arch)
    assert 0.0 < p.memory_bw_scale(kind) <= 1.0
    gpu = next(g for g in load_gpu_catalog().values() if architecture(g.name) == arch)
    achieved = [b / K.memory_time_s(gpu, b, p, kind) for b in SIZES]
    copy = [b / K.memory_time_s(gpu, b, p) for b in SIZES]
    assert all(x <= y * (1 + 1e-12) for x, y in zip(achieved, achieved[1:], strict=False))
    assert all(x <= c * (1 + 1e-12) for x, c in zip(achieved, copy, strict=True))
    # large kernels approach the kind's share of the streaming bandwidth
    assert achieved[-1] == pytest.approx(copy[-1] * p.memory_bw_scale(kind), rel=0.01)


def test_a_kind_below_copy_speed_is_backed_by_figures_of_its_architecture() -> None:
    figures = [f for f in K.shipped_figures(kinds=("memory",)) if not f.reference_only]
    for arch in ARCHS:
        p = K.params_for_architecture(arch)
        for kind in K.MEMORY_KINDS:
            if p.memory_bw_scale(kind) == 1.0:
                continue
            backing = [f for f in figures if f" {kind} " in f.label and architecture(f.gpu) == arch]
            assert len(backing) >= 3, (arch, kind)
            # and the figures bracket the sizes a training step runs (100 MB .. 10 GB)
            assert all(abs(f.error) <= 0.10 for f in backing)


def test_megatron_swiglu_and_cross_entropy_below_copy_on_h100() -> None:
    """Liger-Kernel's H100 runs (kernels.toml): bias_swiglu_impl forward ~63% of copy speed,
    unfused cross-entropy ~86% / ~93%; the SwiGLU backward rows are reference_only (a harness
    artifact is likely), so its backward stays at copy speed."""
    p = K.params_for_architecture("hopper")
    assert 0.55 < p.memory_bw_scale("swiglu_fwd") < 0.70
    assert p.memory_bw_scale("swiglu_bwd") == 1.0
    assert 0.80 < p.memory_bw_scale("cross_entropy_fwd") < 0.92
    assert 0.85 < p.memory_bw_scale("cross_entropy_bwd") < 0.99
    # its fused ("native") loss: the compiled functions' bytes at 73% / 56% of copy speed
    assert 0.65 < p.memory_bw_scale("cross_entropy_fused_fwd") < 0.80
    assert 0.50 < p.memory_bw_scale("cross_entropy_fused_bwd") < 0.65
    bwd = [f for f in K.shipped_figures(kinds=("memory",)) if " swiglu_bwd " in f.label]
    assert bwd and all(f.reference_only for f in bwd)


def test_unknown_kind_is_refused() -> None:
    gpu = load_gpu_catalog()["h100-sxm"]
    with pytest.raises(ConfigError, match="kind"):
        K.memory_time_s(gpu, 1e9, kind="layernorm")
    with pytest.raises(ConfigError, match="kind"):
        memory_op_time_s(Device(gpu, "bf16"), 1e9, kind="swiglu")


def _scn(topology: str, **kernels: Any) -> Scenario:
    return scenario_from_dict(
        {
            "model": {"preset": "llama3-8b", "seq_len": 2048, "layers": 2},
            "cluster": {"topology": topology, "num_gpus": 8},
            "parallel": {"micro_batch": 1, "global_batch": 8},
            "kernels": kernels,
        }
    )


def _layer(scn: Scenario) -> tuple[dict[str, Any], dict[str, Any], _Coster]:
    coster = _Coster(scn, default_comm_model(scn))
    coster.stage = 0
    fwd, b_in, _b_w, _rec, _ = coster.layer(False)
    return {s.name: s for s in fwd.parts}, {s.name: s for s in b_in.parts}, coster


@pytest.mark.parametrize("topology", ["dgx-h100", "dgx-a100"])
def test_swiglu_costs_its_kind_and_other_ops_stay_copy(topology: str) -> None:
    scn = _scn(topology)
    fwd, bwd, coster = _layer(scn)
    d = coster.device
    sw, sw_b = fwd["swiglu"], bwd["swiglu bwd"]
    m = scn.model
    assert sw.message_bytes == 3 * 2048 * m.ffn * d.activation_bytes
    assert sw.duration_s == pytest.approx(memory_op_time_s(d, sw.message_bytes, 1, "swiglu_fwd"), rel=1e-12)
    # backward: two passes of the forward's bytes at the backward kind's bandwidth
    assert sw_b.message_bytes == 2 * sw.message_bytes
    two_passes = 2 * memory_op_time_s(d, sw.message_bytes, 1, "swiglu_bwd")
    assert sw_b.duration_s == pytest.approx(two_passes, rel=1e-12)
    norm = fwd["input norm"]
    assert norm.duration_s == pytest.approx(memory_op_time_s(d, norm.message_bytes), rel=1e-12)
    # Transformer Engine's norm backward: read dz and x, write dx (3 passes of the forward's 2),
    # then the dgamma finalize kernel (program.py TE_LAYER_NOTE)
    assert bwd["input norm bwd"].message_bytes == pytest.approx(1.5 * norm.message_bytes, rel=1e-12)
    norm_b = memory_op_time_s(d, 1.5 * norm.message_bytes, 2)
    assert bwd["input norm bwd"].duration_s == pytest.approx(norm_b, rel=1e-12)
    hopper = architecture(scn.gpu.name) == "hopper"
    # slower than a streaming copy of the same bytes exactly where figures say so (H100 forward)
    copy_f = memory_op_time_s(d, sw.message_bytes)
    assert (sw.duration_s > 1.4 * copy_f) if hopper else sw.duration_s == pytest.approx(copy_f)
    assert sw_b.duration_s == pytest.approx(2 * memory_op_time_s(d, sw.message_bytes), rel=1e-12)


@pytest.mark.parametrize("impl", ["", "unfused", "torch", "fused", "te"])
def test_cross_entropy_costs_its_implementations_kind(impl: str) -> None:
    """Megatron-Core's unfused and fused ("native") losses at their measured kinds; PyTorch's and
    Transformer Engine's at copy speed."""
    scn = _scn("dgx-h100", **({"cross_entropy": impl} if impl else {}))
    coster = _Coster(scn, default_comm_model(scn))
    coster.stage = 0
    _, _ = coster.embedding()
    fwd, bwd, _w = coster.logits()
    ce = next(s for s in fwd.parts if s.name == "cross-entropy")
    ce_b = next(s for s in bwd.parts if s.name == "cross-entropy bwd")
    d = coster.device
    fwd_b, fwd_k, bwd_b, bwd_k = CE_PASSES[impl or "unfused"]
    assert ce.message_bytes == fwd_b * 2048 * scn.model.vocab
    assert ce_b.message_bytes == bwd_b * 2048 * scn.model.vocab
    kinds = {
        "unfused": ("cross_entropy_fwd", "cross_entropy_bwd"),
        "fused": ("cross_entropy_fused_fwd", "cross_entropy_fused_bwd"),
    }.get(impl or "unfused", ("copy", "copy"))
    assert CE_KINDS[impl or "unfused"] == kinds
    assert ce.duration_s == pytest.approx(memory_op_time_s(d, ce.message_bytes, fwd_k, kinds[0]), rel=1e-12)
    assert ce_b.duration_s == pytest.approx(
        memory_op_time_s(d, ce_b.message_bytes, bwd_k, kinds[1]), rel=1e-12
    )


def test_megatron_fused_cross_entropy_reproduces_its_h100_timing() -> None:
    """Liger-Kernel's H100 run of Megatron-Core's fused_vocab_parallel_cross_entropy at
    S=2048 B=4 V=131072 bf16 (all_benchmark_data.csv@ead96b61): 11.81 ms forward, 18.23 - 11.81
    = 6.42 ms backward; the 22 + 10 bytes per logit at the fitted kinds give both within 10%, and
    both are slower than a streaming copy of the same bytes."""
    gpu = load_gpu_catalog()["h100-sxm"]
    logits = 8192 * 131072
    fwd_b, fwd_k, bwd_b, bwd_k = CE_PASSES["fused"]
    t_f = K.memory_time_s(gpu, fwd_b * logits, kind="cross_entropy_fused_fwd", kernels=fwd_k)
    t_b = K.memory_time_s(gpu, bwd_b * logits, kind="cross_entropy_fused_bwd", kernels=bwd_k)
    assert t_f == pytest.approx(11.81e-3, rel=0.10)
    assert t_b == pytest.approx(6.42e-3, rel=0.10)
    assert t_f > K.memory_time_s(gpu, fwd_b * logits, kernels=fwd_k)
    assert t_b > K.memory_time_s(gpu, bwd_b * logits, kernels=bwd_k)
