"""Host-bound MoE layers: the CPU time to issue a layer's kernels, and the device-to-host sync of
the token dispatcher (issue 13).

PyTorch runs eagerly: the CPU issues every op (Python, autograd, the ATen dispatcher, the library
and cudaLaunchKernel), about 5-25 us of CPU per op ("From PyTorch op to kernel launch",
jiahuanglin.xyz all_lessons/gpu_kernel_serving/18: Python ~1 us, pybind ~1, autograd 1-3, ATen
dispatch 1-2, backend 1-5, driver launch 1-3), and the GPU runs the queued kernels behind it. As
long as the CPU stays ahead the queue hides that time. Megatron-Core's dropless MoE layer breaks
this once per layer: the token dispatcher needs the number of tokens per expert on the host (the
all-to-all split sizes, TE GroupedLinear's m_splits), so it copies them device-to-host and waits
(megatron/core/transformer/moe/token_dispatcher.py MoEAlltoAllTokenDispatcher
`_maybe_dtoh_and_synchronize`, `cuda_sync_point`; allgather: `.cpu()`; DeepEP: the CPU waits for
the received counts; HybridEP without a per-rank token budget: "CPU sync in dispatch"). After the
sync the GPU queue is empty and every kernel until the next sync must be issued by the CPU while
the GPU waits for it: the Megatron-Core MoE README's "CPU Overhead Bottleneck" ("gaps between GPU
kernels where CPU cannot launch kernels fast enough"; cures: CUDA graphs for attn, moe_router,
moe_preprocess, or a larger micro-batch).

The model, per MoE layer and micro-batch:

* ops: what each module issues per micro-batch, forward and backward (MODULE_OPS below, counted
  from Megatron-Core's and Transformer Engine's source); TE GroupedLinear without its fused
  grouped-tensor path issues per local expert a GEMM and a weight-quantizer call (+ an input
  quantize kernel under FP8/MXFP8/NVFP4) forward, and the dgrad and wgrad GEMMs (+ the gradient
  quantize) backward (transformer_engine/pytorch/module/grouped_linear.py: `_split_quantize`,
  `quantize_weight` per gemm, `general_grouped_gemm` loops the GEMMs in C++).
* CUDA graphs: a captured module costs one graph launch (forward and backward) instead of its
  ops (`[kernels] cuda_graph_modules`); `full_iteration` replays the whole step as one graph, so
  no host issue is left to expose (and no sync: it needs the sync-free HybridEP dispatch).
* the forward from one layer's sync to the next is a two-stage pipeline, CPU issue then GPU
  execution: op i is issued at t_i = t_(i-1) + host_op_s and runs from max(t_i, end of op i-1)
  for its GPU time (`issue_pipeline_s`); the segment ends when its last op does, plus the sync's
  round trip (`HOST_SYNC_S`). Only the excess over the GPU time is exposed, as `host_bound`.
* backward has no sync (the split sizes are already on the host), so the CPU may run ahead:
  the exposed part is max(0, host issue time - GPU time) of the layer's backward, for the
  input-gradient (B) and the weight-gradient (W) ops apart (zero-bubble schedules run W alone).

This is not `GPUEfficiency.kernel_launch_s`: that is the GPU-side gap between consecutive kernels
even with a full queue (charged to every kernel's duration, calibrated); this is CPU time, hidden
while the queue is ahead and exposed only where the CPU falls behind the GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

from .specs import Scenario

# CPU time to issue one op in Megatron-Core + Transformer Engine eager mode (Python module and
# autograd overhead, the ATen dispatcher, cuBLAS/cuDNN/TE host code, cudaLaunchKernel). The
# range is 5-25 us per op (jiahuanglin.xyz "From PyTorch op to kernel launch": the "before
# kernel" total is ~5-25 us of CPU-side work per op); Megatron's ops run through Python nn.Module
# calls with hooks and TE's Python quantizer objects, the upper half of the range.
HOST_OP_S = 20e-6
HOST_OP_RANGE_S = (5e-6, 25e-6)
# A plain PyTorch call from Python (a torch function or Tensor method through the ATen dispatcher
# and autograd, no nn.Module hooks, no TE quantizer): the middle of the same cited range.
TORCH_OP_S = sum(HOST_OP_RANGE_S) / 2
# The dispatcher's sync: small device-to-host copies on a side stream and an event wait; the
# CPU wakes only after the GPU has drained its queue up to the copy (one PCIe round trip plus
# the event's wake-up, ~10-20 us).
HOST_SYNC_S = 15e-6
# a CUDA-graph replay: one host op (TE make_graphed_callables' autograd function, cudaGraphLaunch)
GRAPH_LAUNCH_OPS = 1.0

# Ops per micro-batch of one layer's modules in eager mode, (forward, backward-input,
# backward-weight), from Megatron-Core (megatron/core/transformer/transformer_layer.py,
# attention.py, moe/router.py, moe/token_dispatcher.py, moe/experts.py) with Transformer Engine
# modules. The weight-gradient ops are counted apart because zero-bubble schedules run them
# as their own task (W).
MODULE_OPS: dict[str, tuple[float, float, float]] = {
    # input LayerNormLinear (norm, quantize, GEMM), q/k/v split and views, fused RoPE of q and k,
    # DotProductAttention (cuDNN fused attention and its layout ops), linear_proj (quantize,
    # GEMM), fused bias-dropout-add; backward: the same modules' dgrad/quantize kernels, and the
    # qkv and proj weight gradients (wgrad GEMM and the main_grad hook of each)
    "attn": (15.0, 11.0, 4.0),
    "attn_tp": (2.0, 2.0, 0.0),  # TP > 1: the sequence-parallel all-gather / reduce-scatter calls
    "mla": (6.0, 4.0, 4.0),  # MLA: q/kv down- and up-projections and their norms on top of "attn"
    # QK norm (Qwen3): q_layernorm and k_layernorm forward and backward, the DDP hooks of their weights
    "qk_norm": (2.0, 2.0, 2.0),
    # attention sinks (GPT-OSS): TE DotProductAttention's learnable softmax_offset is a parameter
    # of its own (dot_product_attention.py register_parameter("softmax_offset")), so one more DDP
    # gradient hook per layer and micro-batch; its dSink kernel runs inside cuDNN's graph call
    "attention_sinks": (0.0, 0.0, 1.0),
    "mlp": (8.0, 7.0, 4.0),  # dense LayerNormMLP: norm, quantize, fc1, activation, quantize, fc2
    # pre-MLP norm and TopKRouter: gating GEMM in fp32, score function, top-k, routing-map
    # scatter, aux-loss statistics (sums, all-reduce of tokens per expert)
    "moe_router": (14.0, 9.0, 1.0),
    "residual": (4.0, 4.0, 0.0),  # the layer's two residual adds and Python/hook overhead
    "shared_experts": (8.0, 7.0, 4.0),  # a TE MLP beside the routed experts
    # TEGroupedMLP: tokens_per_expert.tolist(), quantization padding, activation with the routing
    # probabilities, output allocations; the per-expert ops are EXPERT_OPS
    "experts": (8.0, 8.0, 0.0),
    # TE's fused grouped MLP (use_transformer_engine_op_fuser): grouped-tensor GEMMs and the fused
    # activation, no per-expert host work
    "experts_fused": (6.0, 6.0, 2.0),
}
# The D2H copies of the split sizes (4) and the event record stay eager when moe_preprocess is
# graphed (the dispatcher moves them to before_ep_alltoall).
PREPROCESS_DTOH_OPS = 5.0
# Per local expert and GroupedLinear (fc1 and fc2): forward a GEMM and a weight-quantizer call;
# backward-input the dgrad GEMM; backward-weight the wgrad GEMM and the data-parallel gradient
# hook of the expert's own weight (TE GroupedLinear keeps one weight parameter per expert;
# megatron/core/distributed/distributed_data_parallel.py registers `_make_backward_post_hook`
# on every parameter's AccumulateGrad node: a Python call per parameter and micro-batch); plus,
# in a quantized recipe, one quantize kernel forward (the input) and one backward-input (the
# output gradient).
EXPERT_OPS = (2.0, 1.0, 2.0)
EXPERT_QUANT_OPS = (1.0, 1.0, 0.0)
QUANTIZED_DTYPES = ("fp8", "mxfp8", "nvfp4")
# Dispatch (permute + all-to-all of tokens and probabilities + sort by local expert) and combine
# (unsort + all-to-all + unpermute) ops, forward (backward-input mirrors them), by dispatcher;
# the dispatcher's preprocess (tokens-per-expert sums, the tp x ep all-gather of the counts,
# input/output splits; nothing in backward), by dispatcher.
DISPATCH_OPS = {"alltoall": 10.0, "allgather": 7.0, "deepep": 5.0, "hybridep": 4.0}
COMBINE_OPS = {"alltoall": 7.0, "allgather": 5.0, "deepep": 4.0, "hybridep": 3.0}
PREPROCESS_OPS = {"alltoall": 15.0, "allgather": 8.0, "deepep": 3.0, "hybridep": 4.0}
# Biased experts (linear_bias) on the eager path: TEGroupedMLP._apply_bias loops over the local
# experts (megatron/core/transformer/moe/experts.py:251-268@2edffadb5; the same loop in every
# container's Megatron-LM): forward `b * p` and the add per expert, backward the product and the row
# sum of the bias gradient and of the probability gradient per expert; each expert's fc1 and fc2
# bias is its own parameter (TE GroupedLinear bias{i}), so backward-weight runs the data-parallel
# gradient hook of two more parameters per expert (distributed_data_parallel.py
# `_make_backward_post_hook`, one per parameter). Fixed: torch.cat forward, the two
# concatenations (split gradients) backward.
BIASED_EXPERT_OPS = (2.0, 4.0, 2.0)
BIASED_EXPERTS_FIXED_OPS = (1.0, 2.0, 0.0)
# GPT-OSS's clamped quick-GeGLU on the eager path, weighted_bias_quick_geglu_impl
# (megatron/core/fusions/fused_bias_geglu.py:410-442@2edffadb5, unchanged through cd4afffa):
# x_glu.clamp, x_linear.clamp and torch.cat forward (their gradients backward), and
# `torch.tensor(linear_offset, device=input.device)` (line 434) -- a copy from pageable host memory
# that PyTorch runs as cudaMemcpyAsync + cudaStreamSynchronize (at::cuda::memcpy_and_sync; flagged
# by torch.cuda.set_sync_debug_mode, pytorch/pytorch#120996, #190217). So the forward waits for the
# GPU a second time per layer, right after the clamps: the queue is empty again when the CPU issues
# the activation, fc2 and the rest (one more sync-to-sync segment). Re-run in the backward when
# `moe_act` is recomputed (its CheckpointWithoutOutput re-calls bias_act_func).
CLAMPED_GLU_OPS = (4.0, 3.0, 0.0)
# ep = 1 with the alltoall dispatcher: no all-to-all calls (3 ops each: output allocation, the
# NCCL call, its wait): two in dispatch (tokens, probabilities), one in combine
A2A_CALL_OPS = 3.0


@dataclass(frozen=True, slots=True)
class LayerHostOps:
    """Host ops of one MoE layer per micro-batch, by forward phase, and its backward."""

    attention: float  # layer start to the pre-MLP norm
    router: float  # pre-MLP norm, router and the dispatcher's preprocess (up to the sync)
    dispatch: float  # from the sync: permute, all-to-all, sort by expert
    experts: float
    combine: float  # unsort, all-to-all back, unpermute, residual
    backward_input: float
    backward_weight: float
    syncs: int  # device-to-host syncs per forward (1, or 2 with the eager clamped GeGLU)
    # ops of `experts` issued before the activation's sync (CLAMPED_GLU_OPS); 0 = no such sync
    experts_before_act_sync: float = 0.0
    backward_syncs: int = 0  # the activation's sync re-run by moe_act recomputation
    # `backward_input` by the combined 1F1B's schedule nodes: the attention side (attention,
    # router, shared experts), the dispatch's gradient, the experts' dgrad, the combine's
    # gradient with the residual's; `backward_weight` by side: attention side, experts
    backward_input_parts: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)
    backward_weight_parts: tuple[float, float] = (0.0, 0.0)

    @property
    def forward(self) -> float:
        return self.attention + self.router + self.dispatch + self.experts + self.combine


def _graphed(scn: Scenario, module: str) -> bool:
    k = scn.kernels
    return k.cuda_graph_impl in ("local", "transformer_engine") and module in k.cuda_graph_modules


def moe_layer_host_ops(scn: Scenario) -> LayerHostOps | None:
    """The ops a MoE layer issues per micro-batch, or None when nothing is issued per layer
    (`full_iteration`: one graph for the step)."""
    k, m, par = scn.kernels, scn.model, scn.parallel
    if k.cuda_graph_impl == "full_iteration":
        return None
    disp = k.moe_dispatcher
    launch = (GRAPH_LAUNCH_OPS, GRAPH_LAUNCH_OPS, 0.0)

    def add(*parts: tuple[float, float, float]) -> tuple[float, float, float]:
        return (sum(p[0] for p in parts), sum(p[1] for p in parts), sum(p[2] for p in parts))

    none = (0.0, 0.0, 0.0)
    attn = add(
        MODULE_OPS["attn"],
        MODULE_OPS["attn_tp"] if par.tp > 1 else none,
        MODULE_OPS["mla"] if m.mla is not None else none,
        MODULE_OPS["qk_norm"] if m.qk_norm else none,
        MODULE_OPS["attention_sinks"] if m.attention_sinks else none,
    )
    if _graphed(scn, "attn"):
        attn = launch
    router = MODULE_OPS["moe_router"]
    shared = MODULE_OPS["shared_experts"] if m.shared_expert_ffn_hidden else none
    pre = PREPROCESS_OPS[disp]
    if _graphed(scn, "moe_router"):  # the router graph holds the shared experts too (Megatron)
        router, shared = launch, none
        if _graphed(scn, "moe_preprocess"):
            pre = PREPROCESS_DTOH_OPS if disp == "alltoall" else 0.0
    dispatch, combine = DISPATCH_OPS[disp], COMBINE_OPS[disp]
    if par.ep == 1 and disp == "alltoall":
        dispatch, combine = dispatch - 2 * A2A_CALL_OPS, combine - A2A_CALL_OPS
    before_sync, act_syncs, bwd_syncs = 0.0, 0, 0
    if k.fused_grouped_mlp:
        experts = MODULE_OPS["experts_fused"]
    else:
        local = m.num_experts // par.ep
        n = 2 * local  # fc1 and fc2 of each local expert
        q = EXPERT_QUANT_OPS if scn.dtype in QUANTIZED_DTYPES else none
        base = MODULE_OPS["experts"]
        experts = tuple(base[i] + n * (EXPERT_OPS[i] + q[i]) for i in range(3))  # type: ignore[assignment]
        if m.linear_bias:
            bias = tuple(BIASED_EXPERTS_FIXED_OPS[i] + local * BIASED_EXPERT_OPS[i] for i in range(3))
            experts = add(experts, bias)  # type: ignore[arg-type]
        if m.activation == "clamped_quick_geglu":
            experts = add(experts, CLAMPED_GLU_OPS)  # type: ignore[arg-type]
            # issued before the sync: the fc1 half of the per-expert ops and the base, the clamps
            before_sync = base[0] / 2 + local * (EXPERT_OPS[0] + q[0]) + CLAMPED_GLU_OPS[0]
            act_syncs = 1
            bwd_syncs = int(par.recompute == "full" or "moe_act" in par.recomputed_modules)
    res = MODULE_OPS["residual"]
    bwd_in = (attn[1] + router[1] + shared[1], dispatch, experts[1], combine + res[1])
    return LayerHostOps(
        attention=attn[0],
        router=router[0] + pre + shared[0],
        dispatch=dispatch,
        experts=experts[0],
        combine=combine + res[0],
        backward_input=sum(bwd_in),
        backward_weight=attn[2] + router[2] + shared[2] + experts[2],
        syncs=1 + act_syncs,
        experts_before_act_sync=before_sync,
        backward_syncs=bwd_syncs,
        backward_input_parts=bwd_in,
        backward_weight_parts=(attn[2] + router[2] + shared[2], experts[2]),
    )


def issue_pipeline_s(phases: list[tuple[float, float]], host_op_s: float) -> float:
    """Time from an empty GPU queue until the last of `phases` finishes, each phase being
    (ops, GPU seconds) with its GPU time spread evenly over its ops: op i is issued host_op_s
    after op i-1 and runs once issued and once the GPU is free (a two-stage pipeline; the
    result is at least the host issue time of all ops and at least their GPU time)."""
    issue = gpu = 0.0
    for n_ops, gpu_s in phases:
        n = max(int(round(n_ops)), 0)
        if n == 0:
            gpu += gpu_s  # GPU work with nothing to issue (cannot happen for a real module)
            continue
        g = gpu_s / n
        for _ in range(n):
            issue += host_op_s
            gpu = max(gpu, issue) + g
    return gpu


# --- The combined 1F1B (EP overlap, Megatron-Core --overlap-moe-expert-parallel-comm) --------
# Megatron-LM megatron/core/models/common/model_chunk_schedule_plan.py
# (TransformerLayerSchedulePlan.run), pipeline_parallel/utils.py (ScheduleNode),
# models/common/utils.py (TransformerLayerNode) and models/gpt/fine_grained_callables.py
# @d98e8a64 (the same structure at eb0783b6, the commit of the GB200 guide): each MoE layer runs
# as four schedule nodes per pass -- pre_dispatch_computation (attention, pre-MLP norm, router,
# dispatch preprocess), moe_dispatch, mlp (the routed experts), moe_combine -- which the CPU
# issues alternately for the forward of one micro-batch and the backward of another. Besides the
# modules' own ops every node makes host calls that launch no kernel: its CUDA event wait and
# record (`stream_acquire_context`: each micro-batch's nodes are chained by one event across the
# two streams), a detach of each input (`_forward`: `make_viewless(e).detach()`), the layer
# state's detached tensors (`TransformerLayerNode.detach`: the residual, the shared experts'
# output, the dispatched probabilities), the freed inputs' `record_stream` and
# `untyped_storage().resize_(0)` (`free_input`, `should_free_input`), in the backward an
# autograd-engine call per node (`Variable._execution_engine.run_backward`, where the unsplit
# backward makes one per model chunk) and a `record_stream` per output gradient, and the delayed
# weight gradients' stream contexts (`backward_dw`). One such call costs the Python, pybind and
# dispatcher/driver parts of an op without its backend and kernel launch: Python ~1 us, pybind
# ~1, autograd or ATen dispatch 1-3 or a CUDA driver call 1-3 (the breakdown cited at HOST_OP_S),
# up to 5 us.
HOST_CALL_S = 5e-6
CALLS_PER_NODE_EVENTS = 2.0  # the event wait before a node's work and the record after it
CALLS_PER_BACKWARD_NODE = 1.0  # the autograd-engine call (run_backward) of a node's backward
CALLS_PER_FREED_INPUT = 2.0  # record_stream and resize_(0)


def schedule_node_calls(scn: Scenario) -> dict[str, float]:
    """Kernel-free host calls of one MoE layer's schedule nodes in the combined 1F1B, by node:
    forward "attn_f", "d_f", "mlp_f", "c_f"; backward "c_b", "mlp_dgrad", "d_b", "attn_b"; the
    experts' delayed weight gradients "wgrad" (counted from the files named above)."""
    k, m, par = scn.kernels, scn.model, scn.parallel
    disp = k.moe_dispatcher
    flex = disp in ("deepep", "hybridep")
    shared = 1.0 if m.shared_expert_ffn_hidden else 0.0
    quantized = scn.dtype in QUANTIZED_DTYPES
    local = m.num_experts // par.ep
    # should_free_input: the dispatch's inputs (tokens, probabilities) unless a flex dispatcher
    # keeps them for its backward or moe_preprocess is graphed (fixed-size tensors); the experts'
    # input when quantized copies are saved instead, or when the dispatch postprocess made a copy
    free_dispatch = not flex and not _graphed(scn, "moe_preprocess")
    free_mlp = quantized or ((local > 1 or disp != "alltoall") and disp != "hybridep")
    ev, bwd, free = CALLS_PER_NODE_EVENTS, CALLS_PER_BACKWARD_NODE, CALLS_PER_FREED_INPUT
    # backward_dw enters its stream context only with --delay-wgrad-compute (models/common/utils.py
    # TransformerLayerNode.backward_dw returns at once without it)
    dw = 1.0 if par.delay_wgrad_compute else 0.0
    return {
        # input detach; residual (and shared experts' output) detached into the layer state
        "attn_f": ev + 1 + 1 + shared,
        # two inputs detached, the dispatched probabilities detached into the layer state
        "d_f": ev + 2 + 1 + (2 * free if free_dispatch else 0.0),
        "mlp_f": ev + 1 + (free if free_mlp else 0.0),
        # input detach and freed; residual (and shared output) record_stream on the comm stream
        "c_f": ev + 1 + free + 1 + shared,
        # backward nodes: events, the engine call, a record_stream per output gradient
        "c_b": ev + bwd + 1,
        "mlp_dgrad": ev + bwd + 1,
        "d_b": ev + bwd + 1,
        # two outputs (tokens, probabilities); the attention side's backward_dw stream context
        "attn_b": ev + bwd + 2 + dw,
        "wgrad": dw,  # the experts' backward_dw stream context
    }


@dataclass(frozen=True, slots=True)
class PairNode:
    """One schedule node of a combined-1F1B layer pair as the CPU issues it: `calls` kernel-free
    host calls, then `ops` ops, each issued host_op_s after the previous; its `gpu_s` of work on
    `stream` ("comp" or "comm"; "" = nothing on the GPU in this segment) spread evenly over its
    ops, starting after the GPU end of the nodes in `after` (the CUDA event waits). `sync`: before
    issuing, the CPU waits for the GPU end of those nodes (a device-to-host sync). `ops` = 0 with
    GPU work: issued before the segment began (queued)."""

    name: str
    stream: str
    ops: float
    gpu_s: float
    calls: float = 0.0
    after: tuple[str, ...] = ()
    sync: tuple[str, ...] = ()


def pair_issue_s(nodes: list[PairNode], host_op_s: float, host_call_s: float, sync_s: float) -> float:
    """Seconds of one combined-1F1B segment, from the return of one device-to-host sync until
    the CPU returns from the last node's sync: the CPU issues `nodes` in order; each stream runs
    its work in issue order, an op no earlier than it is issued and its node no earlier than the
    nodes it waits for (a two-stage pipeline per stream, as `issue_pipeline_s`; monotone in every
    duration, being built from max and +). With no host cost it is the GPU's critical path."""
    cpu = 0.0
    free = {"comp": 0.0, "comm": 0.0}
    end: dict[str, float] = {}
    for node in nodes:
        if node.sync:
            cpu = max(cpu, *(end[n] for n in node.sync)) + sync_s
        cpu += node.calls * host_call_s
        n = max(int(round(node.ops)), 0)
        if not node.stream:
            cpu += n * host_op_s
            continue
        t = max([free[node.stream], *(end[a] for a in node.after)])
        if n == 0:
            t += node.gpu_s
        else:
            g = node.gpu_s / n
            for _ in range(n):
                cpu += host_op_s
                t = max(t, cpu) + g
        free[node.stream] = end[node.name] = t
    return cpu
