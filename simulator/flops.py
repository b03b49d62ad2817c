"""Parameter and FLOP counts: the heart of the seed notes.

Three conventions for the FLOPs of one token's forward + backward pass:

* `6Ψ` (seed notes; Kaplan et al. 2020): Ψ = non-embedding parameters, forward 2Ψ,
  backward 4Ψ.
* `6Ψ + 12·L·h·s` (PaLM, Chowdhery et al. 2022, App. B: 6N + 12·L·H·Q·T): adds the
  attention score/value matmuls over the full s×s matrix.
* exact (SPEC §4): every matmul of every layer (QKV with GQA, scores, values, output
  projection, dense or gated MLP, MoE experts and router) plus the logit layer; backward
  = 2× forward. The attention matmuls are counted over the full s×s score matrix (not
  halved for the causal mask), as Megatron and PaLM count them. For a GPT-3-style model
  this equals 72·B·L·s·h²·(1 + s/(6h) + V/(12·h·L)) per step (Narayanan et al. 2021 eq. 3
  without the recompute pass; their 96 = 72 + 24 includes one extra forward).

Recomputation adds hardware FLOPs (HFU numerator): `selective` repeats the attention core
(scores and values) forward; `full` repeats each layer's whole forward (not the logit layer).
"""

from __future__ import annotations

from dataclasses import dataclass

from . import argcheck
from .specs import RECOMPUTE, ModelSpec

FLOP_PER_MAC = 2  # one multiply-accumulate = 2 floating-point operations
BACKWARD_TO_FORWARD = 2  # dgrad + wgrad, each the size of the forward matmul


# ----------------------------------------------------------------------------- parameters
def attention_params(m: ModelSpec) -> int:
    """Q, K, V and output projections of one layer (biases ignored, as in 6Ψ)."""
    return m.hidden * (m.q_dim + 2 * m.kv_dim) + m.q_dim * m.hidden


def mlp_params(m: ModelSpec, ffn: int) -> int:
    matrices = 3 if m.gated_mlp else 2
    return matrices * m.hidden * ffn


def layer_params(m: ModelSpec, layer: int) -> int:
    """All weights of one transformer layer (two norms included)."""
    norms = 2 * m.hidden
    if m.is_moe_layer(layer):
        experts = m.num_experts * mlp_params(m, m.expert_ffn)
        shared = mlp_params(m, m.shared_expert_ffn_hidden) if m.shared_expert_ffn_hidden else 0
        router = m.hidden * m.num_experts
        ffn = experts + shared + router
    else:
        ffn = mlp_params(m, m.ffn)
    return attention_params(m) + ffn + norms


def non_embedding_params(m: ModelSpec) -> int:
    """Ψ of the seed notes: every weight except token/position embeddings and the logit layer."""
    return sum(layer_params(m, i) for i in range(m.layers)) + m.hidden  # + final norm


def embedding_params(m: ModelSpec) -> int:
    emb = m.vocab * m.hidden
    pos = m.seq_len * m.hidden if m.position_embeddings else 0
    out = 0 if m.tied_embeddings else m.vocab * m.hidden
    return emb + pos + out


def total_params(m: ModelSpec) -> int:
    return non_embedding_params(m) + embedding_params(m)


def active_non_embedding_params(m: ModelSpec) -> int:
    """Ψ counting only the experts a token visits (top_k of num_experts): the 6Ψ of MoE."""
    if not m.is_moe:
        return non_embedding_params(m)
    inactive = (m.num_experts - m.top_k) * mlp_params(m, m.expert_ffn) * m.num_moe_layers
    return non_embedding_params(m) - inactive


# ----------------------------------------------------------------------------- per token
def flops_per_token_6psi(m: ModelSpec) -> float:
    """Seed notes: FLOPs per token ≈ 6Ψ (2Ψ forward + 4Ψ backward)."""
    return 6.0 * active_non_embedding_params(m)


def flops_per_token_6psi_attn(m: ModelSpec) -> float:
    """PaLM App. B: 6N + 12·L·H·Q·T with H·Q = h (heads × head dim), T = s."""
    return flops_per_token_6psi(m) + 12.0 * m.layers * m.q_dim * m.seq_len


@dataclass(frozen=True, slots=True)
class LayerForwardFlops:
    """Forward FLOPs of one layer for ONE sequence of s tokens, by matmul."""

    qkv: float
    attn_scores: float  # Q·Kᵀ over the full s×s matrix
    attn_values: float  # softmax(QKᵀ)·V
    out_proj: float
    mlp: float  # dense MLP, or the routed experts' work (top_k per token) + shared expert
    router: float

    @property
    def attention_core(self) -> float:
        return self.attn_scores + self.attn_values

    @property
    def total(self) -> float:
        return self.qkv + self.attn_scores + self.attn_values + self.out_proj + self.mlp + self.router


def layer_forward_flops(m: ModelSpec, layer: int = 0) -> LayerForwardFlops:
    s, h = m.seq_len, m.hidden
    f = FLOP_PER_MAC
    mlp: float
    router: float
    if m.is_moe_layer(layer):
        mlp = float(m.top_k * f * s * mlp_params(m, m.expert_ffn))
        if m.shared_expert_ffn_hidden:
            mlp += f * s * mlp_params(m, m.shared_expert_ffn_hidden)
        router = float(f * s * h * m.num_experts)
    else:
        mlp = float(f * s * mlp_params(m, m.ffn))
        router = 0.0
    return LayerForwardFlops(
        qkv=f * s * h * (m.q_dim + 2 * m.kv_dim),
        attn_scores=f * s * s * m.q_dim,
        attn_values=f * s * s * m.q_dim,
        out_proj=f * s * m.q_dim * h,
        mlp=float(mlp),
        router=float(router),
    )


def logits_forward_flops(m: ModelSpec) -> float:
    """The output (logit) layer for one sequence: s × h × V matmul."""
    return FLOP_PER_MAC * m.seq_len * m.hidden * m.vocab


def _sum_over_layers(m: ModelSpec, per_layer) -> float:
    """Σ over layers of per_layer(LayerForwardFlops): dense and MoE layers counted once each."""
    n_moe = m.num_moe_layers
    total = (
        (m.layers - n_moe) * per_layer(layer_forward_flops(m, _first_layer(m, moe=False)))
        if n_moe < m.layers
        else 0.0
    )
    if n_moe:
        total += n_moe * per_layer(layer_forward_flops(m, _first_layer(m, moe=True)))
    return total


def _first_layer(m: ModelSpec, moe: bool) -> int:
    return next(i for i in range(m.layers) if m.is_moe_layer(i) == moe)


def model_forward_flops_per_sequence(m: ModelSpec) -> float:
    return _sum_over_layers(m, lambda f: f.total) + logits_forward_flops(m)


def model_flops_per_sequence(m: ModelSpec) -> float:
    """Exact forward + backward FLOPs of one sequence (SPEC §4, no recomputation)."""
    return (1 + BACKWARD_TO_FORWARD) * model_forward_flops_per_sequence(m)


def flops_per_token_exact(m: ModelSpec) -> float:
    return model_flops_per_sequence(m) / m.seq_len


def recompute_flops_per_sequence(m: ModelSpec, recompute: str) -> float:
    """FLOPs that recomputation repeats for one sequence (added to the HFU numerator).

    selective: the attention core (Korthikanti et al. 2022 §4.2: scores, softmax, values);
    full: each layer's whole forward pass again; the logit layer is never recomputed.
    """
    if recompute == "none":
        return 0.0
    if recompute == "selective":
        return _sum_over_layers(m, lambda f: f.attention_core)
    if recompute == "full":
        return _sum_over_layers(m, lambda f: f.total)
    raise ValueError(f"unknown recompute {recompute!r}")


# ----------------------------------------------------------------------------- closed forms
def megatron_model_flops_per_step(m: ModelSpec, global_batch: int) -> float:
    """72·B·L·s·h²·(1 + s/(6h) + V/(12·h·L)): Narayanan et al. 2021 eq. 3 without recompute."""
    B, L, s, h, V = global_batch, m.layers, m.seq_len, m.hidden, m.vocab
    return 72.0 * B * L * s * h * h * (1 + s / (6 * h) + V / (12 * h * L))


def megatron_hardware_flops_per_step(m: ModelSpec, global_batch: int) -> float:
    """96·B·s·L·h²·(1 + s/(6h) + V/(16·L·h)): Narayanan et al. 2021 eq. 3 (full recompute)."""
    B, L, s, h, V = global_batch, m.layers, m.seq_len, m.hidden, m.vocab
    return 96.0 * B * s * L * h * h * (1 + s / (6 * h) + V / (16 * L * h))


@dataclass(frozen=True, slots=True)
class StepFlops:
    """FLOP totals of one optimizer step (global batch B sequences)."""

    model: float  # exact, no recomputation: `mfu` numerator
    hardware: float  # model + recomputation: `hfu` numerator
    six_psi: float  # 6Ψ per token × tokens: `mfu_6psi` numerator
    six_psi_attn: float  # (6Ψ + 12·L·h·s) per token × tokens


def step_flops(m: ModelSpec, global_batch: int, recompute: str) -> StepFlops:
    if not isinstance(m, ModelSpec):
        raise ValueError(f"m must be a ModelSpec, got {type(m).__name__}")
    argcheck.positive_int("global_batch", global_batch)
    argcheck.one_of("recompute", recompute, RECOMPUTE)
    tokens = global_batch * m.seq_len
    model = global_batch * model_flops_per_sequence(m)
    return StepFlops(
        model=model,
        hardware=model + global_batch * recompute_flops_per_sequence(m, recompute),
        six_psi=tokens * flops_per_token_6psi(m),
        six_psi_attn=tokens * flops_per_token_6psi_attn(m),
    )


def mfu(flops_per_token: float, tokens_per_s: float, num_gpus: int, peak_flop_per_s: float) -> float:
    """Seed notes: MFU = tokens/s × FLOPs per token / (peak × N)."""
    argcheck.finite_number("flops_per_token", flops_per_token, strict=True)
    argcheck.finite_number("tokens_per_s", tokens_per_s)
    argcheck.positive_int("num_gpus", num_gpus)
    argcheck.finite_number("peak_flop_per_s", peak_flop_per_s, strict=True)
    return tokens_per_s * flops_per_token / (peak_flop_per_s * num_gpus)
