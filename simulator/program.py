"""Workload and costing: what each pipeline stage does for one micro-batch, and how long it takes.

From a Scenario this builds, per pipeline stage and model chunk, the ops of one
micro-batch (DESIGN.md §2 "workload"): per layer the TP-split matmuls, attention
(FlashAttention or unfused), memory-bound ops, TP/CP/EP collectives, ZeRO-3 gathers,
the embedding on the first stage and logits + loss on the last; forward, backward
(input-gradient B and weight-gradient W parts) and recomputation. Each op is costed
once with the compute roofline (simulator/costs.py) and the comm model
(simulator/comm.py), and the results are summed into `Block`s of `Segment`s. The engine
only replays blocks: a better cost model changes numbers here, never the engine.

All micro-batches of a chunk are identical, so a layer is costed once and multiplied.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from . import flops as fl
from .comm import CommModel, bus_factor, default_comm_model
from .costs import (
    GEMM_PASSES,
    Device,
    attention_time_s,
    gemm_pass_shape,
    grouped_matmul_time_s,
    matmul_pass_times_s,
    matmul_time_s,
    memory_op_time_s,
    wgrad_output_bytes,
)
from .ep_dispatch import (
    FLEX_DISPATCHERS,
    RDMA_TABLE_ARCHITECTURES,
    TABLE_ARCHITECTURES,
    expected_groups_hit,
    kernel_algbw_bytes_per_s,
    round_robin_groups_hit,
)
from .errors import ConfigError
from .hostbound import (
    HOST_CALL_S,
    HOST_OP_S,
    HOST_SYNC_S,
    TORCH_OP_S,
    LayerHostOps,
    PairNode,
    issue_pipeline_s,
    moe_layer_host_ops,
    pair_issue_s,
    schedule_node_calls,
)
from .kernels import architecture, resolve_attention
from .memory import (
    WEIGHT_BYTES,
    grad_reduce_bytes_per_param,
    param_gather_bytes_per_param,
    scenario_layer_activations,
)
from .schedules import (
    PAIRED_SCHEDULES,
    SPLIT_BACKWARD_SCHEDULES,
    PassTimes,
    Task,
    chunk_layers,
    combined_1f1b,
    next_chunk,
    prev_chunk,
    stage_tasks,
)
from .specs import DEEPSPEED_STACK, FULL_ATTENTION, ModelSpec, ParallelConfig, Scenario, check_cp_comm_type
from .units import DTYPE_BYTES

ADAM_BYTES_PER_PARAM = (
    34  # fused Adam: fp32 grad r(4) + master r/w(8) + m r/w(8) + v r/w(8) + 16-bit param w(2) + grad zero(4)
)
GRAD_CLIP_BYTES_PER_PARAM = 4  # grad-norm clipping: one more fp32 read of every gradient (L2 norm)


# 16-bit gradient buffers (fp16 training, or grad_reduce_dtype = "bf16"): the optimizer first
# copies them into fp32 main grads (Megatron's _copy_model_grads_to_main_grads, main_grad.float():
# read 2 + write 4), and the buffer it zeroes is 2 bytes wide, not 4.
GRAD_16BIT_COPY_BYTES_PER_PARAM = 6 - 2
# fp16 dynamic loss scaling: every fp32 main grad is unscaled and checked for inf/NaN before the
# step (torch._amp_foreach_non_finite_check_and_unscale_; Megatron Float16OptimizerWithFloat16Params
# ._unscale_main_grads_and_check_for_nan): read 4 + write 4. BF16 needs no loss scale.
FP16_UNSCALE_BYTES_PER_PARAM = 8


# MAIN_GRAD_HOOK_NOTE: Megatron-LM 2021-22 (stack "megatron-2021") accumulates each micro-batch's
# weight gradients in a kernel of its own. Its weight-gradient GEMMs write a fresh 16-bit param.grad
# (no gradient accumulation fusion: the 2021 code has none, and at the 2022 sequence-parallel merge
# arguments.py:178-188@d898a8991d turns it off unless gradients accumulate in fp32, which fp16 does
# not by default), and the local DDP's backward hook then runs `param.main_grad.add_(param.grad)`
# for every parameter tensor (megatron/model/distributed.py:170-176@d898a8991d, :174@de7dc40f88,
# the sc21 scripts' commit): read main_grad and the 16-bit grad, write main_grad, one kernel per
# tensor, every micro-batch. (--DDP-impl torch accumulates the same way: autograd's AccumulateGrad
# adds into the existing param.grad.) A weight used twice on one stage (tied embedding and output
# layer) first has its two 16-bit gradients summed by autograd (read 2 + 2, write 2). Not on the
# stack's ZeRO-3 rows (Narayanan et al. Table 2 ran those on DeepSpeed, not Megatron's DDP).
TIED_GRAD_SUM_BYTES_PER_PARAM = 6


# DS_PIPE_NOTE: stack "megatron-deepspeed" = Megatron-LM's 2021-22 model code (Megatron-DeepSpeed's
# megatron/model, mpu) run by DeepSpeed's PipelineEngine. What the engine does differently, from
# the source (DeepSpeed 50893458, May 2022, v0.6 era; Megatron-DeepSpeed 0c58dbb3, Aug 2022):
# - gradient reduce after the last backward: PipelineEngine sets enable_backward_allreduce = False
#   ("We schedule the all-reduces", pipe/engine.py:74) and TrainSchedule appends ReduceTiedGrads,
#   ReduceGrads, OptimizerStep after the last step (pipe/schedule.py TrainSchedule.steps): nothing
#   of the data-parallel reduce hides behind the backward (Program.overlap_grad_reduce = False).
#   In 16 bits on the wire: allreduce_bucket casts to communication_data_type, fp16 under fp16 or
#   ZeRO, bf16 under bf16 (runtime/engine.py communication_data_type, allreduce_bucket), in
#   buckets of MEMORY_OPT_ALLREDUCE_SIZE = 5e8 elements. bf16 (+ the BF16_Optimizer's own
#   DP-sharded fp32 master, BLOOM's "zero = 1") all-reduces the whole gradient
#   (_bf16_reduce_grads -> buffered_allreduce_fallback), fp16 with ZeRO-1 reduces each rank's
#   partition (stage2 reduce_gradients(pipeline_parallel=True)); the 16-bit parameters are then
#   all-gathered inside the optimizer step (BF16_Optimizer.step all_gather_dp_groups, stage2
#   step), not overlapped with the next forward (Program.overlap_param_gather = False).
# - blocking point-to-point: p2p.send/recv are torch.distributed.send/recv with async_op False
#   (pipe/p2p.py:47-85), issued between the compute commands of TrainSchedule (RecvActivation,
#   SendGrad, ForwardPass / SendActivation, RecvGrad, BackwardPass), so each transfer holds the
#   stage's stream: costed as a pp_comm segment inside the sending block (the transfer ends with
#   the block; no asynchronous post). With tp > 1 the stage sends 1/tp of its output
#   (is_pipe_partitioned = is_model_parallel, PartitionedTensor) and the receiver rebuilds the full
#   tensor with an all-gather over the tensor-parallel group (PartitionedTensor.full,
#   runtime/utils.py: dist.all_gather) before its forward (activation) or backward (gradient).
# - gradient accumulation: fp16 grads accumulate in param.grad (autograd AccumulateGrad, read
#   2 + 2, write 2, as MAIN_GRAD_HOOK_NOTE); bf16's BF16_Optimizer.update_hp_grads runs
#   `hp_grad.add_(lp.grad.to(fp32))` for every parameter after every backward
#   (bf16_optimizer.py:390-400, pipe/engine.py _exec_backward_pass): a cast (read 2, write 4) and
#   an add (read 4 + 4, write 4), two kernels per tensor.
# - synchronous TP all-reduces and the qkv bias add of the 2021 Megatron layers (tp_comm_async,
#   QKV_BIAS_ADD_NOTE): Megatron-DeepSpeed's megatron/mpu/layers.py is the 2021 one.
# Left out (no source-backed size, or under 0.1% of the held-out steps): the rendezvous of a
# blocking send with its receiver's recv, the partition copy before a send, the fp32 flatten /
# cast / copy-back around each all-reduce bucket and clear_hp_grads, the per-step loss and
# overflow all-reduces of scalars.
DS_ALLREDUCE_BUCKET_PARAMS = 500_000_000  # MEMORY_OPT_ALLREDUCE_SIZE (runtime/pipe/engine.py@50893458)
DS_BF16_HP_GRAD_BYTES_PER_PARAM = WEIGHT_BYTES + 4 + 3 * 4  # cast to fp32, then add into hp_grad


def deepspeed_pipe(scn: Scenario) -> bool:
    """Whether DeepSpeed's PipelineEngine runs the step (stack "megatron-deepspeed", DS_PIPE_NOTE)."""
    return scn.kernels.stack == DEEPSPEED_STACK


def tp_comm_async(scn: Scenario) -> bool:
    """Whether the TP backward all-reduces run beside the GEMMs (`[kernels] tp_comm_async`).
    Not under Megatron-DeepSpeed: its ColumnParallelLinear is the 2021 one,
    copy_to_tensor_model_parallel_region then F.linear (megatron/mpu/layers.py:289-300@0c58dbb3,
    no LinearWithGradAccumulationAndAsyncAllreduce), whose input-gradient all-reduce is synchronous."""
    return scn.kernels.tp_comm_async and not deepspeed_pipe(scn)


def main_grad_hook_bytes_per_param(scn: Scenario) -> float:
    """HBM bytes per parameter and micro-batch of the megatron-2021 DDP hook's main_grad add
    (MAIN_GRAD_HOOK_NOTE) or of DeepSpeed's gradient accumulation (DS_PIPE_NOTE); 0 for stacks
    whose weight-gradient GEMMs accumulate themselves."""
    if deepspeed_pipe(scn):
        return DS_BF16_HP_GRAD_BYTES_PER_PARAM if scn.dtype == "bf16" else 3.0 * WEIGHT_BYTES
    if scn.kernels.stack != "megatron-2021" or scn.parallel.zero >= 3:
        return 0.0  # ZeRO-3 rows ran DeepSpeed's engine, which accumulates its own shard
    main = grad_reduce_bytes_per_param(scn.dtype, scn.kernels.grad_reduce_dtype)
    return 2.0 * main + WEIGHT_BYTES


def grad_buffer_reduce_dtype(scn: Scenario) -> str:
    """`[kernels] grad_reduce_dtype` as it sizes the gradient buffers the optimizer reads and the
    tied-embedding sync reduces. Under DeepSpeed's engine the key names only its
    communication_data_type, the dtype allreduce_bucket casts to for the DP wire (DS_PIPE_NOTE):
    the buffers stay fp16 `param.grad` or the BF16_Optimizer's fp32 hp_grads whatever it says."""
    return "" if deepspeed_pipe(scn) else scn.kernels.grad_reduce_dtype


def adam_bytes_per_param(scn: Scenario) -> float:
    """ADAM_BYTES_PER_PARAM with each moment read and written in its [memory] storage format
    (Megatron's precision-aware optimizer: BF16 moments move 2 + 2 bytes each instead of 4 + 4),
    plus the fp32 copy of 16-bit gradients and fp16's loss-scale unscaling."""
    mem = scn.memory
    out = ADAM_BYTES_PER_PARAM - 2 * (12 - mem.optimizer_bytes_per_param)
    # PyTorch FSDP ([memory] sharded_grad_dtype = "fp32") casts each reduce-scattered shard to fp32
    # in its post-backward hook, on the reduce-scatter's stream beside the backward: the optimizer
    # reads fp32 gradients and makes no copy (memory._model_state_bytes)
    fsdp_fp32_shard = scn.parallel.zero >= 2 and scn.memory.sharded_grad_dtype == "fp32"
    if grad_reduce_bytes_per_param(scn.dtype, grad_buffer_reduce_dtype(scn)) == 2 and not fsdp_fp32_shard:
        out += GRAD_16BIT_COPY_BYTES_PER_PARAM
    if scn.parallel.zero >= 3 and scn.memory.sharded_param_dtype == "fp32":
        out -= WEIGHT_BYTES  # PyTorch FSDP: Adam updates the fp32 shard only, no 16-bit param write
    if scn.dtype == "fp16":
        out += FP16_UNSCALE_BYTES_PER_PARAM
    return out


FP8_CAST_BYTES_PER_ELEMENT = 3  # read a 16-bit element, write its 8-bit copy
# Quantization traffic per GEMM-input element, by recipe (Transformer Engine):
#  fp8   per-tensor scaling: read 16-bit, write one 8-bit copy on Blackwell; on Hopper TE's fused
#        cast_transpose also writes the transposed 8-bit copy the wgrad/dgrad GEMMs need, because
#        Hopper's FP8 tensor-core GEMMs take only K-major (TN) operands (TE
#        `is_non_tn_fp8_gemm_supported()` is true from sm100 on): + 1 byte (HOPPER_FP8_TRANSPOSE_BYTES);
#  mxfp8 1x32 blocks with E8M0 scales (OCP MX v1.0): blocks run along the reduction axis, so TE
#        writes a row-wise and a column-wise copy: read 2 + 2 x (1 + 1/32);
#  nvfp4 16-element blocks with E4M3 scales + a per-tensor FP32 scale (NVIDIA, arXiv 2509.25149
#        §4): an amax pass (read 2) before quantizing (read 2) to two 4.5-bit copies (2 x 0.5625),
#        with a 16x16 random Hadamard transform folded into the weight-gradient input's pass.
QUANT_BYTES_PER_ELEMENT = {"fp8": 3.0, "mxfp8": 2 + 2 * (1 + 1 / 32), "nvfp4": 2 + 2 + 2 * (0.5 + 1 / 16)}
# TE_MULTI_STREAM_NOTE: the eager expert MLP (Megatron-Core TEGroupedMLP; every Megatron-Bridge MoE
# recipe sets moe_grouped_gemm = True, e.g. models/qwen/qwen3_moe_bridge.py:63 and
# models/gpt_oss/gpt_oss_bridge.py:68@fcbb6031) runs Transformer Engine GroupedLinear
# (transformer_engine/pytorch/module/grouped_linear.py@5671fd36, TE v2.12):
# - GEMMs: general_grouped_gemm (cpp_extensions/gemm.py:288) -> te_general_grouped_gemm ->
#   nvte_multi_tensor_gemm (csrc/extensions/gemm.cpp:565; common/gemm/cublaslt_gemm.cu:1049-1068),
#   which outside Hopper-with-NVTE_USE_CUTLASS_GROUPED_GEMM (no Megatron-Bridge recipe sets it)
#   calls multi_stream_cublas_gemm (cublaslt_gemm.cu:967): one cuBLASLt GEMM per expert, GEMM i on
#   compute stream i % nvte_get_num_compute_streams() = 4 (common/util/multi_stream.cpp:53). The same
#   code and stream count in every release v2.10 .. v2.16 (4220403e, the 26.06 pin).
# - quantization: tex.split_quantize of the input (forward, :149) and of the output gradient
#   (backward, :351/:358) -> multi_tensor_quantize_impl (csrc/extensions/cast.cpp:105-150), which
#   fuses the experts into one multi-tensor cast only for delayed-scaling FP8 quantizers and
#   otherwise quantizes each expert's rows with its own kernel: MXFP8 pays one kernel per local
#   expert, and so does "fp8" with [precision] fp8_recipe = "current" (Float8CurrentScalingQuantizer
#   is not a delayed Float8Quantizer, so with_fused_kernel is false); delayed "fp8" is one fused
#   nvte_multi_cast_transpose. NVFP4 has its own grouped path (split_quantize_nvfp4_impl, one group amax).
# TE's fused grouped MLP (kernels.fused_grouped_mlp) runs grouped-tensor kernels instead.
# SHARED_OVERLAP_NOTE: Megatron-Core --moe-shared-expert-overlap ([parallel] shared_expert_overlap;
# Megatron-LM @a2d7d6748a9a, 2025-12-31). moe_layer.py hands the SharedExpertMLP to the all-to-all
# dispatcher (set_shared_experts) instead of running it before the router. Forward
# (token_dispatcher.py MoEAlltoAllTokenDispatcher): dispatch_preprocess calls pre_forward_comm, which
# makes the shared expert's own stream wait for the main stream once (the router's input is ready) and
# queues the SP all-gather / gate there; after the dispatch all-to-all is issued dispatch_postprocess
# queues fc1 + activation, after the combine all-to-all is issued combine_postprocess queues fc2 and
# the SP reduce-scatter (shared_experts.py linear_fc1_forward_and_act, linear_fc2_forward,
# post_forward_comm), all on that side stream; only get_output, after the combine's unpermute, makes
# the main stream wait for it. So the shared expert's GEMMs may run anywhere beside the main stream's
# dispatch all-to-all, expert GEMMs and combine all-to-all of the same micro-batch: the comm it hides
# is at most its own compute, and compute beside compute gains nothing. Backward: autograd runs each
# node on its forward stream, and set_tensor_grad_fn_sequence_sr gives the all-to-all outputs' and the
# side-stream tensors' grad_fns the highest sequence number, so the all-to-alls' backwards are issued
# first and the shared expert's dgrad and wgrad (one TE Linear backward each) run beside them. Costed
# per pass as exposed EP comm = max(0, comm - shared) (_shared_expert_overlap) plus the SM
# interference of the hidden part (sm_interference_s at ep_sm_fraction, as the EP overlap): each
# pass is never slower than off while the EP kernels hold fewer than all SMs (specs refuses all);
# the step can give a little back through the host-issue pipeline (docs/accuracy.md). The zero-bubble
# schedules defer the weight gradients (W), so their backward hides behind the shared dgrad only.
# Not costed: the shared expert's TP all-gather/reduce-scatter also moving to the side stream.
# CUTEDSL_EPILOGUE_NOTE: with MXFP8 on Blackwell the fused grouped MLP of the 26.06+ recipes (Megatron-
# Bridge cutedsl_fused_grouped_mlp: use_transformer_engine_op_fuser, and NVTE_CUTEDSL_FUSED_GROUPED_MLP
# = 1 from scripts/performance/perf_plugins.py:308-309@fcbb6031) runs cuDNN front-end CuTe DSL grouped
# GEMMs whose epilogues do the elementwise work between the two GEMMs (Transformer Engine
# transformer_engine/pytorch/ops/fused/forward_grouped_mlp.py@4220403e, the 26.06 pin:
# ForwardGroupedMLP_CuTeGEMMSwiGLU_MXFP8, sm 10.x only): forward, grouped_gemm_glu_wrapper_sm100 writes
# fc1's pre-activation (c_tensor, bf16, kept for backward) and the GLU output times the routing
# probability already quantized to MXFP8, rowwise and columnwise (d_dtype float8_e4m3fn, d_tensor /
# d_col_tensor with their scales) -- fc2's input, so no activation kernel and no fc2-input
# quantize; backward (backward_grouped_mlp.py@4220403e, grouped_gemm_dglu_wrapper_sm100): fc2's dgrad
# GEMM reads the saved pre-activation (c_tensor), applies the GLU derivative and the probability
# gradient (dprob_tensor) and writes fc1's output gradient in MXFP8, rowwise and columnwise -- no
# activation-backward kernel and no quantize of fc1's output gradient. What stays: one
# tex.group_quantize of fc1's input (forward) and of fc2's output gradient (backward). The epilogues'
# extra traffic (forward: the MXFP8 write of the GLU output; backward: the pre-activation read and the
# MXFP8 write of the 2x-wide gradient instead of a 16-bit write of the narrow one) is charged as a
# memory pass beside the GEMM, no launch: an upper bound (the epilogue of a persistent GEMM overlaps
# the next tile's math while the kernel is compute-bound).
# EXPERT_GEMM_OVERHEAD_NOTE: a level-2 residual of the eager path above (TE_MULTI_STREAM_NOTE), not a
# kernel: GPUEfficiency.expert_gemm_overhead_s per per-expert cuBLASLt GEMM (each local expert's fc1
# and fc2, forward, dgrad and wgrad), charged in series on the compute stream as a segment of its
# own (EXPERT_GEMM_OVERHEAD_NAME) after each GroupedLinear's GEMMs. What it stands for, per GEMM, is
# the part of multi_stream_cublas_gemm the kernel model does not see: the host loop that builds each
# GEMM's cuBLASLt descriptors, runs its heuristic and launches it on one of the 4 streams while the
# GPU waits for it (TE's per-GEMM work is serial on the host inside one pybind call, after the
# dispatcher's sync has emptied the queue), and the 4-stream event fences. Published brackets
# (docs/calibration.md, "Level 2"): NVIDIA/TransformerEngine#3134 (SM100, NVFP4, from an idle
# GPU: 25-33 us per GEMM beyond the GEMMs), TE#2045 (H100, the whole call <= 11.6-25.3 us per GEMM),
# Megatron-Bridge's HybridEP nsys profile (16 H100 Qwen3-30B-A3B: ~12.5 us of GPU idle per expert
# GEMM), the cuBLAS documentation (a heuristic-cache miss: tens of us), NVIDIA/raft#1736 (~10 us per
# cuBLASLt call with per-call descriptors). None prices it alone, so it is fitted per stack and
# architecture on the MoE rows (benchmarks/calibrate.py --moe-only). Not charged where the path does
# not run per-expert host work: TE's fused grouped MLP (`fused_grouped_mlp`, grouped-tensor kernels;
# full-iteration graphs of MoE steps need it), a CUDA graph of the MoE layer (`cuda_graph_modules`
# "moe": the replay issues no per-GEMM host work), dense layers and the shared experts (one GEMM each).
EXPERT_GEMM_OVERHEAD_NAME = "eager expert GEMM overhead"
CUTEDSL_EPILOGUE_DTYPES = ("mxfp8",)
CUTEDSL_EPILOGUE_ARCHITECTURES = ("blackwell",)  # is_supported: compute capability 10.x
TE_GEMM_STREAMS = 4
PER_EXPERT_QUANTIZE_DTYPES = ("mxfp8",)
HOPPER_FP8_TRANSPOSE_BYTES = 1.0
# Megatron-Core's unfused vocab-parallel cross-entropy (megatron/core/tensor_parallel/
# cross_entropy.py, cross_entropy_loss_fusion = False), bytes per logit: forward .float() (read 2,
# write 4), max (read 4), subtract the max in place (4 + 4), exp in place (4 + 4), sum (4),
# divide in place (4 + 4) = 38 in 6 kernels, the softmax kept for backward; backward multiplies
# it by the loss gradient in place (4 + 4) and casts back to 16-bit (4 + 2) = 14 in 2 kernels.
# PyTorch F.cross_entropy under bf16 autocast (runs in fp32): cast (2 + 4), log_softmax (two reads
# and a write, 12), nll_loss (a gather) = 18 in 3 kernels; backward: nll_loss_backward writes a
# zeroed fp32 gradient (4), log_softmax_backward (4 + 4 + 4), cast to 16-bit (4 + 2) = 22 in 4.
# Megatron-Core's fused ("native") cross-entropy (megatron/core/fusions/fused_cross_entropy.py
# @d98e8a64, cross_entropy_loss_fusion = True, cross_entropy_fusion_impl = "native"): the same
# steps in @jit_fuser functions (torch.compile on PyTorch >= 2.2, megatron/core/jit.py), each
# reading its inputs and writing what it returns or mutates once: calculate_logits_max (read 2,
# write the fp32 copy 4, max), calculate_predicted_logits (subtract, exp in place and sum: 4 + 4),
# calculate_cross_entropy_loss (divide in place: 4 + 4) = 22 in 3 kernels; backward
# calculate_gradients (read the fp32 softmax 4, write it back mutated 4, return its 16-bit cast 2)
# = 10 in 1 kernel. Measured on H100 (kind cross_entropy_fused_*): 75% / 56% of copy speed.
# Transformer Engine's cross-entropy (cross_entropy_fusion_impl = "te": te.pytorch
# parallel_cross_entropy, transformer_engine/common/triton/cross_entropy.py, TE 2.1 .. 2.17):
# online_softmax_kernel reads the 16-bit logits (2) for each row's max and sum, cross_entropy_kernel
# reads them again and writes the gradient in place in their dtype (2 + 2) = 6 in 2 kernels;
# backward: element_mul_kernel scales it in place by the per-token loss gradient (2 + 2) = 4 in 1
# (Megatron's loss gradient is per token, so TE's grad_output == 1 shortcut never applies). One
# Triton program per row: streams at copy speed (Liger-Kernel's kernel of the same design measures
# copy speed on H100, kernels.toml). TE 2.18 (01bbe3ee) keeps an fp32 gradient instead; no
# Megatron-Bridge container through 26.08 (TE 2.17.1, 4329ff84) ships it.
# (forward bytes, forward kernels, backward bytes, backward kernels) per logit:
CE_PASSES = {
    "unfused": (38.0, 6, 14.0, 2),
    "torch": (18.0, 3, 22.0, 4),
    "fused": (22.0, 3, 10.0, 1),
    "te": (6.0, 2, 4.0, 1),
}
# the measured memory kind (simulator/kernels.py MEMORY_KINDS) of each implementation's passes
CE_KINDS = {
    "unfused": ("cross_entropy_fwd", "cross_entropy_bwd"),
    "torch": ("copy", "copy"),
    "fused": ("cross_entropy_fused_fwd", "cross_entropy_fused_bwd"),
    "te": ("copy", "copy"),
}
# the measured memory kind of each [kernels] norm (MEMORY_KINDS without _fwd/_bwd; "" = copy speed)
NORM_KINDS = {"fused": "", "torch": "torch_layer_norm"}
# SQUARED_RELU_NOTE: Nemotron-4's relu(x)^2 over the [tokens, ffn/tp] fc1 output, by `[kernels]
# squared_relu` (specs.SQUARED_RELU_IMPLS), as (forward passes, kernels, backward passes, kernels),
# a pass moving one 16-bit copy of that tensor.
# "eager": torch.pow(F.relu(x), 2) as plain PyTorch ops, NeMo 2's NemotronConfig activation
#   (nemo/collections/llm/fn/activation.py@v2.2.0 and @v2.3.0, "# @torch.jit.script # remove until
#   we have serialization"). Forward relu and pow: 2 + 2 passes in 2 kernels. Backward: autograd's
#   pow_backward is `grad * (exp * self.pow(exp - 1))` (pytorch torch/csrc/autograd/
#   FunctionsManual.cpp@002ca671), and self.pow(1.0) is `out.copy_(base)` (aten/src/ATen/native/
#   Pow.cpp@c5f36d75 pow_Tensor_Scalar_out): the copy 2, the scalar product 2, the product with the
#   gradient 3; relu's threshold_backward reads the gradient and the saved output, writes one: 3.
#   10 passes in 4 kernels. Liger-Kernel's H100 timings of these eager ops (benchmark/data/
#   all_benchmark_data.csv@ead96b61, relu_squared provider torch = relu then torch.square, which
#   ATen runs as at::pow(self, 2); M = 4096, N = 4096 / 8192 / 16384, bf16): backward 0.1263 /
#   0.2355 / 0.4527 ms against forward 0.0532 / 0.0979 / 0.1855 ms, ratios 2.37 / 2.40 / 2.44:
#   the 10 : 4 passes at one bandwidth (2.5), not twice the forward's bytes (2.0).
# "compiled": the same function under @jit_fuser = torch.compile (PyTorch >= 2.2), as Megatron-Core
#   defines it (megatron/training/activations.py@core_r0.8.0, megatron/core/activations.py@
#   core_v0.14.0; megatron/core/jit.py) and NeMo 1's megatron models, whose activation_to_func maps
#   "squared-relu" to nemo/collections/nlp/modules/common/megatron/utils.py squared_relu (@jit_fuser
#   = torch.compile, v2.0.0rc0 .. v2.3.0): Inductor fuses each direction into one pointwise kernel,
#   forward read x and write y (2 passes), backward read the output gradient and one saved tensor,
#   write the input gradient (3). Liger-Kernel's fused Triton relu_squared, one kernel each way, runs
#   those 2 and 3 passes at the eager forward's bandwidth (same CSV, provider liger, N = 16384:
#   0.0944 / 0.1371 ms, 2.84 / 2.94 TB/s; eager forward 2.89 TB/s).
SQUARED_RELU_PASSES = {"eager": (4.0, 2, 10.0, 4), "compiled": (2.0, 1, 3.0, 1)}
# Elementwise work Megatron-Core runs as eager PyTorch ops, as (forward passes, forward kernels,
# backward passes, backward kernels) over the tensor named; a pass moves one 16-bit copy of it.
# GPT-OSS's clamped quick-GeGLU (activation = "clamped_quick_geglu"): weighted_bias_quick_geglu_impl
# (megatron/core/fusions/fused_bias_geglu.py, used by MLP and TEGroupedMLP) clamps the two halves
# of the fc1 output before its fused kernel: chunk (views), x_glu.clamp and x_linear.clamp (each
# reads and writes half) and torch.cat (reads and writes all): 4 passes over the [tokens, 2f] fc1
# output in 3 kernels. Backward: cat's gradient is views; each clamp's gradient reads the incoming
# gradient and its saved input and writes one (3 half passes each: 3); chunk's gradient
# concatenates the two halves (2): 5 passes in 3 kernels.
CLAMPED_GLU_PASSES = (4.0, 3, 5.0, 3)
# YaRN RoPE with an attention factor (rope_mscale != 1): TE's fused RoPE takes no mscale, so
# Megatron-Core's apply_rotary_pos_emb falls back to _apply_rotary_pos_emb_bshd
# (megatron/core/models/common/embeddings/rope_utils.py: "mscale=... is not supported by TE's fused
# RoPE. Using unfused implementation."). Per element of q and k: t*cos (2 passes), rotate_half's
# negation and cat (1 + 2), *sin (2), the add (3) and the final cat with the empty pass-through
# part (2) = 12 passes in 6 kernels; backward: the gradients of the two products (2 + 2), of the
# negation (1), chunk's cat (2) and the sum of the two paths (3) = 10 passes in 5 kernels. (Fused
# RoPE: 2 passes each way, what "rope" costs otherwise.)
UNFUSED_ROPE_PASSES = (12.0, 6, 10.0, 5)
# `[kernels] attention_padding = "unpad"`: llm-foundry's flash_attn_fn (llmfoundry/models/layers/
# attention.py@5e85bd62d) runs every batch through flash-attn's bert_padding
# (flash_attn/bert_padding.py@v2.4.2), padded or not. Forward: unpad_input once each for q, k and v
# (mask sum, nonzero, max().item(), cumsum, pad: 7 small kernels on the b·s mask, then
# IndexFirstAxis = torch.gather with a stride-0 index view: read 2 + write 2 bytes per element);
# pad_input of the output (IndexPutFirstAxis: torch.zeros 2, output[indices] = values 2 + 2: 2
# kernels). Backward: IndexPutFirstAxis' grad_output[indices] (2 + 2, 1 kernel); each
# IndexFirstAxis' torch.zeros + scatter_ (2, 2 + 2: 2 kernels). Bytes per 16-bit element of the
# (q + k + v) tensors and of the output, and kernels: (q/k/v fwd, out fwd, fwd kernels,
# q/k/v bwd, out bwd, bwd kernels).
BERT_PADDING_BYTES = (4.0, 6.0, 3 * 8 + 2, 6.0, 4.0, 3 * 2 + 1)
# unpad_input also waits on the GPU twice per call (bert_padding.py@v2.4.2:109-110): torch.nonzero
# needs its output's size on the host and `seqlens_in_batch.max().item()` copies the longest
# sequence back. From the first of the six syncs (q, k, v) until flash_attn_varlen_func is issued
# the GPU runs only the tiny mask kernels, so it idles for the syncs' round trips and the host's
# torch calls after the first sync: unpad of q: max, cumsum, pad, gather (IndexFirstAxis); of k
# and v: sum, nonzero, max, cumsum, pad, gather each; the varlen kernel call = 17. Every forward
# pass of the layer runs them, a full recompute again (the backward has no sync: the indices are
# saved). (device-to-host syncs, torch calls after the first) per forward.
BERT_PADDING_HOST = (6, 17)
UNPAD_HOST_SEGMENT = "attention unpad host syncs"
# Attention sinks (GPT-OSS: a learnable softmax offset per head, Megatron-Core softmax_type =
# "learnable"; Transformer Engine hands it to cuDNN, fused_attn_f16_arbitrary_seqlen.cu
# set_sink_token / set_dsink_token). The forward adds one exp per query row inside the fused
# kernel (nothing apart). The backward's graph adds the sink gradient on top of the "dO * O ->
# softmax_sum" chain: sub_sink = sink - Stats, exp_sink = exp(sub_sink), per_token_grad =
# exp_sink * rowsum(dO * O), dSink = reduce(per_token_grad) over batch and queries
# (NVIDIA/cudnn-frontend include/cudnn_frontend/node/scaled_dot_product_flash_attention.h@3929da2,
# "DSINK_TOKEN"): a pointwise-and-reduction pass reading the fp32 softmax statistics and the fp32
# row sums of each (batch, head, query) row, 4 + 4 bytes, into h floats.
SINK_GRAD_NOTE = "cuDNN SDPA backward's dSink chain (cudnn-frontend scaled_dot_product_flash_attention.h)"
SINK_GRAD_BYTES_PER_ROW = 8.0
# Expert biases (linear_bias): TEGroupedMLP._apply_bias (megatron/core/transformer/moe/experts.py
# :251-268@2edffadb5, the same loop in every container's Megatron-LM, 0d8e0714 .. cd4afffa) adds each
# token copy's fc2 bias, scaled by its routing probability, after the grouped GEMM (fc1's bias is
# added inside TE's grouped GEMM), one local expert at a time: `t + b * p` per expert, torch.cat,
# .to(dtype). The probabilities are in the router's dtype: 16-bit unless moe_router_dtype = "fp32"
# (router.py:101-106@2edffadb5; TE fused_topk_with_score_function returns probs "in the same dtype
# as the logits", transformer_engine/pytorch/router.py:127@366798ef; GPT-OSS sets no router dtype),
# so every product is 16-bit and the final .to() is a no-op. Per element of the [tokens*top_k,
# hidden] output: b*p (write 2), the add (2 + 2 + 2), cat (2 + 2) = 12 bytes in 2 kernels per local
# expert + 1; backward: split's gradient concatenates t's gradients (2 + 2), b*p's gradient is a
# product and a row sum for the bias (2 + 2, 2) and for the probability (2 + 2, 2) = 16 bytes in 4
# kernels per local expert + 2 (the two concatenations). (forward bytes, per-expert kernels, fixed
# kernels, backward bytes, per-expert kernels, fixed kernels) per element:
EXPERT_BIAS_BYTES = (12.0, 2, 1, 16.0, 4, 2)
# Megatron-Core's all-to-all dispatcher sorts the received tokens by local expert when a rank holds
# more than one (dispatch_postprocess "Permutation 2", token_dispatcher.py:712-743@2edffadb5) and
# restores the order before the combine (combine_preprocess "Unpermutation 2", :758-776):
# sort_chunks_by_idxs (moe_utils.py:533-570), with moe_permute_fusion TE's fused
# moe_sort_chunks_by_index: one kernel reading and writing the [tokens*top_k, hidden] tensor; its
# backward is the inverse sort. HybridEP and DeepEP hand the tokens over already grouped by expert
# (no second sort). (forward passes, kernels, backward passes, kernels) per sort:
SORT_CHUNKS_PASSES = (2.0, 1, 2.0, 1)
# Quantized experts pad each expert's token rows to the GEMM alignment (MXFP8 32, FP8 16: fp8_utils.py
# get_fp8_align_size:168-173@2edffadb5; 256 for the fused grouped MLP): TEGroupedMLP.forward calls
# Fp8Padding on the permuted tokens and Fp8Unpadding on the fc2 output (experts.py:345-352@2edffadb5)
# unless the router or HybridEP already padded (moe_router_padding_for_quantization, default False
# and False in every Megatron-Bridge recipe; HybridEP pads inside its dispatch when fp8/fp4:
# token_dispatcher.py:1040-1041; moe_utils.skip_routed_expert_padding@d0b3b775). TE copies with
# one fused kernel each (tex.fused_multi_row_padding / _unpadding, fp8_padding.py:42 and
# fp8_unpadding.py:41@366798ef) unless every expert's count is already a multiple of the alignment
# -- which routed counts are not (forced balancing draws random logits per token: RandomSTE,
# moe_utils.py:1194-1215), so the copy always runs. Backward: the unpadding's gradient pads, the
# padding's unpads. Per [tokens*top_k, hidden] tensor: 2 + 2 passes forward in 2 kernels, the
# same backward.
QUANT_PADDING_PASSES = (4.0, 2, 4.0, 2)
QUANTIZED_EXPERT_DTYPES = ("fp8", "mxfp8", "nvfp4")
# Biased MoE models run the bias-dropout-add unfused: TEGroupedMLP asserts "bias_dropout_fusion is
# not supported in TEGroupedMLP when add_bias_linear=True" (experts.py:173-175@2edffadb5; GPT-OSS:
# GPTOSSBridge sets bias_dropout_fusion = False, gpt_oss_bridge.py:74@Megatron-Bridge c8101293).
# _bias_dropout_add_func (megatron/core/fusions/fused_bias_dropout.py:11-59@2edffadb5) then runs
# `x + bias` as its own kernel before the residual add (dropout at p = 0 launches nothing): on the
# attention output (linear_proj's bias) one more read and write of the [tokens, hidden] tensor.
UNFUSED_BIAS_ADD_PASSES = (2.0, 1, 0.0, 0)
# QKV_BIAS_ADD_NOTE: Megatron-LM 2021-22 (stack "megatron-2021") adds the qkv projection's bias
# apart from its GEMM: LinearWithGradAccumulationAndAsyncCommunication.forward runs
# `output = torch.matmul(total_input, weight.t())` then `output = output + bias`
# (megatron/mpu/layers.py:233-235@d898a8991d); the 2021 ColumnParallelLinear calls F.linear on the
# 3-D [s, b, h] input (layers.py:284@de7dc40f88), which PyTorch's at::linear of that time ran as
# matmul then `output.add_(bias)` (addmm only for 2-D inputs). fc1's bias goes
# into bias_gelu and the row-parallel biases into bias_dropout_add (skip_bias_add), so only qkv
# pays it: one read and one write of its output; its gradient is the bias-grad reduction
# (layers.py:301 `grad_output.sum(dim=0)`, kernels.bias_grad = "separate").
# QK_NORM_NOTE: Qwen3's per-head q_norm/k_norm (Megatron-Bridge qwen3_bridge.py:52 and
# qwen3_moe_bridge.py:52@c8101293 set qk_layernorm = True): SelfAttention applies q_layernorm and
# k_layernorm to the query and key heads after the qkv projection, before RoPE
# (megatron/core/transformer/attention.py:1488-1492@2edffadb5), two TE RMSNorm kernels that read
# and write q and k (backward: twice that, as the layer norms are costed).
# Context-parallel ring attention merges each step's partial result into the running one (TE
# flash_attn_fwd_out_correction / the dq and dk,dv accumulations): per step and element, read the
# step's 16-bit partial, read and write the 16-bit accumulator, and a 16-bit rescaled temporary
# written and read back: 5 x 2 bytes.
CP_CORRECTION_BYTES_PER_ELEMENT = 10.0
# CP_COMM_NOTE: `[parallel] cp_comm_type`, the context-parallel attention as each implementation
# runs it (load-balanced causal chunks r and 2cp-1-r on rank r in all of them):
# - "p2p": Transformer Engine AttnFuncWithCPAndKVP2P (Megatron-Core's default --cp-comm-type):
#   cp kernels per layer, K/V passed around the ring behind them, partial outputs merged per step
#   (CP_CORRECTION_BYTES_PER_ELEMENT). Every step i >= 1 has ranks of both kinds (ranks < i run
#   the second half of their queries against the whole received block, ranks >= i all queries
#   against its first half), so the ring advances at the slower kernel of the two each step
#   (cp_ring_attention_s).
# - "allgather": TE AttnFuncWithCPAndKVAllGather ("KV all-gather between CP ranks is exposed",
#   citing the Llama 3 paper, arXiv 2407.21783 Sec. 3.3.2; transformer_engine/pytorch/attention/
#   dot_product_attention/context_parallel.py@d0067d0d): K and V all-gathered before the
#   attention (gather_along_first_dim, exposed), again in the backward, and the dK/dV of the whole
#   sequence reduce-scattered after it (reduce_scatter_along_first_dim, 16-bit, exposed). Each
#   rank runs two kernels, one per local chunk j in {r, 2cp-1-r}: its s/(2cp) queries against the
#   gathered K/V prefix of (j+1) chunks, bottom-right causal (no merge). Memory passes
#   (CP_AG_PASSES): the index_select reorder of the gathered K/V (forward and backward) and of dK/dV,
#   the dK/dV zero-fill and the per-chunk add_ into their prefix, the q / out / dout chunk copies.
# - "a2a": TE AttnFuncWithCPAndQKVOA2A (DeepSpeed-Ulysses, Jacobs et al. 2023): q, k and v
#   all-to-all'd from sequence to head shards before the attention (flash_attn_a2a_communicate;
#   each tensor's layout copy and chunk reorder overlap the next one's all-to-all, the all-to-alls
#   themselves run one after another, exposed), one causal kernel over the whole sequence on
#   heads/cp heads, the output all-to-all'd back; the backward the same for dout and dq, dk, dv.
#   Copies (CP_A2A_PASSES): per tensor a layout copy before the all-to-all and a reorder after.
# - "torch-allgather" / "torch-alltoall": PyTorch's experimental context_parallel
#   (torch/distributed/tensor/experimental/_attention.py, _templated_ring_attention and
#   _templated_ring_attention_backward, read at pytorch 0123248a; its options default to
#   convert_to_f32 = True and enable_load_balance = True, the latter true by default in Nov 2024 as
#   well: pytorch issue #141429) with set_rotate_method("allgather"), torchtitan's default
#   (config_manager.py:359-375@9dec370a), or "alltoall". The same ring of SDPA calls on the same
#   sub-blocks as "p2p"; around them: (1) the K/V the ring exchanges are the ones SDPA receives,
#   which torchtitan's Llama expands to the query heads first (repeat_kv, models/llama/model.py:
#   201-202@9dec370a); (2) "allgather": one all-gather of the concatenated K/V issued before the
#   first step and waited for before the second, so only the first (causal) kernel hides it, in
#   the forward and again in the backward; "alltoall": one permute per step, hidden behind that
#   step's kernel; (3) each step's output merged in fp32 by eager ops (_SDPAMerger, TORCH_CP_*);
#   (4) dQ, dK, dV accumulated in fp32, the dK/dV accumulator passed to the next rank each step by
#   an fp32 permute (all_to_all_single) hidden behind the next step's kernel, the last one waited
#   for after the loop (exposed).
# Kernel times come from the kernel model at each sub-block's shape, nothing is fitted.
# Bytes per element of the rank's attention output O (b·s_local·heads·d) and of its exchanged
# K+V (KV = 2·b·s_local·heads·d, expanded to the query heads), from the eager ops of torch's ring
# (fp32 = 4 B, 16-bit = 2 B); the fp32 log-sum-exp ops (one value per row, 1/d of O) are left out:
# forward, once: the first block to fp32 (read 2 + write 4) and the result back (read 4 + write 2)
TORCH_CP_MERGE_ONCE_BYTES = 12.0
# forward, per step i >= 1 on O (_SDPAMerger._merge_one): block to fp32 (6), out - block (12),
# sigmoid(dlse) * diff (8), out - that (12) = 38 on a whole block (ranks >= i); ranks < i merge a
# half block (19 per O element) and rebuild the whole fp32 output by _partial_update's torch.cat
# (read 4 + write 4): 27. Half the ranks of each kind (the ring's mean).
TORCH_CP_MERGE_STEP_BYTES = (38.0 + 27.0) / 2
TORCH_CP_MERGE_STEP_KERNELS = 8  # to, to(lse), sub, sub, sigmoid, mul, sub, logsigmoid (+ cat)
# per step and K/V element: torch.cat([key.flatten(), value.flatten()]) of the 16-bit K/V (2 + 2)
TORCH_CP_KV_CAT_BYTES = 4.0
# backward, per element of dQ and of dK+dV: zeros_like fp32 (4) at the start, to(16-bit) (4 + 2)
# at the end; step 0 adds the 16-bit step gradient into the fp32 one (read 4 + 2, write 4 = 10)
TORCH_CP_GRAD_ONCE_BYTES = 4.0 + 6.0 + 10.0
# per step i >= 1: a whole `+=` (10) or _partial_update's half add (5) and torch.cat (8): 13; the
# mean 11.5 on dQ and dK/dV alike
TORCH_CP_GRAD_STEP_BYTES = (10.0 + 13.0) / 2
# per step (step 0 too) and dK+dV element: torch.cat of the fp32 accumulators before the permute
TORCH_CP_DKV_CAT_BYTES = 8.0
TORCH_CP_GRAD_STEP_KERNELS = 6  # dq add, dk add, dv add, (partial cats), dkv cat
# TE all_gather: 16-bit passes (read + write = 2 per element copied) over the gathered K+V (KVg =
# 2·b·s·kv_heads·d) and the rank's queries/outputs O: forward: K/V reorder (index_select) 1 pass of
# KVg; q chunk select().contiguous() and out copy_ 2 of O. Backward: K/V reorder 1, dK/dV zeros
# (a write: 1/2 pass), dK/dV reorder 1 of KVg; the per-chunk add_ (read both, write: 3/2 pass)
# over the chunks' prefixes ((2cp+1)/(2cp) of KVg); q, out, dout selects and the dq copy: 4 of O.
CP_AG_PASSES = (1.0, 2.0, 2.5, 1.5, 4.0)  # (fwd KVg, fwd O, bwd KVg, bwd prefix, bwd O)
ATTENTION_BYTES = 2.0  # attention's q, k, v, out and gradients: 16-bit even in FP8 training
# TE a2a: per tensor all-to-all'd, one 16-bit copy before (movedim + contiguous into [cp, ...]) and
# one after (reorder_seq_chunks_for_a2a_before_attn / _after_attn: index_select): 2 passes
CP_A2A_PASSES = 2.0
TN_ONLY_FP8_ARCHITECTURES = ("hopper",)  # FP8 GEMM operands must be K-major before sm100
# TE_LAYER_NOTE: the memory-bound kernels of one Megatron-Core + Transformer Engine layer (stack
# "megatron-core", the default), audited against Megatron-LM core_r0.8.0 (the README weak-scaling
# and NeMo 24.07 rows) and TransformerEngine v1.7 (issue 12, teops; docs/accuracy.md "One
# Megatron-Core + TE layer, op by op"), as (passes, kernels) over the tensor named, a pass being one
# 16-bit copy of it. Where the generic op table differs:
# - norm backward (TELayerNormColumnParallelLinear's tex.layernorm_bwd / rmsnorm_bwd):
#   ln_bwd_tuned_kernel reads dz and x and writes dx and per-CTA dgamma/dbeta parts, then
#   ln_bwd_finalize_tuned_kernel reduces the parts (common/layer_norm/ln_bwd_kernels.cuh@v1.7;
#   rmsnorm/rmsnorm_bwd_kernels.cuh the same): 3 passes in 2 kernels, not 4.
# - GeLU backward: F.gelu's gelu_backward (or bias_gelu_impl's bias_gelu_back,
#   megatron/core/fusions/fused_bias_gelu.py) reads the gradient and the input and writes one:
#   3 passes in 1 kernel, not 4 in 2.
# - fused RoPE backward: TE's fused_apply_rotary_pos_emb (rotary_pos_embedding.py:244-246
#   @core_r0.8.0 with apply_rope_fusion) reads the gradient and writes one: 2 passes, not 4.
# - residual (bias-dropout-add, megatron/core/fusions/fused_bias_dropout.py@core_r0.8.0,
#   torch.compile'd by megatron/core/jit.py on PyTorch >= 2.2): forward reads x and the residual
#   and writes the sum (3 passes) and, with dropout, the 1-byte bool mask; backward, the sum's
#   gradient is the incoming one for both inputs (no kernel), dropout's gradient multiplies it by
#   the mask (read 2 + 1, write 2 bytes per element) and autograd sums the residual stream's two
#   gradients where it forks into the next norm and the residual (read 2 + 2, write 2): 3 passes
#   in 1 kernel without dropout, 3 + 2.5 in 2 with it -- not 6.
# - GQA query copy: SelfAttention.get_query_key_value_tensors (attention.py:496-526@core_r0.8.0)
#   splits the [s, b, ng, (np/ng + 2) hn] qkv output with TE's _SplitAlongDim and reshapes the
#   query to [s, b, np, hn], which with np/ng > 1 heads per group is no view: a copy of q (read +
#   write). Backward, _SplitAlongDim (pytorch/attention.py:1543@v1.7) returns the gradient as a view
#   only when dq, dk, dv are adjacent slices of one buffer (MHA's packed sbh3d layout); with GQA dq
#   comes apart from dkv and it concatenates them: read + write of q + 2 kv.
# TE_FP8_NORM_NOTE: with delayed-scaling FP8 (the only recipe of TE 1.x), LayerNormLinear (the qkv
# and dense fc1 inputs of the TE layer spec) runs the norm with an FP8 output -- ln_out_dtype uint8,
# layernorm_fwd_fp8 (module/layernorm_linear.py:131-146@v1.7; :126@v1.8, :137@v1.9): read 2, write
# 1 byte per element, no cast kernel -- and its backward transposes that FP8 output for the wgrad
# GEMM (tex.fp8_transpose, :590@v1.7; read 1, write 1) on Hopper, whose FP8 GEMMs take K-major
# operands only. TE Linear (proj, fc2) casts and transposes its input in one kernel
# (fp8_cast_transpose_fused, linear.py:135@v1.7), as every GEMM input is costed otherwise.
TE_NORM_BWD = (3.0, 2)
GELU_BWD = (3.0, 1)
TE_ROPE_BWD = (2.0, 1)
RESIDUAL_FORK_ADD_PASSES = 3.0
DROPOUT_MASK_BYTES = 1.0  # torch bool mask per element
# DDP_HOOK_NOTE: Megatron-Core's DDP hook adds each parameter's gradient to its main_grad
# (distributed/distributed_data_parallel.py:215-225@core_r0.8.0) unless the parameter carries
# grad_added_to_main_grad -- which only TE's GEMM weights set (fuse_wgrad_accumulation,
# module/layernorm_linear.py:689-699@v1.7). TE returns the norm's dgamma (and dbeta) and the bias
# gradients as ordinary gradients, and the router is a plain F.linear: one main_grad.add_ kernel per
# such tensor, every micro-batch (read main_grad and the grad, write main_grad). Tiny tensors: the
# kernel's fixed cost is what they add.
# EMBEDDING_SYNC_NOTE: with tied embeddings and pp > 1 the word-embedding table lives on the first
# stage (the lookup) and a copy on the last (the output layer). After the data-parallel gradient
# reduction, before the optimizer, the two copies' gradients are all-reduced over the two ranks
# (Megatron-Core core/distributed/finalize_model_grads.py _allreduce_word_embedding_grads:
# all_reduce(weight.main_grad, group=embedding_group), in its main_grad dtype; Megatron-LM 2021
# megatron/optimizer/optimizer.py allreduce_embedding_grads; DeepSpeed's pipeline engine
# _exec_reduce_tied_grads). Not overlapped: the step's global grad-norm sync waits for it. The
# V-shaped schedules keep both ends on one rank, where the sum is local (TIED_GRAD_SUM_BYTES_PER_PARAM).
# EMBEDDING_GRAD_NOTE: the word-embedding weight gradient (Megatron-Core, any release): the lookup is
# F.embedding (VocabParallelEmbedding.forward, tensor_parallel/layers.py:233-234@core_r0.8.0), whose
# backward allocates the whole [V/tp, h] gradient as at::zeros in the 16-bit grad dtype and scatters
# the token rows into it (pytorch aten/src/ATen/native/cuda/EmbeddingBackwardKernel.cu
# embedding_backward_cuda_kernel@d2999467): one write of the table. The embedding is no TE module,
# so its gradient is not accumulated in a GEMM: Megatron-Core DDP's hook adds it to main_grad
# (distributed/distributed_data_parallel.py:221-224@core_r0.8.0: read main_grad and the grad, write
# main_grad), every micro-batch. With the output layer tied to it on the same stage (pp = 1),
# LanguageModule sets zero_out_wgrad (language_module.py:63-67), so the output layer's backward
# -- whose wgrad GEMM itself accumulates into main_grad -- returns a torch.zeros dummy gradient of
# the table (layers.py:503-514), autograd sums the two 16-bit gradients (read 2 + 2, write 2) and
# the hook adds the sum to main_grad (zero_out_wgrad lets it through). Learned position embeddings
# are a table of their own, the same way.


# Current scaling ([precision] fp8_recipe = "current"): Transformer Engine's
# Float8CurrentScalingQuantizer::quantize_impl (transformer_engine/pytorch/csrc/quantizer.cpp @ d0067d0d)
# runs nvte_compute_amax over the 16-bit input (one more read), computes the scale, then
# nvte_quantize_v2 (the cast above); delayed scaling takes the scale from the amax history and updates
# it inside the cast. quantize_with_amax skips the pass where the producer already gave the amax; not
# modelled (counted as the plain quantize).
FP8_CURRENT_AMAX_READ_BYTES = 2.0
# ... and those are three kernel launches on the stream per quantized tensor, not one:
# nvte_compute_amax_with_config, nvte_compute_scale_from_amax (a one-block kernel) and
# nvte_quantize_v2 (quantizer.cpp Float8CurrentScalingQuantizer::quantize_impl:519-537@5671fd36,
# TE v2.12; the same three calls at d0067d0d), each paying the kernel's fixed latency; an eager
# GroupedLinear runs them per local expert (multi_tensor_quantize_impl quantizes each expert with
# its own quantizer, cast.cpp:105-150@5671fd36). Delayed scaling and MXFP8 quantize in one kernel.
FP8_CURRENT_KERNELS_PER_TENSOR = 3


# Blockwise scaling ([precision] fp8_recipe = "blockwise", Hopper): Transformer Engine's
# Float8BlockQuantizer::quantize (pytorch/csrc/quantizer.cpp@5671fd36) is one nvte_quantize_v2 call;
# for the 1x128 activation and gradient tiles that is quantize_transpose_vector_blockwise
# (common/transpose/quantize_transpose_vector_blockwise.cu@5671fd36), one kernel that reads the
# 16-bit tensor once and writes the row-wise FP8 copy with one fp32 scale per 1x128 tile and the
# column-wise (transposed) copy with its own scale per 128 elements of a column -- the two copies are
# quantized separately from the 16-bit source, since their 1-D blocks cover different elements
# (TE docs/features/low_precision_training/fp8_blockwise_scaling/fp8_blockwise_scaling.rst@d0067d0d,
# "Handling transposes"): 2 + 2 x (1 + 4/128) bytes per element. The block amax is taken inside the
# kernel (no amax pass, no scale kernel: "does not need any scale synchronization"). Forward it
# quantizes the GEMM input (row-wise for fprop, column-wise kept for wgrad), backward the output
# gradient (row-wise for dgrad, column-wise for wgrad), as TE's Linear does for every recipe.
# The 128x128 weight blocks (quantize_transpose_square_blockwise) are quantized once per weight
# update like per-tensor FP8's cached weight casts, which the layer costing does not charge either.
FP8_BLOCKWISE_QUANT_BYTES_PER_ELEMENT = 2 + 2 * (1 + 4 / 128)
# The recipes whose eager GroupedLinear quantizes each local expert with its own kernel(s)
# (multi_tensor_quantize_impl fuses only delayed-scaling Float8Quantizers: cast.cpp:105-150@5671fd36)
PER_EXPERT_FP8_RECIPES = ("current", "blockwise")


def quant_kernels_per_tensor(device: Device, fp8_recipe: str = "delayed") -> int:
    """Kernel launches Transformer Engine runs to quantize one GEMM input for this recipe."""
    return FP8_CURRENT_KERNELS_PER_TENSOR if device.dtype == "fp8" and fp8_recipe == "current" else 1


def quant_bytes_per_element(device: Device, fp8_recipe: str = "delayed") -> float:
    """HBM bytes moved per GEMM-input element to quantize it for this recipe on this GPU."""
    if device.dtype == "fp8" and fp8_recipe == "blockwise":
        return FP8_BLOCKWISE_QUANT_BYTES_PER_ELEMENT  # both copies written by the one kernel
    quant = QUANT_BYTES_PER_ELEMENT.get(device.dtype, 0.0)
    if device.dtype == "fp8" and fp8_recipe == "current":
        quant += FP8_CURRENT_AMAX_READ_BYTES
    if device.dtype == "fp8" and architecture(device.gpu.name) in TN_ONLY_FP8_ARCHITECTURES:
        quant += HOPPER_FP8_TRANSPOSE_BYTES
    return quant


# EP all-to-all kernels occupy SMs while they overlap compute (DeepSeek-V3, arXiv 2412.19437
# §3.2.1: 20 of the H800's 132 SMs for dispatch/combine); the compute they overlap runs on the
# rest. How many: `[kernels] ep_comm_sms`, by default the dispatcher's (specs.DEFAULT_EP_COMM_SMS).
# FLEX_PERMUTE_NOTE: the flex dispatchers (DeepEP, HybridEP) permute on the receiving side. The
# all-to-all dispatcher permutes before sending: it reads each of its tokens once and writes a copy
# per chosen expert, (1 + top_k) rows per token. HybridEP's dispatch kernel sends a token once per
# destination rank into the receiver's NVLink buffer, and -- unless moe_permute_fusion_into_hybridep
# (default False; in Megatron-Bridge only the Nemotron-H recipes set it) -- a standalone permute
# kernel then "reads from NVLink buffer, writes to pre-allocated args output tensors" (DeepEP
# hybrid-ep @34152ae2 csrc/hybrid_ep/executor/executor.cu dispatch_postprocess), one row per
# (token, local expert); the combine's unpermute reads those rows and writes one per (token, source
# rank) into the combine buffer (combine_preprocess). DeepEP writes the received tokens to recv_x and
# Megatron-Core permutes them locally (token_dispatcher.py _DeepepManager
# get_permuted_hidden_states_by_experts). Per token routed from a rank: (rank hits + top_k) rows,
# rank hits being the expected destination ranks of its top-k experts (ep_dispatch.expected_groups_hit).
# HYBRIDEP_METADATA_NOTE: before every forward dispatch (the backward reuses the cached handle)
# HybridEP builds its routing metadata on the GPU (deepseek-ai/DeepEP branch hybrid-ep @34152ae2, the
# commit Megatron-Bridge's docker/Dockerfile.ci pins as DEEPEP_COMMIT from v0.5.0 on;
# csrc/hybrid_ep/hybrid_ep.cu HybridEPBuffer::metadata_preprocessing): it all-gathers every EP rank's
# [tokens, experts] boolean routing map (executor.cu allgather_routing_map: NCCL
# all_gather_into_tensor across nodes, a custom NVLink all-gather kernel inside one), then runs the
# preprocessing kernel over the gathered map (writing the sparse-to-dense map, int32 per token and
# rank, and the local-expert routing map, a boolean per received token and local expert), the
# permute preprocessing (a cooperative kernel writing the int32 row-id map per received token and
# local expert: extension/permute.cu permute_preprocessing) and the tokens-per-expert padding kernel
# (executor.cu metadata_preprocess_core) -- all before the dispatch, and before its host sync in
# the blocking mode. Costed as the EP all-gather of the maps plus those kernels' bytes.
HYBRIDEP_METADATA_KERNELS = 3
HYBRIDEP_SPARSE_TO_DENSE_BYTES = 4.0  # int32 per (token, rank)
HYBRIDEP_ROW_ID_BYTES = 4.0  # int32 per (received token, local expert)

# Router: fp32 logits written, read by softmax/top-k, probabilities written (Megatron's router
# in moe_router_dtype fp32); per token and expert.
ROUTER_BYTES_PER_LOGIT = 3 * 4


# ----------------------------------------------------------------------------- blocks
@dataclass(frozen=True, slots=True)
class Segment:
    """A stretch of one block spent in one category (SPEC §4), with what it did."""

    category: str
    name: str
    duration_s: float
    flops: float = 0.0
    message_bytes: float = 0.0


@dataclass(frozen=True, slots=True)
class Block:
    """One phase (forward, backward, ...) of one micro-batch on one model chunk."""

    segments: tuple[Segment, ...]

    @property
    def duration_s(self) -> float:
        return sum(s.duration_s for s in self.segments)

    def seconds(self, category: str) -> float:
        return sum(s.duration_s for s in self.segments if s.category == category)


def _block(parts: Iterable[Segment]) -> Block:
    """Merge consecutive parts of the same (category, name); drop empty ones."""
    merged: list[Segment] = []
    for part in parts:
        if part.duration_s <= 0:
            continue
        last = merged[-1] if merged else None
        if last is not None and last.category == part.category and last.name == part.name:
            merged[-1] = _plus(last, part)
        else:
            merged.append(part)
    return Block(tuple(merged))


def _plus(a: Segment, b: Segment) -> Segment:
    return Segment(
        a.category, a.name, a.duration_s + b.duration_s, a.flops + b.flops, a.message_bytes + b.message_bytes
    )


def _scaled(seg: Segment, n: float) -> Segment:
    """The part repeated n times (n identical layers)."""
    return Segment(seg.category, seg.name, seg.duration_s * n, seg.flops * n, seg.message_bytes * n)


@dataclass(frozen=True, slots=True)
class ChunkProgram:
    stage: int
    chunk: int
    num_layers: int
    forward: Block
    backward: Block  # B then W, recomputation first
    backward_input: Block  # B only (zero-bubble schedules)
    backward_weight: Block  # W only
    grad_bucket_s: tuple[float, ...]  # DP gradient reduction per bucket, in backward order
    param_gather_s: tuple[float, ...]  # ZeRO-1/2 parameter AllGather per bucket
    params_local: float  # parameters this GPU holds for the chunk (TP/EP-sharded)
    # DualPipe's overlapped F&B (schedules.Task.paired): the forward and the whole backward of
    # this chunk when each runs beside the other direction's pass; None = as unpaired
    forward_paired: Block | None = None
    backward_paired: Block | None = None
    # bytes per GPU of each bucket's collective (traces' message_bytes), parallel to the above
    grad_bucket_bytes: tuple[float, ...] = ()
    param_gather_bytes: tuple[float, ...] = ()


@dataclass(frozen=True, slots=True)
class PairHost:
    """One eager MoE layer as DualPipe's F&B pair runs it (`overlap_pair`): the CPU time to issue
    the ops of its passes with their device-to-host syncs (hostbound.py), their GPU seconds other
    than the EP all-to-all, and the all-to-all's before the pair hides any; each for the whole
    layer (forward, recomputation, backward) and, `*_f_s`, for its forward alone."""

    issue_s: float
    gpu_s: float
    ep_s: float
    issue_f_s: float
    gpu_f_s: float
    ep_f_s: float


def overlap_pair(
    forward: Block,
    backward: Block,
    sm_fraction: float,
    host: PairHost | None = None,
    n_layers: int = 0,
    zero3: Zero3Pair | None = None,
) -> tuple[Block, Block]:
    """DualPipe's F&B chunk (DeepSeek-V3 report §3.2.1, Fig. 4): a forward and a backward of two
    micro-batches run together, so the EP dispatch/combine of each hides behind the other's
    compute. The pair's EP communication stays exposed only beyond the pair's compute; the
    hidden part slows that compute by the SMs the communication kernels take (as
    `_Coster._overlap_ep`; DeepSeek gives 20 of the H800's 132 SMs to communication).

    Host-bound MoE layers (`host`, one for each of the chunk's `n_layers` MoE layers, all costed
    alike): the pair's CPU thread issues both micro-batches' ops of a layer between one
    dispatcher sync and the next, so the layer takes max(that issue time, its GPU time in the
    pair: its own work, its all-to-all at the pair's exposed fraction and the SM interference of
    the hidden rest), as the combined 1F1B's `EpPair.host_s`. This replaces the passes' own
    `host_bound` segments (computed against the unhidden all-to-all, so more traffic lowered
    them). Of the layer's time, the forward takes max(its own ops' issue time, its GPU time),
    capped so the backward keeps at least its GPU time; the backward the rest. Monotone: both
    grow with the layer's GPU and all-to-all time, so more traffic never shortens the pair.
    ZeRO-3 MoE layers (`zero3`): their transfers re-costed as the pair runs them (Zero3Pair)."""
    ep_s = forward.seconds("ep_comm") + backward.seconds("ep_comm")
    paired_host = host is not None and n_layers > 0
    if ep_s <= 0 and not paired_host:
        return forward, backward
    compute_s = forward.seconds("compute") + backward.seconds("compute")
    exposed = max(0.0, ep_s - compute_s)
    keep = exposed / ep_s if ep_s > 0 else 1.0
    hidden = ep_s - exposed

    def scaled(block: Block) -> tuple[Segment, ...]:
        return tuple(
            replace(seg, duration_s=seg.duration_s * keep) if seg.category == "ep_comm" else seg
            for seg in block.segments
            if not (paired_host and seg.category == "host_bound")  # the MoE layers' own: replaced
            and not (zero3 is not None and seg.name in PAIRED_TRANSFER_NAMES)  # re-costed below
        )

    extra_f: list[Segment] = []
    extra_b: list[Segment] = []
    pair_wait_s: tuple[float | None, float | None] = (None, None)  # the passes keep their own
    if ep_s > 0:
        extra_b.append(Segment("compute", "F&B overlap interference", sm_interference_s(hidden, sm_fraction)))
    if host is not None and paired_host:
        gpu_s = host.gpu_s + host.ep_s * keep + sm_interference_s(host.ep_s * (1 - keep), sm_fraction)
        gpu_f_s = host.gpu_f_s + host.ep_f_s * keep
        wait_s = max(0.0, host.issue_s - gpu_s)
        wait_f_s = min(max(0.0, host.issue_f_s - gpu_f_s), wait_s)
        label = "host issue (DualPipe F&B pair, sync to sync)"
        if wait_f_s > 0:
            extra_f.append(Segment("host_bound", label, n_layers * wait_f_s))
        if wait_s > wait_f_s:
            extra_b.append(Segment("host_bound", label, n_layers * (wait_s - wait_f_s)))
        pair_wait_s = (wait_f_s, wait_s - wait_f_s)
    transfers_f, transfers_b = _zero3_paired(zero3, keep, *pair_wait_s, n_layers)
    extra_f += transfers_f
    extra_b += transfers_b
    return Block((*scaled(forward), *extra_f)), Block((*scaled(backward), *extra_b))


# Transformer Engine userbuffers (`--tp-comm-overlap`, TE's default per-layer methods,
# transformer_engine/pytorch/module/base.py initialize_ub @v1.7): "ring_exchange" for qkv_fprop,
# fc1_fprop, proj_dgrad, fc2_dgrad — the sequence-parallel input arrives one TP shard at a time
# and the GEMM runs as tp chunks of T/tp rows; "pipeline" for proj_fprop, fc2_fprop — the GEMM
# runs as num_splits = 4 chunks of T/4 rows whose outputs are reduce-scattered as they finish;
# "bulk" (the qkv/fc1 dgrad and wgrad) leaves the GEMM whole. The chunk GEMMs go to up to
# _NUM_MAX_UB_STREAMS = 3 compute streams, so up to 3 chunks share the SMs at once.
UB_RING_EXCHANGE = {("qkv", "fprop"), ("fc1", "fprop"), ("attn out", "dgrad"), ("fc2", "dgrad")}
UB_PIPELINE = {("attn out", "fprop"), ("fc2", "fprop")}
UB_PIPELINE_SPLITS = 4
UB_MAX_STREAMS = 3


def ub_gemm_chunks(name: str, phase: str, tp: int) -> int:
    """How many chunks TE's userbuffer overlap cuts this layer GEMM into (1 = whole)."""
    if (name, phase) in UB_RING_EXCHANGE:
        return tp
    if (name, phase) in UB_PIPELINE:
        return UB_PIPELINE_SPLITS
    return 1


def ub_split_gemm_s(device: Device, m: int, n: int, k: int, chunks: int) -> float:
    """An m x n x k GEMM run as `chunks` row chunks of m/chunks rows, up to UB_MAX_STREAMS of
    them at once: chunks / c launches of a (c * m/chunks)-row GEMM's worth of tiles."""
    c = min(UB_MAX_STREAMS, chunks)
    rows = max(1, m // chunks)
    return chunks / c * matmul_time_s(device, c * rows, n, k)


# Which GEMM each of a layer's TP collectives overlaps under Transformer Engine's default
# userbuffer methods (module/base.py initialize_ub, unchanged v1.7 @4e7caa1c .. v2.2 @c55e425a),
# per transformer-layer GEMM: the forward AllGather feeds qkv/fc1 (ring_exchange), the forward
# ReduceScatter drains attn out/fc2 (pipeline); in the backward the AllGather of the output
# gradient feeds the attn out/fc2 dgrad (ring_exchange), the re-gather of the normed input runs
# beside the qkv/fc1 dgrad and the input gradient's ReduceScatter beside the qkv/fc1 wgrad
# (bulk). Each overlap call ends with the main stream waiting for its own comm and GEMM streams
# (comm_gemm_overlap.cpp split_overlap_ag / split_overlap_rs / bulk_overlap @c55e425a), so a
# collective hides behind its own GEMM only.
UB_AG_FEEDS = ("qkv", "fc1")
UB_RS_DRAINS = ("attn out", "fc2")
UB_AG_FEEDS_DGRAD = tuple(n + " dgrad" for n in UB_AG_FEEDS)  # the bulk overlaps' GEMMs
UB_RS_DRAINS_DGRAD = tuple(n + " dgrad" for n in UB_RS_DRAINS)  # the backward ring exchanges'


# UB_FP8_AG_NOTE: with FP8, Transformer Engine's userbuffers hold the AllGathered tensors in FP8
# (initialize_ub: fp8_buf for the all-gather layers qkv_fprop, qkv_dgrad, proj_dgrad, fc1_fprop,
# fc1_dgrad, fc2_dgrad; a uint8 buffer when use_fp8 and fp8_buf, module/base.py @v1.7
# 4e7caa1c / @v2.2 c55e425a): the normed input and the output gradient are gathered as one-byte
# FP8, the ReduceScatters (proj/fc2 fprop, qkv/fc1 wgrad) stay 16-bit. Per-tensor FP8 only
# (delayed / current scaling); other recipes keep the 16-bit message.
def ub_fp8_allgather(scn: Scenario) -> bool:
    """True when the layer's userbuffer AllGathers move one-byte FP8 (UB_FP8_AG_NOTE)."""
    par = scn.parallel
    return (
        par.tp_comm_overlap
        and par.tp > 1
        and par.sequence_parallel
        and scn.dtype == "fp8"
        and scn.fp8_recipe in ("delayed", "current")
    )


def _gemm_near(parts: list, i: int, step: int) -> Segment | None:
    """The first GEMM (a compute segment with FLOPs) from parts[i] on in direction `step`."""
    j = i + step
    while 0 <= j < len(parts):
        if parts[j].category == "compute" and parts[j].flops > 0:
            return parts[j]
        j += step
    return None


def ub_tp_pair(parts: list, compute_parts: list, i: int, backward: bool) -> tuple[str, Segment] | None:
    """(userbuffer method, the GEMM it overlaps) of the TP collective parts[i], or None when no
    userbuffer GEMM is beside it. The layer lists a column-parallel GEMM's collectives before it
    and a row-parallel GEMM's after it (_tp_entry / _tp_exit), in both passes."""
    name = parts[i].name
    if not backward:
        if "allgather" in name:
            g = _gemm_near(parts, i, 1)
            return ("ring_exchange", g) if g is not None and g.name in UB_AG_FEEDS else None
        if "reducescatter" in name:
            g = _gemm_near(parts, i, -1)
            return ("pipeline", g) if g is not None and g.name in UB_RS_DRAINS else None
        return None
    if "(beside dgrad)" in name or "(beside wgrad)" in name:
        g = _gemm_near(parts, i, 1)
        if g is None or g.name not in UB_AG_FEEDS_DGRAD:
            return None
        if "(beside dgrad)" in name:
            return ("bulk", g)
        wgrad = g.name.removesuffix(" dgrad") + " wgrad"
        w = next((p for p in compute_parts if p.name == wgrad and p.flops > 0), None)
        # a split backward defers the wgrad GEMM: the ReduceScatter then has only the dgrad's
        return ("bulk", w if w is not None else g)
    if "allgather" in name:
        g = _gemm_near(parts, i, -1)
        return ("ring_exchange", g) if g is not None and g.name in UB_RS_DRAINS_DGRAD else None
    return None


def ub_exposed_s(method: str, comm_s: float, gemm_s: float, tp: int) -> float:
    """The part of a TP collective of `comm_s` left exposed beside its GEMM of `gemm_s`.
    ring_exchange (comm_gemm_overlap.cpp split_overlap_ag): tp GEMM chunks, the first on the
    local shard, each of the tp - 1 sends beside one chunk; the last chunk has no send beside it,
    so the gather hides behind (tp - 1)/tp of the GEMM. pipeline (split_overlap_rs): the GEMM in
    UB_PIPELINE_SPLITS chunks, chunk i's ReduceScatter beside chunk i+1's GEMM; the last chunk's
    ReduceScatter has no GEMM beside it ("a 1x ReduceScatter chunk remains exposed",
    Megatron-Bridge docs/performance-guide.md @e577829e; NeMo communication_overlap.rst @8cfedd72:
    "exposes one reduce-scatter chunk"). bulk (bulk_overlap): the whole collective beside the
    whole GEMM."""
    if method == "ring_exchange":
        return max(0.0, comm_s - gemm_s * (tp - 1) / tp)
    if method == "pipeline":
        s = UB_PIPELINE_SPLITS
        return comm_s / s + max(0.0, (comm_s - gemm_s) * (s - 1) / s)
    return max(0.0, comm_s - gemm_s)


def sm_interference_s(hidden_s: float, sm_fraction: float) -> float:
    """Compute time lost to communication kernels that hold `sm_fraction` of the SMs for
    `hidden_s` seconds beside it: compute of C s at full speed advances only (1 - f)·h of its
    work while they run, so it ends after C + f·h (SM-seconds taken / SMs)."""
    return hidden_s * sm_fraction


@dataclass(frozen=True, slots=True)
class EpPair:
    """One MoE layer in Megatron-Core's combined 1F1B (--overlap-moe-expert-parallel-comm): the
    forward of one micro-batch and the backward of another run together. `exposed_fraction` of the
    layer's EP communication stays on the critical path; `interference_s` is the compute slowed by
    the communication kernels' SMs while the rest runs hidden; `host_s` is the pair's CPU issue
    time the GPU waits for (replacing the layer's own `host_bound` segments when paired);
    `launch_wait_s` is how much longer the pair takes because its EP kernels, on a comm stream of
    CUDA's default priority, wait for a compute kernel launched beside them (`combined_layer_s`
    first_kernel_s; 0 with Megatron's high_priority_a2a_comm_stream)."""

    exposed_fraction: float
    interference_s: float
    host_s: float = 0.0
    launch_wait_s: float = 0.0


# ZeRO-3 exposure segments of a MoE layer whose passes run in F&B pairs: the pairs re-cost them
ZERO3_PAIRED_NAMES = ("zero3 param allgather (moe layer)", "zero3 allgather+reducescatter (moe layer)")
# activation offloading's copies of such a layer, re-costed by the pairs too
OFFLOAD_PAIRED_NAMES = ("activation offload (D2H) (moe layer)", "activation reload (H2D) (moe layer)")
PAIRED_TRANSFER_NAMES = ZERO3_PAIRED_NAMES + OFFLOAD_PAIRED_NAMES


@dataclass(frozen=True, slots=True)
class Zero3Pass:
    """One pass of a MoE layer's ZeRO-3/FSDP transfers (see Zero3Pair)."""

    need_s: float  # transfer seconds the pass must hide (the gather; gather + reduce-scatter)
    window_s: float  # the pass's seconds unpaired, without its host waits (EP all-to-all included)
    ep_s: float  # of which EP all-to-all
    host_s: float  # its own host waits
    slow_s: float  # the overlap interference, which also widens the window
    fixed_s: float = 0.0  # exposed whatever the window (BACKWARD_POST's gather)

    def exposed_s(self, keep: float, host_s: float | None) -> float:
        """Exposed seconds when `keep` of the all-to-all stays on the critical path and the pass
        waits `host_s` for the CPU (None: its own host waits)."""
        window = self.window_s - self.ep_s * (1.0 - keep) + (self.host_s if host_s is None else host_s)
        return self.fixed_s + max(0.0, self.need_s - window - self.slow_s)


@dataclass(frozen=True, slots=True)
class Zero3Pair:
    """One MoE layer's ZeRO-3/FSDP transfers, re-costed when its passes run in an F&B pair
    (DualPipe, the combined 1F1B). Unpaired, each pass's transfer hides behind that pass, its EP
    all-to-all and host waits included (`_Coster.layer`: exposed = max(0, need - window - slow)).
    Paired, the hidden part of the all-to-all runs under the other micro-batch's compute and the
    passes' own host waits give way to the pair's: still counting them as the pass's window used
    the same seconds twice, so a faster all-to-all (more NVLink or NIC bandwidth) lengthened the
    exposed transfer by more than it saved (fuzz audit). Paired, the layer's transfers (one DP
    stream beside the pair) hide behind its passes as the pair runs them: the layer takes
    max(its paired passes, its transfers), monotone in both. Full recomputation runs the forward
    (and its gather) again in the backward. (Costing each pass on its own share of the pair's
    host wait was not monotone: the backward's share grows as the forward's GPU time shrinks, and
    a faster GPU made a host-bound DeepSeek-V3 DualPipe step 2.5% slower.)"""

    forward: Zero3Pass
    backward: Zero3Pass
    repeat_forward: bool
    copy_s: float = 0.0  # activation offloading: each pass's host copy (copy engines, beside)
    serial_b_s: float = 0.0  # the backward's reduce-scatter not overlapped (after the pass)

    def _passes(self, host_f_s: float | None, host_b_s: float | None) -> list[tuple[Zero3Pass, float | None]]:
        passes = [(self.forward, host_f_s), (self.backward, host_b_s)]
        if self.repeat_forward:  # recomputed in the backward: no host wait of its own in the pair
            passes.append((self.forward, 0.0 if host_b_s is not None else None))
        return passes

    def exposed_s(self, keep: float, host_f_s: float | None, host_b_s: float | None) -> tuple[float, float]:
        """Exposed ZeRO-3 seconds of the forward and the backward in the pair: the layer's
        transfers beyond its passes as paired (the all-to-all each keeps, the pair's host waits:
        `host_*_s`, None = their own), split between the passes as their transfers are."""
        passes = self._passes(host_f_s, host_b_s)
        need = sum(p.need_s for p, _ in passes)
        exposed = max(0.0, need - self._window_s(keep, passes) - sum(p.slow_s for p, _ in passes))
        share = self.forward.need_s / need if need > 0 else 0.0
        return exposed * share, exposed * (1.0 - share) + self.backward.fixed_s

    def copies_exposed_s(
        self, keep: float, host_f_s: float | None, host_b_s: float | None
    ) -> tuple[float, float]:
        """Exposed activation-offload seconds (forward, backward) in the pair: the layer's copies
        beyond its passes as paired, ZeRO-3 transfers included (the copy engines run beside the
        whole pass), split as the copies are (the reload in the backward)."""
        if self.copy_s <= 0:
            return 0.0, 0.0
        passes = self._passes(host_f_s, host_b_s)
        f_z3, b_z3 = self.exposed_s(keep, host_f_s, host_b_s)
        pair_s = (
            self._window_s(keep, passes) + sum(p.slow_s for p, _ in passes) + f_z3 + b_z3 + self.serial_b_s
        )
        copies = len(passes) * self.copy_s  # a recomputed forward offloads again
        exposed = max(0.0, copies - pair_s)
        return exposed / len(passes), exposed * (len(passes) - 1) / len(passes)

    @staticmethod
    def _window_s(keep: float, passes: list[tuple[Zero3Pass, float | None]]) -> float:
        return sum(p.window_s - p.ep_s * (1.0 - keep) + (p.host_s if h is None else h) for p, h in passes)


def _pass_of(parts: list, need_s: float, slow_s: float, fixed_s: float = 0.0) -> Zero3Pass:
    """A pass's Zero3Pass from its parts, before its transfers were appended."""
    host = sum(p.duration_s for p in parts if p.category == "host_bound")
    ep = sum(p.duration_s for p in parts if p.category == "ep_comm")
    total = sum(p.duration_s for p in parts)
    return Zero3Pass(need_s, total - host, ep, host, slow_s, fixed_s)


def _zero3_paired(
    zero3: Zero3Pair | None, keep: float, host_f_s: float | None, host_b_s: float | None, n_layers: int
) -> tuple[list[Segment], list[Segment]]:
    """The exposed ZeRO-3 transfers and activation-offload copies of a chunk's `n_layers` paired
    MoE layers (Zero3Pair), which replace their PAIRED_TRANSFER_NAMES segments: (forward,
    backward)."""
    if zero3 is None or n_layers <= 0:
        return [], []
    z3_f, z3_b = zero3.exposed_s(keep, host_f_s, host_b_s)
    off_f, off_b = zero3.copies_exposed_s(keep, host_f_s, host_b_s)
    z3, off = "zero3 transfers (F&B pair)", "activation offload (F&B pair)"
    f = [Segment("dp_comm", z3, n_layers * z3_f), Segment("other", off, n_layers * off_f)]
    b = [Segment("dp_comm", z3, n_layers * z3_b), Segment("other", off, n_layers * off_b)]
    return [x for x in f if x.duration_s > 0], [x for x in b if x.duration_s > 0]


def combined_layer_s(
    attn_f: float,
    mlp_f: float,
    attn_b: float,
    mlp_dgrad: float,
    mlp_wgrad: float,
    comm: tuple,
    delayed_wgrad: bool = True,
    first_kernel_s: tuple[float, float, float, float] | None = None,
) -> float:
    """Seconds of one layer pair under Megatron-Core's combined 1F1B
    (models/common/model_chunk_schedule_plan.py TransformerLayerSchedulePlan.run):

        comm stream: combine_bwd      | dispatch_fwd -> dispatch_bwd        | combine_fwd
        comp stream: pre_dispatch_fwd | mlp_bwd -> mlp_bwd_dw -> mlp_fwd     | pre_dispatch_bwd

    with the data dependencies of the two micro-batches: mlp_bwd waits for combine_bwd, mlp_fwd for
    dispatch_fwd, dispatch_bwd for mlp_bwd, combine_fwd for mlp_fwd and pre_dispatch_bwd for
    dispatch_bwd; the next layer starts when both streams are done. `comm` = (combine_bwd,
    dispatch_fwd, dispatch_bwd, combine_fwd) seconds; the others are the compute of the forward's
    attention (to the dispatch), its experts, the backward's attention and its expert dgrad/wgrad.
    `delayed_wgrad` (Megatron's --delay-wgrad-compute): the expert wgrad runs as
    `mlp.backward_dw()` after the dgrad node has recorded its event, so dispatch_bwd waits for the
    dgrad only; without it `mlp.backward` computes both and dispatch_bwd waits for both
    (models/common/utils.py `backward_dw` returns at once).

    `first_kernel_s` (the comm stream at CUDA's default priority; None = high priority): the
    durations of the first compute kernel of mlp_bwd, of the delayed wgrad, of mlp_fwd and of
    pre_dispatch_bwd. The block scheduler does not preempt, and at equal priority a kernel's
    pending thread blocks are dispatched in launch order, so an EP kernel launched while a compute
    kernel holds the SMs starts when that kernel's blocks are out (taken as its end). That happens
    where one completion on the compute stream releases both streams: the compute stream's next
    kernel launches at once, the EP kernel only after the cross-stream event wait -- dispatch_fwd
    behind mlp_bwd's first kernel when the forward's attention outlasts combine_bwd,
    dispatch_bwd behind the wgrad's (or, undelayed, mlp_fwd's) first kernel when the dgrad
    outlasts dispatch_fwd, combine_fwd behind pre_dispatch_bwd's first kernel when mlp_fwd
    outlasts dispatch_bwd. An EP kernel that follows its own stream's predecessor launches first
    and waits for nothing. Never shorter than the high-priority pair, nor longer than the two
    streams run back to back (each wait is a compute kernel that runs anyway)."""
    c_b, d_f, d_b, c_f = comm
    k_dgrad, k_wgrad, k_mlp_f, k_attn_b = first_kernel_s or (0.0, 0.0, 0.0, 0.0)
    phase1 = max(c_b, attn_f)
    dispatch_fwd_end = (k_dgrad if attn_f > c_b else 0.0) + d_f
    grads_end = mlp_dgrad + mlp_wgrad
    released = mlp_dgrad if delayed_wgrad else grads_end  # the event dispatch_bwd waits for
    if released > dispatch_fwd_end:
        dispatch_bwd_start = released + (k_wgrad if delayed_wgrad else k_mlp_f)
    else:
        dispatch_bwd_start = dispatch_fwd_end
    dispatch_bwd_end = dispatch_bwd_start + d_b
    mlp_fwd_end = max(grads_end, dispatch_fwd_end) + mlp_f
    combine_fwd_start = k_attn_b if mlp_fwd_end > dispatch_bwd_end else 0.0
    return phase1 + max(mlp_fwd_end, dispatch_bwd_end) + max(combine_fwd_start + c_f, attn_b)


@dataclass(frozen=True, slots=True)
class StageProgram:
    stage: int
    chunks: tuple[ChunkProgram, ...]
    optimizer_s: float
    p2p_s: float  # activation (or gradient) transfer to the neighbouring stage
    p2p_bytes: float = 0.0  # its message size per GPU (traces' message_bytes)
    # the tied word-embedding gradient's all-reduce between the first and the last stage
    # (EMBEDDING_SYNC_NOTE); 0 on every other stage
    embedding_sync_s: float = 0.0
    embedding_sync_bytes: float = 0.0


@dataclass(frozen=True, slots=True)
class Program:
    """Everything the engine needs, in seconds; no cost model left to consult."""

    stages: tuple[StageProgram, ...]
    num_microbatches: int  # of one pipeline run (the whole step unless pipeline_runs > 1)
    pp: int
    vp: int
    schedule: str
    zero: int
    overlap_grad_reduce: bool
    overlap_param_gather: bool
    dataloader_latency_s: float
    dataloader_workers: int
    dataloader_prefetch: int
    dataloader_jitter: float = 0.0
    dataloader_seed: int = 0
    collectives: tuple[dict, ...] = field(default=())
    warnings: tuple[str, ...] = ()  # placement advice from the comm model (groups across racks)
    reshard_after_forward: bool = True  # ZeRO-3: False = parameters gathered once per run
    # pipeline runs per step ([parallel] local_batch): the engine replays one run of
    # `num_microbatches` micro-batches (its gradient reduction and, ZeRO-3 without resharding,
    # its parameter gathers included) and repeats it (engine/replay.py repeat_runs)
    pipeline_runs: int = 1
    # torch.distributed.pipelining ([parallel] local_batch set): after a chunk's last backward in
    # a run the stage launches the chunk's gradient reduction (ZeRO-3: then, DDP: as the backward
    # produces it) and its compute stream waits for it before anything else, the send of that
    # backward's input gradient included (PipelineStage run_post_backward /
    # _root_post_backward_final_callback; engine/stage.py StageProcess._reduce_and_wait)
    grad_reduce_waits: bool = False
    # Megatron-Core's combined 1F1B (EP all-to-all overlap): the steady-state forwards run paired
    # with a backward of another micro-batch (schedules.combined_1f1b)
    ep_overlap: bool = False
    # the kernel mix's tensor activity and the power-limited clock it sets (simulator/clocks.py):
    # of the most power-limited stage (the highest activity, the lowest clock), and every stage's
    tensor_activity: float = 0.0
    power_clock: float = 1.0
    stage_power_clocks: tuple[float, ...] = ()

    @property
    def gathers_per_step(self) -> bool:
        """Whether `param_gather_s` holds per-step parameter all-gathers: ZeRO-1/2 (after the
        optimizer) and ZeRO-3 that keeps its gathered parameters across micro-batches."""
        return self.zero in (1, 2) or (self.zero == 3 and not self.reshard_after_forward)


def pass_times(program: Program) -> PassTimes:
    """Mean per-chunk F/B/W durations and hop: what the duration-built orders (zb-v) assume."""
    chunks = [c for st in program.stages for c in st.chunks]
    n = max(len(chunks), 1)
    return PassTimes(
        forward_s=sum(c.forward.duration_s for c in chunks) / n,
        backward_input_s=sum(c.backward_input.duration_s for c in chunks) / n,
        backward_weight_s=sum(c.backward_weight.duration_s for c in chunks) / n,
        hop_s=sum(st.p2p_s for st in program.stages) / max(len(program.stages), 1),
    )


def stage_orders(program: Program) -> tuple[tuple[Task, ...], ...]:
    """Every stage's ordered tasks under the program's schedule (the engine and the closed-form
    estimate replay the same orders)."""
    times = pass_times(program) if program.schedule == "zb-v" else None
    if program.ep_overlap:
        return tuple(
            tuple(combined_1f1b(program.schedule, program.pp, program.vp, program.num_microbatches, s))
            for s in range(program.pp)
        )
    return tuple(
        tuple(stage_tasks(program.schedule, program.pp, program.vp, program.num_microbatches, s, times))
        for s in range(program.pp)
    )


# ----------------------------------------------------------------------------- costing
@dataclass(frozen=True, slots=True)
class _Phase:
    """Cost parts of one layer in one phase, before merging into a block."""

    parts: tuple[Segment, ...]


def _ring_segments(
    name: str,
    cp: int,
    times_s: tuple[float, float],
    model_flops_fwd: float,
    fwd_extra: tuple[str, float, float],
    bwd_extra: tuple[str, float, float],
) -> tuple[list[Segment], list[Segment]]:
    """A ring CP attention's forward and backward segments: the `cp` ring steps' kernels (backward
    2x the forward's model FLOPs) and each pass's memory-bound (name, seconds, bytes) pass."""
    t_f, t_b = times_s
    fwd = [
        Segment("compute", name + f" ({cp} ring steps)", t_f, model_flops_fwd, 0.0),
        Segment("compute", fwd_extra[0], fwd_extra[1], 0.0, fwd_extra[2]),
    ]
    bwd = [
        Segment("compute", name + f" bwd ({cp} ring steps)", t_b, 2 * model_flops_fwd, 0.0),
        Segment("compute", bwd_extra[0], bwd_extra[1], 0.0, bwd_extra[2]),
    ]
    return fwd, bwd


@dataclass
class _Coster:
    """Costs one scenario's layers; records the distinct collectives it asked for."""

    scn: Scenario
    comm: CommModel
    seen: dict = field(default_factory=dict)
    memo: dict = field(default_factory=dict)
    stage: int = 0  # the pipeline stage whose TP/CP/EP groups are being costed
    ep_pair: EpPair = EpPair(1.0, 0.0)  # the last MoE layer costed, in the combined 1F1B
    pair_host: PairHost | None = None  # the last MoE layer costed, in DualPipe's F&B pairs
    zero3_pair: Zero3Pair | None = None  # the last MoE layer costed, ZeRO-3 in an F&B pair
    act_sync_index: int = 0  # where in the last MoE layer's forward the activation's host sync sits

    def __post_init__(self) -> None:
        self.device = Device(self.scn.gpu, self.scn.dtype, fp8_recipe=self.scn.fp8_recipe)

    @property
    def param_gather_bytes(self) -> float:
        """Bytes per parameter of the data-parallel (ZeRO / distributed-optimizer) weight
        all-gather: 16-bit, or FP8 with [precision] fp8_param_gather (memory.py)."""
        return param_gather_bytes_per_param(self.scn.dtype, self.scn.fp8_param_gather)

    @property
    def wgrad_bytes(self) -> int:
        """HBM bytes per weight-gradient element of a weight GEMM (costs.wgrad_output_bytes):
        Megatron-Core (gradient accumulation fusion on by default) accumulates into the
        main_grad buffer; the 2021 Megatron-LM and composer/FSDP stacks write a 16-bit gradient."""
        k = self.scn.kernels
        fused = k.megatron_core
        return wgrad_output_bytes(grad_reduce_bytes_per_param(self.scn.dtype, k.grad_reduce_dtype), fused)

    # -- communication
    def coll(self, kind: str, axis: str, message_bytes: float, stage: int = 0) -> float:
        if message_bytes <= 0:
            return 0.0
        if axis in ("tp", "cp", "ep"):
            stage = self.stage  # every layer's group collectives run on the stage being costed
        memo = (kind, axis, message_bytes, stage)
        cost = self.memo.get(memo)
        if cost is None:  # DP buckets repeat the same size hundreds of times
            cost = self.memo[memo] = self.comm.collective(kind, axis, message_bytes, stage)
        key = (kind, axis, round(message_bytes), stage if axis == "pp" else 0)
        known = self.seen.get(key)
        if cost.time_s > 0 and (known is None or cost.time_s > known["time_s"]):  # the slowest stage's
            self.seen[key] = {
                "group": axis,
                "kind": kind,
                "message_bytes": message_bytes,
                "algorithm": cost.algorithm,
                "time_s": cost.time_s,
                "bottleneck": cost.bottleneck,
                "bus_bandwidth_bytes_per_s": cost.bus_bandwidth_bytes_per_s,
            }
        return cost.time_s

    @property
    def expert_grad_bytes(self) -> int:
        """Bytes per routed-expert gradient element on the DP wire: `[kernels]
        expert_grad_reduce_dtype`, else the other gradients' (grad_reduce_bytes_per_param)."""
        k = self.scn.kernels
        return grad_reduce_bytes_per_param(self.scn.dtype, k.expert_grad_reduce_dtype or k.grad_reduce_dtype)

    def zero3_param_coll(
        self,
        kind: str,
        dense: float,
        expert: float,
        bytes_per_param: float,
        stage: int = 0,
        expert_bytes_per_param: float | None = None,
    ) -> float:
        """A ZeRO-3 gather or reduce-scatter of `dense` parameters over the shard group and of
        `expert` (routed-expert) parameters over their own shard group (`expert_shard_axis`):
        two collectives one after the other on the transfer stream, or one when the experts
        share the dense parameters' group; none for experts no other rank shares. The experts'
        elements weigh `expert_bytes_per_param` (default: `bytes_per_param`)."""
        axis = shard_axis(self.scn.parallel)
        expert_axis = expert_shard_axis(self.scn.parallel)
        eb = bytes_per_param if expert_bytes_per_param is None else expert_bytes_per_param
        if expert_axis == axis:
            return self.zero3_coll(kind, axis, dense * bytes_per_param + expert * eb, stage)
        t = self.zero3_coll(kind, axis, dense * bytes_per_param, stage)
        if expert_axis is not None:
            t += self.zero3_coll(kind, expert_axis, expert * eb, stage)
        return t

    def zero3_coll(self, kind: str, axis: str, message_bytes: float, stage: int = 0) -> float:
        """A ZeRO-3 parameter all-gather or gradient reduce-scatter over the shard group: NCCL on
        the topology, or with `[kernels] zero3_collectives = "flat"` (DeepSpeed 2021) a flat α–β
        ring in which every GPU's traffic leaves through its own share of the node's NICs, without
        NCCL's node-level aggregation over NVLink: (n−1)·α + (n−1)/n · M / (NIC share ·
        nccl_bw_fraction) (docs/calibration.md). A group inside one node stays NCCL on NVLink."""
        scn = self.scn
        n = self.comm.group_size(axis)
        topo = scn.topology
        if scn.kernels.zero3_collectives != "flat" or scn.parallel.zero != 3 or n <= topo.gpus_per_node:
            return self.coll(kind, axis, message_bytes, stage)
        if message_bytes <= 0:
            return 0.0
        busbw = (
            topo.nic_bandwidth_per_node_bytes_per_s / topo.gpus_per_node * scn.gpu.efficiency.nccl_bw_fraction
        )
        t = (n - 1) * topo.inter_node.latency_s + bus_factor(kind, n) * message_bytes / busbw
        self.seen.setdefault(
            ("flat", kind, axis, round(message_bytes)),
            {
                "group": axis,
                "kind": kind,
                "message_bytes": message_bytes,
                "algorithm": "flat-ring",
                "time_s": t,
                "bottleneck": "nic",
                "bus_bandwidth_bytes_per_s": busbw,
            },
        )
        return t

    # -- one transformer layer
    def layer(
        self, moe: bool, window: tuple[str, int] = FULL_ATTENTION
    ) -> tuple[_Phase, _Phase, _Phase, _Phase, float]:
        """(forward, backward-input, backward-weight, recompute, params_local) of one layer;
        `window` its attention mask (ModelSpec.attention_window)."""
        scn, d = self.scn, self.device
        m: ModelSpec = scn.model
        par = scn.parallel
        t, cp = par.tp, par.cp
        b, s = par.micro_batch, m.seq_len
        s_local = s // cp
        T = b * s_local  # tokens of one micro-batch on this CP rank
        a = d.activation_bytes
        h = m.hidden
        heads_local = m.heads // t
        kv_heads_local = max(m.num_kv_heads // t, 1)  # replicated when tp > kv_heads
        q_local = heads_local * m.dim_per_head
        kv_local = kv_heads_local * m.dim_per_head
        v_local = m.v_dim // t
        norm_tokens = T // t if par.sequence_parallel and t > 1 else T
        split_overlap = par.tp_comm_overlap and t > 1 and par.sequence_parallel

        fwd: list = []
        b_in: list = []
        b_w: list = []

        # Megatron-Core + Transformer Engine's own kernels where they differ (TE_LAYER_NOTE)
        te = scn.kernels.megatron_core
        # Every stack's GeLU backward reads the gradient and the input and writes one (GELU_BWD:
        # TE / Megatron-Core bias_gelu_back, Megatron-LM 2021's model/fused_bias_gelu.py:28-55
        # @de7dc40f88, PyTorch's gelu_backward), and every stack's residual backward is the residual
        # stream's fork sum (RESIDUAL_FORK_ADD_PASSES) plus, with dropout, grad x mask: Megatron's
        # fused bias_dropout_add (core fused_bias_dropout.py; 2021 transformer.py:495-521), PyTorch's
        # `x + y` (AddBackward0 launches nothing). The exception: PyTorch eager (composer/FSDP) with
        # dropout runs torch's own dropout kernels beside the add, costed generically.
        torch_dropout = scn.kernels.stack == "composer-fsdp" and m.dropout > 0
        # TE's LayerNormLinear with delayed-scaling FP8 writes the norm's output in FP8 itself
        # (TE_FP8_NORM_NOTE): its GEMM input needs no cast, only the transpose on Hopper. A PyTorch
        # norm (`[kernels] norm = "torch"`) is a kernel of its own at its measured bandwidth
        # (NORM_KINDS): neither TE's FP8 output nor TE's 3-pass backward applies to it
        norm_kind = NORM_KINDS[scn.kernels.norm]
        te_norm = te and not norm_kind
        ln_fp8 = te_norm and d.dtype == "fp8" and scn.fp8_recipe == "delayed"

        def mm(name: str, mm_m: int, mm_n: int, mm_k: int, count: int = 1, ln_fused: bool = False) -> None:
            # forward, dgrad and wgrad each at its own GEMM shape (costs.gemm_pass_shape)
            times_s = matmul_pass_times_s(d, mm_m, mm_n, mm_k, count, self.wgrad_bytes)
            times = dict(zip(GEMM_PASSES, times_s, strict=True))
            f = 2.0 * mm_m * mm_n * mm_k * count
            fwd.append(Segment("compute", name, times["fprop"], f, 0.0))
            b_in.append(Segment("compute", name + " dgrad", times["dgrad"], f, 0.0))
            b_w.append(Segment("compute", name + " wgrad", times["wgrad"], f, 0.0))
            if split_overlap:  # Transformer Engine userbuffers run these GEMMs in chunks
                for phase, parts in (("fprop", fwd), ("dgrad", b_in)):
                    chunks = ub_gemm_chunks(name, phase, t)
                    if chunks > 1:
                        pm, pn, pk = gemm_pass_shape(phase, mm_m, mm_n, mm_k)
                        extra = ub_split_gemm_s(d, pm, pn, pk, chunks) - times[phase]
                        parts.append(Segment("compute", "tp overlap gemm split", max(0.0, extra), 0.0, 0.0))
            quant = quant_bytes_per_element(d, self.scn.fp8_recipe)
            if quant:  # Transformer Engine quantizes the GEMM input (fwd) and output grad (bwd)
                label = "fp8 cast" if d.dtype == "fp8" else f"{d.dtype} quantize"
                cast_in = quant * mm_m * mm_k * count
                cast_grad = quant * mm_m * mm_n * count
                qk = quant_kernels_per_tensor(d, self.scn.fp8_recipe)
                if ln_fused and ln_fp8:
                    if architecture(d.gpu.name) in TN_ONLY_FP8_ARCHITECTURES:  # tex.fp8_transpose
                        tr = 2 * HOPPER_FP8_TRANSPOSE_BYTES * mm_m * mm_k * count
                        b_w.append(
                            Segment("compute", "fp8 transpose (norm out)", memory_op_time_s(d, tr), 0.0, tr)
                        )
                else:
                    fwd.append(Segment("compute", label, memory_op_time_s(d, cast_in, qk), 0.0, cast_in))
                b_in.append(Segment("compute", label, memory_op_time_s(d, cast_grad, qk), 0.0, cast_grad))

        def mem(
            name: str,
            fwd_bytes: float,
            kernels: int = 1,
            kind: str = "",
            bwd: tuple[float, int] | None = None,
        ) -> None:
            """A memory-bound op: `fwd_bytes` forward; backward two passes of the forward's
            kernels, or `bwd` = (bytes as a multiple of the forward's, kernels) where the stack's
            kernel is known (TE_LAYER_NOTE). `kind` (MEMORY_KINDS without its _fwd/_bwd suffix):
            the kernel the stack runs has its own measured bandwidth in each pass."""
            tt = memory_op_time_s(d, fwd_bytes, kernels, f"{kind}_fwd" if kind else "copy")
            bwd_kind = f"{kind}_bwd" if kind else "copy"
            if bwd is None:
                tb, bwd_bytes = 2 * memory_op_time_s(d, fwd_bytes, kernels, bwd_kind), 2 * fwd_bytes
            else:
                bwd_bytes = bwd[0] * fwd_bytes
                tb = memory_op_time_s(d, bwd_bytes, bwd[1], bwd_kind)
            fwd.append(Segment("compute", name, tt, 0.0, fwd_bytes))
            b_in.append(Segment("compute", name + " bwd", tb, 0.0, bwd_bytes))

        norm_bwd = (TE_NORM_BWD[0] / 2, TE_NORM_BWD[1]) if te_norm else None
        # a norm fused into the next GEMM's FP8 cast: read 16-bit, write 8-bit (TE_FP8_NORM_NOTE)
        ln_fp8_bytes = norm_tokens * h * (a + 1)
        ln_fp8_bwd = (TE_NORM_BWD[0] * norm_tokens * h * a / ln_fp8_bytes, TE_NORM_BWD[1])

        def residual(name: str) -> None:
            """Megatron's bias-dropout-add and, backward, the residual stream's fork add."""
            elems = norm_tokens * h
            if torch_dropout:
                mem(name, 3 * elems * a)
                return
            drop = m.dropout > 0
            fwd_b = 3 * elems * a + (DROPOUT_MASK_BYTES * elems if drop else 0.0)
            fwd.append(Segment("compute", name, memory_op_time_s(d, fwd_b), 0.0, fwd_b))
            bwd_b = RESIDUAL_FORK_ADD_PASSES * elems * a
            bwd_k = 1
            if drop:  # dropout's gradient: grad x mask x scale
                bwd_b += (2 * a + DROPOUT_MASK_BYTES) * elems
                bwd_k += 1
            b_in.append(Segment("compute", name + " bwd", memory_op_time_s(d, bwd_b, bwd_k), 0.0, bwd_b))

        # forward segments of the modules selective recomputation can re-run, by
        # Megatron-Core --recompute-modules name: [start, end) ranges of `fwd`
        spans: dict[str, list[tuple[int, int]]] = {}

        def span(module: str, start: int) -> None:
            spans.setdefault(module, []).append((start, len(fwd)))

        # --- attention block (Megatron column/row-parallel linear layers)
        tp_msg = T * h * a  # full-sequence activation of this micro-batch (AG output / AR buffer)
        # userbuffer AllGathers of a per-tensor FP8 layer move FP8 (UB_FP8_AG_NOTE)
        ub_ag_msg = T * h * 1.0 if ub_fp8_allgather(scn) else tp_msg
        start = len(fwd)
        if ln_fp8 and m.mla is None:
            mem("input norm (fp8 out)", ln_fp8_bytes, bwd=ln_fp8_bwd)
        else:
            mem("input norm", 2 * norm_tokens * h * a, kind=norm_kind, bwd=norm_bwd)
        span("layernorm", start)
        if m.mla is not None:
            self._mla_projections(mm, mem, fwd, b_in, T, tp_msg, heads_local, span)
        else:
            self._tp_entry(
                fwd,
                b_in,
                tp_msg,
                matmul_pass_times_s(d, T, q_local + 2 * kv_local, h, 1, self.wgrad_bytes)[1:],
                ub_ag_msg,
            )
            mm("qkv", T, q_local + 2 * kv_local, h, ln_fused=True)
            if m.linear_bias and scn.kernels.stack in ("megatron-2021", DEEPSPEED_STACK):
                # QKV_BIAS_ADD_NOTE: the column-parallel qkv adds its bias in a kernel of its own
                self._eager(
                    fwd,
                    b_in,
                    "qkv bias add (unfused)",
                    UNFUSED_BIAS_ADD_PASSES,
                    T * (q_local + 2 * kv_local) * a,
                )
            if m.qk_norm:  # per-head RMSNorm of q and k (QK_NORM_NOTE)
                mem("qk norm", 2 * T * (q_local + kv_local) * a, kernels=2)
            if not m.position_embeddings and m.rope_mscale != 1.0:
                self._eager(
                    fwd,
                    b_in,
                    "rope (unfused: YaRN mscale)",
                    UNFUSED_ROPE_PASSES,
                    T * (q_local + kv_local) * a,
                )
            elif not m.position_embeddings:
                mem(
                    "rope",
                    2 * T * (q_local + kv_local) * a,
                    bwd=(TE_ROPE_BWD[0] / 2, TE_ROPE_BWD[1]) if te else None,
                )
            if te and heads_local > kv_heads_local:
                # GQA: the query reshape copies, the split's backward concatenates (TE_LAYER_NOTE);
                # with `qkv_grad = "cat"` that concatenation is the "qkv grad cat" below, not twice
                q_b = 2 * T * q_local * a
                qkv_b = 2 * T * (q_local + 2 * kv_local) * a
                fwd.append(Segment("compute", "gqa query copy", memory_op_time_s(d, q_b), 0.0, q_b))
                if scn.kernels.qkv_grad != "cat":
                    b_in.append(
                        Segment("compute", "gqa qkv grad concat", memory_op_time_s(d, qkv_b), 0.0, qkv_b)
                    )
        attn_fwd, attn_bwd, attn_parts = self._attention(T, s_local, s, heads_local, q_local, v_local, window)
        start = len(fwd)
        if self.scn.kernels.attention_padding == "unpad":
            self._bert_padding(fwd, b_in, T * (q_local + 2 * kv_local), T * v_local)
        fwd.extend(attn_parts[0])
        span("core_attn", start)
        b_in.extend(attn_parts[1])
        if self.scn.kernels.qkv_grad == "cat":  # torch.split's backward: at::cat of dq, dk, dv
            cat_bytes = 2.0 * T * (q_local + 2 * kv_local) * a  # read the three, write the qkv grad
            b_in.append(Segment("compute", "qkv grad cat", memory_op_time_s(d, cat_bytes), 0.0, cat_bytes))
        cp_hidden_f = cp_hidden_b = 0.0
        if cp > 1 and par.cp_comm_type != "p2p":
            cp_f, cp_b, cp_hidden_f, cp_hidden_b = self._cp_exchange(
                s_local, heads_local, q_local, v_local, kv_local
            )
            fwd.extend(cp_f)
            b_in.extend(cp_b)
        elif cp > 1:
            kv_msg = 2 * b * s * kv_local * a  # K and V of the whole sequence (AG output)
            t_kv = self.coll("allgather", "cp", kv_msg)
            fwd.append(Segment("cp_comm", "cp kv ring", max(0.0, t_kv - attn_fwd), 0.0, kv_msg))
            t_bwd = t_kv + self.coll("reducescatter", "cp", kv_msg)
            b_in.append(Segment("cp_comm", "cp dkv ring", max(0.0, t_bwd - attn_bwd), 0.0, kv_msg))
            cp_hidden_f, cp_hidden_b = min(t_kv, attn_fwd), min(t_bwd, attn_bwd)
        mm("attn out", T, h, v_local)
        self._tp_exit(fwd, b_in, tp_msg, ub_ag_msg)
        if m.linear_bias and m.is_moe:  # bias_dropout_fusion off (UNFUSED_BIAS_ADD_PASSES)
            self._eager(fwd, b_in, "attn bias add (unfused)", UNFUSED_BIAS_ADD_PASSES, norm_tokens * h * a)
        residual("residual add")

        # --- MLP or MoE block
        start = len(fwd)
        if ln_fp8 and not moe:  # MoE layers run a separate TENorm before the router
            mem("post-attn norm (fp8 out)", ln_fp8_bytes, bwd=ln_fp8_bwd)
        else:
            mem("post-attn norm", 2 * norm_tokens * h * a, kind=norm_kind, bwd=norm_bwd)
        span("layernorm", start)
        start = len(fwd)
        marks: tuple[int, ...] = ()
        b_moe, w_moe = len(b_in), len(b_w)
        if moe:
            marks = (start, *self._moe(fwd, b_in, b_w, mm, mem, T, tp_msg, span))
            span("moe", start)
        else:
            f_local = m.ffn // t
            fc1_n = (2 if m.gated_mlp else 1) * f_local
            self._tp_entry(
                fwd, b_in, tp_msg, matmul_pass_times_s(d, T, fc1_n, h, 1, self.wgrad_bytes)[1:], ub_ag_msg
            )
            mm("fc1", T, fc1_n, h, ln_fused=True)
            if m.activation == "squared_relu":
                # relu(x)^2 eager or torch.compile'd (SQUARED_RELU_NOTE)
                impl = scn.kernels.squared_relu
                self._eager(fwd, b_in, f"squared-relu ({impl})", SQUARED_RELU_PASSES[impl], T * f_local * a)
            else:
                if m.activation == "clamped_quick_geglu":
                    self._eager(fwd, b_in, "glu input clamps", CLAMPED_GLU_PASSES, T * fc1_n * a)
                # SwiGLU: Megatron-Core's bias_swiglu_impl over the chunked fc1 halves (MEMORY_KINDS)
                swiglu = m.gated_mlp and not m.activation
                mem(
                    "swiglu" if m.gated_mlp else "gelu",
                    (3 if m.gated_mlp else 2) * T * f_local * a,
                    kind="swiglu" if swiglu else "",
                    bwd=None if m.gated_mlp else (GELU_BWD[0] / 2, GELU_BWD[1]),
                )
            mm("fc2", T, h, f_local)
            self._tp_exit(fwd, b_in, tp_msg, ub_ag_msg)
            span("mlp", start)
        if m.linear_bias and scn.kernels.bias_grad == "separate" and m.mla is None:
            # PyTorch nn.Linear: one reduction per biased layer over its output gradient (16-bit).
            # The row-parallel layers' biases are added after the reduce-scatter, on the tokens
            # this rank holds (Megatron-LM transformer.py:634, 681@d898a8991d: bias_dropout_add on
            # the sequence-parallel residual): their gradients reduce over those tokens only
            col = [q_local + 2 * kv_local] + ([] if moe else [fc1_n])
            row = [h] + ([] if moe else [h])
            nbytes = (T * sum(col) + norm_tokens * sum(row)) * a
            b_w.append(
                Segment(
                    "compute",
                    "bias grads (reduction)",
                    memory_op_time_s(d, nbytes, kernels=len(col) + len(row)),
                    0.0,
                    nbytes,
                )
            )
        residual("residual add")

        if te and par.zero < 3:
            # DDP_HOOK_NOTE: the parameters whose gradient no GEMM accumulates into main_grad
            sizes = [h, h]  # the two norms' weights
            if m.qk_norm:
                sizes += [m.dim_per_head, m.dim_per_head]
            if moe:
                sizes.append(h * m.num_experts)  # the router's weight (a plain F.linear)
            if m.linear_bias and m.mla is None:
                sizes += [q_local + 2 * kv_local, h] + ([] if moe else [fc1_n, h])
            main = grad_reduce_bytes_per_param(scn.dtype, scn.kernels.grad_reduce_dtype)
            hook_b = (2 * main + a) * float(sum(sizes))
            b_w.append(
                Segment(
                    "compute",
                    "norm/bias main_grad add (ddp hook)",
                    memory_op_time_s(d, hook_b, kernels=len(sizes)),
                    0.0,
                    hook_b,
                )
            )

        params_local = fl.layer_params_per_rank(m, par, moe).total
        if par.tp_comm_overlap and par.tp > 1:
            # the attention time that already hides the CP ring is not there to hide TP too
            fwd = self._overlap_tp(fwd, fwd, cp_hidden_f)
            # a split backward (zero-bubble, DualPipe) defers the weight-gradient GEMMs to another
            # slot (Qi et al. 2023 §2): the input-gradient pass's TP traffic hides behind its own
            # GEMMs only -- else a faster GPU shortening W lengthened B on the critical path
            split = par.schedule in SPLIT_BACKWARD_SCHEDULES
            b_in = self._overlap_tp(b_in, b_in if split else b_in + b_w, cp_hidden_b, backward=True)
        if moe and ep_overlap_pairs(scn):
            self.ep_pair = self._ep_pair(fwd, b_in, b_w, marks, b_moe, w_moe)
        # --- ZeRO-3 / FSDP: gather weights before use, reduce-scatter grads after. They run on
        # their own stream, prefetched one layer ahead, so a layer takes max(its own work, the
        # transfer): only the excess is exposed. (Applied after TP overlap: both streams run
        # beside compute, and the layer is done when the slower of them is.)
        # With reshard_after_forward = false the gathers happen once per step instead (per
        # chunk, build_program); HSDP gathers within the shard group (dp_shard consecutive ranks).
        # The exposure is set after the MoE host waits (_host_bound): the transfer stream runs on
        # while the GPU waits for the CPU, so a layer takes max(transfer, its pass with those
        # waits), not their sum -- else a faster GPU, whose shorter kernels expose both more
        # host issue and more transfer, could make the step slower.
        zero3 = par.zero == 3 and par.shard_size > 1 and par.reshard_after_forward
        # a MoE layer whose passes run in F&B pairs: they re-cost its transfers (Zero3Pair)
        paired = moe and (par.schedule in PAIRED_SCHEDULES or ep_overlap_pairs(scn))
        passes: tuple[Zero3Pass, Zero3Pass] | None = None
        serial_rs = 0.0
        ag = rs = 0.0
        if scn.kernels.fsdp_flat_grad == "cat":
            # PyTorch FSDP1: the parameters are views of the FlatParameter, so autograd concatenates
            # their 16-bit (param_dtype) gradients into the flat gradient: read them, write it
            flat_bytes = 2 * params_local * DTYPE_BYTES["bf16"]  # read the gradients, write the flat one
            b_w.append(
                Segment("compute", "fsdp flat grad cat", memory_op_time_s(d, flat_bytes), 0.0, flat_bytes)
            )
        if zero3:
            layer_params = fl.layer_params_per_rank(m, par, moe)
            dense_local, expert_local = layer_params.total - layer_params.expert, layer_params.expert
            ag = self.zero3_param_coll("allgather", dense_local, expert_local, self.param_gather_bytes)
            grad_bytes = grad_reduce_bytes_per_param(scn.dtype, scn.kernels.grad_reduce_dtype)
            rs = self.zero3_param_coll(
                "reducescatter", dense_local, expert_local, grad_bytes, 0, self.expert_grad_bytes
            )
            # FSDP casts the unsharded 16-bit grads to the reduce dtype before the reduce-scatter
            # (PyTorch FSDP MixedPrecision.reduce_dtype), each group in its own
            cast = sum(
                n * (d.activation_bytes + b)
                for n, b in ((dense_local, grad_bytes), (expert_local, self.expert_grad_bytes))
                if b > d.activation_bytes
            )
            if cast > 0:
                b_w.append(Segment("compute", "fsdp grad cast", memory_op_time_s(d, cast), 0.0, cast))
        if par.zero == 3 and par.shard_size > 1 and not par.reshard_after_forward:
            b_w.append(self._fsdp_grad_accumulate(moe))
        if marks:
            self._host_bound(fwd, b_in, b_w, marks)
        if zero3:
            # the hidden part shares SMs and HBM with the layer's work (not its host waits), as TP
            # overlap does: the work it overlaps is slowed by overlap_slowdown, and only the
            # transfer time beyond the slowed pass is exposed (a layer takes max(transfer, pass))
            def busy_s(parts: list) -> float:
                return sum(p.duration_s for p in parts if p.category != "host_bound")

            fwd_s = sum(p.duration_s for p in fwd)
            bwd_s = sum(p.duration_s for p in b_in + b_w)
            slowdown = scn.gpu.efficiency.overlap_slowdown
            slow_f = min(ag, busy_s(fwd)) * slowdown
            names = (
                ZERO3_PAIRED_NAMES if paired else ("zero3 param allgather", "zero3 allgather+reducescatter")
            )
            fwd.append(Segment("dp_comm", names[0], max(0.0, ag - fwd_s - slow_f), 0.0, 0.0))
            # overlap_grad_reduce = false: the gradient reduce-scatter runs after the layer's
            # backward instead of beside it (DeepSpeed's overlap_comm = false, its default)
            hidden_rs = rs if par.overlap_grad_reduce else 0.0
            if scn.kernels.zero3_backward_prefetch == "post":
                # PyTorch FSDP BackwardPrefetch.BACKWARD_POST (composer's default): the next
                # layer's gather is issued only after this layer's gradients are computed, so it
                # overlaps the reduce-scatter, not the compute: exposed in full
                slow_b = min(hidden_rs, busy_s(b_in + b_w)) * slowdown
                exposed_b = ag + max(0.0, hidden_rs - bwd_s - slow_b)
            else:  # BACKWARD_PRE / FSDP2 / Megatron: gathered ahead, beside this layer's backward
                slow_b = min(ag + hidden_rs, busy_s(b_in + b_w)) * slowdown
                exposed_b = max(0.0, ag + hidden_rs - bwd_s - slow_b)
            b_w.append(Segment("dp_comm", names[1], exposed_b, 0.0, 0.0))
            if paired:
                pre = scn.kernels.zero3_backward_prefetch != "post"  # post: the gather is exposed
                passes = (
                    _pass_of(fwd[:-1], ag, slow_f),
                    _pass_of(b_in + b_w[:-1], (ag if pre else 0.0) + hidden_rs, slow_b, 0.0 if pre else ag),
                )
                serial_rs = rs - hidden_rs
            if rs > hidden_rs:
                b_w.append(Segment("dp_comm", "zero3 reducescatter (not overlapped)", rs, 0.0, 0.0))
            fwd.append(Segment("compute", "zero3 overlap interference", slow_f, 0.0, 0.0))
            b_w.append(Segment("compute", "zero3 overlap interference", slow_b, 0.0, 0.0))
        copy_s = 0.0
        if scn.memory.offload_activations > 0:
            if paired and passes is None:
                passes = (_pass_of(fwd, 0.0, 0.0), _pass_of(b_in + b_w, 0.0, 0.0))
            # last: the copies run beside the whole pass (ZeRO-3 transfers and host waits included)
            copy_s = self._offload_activations(fwd, b_in, b_w, moe, paired)
        if passes is not None:
            self.zero3_pair = Zero3Pair(*passes, par.recompute == "full", copy_s, serial_rs)
        recompute = self._recompute(fwd, spans)
        if marks and par.schedule in PAIRED_SCHEDULES:
            self.pair_host = self._pair_host(fwd, list(recompute.parts), b_in, b_w)
        return _Phase(tuple(fwd)), _Phase(tuple(b_in)), _Phase(tuple(b_w)), recompute, params_local

    def _fsdp_grad_accumulate(self, moe: bool) -> Segment:
        """FSDP without resharding keeps a layer's gradients unsharded across the micro-batches
        of a run and reduce-scatters them once (gradient sync off until the run's last backward).
        PyTorch FSDP2 (torch/distributed/fsdp/_fully_shard/_fsdp_param.py, torch 2.8) does it in
        each micro-batch's post-backward: with a reduce dtype wider than the 16-bit gradient the
        first micro-batch casts it (`to_accumulated_grad_if_needed`: read 16-bit, write the
        reduce dtype) and every later one adds it (`accumulate_unsharded_grad_if_needed`: read
        both, write the accumulator); otherwise autograd adds each later micro-batch's 16-bit
        gradient into `.grad` in place (read two, write one) -- as it does for routed experts
        outside FSDP (expert_shard_axis None). Per micro-batch: the mean over the run's m."""
        scn, par = self.scn, self.scn.parallel
        d = self.device
        a = d.activation_bytes
        m_run = par.microbatches_per_run
        later = (m_run - 1) / m_run
        lp = fl.layer_params_per_rank(scn.model, par, moe)
        dense_g = grad_reduce_bytes_per_param(scn.dtype, scn.kernels.grad_reduce_dtype)
        expert_g = self.expert_grad_bytes if expert_shard_axis(par) is not None else a
        moved = 0.0
        for n, g in ((lp.total - lp.expert, dense_g), (lp.expert, expert_g)):
            # first: a + g; later: a + 2g (mean a + g + g·later); 16-bit: 3a on the later ones
            moved += n * (a + g + g * later) if g > a else n * 3 * a * later
        return Segment("compute", "fsdp grad accumulate", memory_op_time_s(d, moved), 0.0, moved)

    def _pair_host(self, fwd: list, rec: list, b_in: list, b_w: list) -> PairHost | None:
        """This MoE layer's `PairHost` for DualPipe's F&B pairs: the CPU issue time of its passes'
        ops and syncs (full recomputation issues the forward again), and their GPU time."""
        ops = moe_layer_host_ops(self.scn)
        if ops is None:
            return None
        issue_f_s = ops.forward * HOST_OP_S + ops.syncs * HOST_SYNC_S
        issue_s = issue_f_s * (2 if self.scn.parallel.recompute == "full" else 1)
        issue_s += (ops.backward_input + ops.backward_weight) * HOST_OP_S + ops.backward_syncs * HOST_SYNC_S

        def gpu(parts: list) -> float:  # (ZeRO-3 exposure: the pair re-costs it, Zero3Pair)
            return sum(
                p.duration_s
                for p in parts
                if p.category not in ("ep_comm", "host_bound") and p.name not in PAIRED_TRANSFER_NAMES
            )

        def ep(parts: list) -> float:
            return sum(p.duration_s for p in parts if p.category == "ep_comm")

        parts = fwd + rec + b_in + b_w
        return PairHost(issue_s, gpu(parts), ep(parts), issue_f_s, gpu(fwd), ep(fwd))

    def _host_bound(self, fwd: list, b_in: list, b_w: list, marks: tuple[int, ...]) -> None:
        """The CPU issue time of a MoE layer the GPU waits for (simulator/hostbound.py): after the
        dispatcher's device-to-host sync the forward runs as a CPU-issue -> GPU pipeline from an
        empty queue until the next layer's sync; the backward, without a sync, waits only for
        issue time beyond its GPU time. Only the excess over the GPU time is added."""
        ops = moe_layer_host_ops(self.scn)
        if ops is None:
            return
        moe, sync, experts, combine = marks
        par = self.scn.parallel
        # With userbuffer TP overlap (_overlap_tp) the layer's TP traffic runs on its own stream
        # beside the layer's kernels, its exposed remainder a share of the layer's aggregate
        # (max(TP, GEMMs)), not of any one module. Like the ZeRO-3 transfer stream (set after
        # this), it runs on while the GPU waits for the CPU: the forward takes max(its GPU time
        # with that remainder, the issue pipeline of its compute kernels), not the pipeline over
        # the remainder spread across modules -- there a faster GPU, whose shorter GEMMs hid in
        # host-bound modules, moved exposed TP time into GPU-bound ones and made the step slower
        # (fuzz audit: pcie-a100, tp_comm_overlap, eager MoE: 2x peak 0.1-0.7% slower).
        beside = par.tp_comm_overlap and par.tp > 1

        def gpu_s(parts: list) -> float:
            return sum(p.duration_s for p in parts)

        def issued_s(parts: list) -> float:
            return sum(p.duration_s for p in parts if not (beside and p.category == "tp_comm"))

        rest = [
            (ops.combine, issued_s(fwd[combine:])),
            (ops.attention, issued_s(fwd[:moe])),
            (ops.router, issued_s(fwd[moe:sync])),
        ]
        if ops.experts_before_act_sync:
            # a second sync inside the experts (the eager clamped GeGLU): two sync-to-sync segments,
            # each issued into an empty queue
            act = self.act_sync_index
            before = [
                (ops.dispatch, issued_s(fwd[sync:experts])),
                (ops.experts_before_act_sync, issued_s(fwd[experts:act])),
            ]
            after = [(ops.experts - ops.experts_before_act_sync, issued_s(fwd[act:combine])), *rest]
            seg_s = issue_pipeline_s(before, HOST_OP_S) + issue_pipeline_s(after, HOST_OP_S)
        else:
            phases = [
                (ops.dispatch, issued_s(fwd[sync:experts])),
                (ops.experts, issued_s(fwd[experts:combine])),
                *rest,
            ]
            seg_s = issue_pipeline_s(phases, HOST_OP_S)
        seg_s += ops.syncs * HOST_SYNC_S
        fwd_gpu_s = gpu_s(fwd)
        fwd.append(
            Segment("host_bound", "host issue after the dispatcher's sync", max(0.0, seg_s - fwd_gpu_s))
        )
        # A backward that is not split (every schedule but the zero-bubble ones and DualPipe)
        # issues each module's weight gradients with its input gradients in one autograd pass:
        # the CPU runs ahead over both, so only their joint issue time beyond their joint GPU
        # time is exposed (apart, a GPU-bound dgrad and a host-bound wgrad would each count).
        split = self.scn.parallel.schedule in SPLIT_BACKWARD_SCHEDULES
        b_ops = ops.backward_input + (0.0 if split else ops.backward_weight)
        b_gpu = gpu_s(b_in) + (0.0 if split else gpu_s(b_w))
        b_in_excess = b_ops * HOST_OP_S - b_gpu
        if ops.backward_syncs:  # recomputed activation syncs: the backward restarts from an empty queue
            b_in_excess = (
                issue_pipeline_s([(b_ops, b_gpu)], HOST_OP_S) + ops.backward_syncs * HOST_SYNC_S - b_gpu
            )
        b_w_excess = ops.backward_weight * HOST_OP_S - gpu_s(b_w) if split else 0.0
        b_in.append(Segment("host_bound", "host issue (backward)", max(0.0, b_in_excess)))
        b_w.append(Segment("host_bound", "host issue (weight gradients)", max(0.0, b_w_excess)))

    def _offload_activations(
        self, fwd: list, b_in: list, b_w: list, moe: bool, paired: bool = False
    ) -> float:
        """[memory] offload_activations: that fraction of the layer's stored activations is copied
        to host memory during its forward and back before its backward (Megatron-Core's
        activation offloading / TE's CPU offload), on copy engines beside the layer's work: only
        what outlasts the layer's pass is exposed (as `other`). The copy engine runs beside every
        stream-ordered part of the pass, the exposed TP/CP/EP communication included, not only its
        kernels: a faster GPU that shortens the kernels and exposes more of the asynchronous TP
        communication must not also expose more of the copy (the layer takes max(copy, pass)).
        A split backward (zero-bubble, DualPipe) runs the weight-gradient pass in another slot:
        the reload hides behind the input-gradient pass only, as the TP overlap does -- else a
        faster GPU shortening W lengthened B on the critical path (fuzz audit: 2x NVLink made a
        zb-h1 step 0.09% slower)."""
        scn = self.scn
        stored = scenario_layer_activations(scn, moe).stored * scn.memory.offload_activations
        t_copy = stored / scn.gpu.host_link_bytes_per_s
        fwd_s = sum(p.duration_s for p in fwd)
        split = scn.parallel.schedule in SPLIT_BACKWARD_SCHEDULES
        bwd_s = sum(p.duration_s for p in (b_in if split else b_in + b_w))
        names = OFFLOAD_PAIRED_NAMES if paired else ("activation offload (D2H)", "activation reload (H2D)")
        fwd.append(Segment("other", names[0], max(0.0, t_copy - fwd_s), 0.0, stored))
        b_in.insert(0, Segment("other", names[1], max(0.0, t_copy - bwd_s), 0.0, stored))
        return t_copy

    def _overlap_tp(
        self, parts: list, compute_parts: list, taken_s: float = 0.0, backward: bool = False
    ) -> list:
        """TP communication overlapped with GEMMs by Transformer Engine userbuffers
        (`--tp-comm-overlap`). Each userbuffer overlap is bound to one GEMM (ub_tp_pair), so a
        collective hides only behind its own GEMM, as its method allows (ub_exposed_s): what a
        large GEMM leaves idle does not hide a small GEMM's collective. TP traffic with no
        userbuffer GEMM beside it (a MoE layer's dispatcher gather, MLA's projections) keeps the
        pooled treatment against the GEMM time the pairs leave. The hidden part slows the GEMMs
        by the GPU's `overlap_slowdown` (SM/memory sharing). `taken_s`: kernel time already
        hiding another transfer (the CP ring behind attention), not counted twice."""
        tp_idx = [i for i, p in enumerate(parts) if p.category == "tp_comm" and p.duration_s > 0]
        if not tp_idx:
            return parts
        tp = self.scn.parallel.tp
        gemm_s = sum(p.duration_s for p in compute_parts if p.category == "compute" and p.flops > 0)
        exposed: dict[int, float] = {}
        pooled: list[int] = []
        used_s: dict[str, float] = {}
        for i in tp_idx:
            pair = ub_tp_pair(parts, compute_parts, i, backward)
            if pair is None:
                pooled.append(i)
                continue
            method, gemm = pair
            free_s = max(0.0, gemm.duration_s - used_s.get(gemm.name, 0.0))
            t = parts[i].duration_s
            exposed[i] = ub_exposed_s(method, t, free_s, tp)
            used_s[gemm.name] = used_s.get(gemm.name, 0.0) + min(free_s, t - exposed[i])
        # the rest hides behind what the pairs left of the layer's GEMM time
        pool_s = max(0.0, gemm_s - taken_s - sum(used_s.values()))
        pool_tp_s = sum(parts[i].duration_s for i in pooled)
        for i in pooled:
            exposed[i] = parts[i].duration_s * max(0.0, pool_tp_s - pool_s) / pool_tp_s
        hidden = sum(parts[i].duration_s - exposed[i] for i in tp_idx)
        out = [replace(p, duration_s=exposed[i]) if i in exposed else p for i, p in enumerate(parts)]
        out.append(
            Segment(
                "compute",
                "tp overlap interference",
                hidden * self.scn.gpu.efficiency.overlap_slowdown,
                0.0,
                0.0,
            )
        )
        return out

    def _mla_projections(
        self, mm, mem, fwd: list, b_in: list, T: int, tp_msg: float, heads_local: int, span
    ) -> None:
        """MLA's projections (DeepSeek-V2 §2.1) as Megatron-Core runs them: the q and kv
        down-projections whole on every TP rank, their RMSNorms, the up-projections split by heads."""
        m, d = self.scn.model, self.device
        mla = m.mla
        assert mla is not None
        h, a = m.hidden, d.activation_bytes
        q_in = mla.q_lora_rank or h
        first_n = (mla.q_lora_rank or 0) + mla.kv_lora_rank + mla.qk_rope_head_dim
        self._tp_entry(fwd, b_in, tp_msg, matmul_pass_times_s(d, T, first_n, h, 1, self.wgrad_bytes)[1:])
        if mla.q_lora_rank:
            mm("q down", T, mla.q_lora_rank, h)
            mem("q norm", 2 * T * mla.q_lora_rank * a)
        start = len(fwd)
        mm("q up" if mla.q_lora_rank else "q", T, heads_local * mla.qk_head_dim, q_in)
        if mla.q_lora_rank:  # mla_up_proj: the up-projections and RoPE (Megatron-Core)
            span("mla_up_proj", start)
        mm("kv down", T, mla.kv_lora_rank + mla.qk_rope_head_dim, h)
        mem("kv norm", 2 * T * mla.kv_lora_rank * a)
        start = len(fwd)
        mm("kv up", T, heads_local * (mla.qk_nope_head_dim + mla.v_head_dim), mla.kv_lora_rank)
        mem("rope", 2 * T * (heads_local + 1) * mla.qk_rope_head_dim * a)
        span("mla_up_proj", start)

    def _attention(
        self,
        T: int,
        s_local: int,
        s: int,
        heads_local: int,
        q_local: int,
        v_local: int,
        window: tuple[str, int] = FULL_ATTENTION,
    ):
        """Causal self-attention by the [kernels] implementation (simulator/kernels.py):
        FlashAttention-2/-3, cuDNN or Triton fused kernels, or unfused GEMMs + softmax through memory.
        The kernel model takes one head dim: the mean of the q·k and v head dims (MLA: 192 and 128),
        which keeps its FLOPs 2·b·s²·(q + v) exact. A sliding-window or chunked layer (`window`)
        runs the kernel over the keys it sees (kernels.SLIDING_WINDOW_NOTE) and counts its model
        FLOPs scaled by the share of the causal work its mask keeps (flops.LOCAL_ATTENTION_NOTE)."""
        d = self.device
        b = self.scn.parallel.micro_batch
        # scores + values, full s×s (a local layer: scaled by the share its mask keeps)
        model_flops_fwd = 2.0 * b * s_local * s * (q_local + v_local) * fl.local_attention_share(s, window)
        kern = self.scn.kernels
        impl = resolve_attention(self.scn.gpu, kern.attention, kern.flash_attention)
        head_dim = max(1, round((q_local + v_local) / (2 * heads_local)))
        cp = self.scn.parallel.cp
        kind, size = window
        local = {"sliding": f", sliding window {size}", "chunked": f", chunks of {size}"}.get(kind, "")
        name = f"attention ({impl}{local})"
        check_cp_comm_type(impl, self.scn.parallel)  # refused at load already (loading.py)
        if (
            window != FULL_ATTENTION
            and cp > 1
            and not (kind == "sliding" and self.scn.parallel.cp_comm_type == "a2a")
        ):
            # refused at load already (specs LOCAL_CP_NOTE)
            raise ConfigError(
                "context parallelism over local attention is not modeled", key="parallel.cp_comm_type"
            )
        if cp == 1 or impl == "unfused":
            shape: dict[str, Any] = dict(
                batch=b, seq_q=s_local, seq_kv=s, heads=heads_local, head_dim=head_dim, window=window
            )
            t_f = attention_time_s(d, impl, "fwd", **shape)
            t_b = attention_time_s(d, impl, "bwd", **shape)
            fwd = [Segment("compute", name, t_f, model_flops_fwd, 0.0)]
            bwd = [Segment("compute", name + " bwd", t_b, 2 * model_flops_fwd, 0.0)]
            bwd += self._sink_grad(impl, b * heads_local * s_local)
            return t_f, t_b, (fwd, bwd)
        comm_type = self.scn.parallel.cp_comm_type
        if comm_type == "a2a":
            return self._cp_a2a_attention(
                impl, name, s_local, s, heads_local, head_dim, model_flops_fwd, window
            )
        if comm_type == "allgather":
            return self._cp_allgather_attention(impl, name, s_local, heads_local, head_dim, model_flops_fwd)
        t_f, t_b = cp_ring_attention_s(d, impl, b, s_local, heads_local, head_dim, cp)
        if comm_type != "p2p":
            return self._cp_torch_attention(
                impl, name, t_f, t_b, s_local, heads_local, head_dim, model_flops_fwd
            )
        out_elems = b * s_local * heads_local * head_dim  # this rank's attention output (and dq)
        kv_elems = 2 * b * s_local * max(kv_local_heads(self.scn), 1) * head_dim  # K and V
        corr_f = (cp - 1) * CP_CORRECTION_BYTES_PER_ELEMENT * out_elems
        corr_b = (cp - 1) * CP_CORRECTION_BYTES_PER_ELEMENT * (out_elems + kv_elems)
        t_cf = memory_op_time_s(d, corr_f, kernels=cp - 1)
        t_cb = memory_op_time_s(d, corr_b, kernels=cp - 1)
        fwd, bwd = _ring_segments(
            name,
            cp,
            (t_f, t_b),
            model_flops_fwd,
            ("cp output correction", t_cf, corr_f),
            ("cp gradient correction", t_cb, corr_b),
        )
        bwd += self._sink_grad(impl, b * heads_local * s_local)
        return t_f, t_b, (fwd, bwd)

    def _cp_head_dim(self, heads_local: int, q_local: int, v_local: int) -> tuple[str, int]:
        """(attention implementation, the kernel model's head dim) as `_attention` takes them."""
        kern = self.scn.kernels
        impl = resolve_attention(self.scn.gpu, kern.attention, kern.flash_attention)
        return impl, max(1, round((q_local + v_local) / (2 * heads_local)))

    def _cp_allgather_attention(
        self, impl: str, name: str, s_local: int, heads: int, head_dim: int, model_flops_fwd: float
    ) -> tuple[float, float, tuple[list[Segment], list[Segment]]]:
        """Transformer Engine's all-gather CP (CP_COMM_NOTE "allgather"): two kernels per rank, one
        per local chunk against the gathered K/V prefix, on the slowest rank of each pass, and the
        reorder/accumulation copies (CP_AG_PASSES). Its collectives: `_cp_exchange`."""
        d, cp = self.device, self.scn.parallel.cp
        b = self.scn.parallel.micro_batch
        t_f, t_b = cp_allgather_attention_s(d, impl, b, s_local, heads, head_dim, cp)
        kvg = 2.0 * b * s_local * cp * kv_local_heads(self.scn) * head_dim  # gathered K and V
        o = float(b * s_local * heads * head_dim)  # the rank's queries / outputs
        prefix = kvg * (2 * cp + 1) / (2 * cp)  # K/V rows the two chunks' prefixes cover
        kv_f, o_f, kv_b, pre_b, o_b = CP_AG_PASSES
        bytes_f = 2 * ATTENTION_BYTES * (kv_f * kvg + o_f * o)
        bytes_b = 2 * ATTENTION_BYTES * (kv_b * kvg + pre_b * prefix + o_b * o)
        fwd = [
            Segment("compute", name + " (2 all-gather CP chunks)", t_f, model_flops_fwd, 0.0),
            Segment("compute", "cp all-gather copies", memory_op_time_s(d, bytes_f, kernels=4), 0.0, bytes_f),
        ]
        bwd = [
            Segment("compute", name + " bwd (2 all-gather CP chunks)", t_b, 2 * model_flops_fwd, 0.0),
            Segment(
                "compute", "cp all-gather grad copies", memory_op_time_s(d, bytes_b, kernels=10), 0.0, bytes_b
            ),
        ]
        bwd += self._sink_grad(impl, b * heads * s_local)
        return t_f, t_b, (fwd, bwd)

    def _cp_a2a_attention(
        self,
        impl: str,
        name: str,
        s_local: int,
        s: int,
        heads: int,
        head_dim: int,
        model_flops_fwd: float,
        window: tuple[str, int] = FULL_ATTENTION,
    ) -> tuple[float, float, tuple[list[Segment], list[Segment]]]:
        """Transformer Engine's all-to-all CP (CP_COMM_NOTE "a2a"): one causal kernel over the whole
        sequence on heads/cp heads, and the layout copies around each all-to-all (CP_A2A_PASSES)
        of q, k, v, out (forward) and dout, dq, dk, dv (backward). Its all-to-alls: `_cp_exchange`.
        A sliding-window layer runs that kernel with its window (the whole sequence is on the rank:
        exact; the one CP exchange Transformer Engine runs windows with besides all_gather)."""
        d, cp = self.device, self.scn.parallel.cp
        b = self.scn.parallel.micro_batch
        shape: dict[str, Any] = dict(
            batch=b, seq_q=s, seq_kv=s, heads=heads // cp, head_dim=head_dim, window=window
        )
        t_f = attention_time_s(d, impl, "fwd", **shape)
        t_b = attention_time_s(d, impl, "bwd", **shape)
        o = float(b * s_local * heads * head_dim)  # q (and out, dq, dout) per rank
        kv = 2.0 * b * s_local * kv_local_heads(self.scn) * head_dim  # k and v per rank
        moved = 2 * ATTENTION_BYTES * CP_A2A_PASSES * (2 * o + kv)  # q, out + k, v (dout, dq + dk, dv)
        t_m = memory_op_time_s(d, moved, kernels=8)
        fwd = [
            Segment("compute", name + " (a2a CP, heads/cp)", t_f, model_flops_fwd, 0.0),
            Segment("compute", "cp a2a layout copies", t_m, 0.0, moved),
        ]
        bwd = [
            Segment("compute", name + " bwd (a2a CP, heads/cp)", t_b, 2 * model_flops_fwd, 0.0),
            Segment("compute", "cp a2a grad layout copies", t_m, 0.0, moved),
        ]
        bwd += self._sink_grad(impl, b * heads * s_local)
        return t_f, t_b, (fwd, bwd)

    def _cp_torch_attention(
        self,
        impl: str,
        name: str,
        t_f: float,
        t_b: float,
        s_local: int,
        heads: int,
        head_dim: int,
        model_flops_fwd: float,
    ) -> tuple[float, float, tuple[list[Segment], list[Segment]]]:
        """PyTorch's experimental context_parallel ring (CP_COMM_NOTE "torch-*"): the ring's
        kernels (`t_f`, `t_b`) and its eager fp32 merges and gradient accumulations (TORCH_CP_*),
        over the rank's output O and the K/V it exchanges, expanded to the query heads."""
        d, cp = self.device, self.scn.parallel.cp
        b = self.scn.parallel.micro_batch
        o = float(b * s_local * heads * head_dim)
        kv = 2.0 * o  # K and V as SDPA receives them: repeat_kv to the query heads
        steps = cp - 1
        bytes_f = TORCH_CP_MERGE_ONCE_BYTES * o + steps * (
            TORCH_CP_MERGE_STEP_BYTES * o + TORCH_CP_KV_CAT_BYTES * kv
        )
        bytes_b = (
            TORCH_CP_GRAD_ONCE_BYTES * (o + kv)
            + cp * TORCH_CP_DKV_CAT_BYTES * kv
            + steps * (TORCH_CP_GRAD_STEP_BYTES * (o + kv) + TORCH_CP_KV_CAT_BYTES * kv)
        )
        t_mf = memory_op_time_s(d, bytes_f, kernels=2 + steps * (TORCH_CP_MERGE_STEP_KERNELS + 1))
        t_mb = memory_op_time_s(d, bytes_b, kernels=6 + cp * TORCH_CP_GRAD_STEP_KERNELS)
        fwd, bwd = _ring_segments(
            name,
            cp,
            (t_f, t_b),
            model_flops_fwd,
            ("cp fp32 output merge (eager)", t_mf, bytes_f),
            ("cp fp32 gradient accumulation (eager)", t_mb, bytes_b),
        )
        bwd += self._sink_grad(impl, b * heads * s_local)
        return t_f, t_b, (fwd, bwd)

    def _cp_exchange(
        self, s_local: int, heads_local: int, q_local: int, v_local: int, kv_local: int
    ) -> tuple[list[Segment], list[Segment], float, float]:
        """The K/V exchange of one layer's CP attention for the non-"p2p" `cp_comm_type`s
        (CP_COMM_NOTE): (forward parts, backward parts, seconds hidden behind the attention in
        each). Exposed: what no kernel runs beside."""
        par, d = self.scn.parallel, self.device
        b, cp, a = par.micro_batch, par.cp, ATTENTION_BYTES
        if par.cp_comm_type == "a2a":  # q, k, v then out; dout then dq, dk, dv: one after another
            q_msg = b * s_local * q_local * a
            kv_msg = b * s_local * kv_local * a
            o_msg = b * s_local * v_local * a
            t_f = self.coll("alltoall", "cp", q_msg) + 2 * self.coll("alltoall", "cp", kv_msg)
            t_o = self.coll("alltoall", "cp", o_msg)
            fwd = [
                Segment(
                    "cp_comm", "cp qkv + out all-to-all (exposed)", t_f + t_o, 0.0, q_msg + 2 * kv_msg + o_msg
                )
            ]
            bwd = [
                Segment(
                    "cp_comm",
                    "cp dout + dqkv all-to-all (exposed)",
                    t_o + t_f,
                    0.0,
                    q_msg + 2 * kv_msg + o_msg,
                )
            ]
            return fwd, bwd, 0.0, 0.0
        if par.cp_comm_type == "allgather":  # K and V each gathered, dK and dV each reduce-scattered
            msg = b * s_local * cp * kv_local * a
            t_ag = 2 * self.coll("allgather", "cp", msg)
            t_rs = 2 * self.coll("reducescatter", "cp", msg)
            fwd = [Segment("cp_comm", "cp kv all-gather (exposed)", t_ag, 0.0, 2 * msg)]
            bwd = [
                Segment(
                    "cp_comm", "cp kv all-gather + dkv reduce-scatter (exposed)", t_ag + t_rs, 0.0, 4 * msg
                )
            ]
            return fwd, bwd, 0.0, 0.0
        impl, head_dim = self._cp_head_dim(heads_local, q_local, v_local)
        (t0_f, ts_f), (t0_b, ts_b) = cp_ring_step_s(d, impl, b, s_local, heads_local, head_dim)
        kv_bytes = b * s_local * (q_local + v_local) * a  # this rank's K and V, query heads
        dkv_bytes = b * s_local * (q_local + v_local) * 4.0  # the fp32 dK/dV accumulator
        t_dkv = self.coll("sendrecv", "cp", dkv_bytes)
        if par.cp_comm_type == "torch-allgather":  # one all-gather, hidden by the first kernel only
            t_kv = self.coll("allgather", "cp", cp * kv_bytes)
            exp_f, hid_f = max(0.0, t_kv - t0_f), min(t_kv, t0_f)
            exp_kv_b, hid_kv_b = max(0.0, t_kv - t0_b), min(t_kv, t0_b)
            kv_msg = cp * kv_bytes
        else:  # torch-alltoall: one permute per step, each behind that step's kernel
            t_kv = self.coll("sendrecv", "cp", kv_bytes)
            exp_f = max(0.0, t_kv - t0_f) + (cp - 2) * max(0.0, t_kv - ts_f)
            hid_f = min(t_kv, t0_f) + (cp - 2) * min(t_kv, ts_f)
            exp_kv_b = max(0.0, t_kv - t0_b) + (cp - 2) * max(0.0, t_kv - ts_b)
            hid_kv_b = min(t_kv, t0_b) + (cp - 2) * min(t_kv, ts_b)
            kv_msg = (cp - 1) * kv_bytes
        # dK/dV: step i's permute waits behind step i+1's kernel; the last one after the loop
        exp_b = exp_kv_b + (cp - 1) * max(0.0, t_dkv - ts_b) + t_dkv
        hid_b = hid_kv_b + (cp - 1) * min(t_dkv, ts_b)
        fwd = [Segment("cp_comm", "cp kv exchange (torch)", exp_f, 0.0, kv_msg)]
        bwd = [Segment("cp_comm", "cp kv + fp32 dkv exchange (torch)", exp_b, 0.0, kv_msg + cp * dkv_bytes)]
        return fwd, bwd, hid_f, hid_b

    def _sink_grad(self, impl: str, rows: int) -> list[Segment]:
        """The attention sinks' gradient (SINK_GRAD_NOTE): one memory-bound pass over the fp32
        softmax statistics and row sums of this rank's `rows` (batch x heads x queries). Only
        cuDNN's backward graph computes it apart; Transformer Engine runs sinks on cuDNN fused
        attention (FlashAttention is disabled for them) or its unfused path."""
        if not self.scn.model.attention_sinks or impl != "cudnn":
            return []
        nbytes = SINK_GRAD_BYTES_PER_ROW * rows
        return [
            Segment(
                "compute", "attention sink grad (dSink)", memory_op_time_s(self.device, nbytes), 0.0, nbytes
            )
        ]

    def _tp_entry(
        self, fwd: list, b_in: list, msg: float, gemm_s: tuple[float, ...], ag_msg: float | None = None
    ) -> None:
        """Column-parallel entry (Megatron's `f` operator): with SP an AllGather forward; in
        backward Megatron's LinearWithGradAccumulationAndAsyncCommunication re-gathers the
        input (overlapped with the dgrad GEMM) and reduce-scatters the input gradient
        (overlapped with the wgrad GEMM); without SP it all-reduces the input gradient
        asynchronously beside the wgrad GEMM. Only what outlasts its GEMM (`gemm_s` = the
        (dgrad, wgrad) times of the entry GEMM) is exposed. `ag_msg`: the AllGathers' bytes when
        they differ from `msg` (userbuffers' FP8 gathers, UB_FP8_AG_NOTE)."""
        par = self.scn.parallel
        if par.tp == 1:
            return
        dgrad_s, wgrad_s = gemm_s
        if par.tp_comm_overlap or not tp_comm_async(self.scn):
            # hidden by _overlap_tp instead (never hide twice), or a stack without Megatron's
            # asynchronous TP backward communication (2021-22 Megatron-LM): all of it exposed
            dgrad_s = wgrad_s = 0.0
        wgrad_s = _beside_wgrad_s(par, wgrad_s)
        if par.sequence_parallel:
            ag = msg if ag_msg is None else ag_msg
            t_ag = self.coll("allgather", "tp", ag)
            t_rs = self.coll("reducescatter", "tp", msg)
            fwd.append(Segment("tp_comm", "tp allgather", t_ag, 0.0, ag))
            b_in.append(Segment("tp_comm", "tp allgather (beside dgrad)", max(0.0, t_ag - dgrad_s), 0.0, ag))
            b_in.append(
                Segment("tp_comm", "tp reducescatter (beside wgrad)", max(0.0, t_rs - wgrad_s), 0.0, msg)
            )
            hidden = min(t_ag, dgrad_s) + min(t_rs, wgrad_s)
        else:
            t_ar = self.coll("allreduce", "tp", msg)
            b_in.append(Segment("tp_comm", "tp allreduce (beside wgrad)", max(0.0, t_ar - wgrad_s), 0.0, msg))
            hidden = min(t_ar, wgrad_s)
        if hidden > 0:
            # the NCCL kernels run beside the dgrad/wgrad GEMM on the same GPU (async_op=True in
            # megatron/core/tensor_parallel/layers.py LinearWithGradAccumulationAndAsyncCommunication
            # .backward, which delays the dgrad GEMM "to have gather scheduled first and have GPU
            # resources allocated"), sharing its SMs and HBM: the same interference as userbuffer
            # overlap (_overlap_tp), at the stack's overlap_slowdown
            b_in.append(
                Segment(
                    "compute",
                    "tp async interference",
                    hidden * self.scn.gpu.efficiency.overlap_slowdown,
                    0.0,
                    0.0,
                )
            )

    def _tp_exit(self, fwd: list, b_in: list, msg: float, ag_msg: float | None = None) -> None:
        """Row-parallel exit: SP ReduceScatter forward / AllGather backward (or the forward
        AllReduce of Megatron's `g` operator without SP); `ag_msg` as in _tp_entry."""
        par = self.scn.parallel
        if par.tp == 1:
            return
        if par.sequence_parallel:
            fwd.append(
                Segment("tp_comm", "tp reducescatter", self.coll("reducescatter", "tp", msg), 0.0, msg)
            )
            ag = msg if ag_msg is None else ag_msg
            b_in.append(Segment("tp_comm", "tp allgather", self.coll("allgather", "tp", ag), 0.0, ag))
        else:
            fwd.append(Segment("tp_comm", "tp allreduce", self.coll("allreduce", "tp", msg), 0.0, msg))

    def _bert_padding(self, fwd: list, b_in: list, qkv_elems: float, out_elems: float) -> None:
        """flash-attn's bert_padding around the attention kernel (BERT_PADDING_BYTES): gather
        copies of q, k, v and the zero-filled scatter of the output, and their gradients; every
        element is 16-bit (the layer's activations under autocast)."""
        d = self.device
        qf, of, kf, qb, ob, kb = BERT_PADDING_BYTES
        f_bytes = qf * qkv_elems + of * out_elems
        b_bytes = qb * qkv_elems + ob * out_elems
        t_f = memory_op_time_s(d, f_bytes, kernels=int(kf))
        t_b = memory_op_time_s(d, b_bytes, kernels=int(kb))
        fwd.append(Segment("compute", "attention unpad/pad", t_f, 0.0, f_bytes))
        syncs, calls = BERT_PADDING_HOST
        fwd.append(
            Segment("host_bound", UNPAD_HOST_SEGMENT, syncs * HOST_SYNC_S + calls * TORCH_OP_S, 0.0, 0.0)
        )
        b_in.append(Segment("compute", "attention unpad/pad bwd", t_b, 0.0, b_bytes))

    def _eager(self, fwd: list, b_in: list, name: str, passes: tuple, unit_bytes: float) -> None:
        """Eager elementwise ops: `passes` = (forward passes, kernels, backward passes, kernels)
        over a tensor of `unit_bytes` (or, for EXPERT_BIAS_BYTES, bytes per element times the
        element count given as `unit_bytes`)."""
        d = self.device
        f_p, f_k, b_p, b_k = passes
        fwd_bytes, bwd_bytes = f_p * unit_bytes, b_p * unit_bytes
        fwd.append(Segment("compute", name, memory_op_time_s(d, fwd_bytes, kernels=f_k), 0.0, fwd_bytes))
        if bwd_bytes > 0:
            b_in.append(
                Segment("compute", name + " bwd", memory_op_time_s(d, bwd_bytes, kernels=b_k), 0.0, bwd_bytes)
            )

    def _moe(
        self, fwd: list, b_in: list, b_w: list, mm, mem, T: int, tp_msg: float, span
    ) -> tuple[int, int, int]:
        """Routed experts as Megatron-Core's all-to-all token dispatcher runs them.

        Each rank routes the tokens it holds (T/tp with sequence parallelism): router GEMM and
        its softmax/top-k, permute (one copy per chosen expert), dispatch all-to-all over EP,
        with etp > 1 an all-gather over the expert-TP group, the grouped expert GEMMs of its
        E/ep experts (each matrix 1/etp), then the way back (reduce-scatter, combine, unpermute).
        The mean rank's experts see T·top_k/E tokens each; the busiest rank's factor
        (Scenario.expert_load_imbalance: forced balancing's sampling spread, dropless routing's
        skew, or an explicit `load_imbalance`; routing_skew.py) multiplies its expert GEMMs and
        all-to-all (every rank waits for it at the combine).
        Returns the indices in `fwd` of the dispatcher's host sync (after the first permute,
        Megatron's "before_ep_alltoall"), of the experts' first op and of the combine's first op.
        """
        scn, d = self.scn, self.device
        m, par = scn.model, scn.parallel
        f0, b0 = len(fwd), len(b_in)  # this layer's segments start here
        a = d.activation_bytes
        h, k = m.hidden, m.top_k
        etp = par.expert_tp
        skew = scn.expert_load_imbalance
        T_in = T // par.tp if par.tp > 1 else T  # tokens this rank routes (SP shard)
        # The router is a plain PyTorch matmul in the activations' 16-bit dtype (Megatron-Core
        # moe/router.py TopKRouter.gating -> moe_utils.router_gating_linear; its weight is not a
        # Transformer Engine module, so FP8/MXFP8 autocast neither quantizes nor speeds it up)
        router_device = replace(d, dtype="bf16") if d.dtype not in ("bf16", "fp16") else d
        # its wgrad returns a new 16-bit tensor (RouterGatingLinearFunction.backward, moe_utils.py
        # @d98e8a64), not accumulated into main_grad by the GEMM: 2 bytes per element
        t_router, t_router_d, t_router_w = matmul_pass_times_s(router_device, T_in, m.num_experts, h)
        f_router = 2.0 * T_in * m.num_experts * h
        fwd.append(Segment("compute", "router", t_router, f_router, 0.0))
        b_in.append(Segment("compute", "router dgrad", t_router_d, f_router, 0.0))
        b_w.append(Segment("compute", "router wgrad", t_router_w, f_router, 0.0))
        mem("router softmax/top-k", ROUTER_BYTES_PER_LOGIT * T_in * m.num_experts, kernels=2)
        experts_local = m.num_experts // par.ep
        routed = T_in * k * etp  # token copies this rank's experts see (after the etp gather)
        per_expert = max(round(routed * skew / experts_local), 1)
        f_local = m.expert_ffn // etp
        fc1_n = (2 if m.gated_mlp else 1) * f_local
        gather = par.ep == 1 and etp == par.tp and par.tp > 1  # experts TP-split like a dense MLP
        eager = not scn.kernels.fused_grouped_mlp  # TE GroupedLinear (TE_MULTI_STREAM_NOTE)
        streams = TE_GEMM_STREAMS if eager else 0
        if gather:
            fc1_s = tuple(
                grouped_matmul_time_s(
                    d,
                    per_expert,
                    fc1_n,
                    h,
                    experts_local,
                    m.uneven_expert_counts,
                    streams,
                    pass_,
                    self.wgrad_bytes,
                )
                for pass_ in ("dgrad", "wgrad")
            )
            self._tp_entry(fwd, b_in, tp_msg, fc1_s)
        # the rows the permute reads: the rank's own tokens (alltoall, allgather), or with a flex
        # dispatcher the tokens it received, one per (token, destination rank) (FLEX_PERMUTE_NOTE)
        src_rows = 1.0
        if scn.kernels.moe_dispatcher in FLEX_DISPATCHERS and par.ep > 1:
            src_rows = self._flex_hits(self._ep_nodes())[1]
        mem("moe permute", (src_rows + k) * T_in * h * a)
        if scn.kernels.moe_dispatcher == "hybridep" and par.ep > 1:
            fwd.append(self._hybridep_metadata(T_in, experts_local))
        sync = len(fwd)
        t_dispatch = t_combine = 0.0
        if par.ep > 1:
            dispatch_msg, combine_msg, t_dispatch, t_combine, t_combine_bwd = self._ep_alltoall(T_in)
            fwd.append(Segment("ep_comm", "ep dispatch", t_dispatch * skew, 0.0, dispatch_msg))
            b_in.append(Segment("ep_comm", "ep combine bwd", t_combine_bwd * skew, 0.0, combine_msg))
        if etp > 1 and not gather:
            etp_msg = routed * h * a
            t_ag = self.coll("allgather", "tp", etp_msg)
            fwd.append(Segment("ep_comm", "etp allgather", t_ag * skew, 0.0, etp_msg))
            b_in.append(
                Segment(
                    "ep_comm",
                    "etp reducescatter bwd",
                    self.coll("reducescatter", "tp", etp_msg) * skew,
                    0.0,
                    etp_msg,
                )
            )
        uneven = m.uneven_expert_counts  # random or skewed routing: unequal counts
        # the all-to-all dispatcher's second permutation: received tokens sorted by local expert
        sort_chunks = scn.kernels.moe_dispatcher == "alltoall" and experts_local > 1
        if sort_chunks:
            sorted_bytes = max(round(routed * skew), 1) * h * a
            self._eager(fwd, b_in, "moe sort by expert", SORT_CHUNKS_PASSES, sorted_bytes)

        # the fused grouped MLP's CuTe DSL epilogues (CUTEDSL_EPILOGUE_NOTE)
        epilogue = (
            not eager
            and d.dtype in CUTEDSL_EPILOGUE_DTYPES
            and m.gated_mlp
            and architecture(d.gpu.name) in CUTEDSL_EPILOGUE_ARCHITECTURES
        )

        # the eager path's per-GEMM residual (EXPERT_GEMM_OVERHEAD_NOTE): per GroupedLinear and pass
        overhead = expert_gemm_overhead_s(scn) * experts_local

        def grouped(name: str, n: int, kk: int, input_cast: bool = True, grad_cast: bool = True) -> None:
            # forward, dgrad and wgrad each at its own shape (the wgrad reduces over the tokens);
            # input_cast / grad_cast: whether the input (forward) / output gradient (backward) is
            # quantized by a kernel of its own (not by the previous GEMM's epilogue)
            tf, td, tw = (
                grouped_matmul_time_s(
                    d, per_expert, n, kk, experts_local, uneven, streams, pass_, self.wgrad_bytes
                )
                for pass_ in GEMM_PASSES
            )
            f = 2.0 * per_expert * n * kk * experts_local
            fwd.append(Segment("compute", name, tf, f, 0.0))
            b_in.append(Segment("compute", name + " dgrad", td, f, 0.0))
            b_w.append(Segment("compute", name + " wgrad", tw, f, 0.0))
            if overhead > 0:  # "eager expert GEMM overhead (fc1)", "(fc1 dgrad)", "(fc1 wgrad)"
                short = name.removeprefix("expert ")
                fwd.append(Segment("compute", f"{EXPERT_GEMM_OVERHEAD_NAME} ({short})", overhead))
                b_in.append(Segment("compute", f"{EXPERT_GEMM_OVERHEAD_NAME} ({short} dgrad)", overhead))
                b_w.append(Segment("compute", f"{EXPERT_GEMM_OVERHEAD_NAME} ({short} wgrad)", overhead))
            quant = quant_bytes_per_element(d, self.scn.fp8_recipe)
            if quant:
                label = "fp8 cast" if d.dtype == "fp8" else f"{d.dtype} quantize"
                cast_in, cast_grad = (
                    quant * per_expert * kk * experts_local,
                    quant * per_expert * n * experts_local,
                )
                per_expert_kernels = eager and (
                    d.dtype in PER_EXPERT_QUANTIZE_DTYPES
                    or (d.dtype == "fp8" and self.scn.fp8_recipe in PER_EXPERT_FP8_RECIPES)
                )
                kernels = (experts_local if per_expert_kernels else 1) * quant_kernels_per_tensor(
                    d, self.scn.fp8_recipe
                )
                if per_expert_kernels and experts_local > 1:
                    label += " (per expert)"
                if input_cast:
                    fwd.append(Segment("compute", label, memory_op_time_s(d, cast_in, kernels), 0.0, cast_in))
                if grad_cast:
                    b_in.append(
                        Segment("compute", label, memory_op_time_s(d, cast_grad, kernels), 0.0, cast_grad)
                    )

        experts = len(fwd)
        if d.dtype in QUANTIZED_EXPERT_DTYPES and scn.kernels.moe_dispatcher != "hybridep":
            rows_bytes = per_expert * experts_local * h * a
            self._eager(fwd, b_in, "expert quantization pad/unpad", QUANT_PADDING_PASSES, rows_bytes)
        grouped("expert fc1", fc1_n, h, grad_cast=not epilogue)
        rows = per_expert * experts_local  # token copies through this rank's experts
        if m.linear_bias:  # fc1 bias gradient: one read of the fc1 output gradient (TE GroupedLinear)
            b_w.append(
                Segment(
                    "compute",
                    "expert fc1 bias grad",
                    memory_op_time_s(d, rows * fc1_n * a),
                    0.0,
                    rows * fc1_n * a,
                )
            )
        start = len(fwd)
        if m.activation == "clamped_quick_geglu" and eager:
            self._eager(fwd, b_in, "expert act input clamps", CLAMPED_GLU_PASSES, rows * fc1_n * a)
        self.act_sync_index = len(fwd)  # the eager clamped GeGLU's host sync (hostbound.CLAMPED_GLU_OPS)
        swiglu = m.gated_mlp and not m.activation and eager  # bias_swiglu_impl (MEMORY_KINDS)
        if epilogue:
            # fc1's epilogue writes the GLU output in MXFP8 (rowwise and columnwise); fc2's dgrad
            # epilogue reads the 16-bit pre-activation and writes fc1's output gradient in MXFP8
            # instead of its own 16-bit output (CUTEDSL_EPILOGUE_NOTE)
            mx = QUANT_BYTES_PER_ELEMENT[d.dtype] - 2  # the two MXFP8 copies with their scales
            glu_out = mx * rows * f_local
            dglu = (a + mx) * rows * fc1_n - a * rows * f_local
            fwd.append(
                Segment(
                    "compute",
                    "expert fc1 epilogue (GLU, quantize)",
                    memory_op_time_s(d, glu_out, 0),
                    0.0,
                    glu_out,
                )
            )
            b_in.append(
                Segment(
                    "compute",
                    "expert fc2 dgrad epilogue (dGLU, quantize)",
                    memory_op_time_s(d, dglu, 0),
                    0.0,
                    dglu,
                )
            )
        else:
            mem("expert act", (3 if m.gated_mlp else 2) * rows * f_local * a, kind="swiglu" if swiglu else "")
        span("moe_act", start)
        grouped("expert fc2", h, f_local, input_cast=not epilogue)
        if m.linear_bias and eager:
            f_b, f_ke, f_k0, b_b, b_ke, b_k0 = EXPERT_BIAS_BYTES
            passes = (f_b, f_ke * experts_local + f_k0, b_b, b_ke * experts_local + b_k0)
            self._eager(fwd, b_in, "expert fc2 bias (eager, per expert)", passes, rows * h)
        shared = (0, 0, 0, 0, 0, 0)  # [start, end) of the shared expert's fwd, b_in, b_w segments
        if m.shared_expert_ffn_hidden:
            fs = m.shared_expert_ffn_hidden // par.tp
            start, sb, sw = len(fwd), len(b_in), len(b_w)
            mm("shared fc1", T, (2 if m.gated_mlp else 1) * fs, h)
            mm("shared fc2", T, h, fs)
            span("shared_experts", start)
            shared = (start, len(fwd), sb, len(b_in), sw, len(b_w))
        combine = len(fwd)
        if sort_chunks:
            self._eager(fwd, b_in, "moe unsort by expert", SORT_CHUNKS_PASSES, rows * h * a)
        if etp > 1 and not gather:
            etp_msg = routed * h * a
            fwd.append(
                Segment(
                    "ep_comm",
                    "etp reducescatter",
                    self.coll("reducescatter", "tp", etp_msg) * skew,
                    0.0,
                    etp_msg,
                )
            )
            b_in.append(
                Segment(
                    "ep_comm", "etp allgather bwd", self.coll("allgather", "tp", etp_msg) * skew, 0.0, etp_msg
                )
            )
        if par.ep > 1:
            fwd.append(Segment("ep_comm", "ep combine", t_combine * skew, 0.0, combine_msg))
            b_in.append(Segment("ep_comm", "ep dispatch bwd", t_combine * skew, 0.0, combine_msg))
        mem("moe unpermute", (src_rows + k) * T_in * h * a)
        if gather:
            self._tp_exit(fwd, b_in, tp_msg)
        if par.shared_expert_overlap:
            self._shared_expert_overlap(fwd, b_in, b_w, f0, b0, shared)
        return sync, experts, combine

    def _shared_expert_overlap(
        self, fwd: list, b_in: list, b_w: list, f0: int, b0: int, shared: tuple[int, ...]
    ) -> None:
        """Megatron-Core --moe-shared-expert-overlap (SHARED_OVERLAP_NOTE): in each pass the
        layer's EP communication (segments from f0 / b0 on) keeps only its excess over the shared
        expert's compute on the side stream, max(0, comm - shared); the hidden part slows the
        compute by the SM interference the EP overlap charges (sm_interference_s)."""
        fs, fe, bs, be, ws, we = shared
        # the backward's shared GEMMs: dgrad and wgrad run together (one autograd node on the
        # side stream) unless a zero-bubble schedule defers the weight gradients
        split_w = self.scn.parallel.schedule in SPLIT_BACKWARD_SCHEDULES
        passes = (
            (fwd, f0, sum(sg.duration_s for sg in fwd[fs:fe]), "shared expert overlap interference"),
            (
                b_in,
                b0,
                sum(sg.duration_s for sg in b_in[bs:be])
                + (0.0 if split_w else sum(sg.duration_s for sg in b_w[ws:we])),
                "shared expert overlap interference bwd",
            ),
        )
        for parts, first, shared_s, name in passes:
            comm_s = sum(sg.duration_s for sg in parts[first:] if sg.category == "ep_comm")
            hidden_s = min(comm_s, shared_s)
            if hidden_s <= 0.0:
                continue
            keep = (comm_s - hidden_s) / comm_s
            for i in range(first, len(parts)):
                if parts[i].category == "ep_comm":
                    parts[i] = replace(parts[i], duration_s=parts[i].duration_s * keep)
            parts.append(Segment("compute", name, sm_interference_s(hidden_s, ep_sm_fraction(self.scn))))

    def _hybridep_metadata(self, tokens: int, experts_local: int) -> Segment:
        """HybridEP's routing metadata before a forward dispatch (HYBRIDEP_METADATA_NOTE): the EP
        all-gather of the [tokens, experts] boolean routing maps, then the preprocessing,
        permute-preprocessing and padding kernels over the gathered map -- each rank processes all
        ep x tokens rows."""
        ep = self.scn.parallel.ep
        gathered = float(ep * tokens * self.scn.model.num_experts)  # bytes, one per (token, expert)
        rows = ep * tokens
        kernel_bytes = (
            gathered  # the preprocessing kernel reads the gathered map
            + rows * HYBRIDEP_SPARSE_TO_DENSE_BYTES  # and writes the sparse-to-dense map
            + 2 * rows * experts_local  # the local-expert map, written, then read by the permute prep
            + rows * experts_local * HYBRIDEP_ROW_ID_BYTES  # which writes the row-id map
        )
        t = self.coll("allgather", "ep", gathered) + memory_op_time_s(
            self.device, kernel_bytes, HYBRIDEP_METADATA_KERNELS
        )
        return Segment("ep_comm", "hybridep routing metadata", t, 0.0, gathered)

    def _ep_alltoall(self, tokens: int) -> tuple[float, float, float, float, float]:
        """(dispatch bytes, combine bytes, dispatch s, combine s, backward-of-combine s) of one MoE
        layer's all-to-all for the `tokens` this rank routes.

        Dispatch sends the rank's token copies (hidden-wide) to the ranks of their experts, in bf16
        or fp8 (1 byte + one fp32 scale per 128 elements, DeepSeek-V3 §3.3); combine returns them
        in bf16; the backward runs a combine-shaped all-to-all for the dispatch's gradient and a
        bf16 dispatch-shaped one for the combine's. What is sent depends on the dispatcher
        (simulator/ep_dispatch.py):

        * allgather (NCCL): all-gather of the TP x EP group's hidden states, reduce-scatter back.
        * alltoall (NCCL): one copy per chosen expert (top_k per token). Node-limited
          routing (`max_nodes_per_token`, DeepSeek-V3 §3.2.1) comes with hierarchical forwarding
          (one IB transfer per destination node, then NVLink there): a token crosses IB once per
          distinct remote node its top-k experts live on -- expected n·(1 − (1 − 1/n)^k) nodes
          of n, at most `max_nodes_per_token`; the message is scaled by (distinct nodes / k).
        * deepep / hybridep: one copy per destination rank inside the NVLink domain; across nodes
          one RDMA copy per destination node (the comm model's all-to-all of those bytes: IB and
          NVLink legs side by side), forwarded over NVLink to the ranks there (a leg bounded by the
          NVLink rate: every (token, rank) pair not on the receiving rail crosses it once). Inside
          one Blackwell NVLink domain the kernels take at least their published time
          (ep_dispatch.DISPATCHER_ALGBW_GBPS, with `[kernels] ep_comm_sms` SMs).
        """
        m, par, topo = self.scn.model, self.scn.parallel, self.scn.topology
        h, k = m.hidden, m.top_k
        a = self.device.activation_bytes
        elem = 1 + 4 / 128 if m.dispatch_dtype == "fp8" else a
        # nodes the group's ranks lie in: never more than its ranks (with tp·cp above a node's
        # GPUs every EP rank is on a node of its own)
        nodes = self._ep_nodes()
        limit = m.node_limit
        dispatcher = self.scn.kernels.moe_dispatcher
        if dispatcher == "allgather":
            # MoEAllGatherTokenDispatcher: every rank gathers all hidden states of the TP x EP
            # group (gather_from_sequence_parallel_region over tp_ep_group), keeps its experts'
            # tokens, and the combine reduce-scatters them back; costed on the EP group with the
            # group's whole output (the TP-local share rides NVLink beside it)
            group_rows = tokens * max(par.tp, 1) * par.ep
            gathered = float(group_rows * h * elem)
            t_ag = self.coll("allgather", "ep", gathered)
            t_rs = self.coll("reducescatter", "ep", float(group_rows * h * a))
            return (
                gathered,
                float(group_rows * h * a),
                t_ag,
                t_rs,
                self.coll("allgather", "ep", float(group_rows * h * a)),
            )
        if dispatcher not in FLEX_DISPATCHERS:
            dispatch_msg, combine_msg = float(tokens * k * h * elem), float(tokens * k * h * a)
            scale = 1.0
            if nodes > 1 and limit:
                reach = nodes * (1.0 - (1.0 - 1.0 / nodes) ** k)  # expected distinct nodes of k experts
                scale = min(reach, float(limit)) / k
            t_d = self.coll("alltoall", "ep", dispatch_msg * scale)
            t_c = self.coll("alltoall", "ep", combine_msg * scale)
            return dispatch_msg, combine_msg, t_d, t_c, t_c
        per_node = par.ep // nodes if nodes > 1 else par.ep  # EP ranks in one NVLink domain
        node_hits, rank_hits = self._flex_hits(nodes)
        rows = tokens * rank_hits  # (token, destination rank) pairs: rows each rank receives
        dispatch_msg, combine_msg = rows * h * elem, rows * h * a
        arch = architecture(self.scn.gpu.name)
        sms = self.scn.kernels.ep_comm_sms_used

        def leg(row_bytes: float, op: str) -> float:
            msg = rows * row_bytes  # what a rank receives
            if nodes == 1:
                t = self.coll("alltoall", "ep", msg)
                neck = self.seen.get(("alltoall", "ep", round(msg), 0), {}).get("bottleneck", "")
                if arch in TABLE_ARCHITECTURES:
                    t_kernel = msg / kernel_algbw_bytes_per_s(dispatcher, per_node, sms, op)
                    if t_kernel > t:
                        t, neck = t_kernel, f"{dispatcher} kernel"
                return self._flex_record(dispatcher, msg, t, neck)
            ib_msg = tokens * node_hits * row_bytes
            t = self.coll("alltoall", "ep", ib_msg)
            neck = self.seen.get(("alltoall", "ep", round(ib_msg), 0), {}).get("bottleneck", "")
            if arch in RDMA_TABLE_ARCHITECTURES:
                t_kernel = ib_msg / kernel_algbw_bytes_per_s(dispatcher, par.ep, sms, op, rdma=True)
                if t_kernel > t:
                    t, neck = t_kernel, f"{dispatcher} kernel"
            nvlink = topo.intra_node.link_bandwidth_bytes_per_s * self.scn.gpu.efficiency.nccl_bw_fraction
            t_forward = msg * (per_node - 1) / per_node / nvlink
            if t_forward > t:
                t, neck = t_forward, "nvlink forward"
            return self._flex_record(dispatcher, msg, t, neck)

        t_d = leg(h * elem, "dispatch_fp8" if m.dispatch_dtype == "fp8" else "dispatch_bf16")
        t_c = leg(h * a, "combine")
        t_d_bf16 = leg(h * a, "dispatch_bf16")
        return dispatch_msg, combine_msg, t_d, t_c, t_d_bf16

    def _ep_nodes(self) -> int:
        """Nodes the EP group's ranks lie in (never more than its ranks)."""
        par, topo = self.scn.parallel, self.scn.topology
        span = par.ep * (par.tp * par.cp if par.dp % par.ep == 0 else 1)  # GPUs the EP group covers
        return min(par.ep, max(1, -(-span // topo.gpus_per_node)))

    def _flex_hits(self, nodes: int) -> tuple[float, float]:
        """(nodes, ranks) a token's top-k experts reach under uniform (or round-robin) routing, for the flex
        dispatchers that send a token once per destination node / rank (node-limited routing:
        its experts lie in `max_nodes_per_token` nodes)."""
        m, par = self.scn.model, self.scn.parallel
        k, E, limit = m.top_k, m.num_experts, m.node_limit
        if m.routing == "round_robin":  # adjacent experts
            return round_robin_groups_hit(E, nodes, k), round_robin_groups_hit(E, par.ep, k)
        per_node = par.ep // nodes if nodes > 1 else par.ep
        if nodes > 1 and limit and limit < nodes:  # the token's experts lie in `limit` nodes
            node_hits = min(expected_groups_hit(E, nodes, k), float(limit))
            return node_hits, expected_groups_hit(E * limit // nodes, limit * per_node, k)
        return expected_groups_hit(E, nodes, k), expected_groups_hit(E, par.ep, k)

    def _flex_record(self, dispatcher: str, message_bytes: float, t: float, bottleneck: str) -> float:
        """Report a DeepEP / HybridEP dispatch or combine in `collectives` (algorithm = the
        dispatcher, bottleneck = what bound it) in place of the fabric all-to-all it was
        checked against; returns `t`."""
        n = self.comm.group_size("ep")
        key = ("alltoall", "ep", round(message_bytes), 0)
        known = self.seen.get(key)
        if t > 0 and (known is None or known["algorithm"] != dispatcher or t > known["time_s"]):
            self.seen[key] = {
                "group": "ep",
                "kind": "alltoall",
                "message_bytes": message_bytes,
                "algorithm": dispatcher,
                "time_s": t,
                "bottleneck": bottleneck,
                "bus_bandwidth_bytes_per_s": message_bytes * (n - 1) / n / t,
            }
        return t

    def _ep_pair(
        self, fwd: list, b_in: list, b_w: list, marks: tuple[int, ...], b_moe: int, w_moe: int
    ) -> EpPair:
        """This MoE layer in Megatron-Core's combined 1F1B (`combined_layer_s`): the part of its
        EP all-to-all the other micro-batch's compute cannot hide, and the compute slowed by the
        SMs the communication kernels hold while the rest is hidden. The forward is split at the
        dispatcher's marks; the backward at the MoE block, its EP time by side (the combine's
        gradient first, the dispatch's after the experts: unequal for the flex dispatchers, whose
        combine and dispatch kernels run at different rates, ep_dispatch.py)."""
        _, sync, experts, combine = marks

        def comp(parts: list) -> float:
            return sum(p.duration_s for p in parts if p.category != "ep_comm")

        def ep(parts: list) -> float:
            return sum(p.duration_s for p in parts if p.category == "ep_comm")

        # the backward's combine side (the combine's gradient, a dispatch-shaped all-to-all, and
        # the etp reduce-scatter's) runs first, its dispatch side after the experts
        combine_b = ep([p for p in b_in if p.name in ("ep combine bwd", "etp allgather bwd")])
        # the forward's dispatch node on the comm stream: HybridEP's routing metadata (issued
        # before the dispatcher's host sync, fused_a2a.py HybridEPDispatch -> dispatch_with_permute)
        # and the dispatch itself
        comm = (combine_b, ep(fwd[:experts]), ep(b_in) - combine_b, ep(fwd[combine:]))
        total_ep = sum(comm)
        if total_ep <= 0:
            return EpPair(1.0, 0.0)
        attn_f, mlp_f = comp(fwd[:sync]), comp(fwd[sync:])
        attn_b = comp(b_in[:b_moe]) + comp(b_w[:w_moe])
        mlp_dgrad, mlp_wgrad = comp(b_in[b_moe:]), comp(b_w[w_moe:])
        delayed = self.scn.parallel.delay_wgrad_compute
        paired_ideal = combined_layer_s(attn_f, mlp_f, attn_b, mlp_dgrad, mlp_wgrad, comm, delayed)
        paired = paired_ideal
        if not self.scn.kernels.ep_comm_high_priority:
            # the first kernel of mlp_bwd, the delayed wgrad, mlp_fwd and pre_dispatch_bwd, in
            # execution order (a backward node runs its forward's ops in reverse)
            first = (
                self._first_kernel_s(b_in[b_moe:][::-1]),
                self._first_kernel_s(b_w[w_moe:][::-1]),
                self._first_kernel_s(fwd[sync:]),
                self._first_kernel_s(b_in[:b_moe][::-1] + b_w[:w_moe][::-1]),
            )
            paired = combined_layer_s(attn_f, mlp_f, attn_b, mlp_dgrad, mlp_wgrad, comm, delayed, first)
        compute = attn_f + mlp_f + attn_b + mlp_dgrad + mlp_wgrad
        exposed_ideal = min(max(0.0, paired_ideal - compute), total_ep)
        exposed = min(max(0.0, paired - compute), total_ep)
        interference = sm_interference_s(total_ep - exposed, ep_sm_fraction(self.scn))
        # The CPU issues the pair's nodes in TransformerLayerSchedulePlan.run's order, and the
        # forward's dispatcher syncs with the host once per layer (hostbound.py), inside
        # moe_dispatch.forward, which run() calls after the backward's mlp.backward: when the
        # CPU returns from it the GPU holds the expert dgrad and nothing else, and every other
        # node of the pair (and the next layer's combine gradient, attention and router) must be
        # issued before the next sync (the Megatron-LM DeepSeek-V3 GB200 guide §3.2: the split
        # schedule's "synchronization between different stages ... aggravates the CPU
        # overhead"). `hostbound.pair_issue_s` runs that segment as a CPU -> two-stream pipeline
        # (each node's ops, plus the schedule nodes' own kernel-free host calls,
        # `schedule_node_calls`); the pair takes the longer of it and its GPU time. Every sync
        # of both passes is waited for: the forward's (the dispatcher's, GPT-OSS's clamped
        # GeGLU's) and the backward's. The dispatchers' backward waits for nothing on the host
        # -- the all-to-all split sizes and the TE GroupedLinear m_splits stay on the host from
        # the forward (token_dispatcher.py `_maybe_dtoh_and_synchronize` runs in
        # dispatch_preprocess / token_dispatch only), DeepEP's and HybridEP's backward reuse the
        # forward's handle and token count (fused_a2a.py FusedDispatch/FusedCombine/
        # HybridEP*.backward), and model_chunk_schedule_plan.py's stream waits are events -- so
        # the backward's syncs are those of a recomputed module that syncs in its forward
        # (`LayerHostOps.backward_syncs`: the clamped GeGLU re-run by `moe_act` recomputation).
        ops = moe_layer_host_ops(self.scn)
        host = 0.0
        if ops is not None and ops.syncs:
            segment = pair_issue_s(
                # (the routing metadata ran before the segment's sync: the dispatch alone after it)
                self._pair_nodes(
                    ops,
                    fwd,
                    sync,
                    (attn_f, attn_b, mlp_dgrad, mlp_wgrad),
                    (comm[0], ep(fwd[sync:experts]), *comm[2:]),
                ),
                HOST_OP_S,
                HOST_CALL_S,
                HOST_SYNC_S,
            )
            host = max(0.0, segment - (paired + interference))
        return EpPair(exposed_ideal / total_ep, interference, host, exposed - exposed_ideal)

    def _first_kernel_s(self, parts: list) -> float:
        """The duration of the first compute kernel of `parts` (in execution order): its first
        non-empty compute segment, or of an eager TE GroupedLinear segment its first round of
        TE_GEMM_STREAMS concurrent per-expert GEMMs (the later rounds launch on their streams
        after an EP kernel waiting beside them, so at equal priority it goes first)."""
        for p in parts:
            if p.category not in ("compute", "recompute") or p.duration_s <= 0:
                continue
            if p.name.startswith(EXPERT_GEMM_OVERHEAD_NAME):  # a gap before a kernel, not one
                continue
            if not self.scn.kernels.fused_grouped_mlp and p.name.startswith(GROUPED_GEMM_SEGMENTS):
                groups = max(1, self.scn.model.num_experts // self.scn.parallel.ep)
                return p.duration_s / math.ceil(groups / TE_GEMM_STREAMS)
            return p.duration_s
        return 0.0

    def _pair_nodes(
        self, ops: LayerHostOps, fwd: list, sync: int, comp_s: tuple[float, ...], comm: tuple
    ) -> list[PairNode]:
        """The combined-1F1B segment from the forward dispatcher's sync to the next layer's, in
        TransformerLayerSchedulePlan.run's issue order: the backward's expert dgrad (issued before
        the sync, queued), the forward's dispatch, the experts' delayed wgrad, the backward's
        dispatch, the forward's experts (split at GPT-OSS's activation sync), its combine, the
        backward's attention side (input and weight gradients), then the next layer's combine
        gradient, attention and router (whose end the next sync waits for) and expert dgrad
        (issued only). GPU seconds and dependencies as `combined_layer_s`."""
        attn_f, attn_b, mlp_dgrad, mlp_wgrad = comp_s
        c_b, d_f, d_b, c_f = comm
        calls = schedule_node_calls(self.scn)
        a_b, disp_b, exp_b, comb_b = ops.backward_input_parts
        attn_w, exp_w = ops.backward_weight_parts

        def comp(parts: list) -> float:
            return sum(p.duration_s for p in parts if p.category != "ep_comm")

        if ops.experts_before_act_sync:
            act = self.act_sync_index  # the clamped GeGLU's sync: the CPU waits for the comp stream
            experts = [
                PairNode(
                    "mlp_f0",
                    "comp",
                    ops.experts_before_act_sync,
                    comp(fwd[sync:act]),
                    calls["mlp_f"],
                    ("d_f",),
                ),
                PairNode(
                    "mlp_f",
                    "comp",
                    ops.experts - ops.experts_before_act_sync,
                    comp(fwd[act:]),
                    sync=("mlp_f0",),
                ),
            ]
        else:
            experts = [PairNode("mlp_f", "comp", ops.experts, comp(fwd[sync:]), calls["mlp_f"], ("d_f",))]
        # the recomputed activation's sync in the next expert dgrad: the CPU waits for the GPU
        # work issued before it (taken at half of the dgrad's ops)
        dgrad_next = [
            PairNode(
                "mlp_dgrad_issue", "", exp_b / 2 if ops.backward_syncs else exp_b, 0.0, calls["mlp_dgrad"]
            )
        ]
        for _ in range(ops.backward_syncs):
            dgrad_next.append(PairNode("mlp_dgrad_issue", "", exp_b / 2, 0.0, sync=("attn_f", "c_b")))
        if self.scn.parallel.delay_wgrad_compute:
            head = [
                PairNode("mlp_dgrad", "comp", 0.0, mlp_dgrad),
                PairNode("d_f", "comm", ops.dispatch, d_f, calls["d_f"]),
                PairNode("wgrad", "comp", exp_w, mlp_wgrad, calls["wgrad"]),
            ]
        else:
            # `mlp.backward` runs the experts' wgrad with their dgrad (issued before the sync,
            # queued) and the dispatch's backward waits for both; `backward_dw` returns at once
            dgrad_next[0] = replace(dgrad_next[0], ops=dgrad_next[0].ops + exp_w)
            head = [
                PairNode("mlp_dgrad", "comp", 0.0, mlp_dgrad + mlp_wgrad),
                PairNode("d_f", "comm", ops.dispatch, d_f, calls["d_f"]),
            ]
        return [
            *head,
            PairNode("d_b", "comm", disp_b, d_b, calls["d_b"], ("mlp_dgrad",)),
            *experts,
            PairNode("c_f", "comm", ops.combine, c_f, calls["c_f"], ("mlp_f",)),
            PairNode("attn_b", "comp", a_b + attn_w, attn_b, calls["attn_b"], ("d_b",)),
            PairNode("c_b", "comm", comb_b, c_b, calls["c_b"], ("attn_b",)),
            PairNode("attn_f", "comp", ops.attention + ops.router, attn_f, calls["attn_f"], ("c_f",)),
            *dgrad_next,
            PairNode("sync", "", 0.0, 0.0, sync=("attn_f", "c_b")),  # the next dispatcher sync
        ]

    def _recompute(self, fwd: list, spans: dict[str, list[tuple[int, int]]]) -> _Phase:
        """The forward work the backward pass repeats: the whole layer (full), or the segments
        of the recomputed modules (selective: `ParallelConfig.recomputed_modules`), each once."""
        par = self.scn.parallel
        if par.recompute == "none":
            return _Phase(())
        if par.recompute == "full":
            source = fwd
        else:
            picked = sorted(
                {i for mod in par.recomputed_modules for a, b in spans.get(mod, ()) for i in range(a, b)}
            )
            source = [fwd[i] for i in picked]
        parts = []
        for seg in source:
            # recomputed compute is `recompute`; its repeated TP collectives stay tp_comm
            parts.append(replace(seg, category="recompute") if seg.category == "compute" else seg)
        return _Phase(tuple(parts))

    def mtp(self, layer_cost: tuple) -> tuple[_Phase, _Phase, _Phase, _Phase, float]:
        """One DeepSeek-V3 MTP module (§2.2) per micro-batch: RMSNorms of the hidden state and of
        the next token's embedding, the projection M (2h -> h), one transformer layer like the
        last main layer, and the shared output head with its cross-entropy again."""
        scn, d = self.scn, self.device
        par, m = scn.parallel, scn.model
        T = par.micro_batch * m.seq_len // par.cp
        a = d.activation_bytes
        lf, lbi, lbw, lrec, lparams = layer_cost
        t_proj, t_proj_d, t_proj_w = matmul_pass_times_s(
            d, T, m.hidden // par.tp, 2 * m.hidden, 1, self.wgrad_bytes
        )
        f_proj = 2.0 * T * (m.hidden // par.tp) * 2 * m.hidden
        norms = memory_op_time_s(d, 2 * 2 * T * m.hidden * a, kernels=2)
        log_f, log_bi, log_bw = self.logits()
        fwd = [
            Segment("compute", "mtp norms", norms, 0.0, 0.0),
            Segment("compute", "mtp proj", t_proj, f_proj, 0.0),
        ]
        fwd += list(lf.parts) + list(log_f.parts)
        b_in = (
            list(log_bi.parts)
            + list(lbi.parts)
            + [Segment("compute", "mtp proj dgrad", t_proj_d, f_proj, 0.0)]
        )
        b_w = (
            list(log_bw.parts)
            + list(lbw.parts)
            + [Segment("compute", "mtp proj wgrad", t_proj_w, f_proj, 0.0)]
        )
        params = fl.mtp_params_per_rank(m, par).total
        return _Phase(tuple(fwd)), _Phase(tuple(b_in)), _Phase(tuple(b_w)), lrec, params

    # -- first and last stage extras
    def embedding(self) -> tuple[_Phase, _Phase]:
        scn, d = self.scn, self.device
        par, m = scn.parallel, scn.model
        T = par.micro_batch * m.seq_len // par.cp
        a = d.activation_bytes
        fwd = [
            Segment(
                "compute",
                "embedding lookup",
                memory_op_time_s(d, 2 * T * m.hidden * a),
                0.0,
                2 * T * m.hidden * a,
            )
        ]
        bwd = [
            Segment(
                "compute",
                "embedding grad",
                memory_op_time_s(d, 3 * T * m.hidden * 4),
                0.0,
                3 * T * m.hidden * 4,
            )
        ]
        if scn.kernels.megatron_core:
            bwd += self._embedding_table_grads()
        if par.tp > 1:  # vocab-parallel embedding: partial sums reduced across TP
            msg = T * m.hidden * a
            kind = "reducescatter" if par.sequence_parallel else "allreduce"
            fwd.append(Segment("tp_comm", "embedding " + kind, self.coll(kind, "tp", msg), 0.0, msg))
        return _Phase(tuple(fwd)), _Phase(tuple(bwd))

    def _embedding_table_grads(self) -> list[Segment]:
        """Megatron-Core's per-micro-batch work on the dense embedding-table gradients
        (EMBEDDING_GRAD_NOTE): the zero-filled 16-bit table of F.embedding's backward, the DDP
        hook's main_grad add, and with a tied output layer on the same stage its zeros dummy
        gradient and the autograd sum of the two."""
        scn, d = self.scn, self.device
        par, m = scn.parallel, scn.model
        a = d.activation_bytes
        words = -(-m.vocab // par.tp) * m.hidden
        tables = [words] + ([m.seq_len * m.hidden] if m.position_embeddings else [])
        elems = float(sum(tables))
        out = [
            Segment(
                "compute",
                "embedding grad table zero-fill",
                memory_op_time_s(d, a * elems, len(tables)),
                0.0,
                a * elems,
            )
        ]
        if par.zero < 3:  # Megatron FSDP shards the gradients in its own buffers
            if m.tied_embeddings and par.pp == 1:
                tied = (a + TIED_GRAD_SUM_BYTES_PER_PARAM) * words  # output layer's zeros, the sum
                out.append(
                    Segment(
                        "compute", "tied embedding grad zeros + sum", memory_op_time_s(d, tied, 2), 0.0, tied
                    )
                )
            main = grad_reduce_bytes_per_param(scn.dtype, scn.kernels.grad_reduce_dtype)
            hook = (2 * main + a) * elems
            out.append(
                Segment(
                    "compute",
                    "embedding main_grad add (ddp hook)",
                    memory_op_time_s(d, hook, len(tables)),
                    0.0,
                    hook,
                )
            )
        return out

    def logits(self) -> tuple[_Phase, _Phase, _Phase]:
        scn, d = self.scn, self.device
        par, m = scn.parallel, scn.model
        T = par.micro_batch * m.seq_len // par.cp
        a = d.activation_bytes
        v_local = -(-m.vocab // par.tp)
        t_mm, t_mm_d, t_mm_w = matmul_pass_times_s(
            output_layer_device(d), T, v_local, m.hidden, 1, self.wgrad_bytes
        )
        f = 2.0 * T * v_local * m.hidden
        impl = scn.kernels.cross_entropy or "unfused"
        fwd_b, fwd_k, bwd_b, bwd_k = CE_PASSES[impl]  # bytes per logit of 16-bit logits
        ce_bytes, ce_bwd_bytes = float(T * v_local * fwd_b), float(T * v_local * bwd_b)
        # each implementation's passes at its measured bandwidth (MEMORY_KINDS)
        t_ce = memory_op_time_s(d, ce_bytes, fwd_k, CE_KINDS[impl][0])
        t_ce_bwd = memory_op_time_s(d, ce_bwd_bytes, bwd_k, CE_KINDS[impl][1])
        norm_kind = NORM_KINDS[scn.kernels.norm]
        t_norm = memory_op_time_s(d, 2 * T * m.hidden * a, 1, f"{norm_kind}_fwd" if norm_kind else "copy")
        fwd: list[Segment] = [Segment("compute", "final norm", t_norm, 0.0, 0.0)]
        bwd_in: list[Segment] = []
        if par.tp > 1 and par.sequence_parallel:
            msg = T * m.hidden * a
            fwd.append(Segment("tp_comm", "tp allgather", self.coll("allgather", "tp", msg), 0.0, msg))
            t_rs = self.coll("reducescatter", "tp", msg)  # beside the logits wgrad (as in _tp_entry)
            beside = _beside_wgrad_s(par, t_mm_w)
            bwd_in.append(
                Segment("tp_comm", "tp reducescatter (beside wgrad)", max(0.0, t_rs - beside), 0.0, msg)
            )
        fwd += [
            Segment("compute", "logits", t_mm, f, 0.0),
            Segment("compute", "cross-entropy", t_ce, 0.0, ce_bytes),
        ]
        bwd_in += [
            Segment("compute", "cross-entropy bwd", t_ce_bwd, 0.0, ce_bwd_bytes),
            Segment("compute", "logits dgrad", t_mm_d, f, 0.0),
        ]
        bwd_w = [Segment("compute", "logits wgrad", t_mm_w, f, 0.0)]
        return _Phase(tuple(fwd)), _Phase(tuple(bwd_in)), _Phase(tuple(bwd_w))


def _beside_wgrad_s(par: ParallelConfig, wgrad_s: float) -> float:
    """The weight-gradient GEMM time the input gradient's asynchronous TP collective can hide
    behind. A split backward (zero-bubble, DualPipe) defers that GEMM to its own W pass (Megatron's
    WeightGradStore), and LinearWithGradAccumulationAndAsyncCommunication then waits on the
    collective's handle at once: nothing of the same pass hides it (as _overlap_tp's split case).
    Counting the deferred GEMM made a faster GPU lengthen B by what it saved in W (fuzz audit:
    gb200-nvl72 zb-h1 tp8, 2x peak 0.013% slower)."""
    return 0.0 if par.schedule in SPLIT_BACKWARD_SCHEDULES else wgrad_s


def kv_local_heads(scn: Scenario) -> int:
    """K/V heads one TP rank holds (replicated when tp > kv_heads)."""
    return max(scn.model.num_kv_heads // scn.parallel.tp, 1)


def cp_ring_attention_s(
    device: Device, impl: str, batch: int, s_local: int, heads: int, head_dim: int, cp: int
) -> tuple[float, float]:
    """(forward, backward) seconds of causal self-attention under context parallelism as
    Transformer Engine's AttnFuncWithCP (p2p ring, load-balanced causal chunks) runs it.

    Each rank holds chunks r and 2cp-1-r of the sequence (s_local = s/cp tokens) and runs cp
    steps, one attention kernel each, while the next K/V block travels the ring: step 0 is
    causal over its own s_local tokens; each later step is non-causal over half the work —
    all local queries against the first half of the received K/V (blocks from earlier ranks),
    or the second half of the queries against all received K/V (later ranks) — half the ranks'
    steps of each kind on average. Each kernel runs at the efficiency of its own, shorter,
    sequence (Liu et al. 2023 "Ring Attention"; TE transformer_engine/pytorch/attention.py
    AttnFuncWithCPAndKVP2P)."""
    (t0_f, ts_f), (t0_b, ts_b) = cp_ring_step_s(device, impl, batch, s_local, heads, head_dim)
    return t0_f + (cp - 1) * ts_f, t0_b + (cp - 1) * ts_b


def cp_ring_step_s(
    device: Device, impl: str, batch: int, s_local: int, heads: int, head_dim: int
) -> tuple[tuple[float, float], tuple[float, float]]:
    """((first, later) forward, (first, later) backward) kernel seconds of one load-balanced ring
    step: the first causal over the rank's own s_local tokens; each later one the slower of the
    two unmasked half-work kernels (all queries against the first half of the received K/V, or
    the second half of the queries against all of it), as every later step has ranks running
    each kind and the ring advances at the slowest (CP_COMM_NOTE)."""
    half = max(s_local // 2, 1)
    out = []
    for pass_ in ("fwd", "bwd"):

        def step(seq_q: int, seq_kv: int, causal: bool, pass_: str = pass_) -> float:
            return attention_time_s(
                device,
                impl,
                pass_,
                batch=batch,
                seq_q=seq_q,
                seq_kv=seq_kv,
                heads=heads,
                head_dim=head_dim,
                causal=causal,
            )

        out.append(
            (step(s_local, s_local, True), max(step(s_local, half, False), step(half, s_local, False)))
        )
    return out[0], out[1]


def cp_allgather_attention_s(
    device: Device, impl: str, batch: int, s_local: int, heads: int, head_dim: int, cp: int
) -> tuple[float, float]:
    """(forward, backward) kernel seconds of Transformer Engine's all-gather CP on its slowest
    rank (CP_COMM_NOTE "allgather"): rank r runs chunks j = r and 2cp-1-r, each its c = s_local/2
    queries against the (j+1)·c gathered keys before it, bottom-right causal. Chunk 0 is one
    causal c×c kernel; a later chunk is mostly unmasked: the unmasked kernel of its shape at the
    share of its work the mask keeps, c·(j+½)c of c·(j+1)c."""
    c = max(s_local // 2, 1)
    out = []
    for pass_ in ("fwd", "bwd"):

        def chunk(j: int, pass_: str = pass_) -> float:
            kw: dict[str, Any] = dict(batch=batch, seq_q=c, heads=heads, head_dim=head_dim)
            if j == 0:
                return attention_time_s(device, impl, pass_, seq_kv=c, causal=True, **kw)
            full = attention_time_s(device, impl, pass_, seq_kv=(j + 1) * c, causal=False, **kw)
            return full * (2 * j + 1) / (2 * j + 2)

        out.append(max(chunk(r) + chunk(2 * cp - 1 - r) for r in range(cp)))
    return out[0], out[1]


def output_layer_device(device: Device) -> Device:
    """The output layer (logits GEMM) runs in 16-bit even in FP8/MXFP8/NVFP4 training: Megatron-Core
    builds it as a plain `tensor_parallel.ColumnParallelLinear` (megatron/core/models/gpt/
    gpt_model.py), not a Transformer Engine module, and TE's fp8_autocast wraps only the
    transformer layers; llm-foundry's MPT head is the tied embedding's F.linear, also outside TE."""
    return device if device.dtype in ("bf16", "fp16", "fp32") else replace(device, dtype="bf16")


ATTENTION_SEGMENT = "attention ("  # how _Coster names its attention kernels (16-bit in FP8 training)
LOGITS_SEGMENTS = ("logits", "logits dgrad", "logits wgrad")  # _Coster.logits' GEMMs (16-bit)


def _mix_seconds(device: Device, phases: Iterable[_Phase]) -> tuple[float, float]:
    """(kernel seconds, saturated-GEMM seconds of their tensor FLOPs) of a kernel mix, both at
    the device's clock: the two sums whose ratio is the mix's tensor activity. A fused attention
    kernel's seconds count `attention_power_factor` times (its power per unit of tensor activity
    relative to a GEMM's, kernels.toml; simulator/clocks.py)."""
    from .kernels import saturated_gemm_flop_per_s

    p, clock = device.params, device.clock
    rate = saturated_gemm_flop_per_s(device.gpu, device.dtype, p) * clock
    rate16 = saturated_gemm_flop_per_s(device.gpu, output_layer_device(device).dtype, p) * clock
    busy_s = saturated_s = 0.0
    for phase in phases:
        for seg in phase.parts:
            if seg.category not in ("compute", "recompute") or seg.duration_s <= 0:
                continue
            busy_s += seg.duration_s
            if seg.flops <= 0:
                continue
            if seg.name in LOGITS_SEGMENTS:  # the output layer runs in 16-bit (output_layer_device)
                saturated_s += seg.flops / rate16
            elif seg.name.startswith(ATTENTION_SEGMENT + "unfused"):  # 16-bit GEMMs and softmax
                saturated_s += seg.flops / rate16
            elif seg.name.startswith(ATTENTION_SEGMENT):  # 16-bit, a fused causal kernel skips half
                saturated_s += p.attention_power_factor * seg.flops / 2 / rate16
            else:
                saturated_s += seg.flops / rate
    return busy_s, saturated_s


def tensor_activity(device: Device, phases: Iterable[_Phase]) -> float:
    """The kernel mix's tensor activity D (simulator/clocks.py): the time-weighted mean over the
    compute kernels of their tensor FLOP rate relative to a saturating GEMM of their precision
    (the MAMF ceiling) — Σ FLOPs / saturated rate over Σ time, both at the same clock. Attention
    runs in 16-bit even in FP8 training, as does the output layer (logits), and a fused causal
    kernel executes half the s×s FLOPs its segment counts, weighted by the architecture's
    `attention_power_factor` (its board power per unit of tensor activity relative to a GEMM's:
    the softmax work the tensor FLOP rate does not count); memory-bound kernels and the slowdown
    beside overlapped communication count as time without tensor work."""
    busy_s, saturated_s = _mix_seconds(device, phases)
    return saturated_s / busy_s if busy_s > 0 else 0.0


def power_limited_clock_of(device: Device, activity: float) -> float:
    """The power-limited clock (relative to the boost clock) a kernel mix of `activity` holds on
    this device: min(1, k · r · D^(−1/3)) (simulator/clocks.py); 1 where no ratio is measured."""
    from .clocks import power_clock_factor, power_limited_clock

    ratio = device.params.training_gemm_ratio(device.dtype)
    if ratio >= 1.0:
        return 1.0
    k = power_clock_factor(device.gpu)  # the SKU's board power per SM (1 on the reference SKU)
    return power_limited_clock(activity, ratio, k)


def power_limited_device(coster: _Coster) -> tuple[Device, float]:
    """The device at the power-limited clock of one transformer layer's kernel mix (forward,
    backward, recompute) costed at the boost clock, and that mix's activity. A step's stages
    each run at the clock of their own whole mix (`build_program`); this is the clock of a stage
    of such layers alone."""
    device = coster.device
    if device.params.training_gemm_ratio(device.dtype) >= 1.0:
        return device, 0.0
    m = coster.scn.model
    first = next(i for i in range(m.layers) if m.is_moe_layer(i) == m.is_moe)
    forward, b_in, b_w, rec, _ = coster.layer(*m.layer_kind(first))
    activity = tensor_activity(device, (forward, b_in, b_w, rec))
    return replace(device, power_clock=power_limited_clock_of(device, activity)), activity


def _kind_counts(m: ModelSpec, layers) -> dict[tuple[bool, tuple[str, int]], int]:
    """How many of `layers` are of each ModelSpec.layer_kind."""
    out: dict[tuple[bool, tuple[str, int]], int] = {}
    for i in layers:
        k = m.layer_kind(i)
        out[k] = out.get(k, 0) + 1
    return out


def _repeat(phase: _Phase, n: int) -> list:
    """n identical layers, summed part by part (the block keeps one entry per op)."""
    return [_scaled(seg, n) for seg in phase.parts]


def build_program(scn: Scenario, comm: CommModel | None = None) -> Program:
    """Cost every stage's chunks for this scenario."""
    comm = comm or default_comm_model(scn)
    coster = _Coster(scn, comm)
    boost = coster.device
    par, m = scn.parallel, scn.model
    pp, vp = par.pp, par.vp
    layout = chunk_layers(
        par.schedule,
        m.layers,
        pp,
        vp,
        embedding_slot=par.account_for_embedding_in_pipeline_split,
        loss_slot=par.account_for_loss_in_pipeline_split,
        layout=par.pipeline_layout,
    )
    # Stages whose TP/CP/EP groups sit on the fabric the same way share one costing of a layer;
    # a stage whose groups straddle racks pays for it (the slowest of its groups, network/model.py).
    kinds = getattr(comm, "group_kinds", None)
    costed: dict[object, tuple] = {}

    def stage_costs(s: int, device: Device) -> tuple:
        key = (
            tuple(kinds(a, s) if comm.group_size(a) > 1 else () for a in ("tp", "cp", "ep"))
            if kinds is not None
            else (),
            device.power_clock,
        )
        if key not in costed:
            coster.stage = s
            coster.device = device
            # one costing per kind of layer: MoE or dense, full or local attention (layer_kind);
            # each MoE kind's combined-1F1B pair (its attention hides a different share of the EP
            # all-to-all)
            layer = {}
            ep_pairs: dict[tuple[bool, tuple[str, int]], EpPair] = {}
            for kind in m.layer_kinds:
                layer[kind] = coster.layer(*kind)
                if kind[0]:
                    ep_pairs[kind] = coster.ep_pair
            mtp_cost = coster.mtp(layer[m.layer_kind(m.layers - 1)]) if m.mtp_layers else None
            extras = (
                coster.embedding(),
                coster.logits(),
                mtp_cost,
                ep_pairs,
                coster.pair_host,
                coster.zero3_pair,
            )
            costed[key] = (layer, *extras)
        return costed[key]

    mixes: dict[tuple, tuple] = {}  # (kernel s, saturated s) of costed phases, kept alive by key

    def stage_mix(s: int) -> tuple[float, float]:
        """(kernel seconds, saturated-GEMM seconds) of stage s's whole kernel mix per micro-batch,
        costed at the boost clock: its layers, and the embedding, logits and MTP it holds."""
        layer_cost, emb, logits, mtp = stage_costs(s, boost)[:4]
        busy = saturated = 0.0

        def seconds(phases: tuple) -> tuple[float, float]:
            key = tuple(id(ph) for ph in phases)  # the costed phases are shared between stages
            if key not in mixes:
                mixes[key] = (_mix_seconds(boost, phases), phases)
            return mixes[key][0]

        for c in range(vp):
            parts: list[tuple[tuple, int]] = [
                (layer_cost[kind][:4], n) for kind, n in _kind_counts(m, layout[s][c]).items()
            ]
            if prev_chunk(par.schedule, pp, vp, s, c) is None:
                parts.append((emb, 1))
            if next_chunk(par.schedule, pp, vp, s, c) is None:
                parts.append((logits, 1))
                if mtp is not None:
                    parts.append((mtp[:4], m.mtp_layers))
            for phases, n in parts:
                b, t = seconds(phases)
                busy, saturated = busy + n * b, saturated + n * t
        return busy, saturated

    # Every stage's GPUs hold the power-limited clock of their own kernel mix (simulator/clocks.py:
    # GPU Boost's power loop averages over the kernels each GPU runs): a stage of layers, the first
    # with the embedding, the last with the logits and loss. Costed at the boost clock for the mix,
    # then again at each distinct stage clock (stages alike in layers and fabric share one costing).
    # A faster memory or GPU shortens the mix's kernels and can only lower the stage's time: with
    # D = S/T (S tensor-saturated, T total seconds at the boost clock) and the stage at
    # T_mem + T_clocked·(D^(1/3)/(k·r)), d(stage)/d(T_mem) = 1 − (T_clocked/T)·D^(1/3)/(3·k·r) > 0
    # for every D < (3·k·r)³ (D ≤ 1, or a little above with attention's power weight, kernels.toml
    # attention_power_factor) and k·r > 1/3 (docs/calibration.md, "power-limited clock").
    activities = [0.0] * pp
    devices = [boost] * pp
    if boost.params.training_gemm_ratio(boost.dtype) < 1.0:
        for s in range(pp):
            busy, saturated = stage_mix(s)
            activities[s] = saturated / busy if busy > 0 else 0.0
            devices[s] = replace(boost, power_clock=power_limited_clock_of(boost, activities[s]))

    gbytes = grad_reduce_bytes_per_param(scn.dtype, grad_buffer_reduce_dtype(scn))
    host_s = scn.gpu.efficiency.microbatch_overhead_s
    ep_overlap = ep_overlap_pairs(scn)
    bucket_params = max(par.grad_bucket_params, 1_000_000 * par.dp)  # Megatron DDP bucket rule
    ds = deepspeed_pipe(scn)
    dp_wire_bytes = gbytes
    if ds:  # DS_PIPE_NOTE: 16-bit communication_data_type unless the scenario names one
        bucket_params = DS_ALLREDUCE_BUCKET_PARAMS
        dp_wire_bytes = grad_reduce_bytes_per_param(scn.dtype, scn.kernels.grad_reduce_dtype or "bf16")
    # the micro-batch's activation (or its gradient) at a stage boundary, per TP rank
    act_msg = par.micro_batch * m.seq_len // par.cp * m.hidden * boost.activation_bytes / par.tp
    embed_params = m.vocab * m.hidden / par.tp
    # the first chunk's embedding parameters (word and learned position tables), one DP bucket
    embedding_params = embed_params + (m.seq_len * m.hidden if m.position_embeddings else 0)

    stages = []
    for s in range(pp):
        device = devices[s]
        layer_cost, (emb_f, emb_b), (log_f, log_bi, log_bw), mtp, ep_pair, pair_host, zero3_pair = (
            stage_costs(s, device)
        )
        coster.device = device
        chunks = []
        stage_params = 0.0
        stage_expert_params = 0.0
        holds_embedding = any(prev_chunk(par.schedule, pp, vp, s, c) is None for c in range(vp))
        for c in range(vp):
            layers = layout[s][c]
            # the embedding sits before the first virtual stage, the logits and loss after the last
            first = prev_chunk(par.schedule, pp, vp, s, c) is None
            last = next_chunk(par.schedule, pp, vp, s, c) is None
            n_moe = sum(1 for i in layers if m.is_moe_layer(i))
            counts = _kind_counts(m, layers)
            fwd: list = []
            b_in: list = []
            b_w: list = []
            rec: list = []
            params = 0.0
            # host-side work per micro-batch and phase (Python, hooks, scheduling): the GPU idles;
            # one micro-batch's worth, shared by its model chunks
            host = Segment("compute", "host overhead (micro-batch)", host_s / vp, 0.0, 0.0)
            fwd.append(host)
            b_in.append(host)
            expert_params = 0.0  # routed-expert weights: their gradients reduce over expert-DP
            if first:
                fwd += emb_f.parts
                params += embed_params + (m.seq_len * m.hidden if m.position_embeddings else 0)
            for (moe, _), n in counts.items():
                lf, lbi, lbw, lrec, lparams = layer_cost[(moe, _)]
                fwd += _repeat(lf, n)
                rec += _repeat(lrec, n)
                b_in += _repeat(lbi, n)
                b_w += _repeat(lbw, n)
                params += lparams * n
                expert_params += fl.layer_params_per_rank(m, par, moe).expert * n
            if last:
                fwd += log_f.parts
                b_in = list(log_bi.parts) + b_in
                b_w = list(log_bw.parts) + b_w
                # final norm; tied embeddings share one matrix when the embedding sits on this stage too
                params += m.hidden + (0 if m.tied_embeddings and holds_embedding else embed_params)
                if mtp is not None:  # Megatron runs the MTP modules on the last pipeline stage
                    mf, mbi, mbw, mrec, mparams = mtp
                    fwd += _repeat(mf, m.mtp_layers)
                    rec += _repeat(mrec, m.mtp_layers)
                    b_in = _repeat(mbi, m.mtp_layers) + b_in
                    b_w = _repeat(mbw, m.mtp_layers) + b_w
                    mtp_rank = fl.mtp_params_per_rank(m, par).scaled(m.mtp_layers)
                    params += mtp_rank.total
                    expert_params += mtp_rank.expert
            if first:
                b_in += emb_b.parts
            hook_b = params * main_grad_hook_bytes_per_param(scn)
            if hook_b:  # MAIN_GRAD_HOOK_NOTE: one add per parameter tensor
                tensors = (
                    sum(counts.values()) * (8 + 4 * m.linear_bias)
                    + 2 * last
                    + first * (1 + m.position_embeddings)
                )
                if last and holds_embedding and m.tied_embeddings:
                    # the stage's one shared matrix (as `params` counts it), also when a V-shaped
                    # schedule puts the first and the last chunk on it
                    hook_b += TIED_GRAD_SUM_BYTES_PER_PARAM * embed_params
                    tensors += 1
                name = "main_grad accumulate (ddp hook)"
                if ds and scn.dtype == "bf16":  # DS_PIPE_NOTE: cast and add, two kernels per tensor
                    name, tensors = "hp_grad accumulate (deepspeed bf16 optimizer)", 2 * tensors
                elif ds:
                    name = "grad accumulate (autograd, deepspeed fp16)"
                t_hook = memory_op_time_s(device, hook_b, kernels=tensors)
                b_w.append(Segment("compute", name, t_hook, 0.0, hook_b))
            if ds and pp > 1:  # DS_PIPE_NOTE: blocking sends, TP all-gather of the partitioned tensor
                t_send = coster.coll("sendrecv", "pp", act_msg, s)
                t_full = coster.coll("allgather", "tp", act_msg * par.tp) if par.tp > 1 else 0.0
                if not first:
                    fwd.insert(
                        0,
                        Segment(
                            "pp_comm",
                            "activation all-gather (tp, partitioned p2p)",
                            t_full,
                            0.0,
                            act_msg * par.tp,
                        ),
                    )
                    b_w.append(
                        Segment("pp_comm", "blocking send of the input gradient", t_send, 0.0, act_msg)
                    )
                if not last:
                    fwd.append(Segment("pp_comm", "blocking send of the activation", t_send, 0.0, act_msg))
                    rec.insert(
                        0,
                        Segment(
                            "pp_comm",
                            "gradient all-gather (tp, partitioned p2p)",
                            t_full,
                            0.0,
                            act_msg * par.tp,
                        ),
                    )
            stage_params += params
            stage_expert_params += expert_params
            dp_grad_s: list[float] = []
            dp_param_s: list[float] = []
            dp_grad_b: list[float] = []
            dp_param_b: list[float] = []
            if par.dp > 1 and par.zero == 3:
                dp_grad_s, dp_param_s, dp_grad_b, dp_param_b = _fsdp_step_collectives(
                    coster, par, params, gbytes, bucket_params, s, expert_params, coster.expert_grad_bytes
                )
            if par.dp > 1 and par.zero < 3 and par.dp_replicas > 1:  # HSDP-sharded optimizer
                dp_grad_s, dp_param_s, dp_grad_b, dp_param_b = _fsdp_step_collectives(
                    coster, par, params, gbytes, bucket_params, s
                )
            elif par.dp > 1 and par.zero < 3:
                # dense gradients reduce over dp; routed-expert gradients over the expert-DP group
                # (ParallelConfig.expert_dp ranks share each expert shard), costed on that group's
                # own placement ("edp", network/placement.py: at ep = GPUs per node one GPU per
                # node, each on its own NIC). Where the expert-DP group also spans tp/cp ranks
                # (tp·cp ≠ etp) or ep does not divide dp, it has no axis of its own: costed on the
                # dp group's links with the expert-DP group's bus factor (an approximation).
                own_axis = par.dp % par.ep == 0 and par.expert_dp == par.dp // par.ep
                edp_axis = "edp" if own_axis else "dp"
                edp_ratio = (
                    (1.0 if par.expert_dp > 1 else 0.0)
                    if own_axis
                    else bus_factor("allreduce", par.expert_dp) / bus_factor("allreduce", par.dp)
                )
                for group, n_all in (("dp", params - expert_params), ("edp", expert_params)):
                    if group == "edp" and edp_ratio == 0:
                        continue
                    ratio, axis = (edp_ratio, edp_axis) if group == "edp" else (1.0, "dp")
                    gb = coster.expert_grad_bytes if group == "edp" else gbytes
                    # EMBEDDING_BUCKET_NOTE: the chunk holding the embedding reduces it last, in a
                    # bucket of its own size, and gathers that bucket first
                    emb = embedding_params if group == "dp" and first and scn.kernels.megatron_core else 0.0
                    buckets = _buckets_embedding_last(n_all, emb, bucket_params)
                    gathers_at = len(dp_param_s)
                    # FP8 parameter gather moves Transformer Engine's Float8Tensor weights at one
                    # byte; the embedding, output layer and final norm are plain 16-bit tensors
                    # (memory.py counts them so): the output layer's in the first bucket of the
                    # backward order, the embedding's in the last
                    wide = [0.0] * len(buckets)
                    if group == "dp" and buckets and coster.param_gather_bytes < WEIGHT_BYTES:
                        if first:
                            wide[-1] = min(embedding_params, buckets[-1])
                        if last:  # the output layer fills the buckets its gradients open
                            head = m.hidden + (0 if m.tied_embeddings and holds_embedding else embed_params)
                            for i, n_params in enumerate(buckets):
                                take = min(head, n_params - wide[i])
                                wide[i] += take
                                head -= take
                                if head <= 0:
                                    break
                    for i, n_params in enumerate(buckets):
                        if ds and group == "dp":
                            gb = dp_wire_bytes
                        dp_grad_b.append(n_params * gb)
                        gather_b = (n_params - wide[i]) * coster.param_gather_bytes + wide[i] * WEIGHT_BYTES
                        # DS_PIPE_NOTE: bf16 under DeepSpeed all-reduces the whole gradient even
                        # with the BF16_Optimizer's sharded master
                        if par.zero == 0 or (ds and scn.dtype == "bf16"):
                            dp_grad_s.append(ratio * coster.coll("allreduce", axis, n_params * gb, s))
                        else:
                            dp_grad_s.append(ratio * coster.coll("reducescatter", axis, n_params * gb, s))
                        if par.zero > 0:
                            dp_param_s.append(ratio * coster.coll("allgather", axis, gather_b, s))
                            dp_param_b.append(gather_b)
                    if emb > 0 and par.zero > 0 and buckets:  # forward order: the embedding's first
                        dp_param_s.insert(gathers_at, dp_param_s.pop())
                        dp_param_b.insert(gathers_at, dp_param_b.pop())
            forward, backward = _block(fwd), _block(rec + b_in + b_w)
            paired: tuple[Block | None, Block | None] = (None, None)
            # MoE layers of this chunk in an F&B pair (the MTP layers copy the last one)
            n_pair = n_moe + (
                m.mtp_layers if last and mtp is not None and m.is_moe_layer(m.layers - 1) else 0
            )
            if par.schedule in ("dualpipe", "dualpipev"):
                paired = overlap_pair(forward, backward, ep_sm_fraction(scn), pair_host, n_pair, zero3_pair)
            elif ep_overlap:
                moe_kinds = {k: n for k, n in counts.items() if k[0]}
                if last and mtp is not None and m.is_moe_layer(m.layers - 1):
                    tail = m.layer_kind(m.layers - 1)
                    moe_kinds[tail] = moe_kinds.get(tail, 0) + m.mtp_layers
                pair = _mean_ep_pair(ep_pair, moe_kinds)
                paired = _combined_pair(forward, backward, pair, n_pair, zero3_pair)
            chunks.append(
                ChunkProgram(
                    stage=s,
                    chunk=c,
                    num_layers=len(layers),
                    forward=forward,
                    backward=backward,
                    backward_input=_block(rec + b_in),
                    backward_weight=_block(b_w),
                    grad_bucket_s=tuple(dp_grad_s),
                    param_gather_s=tuple(dp_param_s),
                    grad_bucket_bytes=tuple(dp_grad_b),
                    param_gather_bytes=tuple(dp_param_b),
                    params_local=params,
                    forward_paired=paired[0],
                    backward_paired=paired[1],
                )
            )
        # the distributed optimizer shards dense parameters over the dp shard group and routed-expert
        # parameters over the expert-data-parallel group (Megatron-Core DistributedOptimizer: one
        # instance per expert-DP group), as memory.py counts their states: each rank steps its own
        # 1/expert_shard of its experts (all of them when expert_dp = 1)
        shard = par.shard_size if par.zero >= 1 else 1
        expert_shard = max(par.expert_dp * par.shard_size // par.dp, 1) if par.zero >= 1 else 1
        opt_params = (stage_params - stage_expert_params) / shard + stage_expert_params / expert_shard
        opt_bytes = opt_params * (adam_bytes_per_param(scn) + GRAD_CLIP_BYTES_PER_PARAM)
        optimizer_s = memory_op_time_s(device, opt_bytes, kernels=5)  # grad norm, clip, fused Adam
        if scn.memory.offload_optimizer:
            optimizer_s = _offloaded_optimizer_s(scn, opt_params)
        # DS_PIPE_NOTE: DeepSpeed's blocking sends sit in the sending blocks instead
        p2p_s = coster.coll("sendrecv", "pp", act_msg, s) if pp > 1 and not ds else 0.0
        holds_output = any(next_chunk(par.schedule, pp, vp, s, c) is None for c in range(vp))
        sync_b = 0.0
        if m.tied_embeddings and pp > 1 and holds_embedding != holds_output:
            sync_b = embed_params * gbytes  # EMBEDDING_SYNC_NOTE (DeepSpeed: ReduceTiedGrads, same bytes)
        stages.append(
            StageProgram(
                stage=s,
                chunks=tuple(chunks),
                optimizer_s=optimizer_s,
                p2p_s=p2p_s,
                p2p_bytes=act_msg if pp > 1 else 0.0,
                # a two-rank ring moves the whole gradient each way: one transfer of it between
                # pipeline ranks, costed on the stage boundary the last stage receives over
                embedding_sync_s=coster.coll("sendrecv", "pp", sync_b, pp - 2) if sync_b else 0.0,
                embedding_sync_bytes=sync_b,
            )
        )

    dl = scn.dataloader
    return Program(
        stages=tuple(stages),
        num_microbatches=par.microbatches_per_run,
        pipeline_runs=par.pipeline_runs,
        grad_reduce_waits=par.local_batch > 0,
        pp=pp,
        vp=vp,
        schedule=par.schedule,
        zero=par.zero,
        reshard_after_forward=par.reshard_after_forward,
        # DS_PIPE_NOTE: DeepSpeed's pipeline engine reduces after the last backward and gathers
        # the parameters inside its optimizer step
        overlap_grad_reduce=par.overlap_grad_reduce and not deepspeed_pipe(scn),
        overlap_param_gather=par.overlap_param_gather and not deepspeed_pipe(scn),
        dataloader_latency_s=dl.microbatch_latency_s,
        dataloader_workers=dl.workers,
        dataloader_prefetch=dl.prefetch,
        dataloader_jitter=dl.jitter,
        dataloader_seed=dl.seed,
        collectives=tuple(coster.seen.values()),
        warnings=tuple(getattr(comm, "placement_warnings", lambda: [])()) + stack_hints(scn),
        ep_overlap=ep_overlap,
        # the most power-limited stage's mix and clock; every stage's in stage_power_clocks
        tensor_activity=max(activities),
        power_clock=min(d.power_clock for d in devices),
        stage_power_clocks=tuple(d.power_clock for d in devices),
    )


def stack_hints(scn: Scenario) -> tuple[str, ...]:
    """A scenario that runs unfused attention without naming a stack: that is how 2021-22
    Megatron-LM ran (before FlashAttention), whose fitted system residuals differ from today's
    Megatron-Core ones that the GPU table holds (docs/calibration.md). Said, not applied:
    `mfusim run` keeps today's stack unless [kernels] stack names another."""
    from .stacks import stack_efficiency

    k = scn.kernels
    if k.stack or resolve_attention(scn.gpu, k.attention, k.flash_attention) != "unfused":
        return ()
    if stack_efficiency("megatron-2021", architecture(scn.gpu.name)) is None:
        return ()
    return (
        "unfused attention is how 2021-22 Megatron-LM ran; this run uses today's Megatron-Core "
        'residuals of the GPU table -- [kernels] stack = "megatron-2021" uses that stack\'s fitted '
        "ones instead (docs/calibration.md)",
    )


def ep_overlap_pairs(scn: Scenario) -> bool:
    """Whether the step runs Megatron-Core's combined 1F1B (EP all-to-all overlap): its
    steady-state forwards are paired with a backward of another micro-batch."""
    par = scn.parallel
    # DualPipe pairs F and B itself (ep_comm_overlap = true is accepted there and adds nothing)
    return bool(
        par.ep_comm_overlap and par.ep > 1 and scn.model.is_moe and par.schedule not in PAIRED_SCHEDULES
    )


def eager_expert_path(scn: Scenario) -> bool:
    """Whether this scenario's routed experts run TE GroupedLinear's eager multi-stream path, where
    `expert_gemm_overhead_s` is charged (EXPERT_GEMM_OVERHEAD_NOTE): a MoE model without TE's fused
    grouped MLP and without a CUDA graph of the MoE layer."""
    k = scn.kernels
    return scn.model.is_moe and not k.fused_grouped_mlp and "moe" not in k.cuda_graph_modules


def expert_gemm_overhead_s(scn: Scenario) -> float:
    """The residual per eager per-expert GEMM this scenario pays: the GPU's
    `expert_gemm_overhead_s` on the eager path, else 0."""
    return scn.gpu.efficiency.expert_gemm_overhead_s if eager_expert_path(scn) else 0.0


def eager_expert_gemms(scn: Scenario) -> int:
    """Per-expert GEMMs one MoE layer runs per micro-batch on the eager path (each local expert's
    fc1 and fc2, forward, dgrad and wgrad); 0 off it."""
    return 2 * len(GEMM_PASSES) * (scn.model.num_experts // scn.parallel.ep) if eager_expert_path(scn) else 0


def ep_sm_fraction(scn: Scenario) -> float:
    """Fraction of the GPU's SMs the EP communication kernels hold while they overlap compute."""
    return min(scn.kernels.ep_comm_sms_used / scn.gpu.num_sms, 1.0)


# the combined 1F1B's EP kernels waiting behind compute kernels at the default stream priority
EP_LAUNCH_WAIT_NAME = "ep launch behind compute (default-priority comm stream)"
# Transformer Engine GroupedLinear's per-expert GEMM segments (grouped() in _Coster._moe): eager,
# they run as rounds of TE_GEMM_STREAMS concurrent cuBLAS GEMMs (TE_MULTI_STREAM_NOTE)
GROUPED_GEMM_SEGMENTS = ("expert fc1", "expert fc2")


def _mean_ep_pair(pairs: dict, counts: dict) -> EpPair:
    """The combined-1F1B pair of a chunk's MoE layers of several kinds (full and local attention):
    the count-weighted mean of each kind's EpPair. Exact for _combined_pair's use: every MoE
    layer's EP segments are the same (they do not depend on the attention), so the chunk's exposed
    EP time Σ n_k·f_k·ep is the mean fraction times Σ n_k·ep, and the per-layer seconds add."""
    total = sum(counts.values())
    if not total or not pairs:
        return EpPair(1.0, 0.0)
    if len(counts) == 1:
        return pairs[next(iter(counts))]

    def mean(field: str) -> float:
        return sum(n * getattr(pairs[k], field) for k, n in counts.items()) / total

    return EpPair(mean("exposed_fraction"), mean("interference_s"), mean("host_s"), mean("launch_wait_s"))


def _combined_pair(
    forward: Block, backward: Block, pair: EpPair, n_layers: int, zero3: Zero3Pair | None = None
) -> tuple[Block, Block]:
    """A chunk's forward and backward when they run as one combined-1F1B pair: each MoE layer's
    EP communication kept at its exposed fraction (every EP segment of the chunk comes from its
    MoE layers, all costed alike), the SM interference of the hidden part and the pair's exposed
    host issue time (instead of each pass's own) added to the backward, and ZeRO-3 MoE layers'
    transfers re-costed as the pair runs them (Zero3Pair)."""

    def scaled(block: Block) -> tuple[Segment, ...]:
        out = []
        for seg in block.segments:
            if seg.category == "ep_comm":
                seg = replace(seg, duration_s=seg.duration_s * pair.exposed_fraction)
            elif seg.category == "host_bound":  # the MoE layers' own (only they have any): replaced
                continue
            elif zero3 is not None and seg.name in PAIRED_TRANSFER_NAMES:  # re-costed below
                continue
            out.append(seg)
        return tuple(out)

    slowdown = Segment("compute", "ep overlap interference", pair.interference_s * n_layers)
    wait = Segment("ep_comm", EP_LAUNCH_WAIT_NAME, pair.launch_wait_s * n_layers)
    host = Segment("host_bound", "host issue (combined 1F1B, sync to sync)", pair.host_s * n_layers)
    transfers_f, transfers_b = _zero3_paired(zero3, pair.exposed_fraction, 0.0, pair.host_s, n_layers)
    return Block((*scaled(forward), *transfers_f)), _block(
        (*scaled(backward), slowdown, wait, host, *transfers_b)
    )


# [memory] offload_optimizer (Megatron-Core --optimizer-cpu-offload, ZeRO-Offload, Ren et al.
# 2021): fp32 gradients go to the host (4 B/param), the CPU runs Adam over the fp32 master weights
# and moments, the updated 16-bit weights come back (2 B/param). The CPU step streams
# ADAM_BYTES_PER_PARAM through host memory at HOST_MEMORY_TO_LINK x the GPU's host link (a
# dual-socket DDR5 host ~600 GB/s shared by 8 GPUs ≈ 75 GB/s each ≈ 1.2 x PCIe 5; Grace
# LPDDR5X ~500 GB/s per 2 GPUs ≈ 250 ≈ 1.1 x C2C per direction). Transfers and the CPU step
# pipeline per bucket (Megatron --overlap-cpu-optimizer-d2h-h2d): the slower one sets the time.
OFFLOAD_TRANSFER_BYTES_PER_PARAM = 4 + 2
HOST_MEMORY_TO_LINK = 1.1


def _offloaded_optimizer_s(scn: Scenario, params: float) -> float:
    bw = scn.gpu.host_link_bytes_per_s
    transfer = params * OFFLOAD_TRANSFER_BYTES_PER_PARAM / bw
    cpu_adam = params * ADAM_BYTES_PER_PARAM / (bw * HOST_MEMORY_TO_LINK)
    return max(transfer, cpu_adam)


def shard_axis(par: ParallelConfig) -> str:
    """The group ZeRO shards over: the whole dp group, or HSDP's shard group."""
    return "dp" if par.dp_replicas == 1 else "dp_shard"


def expert_shard_axis(par: ParallelConfig) -> str | None:
    """The group ZeRO-3 shards the routed experts over: the expert-data-parallel group ("edp",
    the ranks that hold the same experts), None when that is one rank (nothing to shard), else
    the dense parameters' shard group.

    NeMo AutoModel (NVIDIA-NeMo/Automodel@89e3a9fd nemo_automodel/components/moe/parallelizer.py
    apply_fsdp) wraps each MoE block's experts in their own `fully_shard` over the `ep_shard`
    mesh (dp_shard / ep ranks) and, when that mesh is a single rank, leaves them out of FSDP
    altogether (`ignored_params`); memory.py shards them the same way (`expert_shard`). An
    expert group without an axis of its own (HSDP replicas, ep not dividing dp, tp·cp ≠ etp)
    and ep = 1 keep the experts with the dense parameters."""
    own = par.ep > 1 and par.dp % par.ep == 0 and par.expert_dp == par.dp // par.ep
    if not own or par.dp_replicas > 1:
        return shard_axis(par)
    return "edp" if par.expert_dp > 1 else None


def _fsdp_step_collectives(
    coster: _Coster,
    par: ParallelConfig,
    params: float,
    grad_bytes: int,
    bucket_params: float,
    stage: int,
    expert_params: float = 0.0,
    expert_grad_bytes: int | None = None,
) -> tuple[list[float], list[float], list[float], list[float]]:
    """Per-step DP collectives of a chunk, per bucket, for sharded state (ZeRO-1/2, HSDP, and
    ZeRO-3 whose per-layer traffic is costed in the layers):

    * gradients: reduce-scatter within the shard group, then all-reduce of the 1/dp_shard shard
      across the replicas (HSDP; PyTorch FSDP2 / Megatron's distributed-optimizer instances);
    * parameters: all-gather within the shard group after the optimizer (ZeRO-1/2), or once per
      step before the first forward (ZeRO-3 with reshard_after_forward = false).
    ZeRO-3 with resharding (FSDP2's default) gathers and reduce-scatters per layer and
    micro-batch (`_Coster.layer`); only the cross-replica all-reduce is left for the step."""
    axis = shard_axis(par)
    shard = par.shard_size
    replicas = par.dp_replicas
    per_layer = par.zero == 3 and par.reshard_after_forward
    grads: list[float] = []
    gathers: list[float] = []
    grads_bytes: list[float] = []  # message bytes per GPU (the reduce-scatter's, else the all-reduce's)
    gathers_bytes: list[float] = []
    # ZeRO-3's routed experts over their own shard group (expert_shard_axis), the rest over axis
    expert_axis = expert_shard_axis(par) if par.zero == 3 else axis
    eb = grad_bytes if expert_grad_bytes is None else expert_grad_bytes
    groups: list[tuple[float, str, int]] = [(params, axis, grad_bytes)]
    if expert_params > 0 and (expert_axis != axis or eb != grad_bytes):
        groups = [(params - expert_params, axis, grad_bytes)]
        if expert_axis is not None:
            groups.append((expert_params, expert_axis, eb))
    for n_group, group_axis, gb in groups:
        for n_params in _buckets(n_group, bucket_params):
            t = 0.0
            if not per_layer:
                t += coster.zero3_coll("reducescatter", group_axis, n_params * gb, stage)
            if replicas > 1:
                t += coster.coll("allreduce", "dp_replicate", n_params * gb / shard, stage)
            if t > 0:
                grads.append(t)
                grads_bytes.append(n_params * gb / (1 if not per_layer else shard))
            if not per_layer:
                gathers.append(
                    coster.zero3_coll("allgather", group_axis, n_params * coster.param_gather_bytes, stage)
                )
                gathers_bytes.append(n_params * coster.param_gather_bytes)
    return grads, gathers, grads_bytes, gathers_bytes


MAX_BUCKETS_PER_CHUNK = 1000  # beyond this, equal buckets: the overlap no longer changes


# EMBEDDING_BUCKET_NOTE: Megatron-Core's DDP never splits a parameter across buckets. It walks the
# parameters in reverse registration order (backward order) and closes a bucket after the parameter
# that brings it to bucket_size (megatron/core/distributed/param_and_grad_buffer.py@core_v0.12.0
# `for param in params[::-1]`, `(param_end_index - bucket_start_index) >= bucket_size`), so the
# word embedding -- registered first -- lands in the last bucket together with whatever the
# previous bucket left, and that bucket is as large as the embedding table. Its gradient exists only
# after the chunk's whole backward (the embedding's backward runs after the first layer's), so its
# reduction starts at the end of the backward; with overlap_param_gather it is also the first
# bucket the next forward needs: the first forward pre-hook dispatches its all-gather and waits
# (distributed_data_parallel.py forward pre-hook -> finish_param_sync, which dispatches the
# bucket's all-gather when not yet dispatched). Every other bucket is the rule's even split.
def _buckets_embedding_last(params: float, embedding: float, bucket_params: float) -> list[float]:
    """A chunk's DP buckets in backward order; with `embedding` > 0 (the chunk holding the
    embedding) the last one carries the embedding tables plus the partial bucket before them."""
    if embedding <= 0 or embedding >= params:
        return _buckets(params, bucket_params)
    head = _buckets(params - embedding, bucket_params)
    if head and head[-1] < bucket_params:
        return head[:-1] + [head[-1] + embedding]
    return head + [embedding]


def _buckets(params: float, bucket_params: float) -> list[float]:
    """Split a chunk's parameters into DP buckets (last one partial)."""
    if params <= 0:
        return []
    if params / bucket_params > MAX_BUCKETS_PER_CHUNK:
        return [params / MAX_BUCKETS_PER_CHUNK] * MAX_BUCKETS_PER_CHUNK
    full, rest = divmod(params, bucket_params)
    out = [bucket_params] * int(full)
    if rest > 0:
        out.append(rest)
    return out
