"""Host-bound MoE layers (issue 13, simulator/hostbound.py): the CPU issue time after the token
dispatcher's device-to-host sync, and what CUDA graphs and larger micro-batches remove of it.

Invariants: the issue pipeline lies between max(host, GPU) and host + GPU; once the GPU is the
slower stage only the sync round trip is left (a closed form); full-iteration graphs leave
nothing; fewer host ops (graphs) never make a step slower and more never faster; a dense model
is unchanged by every key; the breakdown still sums to the step; the closed form follows the
engine; the trace shows the segment.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.analytic import estimate_program
from simulator.engine import run_step
from simulator.hostbound import (
    BIASED_EXPERT_OPS,
    BIASED_EXPERTS_FIXED_OPS,
    CLAMPED_GLU_OPS,
    HOST_OP_RANGE_S,
    HOST_OP_S,
    HOST_SYNC_S,
    MODULE_OPS,
    issue_pipeline_s,
    moe_layer_host_ops,
)
from simulator.loading import scenario_from_dict
from simulator.program import build_program
from simulator.simulate import simulate
from simulator.specs import Scenario

LAYERS = 4
GRAPHS = {
    "cuda_graph_impl": "transformer_engine",
    "cuda_graph_modules": ["attn", "moe_router", "moe_preprocess"],
}


def _scn(micro_batch: int = 1, preset: str = "qwen3-30b-a3b", ep: int = 8, **kernels: Any) -> Scenario:
    data: dict[str, Any] = {
        "model": {"preset": preset, "layers": LAYERS, "seq_len": 4096},
        "cluster": {"topology": "dgx-b200", "num_gpus": 8},
        "parallel": {"ep": ep, "micro_batch": micro_batch, "global_batch": 128},
        "precision": {"dtype": "mxfp8"},
        "kernels": kernels,
    }
    return scenario_from_dict(data)


def _host_s(scn: Scenario) -> float:
    return simulate(scn).report.breakdown_s["host_bound"]


def test_the_per_op_host_cost_is_inside_its_published_range() -> None:
    lo, hi = HOST_OP_RANGE_S
    assert lo <= HOST_OP_S <= hi


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 40), st.floats(0.0, 1e-3, allow_nan=False)),
        min_size=1,
        max_size=6,
    ),
    st.floats(1e-6, 3e-5),
)
def test_issue_pipeline_between_max_and_sum(phases: list[tuple[int, float]], host_op_s: float) -> None:
    """A two-stage pipeline (CPU issue -> GPU): never faster than either stage alone, never
    slower than the two in series; more ops or a slower CPU never make it faster."""
    t = issue_pipeline_s([(float(n), g) for n, g in phases], host_op_s)
    host = sum(n for n, _ in phases) * host_op_s
    gpu = sum(g for _, g in phases)
    assert t >= max(host, gpu) * (1 - 1e-12)
    assert t <= (host + gpu) * (1 + 1e-12) + 1e-15
    more = [(float(n + 1), g) for n, g in phases]
    assert issue_pipeline_s(more, host_op_s) >= t * (1 - 1e-12)
    assert issue_pipeline_s([(float(n), g) for n, g in phases], host_op_s * 1.5) >= t * (1 - 1e-12)


def test_small_micro_batch_is_host_bound_a_large_one_pays_only_the_sync() -> None:
    """micro-batch 1: the CPU issues the experts' per-expert ops slower than the GPU runs them.
    micro-batch 16: the GPU is the slower stage, so each MoE layer's forward exposes exactly the
    sync round trip and the issue of the first op after it (the queue is empty then):
    layers x micro-batches x (HOST_SYNC_S + HOST_OP_S) (closed form)."""
    small, large = _scn(1), _scn(16)
    small_rep, large_rep = simulate(small).report, simulate(large).report
    n_mb = large.parallel.num_microbatches
    assert large_rep.breakdown_s["host_bound"] == pytest.approx(
        LAYERS * n_mb * (HOST_SYNC_S + HOST_OP_S), rel=1e-6
    )
    per_token_small = small_rep.breakdown_s["host_bound"] / small.tokens_per_step
    per_token_large = large_rep.breakdown_s["host_bound"] / large.tokens_per_step
    assert per_token_small > 100 * per_token_large
    # host-bound: the same tokens take longer in micro-batches of 1
    assert small_rep.step_time_s > large_rep.step_time_s


def test_full_iteration_graph_leaves_no_host_wait() -> None:
    scn = _scn(1, moe_dispatcher="hybridep", fused_grouped_mlp=True, cuda_graph_impl="full_iteration")
    assert moe_layer_host_ops(scn) is None
    assert _host_s(scn) == 0.0
    eager = _scn(1, moe_dispatcher="hybridep", fused_grouped_mlp=True)
    assert simulate(scn).report.step_time_s < simulate(eager).report.step_time_s


def test_fewer_host_ops_never_slower() -> None:
    """Graphing attention, router and preprocess, a fused grouped MLP, a flex dispatcher: each
    removes host ops and none adds GPU work, so none makes the step slower; at micro-batch 1 the
    graphs make it strictly faster."""
    eager = simulate(_scn(1)).report
    graphed = simulate(_scn(1, **GRAPHS)).report
    assert graphed.breakdown_s["host_bound"] < eager.breakdown_s["host_bound"]
    assert graphed.step_time_s < eager.step_time_s
    only_attn = simulate(_scn(1, cuda_graph_impl="transformer_engine", cuda_graph_modules=["attn"])).report
    assert graphed.step_time_s <= only_attn.step_time_s <= eager.step_time_s
    ops = moe_layer_host_ops(_scn(1))
    graphed_ops = moe_layer_host_ops(_scn(1, **GRAPHS))
    assert ops is not None and graphed_ops is not None
    assert graphed_ops.forward < ops.forward and graphed_ops.backward_input < ops.backward_input
    assert simulate(_scn(1, moe_dispatcher="hybridep")).report.step_time_s <= eager.step_time_s


def test_more_local_experts_issue_more_ops() -> None:
    """TE GroupedLinear without its fused path issues ops per local expert: halving ep doubles
    the per-expert ops (the fused grouped MLP does not)."""
    ep8, ep4 = moe_layer_host_ops(_scn(1, ep=8)), moe_layer_host_ops(_scn(1, ep=4))
    assert ep8 is not None and ep4 is not None
    assert ep4.experts > ep8.experts
    f8 = moe_layer_host_ops(_scn(1, ep=8, fused_grouped_mlp=True))
    f4 = moe_layer_host_ops(_scn(1, ep=4, fused_grouped_mlp=True))
    assert f8 is not None and f4 is not None and f8.experts == f4.experts


def test_gpt_oss_eager_experts_issue_bias_and_clamp_ops_and_sync_twice() -> None:
    """GPT-OSS on the eager path: per local expert the biased experts' ops (BIASED_EXPERT_OPS), the
    clamped GeGLU's ops, and its torch.tensor(..., device) copy, a second host sync per forward;
    TE's fused grouped MLP runs none of them. A second sync never makes the layer faster."""
    gpt, qwen = _scn(1, preset="gpt-oss-120b"), _scn(1, preset="qwen3-30b-a3b")
    g, q = moe_layer_host_ops(gpt), moe_layer_host_ops(qwen)
    assert g is not None and q is not None
    local = 128 // 8  # both presets: 128 experts over ep 8
    extra = [
        BIASED_EXPERTS_FIXED_OPS[i] + local * BIASED_EXPERT_OPS[i] + CLAMPED_GLU_OPS[i] for i in range(3)
    ]
    qk_w = MODULE_OPS["qk_norm"][2]  # Qwen3's QK norm weights' hooks (GPT-OSS has none)
    sink_w = MODULE_OPS["attention_sinks"][2]  # GPT-OSS's softmax_offset hook (Qwen3 has none)
    assert (g.experts - q.experts, g.backward_weight - q.backward_weight) == (
        extra[0],
        extra[2] - qk_w + sink_w,
    )
    assert (g.syncs, q.syncs) == (2, 1) and 0 < g.experts_before_act_sync < g.experts
    fused = moe_layer_host_ops(_scn(1, preset="gpt-oss-120b", fused_grouped_mlp=True))
    assert fused is not None and fused.syncs == 1 and fused.experts_before_act_sync == 0
    # splitting a sync-to-sync segment in two (the second sync) never shortens it
    before, after = (
        [(g.dispatch, 1e-4), (g.experts_before_act_sync, 2e-4)],
        [(g.experts, 3e-4), (g.combine, 1e-4)],
    )
    split = issue_pipeline_s(before, HOST_OP_S) + issue_pipeline_s(after, HOST_OP_S)
    assert split >= issue_pipeline_s(before + after, HOST_OP_S)
    rec_ops = moe_layer_host_ops(
        scenario_from_dict(
            {
                "model": {"preset": "gpt-oss-120b", "layers": LAYERS, "seq_len": 4096},
                "cluster": {"topology": "dgx-b200", "num_gpus": 8},
                "parallel": {
                    "ep": 8,
                    "micro_batch": 1,
                    "global_batch": 128,
                    "recompute": "selective",
                    "recompute_modules": ["moe_act"],
                },
                "precision": {"dtype": "mxfp8"},
            }
        )
    )
    assert rec_ops is not None and rec_ops.backward_syncs == 1 and g.backward_syncs == 0


def test_dense_models_are_untouched() -> None:
    base = _scn(1, preset="llama3-8b", ep=1)
    graphed = _scn(
        1, preset="llama3-8b", ep=1, cuda_graph_impl="transformer_engine", cuda_graph_modules=["attn", "mlp"]
    )
    a, b = simulate(base).report, simulate(graphed).report
    assert a.breakdown_s["host_bound"] == 0.0 == b.breakdown_s["host_bound"]
    assert a.step_time_s == b.step_time_s


@pytest.mark.parametrize(
    ("schedule", "vp"), [("1f1b", 1), ("zb-h1", 1), ("interleaved", 2), ("dualpipev", 1), ("gpipe", 1)]
)
def test_breakdown_sums_and_closed_form_follows_the_engine(schedule: str, vp: int) -> None:
    data: dict[str, Any] = {
        "model": {"preset": "qwen3-30b-a3b", "layers": 8, "seq_len": 4096},
        "cluster": {"topology": "dgx-b200", "num_gpus": 8},
        "parallel": {"ep": 4, "pp": 2, "vp": vp, "micro_batch": 1, "global_batch": 32, "schedule": schedule},
        "precision": {"dtype": "mxfp8"},
    }
    scn = scenario_from_dict(data)
    rep = simulate(scn).report
    assert rep.breakdown_s["host_bound"] > 0
    assert sum(rep.breakdown_s.values()) == pytest.approx(rep.step_time_s, rel=1e-6)
    program = build_program(scn)
    closed, _ = estimate_program(program)
    assert closed == pytest.approx(run_step(program).step_time_s, rel=0.01)


def test_trace_shows_the_host_wait() -> None:
    timeline = simulate(_scn(1), detail=True).timeline
    spans = [s for s in timeline.spans if s.category == "host_bound"]
    assert spans and all(s.stream == "compute" for s in spans)
    assert any("dispatcher's sync" in s.name for s in spans)


def test_whatif_offers_cuda_graphs_for_host_bound_moe_only() -> None:
    from simulator.whatif import candidate_variants

    lever = {v.key: v for v in candidate_variants(_scn(1))}["cuda_graphs"]
    assert lever.build is not None and lever.addresses == ("host_bound",)
    built = lever.build()
    assert built.kernels.cuda_graph_modules == ("attn", "moe_router", "moe_preprocess")
    assert simulate(built).report.step_time_s < simulate(_scn(1)).report.step_time_s
    dense = {v.key: v for v in candidate_variants(_scn(1, preset="llama3-8b", ep=1))}["cuda_graphs"]
    assert dense.build is None and "dense" in dense.skipped
    graphed = {v.key: v for v in candidate_variants(_scn(1, **GRAPHS))}["cuda_graphs"]
    assert graphed.build is None and "already" in graphed.skipped
