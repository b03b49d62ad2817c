"""The combined 1F1B's host side (EP overlap, Megatron-Core --overlap-moe-expert-parallel-comm):
the CPU issues the two micro-batches' schedule nodes alternately from one dispatcher sync to the
next (hostbound.pair_issue_s, in model_chunk_schedule_plan.py TransformerLayerSchedulePlan.run's
order), each node with its own kernel-free host calls (hostbound.schedule_node_calls), and an
unsplit backward exposes only its joint issue time beyond its joint GPU time.

Megatron-LM docs/discussions/deepseek-v3-gb200-optimization §3.2 (commit eb0783b6): the 1F1B
all-to-all overlap "divides the forward and backward into multiple stages for scheduling, and
there is some synchronization between different stages, which aggravates the CPU overhead, so
the overall benefit is negative" -- so the overlap may make a host-bound step slower: a test
shows such a case (and that the same layout gains when nothing is issued per layer)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.comm import default_comm_model
from simulator.hostbound import (
    HOST_CALL_S,
    HOST_OP_RANGE_S,
    HOST_OP_S,
    HOST_SYNC_S,
    LayerHostOps,
    PairNode,
    moe_layer_host_ops,
    pair_issue_s,
    schedule_node_calls,
)
from simulator.loading import scenario_from_dict
from simulator.program import Segment, _Coster, combined_layer_s, power_limited_device
from simulator.simulate import simulate
from simulator.specs import Scenario


def _scn(
    on: bool,
    seq: int = 2048,
    dispatcher: str = "alltoall",
    num_gpus: int = 8,
    expert_overhead_s: float | None = None,
    **extra: Any,
) -> Scenario:
    """`expert_overhead_s`: the GPU's eager per-expert GEMM residual instead of its fitted one (0
    isolates the host-issue model, which the fitted 35 us per expert GEMM on the GPU hides here)."""
    scn = _scn_fitted(on, seq, dispatcher, num_gpus, **extra)
    if expert_overhead_s is None:
        return scn
    eff = replace(scn.gpu.efficiency, expert_gemm_overhead_s=expert_overhead_s)
    return replace(scn, topology=replace(scn.topology, gpu=replace(scn.gpu, efficiency=eff)))


def _scn_fitted(on: bool, seq: int, dispatcher: str, num_gpus: int, **extra: Any) -> Scenario:
    kernels = {"moe_dispatcher": dispatcher, **extra.pop("kernels", {})}
    return scenario_from_dict(
        {
            "name": "t",
            "model": {"preset": "qwen3-30b-a3b", "seq_len": seq, "layers": 4},
            "cluster": {"topology": "dgx-h100", "num_gpus": num_gpus, "gpu": "h100-sxm"},
            "parallel": {
                "ep": 8,
                "micro_batch": 1,
                "global_batch": 64,
                "ep_comm_overlap": on,
                "delay_wgrad_compute": on,  # as Megatron-Bridge sets it with the overlap
                **extra,
            },
            "precision": {"dtype": "bf16"},
            "kernels": kernels,
        }
    )


def _eager_ops(scn: Scenario) -> LayerHostOps:
    """The host ops of `scn`'s eager MoE layer: every phase issues work (an eager layer issues ops
    forward, backward-input and backward-weight, and syncs at least at the dispatcher)."""
    ops = moe_layer_host_ops(scn)
    assert isinstance(ops, LayerHostOps), "an eager MoE layer issues host ops (None = one graph per step)"
    assert ops.forward > 0 and ops.backward_input > 0 and ops.backward_weight > 0 and ops.syncs >= 1
    return ops


def _nodes(scn: Scenario, comp: tuple[float, ...], comm: tuple[float, ...]) -> list[PairNode]:
    """The segment `_Coster._pair_nodes` builds for `scn`'s MoE layer with the given GPU seconds
    (attn_f, mlp_f, attn_b, mlp_dgrad, mlp_wgrad) and all-to-all seconds (combine_b, dispatch_f,
    dispatch_b, combine_f)."""
    attn_f, mlp_f, attn_b, mlp_dgrad, mlp_wgrad = comp
    ops = _eager_ops(scn)
    coster = _Coster(scn, default_comm_model(scn))
    fwd = [Segment("compute", "attn", attn_f), Segment("compute", "mlp", mlp_f)]
    return coster._pair_nodes(ops, fwd, 1, (attn_f, attn_b, mlp_dgrad, mlp_wgrad), comm)


durations = st.floats(min_value=0.0, max_value=5e-3, allow_nan=False)


@settings(max_examples=60, deadline=None)
@given(st.tuples(*[durations] * 5), st.tuples(*[durations] * 4), st.booleans())
def test_without_host_cost_the_segment_is_the_two_stream_closed_form(
    comp: tuple[float, ...], comm: tuple[float, ...], delayed: bool
) -> None:
    """Sync to sync with no host cost, the segment is one period of the GPU's two streams:
    exactly `combined_layer_s` (the CPU only adds to it), with the weight gradients delayed or
    run inside the experts' backward (--delay-wgrad-compute off)."""
    nodes = _nodes(_scn(True, delay_wgrad_compute=delayed), comp, comm)
    gpu = combined_layer_s(*comp, comm, delayed)
    assert pair_issue_s(nodes, 0.0, 0.0, 0.0) == pytest.approx(gpu, rel=1e-12, abs=1e-15)
    host = pair_issue_s(nodes, HOST_OP_S, HOST_CALL_S, HOST_SYNC_S)
    assert host >= gpu * (1 - 1e-12)


def test_pipeline_closed_forms() -> None:
    """Hand-computed segments. GPU-bound: the queued dgrad (1.0 s) holds the dispatch behind it,
    which runs 1.0-1.4 s; the CPU waits for it, then the sync. Host-bound: each 0.01 s op runs as
    soon as it is issued (0.1 s apart), so the segment is the issue time plus the sync."""
    gpu_bound = [
        PairNode("a", "comp", 0.0, 1.0),
        PairNode("b", "comm", 2, 0.4, 1.0, ("a",)),
        PairNode("end", "", 0.0, 0.0, sync=("b",)),
    ]
    assert pair_issue_s(gpu_bound, 0.1, 0.02, 0.05) == pytest.approx(1.4 + 0.05)
    host_bound = [
        PairNode("a", "comp", 0.0, 0.1),
        PairNode("b", "comm", 3, 0.03, 0.0, ("a",)),
        PairNode("c", "", 2, 0.0, 1.0),
        PairNode("end", "", 0.0, 0.0, sync=("b",)),
    ]
    # b's ops issued at 0.1, 0.2, 0.3 run to 0.31; c's call and two ops take the CPU to 0.52
    assert pair_issue_s(host_bound, 0.1, 0.02, 0.05) == pytest.approx(0.3 + 0.02 + 0.2 + 0.05)


@pytest.mark.parametrize("delayed", [True, False])
def test_the_segment_issues_every_op_and_call_of_the_pair_once(delayed: bool) -> None:
    """Host-bound limit (GPU seconds ~0): the segment is every op of both passes at HOST_OP_S,
    every schedule-node call at HOST_CALL_S and the dispatcher's sync (the undelayed experts'
    wgrad ops issued with their dgrad)."""
    scn = _scn(True, delay_wgrad_compute=delayed)
    ops = moe_layer_host_ops(scn)
    assert ops is not None and ops.syncs == 1 and ops.backward_syncs == 0
    nodes = _nodes(scn, (1e-12,) * 5, (1e-12,) * 4)
    calls = sum(schedule_node_calls(scn).values())
    expect = (
        (ops.forward + ops.backward_input + ops.backward_weight) * HOST_OP_S
        + calls * HOST_CALL_S
        + HOST_SYNC_S
    )
    assert pair_issue_s(nodes, HOST_OP_S, HOST_CALL_S, HOST_SYNC_S) == pytest.approx(expect, rel=1e-6)
    assert sum(n.ops for n in nodes) == pytest.approx(ops.forward + ops.backward_input + ops.backward_weight)


def test_node_calls_counted_from_the_source() -> None:
    """schedule_node_calls, by hand from ScheduleNode/TransformerLayerNode/fine_grained_callables:
    alltoall, BF16, 16 local experts (Qwen3-30B at ep 8), no shared experts: forward 4 + 9 + 5 + 6,
    backward 4 + 4 + 4 + 6, the experts' backward_dw 1; HybridEP keeps its dispatch inputs and
    (BF16) the experts' input: 4 + 5 + 3 + 6."""
    calls = schedule_node_calls(_scn(True))
    fwd = [calls[n] for n in ("attn_f", "d_f", "mlp_f", "c_f")]
    bwd = [calls[n] for n in ("c_b", "mlp_dgrad", "d_b", "attn_b")]
    assert fwd == [4, 9, 5, 6] and bwd == [4, 4, 4, 6] and calls["wgrad"] == 1
    hyb = schedule_node_calls(_scn(True, dispatcher="hybridep"))
    assert [hyb[n] for n in ("attn_f", "d_f", "mlp_f", "c_f")] == [4, 5, 3, 6]
    # without --delay-wgrad-compute both backward_dw calls return before their stream context
    undelayed = schedule_node_calls(_scn(True, delay_wgrad_compute=False))
    assert undelayed["wgrad"] == 0 and undelayed["attn_b"] == 5
    assert sum(calls.values()) - sum(undelayed.values()) == 2
    # a call launches no kernel: below the cheapest op of the cited range
    assert HOST_CALL_S <= HOST_OP_RANGE_S[0]


def test_host_bound_overlap_is_negative_and_graphs_make_it_positive() -> None:
    """Eager Qwen3-30B at micro-batch 1 of 2k tokens on 8 H100: every layer waits for the CPU in
    both schedules, so pairing the passes hides no GPU time but adds the schedule nodes' calls and
    the sync's drain -- the overlap makes the step slower (the GB200 guide's "negative"). With one
    CUDA graph for the step (nothing issued per layer) the same layout gains from it."""
    off = simulate(_scn(False, expert_overhead_s=0.0)).report
    on = simulate(_scn(True, expert_overhead_s=0.0)).report
    assert off.breakdown_s["host_bound"] > 0 and on.breakdown_s["host_bound"] > 0  # the premise
    assert on.step_time_s > off.step_time_s
    graph = {"moe_dispatcher": "hybridep", "fused_grouped_mlp": True, "cuda_graph_impl": "full_iteration"}
    g_off = simulate(_scn(False, dispatcher="hybridep", kernels=graph)).report
    g_on = simulate(_scn(True, dispatcher="hybridep", kernels=graph)).report
    assert g_on.breakdown_s["host_bound"] == 0.0
    assert g_on.step_time_s < g_off.step_time_s


def _qwen30_16_h100(on: bool, dispatcher: str) -> Scenario:
    """Megatron-Bridge @067f987d docs/training/moe-optimization.md: Qwen3-30B-A3B BF16 on 16 H100,
    seq 4096, TP1 PP1 EP16, MBS1 GBS1024, forced-balanced routing; HybridEP with TE graphs of
    moe_router and moe_preprocess, delayed wgrad off (the recipe's delay_wgrad_compute = False,
    perf_recipes/qwen/h100/qwen3_moe.py), or alltoall without graphs, with delayed wgrad
    (communication-overlap.md: 31.20 s; 31.31 without); both on a default-priority comm stream
    (no high_priority_a2a_comm_stream in either)."""
    kernels: dict[str, Any] = {"moe_dispatcher": dispatcher}
    parallel: dict[str, Any] = {"ep": 16, "micro_batch": 1, "global_batch": 1024, "ep_comm_overlap": on}
    if on and dispatcher == "alltoall":
        parallel["delay_wgrad_compute"] = True
    if dispatcher == "hybridep":
        kernels.update(
            cuda_graph_impl="transformer_engine", cuda_graph_modules=["moe_router", "moe_preprocess"]
        )
    return scenario_from_dict(
        {
            "name": "qwen3-30b-16-h100",
            "model": {"preset": "qwen3-30b-a3b", "seq_len": 4096},
            "cluster": {"topology": "dgx-h100", "num_gpus": 16, "gpu": "h100-sxm"},
            "parallel": parallel,
            "precision": {"dtype": "bf16"},
            "kernels": kernels,
        }
    )


def test_published_16_h100_pairs_gain_in_the_published_order() -> None:
    """Published on/off pairs (Megatron-Bridge @067f987d; test data, not fitted): HybridEP
    24.714 -> 20.992 s (1.177), alltoall 41.25 -> 31.20 s (1.322). Asserted: both gain, and the
    alltoall dispatcher, whose all-to-all is longer, gains more. Not asserted: the sizes -- the
    model's gains are ~1.6x the published ones (docs/accuracy.md "MoE ablation ratios": the EP
    kernels stretch beside compute, which the model does not represent)."""
    ratio = {}
    for dispatcher in ("hybridep", "alltoall"):
        off = simulate(_qwen30_16_h100(False, dispatcher)).report.step_time_s
        on = simulate(_qwen30_16_h100(True, dispatcher)).report.step_time_s
        ratio[dispatcher] = off / on
    assert 1.0 < ratio["hybridep"] < ratio["alltoall"]


def _layer_backward(scn: Scenario) -> tuple[float, float, float, float]:
    """(host wait, GPU seconds) of one MoE layer's input-gradient and weight-gradient phases."""
    coster = _Coster(scn, default_comm_model(scn))
    coster.device, _ = power_limited_device(coster)
    _, b_in, b_w, _, _ = coster.layer(True)

    def split(parts: tuple) -> tuple[float, float]:
        host = sum(p.duration_s for p in parts if p.category == "host_bound")
        return host, sum(p.duration_s for p in parts) - host

    return (*split(b_in.parts), *split(b_w.parts))


def test_unsplit_backward_exposes_only_its_joint_issue_excess() -> None:
    """1F1B without the overlap: the backward's dgrad and wgrad are issued in one autograd pass,
    so a layer's host wait is max(0, all its backward ops x HOST_OP_S - its backward GPU time),
    charged once (the weight-gradient phase gets none). A zero-bubble schedule, which runs W as
    its own task, keeps the two apart. Here (micro-batch 1 of 2k tokens) the dgrad is GPU-bound
    and the wgrad host-bound: apart, the wgrad's excess was charged although the joint backward
    keeps the GPU busy."""
    scn = _scn(False, expert_overhead_s=0.0)
    ops = _eager_ops(scn)
    host_in, gpu_in, host_w, gpu_w = _layer_backward(scn)
    expect = max(0.0, (ops.backward_input + ops.backward_weight) * HOST_OP_S - gpu_in - gpu_w)
    assert host_in == pytest.approx(expect, rel=1e-9, abs=1e-15) and host_w == 0.0
    zb = _scn(False, num_gpus=16, expert_overhead_s=0.0, pp=2, schedule="zb-h1")
    zb_in, zb_gpu_in, zb_w, zb_gpu_w = _layer_backward(zb)
    assert zb_w == pytest.approx(max(0.0, ops.backward_weight * HOST_OP_S - zb_gpu_w), rel=1e-9)
    assert zb_in == pytest.approx(max(0.0, ops.backward_input * HOST_OP_S - zb_gpu_in), rel=1e-9, abs=1e-15)
    assert zb_w > 0.0  # the premise: W alone is host-bound
