"""Megatron-LM 2021-22 (stack "megatron-2021") op by op: the unfused core attention
(kernels.UNFUSED_ATTENTION_NOTE, megatron/model/transformer.py@d898a8991d) and the local DDP's
per-micro-batch main_grad add (program.MAIN_GRAD_HOOK_NOTE, megatron/model/distributed.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

import simulator.kernels as K
from simulator.loading import gpu_by_name, scenario_from_dict
from simulator.program import (
    TIED_GRAD_SUM_BYTES_PER_PARAM,
    build_program,
    main_grad_hook_bytes_per_param,
)

HOOK = "main_grad accumulate (ddp hook)"


def _memory_s(gpu, p, nbytes: float, kernels: int) -> float:
    return nbytes / (gpu.hbm_bandwidth_bytes_per_s * p.memory_bw_fraction) + kernels * p.memory_latency_s


@pytest.mark.parametrize("causal", [True, False])
def test_unfused_attention_is_its_gemms_plus_the_source_bytes(causal: bool) -> None:
    """Forward: scores GEMM, values GEMM, softmax (read up to the diagonal when causal, write all),
    dropout (read 2, write 2 + a 1-byte mask), the context's contiguous copy (2 + 2 per output
    element): 3 memory kernels. Backward: one scores-shaped and three values-shaped GEMMs, dropout
    backward (2 + 1 read, 2 write) and softmax backward (two reads up to the diagonal, one write)."""
    gpu = gpu_by_name("a100-80gb")
    p = K.kernel_params(gpu)
    b, heads, s, hd = 4, 8, 2048, 96
    count = b * heads
    scores = count * s * s
    t_sc = K.gemm_time_s(gpu, "bf16", s, s, hd, count, p)
    t_va = K.gemm_time_s(gpu, "bf16", s, hd, s, count, p)
    read = 0.5 if causal else 1.0
    kw = dict(batch=b, seq=s, heads=heads, head_dim=hd, causal=causal, impl="unfused", params=p)
    fwd = K.attention_time_s(gpu, pass_="fwd", **kw)
    bwd = K.attention_time_s(gpu, pass_="bwd", **kw)
    fwd_bytes = scores * (2 * read + 2 + 5) + count * s * hd * 4
    bwd_bytes = scores * (4 * read + 2 + 5)
    assert fwd == pytest.approx(t_sc + t_va + _memory_s(gpu, p, fwd_bytes, 3), rel=1e-12)
    assert bwd == pytest.approx(t_sc + 3 * t_va + _memory_s(gpu, p, bwd_bytes, 2), rel=1e-12)


def test_causal_unfused_attention_moves_fewer_bytes_than_padding_masked() -> None:
    """The upper-triangular softmax kernel loads only the scores up to the diagonal; the padding-mask
    kernel loads every score: the causal passes are strictly cheaper, the GEMMs the same."""
    gpu = gpu_by_name("a100-80gb")
    kw = dict(batch=2, seq=2048, heads=16, head_dim=128, impl="unfused")
    for pass_ in ("fwd", "bwd"):
        causal = K.attention_time_s(gpu, causal=True, pass_=pass_, **kw)
        full = K.attention_time_s(gpu, causal=False, pass_=pass_, **kw)
        assert causal < full


def _scn(stack: str, pp: int = 1, tied: bool = True, global_batch: int = 8, dtype: str = "fp16"):
    return scenario_from_dict(
        {
            "model": {
                "name": "t",
                "layers": 8,
                "hidden": 4096,
                "heads": 32,
                "vocab": 51200,
                "seq_len": 2048,
                "tied_embeddings": tied,
                "position_embeddings": True,
            },
            "cluster": {"topology": "dgx-a100", "num_gpus": 8 * pp},
            "parallel": {"tp": 8, "pp": pp, "micro_batch": 1, "global_batch": global_batch},
            "precision": {"dtype": dtype},
            "kernels": {"stack": stack, "attention": "unfused"} if stack else {"attention": "unfused"},
        }
    )


def _hook(chunk):
    return [p for p in chunk.backward_weight.segments if p.name == HOOK]


def test_megatron_2021_adds_every_parameter_gradient_to_main_grad_each_micro_batch() -> None:
    """read main_grad (fp16: 2) + read the fresh 16-bit grad (2) + write main_grad (2) per parameter
    the stage holds, in each micro-batch's backward; the tied embedding's two gradients are summed
    first (2 + 2 read, 2 write) when the embedding and the output layer share the stage."""
    scn = _scn("megatron-2021")
    assert main_grad_hook_bytes_per_param(scn) == 6.0
    chunk = build_program(scn).stages[0].chunks[0]
    (seg,) = _hook(chunk)
    m = scn.model
    embed = m.vocab * m.hidden / 8
    expected = chunk.params_local * 6.0 + TIED_GRAD_SUM_BYTES_PER_PARAM * embed
    assert seg.message_bytes == pytest.approx(expected, rel=1e-12)


def test_fp32_main_grads_move_more_bytes_in_the_hook() -> None:
    fp32 = scenario_from_dict(
        {
            "model": {"name": "t", "layers": 8, "hidden": 4096, "heads": 32, "vocab": 51200, "seq_len": 2048},
            "cluster": {"topology": "dgx-a100", "num_gpus": 8},
            "parallel": {"tp": 8, "micro_batch": 1, "global_batch": 8},
            "precision": {"dtype": "bf16"},
            "kernels": {"stack": "megatron-2021", "attention": "unfused", "grad_reduce_dtype": "fp32"},
        }
    )
    assert main_grad_hook_bytes_per_param(fp32) == 4 + 2 + 4


def test_stacks_whose_gemms_accumulate_have_no_hook() -> None:
    scn = _scn("")  # today's Megatron-Core (the GPU table): gradient accumulation fusion
    assert main_grad_hook_bytes_per_param(scn) == 0.0
    assert not _hook(build_program(scn).stages[0].chunks[0])


def test_the_hook_runs_on_every_pipeline_stage_and_no_tied_sum_apart() -> None:
    """With pp > 1 the embedding and the output layer sit on different stages: each adds its own
    copy's gradient, and no stage sums two gradients of one weight."""
    scn = _scn("megatron-2021", pp=2, global_batch=16)
    prog = build_program(scn)
    for stage in prog.stages:
        (seg,) = _hook(stage.chunks[0])
        assert seg.message_bytes == pytest.approx(stage.chunks[0].params_local * 6.0, rel=1e-12)


def _biased(stack: str, sp: bool):
    return scenario_from_dict(
        {
            "model": {
                "name": "t",
                "layers": 4,
                "hidden": 4096,
                "heads": 32,
                "vocab": 51200,
                "seq_len": 2048,
                "linear_bias": True,
            },
            "cluster": {"topology": "dgx-a100", "num_gpus": 8},
            "parallel": {"tp": 8, "micro_batch": 2, "global_batch": 2, "sequence_parallel": sp},
            "precision": {"dtype": "fp16"},
            "kernels": {
                "attention": "unfused",
                "bias_grad": "separate",
                **({"stack": stack} if stack else {}),
            },
        }
    )


def _layer_segments(scn):
    from simulator.network.model import default_comm_model
    from simulator.program import _Coster

    fwd, b_in, b_w = _Coster(scn, default_comm_model(scn)).layer(False)[:3]
    return fwd.parts, b_in.parts, b_w.parts


def test_megatron_2021_adds_the_qkv_bias_in_a_kernel_of_its_own() -> None:
    """mpu/layers.py:233-235@d898a8991d: one read and one write of the qkv output, forward only
    (the add's input gradient is the output gradient; the bias' is the reduction)."""
    T, qkv = 2 * 2048, 3 * 4096 // 8
    fwd, b_in, _ = _layer_segments(_biased("megatron-2021", sp=True))
    (seg,) = [p for p in fwd if p.name == "qkv bias add (unfused)"]
    assert seg.message_bytes == 2 * T * qkv * 2
    assert not [p for p in b_in if p.name.startswith("qkv bias add")]
    fwd0, _, _ = _layer_segments(_biased("", sp=True))
    assert not [p for p in fwd0 if p.name.startswith("qkv bias add")]


def test_row_parallel_bias_grads_reduce_over_the_sequence_parallel_shard() -> None:
    """The attn-out and fc2 biases are added after the reduce-scatter (bias_dropout_add on the
    [s/tp, b, h] residual): with sequence parallelism their gradients reduce over T/tp tokens."""
    T, tp, h = 2 * 2048, 8, 4096
    col = 3 * h // tp + 4 * h // tp
    for sp, row_tokens in ((True, T // tp), (False, T)):
        _, _, b_w = _layer_segments(_biased("megatron-2021", sp=sp))
        (seg,) = [p for p in b_w if p.name == "bias grads (reduction)"]
        assert seg.message_bytes == (T * col + row_tokens * 2 * h) * 2


def test_narayanan21_rows_have_linear_biases_and_separate_bias_grads() -> None:
    from simulator.validate.cases import Case, build_case
    from simulator.validate.runs import read_runs_csv

    runs = [
        r
        for r in read_runs_csv(
            Path(__file__).resolve().parents[1] / "scenarios/published/calibration_runs.csv"
        )
        if r.run_id.startswith("narayanan21_t1")
    ]
    assert runs
    for run in runs:
        case = build_case(run)
        assert isinstance(case, Case)
        assert case.scenario["model"]["linear_bias"] is True
        assert case.scenario["kernels"]["bias_grad"] == "separate"
