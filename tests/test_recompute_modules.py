"""Selective recomputation by module (`[parallel] recompute_modules`, Megatron-Core's
--recompute-modules), Adam moments in 16-bit (`[memory] exp_avg_dtype / exp_avg_sq_dtype`) and
16-bit gradient buffers (Megatron DDP with grad_reduce_in_fp32 = False), issue 13.

Each recomputed module drops exactly what it would have kept (memory closed forms), and adds
exactly its forward work to the backward pass (time) and its matmul FLOPs to the HFU numerator.
"""

from __future__ import annotations

from typing import Any

import pytest

from simulator import flops as F
from simulator.errors import ConfigError
from simulator.loading import model_preset, scenario_from_dict
from simulator.memory import ACT_BYTES, layer_activation_bytes, memory_footprint
from simulator.program import build_program
from simulator.simulate import simulate
from simulator.specs import Scenario


def _scn(model: dict[str, Any], parallel: dict[str, Any], gpus: int = 8, **extra: Any) -> Scenario:
    data: dict[str, Any] = {
        "model": model,
        "cluster": {"topology": "dgx-h100", "num_gpus": gpus},
        "parallel": {"micro_batch": 1, "global_batch": 16, **parallel},
    }
    data.update(extra)
    return scenario_from_dict(data)


MOE = {"preset": "qwen3-30b-a3b", "seq_len": 2048}
MLA = {"preset": "deepseek-v3", "seq_len": 1024, "layers": 8, "mtp_layers": 0}


# ----------------------------------------------------------------------------- memory, per layer
def _stored(model: str | dict, modules: tuple[str, ...], moe: bool = True, **kw: Any) -> float:
    m = model_preset(model) if isinstance(model, str) else model
    return layer_activation_bytes(
        m, 1, recompute="selective", recompute_modules=modules, moe=moe, **kw
    ).stored


def test_default_modules_are_the_attention_core() -> None:
    m = model_preset("qwen3-30b-a3b")
    old = layer_activation_bytes(m, 1, recompute="selective", moe=True)
    full = layer_activation_bytes(m, 1, recompute="none", moe=True)
    assert old.stored == _stored("qwen3-30b-a3b", ("core_attn",))
    assert full.stored - old.stored == pytest.approx(old.attention_core)


def test_moe_act_drops_the_experts_activation_output() -> None:
    """bf16: the fc2 input of top_k expert copies, 2 bytes x top_k x expert_ffn per token."""
    m = model_preset("qwen3-30b-a3b")
    none = layer_activation_bytes(m, 1, recompute="none", moe=True).stored
    s = m.seq_len
    assert none - _stored(m, ("moe_act",)) == pytest.approx(ACT_BYTES * m.top_k * m.expert_ffn * s)
    # FP8 training keeps the fc2 input as its 1-byte cast: half the saving
    assert layer_activation_bytes(m, 1, recompute="none", moe=True, fp8=True).stored - _stored(
        m, ("moe_act",), fp8=True
    ) == pytest.approx(1 * m.top_k * m.expert_ffn * s)


def test_layernorm_drops_both_norm_outputs() -> None:
    m = model_preset("llama3-8b")
    s, h = m.seq_len, m.hidden
    none = layer_activation_bytes(m, 1, recompute="none").stored
    assert none - _stored(m, ("layernorm",), moe=False) == pytest.approx(2 * ACT_BYTES * h * s)
    # FP8: the norm outputs were kept only as the next linears' FP8 copies (1 byte); Megatron-Core
    # sets those linears to save the discarded, recomputed original instead (781e765818)
    fp8_none = layer_activation_bytes(m, 1, recompute="none", fp8=True).stored
    assert fp8_none - _stored(m, ("layernorm",), moe=False, fp8=True) == pytest.approx(2 * 1 * h * s)
    # sequence parallelism splits the saving over tp like the rest of the replicated part
    sp = dict(tp=4, sequence_parallel=True)
    sp_none = layer_activation_bytes(m, 1, recompute="none", **sp).stored
    assert sp_none - _stored(m, ("layernorm",), moe=False, **sp) == pytest.approx(2 * ACT_BYTES * h * s / 4)


def test_mla_up_proj_drops_q_k_v() -> None:
    m = model_preset("deepseek-v3")
    s = m.seq_len
    none = layer_activation_bytes(m, 1, recompute="none", moe=True).stored
    q_k_v = m.heads * (2 * m.mla.qk_head_dim + m.mla.v_head_dim)
    assert none - _stored(m, ("mla_up_proj",)) == pytest.approx(ACT_BYTES * q_k_v * s)


def test_whole_moe_block_covers_moe_act_and_shared_experts() -> None:
    m = model_preset("deepseek-v3")
    assert _stored(m, ("moe", "moe_act", "shared_experts")) == _stored(m, ("moe",))
    assert _stored(m, ("moe",)) < _stored(m, ("moe_act", "shared_experts")) < _stored(m, ("moe_act",))
    # a dense layer: `moe` recomputes nothing there, `mlp` drops the MLP intermediates
    dense_none = layer_activation_bytes(m, 1, recompute="none").stored
    assert _stored(m, ("moe",), moe=False) == pytest.approx(dense_none)
    gated = (2 * ACT_BYTES + ACT_BYTES) * m.ffn * m.seq_len  # gate, up and their product
    assert dense_none - _stored(m, ("mlp",), moe=False) == pytest.approx(gated)


# ----------------------------------------------------------------------------- time and FLOPs
def _recompute_parts(scn: Scenario) -> dict[str, float]:
    """Seconds of recomputed work in stage 0's backward, by segment name."""
    out: dict[str, float] = {}
    for chunk in build_program(scn).stages[0].chunks:
        for seg in chunk.backward.segments:
            if seg.category == "recompute":
                out[seg.name] = out.get(seg.name, 0.0) + seg.duration_s
    return out


def _forward_parts(scn: Scenario) -> dict[str, float]:
    out: dict[str, float] = {}
    for chunk in build_program(scn).stages[0].chunks:
        for seg in chunk.forward.segments:
            out[seg.name] = out.get(seg.name, 0.0) + seg.duration_s
    return out


@pytest.mark.parametrize(
    ("model", "modules", "names"),
    [
        (MOE, ["moe_act"], {"expert act"}),
        (MOE, ["layernorm"], {"input norm", "post-attn norm"}),
        (MOE, ["core_attn", "moe_act"], {"expert act", "attention (cudnn)"}),
        (MLA, ["mla_up_proj"], {"q up", "kv up", "rope"}),
        (MLA, ["shared_experts"], {"shared fc1", "shared fc2"}),
    ],
)
def test_recompute_repeats_exactly_the_modules_forward(
    model: dict, modules: list[str], names: set[str]
) -> None:
    scn = _scn(
        model,
        {"ep": 8, "recompute": "selective", "recompute_modules": modules},
        kernels={"attention": "cudnn"},
    )
    rec = _recompute_parts(scn)
    fwd = _forward_parts(scn)
    assert set(rec) == names
    for name in names:
        assert rec[name] == pytest.approx(fwd[name], rel=1e-12)


def test_moe_recompute_repeats_the_dispatch() -> None:
    """Recomputing the MoE block runs its all-to-all again (communication stays ep_comm)."""
    base = {"ep": 8, "recompute": "selective"}
    one = _scn(MOE, {**base, "recompute_modules": ["moe_act"]})
    whole = _scn(MOE, {**base, "recompute_modules": ["moe"]})

    def ep_s(scn: Scenario) -> float:
        return sum(
            seg.duration_s
            for chunk in build_program(scn).stages[0].chunks
            for seg in chunk.backward.segments
            if seg.category == "ep_comm"
        )

    assert ep_s(whole) > ep_s(one) > 0
    assert sum(_recompute_parts(whole).values()) > sum(_recompute_parts(one).values())


@pytest.mark.parametrize(
    ("model", "modules"),
    [
        (MOE, ["moe"]),
        (MOE, ["core_attn", "layernorm", "moe_act"]),
        (MLA, ["mla_up_proj", "mlp", "shared_experts"]),
        (MLA, ["moe", "mla_up_proj", "core_attn"]),
        ({"preset": "llama3-8b", "seq_len": 2048}, ["mlp", "core_attn"]),
    ],
)
def test_recompute_adds_exactly_the_modules_flops(model: dict, modules: list[str]) -> None:
    """Program FLOPs (every timed kernel's) = flops.py's model + recomputed-module FLOPs."""
    ep = 8 if model["preset"] != "llama3-8b" else 1
    if ep > 1:  # the program costs the busiest EP rank's expert GEMMs, flops.py the mean: pin it
        model = {**model, "moe": {"load_imbalance": 1.0}}
    scn = _scn(model, {"ep": ep, "recompute": "selective", "recompute_modules": modules})
    par = scn.parallel
    program = build_program(scn)
    per_mb = sum(
        seg.flops
        for stage in program.stages
        for chunk in stage.chunks
        for block in (chunk.forward, chunk.backward)
        for seg in block.segments
    )
    total = per_mb * program.num_microbatches * scn.num_gpus // par.pp
    counted = F.step_flops(scn.model, par.global_batch, par.recompute, par.recompute_modules)
    assert total == pytest.approx(counted.hardware, rel=1e-9)
    extra = counted.hardware - counted.model
    assert extra == pytest.approx(
        par.global_batch * F.recompute_flops_per_sequence(scn.model, "selective", par.recompute_modules)
    )
    assert simulate(scn).report.hardware_flops_per_step == pytest.approx(counted.hardware)


def test_moe_flops_closed_form() -> None:
    """`moe` recomputes router + top_k routed experts (+ shared) of every MoE layer."""
    m = model_preset("qwen3-30b-a3b")
    got = F.recompute_flops_per_sequence(m, "selective", ("moe",))
    per_layer = 2 * m.seq_len * (m.hidden * m.num_experts + m.top_k * 3 * m.hidden * m.expert_ffn)
    assert got == pytest.approx(m.num_moe_layers * per_layer)
    assert F.recompute_flops_per_sequence(m, "selective", ("moe_act", "layernorm")) == 0.0


def test_recompute_modules_slow_the_step_and_save_memory() -> None:
    base = {"ep": 8, "recompute": "selective"}
    light = _scn(MOE, {**base, "recompute_modules": ["core_attn"]})
    heavy = _scn(MOE, {**base, "recompute_modules": ["core_attn", "moe"]})
    assert memory_footprint(heavy).peak_bytes < memory_footprint(light).peak_bytes
    assert simulate(heavy).report.step_time_s > simulate(light).report.step_time_s


# ----------------------------------------------------------------------------- refused inputs
@pytest.mark.parametrize(
    ("model", "parallel", "needle"),
    [
        (MOE, {"recompute_modules": ["moe_act"]}, 'needs recompute = "selective"'),
        (MOE, {"recompute": "full", "recompute_modules": ["moe_act"]}, 'needs recompute = "selective"'),
        (MOE, {"recompute": "selective", "recompute_modules": ["mla_up_proj"]}, "without [model.mla]"),
        (
            {"preset": "llama3-8b"},
            {"ep": 1, "recompute": "selective", "recompute_modules": ["moe_act"]},
            "dense model",
        ),
        (MOE, {"recompute": "selective", "recompute_modules": ["shared_experts"]}, "without shared experts"),
        (MOE, {"recompute": "selective", "recompute_modules": ["attention"]}, "recompute_modules"),
        (MOE, {"recompute": "selective", "recompute_modules": "moe_act"}, "must be a list"),
    ],
)
def test_bad_recompute_modules_refused(model: dict, parallel: dict, needle: str) -> None:
    with pytest.raises(ConfigError) as err:
        _scn(model, {"ep": 8, **parallel})
    assert needle in str(err.value)
    assert "parallel.recompute_modules" in str(err.value)


# ----------------------------------------------------------------------------- optimizer state
def test_bf16_moments_closed_form() -> None:
    """Master weight 4 B + moments 2 + 2 B = 8 of the 12 bytes per parameter; the fused Adam
    step moves 8 fewer bytes per parameter (each moment read and written at 2 B, not 4)."""
    par = {"ep": 8, "zero": 1}
    fp32 = _scn(MOE, par)
    bf16 = _scn(MOE, par, memory={"exp_avg_dtype": "bf16", "exp_avg_sq_dtype": "bf16"})
    one = _scn(MOE, par, memory={"exp_avg_sq_dtype": "bf16"})
    opt = [memory_footprint(s).parts_bytes["optimizer"] for s in (fp32, one, bf16)]
    assert opt[2] == pytest.approx(opt[0] * 8 / 12)
    assert opt[1] == pytest.approx(opt[0] * 10 / 12)
    t = [build_program(s).stages[0].optimizer_s for s in (fp32, bf16)]
    assert t[1] < t[0]
    with pytest.raises(ConfigError, match="memory.exp_avg_dtype"):
        _scn(MOE, par, memory={"exp_avg_dtype": "int4"})


def test_bf16_gradient_buffers_halve_grads() -> None:
    """Megatron-Core DDP allocates its gradient buffers in the reduce dtype: with
    grad_reduce_in_fp32 = False they are bf16 (2 B/param). The distributed optimizer's fp32 copy
    of its shard (4/d B/param) exists only inside step(), after the activations are freed: it
    does not add to the peak while the activations outweigh it."""
    par = {"ep": 8, "zero": 1, "micro_batch": 4, "global_batch": 64}
    fp32 = memory_footprint(_scn(MOE, par)).parts_bytes
    bf16 = memory_footprint(_scn(MOE, par, kernels={"grad_reduce_dtype": "bf16"})).parts_bytes
    assert bf16["grads"] == pytest.approx(fp32["grads"] / 2)
    assert fp32["optimizer"] * 4 / 12 < fp32["activations"]  # the copy is smaller: no change
    assert bf16["optimizer"] == pytest.approx(fp32["optimizer"])


def test_step_grad_copy_counts_where_it_outweighs_the_activations() -> None:
    """Peak = state + max(activations + buffers, the step's fp32 gradient shard): with the
    activations offloaded to (almost) nothing, the shard sets the peak -- optimizer part
    = 12/d + 4/d B/param less what the activations and buffers already take. Under ZeRO-3
    (PyTorch FSDP) the fp32 sharded gradient accumulates through the backward: always counted."""
    from simulator.units import GIB_BYTES

    par = {"ep": 8, "zero": 1}
    mem = {"offload_activations": 1.0}
    base = memory_footprint(_scn(MOE, par, memory=mem)).parts_bytes
    bf16 = memory_footprint(_scn(MOE, par, memory=mem, kernels={"grad_reduce_dtype": "bf16"})).parts_bytes
    copy = base["optimizer"] * 4 / 12
    assert copy > bf16["activations"] + bf16["buffers"]  # the case under test
    assert bf16["optimizer"] == pytest.approx(
        base["optimizer"] + copy - bf16["activations"] - bf16["buffers"], rel=1e-12
    )
    assert bf16["optimizer"] > base["optimizer"] + 0.01 * GIB_BYTES
    z3 = {"zero": 3, "micro_batch": 1}
    f32 = memory_footprint(_scn(MOE, z3)).parts_bytes
    b16 = memory_footprint(_scn(MOE, z3, kernels={"grad_reduce_dtype": "bf16"})).parts_bytes
    assert b16["optimizer"] == pytest.approx(f32["optimizer"] * 16 / 12)


# ----------------------------------------------------------------------------- dropout masks
def test_no_dropout_stores_no_masks() -> None:
    """Korthikanti's two 1-byte dropout masks per token and layer (2·h·s·b) exist only with
    dropout > 0: torch's dropout with p = 0 returns its input. The MoE presets train without
    dropout (their config.json attention_dropout 0.0), and so do Llama 2/3; the default, which
    the GPT-3 presets keep, is Megatron-LM's 0.1."""
    from dataclasses import replace

    m = model_preset("gpt3-13b")
    assert m.dropout == 0.1
    none = replace(m, dropout=0.0)
    s, h = m.seq_len, m.hidden
    with_masks = layer_activation_bytes(m, 1, recompute="none").stored
    assert with_masks - layer_activation_bytes(none, 1, recompute="none").stored == pytest.approx(2 * h * s)
    # unfused attention also drops its s×s mask (1 byte per head and score)
    unfused = layer_activation_bytes(m, 1, flash_attention=False).stored
    unfused_none = layer_activation_bytes(none, 1, flash_attention=False).stored
    assert unfused - unfused_none == pytest.approx(2 * h * s + m.heads * s * s)
    no_dropout = ("deepseek-v3", "qwen3-30b-a3b", "gpt-oss-120b", "llama2-7b", "llama3-8b", "llama3-405b")
    assert all(model_preset(p).dropout == 0.0 for p in no_dropout)
    with pytest.raises(ConfigError, match="model.dropout"):
        _scn({"preset": "llama3-8b", "dropout": 1.5}, {})


def test_hf_import_reads_dropout(tmp_path) -> None:
    import json

    from simulator.loading import model_from_table

    cfg = {
        "model_type": "llama",
        "num_hidden_layers": 2,
        "hidden_size": 256,
        "num_attention_heads": 4,
        "intermediate_size": 512,
        "vocab_size": 1000,
        "attention_dropout": 0.0,
    }
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    m = model_from_table({"hf_config": "config.json", "seq_len": 128}, tmp_path)
    assert m.dropout == 0.0
    (tmp_path / "config.json").write_text(json.dumps({**cfg, "hidden_dropout": 0.1}))
    assert model_from_table({"hf_config": "config.json", "seq_len": 128}, tmp_path).dropout == 0.1


# ----------------------------------------------------------------------------- sweeps
def test_sweep_keeps_recompute_modules_and_exports_reproduce(tmp_path) -> None:
    """recompute_modules is no sweep column: it stays the scenario's (in the fingerprint), every
    row runs with it, and an exported row reproduces its MFU with it."""
    import tomllib

    import mfusim
    from simulator.export import export_rows, top_targets
    from simulator.loading import read_toml

    path = tmp_path / "moe.toml"
    path.write_text(
        """
name = "moe sweep"
[model]
preset = "qwen3-30b-a3b"
seq_len = 2048
[cluster]
topology = "dgx-h100"
num_gpus = 8
[parallel]
ep = 8
micro_batch = 1
global_batch = 16
recompute = "selective"
recompute_modules = ["moe_act", "layernorm"]
[sweep]
micro_batch = [1, 2]
"""
    )
    result = mfusim.sweep(path, engine="des")
    rows = result.ranked
    assert rows and all("recompute_modules" not in r for r in rows)
    paths = export_rows(
        read_toml(path),
        tmp_path,
        rows[:1],
        top_targets(tmp_path / "top", rows[:1]),
        rank_by="mfu",
        source=str(path),
    )
    data = tomllib.loads(paths[0].read_text())
    assert data["parallel"]["recompute_modules"] == ["moe_act", "layernorm"]
    scn = mfusim.load_scenario(paths[0])
    assert scn.parallel.recomputed_modules == ("moe_act", "layernorm")
    assert mfusim.simulate(scn).mfu == pytest.approx(rows[0]["mfu"], rel=1e-9)
