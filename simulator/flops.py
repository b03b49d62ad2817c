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

Local attention (LOCAL_ATTENTION_NOTE): a sliding-window or chunked layer's score/value matmuls
are counted as the full layer's scaled by the share of the causal work its mask keeps.

Recomputation adds hardware FLOPs (HFU numerator): `selective` repeats the attention core
(scores and values) forward; `full` repeats each layer's whole forward (not the logit layer).
"""

from __future__ import annotations

from dataclasses import dataclass

from . import argcheck
from .specs import RECOMPUTE, ModelSpec, ParallelConfig

FLOP_PER_MAC = 2  # one multiply-accumulate = 2 floating-point operations
BACKWARD_TO_FORWARD = 2  # dgrad + wgrad, each the size of the forward matmul


# LOCAL_ATTENTION_NOTE. A causal layer's query at position p (0-based) attends p + 1 keys: K(s) =
# s(s+1)/2 over a sequence of s. With a sliding window of w keys (HF's sliding_window: key j is
# visible to query i when i - w < j <= i, masking_utils.sliding_window_overlay; Megatron-Core
# window_size = (w - 1, 0)) it attends min(p + 1, w): K_w(s) = s·w − w(w−1)/2 for w < s. Chunked
# attention (Llama 4 attention_chunk_size c) is causal within each chunk: for s = q·c + r,
# q·c(c+1)/2 + r(r+1)/2. These are the FLOPs the layer needs and what Megatron-Bridge's FLOP
# counter charges a sliding-window layer (src/megatron/bridge/training/utils/flop_utils.py
# @067f987d `calculate_swa_context`: W − W(W−1)/(2T) keys per token, the same K_w(s)/s) and what
# FlashAttention-3's benchmark counts for a window (hopper/benchmark_attn.py@0251105a `flops`:
# the mean visible key count per row). mfusim's exact convention counts a full causal layer over the
# whole s×s score matrix (Megatron / PaLM, the mask not subtracted); a local layer is counted the
# same way scaled by K_local/K(s): exactly the full layer when the window covers the sequence, ~2·w/s
# of it for w << s (twice the visible keys, as the full layer's count is twice its visible keys).
# The exact-causal convention halves both (Megatron-Bridge's count, to 1/s). MFU and HFU therefore
# never count keys the mask removes: a kernel that skips them (FlashAttention, cuDNN) is not
# credited with work it did not do, and HFU stays below the hardware's peak. The published
# conventions that ignore windows (PaLM 6N + 12·L·h·s, MPT, torchtitan, Narayanan) stay as those
# sources compute them.


def causal_keys(seq: int, window: int = 0) -> int:
    """Σ over the s positions of the keys a causal query sees: min(p + 1, w) (w = 0: no window)."""
    if window <= 0 or window >= seq:
        return seq * (seq + 1) // 2
    return seq * window - window * (window - 1) // 2


def chunked_keys(seq: int, chunk: int) -> int:
    """Σ over the s positions of the keys a query sees when causal within `chunk`-token chunks."""
    if chunk <= 0 or chunk >= seq:
        return seq * (seq + 1) // 2
    q, r = divmod(seq, chunk)
    return q * chunk * (chunk + 1) // 2 + r * (r + 1) // 2


def visible_keys(seq: int, window: tuple[str, int]) -> int:
    """Σ over positions of the keys a query of a layer with mask `window` (ModelSpec.attention_window)
    sees."""
    kind, size = window
    if kind == "sliding":
        return causal_keys(seq, size)
    if kind == "chunked":
        return chunked_keys(seq, size)
    return causal_keys(seq)


def local_attention_share(seq: int, window: tuple[str, int]) -> float:
    """The share of a full causal layer's attention work that a layer with mask `window` keeps."""
    return visible_keys(seq, window) / causal_keys(seq)


# ----------------------------------------------------------------------------- parameters
def attention_params(m: ModelSpec) -> int:
    """Attention projections of one layer (biases and q/k norms ignored, as in 6Ψ).

    Standard/GQA: Q, K, V and output projections. MLA (DeepSeek-V2 §2.1): q down (h·q_lora) + its
    norm + q up (q_lora·heads·(nope+rope)), or one h·heads·(nope+rope) projection without q_lora;
    kv down (h·(kv_lora + rope)) + its norm; kv up (kv_lora·heads·(nope + v)); output heads·v·h.
    """
    if m.mla is not None:
        return mla_replicated_params(m) + mla_split_params(m)
    return m.hidden * (m.q_dim + 2 * m.kv_dim) + m.q_dim * m.hidden


def mla_replicated_params(m: ModelSpec) -> int:
    """MLA weights Megatron-Core keeps whole on every TP rank: the q and kv down-projections
    (`linear_q_down_proj`, `linear_kv_down_proj`, parallel_mode duplicated) and their norms."""
    a = m.mla
    assert a is not None
    q_down = m.hidden * a.q_lora_rank + a.q_lora_rank if a.q_lora_rank else 0
    return q_down + m.hidden * (a.kv_lora_rank + a.qk_rope_head_dim) + a.kv_lora_rank


def mla_split_params(m: ModelSpec) -> int:
    """MLA weights split over TP by heads: q up (or the full-rank q), kv up, output projection."""
    a = m.mla
    assert a is not None
    q_in = a.q_lora_rank or m.hidden
    return (
        q_in * m.q_dim + a.kv_lora_rank * m.heads * (a.qk_nope_head_dim + a.v_head_dim) + m.v_dim * m.hidden
    )


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
    """Ψ of the seed notes: every weight except token/position embeddings and the logit layer
    (the main model: DeepSeek's multi-token-prediction modules are counted in `mtp_params`)."""
    return sum(layer_params(m, i) for i in range(m.layers)) + m.hidden  # + final norm


def embedding_params(m: ModelSpec) -> int:
    emb = m.vocab * m.hidden
    pos = m.seq_len * m.hidden if m.position_embeddings else 0
    out = 0 if m.tied_embeddings else m.vocab * m.hidden
    return emb + pos + out


def total_params(m: ModelSpec) -> int:
    return non_embedding_params(m) + embedding_params(m)


def mtp_module_params(m: ModelSpec) -> int:
    """One DeepSeek-V3 MTP module (arXiv 2412.19437 §2.2): a transformer layer like the last main
    layer, the projection M (2h -> h) and two RMSNorms; embedding and output head are shared."""
    return layer_params(m, m.layers - 1) + 2 * m.hidden * m.hidden + 3 * m.hidden


def mtp_params(m: ModelSpec) -> int:
    return m.mtp_layers * mtp_module_params(m)


def active_non_embedding_params(m: ModelSpec) -> int:
    """Ψ counting only the experts a token visits (top_k of num_experts): the 6Ψ of MoE."""
    if not m.is_moe:
        return non_embedding_params(m)
    inactive = (m.num_experts - m.top_k) * mlp_params(m, m.expert_ffn) * m.num_moe_layers
    return non_embedding_params(m) - inactive


def active_params(m: ModelSpec) -> int:
    """Parameters one token uses, embeddings included (the convention of Mistral, Qwen and Meta's
    "active parameters"; DeepSeek and OpenAI leave out the input embedding table, a lookup)."""
    return active_non_embedding_params(m) + embedding_params(m)


def model_summary(m: ModelSpec, load_imbalance: float = 0.0) -> dict[str, object]:
    """What was simulated, for `run --json` (issue 13): so an import can be checked at a glance.
    `load_imbalance`: the layout's busiest-EP-rank factor (Scenario.expert_load_imbalance); 0 =
    the model's own (explicit `load_imbalance`, else 1 on one EP rank)."""
    out: dict[str, object] = {
        "name": m.name,
        "params": total_params(m),
        "active_params": active_params(m),
        "non_embedding_params": non_embedding_params(m),
        "layers": m.layers,
        "hidden": m.hidden,
        "heads": m.heads,
        "kv_heads": m.num_kv_heads,
        "head_dim": m.dim_per_head,
        "ffn_hidden": m.ffn,
        "vocab": m.vocab,
        "seq_len": m.seq_len,
        "attention": "mla" if m.mla is not None else ("gqa" if m.num_kv_heads < m.heads else "mha"),
    }
    if m.is_moe:
        out["moe"] = {
            "num_experts": m.num_experts,
            "top_k": m.top_k,
            "expert_ffn_hidden": m.expert_ffn,
            "shared_expert_ffn_hidden": m.shared_expert_ffn_hidden,
            "moe_layers": m.num_moe_layers,
            "first_dense_layers": m.first_dense_layers,
            "layer_interval": m.moe_layer_interval,
            "routing": m.routing,
            "load_imbalance": load_imbalance or m.busiest_rank_load(1, 0),
            "max_nodes_per_token": m.node_limit,
            "dispatch_dtype": m.dispatch_dtype,
        }
    if m.has_local_attention:
        kinds = [m.attention_window(i)[0] for i in range(m.layers)]
        out["local_attention"] = {
            "sliding_window": m.sliding_window,
            "attention_chunk_size": m.attention_chunk_size,
            "sliding_layers": kinds.count("sliding"),
            "chunked_layers": kinds.count("chunked"),
        }
    if m.mla is not None:
        out["mla"] = {
            "q_lora_rank": m.mla.q_lora_rank,
            "kv_lora_rank": m.mla.kv_lora_rank,
            "qk_nope_head_dim": m.mla.qk_nope_head_dim,
            "qk_rope_head_dim": m.mla.qk_rope_head_dim,
            "v_head_dim": m.mla.v_head_dim,
        }
    if m.mtp_layers:
        out["mtp_layers"] = m.mtp_layers
        out["mtp_params"] = mtp_params(m)
    return out


# ----------------------------------------------------------------------------- per rank
@dataclass(frozen=True, slots=True)
class RankParams:
    """Parameters one GPU holds for some layers: `dense` is replicated over the dp·cp ranks,
    `expert` (routed experts) over the expert-data-parallel ranks (ParallelConfig.expert_dp)."""

    dense: float
    expert: float

    @property
    def total(self) -> float:
        return self.dense + self.expert

    def __add__(self, other: RankParams) -> RankParams:
        return RankParams(self.dense + other.dense, self.expert + other.expert)

    def scaled(self, n: float) -> RankParams:
        return RankParams(self.dense * n, self.expert * n)


def attention_params_per_rank(m: ModelSpec, tp: int) -> float:
    """Attention weights on one TP rank. Megatron splits Q/K/V/output by heads; with tp > kv_heads
    each rank keeps one whole KV head (kv_heads must divide tp, replicated tp/kv_heads times);
    MLA's down-projections are replicated."""
    if m.mla is not None:
        return mla_replicated_params(m) + mla_split_params(m) / tp
    q = m.q_dim / tp
    kv = m.dim_per_head * max(m.num_kv_heads / tp, 1.0)
    return m.hidden * (q + 2 * kv) + q * m.hidden


def layer_params_per_rank(m: ModelSpec, par: ParallelConfig, moe: bool) -> RankParams:
    """The one home of per-rank layer parameters (used by the cost model and the memory model).

    Attention and the dense MLP are split over tp; routed experts over ep (whole experts) and each
    expert's matrices over etp (`ParallelConfig.expert_tp`); the shared expert over tp like a
    dense MLP; the router and the norms are replicated.
    """
    dense = attention_params_per_rank(m, par.tp) + 2 * m.hidden
    if not moe:
        return RankParams(dense + mlp_params(m, m.ffn) / par.tp, 0.0)
    routed = m.num_experts / par.ep * mlp_params(m, m.expert_ffn) / par.expert_tp
    shared = mlp_params(m, m.shared_expert_ffn_hidden) / par.tp if m.shared_expert_ffn_hidden else 0.0
    return RankParams(dense + shared + m.hidden * m.num_experts, routed)


def mtp_params_per_rank(m: ModelSpec, par: ParallelConfig) -> RankParams:
    """One MTP module on one rank of the last stage: its layer, projection M (split over tp) and norms."""
    layer = layer_params_per_rank(m, par, m.is_moe_layer(m.layers - 1))
    return layer + RankParams(2 * m.hidden * m.hidden / par.tp + 3 * m.hidden, 0.0)


# ----------------------------------------------------------------------------- per token
def flops_per_token_6psi(m: ModelSpec) -> float:
    """Seed notes: FLOPs per token ≈ 6Ψ (2Ψ forward + 4Ψ backward)."""
    return 6.0 * active_non_embedding_params(m)


def flops_per_token_6psi_attn(m: ModelSpec) -> float:
    """PaLM App. B: 6N + 12·L·H·Q·T with H·Q = h (heads × head dim), T = s (MLA: the mean of
    the score and value widths, so that 12·L·H·Q·T stays the attention core's 3 × 2 matmuls)."""
    return flops_per_token_6psi(m) + 6.0 * m.layers * (m.qk_dim + m.v_dim) * m.seq_len


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
    if m.mla is not None:  # every projection but the output; the two latent RMSNorms do no matmul
        a = m.mla
        qkv = float(f * s * (attention_params(m) - m.v_dim * h - a.q_lora_rank - a.kv_lora_rank))
    else:
        qkv = float(f * s * h * (m.q_dim + 2 * m.kv_dim))
    share = local_attention_share(s, m.attention_window(layer))
    return LayerForwardFlops(
        qkv=qkv,
        attn_scores=f * s * s * m.qk_dim * share,
        attn_values=f * s * s * m.v_dim * share,
        out_proj=f * s * m.v_dim * h,
        mlp=float(mlp),
        router=float(router),
    )


def logits_forward_flops(m: ModelSpec) -> float:
    """The output (logit) layer for one sequence: s × h × V matmul."""
    return FLOP_PER_MAC * m.seq_len * m.hidden * m.vocab


def _sum_over_layers(m: ModelSpec, per_layer) -> float:
    """Σ over layers of per_layer(LayerForwardFlops): each kind of layer (dense or MoE, full or
    local attention) counted once."""
    return sum(n * per_layer(layer_forward_flops(m, first)) for first, n in _kind_layers(m))


def _kind_layers(m: ModelSpec) -> list[tuple[int, int]]:
    """(first layer, number of layers) of each distinct ModelSpec.layer_kind."""
    first: dict[object, int] = {}
    count: dict[object, int] = {}
    for i in range(m.layers):
        k = m.layer_kind(i)
        first.setdefault(k, i)
        count[k] = count.get(k, 0) + 1
    return [(first[k], count[k]) for k in first]


def mtp_forward_flops_per_sequence(m: ModelSpec) -> float:
    """DeepSeek-V3 MTP modules (§2.2): per module the projection M (2h -> h), one transformer
    layer like the last main layer, and the shared output head again."""
    if not m.mtp_layers:
        return 0.0
    per = (
        FLOP_PER_MAC * m.seq_len * 2 * m.hidden * m.hidden
        + layer_forward_flops(m, m.layers - 1).total
        + logits_forward_flops(m)
    )
    return m.mtp_layers * per


def model_forward_flops_per_sequence(m: ModelSpec) -> float:
    return (
        _sum_over_layers(m, lambda f: f.total) + logits_forward_flops(m) + mtp_forward_flops_per_sequence(m)
    )


def model_flops_per_sequence(m: ModelSpec) -> float:
    """Exact forward + backward FLOPs of one sequence (SPEC §4, no recomputation)."""
    return (1 + BACKWARD_TO_FORWARD) * model_forward_flops_per_sequence(m)


def flops_per_token_exact(m: ModelSpec) -> float:
    return model_flops_per_sequence(m) / m.seq_len


def recompute_flops_per_sequence(m: ModelSpec, recompute: str, modules: tuple[str, ...] = ()) -> float:
    """FLOPs that recomputation repeats for one sequence (added to the HFU numerator).

    selective: the forward FLOPs of the recomputed modules (`modules`, Megatron's
    --recompute-modules; empty = its default, the attention core: Korthikanti et al. 2022 §4.2,
    scores, softmax, values); full: each layer's whole forward pass again; the logit layer is
    never recomputed.
    """
    if recompute == "none":
        return 0.0
    if recompute == "selective":
        chosen = modules or ("core_attn",)
        return sum(n * _module_flops(m, first, chosen) for first, n in _kind_layers(m))
    if recompute == "full":
        return _sum_over_layers(m, lambda f: f.total)
    raise ValueError(f"unknown recompute {recompute!r}")


def _module_flops(m: ModelSpec, layer: int, modules: tuple[str, ...]) -> float:
    """Forward FLOPs of one sequence in the recomputed Megatron-Core modules of one layer:
    core_attn the attention core; mla_up_proj MLA's q and kv up-projections; mlp the dense MLP;
    moe the whole MoE block (router, routed and shared experts); shared_experts the shared
    expert alone. layernorm and moe_act are elementwise (no matmul FLOPs)."""
    f = layer_forward_flops(m, layer)
    moe = m.is_moe_layer(layer)
    total = f.attention_core if "core_attn" in modules else 0.0
    if "mla_up_proj" in modules and m.mla is not None:
        a = m.mla
        q_up = a.q_lora_rank * a.qk_head_dim  # a full-rank q (q_lora_rank 0) is no up-projection
        total += (
            FLOP_PER_MAC * m.seq_len * m.heads * (q_up + a.kv_lora_rank * (a.qk_nope_head_dim + a.v_head_dim))
        )
    if moe and "moe" in modules:
        total += f.mlp + f.router
    elif moe and "shared_experts" in modules and m.shared_expert_ffn_hidden:
        total += FLOP_PER_MAC * m.seq_len * mlp_params(m, m.shared_expert_ffn_hidden)
    elif not moe and "mlp" in modules:
        total += f.mlp
    return total


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


def step_flops(m: ModelSpec, global_batch: int, recompute: str, modules: tuple[str, ...] = ()) -> StepFlops:
    if not isinstance(m, ModelSpec):
        raise ValueError(f"m must be a ModelSpec, got {type(m).__name__}")
    argcheck.positive_int("global_batch", global_batch)
    argcheck.one_of("recompute", recompute, RECOMPUTE)
    tokens = global_batch * m.seq_len
    model = global_batch * model_flops_per_sequence(m)
    return StepFlops(
        model=model,
        hardware=model + global_batch * recompute_flops_per_sequence(m, recompute, modules),
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


# ----------------------------------------------------------------------------- published conventions
# How published runs count FLOPs, to compare a simulated step with a source's own TFLOP/s or
# MFU figure (mfusim validate; scenarios/published/SOURCES.md).
FLOPS_EXACT = "exact"  # SPEC §4 model FLOPs: NeMo, Megatron-Core
FLOPS_EXACT_CAUSAL = "exact-causal"  # attention halved for the causal mask: Megatron-Bridge
FLOPS_NARAYANAN = "narayanan96"  # 96·B·s·l·h²(1 + s/6h + V/16lh): counts the recompute pass
FLOPS_MPT = "mpt"  # (6N + 12·L·h·s) per token, N = all parameters; HFU 8N + 16·L·h·s
FLOPS_TORCHTITAN = "torchtitan"  # 6·(N − N_input_embedding) + 12·L·h·s per token
FLOP_CONVENTIONS = (FLOPS_EXACT, FLOPS_EXACT_CAUSAL, FLOPS_NARAYANAN, FLOPS_MPT, FLOPS_TORCHTITAN)


def narayanan_flops_per_step(m: ModelSpec, global_batch: int) -> float:
    """Narayanan et al. 2021 eq. 3: 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)) (includes recompute)."""
    return megatron_hardware_flops_per_step(m, global_batch)


def mpt_flops_per_step(m: ModelSpec, global_batch: int, recompute: str) -> float:
    """llm-foundry collect_results.py: (6N + 12·L·h·s) per token, N = all parameters;
    HFU convention with activation checkpointing: 8N + 16·L·h·s (one more forward)."""
    n = total_params(m)
    attn = m.layers * m.hidden * m.seq_len
    per_token = 8 * n + 16 * attn if recompute == "full" else 6 * n + 12 * attn
    return per_token * global_batch * m.seq_len


def torchtitan_flops_per_step(m: ModelSpec, global_batch: int) -> float:
    """torchtitan `get_num_flop_per_token`: 6·(N − N_emb) + 12·l·h·q·t, N = all parameters,
    N_emb = the input embedding table only (the output projection stays in N)."""
    n = total_params(m) - m.vocab * m.hidden
    per_token = 6 * n + 12 * m.layers * m.q_dim * m.seq_len
    return per_token * global_batch * m.seq_len


def exact_causal_flops_per_step(m: ModelSpec, global_batch: int) -> float:
    """Exact model FLOPs with the attention score/value matmuls halved for the causal mask."""
    core = sum(layer_forward_flops(m, i).attention_core for i in range(m.layers))
    per_seq = model_flops_per_sequence(m) - 0.5 * (1 + BACKWARD_TO_FORWARD) * core
    return global_batch * per_seq


def published_flops_per_step(
    convention: str, m: ModelSpec, global_batch: int, recompute: str, *, hardware: bool = False
) -> float:
    """FLOPs of one step as a source counting with `convention` reports them (`hardware`: its
    HFU numerator, with the recompute pass where the convention counts one)."""
    if convention == FLOPS_NARAYANAN:
        return narayanan_flops_per_step(m, global_batch)
    if convention == FLOPS_MPT:
        return mpt_flops_per_step(m, global_batch, recompute if hardware else "none")
    if convention == FLOPS_EXACT_CAUSAL:
        return exact_causal_flops_per_step(m, global_batch)
    if convention == FLOPS_TORCHTITAN:
        return torchtitan_flops_per_step(m, global_batch)
    if hardware:
        return step_flops(m, global_batch, recompute).hardware
    return global_batch * model_flops_per_sequence(m)
