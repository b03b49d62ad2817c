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

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from . import flops as fl
from .comm import CommModel, default_comm_model
from .costs import Device, attention_time_s, matmul_time_s, memory_op_time_s
from .kernels import resolve_attention
from .schedules import PassTimes, Task, chunk_layers, next_chunk, prev_chunk, stage_tasks
from .specs import ModelSpec, Scenario

ADAM_BYTES_PER_PARAM = (
    34  # fused Adam: fp32 grad r(4) + master r/w(8) + m r/w(8) + v r/w(8) + 16-bit param w(2) + grad zero(4)
)
GRAD_CLIP_BYTES_PER_PARAM = 4  # grad-norm clipping: one more fp32 read of every gradient (L2 norm)
FP8_CAST_BYTES_PER_ELEMENT = 3  # read a 16-bit element, write its 8-bit copy


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


@dataclass(frozen=True, slots=True)
class StageProgram:
    stage: int
    chunks: tuple[ChunkProgram, ...]
    optimizer_s: float
    p2p_s: float  # activation (or gradient) transfer to the neighbouring stage


@dataclass(frozen=True, slots=True)
class Program:
    """Everything the engine needs, in seconds; no cost model left to consult."""

    stages: tuple[StageProgram, ...]
    num_microbatches: int
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
    return tuple(
        tuple(stage_tasks(program.schedule, program.pp, program.vp, program.num_microbatches, s, times))
        for s in range(program.pp)
    )


# ----------------------------------------------------------------------------- layout
def layers_per_chunk(num_layers: int, pp: int, vp: int) -> list[list[int]]:
    """Layer indices of each virtual stage (chunk c of stage s is virtual stage c·pp + s,
    as Megatron interleaves). Uneven splits give the first virtual stages one more layer."""
    n_virtual = pp * vp
    base, extra = divmod(num_layers, n_virtual)
    out, start = [], 0
    for v in range(n_virtual):
        n = base + (1 if v < extra else 0)
        out.append(list(range(start, start + n)))
        start += n
    return out


def grad_reduce_bytes_per_param(dtype: str, grad_reduce_dtype: str = "") -> int:
    """Bytes per gradient element on the DP wire. Default: Megatron-LM reduces in fp32 for
    bf16/fp8 training (main_grad buffers, accumulate_allreduce_grads_in_fp32); fp16 keeps 16-bit
    gradients. `[kernels] grad_reduce_dtype = "bf16"` is Megatron-Core's --grad-reduce-in-bf16
    (DistributedDataParallelConfig.grad_reduce_in_fp32 = False), which halves the traffic."""
    if grad_reduce_dtype:
        return 4 if grad_reduce_dtype == "fp32" else 2
    return 2 if dtype == "fp16" else 4


# ----------------------------------------------------------------------------- costing
@dataclass(frozen=True, slots=True)
class _Phase:
    """Cost parts of one layer in one phase, before merging into a block."""

    parts: tuple[Segment, ...]


@dataclass
class _Coster:
    """Costs one scenario's layers; records the distinct collectives it asked for."""

    scn: Scenario
    comm: CommModel
    seen: dict = field(default_factory=dict)
    memo: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.device = Device(self.scn.gpu, self.scn.dtype)

    # -- communication
    def coll(self, kind: str, axis: str, message_bytes: float, stage: int = 0) -> float:
        if message_bytes <= 0:
            return 0.0
        memo = (kind, axis, message_bytes, stage)
        cost = self.memo.get(memo)
        if cost is None:  # DP buckets repeat the same size hundreds of times
            cost = self.memo[memo] = self.comm.collective(kind, axis, message_bytes, stage)
        key = (kind, axis, round(message_bytes), stage if axis == "pp" else 0)
        if key not in self.seen and cost.time_s > 0:
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

    # -- one transformer layer
    def layer(self, moe: bool) -> tuple[_Phase, _Phase, _Phase, _Phase, float]:
        """(forward, backward-input, backward-weight, recompute, params_local) of one layer."""
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
        norm_tokens = T // t if par.sequence_parallel and t > 1 else T

        fwd: list = []
        b_in: list = []
        b_w: list = []

        def mm(name: str, mm_m: int, mm_n: int, mm_k: int, count: int = 1) -> None:
            tt = matmul_time_s(d, mm_m, mm_n, mm_k, count)
            f = 2.0 * mm_m * mm_n * mm_k * count
            fwd.append(Segment("compute", name, tt, f, 0.0))
            b_in.append(Segment("compute", name + " dgrad", tt, f, 0.0))
            b_w.append(Segment("compute", name + " wgrad", tt, f, 0.0))
            if d.dtype == "fp8":  # Transformer Engine casts the GEMM input (fwd) and output grad (bwd) to FP8
                cast_in = FP8_CAST_BYTES_PER_ELEMENT * mm_m * mm_k * count
                cast_grad = FP8_CAST_BYTES_PER_ELEMENT * mm_m * mm_n * count
                fwd.append(Segment("compute", "fp8 cast", memory_op_time_s(d, cast_in), 0.0, cast_in))
                b_in.append(Segment("compute", "fp8 cast", memory_op_time_s(d, cast_grad), 0.0, cast_grad))

        def mem(name: str, fwd_bytes: float, kernels: int = 1) -> None:
            tt = memory_op_time_s(d, fwd_bytes, kernels)
            fwd.append(Segment("compute", name, tt, 0.0, fwd_bytes))
            b_in.append(Segment("compute", name + " bwd", 2 * tt, 0.0, 2 * fwd_bytes))

        # --- attention block (Megatron column/row-parallel linear layers)
        tp_msg = T * h * a  # full-sequence activation of this micro-batch (AG output / AR buffer)
        mem("input norm", 2 * norm_tokens * h * a)
        self._tp_entry(fwd, b_in, tp_msg, matmul_time_s(d, T, q_local + 2 * kv_local, h))
        mm("qkv", T, q_local + 2 * kv_local, h)
        if not m.position_embeddings:
            mem("rope", 2 * T * (q_local + kv_local) * a)
        attn_fwd, attn_bwd, attn_parts = self._attention(T, s_local, s, heads_local, q_local)
        fwd.extend(attn_parts[0])
        b_in.extend(attn_parts[1])
        if cp > 1:
            kv_msg = 2 * b * s * kv_local * a  # K and V of the whole sequence (AG output)
            t_kv = self.coll("allgather", "cp", kv_msg)
            fwd.append(Segment("cp_comm", "cp kv ring", max(0.0, t_kv - attn_fwd), 0.0, kv_msg))
            t_bwd = t_kv + self.coll("reducescatter", "cp", kv_msg)
            b_in.append(Segment("cp_comm", "cp dkv ring", max(0.0, t_bwd - attn_bwd), 0.0, kv_msg))
        mm("attn out", T, h, q_local)
        self._tp_exit(fwd, b_in, tp_msg)
        mem("residual add", 3 * norm_tokens * h * a)

        # --- MLP or MoE block
        mem("post-attn norm", 2 * norm_tokens * h * a)
        if moe:
            self._moe(fwd, b_in, b_w, mm, mem, T, tp_msg)
        else:
            f_local = m.ffn // t
            fc1_n = (2 if m.gated_mlp else 1) * f_local
            self._tp_entry(fwd, b_in, tp_msg, matmul_time_s(d, T, fc1_n, h))
            mm("fc1", T, fc1_n, h)
            mem("swiglu" if m.gated_mlp else "gelu", (3 if m.gated_mlp else 2) * T * f_local * a)
            mm("fc2", T, h, f_local)
            self._tp_exit(fwd, b_in, tp_msg)
        mem("residual add", 3 * norm_tokens * h * a)

        params_local = self._layer_params_local(moe)
        if par.tp_comm_overlap and par.tp > 1:
            fwd = self._overlap_tp(fwd, fwd)
            b_in = self._overlap_tp(b_in, b_in + b_w)
        # --- ZeRO-3 / FSDP: gather weights before use, reduce-scatter grads after. They run on
        # their own stream, prefetched one layer ahead, so a layer takes max(its own work, the
        # transfer): only the excess is exposed. (Applied after TP overlap: both streams run
        # beside compute, and the layer is done when the slower of them is.)
        if par.zero == 3 and par.dp > 1:
            ag = self.coll("allgather", "dp", params_local * d.element_bytes)
            rs = self.coll(
                "reducescatter",
                "dp",
                params_local * grad_reduce_bytes_per_param(scn.dtype, scn.kernels.grad_reduce_dtype),
            )
            fwd_s = sum(p.duration_s for p in fwd)
            bwd_s = sum(p.duration_s for p in b_in + b_w)
            fwd.append(Segment("dp_comm", "zero3 param allgather", max(0.0, ag - fwd_s), 0.0, 0.0))
            b_w.append(
                Segment("dp_comm", "zero3 allgather+reducescatter", max(0.0, ag + rs - bwd_s), 0.0, 0.0)
            )
        recompute = self._recompute(fwd, attn_parts[0])
        return _Phase(tuple(fwd)), _Phase(tuple(b_in)), _Phase(tuple(b_w)), recompute, params_local

    def _overlap_tp(self, parts: list, compute_parts: list) -> list:
        """TP communication overlapped with the layer's GEMMs (Megatron/Transformer Engine
        userbuffers, `--tp-comm-overlap`): only what exceeds the GEMM time stays exposed;
        the hidden part slows the GEMMs by the GPU's `overlap_slowdown` (SM/memory sharing)."""
        tp_s = sum(p.duration_s for p in parts if p.category == "tp_comm")
        gemm_s = sum(p.duration_s for p in compute_parts if p.category == "compute" and p.flops > 0)
        if tp_s <= 0:
            return parts
        exposed = max(0.0, tp_s - gemm_s)
        hidden = tp_s - exposed
        keep = exposed / tp_s
        out = [replace(p, duration_s=p.duration_s * keep) if p.category == "tp_comm" else p for p in parts]
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

    def _attention(self, T: int, s_local: int, s: int, heads_local: int, q_local: int):
        """Causal self-attention by the [kernels] implementation (simulator/kernels.py):
        FlashAttention-2/-3 or cuDNN fused kernels, or unfused GEMMs + softmax through memory."""
        d = self.device
        b = self.scn.parallel.micro_batch
        model_flops_fwd = 2 * 2.0 * b * s_local * s * q_local  # scores + values, full s×s
        kern = self.scn.kernels
        impl = resolve_attention(self.scn.gpu, kern.attention, kern.flash_attention)
        shape = dict(
            batch=b, seq_q=s_local, seq_kv=s, heads=heads_local, head_dim=self.scn.model.dim_per_head
        )
        t_f = attention_time_s(d, impl, "fwd", **shape)
        t_b = attention_time_s(d, impl, "bwd", **shape)
        name = "attention (unfused)" if impl == "unfused" else f"attention ({impl})"
        fwd = [Segment("compute", name, t_f, model_flops_fwd, 0.0)]
        bwd = [Segment("compute", name + " bwd", t_b, 2 * model_flops_fwd, 0.0)]
        return t_f, t_b, (fwd, bwd)

    def _tp_entry(self, fwd: list, b_in: list, msg: float, gemm_s: float) -> None:
        """Column-parallel entry (Megatron's `f` operator): with SP an AllGather forward; in
        backward Megatron's LinearWithGradAccumulationAndAsyncCommunication re-gathers the
        input (overlapped with the dgrad GEMM) and reduce-scatters the input gradient
        (overlapped with the wgrad GEMM); without SP it all-reduces the input gradient
        asynchronously beside the wgrad GEMM. Only what outlasts its GEMM (`gemm_s`) is exposed."""
        par = self.scn.parallel
        if par.tp == 1:
            return
        if par.tp_comm_overlap or not self.scn.kernels.tp_comm_async:
            # hidden by _overlap_tp instead (never hide twice), or a stack without Megatron's
            # asynchronous TP backward communication (2021-22 Megatron-LM): all of it exposed
            gemm_s = 0.0
        if par.sequence_parallel:
            t_ag = self.coll("allgather", "tp", msg)
            t_rs = self.coll("reducescatter", "tp", msg)
            fwd.append(Segment("tp_comm", "tp allgather", t_ag, 0.0, msg))
            b_in.append(Segment("tp_comm", "tp allgather (beside dgrad)", max(0.0, t_ag - gemm_s), 0.0, msg))
            b_in.append(
                Segment("tp_comm", "tp reducescatter (beside wgrad)", max(0.0, t_rs - gemm_s), 0.0, msg)
            )
        else:
            t_ar = self.coll("allreduce", "tp", msg)
            b_in.append(Segment("tp_comm", "tp allreduce (beside wgrad)", max(0.0, t_ar - gemm_s), 0.0, msg))

    def _tp_exit(self, fwd: list, b_in: list, msg: float) -> None:
        """Row-parallel exit: SP ReduceScatter forward / AllGather backward (or the forward
        AllReduce of Megatron's `g` operator without SP)."""
        par = self.scn.parallel
        if par.tp == 1:
            return
        if par.sequence_parallel:
            fwd.append(
                Segment("tp_comm", "tp reducescatter", self.coll("reducescatter", "tp", msg), 0.0, msg)
            )
            b_in.append(Segment("tp_comm", "tp allgather", self.coll("allgather", "tp", msg), 0.0, msg))
        else:
            fwd.append(Segment("tp_comm", "tp allreduce", self.coll("allreduce", "tp", msg), 0.0, msg))

    def _moe(self, fwd: list, b_in: list, b_w: list, mm, mem, T: int, tp_msg: float) -> None:
        """Routed experts: router, token dispatch/combine All-to-All over EP, grouped expert GEMMs.

        Balanced routing (every expert gets T·top_k/E of the tokens). With ep > 1 experts
        are not tensor-split (Megatron expert-tensor-parallel size 1) and each TP rank
        routes its own tokens; with ep = 1 the experts are TP-split like a dense MLP.
        """
        scn = self.scn
        m, par = scn.model, scn.parallel
        a = self.device.activation_bytes
        mm("router", T, m.num_experts, m.hidden)
        if par.ep > 1:
            tokens = T * m.top_k // par.tp if par.tp > 1 else T * m.top_k
            f_local = m.expert_ffn
        else:
            tokens = T * m.top_k
            f_local = m.expert_ffn // par.tp
        experts_local = m.num_experts // par.ep
        per_expert = max(tokens // experts_local, 1)
        fc1_n = (2 if m.gated_mlp else 1) * f_local
        if par.ep == 1:
            self._tp_entry(
                fwd, b_in, tp_msg, matmul_time_s(self.device, per_expert, fc1_n, m.hidden, experts_local)
            )
        if par.ep > 1:
            a2a_msg = tokens * m.hidden * a
            t_a2a = self.coll("alltoall", "ep", a2a_msg)
            fwd.append(Segment("ep_comm", "ep dispatch", t_a2a, 0.0, a2a_msg))
            b_in.append(Segment("ep_comm", "ep combine bwd", t_a2a, 0.0, a2a_msg))
        mm("expert fc1", per_expert, fc1_n, m.hidden, experts_local)
        mem("expert act", (3 if m.gated_mlp else 2) * tokens * f_local * a)
        mm("expert fc2", per_expert, m.hidden, f_local, experts_local)
        if m.shared_expert_ffn_hidden:
            fs = m.shared_expert_ffn_hidden // par.tp
            mm("shared fc1", T, (2 if m.gated_mlp else 1) * fs, m.hidden)
            mm("shared fc2", T, m.hidden, fs)
        if par.ep > 1:
            fwd.append(Segment("ep_comm", "ep combine", t_a2a, 0.0, a2a_msg))
            b_in.append(Segment("ep_comm", "ep dispatch bwd", t_a2a, 0.0, a2a_msg))
        else:
            self._tp_exit(fwd, b_in, tp_msg)

    def _layer_params_local(self, moe: bool) -> float:
        m, par = self.scn.model, self.scn.parallel
        attn = fl.attention_params(m) / par.tp
        norms = 2 * m.hidden
        if moe:
            expert_tp = 1 if par.ep > 1 else par.tp
            experts = m.num_experts / par.ep * fl.mlp_params(m, m.expert_ffn) / expert_tp
            shared = (
                fl.mlp_params(m, m.shared_expert_ffn_hidden) / par.tp if m.shared_expert_ffn_hidden else 0
            )
            return attn + experts + shared + m.hidden * m.num_experts + norms
        return attn + fl.mlp_params(m, m.ffn) / par.tp + norms

    def _recompute(self, fwd: list, attn_fwd_parts: list) -> _Phase:
        mode = self.scn.parallel.recompute
        if mode == "none":
            return _Phase(())
        source = attn_fwd_parts if mode == "selective" else fwd
        parts = []
        for seg in source:
            # recomputed compute is `recompute`; its repeated TP collectives stay tp_comm
            parts.append(replace(seg, category="recompute") if seg.category == "compute" else seg)
        return _Phase(tuple(parts))

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
        if par.tp > 1:  # vocab-parallel embedding: partial sums reduced across TP
            msg = T * m.hidden * a
            kind = "reducescatter" if par.sequence_parallel else "allreduce"
            fwd.append(Segment("tp_comm", "embedding " + kind, self.coll(kind, "tp", msg), 0.0, msg))
        return _Phase(tuple(fwd)), _Phase(tuple(bwd))

    def logits(self) -> tuple[_Phase, _Phase, _Phase]:
        scn, d = self.scn, self.device
        par, m = scn.parallel, scn.model
        T = par.micro_batch * m.seq_len // par.cp
        a = d.activation_bytes
        v_local = -(-m.vocab // par.tp)
        t_mm = matmul_time_s(d, T, v_local, m.hidden)
        f = 2.0 * T * v_local * m.hidden
        ce_bytes = float(T * v_local * (a + 4 + 4))  # read 16-bit logits, fp32 softmax, write fp32 grad
        t_ce = memory_op_time_s(d, ce_bytes, kernels=3)
        fwd: list[Segment] = [
            Segment("compute", "final norm", memory_op_time_s(d, 2 * T * m.hidden * a), 0.0, 0.0)
        ]
        bwd_in: list[Segment] = []
        if par.tp > 1 and par.sequence_parallel:
            msg = T * m.hidden * a
            fwd.append(Segment("tp_comm", "tp allgather", self.coll("allgather", "tp", msg), 0.0, msg))
            t_rs = self.coll("reducescatter", "tp", msg)  # beside the logits wgrad (as in _tp_entry)
            bwd_in.append(
                Segment("tp_comm", "tp reducescatter (beside wgrad)", max(0.0, t_rs - t_mm), 0.0, msg)
            )
        fwd += [
            Segment("compute", "logits", t_mm, f, 0.0),
            Segment("compute", "cross-entropy", t_ce, 0.0, ce_bytes),
        ]
        bwd_in += [
            Segment("compute", "cross-entropy bwd", t_ce, 0.0, ce_bytes),
            Segment("compute", "logits dgrad", t_mm, f, 0.0),
        ]
        bwd_w = [Segment("compute", "logits wgrad", t_mm, f, 0.0)]
        return _Phase(tuple(fwd)), _Phase(tuple(bwd_in)), _Phase(tuple(bwd_w))


def _repeat(phase: _Phase, n: int) -> list:
    """n identical layers, summed part by part (the block keeps one entry per op)."""
    return [_scaled(seg, n) for seg in phase.parts]


def build_program(scn: Scenario, comm: CommModel | None = None) -> Program:
    """Cost every stage's chunks for this scenario."""
    comm = comm or default_comm_model(scn)
    coster = _Coster(scn, comm)
    par, m = scn.parallel, scn.model
    pp, vp = par.pp, par.vp
    layout = chunk_layers(par.schedule, m.layers, pp, vp)
    layer_cost = {False: coster.layer(False)}
    if m.is_moe:
        layer_cost[True] = coster.layer(True)
    emb_f, emb_b = coster.embedding()
    log_f, log_bi, log_bw = coster.logits()
    gbytes = grad_reduce_bytes_per_param(scn.dtype, scn.kernels.grad_reduce_dtype)
    host_s = scn.gpu.efficiency.microbatch_overhead_s
    bucket_params = max(par.grad_bucket_params, 1_000_000 * par.dp)  # Megatron DDP bucket rule
    device = coster.device
    embed_params = m.vocab * m.hidden / par.tp

    stages = []
    for s in range(pp):
        chunks = []
        stage_params = 0.0
        holds_embedding = any(prev_chunk(par.schedule, pp, vp, s, c) is None for c in range(vp))
        for c in range(vp):
            layers = layout[s][c]
            # the embedding sits before the first virtual stage, the logits and loss after the last
            first = prev_chunk(par.schedule, pp, vp, s, c) is None
            last = next_chunk(par.schedule, pp, vp, s, c) is None
            n_moe = sum(1 for i in layers if m.is_moe_layer(i))
            counts = {False: len(layers) - n_moe, True: n_moe}
            fwd: list = []
            b_in: list = []
            b_w: list = []
            rec: list = []
            params = 0.0
            # host-side work per micro-batch and phase (Python, hooks, scheduling): the GPU idles;
            # charged once per micro-batch, on the first model chunk
            if c == 0:
                host = Segment("compute", "host overhead (micro-batch)", host_s, 0.0, 0.0)
                fwd.append(host)
                b_in.append(host)
            if first:
                fwd += emb_f.parts
                params += embed_params + (m.seq_len * m.hidden if m.position_embeddings else 0)
            for moe, n in counts.items():
                if n == 0:
                    continue
                lf, lbi, lbw, lrec, lparams = layer_cost[moe]
                fwd += _repeat(lf, n)
                rec += _repeat(lrec, n)
                b_in += _repeat(lbi, n)
                b_w += _repeat(lbw, n)
                params += lparams * n
            if last:
                fwd += log_f.parts
                b_in = list(log_bi.parts) + b_in
                b_w = list(log_bw.parts) + b_w
                # tied embeddings share one matrix when the embedding sits on this stage too
                params += 0 if m.tied_embeddings and holds_embedding else embed_params
            if first:
                b_in += emb_b.parts
            stage_params += params
            buckets = _buckets(params, bucket_params)
            dp_grad_s, dp_param_s = [], []
            if par.dp > 1 and par.zero < 3:
                for n_params in buckets:
                    if par.zero == 0:
                        dp_grad_s.append(coster.coll("allreduce", "dp", n_params * gbytes, s))
                    else:
                        dp_grad_s.append(coster.coll("reducescatter", "dp", n_params * gbytes, s))
                        dp_param_s.append(coster.coll("allgather", "dp", n_params * device.element_bytes, s))
            chunks.append(
                ChunkProgram(
                    stage=s,
                    chunk=c,
                    num_layers=len(layers),
                    forward=_block(fwd),
                    backward=_block(rec + b_in + b_w),
                    backward_input=_block(rec + b_in),
                    backward_weight=_block(b_w),
                    grad_bucket_s=tuple(dp_grad_s),
                    param_gather_s=tuple(dp_param_s),
                    params_local=params,
                )
            )
        shard = par.dp if par.zero >= 1 else 1
        opt_bytes = stage_params / shard * (ADAM_BYTES_PER_PARAM + GRAD_CLIP_BYTES_PER_PARAM)
        optimizer_s = memory_op_time_s(device, opt_bytes, kernels=5)  # norm, clip, fused Adam
        act_msg = par.micro_batch * m.seq_len // par.cp * m.hidden * device.activation_bytes / par.tp
        p2p_s = coster.coll("sendrecv", "pp", act_msg, s) if pp > 1 else 0.0
        stages.append(StageProgram(stage=s, chunks=tuple(chunks), optimizer_s=optimizer_s, p2p_s=p2p_s))

    dl = scn.dataloader
    return Program(
        stages=tuple(stages),
        num_microbatches=par.num_microbatches,
        pp=pp,
        vp=vp,
        schedule=par.schedule,
        zero=par.zero,
        overlap_grad_reduce=par.overlap_grad_reduce,
        overlap_param_gather=par.overlap_param_gather,
        dataloader_latency_s=dl.microbatch_latency_s,
        dataloader_workers=dl.workers,
        dataloader_prefetch=dl.prefetch,
        dataloader_jitter=dl.jitter,
        dataloader_seed=dl.seed,
        collectives=tuple(coster.seen.values()),
    )


MAX_BUCKETS_PER_CHUNK = 1000  # beyond this, equal buckets: the overlap no longer changes


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
