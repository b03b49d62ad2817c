"""FP8 training keeps the attention output twice (issue 13): 16-bit by the fused attention core
(its backward needs O) and as the output projection's FP8 input cast, 2 + 1 bytes per element,
unless Megatron-Core sets the projection to save its original 16-bit input (non-delayed recipes
from Megatron-Core 0.15: the simulator's mxfp8 and nvfp4). Hand counts of one layer per token."""

from __future__ import annotations

from typing import Any

import pytest

from simulator.loading import scenario_from_dict
from simulator.memory import layer_activation_bytes, scenario_layer_activations
from simulator.specs import ModelSpec

# a Llama-like layer: GQA (8 KV heads of 128), SwiGLU, no dropout, head_dim·heads = hidden
M = ModelSpec(
    name="llama-like",
    layers=4,
    hidden=4096,
    heads=32,
    kv_heads=8,
    vocab=32000,
    seq_len=4096,
    ffn_hidden=14336,
    gated_mlp=True,
    dropout=0.0,
)
H, Q, KV, F, A, S = 4096, 4096, 1024, 14336, 32, 4096


def _per_token(**kw: Any) -> float:
    return layer_activation_bytes(M, 1, **kw).stored / S


def test_bf16_layer_by_hand() -> None:
    """Korthikanti §4.1 generalized: norm inputs 2·2h, QKV and MLP inputs 2h each, Q 2q, K and V
    2kv each, the attention output 2q (one tensor: the core's O is the projection's input),
    gate/up/product 3·2f, FlashAttention's fp32 log-sum-exp 4a."""
    expected = 2 * 2 * H + 2 * H + 2 * H + 2 * Q + 2 * 2 * KV + 2 * Q + 3 * 2 * F + 4 * A
    assert _per_token() == pytest.approx(expected)


def test_fp8_layer_by_hand() -> None:
    """FP8 (per-tensor, Megatron-Core's default delayed recipe): the four linear inputs as 1-byte
    casts, and the attention output 16-bit (kept by the fused core) + 1 (the projection's cast)."""
    expected = 2 * 2 * H + H + H + 2 * Q + 2 * 2 * KV + (2 + 1) * Q + (2 * 2 + 1) * F + 4 * A
    assert _per_token(fp8=True) == pytest.approx(expected)


def test_fp8_attention_output_is_2_plus_1_bytes() -> None:
    fp8 = _per_token(fp8=True)
    # the projection keeping its 16-bit input instead (Megatron-Core set_save_original_input):
    # one 16-bit tensor, the FP8 copy gone
    assert fp8 - _per_token(fp8=True, proj_saves_original_input=True) == pytest.approx(1 * Q)
    # against 16-bit training the attention output costs 1 byte more per element, the other three
    # linear inputs (QKV, MLP in, fc2 in) 1 byte less
    assert _per_token() - fp8 == pytest.approx(H + H + F - Q)


def test_without_flash_attention_only_the_projection_copy_stays() -> None:
    """The unfused core's backward needs its softmax output and V, not its output: only the
    projection's FP8 cast of the attention output is kept (the paper's 2h -> 1 byte)."""
    fused = _per_token(fp8=True, flash_attention=False)
    bf16 = _per_token(flash_attention=False)
    assert bf16 - fused == pytest.approx(H + H + F + Q)


def test_core_attention_recompute_drops_the_core_copy() -> None:
    """Recomputing the core (Megatron's checkpointed core attention keeps only its inputs) frees
    its 16-bit output in FP8: the projection's 1-byte cast stays; in 16-bit the tensor stays."""
    none = _per_token(fp8=True)
    selective = _per_token(fp8=True, recompute="selective", recompute_modules=("core_attn",))
    assert none - selective == pytest.approx(4 * A + 2 * Q)
    bf16_none = _per_token()
    bf16_selective = _per_token(recompute="selective", recompute_modules=("core_attn",))
    assert bf16_none - bf16_selective == pytest.approx(4 * A)


def test_mla_attention_output_is_heads_times_v_head_dim() -> None:
    """MLA (DeepSeek-V3): the attention output is heads·v_head_dim wide, 2 + 1 bytes in FP8."""
    from simulator.loading import model_preset

    m = model_preset("deepseek-v3")
    assert m.mla is not None and m.mla.v_head_dim == 128  # DeepSeek-V3 config.json v_head_dim
    s = m.seq_len
    v = m.heads * m.mla.v_head_dim
    fp8 = layer_activation_bytes(m, 1, fp8=True).stored
    original = layer_activation_bytes(m, 1, fp8=True, proj_saves_original_input=True).stored
    assert fp8 - original == pytest.approx(1 * v * s)


@pytest.mark.parametrize(("dtype", "extra_per_q"), [("bf16", 0), ("fp8", 1), ("mxfp8", 0), ("nvfp4", 0)])
def test_scenario_dtypes(dtype: str, extra_per_q: int) -> None:
    """Per dtype, the attention output beyond one 16-bit copy: fp8 (per-tensor, delayed) keeps
    the projection's FP8 cast too; MXFP8 and NVFP4 (Megatron-Core >= 0.15, every Megatron-Bridge
    container that runs them) save the original input."""
    data: dict[str, Any] = {
        "model": {"preset": "llama3-8b", "seq_len": 4096, "layers": 4},
        "cluster": {"topology": "dgx-b200", "num_gpus": 8},
        "parallel": {"micro_batch": 1, "global_batch": 8},
        "precision": {"dtype": dtype},
    }
    scn = scenario_from_dict(data)
    m = scn.model
    got = scenario_layer_activations(scn, moe=False).stored
    mm = 2 if dtype == "bf16" else 1
    base = layer_activation_bytes(m, 1, fp8=dtype != "bf16", proj_saves_original_input=True).stored
    assert base == pytest.approx(
        m.seq_len * (2 * 2 * m.hidden + 2 * mm * m.hidden + 2 * m.q_dim + 4 * m.kv_dim + 2 * m.q_dim)
        + m.seq_len * ((2 * 2 + mm) * m.ffn + 4 * m.heads)
        + (0 if m.dropout == 0 else 2 * m.hidden * m.seq_len)
    )
    assert got - base == pytest.approx(extra_per_q * m.q_dim * m.seq_len)


@pytest.mark.parametrize(
    ("modules", "saves_original"),
    [
        ([], False),
        (["core_attn"], False),
        (["layernorm"], True),
        (["moe_act"], True),
        (["mla_up_proj"], False),
    ],
)
def test_fp8_recomputing_layernorm_or_moe_act_implies_a_non_delayed_recipe(
    modules: list[str], saves_original: bool
) -> None:
    """Megatron-Core refuses `layernorm` / `moe_act` recomputation under delayed FP8 scaling
    (transformer_config.py), so an fp8 scenario recomputing either runs current scaling (or
    blockwise) with TE >= 2.6, where linear_proj saves its original 16-bit input: the attention
    output's FP8 copy is gone (heads·v_head_dim bytes per token and layer, DeepSeek-V3)."""
    from simulator.memory import proj_saves_original_input

    data: dict[str, Any] = {
        # load_imbalance = 1: layer_activation_bytes below holds the mean rank's dispatched tokens
        "model": {
            "preset": "deepseek-v3",
            "seq_len": 1024,
            "layers": 8,
            "mtp_layers": 0,
            "moe": {"load_imbalance": 1.0},
        },
        "cluster": {"topology": "dgx-h100", "num_gpus": 64},
        "parallel": {"micro_batch": 1, "global_batch": 64, "ep": 64},
        "precision": {"dtype": "fp8"},
    }
    if modules:
        data["parallel"].update(recompute="selective", recompute_modules=modules)
    scn = scenario_from_dict(data)
    assert proj_saves_original_input(scn) is saves_original
    m = scn.model
    assert m.mla is not None and m.mla.v_head_dim == 128  # the deepseek-v3 preset's MLA
    got = scenario_layer_activations(scn, moe=True).stored
    kw: dict[str, Any] = {"fp8": True, "moe": True}
    if modules:
        kw.update(recompute="selective", recompute_modules=tuple(modules))
    delayed = layer_activation_bytes(m, 1, **kw).stored
    v = m.heads * m.mla.v_head_dim
    assert delayed - got == pytest.approx((1 if saves_original else 0) * v * m.seq_len)


def test_moe_mlp_input_is_kept_16_bit_by_the_router() -> None:
    """A MoE layer's pre-MLP norm output is the router's input, which its 16-bit GEMM saves as
    given (RouterGatingLinearFunction), also in FP8 training; a shared expert's fc1 keeps its own
    FP8 cast beside it. Replicated part per token (no dropout): norm inputs 2·2h, QKV input, MLP
    input."""
    from dataclasses import replace

    from simulator.loading import model_preset

    m = model_preset("qwen3-30b-a3b")  # no shared expert
    assert m.dropout == 0 and not m.shared_expert_ffn_hidden
    h, s = m.hidden, m.seq_len

    def replicated(model: ModelSpec, fp8: bool) -> float:
        return layer_activation_bytes(model, 1, moe=True, fp8=fp8).replicated / s

    assert replicated(m, False) == pytest.approx(2 * 2 * h + 2 * h + 2 * h)
    assert replicated(m, True) == pytest.approx(2 * 2 * h + 1 * h + 2 * h)
    shared = replace(m, shared_expert_ffn_hidden=m.expert_ffn)
    assert replicated(shared, False) == pytest.approx(2 * 2 * h + 2 * h + 2 * h)  # one tensor
    assert replicated(shared, True) == pytest.approx(2 * 2 * h + 1 * h + (2 + 1) * h)
    # a dense layer's fc1 (TE LayerNormLinear: norm and cast fused) keeps only the FP8 cast
    assert layer_activation_bytes(m, 1, moe=False, fp8=True).replicated / s == pytest.approx(
        2 * 2 * h + h + h
    )
    # layernorm recomputation drops all of it: the QKV input's and the MLP input's copies
    kw: dict[str, Any] = {"moe": True, "fp8": True}
    none = layer_activation_bytes(shared, 1, **kw).stored
    ln = layer_activation_bytes(shared, 1, recompute="selective", recompute_modules=("layernorm",), **kw)
    assert (none - ln.stored) / s == pytest.approx(h + 3 * h)
