"""GPT-OSS's eager elementwise work (issue 13): the clamped quick-GeGLU's input clamps, the experts'
per-expert fc2 bias, the unfused attention bias add and YaRN's unfused RoPE, and the all-to-all
dispatcher's sort by local expert, as Megatron-Core runs them (simulator/program.py constants).

Each mechanism adds exactly its closed-form bytes to the layer, nothing else changes, and the
importer derives the YaRN factor as Megatron-Core does.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from simulator.comm import default_comm_model
from simulator.costs import Device, memory_op_time_s
from simulator.errors import ConfigError
from simulator.loading import model_preset, scenario_from_dict, yarn_attention_factor
from simulator.program import (
    CLAMPED_GLU_PASSES,
    EXPERT_BIAS_BYTES,
    EXPERT_GEMM_OVERHEAD_NAME,
    QUANT_PADDING_PASSES,
    SINK_GRAD_BYTES_PER_ROW,
    SORT_CHUNKS_PASSES,
    UNFUSED_BIAS_ADD_PASSES,
    UNFUSED_ROPE_PASSES,
    _Coster,
)
from simulator.simulate import simulate
from simulator.specs import Scenario

SEQ, EP = 2048, 8
FIXTURES = Path(__file__).parent / "fixtures" / "hf"


# load_imbalance = 1: the closed forms below count each EP rank's mean T·top_k token copies, so they
# pin the busiest rank to the mean (forced balancing's default spread is routing_skew.py's)
def _scn(**model: Any) -> Scenario:
    data: dict[str, Any] = {
        "model": {
            "preset": "gpt-oss-120b",
            "seq_len": SEQ,
            "layers": 4,
            "moe": {"load_imbalance": 1.0},
            **model,
        },
        "cluster": {"topology": "dgx-h100", "num_gpus": 8},
        "parallel": {"ep": EP, "micro_batch": 1, "global_batch": 8},
    }
    return scenario_from_dict(data)


def _device(scn: Scenario) -> Device:
    return Device(scn.gpu, scn.dtype)


def _segments(scn: Scenario) -> dict[str, Any]:
    coster = _Coster(scn, default_comm_model(scn))
    coster.stage = 0
    fwd, b_in, b_w, rec, _ = coster.layer(True)
    return {
        "fwd": {s.name: s for s in fwd.parts},
        "bwd": {s.name: s for s in b_in.parts + b_w.parts},
        "rec": [s.name for s in rec.parts],
        # GPU work only: the host-issue wait (simulator/hostbound.py) shrinks as GPU work grows
        "total_s": sum(
            s.duration_s for s in fwd.parts + b_in.parts + b_w.parts + rec.parts if s.category != "host_bound"
        ),
    }


def test_expert_bias_bytes_closed_form() -> None:
    scn = _scn()
    m = scn.model
    seg = _segments(scn)
    rows, a = SEQ * m.top_k, 2  # balanced: each EP rank's experts receive T·top_k token copies
    name = "expert fc2 bias (eager, per expert)"
    fwd, bwd = seg["fwd"][name], seg["bwd"][name + " bwd"]
    # 16-bit probabilities (GPT-OSS has no fp32 router): b*p, the add and torch.cat forward; cat,
    # and a product and a row sum each for the bias and the probability gradients backward
    assert fwd.message_bytes == EXPERT_BIAS_BYTES[0] * rows * m.hidden == 12 * rows * 2880
    assert bwd.message_bytes == EXPERT_BIAS_BYTES[3] * rows * m.hidden == 16 * rows * 2880
    # one launch per local expert: the bias work of 16 local experts costs more than of 2
    experts_local = m.num_experts // EP
    kernels = EXPERT_BIAS_BYTES[1] * experts_local + EXPERT_BIAS_BYTES[2]
    assert fwd.duration_s == pytest.approx(memory_op_time_s(_device(scn), fwd.message_bytes, kernels=kernels))
    grad = seg["bwd"]["expert fc1 bias grad"]
    assert grad.message_bytes == rows * 2 * m.expert_ffn * a  # one read of the fc1 output gradient


def test_clamp_bytes_and_recompute() -> None:
    scn = _scn()
    m = scn.model
    seg = _segments(scn)
    elems = SEQ * m.top_k * 2 * m.expert_ffn  # the [rows, 2f] fc1 output
    assert seg["fwd"]["expert act input clamps"].message_bytes == CLAMPED_GLU_PASSES[0] * elems * 2
    assert seg["bwd"]["expert act input clamps bwd"].message_bytes == CLAMPED_GLU_PASSES[2] * elems * 2
    assert CLAMPED_GLU_PASSES[:3:2] == (4.0, 5.0)
    # Megatron-Core checkpoints bias_act_func whole: recompute_modules = ["moe_act"] re-runs the clamps
    rec = scenario_from_dict(
        {
            "model": {"preset": "gpt-oss-120b", "seq_len": SEQ, "layers": 4},
            "cluster": {"topology": "dgx-h100", "num_gpus": 8},
            "parallel": {
                "ep": EP,
                "micro_batch": 1,
                "global_batch": 8,
                "recompute": "selective",
                "recompute_modules": ["moe_act"],
            },
        }
    )
    assert _segments(rec)["rec"] == ["expert act input clamps", "expert act"]


def test_unfused_rope_only_with_a_yarn_factor() -> None:
    yarn, plain = _segments(_scn()), _segments(_scn(rope_mscale=1.0))
    m = model_preset("gpt-oss-120b")
    elems = SEQ * (m.heads + m.num_kv_heads) * m.dim_per_head  # q and k of one micro-batch
    assert yarn["fwd"]["rope (unfused: YaRN mscale)"].message_bytes == UNFUSED_ROPE_PASSES[0] * elems * 2
    assert yarn["bwd"]["rope (unfused: YaRN mscale) bwd"].message_bytes == UNFUSED_ROPE_PASSES[2] * elems * 2
    assert plain["fwd"]["rope"].message_bytes == 2 * elems * 2  # TE's fused RoPE: one read, one write
    assert "rope (unfused: YaRN mscale)" not in plain["fwd"]


def test_each_mechanism_adds_only_its_segments() -> None:
    """Switching a mechanism off removes exactly its segments' time, nothing else."""
    full = _segments(_scn())
    no_bias = _segments(_scn(linear_bias=False))
    bias_s = sum(
        s.duration_s
        for name, s in {**full["fwd"], **full["bwd"]}.items()
        if "fc2 bias (eager" in name or name in ("expert fc1 bias grad", "attn bias add (unfused)")
    )
    # and the DDP hook's main_grad adds of the attention's bias gradients (program.py DDP_HOOK_NOTE)
    hook = "norm/bias main_grad add (ddp hook)"
    bias_s += full["bwd"][hook].duration_s - no_bias["bwd"][hook].duration_s
    assert full["total_s"] - no_bias["total_s"] == pytest.approx(bias_s, rel=1e-9)
    swiglu = _segments(_scn(activation=""))
    clamp_s = sum(s.duration_s for name, s in {**full["fwd"], **full["bwd"]}.items() if "clamps" in name)

    def act_s(seg: dict[str, Any]) -> float:  # SwiGLU has its own measured bandwidth (MEMORY_KINDS)
        return sum(
            s.duration_s
            for n, s in {**seg["fwd"], **seg["bwd"]}.items()
            if n in ("expert act", "expert act bwd")
        )

    assert act_s(swiglu) > act_s(full)  # H100: Megatron-Core's SwiGLU forward below copy speed
    assert full["total_s"] - swiglu["total_s"] == pytest.approx(
        clamp_s + act_s(full) - act_s(swiglu), rel=1e-9
    )
    assert simulate(_scn()).report.step_time_s > simulate(_scn(linear_bias=False)).report.step_time_s


def test_yarn_factor_as_megatron_computes_it() -> None:
    # GPT-OSS: yarn, factor 32, no mscale -> 0.1·ln(32) + 1 (Megatron-Core _yarn_get_mscale)
    gpt_oss = {"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 4096}
    assert yarn_attention_factor(gpt_oss) == pytest.approx(0.1 * math.log(32) + 1, rel=1e-12)
    assert yarn_attention_factor(gpt_oss) == pytest.approx(model_preset("gpt-oss-120b").rope_mscale, rel=1e-4)
    # DeepSeek-V3 / Kimi-K2: mscale = mscale_all_dim = 1 -> the two terms cancel: TE's fused RoPE
    dsv3 = {"type": "yarn", "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0}
    assert yarn_attention_factor(dsv3) == 1.0
    assert yarn_attention_factor({"rope_type": "linear", "factor": 8.0}) == 1.0
    assert yarn_attention_factor({}) == 1.0


def test_refusals_name_the_key() -> None:
    with pytest.raises(ConfigError) as err:
        _scn(gated_mlp=False)
    assert err.value.key == "model.activation"
    with pytest.raises(ConfigError) as err:
        _scn(rope_mscale=0)
    assert err.value.key == "model.rope_mscale"
    with pytest.raises(ConfigError) as err:
        _scn(linear_bias="yes")
    assert err.value.key == "model.linear_bias"


def test_preset_says_what_it_does_not_model() -> None:
    """Sinks and the 128-token window of the even layers are modeled: no warning."""
    m = model_preset("gpt-oss-120b")
    assert m.notes == () and model_preset("qwen3-30b-a3b").notes == ()
    assert [m.attention_window(i) for i in range(3)] == [("sliding", 128), ("full", 0), ("sliding", 128)]


def test_fused_grouped_mlp_drops_exactly_the_eager_expert_ops() -> None:
    """[kernels] fused_grouped_mlp (TE op fuser): no eager clamps, no eager fc2 bias, and the expert
    GEMMs as one grouped kernel instead of TE GroupedLinear's per-expert GEMMs on 4 streams
    (program.TE_MULTI_STREAM_NOTE); the rest equal."""
    eager = _segments(_scn())
    data: dict[str, Any] = {
        "model": {"preset": "gpt-oss-120b", "seq_len": SEQ, "layers": 4, "moe": {"load_imbalance": 1.0}},
        "cluster": {"topology": "dgx-h100", "num_gpus": 8},
        "parallel": {"ep": EP, "micro_batch": 1, "global_batch": 8},
        "kernels": {"fused_grouped_mlp": True},
    }
    fused = _segments(scenario_from_dict(data))
    dropped = {"expert act input clamps", "expert fc2 bias (eager, per expert)"}
    # and the eager path's per-GEMM residual (program.EXPERT_GEMM_OVERHEAD_NOTE), every pass
    residual = {n for n in {**eager["fwd"], **eager["bwd"]} if n.startswith(EXPERT_GEMM_OVERHEAD_NAME)}
    assert len(residual) == 6 and not any(n.startswith(EXPERT_GEMM_OVERHEAD_NAME) for n in fused["bwd"])
    assert set(eager["fwd"]) - set(fused["fwd"]) == dropped | (residual & set(eager["fwd"]))
    gone_s = sum(
        s.duration_s
        for name, s in {**eager["fwd"], **eager["bwd"]}.items()
        if name.removesuffix(" bwd") in dropped or name in residual
    )
    gemms = [f"expert {fc}{p}" for fc in ("fc1", "fc2") for p in ("", " dgrad", " wgrad")]
    gemm_s = sum(
        (eager["fwd"] | eager["bwd"])[g].duration_s - (fused["fwd"] | fused["bwd"])[g].duration_s
        for g in gemms
    )
    assert gemm_s > 0  # 16 local experts: 4 rounds of 4 GEMMs, each round its own wave tail
    assert eager["total_s"] - fused["total_s"] == pytest.approx(gone_s + gemm_s, rel=1e-9)
    assert "rope (unfused: YaRN mscale)" in fused["fwd"]  # attention side: not the grouped MLP


def _with(kernels: dict[str, Any], ep: int = EP, **model: Any) -> Scenario:
    data: dict[str, Any] = {
        "model": {
            "preset": "gpt-oss-120b",
            "seq_len": SEQ,
            "layers": 4,
            "moe": {"load_imbalance": 1.0},
            **model,
        },
        "cluster": {"topology": "dgx-h100", "num_gpus": 8},
        "parallel": {"ep": ep, "micro_batch": 1, "global_batch": 8},
        "kernels": kernels,
    }
    return scenario_from_dict(data)


def test_alltoall_sorts_by_local_expert() -> None:
    """The all-to-all dispatcher's second permutation (sort_chunks_by_idxs) and its inverse: one read
    and one write of the received token copies each, forward and backward; not with HybridEP/DeepEP
    (tokens arrive grouped by expert)."""
    m = model_preset("gpt-oss-120b")
    seg = _segments(_with({"moe_dispatcher": "alltoall"}))
    copies = SEQ * m.top_k * m.hidden * 2  # bytes of this rank's received token copies
    for name in ("moe sort by expert", "moe unsort by expert"):
        assert seg["fwd"][name].message_bytes == SORT_CHUNKS_PASSES[0] * copies == 2 * copies
        assert seg["bwd"][name + " bwd"].message_bytes == SORT_CHUNKS_PASSES[2] * copies
    for disp in ("hybridep", "deepep"):
        assert "moe sort by expert" not in _segments(_with({"moe_dispatcher": disp}))["fwd"]


def test_bias_add_unfused_only_for_biased_moe() -> None:
    m = model_preset("gpt-oss-120b")
    seg = _segments(_scn())
    assert (
        seg["fwd"]["attn bias add (unfused)"].message_bytes == UNFUSED_BIAS_ADD_PASSES[0] * SEQ * m.hidden * 2
    )
    assert "attn bias add (unfused) bwd" not in seg["bwd"]  # the bias gradient is the fused one's too
    assert "attn bias add (unfused)" not in _segments(_scn(linear_bias=False))["fwd"]


def _qwen(**model: Any) -> Scenario:
    """Four Qwen3-30B-A3B layers on one DGX H100 node (EP 8), with `model` keys overridden."""
    data: dict[str, Any] = {
        "model": {"preset": "qwen3-30b-a3b", "seq_len": SEQ, "layers": 4, **model},
        "cluster": {"topology": "dgx-h100", "num_gpus": 8},
        "parallel": {"ep": EP, "micro_batch": 1, "global_batch": 8},
    }
    return scenario_from_dict(data)


def test_qk_norm_costs_two_norms_of_q_and_k() -> None:
    """Qwen3's per-head q_norm/k_norm (qk_norm): one read and one write of q and k forward, twice
    that backward, as the layer norms; the preset and the config.json import both set it."""
    from simulator.loading import model_from_table

    m = model_preset("qwen3-30b-a3b")
    assert m.qk_norm and model_preset("qwen3-235b-a22b").qk_norm and not model_preset("gpt-oss-120b").qk_norm
    imported = model_from_table({"hf_config": "qwen3_30b_a3b.json", "seq_len": 4096}, FIXTURES)
    assert imported.qk_norm
    with_norm, without = _segments(_qwen()), _segments(_qwen(qk_norm=False))
    qk_bytes = SEQ * (m.heads + m.num_kv_heads) * m.dim_per_head * 2
    assert with_norm["fwd"]["qk norm"].message_bytes == 2 * qk_bytes
    assert with_norm["bwd"]["qk norm bwd"].message_bytes == 4 * qk_bytes
    assert "qk norm" not in without["fwd"]
    added = with_norm["fwd"]["qk norm"].duration_s + with_norm["bwd"]["qk norm bwd"].duration_s
    # and the DDP hook's main_grad adds of the two norms' weights (program.py DDP_HOOK_NOTE)
    hook = "norm/bias main_grad add (ddp hook)"
    added += with_norm["bwd"][hook].duration_s - without["bwd"][hook].duration_s
    assert with_norm["bwd"][hook].duration_s > without["bwd"][hook].duration_s
    assert with_norm["total_s"] - without["total_s"] == pytest.approx(added, rel=1e-9)


def test_qk_norm_keeps_its_inputs() -> None:
    from simulator.memory import scenario_layer_activations

    m = model_preset("qwen3-30b-a3b")
    extra = (
        scenario_layer_activations(_qwen(), True).stored
        - scenario_layer_activations(_qwen(qk_norm=False), True).stored
    )
    assert extra == pytest.approx(2 * SEQ * (m.heads + m.num_kv_heads) * m.dim_per_head)  # 16-bit q and k


def test_quantized_experts_pad_and_unpad_unless_hybridep_padded() -> None:
    """FP8/MXFP8 experts: TE's Fp8Padding/Fp8Unpadding copy the routed tokens and the fc2 output
    (2 + 2 passes each way); HybridEP pads inside its dispatch; BF16 needs no padding."""

    def qwen(dtype: str, dispatcher: str) -> Scenario:
        data: dict[str, Any] = {
            "model": {"preset": "qwen3-30b-a3b", "seq_len": SEQ, "layers": 4, "moe": {"load_imbalance": 1.0}},
            "cluster": {"topology": "dgx-h100", "num_gpus": 8},
            "parallel": {"ep": EP, "micro_batch": 1, "global_batch": 8},
            "precision": {"dtype": dtype},
            "kernels": {"moe_dispatcher": dispatcher},
        }
        return scenario_from_dict(data)

    m = model_preset("qwen3-30b-a3b")
    name = "expert quantization pad/unpad"
    seg = _segments(qwen("fp8", "alltoall"))
    copies = SEQ * m.top_k * m.hidden * 2
    assert seg["fwd"][name].message_bytes == QUANT_PADDING_PASSES[0] * copies == 4 * copies
    assert seg["bwd"][name + " bwd"].message_bytes == QUANT_PADDING_PASSES[2] * copies
    assert name in _segments(qwen("fp8", "deepep"))["fwd"]
    assert name not in _segments(qwen("fp8", "hybridep"))["fwd"]
    assert name not in _segments(qwen("bf16", "alltoall"))["fwd"]


def test_attention_sinks_add_exactly_the_dsink_reduction() -> None:
    """GPT-OSS's attention sinks (program.SINK_GRAD_NOTE): cuDNN's backward graph reduces
    exp(sink - Stats) * rowsum(dO * O) over batch and queries, one memory-bound pass of 8 bytes per
    (batch, head, query) row; nothing forward, nothing else changes. The preset and the
    config.json import both set it; TE's unfused path keeps it inside its softmax, and the flash
    kernels (no learnable offset: TE disables FlashAttention for it) are refused."""
    from simulator.loading import model_from_table

    m = model_preset("gpt-oss-120b")
    assert m.attention_sinks and not model_preset("qwen3-30b-a3b").attention_sinks
    imported = model_from_table({"hf_config": "gpt_oss.json", "seq_len": 4096}, FIXTURES)
    assert imported.attention_sinks
    scn = _scn()
    with_sinks, without = _segments(scn), _segments(_scn(attention_sinks=False))
    rows = 1 * m.heads * SEQ  # micro-batch 1, tp 1
    op = with_sinks["bwd"]["attention sink grad (dSink)"]
    assert op.message_bytes == SINK_GRAD_BYTES_PER_ROW * rows
    assert op.duration_s == pytest.approx(memory_op_time_s(_device(scn), SINK_GRAD_BYTES_PER_ROW * rows))
    assert "attention sink grad (dSink)" not in without["bwd"]
    assert set(with_sinks["fwd"]) == set(without["fwd"])
    assert with_sinks["total_s"] - without["total_s"] == pytest.approx(op.duration_s, rel=1e-9)
    table = {
        "model": {"preset": "gpt-oss-120b", "seq_len": SEQ, "layers": 4},
        "cluster": {"topology": "dgx-h100", "num_gpus": 8},
        "parallel": {"ep": EP, "micro_batch": 1, "global_batch": 8},
        "kernels": {"attention": "unfused"},
    }
    assert "attention sink grad (dSink)" not in _segments(scenario_from_dict(table))["bwd"]
    with pytest.raises(ConfigError) as info:
        scenario_from_dict({**table, "kernels": {"attention": "fa3"}})
    assert info.value.key == "kernels.attention"


def test_attention_sinks_add_one_host_hook() -> None:
    """The learnable softmax offset is one parameter per layer: one more DDP gradient hook in the
    backward-weight ops of the attention side, nothing forward (hostbound.MODULE_OPS)."""
    from simulator.hostbound import MODULE_OPS, moe_layer_host_ops

    with_sinks, without = moe_layer_host_ops(_scn()), moe_layer_host_ops(_scn(attention_sinks=False))
    assert MODULE_OPS["attention_sinks"] == (0.0, 0.0, 1.0)
    assert with_sinks is not None and without is not None
    assert with_sinks.forward == without.forward
    assert with_sinks.backward_input == without.backward_input
    assert with_sinks.backward_weight - without.backward_weight == 1.0
    assert with_sinks.backward_weight_parts[0] - without.backward_weight_parts[0] == 1.0
