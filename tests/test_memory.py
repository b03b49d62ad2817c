"""Memory model (issue 5): Korthikanti et al. 2022 Table 2, in-flight micro-batches, model
state per ZeRO stage, and configurations known to fit (or not) in 80 GB."""

from __future__ import annotations

from dataclasses import replace

import pytest

from simulator import flops
from simulator.loading import load_scenario, model_preset
from simulator.memory import (
    inflight_layer_microbatches,
    korthikanti_per_layer_bytes,
    layer_activation_bytes,
    memory_footprint,
    stage_layer_counts,
)
from simulator.resources import data_dir
from simulator.specs import KernelOptions, ModelSpec, ParallelConfig, Scenario

GIB = 2**30


@pytest.fixture(scope="module")
def gpt3_scn() -> Scenario:
    return load_scenario(data_dir("scenarios") / "gpt3-175b-1024-a100.toml")


def with_par(
    scn: Scenario, model: ModelSpec | None = None, num_gpus: int | None = None, **kw: object
) -> Scenario:
    par = ParallelConfig(**kw)  # type: ignore[arg-type]
    return replace(scn, model=model or scn.model, parallel=par, num_gpus=num_gpus or par.num_gpus)


# ----------------------------------------------------------------------------- Table 2
GPT3 = dict(s=2048, b=1, h=12288, a=96)


def test_gpt3_attention_term_is_80() -> None:
    # Korthikanti §4.1: for GPT-3 175B, 5as/h = 80 > 34 — the s² term dominates.
    s, h, a = GPT3["s"], GPT3["h"], GPT3["a"]
    assert 5 * a * s / h == 80
    # selective recompute then keeps 34 of 114: a 70% saving (the paper's "70%")
    no_par = korthikanti_per_layer_bytes(**GPT3)
    selective = korthikanti_per_layer_bytes(**GPT3, recompute="selective")
    assert 1 - selective / no_par == pytest.approx(0.70, abs=0.005)


@pytest.mark.parametrize(
    ("t", "sp", "recompute", "coefficient"),
    [
        # Table 2, in units of s·b·h bytes, for GPT-3 175B (5as/h = 80), t = 8
        (1, False, "none", 34 + 80),
        (8, False, "none", 10 + 24 / 8 + 80 / 8),
        (8, True, "none", (34 + 80) / 8),
        (8, False, "selective", 10 + 24 / 8),
        (8, True, "selective", 34 / 8),
        (8, False, "full", 2),
        (8, True, "full", 2 / 8),
    ],
)
def test_table2_rows(t: int, sp: bool, recompute: str, coefficient: float) -> None:
    s, b, h = GPT3["s"], GPT3["b"], GPT3["h"]
    expected = coefficient * s * b * h
    assert korthikanti_per_layer_bytes(
        **GPT3, t=t, sequence_parallel=sp, recompute=recompute
    ) == pytest.approx(expected)
    m = model_preset("gpt3-175b")
    got = layer_activation_bytes(m, b, tp=t, sequence_parallel=sp, recompute=recompute, flash_attention=False)
    assert got.stored == pytest.approx(expected)


def test_table2_split_into_replicated_sharded_and_core() -> None:
    m = model_preset("gpt3-175b")
    s, h, a = m.seq_len, m.hidden, m.heads
    got = layer_activation_bytes(m, 1, tp=8, flash_attention=False)
    assert got.replicated == pytest.approx(10 * s * h)
    assert got.sharded == pytest.approx(24 * s * h / 8)
    assert got.attention_core == pytest.approx(5 * a * s * s / 8)


def test_flash_attention_removes_the_s2_term() -> None:
    m = model_preset("gpt3-175b")
    flash = layer_activation_bytes(m, 1, tp=8, sequence_parallel=True, flash_attention=True)
    selective = layer_activation_bytes(
        m, 1, tp=8, sequence_parallel=True, recompute="selective", flash_attention=False
    )
    # what is left of the core is the fp32 log-sum-exp, 4 bytes per head and token
    assert flash.stored - selective.stored == pytest.approx(4 * (m.heads / 8) * m.seq_len)


def test_gqa_and_gated_mlp_adjust_the_34() -> None:
    mha = ModelSpec(name="mha", layers=2, hidden=4096, heads=32, vocab=32000, seq_len=4096, ffn_hidden=11008)
    gqa = replace(mha, kv_heads=8)
    gated = replace(mha, gated_mlp=True)
    s, h, f = mha.seq_len, mha.hidden, mha.ffn
    base = layer_activation_bytes(mha, 1, flash_attention=False).stored
    # K and V shrink from 2h to 2·kv_dim each
    assert base - layer_activation_bytes(gqa, 1, flash_attention=False).stored == pytest.approx(
        4 * s * (h - gqa.kv_dim)
    )
    # SwiGLU stores one more f-wide 16-bit tensor (gate, up, product vs GeLU in, out)
    assert layer_activation_bytes(gated, 1, flash_attention=False).stored - base == pytest.approx(2 * s * f)


def test_fp8_and_context_parallel_shrink_activations() -> None:
    m = model_preset("llama3-70b")
    bf16 = layer_activation_bytes(m, 1, tp=8, sequence_parallel=True)
    fp8 = layer_activation_bytes(m, 1, tp=8, sequence_parallel=True, fp8=True)
    cp2 = layer_activation_bytes(m, 1, tp=8, cp=2, sequence_parallel=True)
    assert fp8.stored < bf16.stored
    assert cp2.stored == pytest.approx(bf16.stored / 2)


# ----------------------------------------------------------------------------- schedules
def test_first_stage_holds_the_paper_total(gpt3_scn: Scenario) -> None:
    # Korthikanti eq. (5): under 1F1B the first stage stores L layers' worth of one micro-batch
    # (L/p layers × p micro-batches), i.e. s·b·h·L/t·(34 + 5as/h) with TP + SP.
    m = gpt3_scn.model
    par = ParallelConfig(tp=8, pp=16, dp=8, global_batch=1536, sequence_parallel=True)
    counts = stage_layer_counts(m.layers, par.pp)
    assert inflight_layer_microbatches(par, 0, counts[0]) == m.layers
    per_layer = layer_activation_bytes(m, 1, tp=8, sequence_parallel=True, flash_attention=False).stored
    total = inflight_layer_microbatches(par, 0, counts[0]) * per_layer
    assert total == pytest.approx(m.seq_len * m.hidden * m.layers / 8 * (34 + 80))
    # stage i holds p - i micro-batches
    assert [inflight_layer_microbatches(par, i, counts[i]) / counts[i] for i in range(16)] == list(
        range(16, 0, -1)
    )


def test_interleaved_first_stage_factor() -> None:
    # Korthikanti §4.2.3: the first stage holds L·(1 + (p−1)/(p·v)) layer-micro-batches
    L, p, v = 96, 8, 3
    par = ParallelConfig(tp=8, pp=p, dp=16, vp=v, global_batch=1536, schedule="interleaved")
    assert inflight_layer_microbatches(par, 0, L // p) == pytest.approx(L * (1 + (p - 1) / (p * v)))


def test_gpipe_holds_all_microbatches() -> None:
    par = ParallelConfig(pp=4, dp=2, global_batch=64, schedule="gpipe")
    assert inflight_layer_microbatches(par, 3, 6) == 32 * 6


def test_uneven_layers_go_to_the_first_stages() -> None:
    assert stage_layer_counts(10, 4) == [3, 3, 2, 2]


# ----------------------------------------------------------------------------- model state
def _tiny(scn: Scenario, zero: int, dp: int = 8) -> tuple[Scenario, float]:
    m = ModelSpec(name="tiny", layers=4, hidden=1024, heads=16, vocab=32000, seq_len=512)
    return with_par(scn, model=m, dp=dp, zero=zero, global_batch=dp), float(flops.total_params(m))


# Bytes of model state per parameter, as published (not from memory.py's constants), d = 8:
# Megatron-LM docs/source/distrib_optimizer.md, bf16 params with fp32 main grads: 18 without the
# distributed optimizer, 6 + 12/d with it (ZeRO-1); sharding the fp32 grads too (ZeRO-2):
# 2 + 16/d; everything sharded (ZeRO-3 / FSDP FULL_SHARD): 18/d (Rajbhandari et al. 2020, §5).
@pytest.mark.parametrize(
    ("zero", "per_param"),
    [(0, 18.0), (1, 6.0 + 12.0 / 8), (2, 2.0 + 16.0 / 8), (3, 18.0 / 8)],
)
def test_model_state_per_zero_stage(gpt3_scn: Scenario, zero: int, per_param: float) -> None:
    scn, params = _tiny(gpt3_scn, zero)
    parts = memory_footprint(scn).parts_bytes
    state = parts["weights"] + parts["grads"] + parts["optimizer"]
    # norms are counted once per layer as in flops.layer_params; biases ignored in both
    assert state == pytest.approx(per_param * params, rel=1e-3)


def test_distributed_optimizer_shards_over_dp_times_cp(gpt3_scn: Scenario) -> None:
    m = ModelSpec(name="tiny", layers=4, hidden=1024, heads=16, vocab=32000, seq_len=512)
    a = memory_footprint(with_par(gpt3_scn, model=m, dp=8, zero=1, global_batch=8)).parts_bytes["optimizer"]
    b = memory_footprint(with_par(gpt3_scn, model=m, dp=4, cp=2, zero=1, global_batch=8)).parts_bytes[
        "optimizer"
    ]
    assert a == pytest.approx(b)


def test_moe_experts_are_sharded_over_ep(gpt3_scn: Scenario) -> None:
    m = model_preset("mixtral-8x7b")
    one = memory_footprint(with_par(gpt3_scn, model=m, tp=2, dp=4, ep=1, global_batch=8, zero=1))
    eight = memory_footprint(with_par(gpt3_scn, model=m, tp=2, dp=4, ep=8, global_batch=8, zero=1))
    assert eight.parts_bytes["weights"] < 0.3 * one.parts_bytes["weights"]


# ----------------------------------------------------------------------------- sanity on 80 GB
def test_gpt3_175b_megatron_config_fits(gpt3_scn: Scenario) -> None:
    # the shipped scenario: tp 8, pp 16, dp 8, SP + selective recompute, distributed optimizer
    mem = memory_footprint(gpt3_scn)
    assert mem.fits
    assert mem.capacity_bytes == pytest.approx(85_100_068_864, abs=0.01 * GIB)  # CUDA-reported
    # first stage is the most loaded one (embeddings + p in-flight micro-batches)
    assert max(mem.stage_peak_bytes) == mem.stage_peak_bytes[0]
    assert set(mem.parts_bytes) >= {"weights", "grads", "optimizer", "activations", "buffers", "reserved"}


def test_gpt3_175b_without_sp_or_recompute_does_not_fit(gpt3_scn: Scenario) -> None:
    # Korthikanti Fig. 1: the 175B model (t = 8, p = 8) needs more than 80 GB without SP and
    # selective recompute, and fits with them.
    kw = dict(tp=8, pp=8, dp=16, global_batch=1536)
    base = replace(with_par(gpt3_scn, **kw), kernels=KernelOptions(flash_attention=False))
    assert not memory_footprint(base).fits
    present = replace(base, parallel=replace(base.parallel, sequence_parallel=True, recompute="selective"))
    assert memory_footprint(present).fits


def test_llama3_70b_on_one_node_without_zero_does_not_fit(gpt3_scn: Scenario) -> None:
    scn = with_par(
        gpt3_scn,
        model=model_preset("llama3-70b"),
        tp=8,
        dp=1,
        global_batch=8,
        sequence_parallel=True,
        recompute="full",
    )
    mem = memory_footprint(scn)
    assert not mem.fits
    # 70B / 8 × 18 B of model state alone exceeds 80 GB
    assert mem.parts_bytes["weights"] + mem.parts_bytes["grads"] + mem.parts_bytes["optimizer"] > 80 * GIB


def test_7b_zero3_on_64_gpus_fits(gpt3_scn: Scenario) -> None:
    scn = with_par(gpt3_scn, model=model_preset("llama2-7b"), dp=64, zero=3, global_batch=64)
    mem = memory_footprint(scn)
    assert mem.fits
    assert mem.parts_bytes["optimizer"] < 2 * GIB  # 12 B × 6.7e9 / 64


def test_pure_data_parallel_175b_does_not_fit(gpt3_scn: Scenario) -> None:
    assert not memory_footprint(with_par(gpt3_scn, dp=1024, global_batch=1024, zero=1)).fits
