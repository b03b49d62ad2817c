"""One Megatron-Core + Transformer Engine layer, op by op (issue 12, teops; program.py
TE_LAYER_NOTE, TE_FP8_NORM_NOTE, EMBEDDING_GRAD_NOTE): the memory-bound kernels the default stack
runs, in closed form against the source's bytes, and the older stacks' generic op table kept."""

from __future__ import annotations

from dataclasses import replace

import pytest

from simulator import program as P
from simulator.comm import default_comm_model
from simulator.costs import memory_op_time_s
from simulator.loading import scenario_from_dict
from simulator.memory import grad_reduce_bytes_per_param

GPT = {
    "name": "t",
    "layers": 2,
    "hidden": 2048,
    "heads": 16,
    "vocab": 131072,
    "seq_len": 4096,
    "position_embeddings": True,
    "tied_embeddings": True,
}
LLAMA = {
    "name": "l",
    "layers": 2,
    "hidden": 4096,
    "heads": 32,
    "kv_heads": 8,
    "ffn_hidden": 14336,
    "gated_mlp": True,
    "position_embeddings": False,
    "tied_embeddings": False,
    "vocab": 128256,
    "seq_len": 4096,
}


def _scn(model: dict, dtype: str = "bf16", stack: str = "", **parallel):
    kernels = {"stack": stack} if stack else {}
    topology = "dgx-a100" if stack == "megatron-2021" else "dgx-h100"  # where each stack is fitted
    return scenario_from_dict(
        {
            "model": model,
            "cluster": {"topology": topology, "num_gpus": 8},
            "parallel": {"micro_batch": 1, "global_batch": 8, **parallel},
            "precision": {"dtype": dtype},
            "kernels": kernels,
        }
    )


def _coster(scn):
    c = P._Coster(scn, default_comm_model(scn))
    c.device, _ = P.power_limited_device(c)
    return c


def _layer(scn):
    c = _coster(scn)
    fwd, b_in, b_w = c.layer(False)[:3]
    return c, fwd.parts, b_in.parts, b_w.parts


def _named(parts, name: str) -> list:
    return [s for s in parts if s.name == name]


def test_te_norm_backward_is_three_passes_in_two_kernels() -> None:
    """ln_bwd_tuned_kernel reads dz and x and writes dx; ln_bwd_finalize reduces dgamma."""
    c, fwd, b_in, _ = _layer(_scn(GPT))
    d = c.device
    T, h, a = 4096, 2048, d.activation_bytes
    for name in ("input norm", "post-attn norm"):
        (f,) = _named(fwd, name)
        (b,) = _named(b_in, name + " bwd")
        assert f.message_bytes == 2 * T * h * a
        assert b.message_bytes == 3 * T * h * a
        assert b.duration_s == pytest.approx(memory_op_time_s(d, 3 * T * h * a, 2), rel=1e-12)


@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_residual_is_bias_dropout_add_and_a_fork_add(dropout: float) -> None:
    """Forward: x + residual -> out (3 passes) and the bool mask with dropout; backward: the fork's
    autograd add (3 passes) and, with dropout, grad x mask (2.5 passes) in a kernel of its own."""
    c, fwd, b_in, _ = _layer(_scn({**GPT, "dropout": dropout}))
    d = c.device
    E, a = 4096 * 2048, d.activation_bytes
    f, b = _named(fwd, "residual add"), _named(b_in, "residual add bwd")
    assert len(f) == len(b) == 2
    fwd_b = 3 * E * a + (E if dropout else 0)
    bwd_b = 3 * E * a + ((2 * a + 1) * E if dropout else 0)
    for s in f:
        assert s.message_bytes == fwd_b
        assert s.duration_s == pytest.approx(memory_op_time_s(d, fwd_b, 1), rel=1e-12)
    for s in b:
        assert s.message_bytes == bwd_b
        assert s.duration_s == pytest.approx(memory_op_time_s(d, bwd_b, 2 if dropout else 1), rel=1e-12)
    # never more than the generic table's 6 passes
    assert bwd_b < 6 * E * a


def test_gelu_backward_reads_grad_and_input_writes_one() -> None:
    c, fwd, b_in, _ = _layer(_scn(GPT))
    (f,), (b,) = _named(fwd, "gelu"), _named(b_in, "gelu bwd")
    assert b.message_bytes == pytest.approx(1.5 * f.message_bytes, rel=1e-12)
    assert b.duration_s == pytest.approx(memory_op_time_s(c.device, b.message_bytes, 1), rel=1e-12)


def test_gqa_query_copy_and_grad_concat() -> None:
    """np/ng > 1: the query reshape copies q, the split's backward concatenates q + 2 kv; MHA's
    packed layout needs neither."""
    c, fwd, b_in, _ = _layer(_scn(LLAMA))
    a = c.device.activation_bytes
    T, q, kv = 4096, 4096, 1024
    (f,), (b,) = _named(fwd, "gqa query copy"), _named(b_in, "gqa qkv grad concat")
    assert f.message_bytes == 2 * T * q * a
    assert b.message_bytes == 2 * T * (q + 2 * kv) * a
    _, fwd_mha, b_mha, _ = _layer(_scn({**LLAMA, "kv_heads": 32}))
    assert not _named(fwd_mha, "gqa query copy") and not _named(b_mha, "gqa qkv grad concat")
    # fused RoPE backward: one read and one write, as its forward
    (r,), (rb,) = _named(fwd, "rope"), _named(b_in, "rope bwd")
    assert rb.message_bytes == r.message_bytes == 2 * T * (q + kv) * a


def test_fp8_norm_writes_fp8_and_its_gemm_input_is_only_transposed() -> None:
    """Delayed-scaling FP8 on Hopper: LayerNormLinear's norm reads 2 and writes 1 byte per element;
    no cast for qkv/fc1, a 1 + 1 byte transpose in the backward; the other GEMM inputs keep TE's
    4-byte cast-transpose."""
    c, fwd, b_in, b_w = _layer(_scn(GPT, dtype="fp8"))
    T, h, a = 4096, 2048, c.device.activation_bytes
    (n,) = _named(fwd, "input norm (fp8 out)")
    (nb,) = _named(b_in, "input norm (fp8 out) bwd")
    assert n.message_bytes == T * h * (a + 1)
    assert nb.message_bytes == pytest.approx(3 * T * h * a, rel=1e-12)
    assert [s.message_bytes for s in _named(b_w, "fp8 transpose (norm out)")] == [2.0 * T * h] * 2
    ffn = 4 * h
    assert sorted(s.message_bytes for s in _named(fwd, "fp8 cast")) == [4.0 * T * h, 4.0 * T * ffn]
    # current scaling needs the amax first: the norm writes 16-bit and the cast stays
    cur = _scn(GPT, dtype="fp8")
    cur = replace(cur, fp8_recipe="current")
    _, fwd_c, _, b_w_c = _layer(cur)
    assert _named(fwd_c, "input norm") and not _named(b_w_c, "fp8 transpose (norm out)")
    assert len(_named(fwd_c, "fp8 cast")) == 4


def _emb(scn) -> dict:
    return {s.name: s for s in _coster(scn).embedding()[1].parts}


@pytest.mark.parametrize("grad_reduce", ["bf16", "fp32"])
def test_embedding_table_grads_tied_on_one_stage(grad_reduce: str) -> None:
    """pp = 1, tied: zero-filled 16-bit table, the output layer's zeros dummy and the autograd sum
    (2 + 6 bytes per word-table element), and the DDP hook's main_grad add over both tables."""
    scn = _scn(GPT)
    scn = replace(scn, kernels=replace(scn.kernels, grad_reduce_dtype=grad_reduce))
    emb = _emb(scn)
    a, V, h, s = 2, GPT["vocab"], GPT["hidden"], GPT["seq_len"]
    tables = (V + s) * h  # word and learned position tables
    assert emb["embedding grad table zero-fill"].message_bytes == a * tables
    assert emb["tied embedding grad zeros + sum"].message_bytes == (a + 6) * V * h
    main = grad_reduce_bytes_per_param("bf16", grad_reduce)
    assert main == (2 if grad_reduce == "bf16" else 4)
    assert emb["embedding main_grad add (ddp hook)"].message_bytes == (2 * main + a) * tables


def test_embedding_table_grads_untied_and_other_stacks() -> None:
    emb = _emb(_scn(LLAMA, tp=4))
    V, h = LLAMA["vocab"] // 4, LLAMA["hidden"]
    assert emb["embedding grad table zero-fill"].message_bytes == 2 * V * h  # vocab-parallel shard
    assert "tied embedding grad zeros + sum" not in emb
    # tied but split over pipeline stages: the two gradients live on different stages
    assert "tied embedding grad zeros + sum" not in _emb(_scn(GPT, pp=2))
    # the 2021 Megatron-LM and composer stacks keep their own tables (not Megatron-Core's DDP)
    for stack in ("megatron-2021", "composer-fsdp"):
        assert set(_emb(_scn(GPT, stack=stack))) == {"embedding grad"}


@pytest.mark.parametrize("stack", ["megatron-2021", "composer-fsdp"])
def test_other_stacks_keep_the_generic_op_table(stack: str) -> None:
    c, fwd, b_in, _ = _layer(_scn(LLAMA, stack=stack))
    (n,), (nb,) = _named(fwd, "input norm"), _named(b_in, "input norm bwd")
    assert nb.message_bytes == 2 * n.message_bytes
    a, elems = c.device.activation_bytes, 4096 * 4096
    for f, b in zip(_named(fwd, "residual add"), _named(b_in, "residual add bwd"), strict=True):
        if stack == "megatron-2021":
            # Megatron-LM 2021's fused bias_dropout_add (dropout 0.1 here): the sum and its 1-byte
            # mask forward; backward, the fork's gradient sum and dropout's grad x mask
            assert f.message_bytes == 3 * elems * a + elems
            assert b.message_bytes == 3 * elems * a + (2 * a + 1) * elems
        else:  # torch's own dropout kernels beside the add: the generic charge
            assert b.message_bytes == 2 * f.message_bytes == 6 * elems * a
    assert not _named(fwd, "gqa query copy")


def test_te_op_table_moves_a_layer_by_little() -> None:
    """Against the generic op table (composer-fsdp's, same GPU and kernels) the audited TE layer
    differs by its memory-bound ops only: < 3% of the layer either way. Both run on the TE
    scenario's device, so the stacks' fitted clocks (a residual, not the op table) cancel."""
    for model in (GPT, LLAMA):
        te = _layer(_scn(model))
        c = P._Coster(_scn(model, stack="composer-fsdp"), default_comm_model(_scn(model)))
        c.device = te[0].device
        old = [p.parts for p in c.layer(False)[:3]]
        t_te = sum(s.duration_s for parts in te[1:] for s in parts)
        t_old = sum(s.duration_s for parts in old for s in parts)
        assert abs(t_te / t_old - 1) < 0.03


def test_ddp_hook_adds_the_gradients_no_gemm_accumulated() -> None:
    """Megatron-Core DDP: one main_grad.add_ per norm weight (and per bias / router weight) every
    micro-batch; TE's GEMM weights accumulate in the GEMM and are not added again."""
    for model, extra in ((GPT, []), ({**GPT, "linear_bias": True}, [3 * 2048, 2048, 4 * 2048, 2048])):
        c, _, _, b_w = _layer(_scn(model))
        (hook,) = _named(b_w, "norm/bias main_grad add (ddp hook)")
        sizes = [2048, 2048, *extra]
        main = grad_reduce_bytes_per_param("bf16", c.scn.kernels.grad_reduce_dtype)
        assert hook.message_bytes == (2 * main + 2) * sum(sizes)
        assert hook.duration_s == pytest.approx(
            memory_op_time_s(c.device, hook.message_bytes, kernels=len(sizes)), rel=1e-12
        )
    _, _, _, b_w_old = _layer(_scn(GPT, stack="composer-fsdp"))
    assert not _named(b_w_old, "norm/bias main_grad add (ddp hook)")
