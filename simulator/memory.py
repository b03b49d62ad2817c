"""Per-GPU memory footprint of one training configuration (issue 5).

What one GPU holds at its peak, part by part (all in bytes):

* **Model state** — mixed-precision Adam as Megatron-LM runs it (docs/source/api-guide/
  dist_optimizer.md, "bf16 param, fp32 grads: 6 + 12/d bytes per parameter"):
  16-bit weights (2 B), fp32 "main" gradients (4 B: with bf16 Megatron-LM forces
  accumulate_allreduce_grads_in_fp32, unlike ZeRO's paper which assumes fp16 gradients), and
  the fp32 optimizer state: master weights + Adam's two moments (12 B) — 18 B per parameter
  without sharding. fp16 training keeps 16-bit gradients and the optimizer an fp32 copy of
  them ("fp16 param, fp16 grads: 4 + 16/d", 20 B unsharded). ZeRO (Rajbhandari et al.
  2020, §5) shards them over the data-parallel ranks: stage 1 (= Megatron's distributed
  optimizer) the 12 B, stage 2 also the gradients, stage 3 (FSDP) also the weights.
  Megatron's distributed optimizer shards over dp×cp (CP ranks hold the same weights), so
  the sharding degree here is d = dp·cp; expert weights of an MoE shard over their own
  expert-data-parallel group d/ep. That fp32 gradient copy (fp16, or 16-bit gradient buffers)
  is a step-time transient under Megatron's optimizers: DistributedOptimizer.
  _copy_model_grads_to_main_grads makes it inside step() (NVIDIA/Megatron-LM d7288711
  megatron/core/optimizer/distrib_optimizer.py; the precision-aware optimizer skips it, reading
  the 16-bit buffer as `decoupled_grad`, only where optimizer_config.py's
  use_precision_aware_optimizer_no_fp8_or_ds_fp8 holds: fp8_recipe None or "delayed", non-fp32
  main params, or CPU offload -- never in Megatron-Bridge's recipes with fp32 main params, whose
  MixedPrecisionConfig hands the optimizer fp8_recipe "tensorwise" even for BF16, so it is
  counted whatever the moments' dtype) and zero_grad(set_to_none) frees it at the next
  train_step's start (Megatron-Bridge 0fbfe7d training/train.py), so it counts only where it
  outweighs the activations and buffers freed by then. fp8 training keeps 16-bit weights and adds a 1-byte fp8
  copy of each GEMM weight of a Transformer Engine module (TE's cast cache; not of the embedding
  or the output layer, which are no TE modules and stay 16-bit only); with `[precision] fp8_param_gather`
  (Megatron-Core --fp8-param-gather) the GEMM weights exist only in FP8 -- no 16-bit copy --
  while the embedding and output layer stay 16-bit (weight_bytes_per_param).
* **Activations** — Korthikanti et al. 2022 (arXiv 2205.05198) §4, Table 2, per layer and
  micro-batch with 16-bit activations and 1-byte dropout masks:

      no parallelism            s·b·h·(34 + 5·a·s/h)
      tensor parallel (TP)      s·b·h·(10 + 24/t + 5·a·s/(h·t))
      TP + sequence parallel    s·b·h/t·(34 + 5·a·s/h)
      + selective recompute     the 5·a·s/h term goes (attention core recomputed)
      full recompute            only the layer input, 2·s·b·h (/t with SP) per layer

  The 34 splits as (§4.1): attention block 11·h (LayerNorm-output input of QKV 2h, Q 2h,
  K 2h, V 2h, input of the output projection 2h, dropout mask h), MLP 19·h (input 2h, GeLU
  input 8h, GeLU output 8h, dropout mask h), two LayerNorm inputs 4h; the s² part is the
  softmax output 2as, its dropout mask as, and the dropped-out scores 2as. We keep that
  split and generalize it: GQA stores K and V at the KV width (2·kv_dim each instead of 2h),
  heads·head_dim ≠ hidden stores Q and the attention output at q_dim, and a gated (SwiGLU)
  MLP of width f stores its input 2h, the gate and up projections 2f + 2f and their product
  2f (6f in all, against the GeLU MLP's 2f + 2f = 16h for f = 4h), so the paper's 19h of the
  MLP becomes 3h + 4f (GeLU) or 3h + 6f (SwiGLU).
  FlashAttention (Dao et al. 2022) never materializes the s×s scores: the 5as term is
  replaced by the fp32 log-sum-exp statistics, 4·a bytes per token. The replicated part
  under TP without SP is the paper's 10h (two LayerNorm inputs, the inputs of QKV and of
  the first MLP matmul, the two dropout masks). Full recompute still needs one layer's
  activations at a time while that layer is recomputed; we add that working set once.
  Context parallelism splits the sequence: each rank holds s/cp tokens (and scores of
  s/cp × s without FlashAttention). In fp8 training the inputs of the four matmuls are saved
  as fp8 (1 B) casts -- but a MoE layer's router keeps its input 16-bit (its GEMM is no TE
  module), beside the shared expert's fp8 cast; the attention output is kept twice with per-tensor (delayed) scaling, 16-bit
  by the fused attention core and as the output projection's fp8 cast (2 + 1 B,
  `_attention_output`). Dropout masks are counted as in the paper even for models trained
  without dropout (conservative by 2·s·b·h per layer).
* **In-flight micro-batches** per pipeline stage: 1F1B (Narayanan et al. 2021 §2.2) —
  stage i (0-based) holds min(p − i, m) micro-batches before its first backward; interleaved
  1F1B with v chunks — Megatron's warm-up count 2·(p − i − 1) + (v − 1)·p + 1 chunk
  micro-batches of L/(p·v) layers, which for the first stage is Korthikanti §4.2.3's
  L·(1 + (p − 1)/(p·v)) layer-micro-batches; GPipe holds all m. So the first stage is the most
  loaded one (and has the embeddings); the last stage has the output layer and the logits.
* **Embedding / output buffers** (Korthikanti §4.3): the first stage's embedding dropout mask
  (s·b·h bytes per in-flight micro-batch, /t with SP); the last stage's final-norm and
  output-layer inputs (4·s·b·h, /t with SP) and the logits the cross entropy keeps for its
  backward (fp32 softmax, or TE's in-place 16-bit gradient: `logit_bytes`)
  (4·s·b·V/t) for the one micro-batch between its forward and backward.
* **Communication buffers**: with SP the all-gathered layer input of width h over the full
  sequence (2·s·b·h) and its reduce-scatter staging (same size); the pipeline's send/receive
  buffers (2 × 2·s·b·h/t); ZeRO-3's prefetched full weights of two layers.
* **Reserved**: what the PyTorch caching allocator cannot hand out. FRAMEWORK_BYTES covers
  the CUDA context (≈ 0.5 GiB on A100/H100 with lazy module loading), cuBLAS/cuDNN
  workspaces and NCCL's per-communicator channel buffers (NCCL_BUFFSIZE = 4 MiB per channel
  and peer, a few communicators per rank: ≈ 1 GiB); FRAGMENTATION_FRACTION of the allocated
  bytes is lost to the allocator's block rounding and fragmentation (Megatron's memory logs
  typically show "reserved" 3-10 % above "max allocated").

`fits` compares the most loaded stage's total with the GPU's HBM (the catalog's GiB: what CUDA
reports as the device's memory, cudaDeviceProp totalGlobalMem, from public device dumps where
there is one -- gpus.toml). MoE: the routed experts' weights are split over ep (and tp), their
activations scale with top_k (each token visits top_k experts of width expert_ffn).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import flops
from .schedules import chunk_layers, next_chunk, peak_inflight, prev_chunk, stage_tasks
from .specs import DEEPSPEED_STACK, ModelSpec, ParallelConfig, Scenario
from .units import GIB_BYTES


@dataclass(frozen=True, slots=True)
class MemoryReport:
    """Per-GPU memory of the most loaded GPU (pipeline stage 0 under 1F1B)."""

    parts_bytes: dict[str, float]
    capacity_bytes: float
    stage_peak_bytes: tuple[float, ...] = ()

    @property
    def peak_bytes(self) -> float:
        return sum(self.parts_bytes.values())

    @property
    def fits(self) -> bool:
        return self.peak_bytes <= self.capacity_bytes

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "peak_gib_per_gpu": self.peak_bytes / GIB_BYTES,
            "capacity_gib": self.capacity_bytes / GIB_BYTES,
            "fits": self.fits,
            "parts_gib": {k: v / GIB_BYTES for k, v in self.parts_bytes.items()},
        }
        if self.stage_peak_bytes:
            out["peak_gib_by_stage"] = [b / GIB_BYTES for b in self.stage_peak_bytes]
        return out


# --- bytes per parameter (Megatron mixed precision, fp32 main grads) --------------------------
WEIGHT_BYTES = 2  # bf16 / fp16 weights used by the forward and backward passes
FP8_WEIGHT_CACHE_BYTES = 1  # fp8 training: Transformer Engine's cached fp8 copy of each weight
# Transformer Engine's quantized weight copies per recipe: fp8 one 8-bit copy; MXFP8 and NVFP4
# a row-wise and a column-wise copy with their block scales (1 + 1/32 and 0.5 + 1/16 bytes each)
QUANTIZED_WEIGHT_CACHE_BYTES = {
    "fp8": FP8_WEIGHT_CACHE_BYTES,
    "mxfp8": 2 * (1 + 1 / 32),
    "nvfp4": 2 * (0.5 + 1 / 16),
}
GRAD_BYTES = 4  # fp32 main gradients (Megatron-LM arguments.py: bf16 forces
# accumulate_allreduce_grads_in_fp32, so main_grad buffers are fp32)
FP16_GRAD_BYTES = 2  # fp16 training keeps 16-bit gradients
OPTIMIZER_BYTES = 12  # fp32 master weights + Adam m + Adam v (Rajbhandari et al. 2020 §3: K = 12)

# --- activations (Korthikanti et al. 2022) -----------------------------------------------------
ACT_BYTES = 2  # 16-bit activations
MASK_BYTES = 1  # dropout masks
FP8_BYTES = 1  # fp8 copies of matmul inputs saved for backward (fp8 training)
# ... and under [precision] fp8_recipe = "blockwise" the saved column-wise copy (the wgrad GEMM's
# operand) carries one fp32 scale per 1x128 tile (Transformer Engine Float8BlockwiseQTensor,
# program.FP8_BLOCKWISE_QUANT_BYTES_PER_ELEMENT). The 128x128-block weight cache stays at
# FP8_WEIGHT_CACHE_BYTES: its scales are 4 / 16384 bytes per element, and its Hopper column-wise
# copy is left out as per-tensor FP8's transpose is (weight_bytes_per_param).
FP8_BLOCKWISE_SAVED_BYTES = FP8_BYTES + 4 / 128
LSE_BYTES = 4  # FlashAttention's fp32 log-sum-exp per head and query
# DeepSeek-V3's E5M6 (sign, 5 exponent, 6 mantissa bits: 12 bits) cache of the attention output
# (report arXiv 2412.19437 §3.3.3 "Low-Precision Activation" (1)); its 1x128-tile power-of-2 scales
# are left out, as the FP8 caches' scales are
E5M6_BYTES = 1.5

# --- reserved -----------------------------------------------------------------------------------
FRAMEWORK_BYTES = 1.5 * GIB_BYTES  # CUDA context + cuBLAS workspaces + NCCL buffers (see above)
FRAGMENTATION_FRACTION = 0.05  # caching-allocator rounding and fragmentation, of allocated bytes

PARTS = ("weights", "grads", "optimizer", "activations", "buffers", "reserved")


# ----------------------------------------------------------------------------- activations
@dataclass(frozen=True, slots=True)
class LayerActivationBytes:
    """Bytes one layer stores for one micro-batch on one GPU, by where they come from."""

    replicated: float  # the paper's 10·s·b·h: LayerNorm inputs, QKV/MLP inputs, dropout masks
    sharded: float  # the paper's 24·s·b·h/t: Q, K, V, attention output, MLP intermediates
    attention_core: float  # the paper's 5·a·s²·b/t (or FlashAttention's statistics)
    stored: float  # what is actually kept between forward and backward
    working: float  # full recompute: one layer re-materialized during backward (else 0)


def layer_activation_bytes(
    model: ModelSpec,
    micro_batch: int,
    *,
    tp: int = 1,
    cp: int = 1,
    sequence_parallel: bool = False,
    recompute: str = "none",
    flash_attention: bool = True,
    moe: bool = False,
    fp8: bool = False,
    fp8_saved_bytes: float = FP8_BYTES,
    etp: int = 1,
    recompute_modules: tuple[str, ...] = (),
    fp8_moe_act_input: bool = False,
    proj_saves_original_input: bool = False,
    imbalance: float = 0.0,
    e5m6_attention_output: bool = False,
) -> LayerActivationBytes:
    """Korthikanti et al. 2022 Table 2, generalized to GQA, gated MLPs, MoE and CP (module doc).

    Selective recomputation drops what the recomputed modules (`recompute_modules`, Megatron's
    --recompute-modules; empty = its default "core_attn") would have kept; see `_recomputed_bytes`.
    `proj_saves_original_input`: the output projection keeps its 16-bit input instead of a
    quantized copy (Megatron-Core's set_save_original_input(linear_proj); see `_attention_output`).
    `imbalance`: the busiest EP rank's routed tokens / the mean (Scenario.expert_load_imbalance);
    0 = the model's explicit `load_imbalance`, else 1 (the factor on one EP rank).
    `e5m6_attention_output`: the attention output kept once in E5M6 ([memory] key; see
    `_attention_output`)."""
    skew = imbalance or model.busiest_rank_load(1, 0)
    s_local = model.seq_len / cp  # tokens of a sequence on this CP rank
    sb = s_local * micro_batch
    h = model.hidden
    t = tp
    q_rank = model.q_dim / t
    # K/V heads are replicated when tp > kv_heads (Megatron needs kv_heads | tp then).
    kv_rank = model.dim_per_head * max(model.num_kv_heads / t, 1.0)
    # inputs of the four matmuls are kept in fp8 when training in fp8 (Transformer Engine saves
    # the fp8 casts for the weight-gradient GEMMs); everything else stays 16-bit
    mm = fp8_saved_bytes if fp8 else ACT_BYTES
    if moe:
        # the busiest EP rank's experts see top_k·imbalance copies of each of its T/t tokens
        # (balanced routing: T·top_k/E per expert, E/ep experts per rank -- not all E experts);
        # with etp the copies are gathered over the etp group (etp×) and each expert matrix is
        # 1/etp wide, so the intermediates stay top_k·f/t (program.py `_moe`: the same split)
        f_rank = model.top_k * model.expert_ffn / t * skew
        if model.shared_expert_ffn_hidden:
            f_rank += model.shared_expert_ffn_hidden / t
        # routed token copies of width h: the dispatched tokens are the expert fc1's input (kept
        # as its fp8 cast in fp8 training, like every linear input). The experts' fc2 output is
        # not kept: Megatron-Core's grouped expert MLP applies the routing probabilities inside
        # the fused activation (experts.py: weighted_bias_swiglu_impl(fc1_out, bias,
        # permuted_probs)), whose backward needs only the fc1 output it keeps anyway, and the
        # combine's unpermute then merges without probabilities (no saved tensor).
        copies = model.top_k * etp / t * skew
        routing = mm * copies * h
    else:
        f_rank = model.ffn / t
        routing = 0.0
    # GeLU: its input 2f + its output (fc2's input) 2f; SwiGLU: gate 2f + up 2f + product 2f
    mlp_inner = ((2 if model.gated_mlp else 1) * ACT_BYTES + mm) * f_rank
    if moe and fp8_moe_act_input:
        # DeepSeek-V3 report §3.3.4 (2): the routed experts' SwiGLU inputs (gate and up, the fc1
        # output) cached in FP8 instead of 16-bit: 1 byte less per element (shared expert: no)
        mlp_inner -= (
            (ACT_BYTES - FP8_BYTES)
            * (2 if model.gated_mlp else 1)
            * model.top_k
            * model.expert_ffn
            / t
            * skew
        )
    # §4.1: LayerNorm inputs 2·2h, QKV input 2h, MLP input 2h, two dropout masks 2·1h = 10h
    # (no masks for a model trained without dropout: torch's dropout with p = 0 returns its input)
    mask = MASK_BYTES if model.dropout > 0 else 0
    # the MLP input (the pre-MLP norm's output): a dense MLP's fc1 keeps it (its FP8 cast in FP8
    # training: TE's LayerNormLinear fuses the norm and the cast). A MoE layer's router keeps it
    # 16-bit in any precision -- its GEMM is no TE module and saves its input as given
    # (moe_utils.py RouterGatingLinearFunction: ctx.save_for_backward(inp, weight, bias)) -- and a
    # shared expert's fc1 keeps its own FP8 cast of it beside that (the same tensor in 16 bits)
    mlp_input: float = mm * h
    if moe:
        mlp_input = ACT_BYTES * h + (mm * h if fp8 and model.shared_expert_ffn_hidden else 0.0)
    replicated = (2 * ACT_BYTES * h + mm * h + mlp_input + 2 * mask * h) * sb
    if sequence_parallel and t > 1:
        replicated /= t
    up_proj = 0.0  # MLA: Q, K, V out of the up-projections (what mla_up_proj recomputes)
    # attention output (the output projection's input): q_dim wide, MLA's heads·v_head_dim
    out_proj_input, core_output = _attention_output(
        (q_rank if model.mla is None else model.v_dim / t),
        fp8=fp8,
        flash_attention=flash_attention,
        proj_saves_original_input=proj_saves_original_input,
        e5m6=e5m6_attention_output,
    )
    if model.mla is None:
        # Q 2q, K 2kv, V 2kv, attention output (input of the output projection) 2q
        attention = ACT_BYTES * (q_rank + 2 * kv_rank) + out_proj_input + core_output
        if model.qk_norm:  # Qwen3's q_norm/k_norm keep their inputs (the pre-norm Q and K)
            attention += ACT_BYTES * (q_rank + kv_rank)
    else:
        # MLA (DeepSeek-V2 arXiv 2405.04434 §2.1.2-2.1.3; Megatron-Core multi_latent_attention.py):
        # Q and K of heads·(nope + rope), V and the attention output (the output projection's
        # input) of heads·v_head_dim -- not the query width -- split over tp; plus the latents
        # c_Q (q_lora_rank) and c_KV (kv_lora_rank), each the input of its RMSNorm (16-bit) and of
        # its up-projection (a linear input: mm), whole on every TP rank (replicated down-proj.)
        v_rank = model.v_dim / t
        latents = model.mla.q_lora_rank + model.mla.kv_lora_rank
        up_proj = ACT_BYTES * (q_rank + kv_rank + v_rank)
        attention = up_proj + out_proj_input + core_output + (ACT_BYTES + mm) * latents
    # attention activations, MLP intermediates, routed token copies
    sharded = (attention + mlp_inner + routing) * sb
    heads_rank = model.heads / t
    if flash_attention:
        core = LSE_BYTES * heads_rank * sb
    else:
        # softmax output 2as², its dropout mask as², dropped-out scores 2as² (per sequence)
        core = (2 * ACT_BYTES + mask) * heads_rank * sb * model.seq_len
    full_layer = replicated + sharded + core
    if recompute == "none":
        return LayerActivationBytes(replicated, sharded, core, full_layer, 0.0)
    if recompute == "selective":
        dropped = _recomputed_bytes(
            recompute_modules or ("core_attn",),
            model,
            moe=moe,
            core=core + core_output * sb,
            norm_outputs=(mm * h + mlp_input) * sb / (t if sequence_parallel and t > 1 else 1),
            up_proj=up_proj * sb,
            expert_act=mm * model.top_k * model.expert_ffn / t * skew * sb if moe else 0.0,
            shared=((2 if model.gated_mlp else 1) * ACT_BYTES + mm) * model.shared_expert_ffn_hidden / t * sb
            if moe
            else 0.0,
            mlp=(mlp_inner + routing) * sb,
        )
        return LayerActivationBytes(replicated, sharded, core, full_layer - dropped, 0.0)
    if recompute == "full":
        layer_input = ACT_BYTES * h * sb / (t if sequence_parallel and t > 1 else 1)
        return LayerActivationBytes(replicated, sharded, core, layer_input, full_layer)
    raise ValueError(f"unknown recompute {recompute!r}")


def _attention_output(
    width: float, *, fp8: bool, flash_attention: bool, proj_saves_original_input: bool, e5m6: bool = False
) -> tuple[float, float]:
    """(kept as the output projection's input, kept beside it by the attention core) bytes per
    token of the attention output, `width` elements per token on this rank.

    16-bit training: one 16-bit tensor (Korthikanti §4.1's 2h), which the fused attention core
    keeps for its own backward (FlashAttention's dO·O row sums: Dao et al. 2022 Alg. 4; Transformer
    Engine's FusedAttnFunc saves q, k, v and out_f16, attention/dot_product_attention/backends.py
    @d0067d0) and the output projection keeps as its input -- the same tensor, counted once.
    FP8 training, per-tensor scaling (Megatron-Core's default recipe "delayed"): the fused core
    keeps the BF16 output and TE's Linear saves its own FP8 cast of it (module/linear.py: the
    quantized `inputmat` is what it keeps), 2 + 1 B -- Megatron-Core's comment on exactly this:
    "the output of the fused core_attn is saved by itself, and linear_proj also saves the
    quantized tensor of this output" (transformer/attention.py, NVIDIA/Megatron-LM 781e765818).
    From that commit on (Megatron-Core 0.15, every Megatron-Bridge container that runs MXFP8 or
    NVFP4) non-delayed recipes with TE >= 2.6 (FP4: >= 2.7) set linear_proj to save the original
    16-bit input instead: one 16-bit tensor again (`proj_saves_original_input`: the simulator's
    mxfp8 and nvfp4, and fp8 where the scenario implies a non-delayed recipe, the function
    `proj_saves_original_input`; otherwise "fp8" counts Megatron's default, delayed scaling).
    Without FlashAttention the core's backward needs the softmax output and V, not its output:
    only the projection's copy stays.
    `e5m6` (`[memory] e5m6_attention_output`, FP8 training): DeepSeek-V3's recipe (report arXiv
    2412.19437 §3.3.3, "Low-Precision Activation" (1): "Inputs of the Linear after the attention
    operator. These activations are also used in the backward pass of the attention operator ...
    We adopt a customized E5M6 data format exclusively for these activations"): one tensor of
    E5M6_BYTES per element serving both backwards, nothing beside it."""
    if fp8 and e5m6:
        return E5M6_BYTES * width, 0.0
    if not fp8 or proj_saves_original_input:
        return ACT_BYTES * width, 0.0
    return FP8_BYTES * width, (ACT_BYTES * width if flash_attention else 0.0)


def _recomputed_bytes(
    modules: tuple[str, ...],
    model: ModelSpec,
    *,
    moe: bool,
    core: float,
    norm_outputs: float,
    up_proj: float,
    expert_act: float,
    shared: float,
    mlp: float,
) -> float:
    """Bytes of one layer that selective recomputation does not keep, by Megatron-Core module
    (--recompute-modules, megatron/core/transformer/transformer_config.py and transformer_layer.py):

    * core_attn — the attention core's own state (Korthikanti §5: scores/softmax, or
      FlashAttention's statistics; in FP8 with a quantized projection input also the 16-bit
      output the fused core kept, `_attention_output`); Q, K, V stay;
    * layernorm — the outputs of input_layernorm and pre_mlp_layernorm (the QKV and MLP inputs),
      re-normalized from their kept inputs (CheckpointWithoutOutput). In FP8 training what goes
      is the following linears' FP8 copies of them: Megatron-Core then sets those linears to
      save their original (discarded, recomputed) input instead (transformer_layer.py
      set_for_recompute_input_layernorm, set_save_original_input(mlp.linear_fc1), the MoE
      layer's shared-expert fc1; NVIDIA/Megatron-LM 781e765818);
    * mla_up_proj — MLA's Q, K, V out of the up-projections (and RoPE), rebuilt from the latents;
    * moe_act — the routed experts' activation output (input of fc2), rebuilt from fc1's output;
    * shared_experts — the shared expert's intermediates;
    * mlp (dense layers) / moe (MoE layers) — the whole MLP or MoE block's intermediates (moe also
      its dispatched token copies); its input stays.
    Overlapping modules count once (moe covers moe_act and shared_experts)."""
    dropped = 0.0
    if "core_attn" in modules:
        dropped += core
    if "layernorm" in modules:
        dropped += norm_outputs
    if "mla_up_proj" in modules and model.mla is not None:
        dropped += up_proj
    if moe and "moe" in modules:
        dropped += mlp
    elif moe:
        dropped += (expert_act if "moe_act" in modules else 0.0) + (
            shared if "shared_experts" in modules else 0.0
        )
    elif "mlp" in modules:
        dropped += mlp
    return dropped


def logit_bytes(cross_entropy: str) -> float:
    """Bytes per logit the loss keeps from its forward to its backward (per vocab-parallel rank).
    Megatron-Core's unfused and fused ("native") vocab-parallel losses and PyTorch's
    F.cross_entropy under autocast keep the fp32 softmax (or log-softmax): 4. Transformer Engine's
    Triton cross-entropy (`[kernels] cross_entropy = "te"`, TE 2.1-2.17) writes the gradient into
    the 16-bit logits in place and keeps only them (NVIDIA/TransformerEngine PR #1456, "Storing the
    gradients in-place of the input tensor"; program.py CE_PASSES): 2."""
    return 2.0 if cross_entropy == "te" else 4.0


def saved_fp8_bytes_per_element(scn: Scenario) -> float:
    """Bytes per element of a GEMM input saved for backward in a quantized step."""
    return FP8_BLOCKWISE_SAVED_BYTES if scn.dtype == "fp8" and scn.fp8_recipe == "blockwise" else FP8_BYTES


def proj_saves_original_input(scn: Scenario) -> bool:
    """Whether the attention output projection keeps its 16-bit input instead of an FP8 copy
    (`_attention_output`). Megatron-Core (781e765818, core 0.15) sets it for every non-delayed FP8
    recipe and for FP4, with TE >= 2.6: the simulator's mxfp8 and nvfp4, and fp8 with
    `[precision] fp8_recipe = "current"` or "blockwise". Its "fp8" is otherwise per-tensor
    scaling, delayed (Megatron's default: a copy kept) or current -- but Megatron-Core refuses
    `layernorm` and `moe_act` recomputation under delayed scaling ("Delayed scaling does not
    support moe_act and layernorm recompute for fp8", transformer_config.py, with the same TE
    minimum), so an fp8 scenario recomputing either runs a non-delayed recipe and saves the
    original input too."""
    if scn.dtype in ("mxfp8", "nvfp4") or (scn.dtype == "fp8" and scn.fp8_recipe in ("current", "blockwise")):
        return True
    par = scn.parallel
    return (
        scn.dtype == "fp8"
        and par.recompute == "selective"
        and bool({"layernorm", "moe_act"} & set(par.recomputed_modules))
    )


def scenario_layer_activations(scn: Scenario, moe: bool) -> LayerActivationBytes:
    """`layer_activation_bytes` of one dense (or MoE) layer of this scenario: the one call the
    memory model and the offload costing (simulator/program.py) share."""
    par = scn.parallel
    return layer_activation_bytes(
        scn.model,
        par.micro_batch,
        tp=par.tp,
        cp=par.cp,
        sequence_parallel=par.sequence_parallel and par.tp > 1,
        recompute=par.recompute,
        flash_attention=scn.kernels.flash_attention,
        moe=moe,
        fp8=scn.dtype in ("fp8", "mxfp8", "nvfp4"),
        fp8_saved_bytes=saved_fp8_bytes_per_element(scn),
        etp=par.expert_tp,
        recompute_modules=par.recomputed_modules,
        fp8_moe_act_input=scn.memory.fp8_moe_act_input,
        proj_saves_original_input=proj_saves_original_input(scn),
        imbalance=scn.expert_load_imbalance,
        e5m6_attention_output=scn.memory.e5m6_attention_output,
    )


def korthikanti_per_layer_bytes(
    s: int, b: int, h: int, a: int, t: int = 1, *, sequence_parallel: bool = False, recompute: str = "none"
) -> float:
    """Korthikanti et al. 2022 Table 2 verbatim (GPT-style layer, no FlashAttention)."""
    if recompute == "full":
        return 2.0 * s * b * h / (t if sequence_parallel else 1)
    core = 0.0 if recompute == "selective" else 5.0 * a * s / h
    if t == 1:
        return s * b * h * (34 + core)
    if sequence_parallel:
        return s * b * h / t * (34 + core)
    return s * b * h * (10 + 24 / t + core / t)


# ----------------------------------------------------------------------------- schedule
# schedules whose in-flight activations are read off the stage's task order, chunk by chunk
CHUNK_WEIGHTED_SCHEDULES = ("zb-h1", "zb-v", "dualpipe", "dualpipev")


def stage_layer_counts(num_layers: int, pp: int) -> list[int]:
    """Layers per pipeline stage; the first L mod p stages get one more."""
    base, extra = divmod(num_layers, pp)
    return [base + (1 if i < extra else 0) for i in range(pp)]


def inflight_layer_microbatches(
    par: ParallelConfig, stage: int, stage_layers: int, chunk_layer_counts: list[float] | None = None
) -> float:
    """Layer-micro-batches whose activations stage `stage` holds at its peak.

    1F1B: min(p − i, m) micro-batches of the stage's layers (Narayanan et al. 2021 §2.2).
    Interleaved (v chunks): Megatron's warm-up count 2(p−i−1) + (v−1)p + 1 chunk-micro-batches
    of L_i/v layers; for i = 0 this is L_i·p·(1 + (p−1)/(p·v)) (Korthikanti §4.2.3).
    GPipe: all m micro-batches.
    Zero-bubble and DualPipe schedules: read off the stage's order (schedules.peak_inflight),
    each chunk weighted by its layers; a split backward keeps a micro-batch's activations until
    its W (the W needs the inputs of every linear layer — Qi et al. 2023 Table 1: B frees only
    the attention core). ZB-H1 holds p on every stage, ZB-V 2p half-stage chunks, DualPipe
    p + 1 and DualPipeV 2p + 1 chunks (the DualPipe README's table).
    EP all-to-all overlap (Megatron-Core's combined 1F1B): one layer more than without it, see
    `_combined_1f1b_extra`.
    """
    p, m, v = par.pp, par.microbatches_per_run, par.vp
    if par.schedule in CHUNK_WEIGHTED_SCHEDULES:
        weights = chunk_layer_counts or [stage_layers / v] * v
        return peak_inflight(stage_tasks(par.schedule, p, v, m, stage), weights)
    if par.schedule == "gpipe":
        return float(m) * stage_layers
    held = _held_microbatches(par, stage, 0)
    if _combined_1f1b_extra(par) and _held_microbatches(par, stage, 1) > held:
        return held * stage_layers + 1.0  # a combined F/B step follows the warm-up
    return held * stage_layers


def _combined_1f1b_extra(par: ParallelConfig) -> int:
    """1 when the stage runs Megatron-Core's combined 1F1B (EP all-to-all overlap), else 0.

    Its warm-up runs one more forward than the plain schedule (schedules.py
    get_pp_rank_microbatches: "we schedule one extra micro-batch forward step before the 1f1b
    stages"; pp = 1: combined_1f1b_schedule_for_no_pipelining runs F(1) alone, then F(i+1) with
    B(i)), so one more chunk-micro-batch's per-micro-batch buffers exist. Its layer activations do
    not double: each combined step interleaves the forward's layer j with the backward's layer
    L - 1 - j and releases that backward layer's saved state at once
    (model_chunk_schedule_plan.py TransformerModelChunkSchedulePlan.run: b_layer.release_state()),
    so at most one layer more than the chunk-micro-batches of the plain schedule is held
    (NVIDIA/Megatron-LM d0b3b775, Megatron-Bridge v0.5.0's Megatron-Core)."""
    return 1 if par.ep_comm_overlap and par.ep > 1 else 0


def _held_microbatches(par: ParallelConfig, stage: int, extra: int) -> float:
    """Chunk-micro-batches in flight (in micro-batches of the whole stage) with `extra` more
    warm-up forwards: 1F1B min(p - i + extra, m), interleaved Megatron's warm-up count + 1."""
    p, m, v = par.pp, par.microbatches_per_run, par.vp
    if v > 1 and par.schedule == "interleaved":
        return min(2 * (p - stage - 1) + (v - 1) * p + 1 + extra, m * v) / v
    return float(min(p - stage + extra, m))


def inflight_microbatches(par: ParallelConfig, stage: int) -> float:
    """Micro-batches in flight on a stage (for its per-micro-batch buffers): with the EP
    all-to-all overlap one more warm-up forward (`_combined_1f1b_extra`)."""
    p, m, v = par.pp, par.microbatches_per_run, par.vp
    if par.schedule in ("zb-h1", "zb-v", "dualpipe", "dualpipev"):
        return peak_inflight(stage_tasks(par.schedule, p, v, m, stage)) / v
    if par.schedule == "gpipe":
        return float(m)
    return _held_microbatches(par, stage, _combined_1f1b_extra(par))


# ----------------------------------------------------------------------------- parameters
@dataclass(frozen=True, slots=True)
class StageParams:
    """Parameters one GPU of a stage holds: replicated over dp·cp (dense) and over the
    expert-data-parallel ranks (experts, ParallelConfig.expert_dp)."""

    dense: float
    expert: float
    # of `dense`: the embedding, position embedding, final norm and output layer -- no Transformer
    # Engine GEMM weights, so FP8 training keeps them 16-bit only: no quantized copy beside them
    # (nor, under [precision] fp8_param_gather, instead of them)
    unquantized: float = 0.0


def stage_params(
    model: ModelSpec, par: ParallelConfig, stage: int, first_layer: int, num_layers: int
) -> StageParams:
    """Weights of one GPU for layers [first_layer, first_layer + num_layers) from
    flops.layer_params_per_rank -- the split the cost model uses too -- plus, on stage 0 and
    the last stage (stage = -1: neither), the embedding and the final norm / output layer."""
    dense = expert = 0.0
    for moe in (False, True):
        n = sum(1 for i in range(first_layer, first_layer + num_layers) if model.is_moe_layer(i) == moe)
        if n:
            part = flops.layer_params_per_rank(model, par, moe)
            dense, expert = dense + n * part.dense, expert + n * part.expert
    h, t = model.hidden, par.tp
    ends = 0.0
    if stage == 0:
        ends += model.vocab * h / t  # vocab-parallel word embeddings
        if model.position_embeddings:
            ends += model.seq_len * h
    if stage == par.pp - 1:
        ends += h  # final norm
        # the output layer; with tied embeddings and pp > 1 Megatron keeps a copy on the last stage
        if not model.tied_embeddings or par.pp > 1:
            ends += model.vocab * h / t
    return StageParams(dense=dense + ends, expert=expert, unquantized=ends)


def stage_params_of_chunks(
    model: ModelSpec, par: ParallelConfig, stage: int, chunks: list[list[int]]
) -> StageParams:
    """Weights of one GPU of `stage` holding these chunks (layer index lists): each chunk's
    layers, the embedding with the first virtual stage, the final norm and output layer with
    the last (one shared matrix when tied and both are on this stage). DualPipe's two chunks
    are two copies of the model's pieces: 2x the parameters (DeepSeek-V3 report §3.2.1)."""
    dense = expert = 0.0
    holds_embedding = False
    holds_output = False
    for c, layers in enumerate(chunks):
        if layers:
            part = stage_params(model, par, -1, layers[0], len(layers))
            dense += part.dense
            expert += part.expert
        holds_embedding |= prev_chunk(par.schedule, par.pp, par.vp, stage, c) is None
        holds_output |= next_chunk(par.schedule, par.pp, par.vp, stage, c) is None
    h, t = model.hidden, par.tp
    ends = 0.0  # embedding / final norm / output layer
    if holds_embedding:
        ends += model.vocab * h / t
        if model.position_embeddings:
            ends += model.seq_len * h
    if holds_output:
        ends += h
        if not (model.tied_embeddings and holds_embedding):
            ends += model.vocab * h / t
        if model.mtp_layers:  # Megatron places the MTP modules with the output layer
            mtp = flops.mtp_params_per_rank(model, par).scaled(model.mtp_layers)
            dense, expert = dense + mtp.dense, expert + mtp.expert
    return StageParams(dense=dense + ends, expert=expert, unquantized=ends)


# ----------------------------------------------------------------------------- footprint
def grad_reduce_bytes_per_param(dtype: str, grad_reduce_dtype: str = "") -> int:
    """Bytes per gradient element on the DP wire. Default: Megatron-LM reduces in fp32 for
    bf16/fp8 training (main_grad buffers, accumulate_allreduce_grads_in_fp32); fp16 keeps 16-bit
    gradients. `[kernels] grad_reduce_dtype = "bf16"` is Megatron-Core's --grad-reduce-in-bf16
    (DistributedDataParallelConfig.grad_reduce_in_fp32 = False), which halves the traffic -- and
    the memory: Megatron-Core's DDP allocates its gradient buffers in the reduce dtype
    (distributed_data_parallel.py: grad_dtype = fp32 if grad_reduce_in_fp32 else param dtype)."""
    if grad_reduce_dtype:
        return 4 if grad_reduce_dtype == "fp32" else 2
    return 2 if dtype == "fp16" else 4


def weight_bytes_per_param(dtype: str, fp8_param_gather: bool = False) -> float:
    """Bytes one GPU holds per GEMM weight element. Default: the 16-bit weight plus, in FP8
    training, Transformer Engine's quantized copies (QUANTIZED_WEIGHT_CACHE_BYTES).

    `fp8_param_gather` (Megatron-Core --fp8-param-gather, Megatron-Bridge's FP8 delayed / current
    scaling and MXFP8 presets, training/mixed_precision.py): the model is built under TE's
    quantized-parameter init, so a weight exists only as its quantized tensor -- no 16-bit copy;
    the fp32 master copy is the optimizer's (counted in OPTIMIZER_BYTES). Megatron-Core's DDP keys
    such parameters to a uint8 parameter buffer (distributed/param_and_grad_buffer.py
    group_params_for_buffers: param_dtype = torch.uint8 for quantized storage). Per-tensor FP8:
    the 1-byte Float8Tensor data (its Hopper transpose, made after each all-gather by TE's
    post_all_gather_processing, is left out here as it is for the cache). MXFP8: the row-wise and
    column-wise MXFP8Tensor data with their E8M0 block scales, both written by the distributed
    optimizer's cast (TE tensor/utils.py _cast_master_weights_to_fp8_mxfp8_scaling), and no
    separate parameter buffer (the all-gather borrows the gradient buffer, see
    param_gather_bytes_per_param)."""
    quantized = QUANTIZED_WEIGHT_CACHE_BYTES.get(dtype, 0.0)
    if fp8_param_gather:
        return quantized
    return WEIGHT_BYTES + quantized


def param_gather_bytes_per_param(dtype: str, fp8_param_gather: bool = False) -> float:
    """Bytes per parameter element the data-parallel (distributed-optimizer / ZeRO) parameter
    all-gather moves. Default: the 16-bit model weights (Megatron-Core's param buffer holds the
    parameters in their own dtype, param_and_grad_buffer.py). `fp8_param_gather` with per-tensor
    FP8: the uint8 buffer of Float8Tensor data, 1 byte. With MXFP8 the buffer is a BF16 view of
    the gradient buffer (param_and_grad_buffer.py: "For MXFP8 param: Create a shared buffer for
    param AG and grad RS", reuse_grad_buf_for_mxfp8_param_ag, which every Megatron-Bridge MXFP8
    preset sets): 2 bytes, re-quantized after the gather (copy_tensors_to_quantized_params)."""
    if fp8_param_gather and dtype == "fp8":
        return 1.0
    return float(WEIGHT_BYTES)


def _model_state_bytes(
    params: StageParams,
    par: ParallelConfig,
    dtype: str,
    optimizer_state_bytes: float = OPTIMIZER_BYTES,
    grad_reduce_dtype: str = "",
    fp8_param_gather: bool = False,
    sharded_grad_dtype: str = "",
    sharded_param_dtype: str = "",
) -> tuple[float, float, float, float]:
    """(weights, grads, optimizer, step_grad_copy) bytes for one GPU, sharded by the ZeRO stage over the shard
    group (HSDP: dp_shard of the dp ranks, the state replicated across dp / dp_shard replicas).
    `optimizer_state_bytes`: master weight + moments per parameter ([memory] exp_avg_dtype,
    exp_avg_sq_dtype: 12 with fp32 moments, 8 with BF16 ones as DeepSeek-V3 §3.3.3).
    `fp8_param_gather`: the GEMM weights held only in their FP8 form (weight_bytes_per_param).
    `sharded_grad_dtype` ([memory], ZeRO-2/3): "fp32" = PyTorch FSDP keeps only the fp32 shard.
    `sharded_param_dtype` ([memory], ZeRO-3): "fp32" = no 16-bit weight shard (PyTorch FSDP)."""
    d = par.shard_size * par.cp
    total = params.dense + params.expert
    expert_shard = max(par.expert_dp * par.shard_size // par.dp, 1)
    sharded = params.dense / d + params.expert / expert_shard  # this rank's 1/d share
    weight_bytes = weight_bytes_per_param(dtype, fp8_param_gather)
    if total > 0:
        # the embedding and output layer are no TE modules (Megatron-Core gpt_model.py builds them
        # as VocabParallelEmbedding and tensor_parallel.ColumnParallelLinear; DeepSeek-V3 report
        # §3.3.1 keeps "the embedding module, the output head" in their original precision): only
        # their 16-bit weights -- no quantized copy beside them, and none instead of them under
        # fp8_param_gather
        quantized_fraction = 1.0 - params.unquantized / total
        weight_bytes = weight_bytes * quantized_fraction + WEIGHT_BYTES * (1.0 - quantized_fraction)
    # fp16 keeps 16-bit gradients and the optimizer an fp32 copy of them (Megatron's "fp16 param,
    # fp16 grads: 4 + 16/d"); bf16/fp8 accumulate fp32 main grads ("6 + 12/d") unless the
    # gradient buffers are 16-bit (grad_reduce_dtype = "bf16"): then, as with fp16, the optimizer
    # casts its shard of them to fp32. Under ZeRO-2/3 that fp32 copy is counted beside the
    # 16-bit shard for the whole step (sharded_grad_dtype ""); PyTorch FSDP ("fp32") keeps the fp32
    # shard alone (below). Megatron's optimizers (stage 0/1) make it inside step() only and free it
    # before the next forward: `step_grad_copy`, which `memory_footprint` sets against the activations.
    grad_bytes = grad_reduce_bytes_per_param(dtype, grad_reduce_dtype)
    if par.zero >= 2 and sharded_grad_dtype == "fp32":
        # PyTorch FSDP (pytorch/pytorch@00ae0bc9, v2.0-era torch/distributed/fsdp/_runtime_utils.py
        # _post_backward_hook): the layer's unsharded 16-bit gradient is dropped (`flat_param.grad =
        # None`) once its reduce-scatter is issued; the reduce-dtype output shard is cast to the
        # parameter's fp32 dtype (_cast_grad_to_param_dtype) and summed into `_saved_grad_shard`,
        # which the optimizer reads as `.grad` (_finalize_params; torch 2.1's refactor into _reduce_grad
        # / _accumulate_sharded_grad keeps the cast and the accumulation). One fp32 shard, no 16-bit
        # one, no step-time copy.
        grad_bytes = GRAD_BYTES
    copy_bytes = GRAD_BYTES if grad_bytes < GRAD_BYTES else 0
    if par.zero >= 3 and sharded_param_dtype == "fp32":
        # PyTorch FSDP mixed precision (pytorch/pytorch v2.0-era fsdp/flat_param.py): the sharded
        # FlatParameter is fp32 -- the optimizer's parameter, counted in its master weight -- and the
        # 16-bit `_mp_shard` exists only from pre_unshard's cast to post_unshard's
        # _free_low_precision_sharded_param around each all-gather (in the prefetch buffers)
        weight_bytes -= WEIGHT_BYTES
    weights = weight_bytes * (sharded if par.zero >= 3 else total)
    grads = grad_bytes * (sharded if par.zero >= 2 else total)
    if par.zero >= 2:
        return weights, grads, (optimizer_state_bytes + copy_bytes) * sharded, 0.0
    optimizer = optimizer_state_bytes * (sharded if par.zero >= 1 else total)
    return weights, grads, optimizer, copy_bytes * (sharded if par.zero >= 1 else total)


def memory_footprint(scn: Scenario) -> MemoryReport:
    """Per-GPU memory of the most loaded pipeline stage (see the module docstring)."""
    model, par = scn.model, scn.parallel
    t, p = par.tp, par.pp
    sp = par.sequence_parallel and t > 1
    b = par.micro_batch
    s_local = model.seq_len / par.cp
    sbh = s_local * b * model.hidden

    dense_act = scenario_layer_activations(scn, moe=False)
    moe_act = scenario_layer_activations(scn, moe=True) if model.is_moe else dense_act
    kept = 1.0 - scn.memory.offload_activations  # the rest waits in host memory (issue 13)
    # Korthikanti §4.3: embedding dropout mask (first stage); final norm + output-layer inputs
    # and the logits the loss keeps (logit_bytes) of one micro-batch (last stage).
    sp_div = t if sp else 1
    embed_mask = (MASK_BYTES if model.dropout > 0 else 0) * sbh / sp_div
    output_inputs = 2 * ACT_BYTES * sbh / sp_div
    logits = logit_bytes(scn.kernels.cross_entropy) * s_local * b * model.vocab / t
    # DeepSeek-V3 MTP modules (report §2.2; run with the output layer, for the same one
    # micro-batch): the RMSNorm inputs of the hidden state and of the next token's embedding
    # (2·2h), the projection M's input (2h, a linear input), one layer like the last main layer,
    # and the shared output head's inputs and logits again
    mtp_layer = moe_act if model.is_moe_layer(model.layers - 1) else dense_act
    mm = saved_fp8_bytes_per_element(scn) if scn.dtype in ("fp8", "mxfp8", "nvfp4") else ACT_BYTES
    mtp_act = model.mtp_layers * (
        mtp_layer.stored * kept + (2 * ACT_BYTES + 2 * mm) * sbh / sp_div + output_inputs + logits
    )
    # communication buffers: SP gather + reduce-scatter staging, pipeline send/recv
    comm = (2 * ACT_BYTES * sbh if sp else 0.0) + (2 * ACT_BYTES * sbh / t if p > 1 else 0.0)

    layout = chunk_layers(
        par.schedule,
        model.layers,
        p,
        par.vp,
        embedding_slot=par.account_for_embedding_in_pipeline_split,
        loss_slot=par.account_for_loss_in_pipeline_split,
        layout=par.pipeline_layout,
    )
    stage_totals: list[float] = []
    stage_parts: list[dict[str, float]] = []
    for i, chunks in enumerate(layout):
        n_layers = sum(len(c) for c in chunks)
        params = stage_params_of_chunks(model, par, i, chunks)
        weights, grads, optimizer, step_grad_copy = _model_state_bytes(
            params,
            par,
            scn.dtype,
            scn.memory.optimizer_bytes_per_param,
            # under DeepSpeed's engine the key is only the wire's dtype (program.grad_buffer_reduce_dtype)
            "" if scn.kernels.stack == DEEPSPEED_STACK else scn.kernels.grad_reduce_dtype,
            scn.fp8_param_gather,
            scn.memory.sharded_grad_dtype,
            scn.memory.sharded_param_dtype,
        )
        if scn.memory.offload_optimizer:
            optimizer = step_grad_copy = 0.0  # master weights, moments and the step live on the host
        n_moe = sum(1 for c in chunks for layer in c if model.is_moe_layer(layer))
        if par.schedule in CHUNK_WEIGHTED_SCHEDULES:
            # each chunk weighted by the bytes of its own layers: DualPipe's rank 0 holds p
            # micro-batches of its first chunk (DeepSeek-V3: 3 dense + 1 MoE layer) and one of
            # its last (MoE layers), not p + 1 of the stage's average layer
            chunk_bytes = [
                sum(moe_act.stored if model.is_moe_layer(layer) else dense_act.stored for layer in c)
                for c in chunks
            ]
            activations = peak_inflight(
                stage_tasks(par.schedule, p, par.vp, par.microbatches_per_run, i), chunk_bytes
            )
        else:
            # 1F1B, interleaved, GPipe: every layer of the stage holds the same micro-batches
            layer_mbs = inflight_layer_microbatches(par, i, n_layers)
            per_layer = (
                dense_act.stored
                if n_layers == 0
                else (((n_layers - n_moe) * dense_act.stored + n_moe * moe_act.stored) / n_layers)
            )
            activations = layer_mbs * per_layer
        activations *= kept
        activations += max(dense_act.working, moe_act.working if n_moe else 0.0)
        holds_embedding = any(prev_chunk(par.schedule, p, par.vp, i, c) is None for c in range(len(chunks)))
        holds_output = any(next_chunk(par.schedule, p, par.vp, i, c) is None for c in range(len(chunks)))
        if holds_embedding:
            activations += embed_mask * inflight_microbatches(par, i)
        if holds_output:
            activations += output_inputs + logits + mtp_act
        buffers = comm
        # routed experts no other rank shares (expert-data-parallel group of one: dp = ep) are
        # not sharded, so never gathered: their weights and gradients are the rank's own
        # (`_model_state_bytes`; NeMo AutoModel leaves them out of FSDP, program.expert_shard_axis)
        gathered_expert = 1.0 if par.expert_dp * par.shard_size // par.dp > 1 else 0.0
        if par.zero >= 3 and n_layers and not par.reshard_after_forward:
            # FSDP with reshard_after_forward = false (and gradient sync on the last micro-batch
            # only, as torch.distributed.pipelining does): the stage's gathered 16-bit weights
            # and its unsharded fp32 gradient accumulators stay for the whole step
            total = params.dense + gathered_expert * params.expert
            buffers += (WEIGHT_BYTES + (FP16_GRAD_BYTES if scn.dtype == "fp16" else GRAD_BYTES)) * total
        elif par.zero >= 3 and n_layers:
            # FSDP prefetch: the current and the next layer's full (unsharded) weights, or the
            # gathered embedding / output layer when that is larger
            layer = flops.layer_params_per_rank(model, par, n_moe > 0)  # the largest of its layers
            gathered = layer.total - (1.0 - gathered_expert) * layer.expert
            embedding = model.vocab * model.hidden / t if holds_embedding or holds_output else 0.0
            buffers += WEIGHT_BYTES * max(2 * gathered, embedding)
        # Megatron's optimizer step runs after the last backward, when the activations and the
        # per-micro-batch buffers are freed: its fp32 gradient shard raises the peak only where it
        # outweighs them (NVIDIA/Megatron-LM d7288711 distrib_optimizer.py
        # _copy_model_grads_to_main_grads makes it, zero_grad(set_to_none) at the next
        # train_step's start frees it; see the module docstring and _model_state_bytes)
        optimizer += max(0.0, step_grad_copy - activations - buffers)
        allocated = weights + grads + optimizer + activations + buffers
        reserved = FRAMEWORK_BYTES + FRAGMENTATION_FRACTION * allocated
        parts = {
            "weights": weights,
            "grads": grads,
            "optimizer": optimizer,
            "activations": activations,
            "buffers": buffers,
            "reserved": reserved,
        }
        stage_parts.append(parts)
        stage_totals.append(allocated + reserved)
    worst = max(range(p), key=stage_totals.__getitem__)
    return MemoryReport(
        parts_bytes=stage_parts[worst],
        capacity_bytes=scn.gpu.hbm_bytes - scn.memory.headroom_bytes,  # usable: minus the headroom
        stage_peak_bytes=tuple(stage_totals),
    )
