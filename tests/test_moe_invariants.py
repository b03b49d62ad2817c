"""Invariants under random MoE scenarios with every key of issue 13 (moe-audit).

Hypothesis draws small MoE models (MLA or GQA, shared experts, dense first layers, interleaved
MoE layers, MTP, routing, skew, node limit, FP8 dispatch) on Hopper and Blackwell systems, split
with tp/pp/ep/etp, every schedule (DualPipe and zero-bubble included), the EP overlap where
Megatron-Core allows it, the low-precision recipes and offloading, and checks what must hold:

* the report's invariants of test_invariants.check_report (breakdown sums to the step, per stage;
  0 < MFU <= HFU <= 1 from flops.py's counts; tokens/s), strict JSON;
* a key that only adds work or traffic never makes the step faster, and one that moves state off
  the GPU never makes it need more memory: load_imbalance up, offload_activations up,
  offload_optimizer on; FP8 dispatch never slower than BF16.
"""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from typing import Any

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from test_invariants import check_report, draw_new_keys

from simulator.errors import ConfigError
from simulator.loading import scenario_from_dict
from simulator.memory import memory_footprint
from simulator.simulate import simulate

SYSTEMS = (("h100-sxm", "dgx-h100"), ("h200", "dgx-h200"), ("b200", "dgx-b200"), ("gb200", "gb200-nvl72"))
SCHEDULES = ("1f1b", "1f1b", "interleaved", "gpipe", "zb-h1", "zb-v", "dualpipe", "dualpipev")


@st.composite
def moe_scenarios(draw: st.DrawFn) -> dict[str, Any]:
    heads = draw(st.sampled_from((4, 8)))
    head_dim = draw(st.sampled_from((32, 64)))
    hidden = heads * head_dim
    layers = draw(st.sampled_from((2, 4, 6, 8)))
    experts = draw(st.sampled_from((4, 8, 16)))
    model: dict[str, Any] = {
        "layers": layers,
        "hidden": hidden,
        "heads": heads,
        "kv_heads": draw(st.sampled_from([k for k in (1, 2, 4) if heads % k == 0])),
        "ffn_hidden": 4 * hidden,
        "vocab": 32000,
        "seq_len": draw(st.sampled_from((256, 512, 1024))),
        "gated_mlp": draw(st.booleans()),
    }
    moe: dict[str, Any] = {
        "num_experts": experts,
        "top_k": draw(st.sampled_from((1, 2, 4))),
        "expert_ffn_hidden": draw(st.sampled_from((hidden // 2, hidden, 2 * hidden))),
        "routing": draw(st.sampled_from(("balanced", "dropless"))),
        "dispatch_dtype": draw(st.sampled_from(("bf16", "fp8"))),
    }
    if draw(st.booleans()):
        moe["shared_expert_ffn_hidden"] = hidden
    if layers > 2 and draw(st.booleans()):
        moe["first_dense_layers"] = 1
    if draw(st.booleans()):
        moe["layer_interval"] = draw(st.sampled_from((1, 2)))
    if draw(st.booleans()):
        moe["load_imbalance"] = draw(st.sampled_from((1.0, 1.2, 2.0)))
    if draw(st.booleans()):
        moe["max_nodes_per_token"] = draw(st.sampled_from((1, 2)))
    model["moe"] = moe
    if draw(st.booleans()):
        model["mla"] = {
            "q_lora_rank": draw(st.sampled_from((0, 64))),
            "kv_lora_rank": 64,
            "qk_nope_head_dim": head_dim,
            "qk_rope_head_dim": 32,
            "v_head_dim": head_dim,
        }
        model["kv_heads"] = heads
    if draw(st.booleans()):
        model["mtp_layers"] = 1
    tp = draw(st.sampled_from((1, 2)))
    pp = draw(st.sampled_from([p for p in (1, 2, 4) if p <= layers]))
    dp = draw(st.sampled_from((1, 2, 4, 8)))
    schedule = draw(st.sampled_from(SCHEDULES))
    vp, m = 1, draw(st.sampled_from((2, 4, 8, 16)))
    if schedule == "interleaved":
        if pp == 1 or layers < 2 * pp:
            schedule = "1f1b"
        else:
            vp, m = 2, max(pp, m // pp * pp)
    ep = draw(st.sampled_from([e for e in (1, 2, 4, 8) if experts % e == 0 and (dp * tp) % e == 0]))
    etp = draw(st.sampled_from([x for x in (1, 2) if (dp * tp) % (ep * x) == 0]))
    overlap_ok = schedule == "interleaved" or (schedule == "1f1b" and pp == 1)
    gpu, topology = draw(st.sampled_from(SYSTEMS))
    blackwell = gpu.startswith(("b", "gb"))
    data: dict[str, Any] = {
        "name": "moe",
        "model": model,
        "cluster": {"topology": topology, "gpu": gpu, "num_gpus": tp * pp * dp},
        "parallel": {
            "tp": tp,
            "pp": pp,
            "dp": dp,
            "ep": ep,
            "etp": etp,
            "vp": vp,
            "micro_batch": 1,
            "global_batch": m * dp,
            "schedule": schedule,
            "sequence_parallel": tp > 1 and draw(st.booleans()),
            "recompute": draw(st.sampled_from(("none", "selective", "full"))),
            "zero": draw(st.integers(0, 3)),
            "ep_comm_overlap": overlap_ok and draw(st.booleans()),
            "tp_comm_overlap": draw(st.booleans()),
        },
        "precision": {
            "dtype": draw(
                st.sampled_from(("bf16", "fp8", "mxfp8", "nvfp4") if blackwell else ("bf16", "fp8"))
            )
        },
    }
    if draw(st.booleans()):
        data["memory"] = {
            "offload_activations": draw(st.sampled_from((0.0, 0.25, 1.0))),
            "offload_optimizer": draw(st.booleans()),
        }
    draw_new_keys(draw, data)
    draw_new_moe_keys(draw, data)
    return data


def draw_new_moe_keys(draw: st.DrawFn, data: dict[str, Any]) -> None:
    """Round 2's MoE keys: round-robin routing, the shared expert overlap, the expert gradients' reduction dtype, the token
    dispatchers with their SMs and stream priority, TE's fused grouped MLP, the delayed expert wgrad
    and DeepSeek-V3's FP8 expert activation inputs."""
    moe, par = data["model"]["moe"], data["parallel"]
    if draw(st.integers(0, 3)) == 0:
        moe["routing"] = "round_robin"  # exact balance: a load_imbalance above 1 is refused
        if draw(st.integers(0, 3)):
            moe.pop("load_imbalance", None)
    kernels: dict[str, Any] = data.setdefault("kernels", {})
    if draw(st.booleans()):
        kernels["expert_grad_reduce_dtype"] = draw(st.sampled_from(("fp32", "bf16")))
    if draw(st.booleans()):
        kernels["moe_dispatcher"] = draw(st.sampled_from(("alltoall", "allgather", "deepep", "hybridep")))
    if draw(st.booleans()):
        kernels["ep_comm_sms"] = draw(st.sampled_from((0, 8, 20, 32, 64)))
    if par["ep_comm_overlap"]:
        kernels["ep_comm_high_priority"] = draw(st.booleans())
        par["delay_wgrad_compute"] = draw(st.booleans())
    if draw(st.booleans()):
        kernels["fused_grouped_mlp"] = True
    if moe.get("shared_expert_ffn_hidden") and par["ep"] > 1 and draw(st.booleans()):
        # the shared expert beside the EP all-to-alls: alltoall dispatcher, not with the EP overlap
        # (Megatron-Core); sometimes drawn where it is refused
        par["shared_expert_overlap"] = True
        if draw(st.integers(0, 3)):
            kernels.pop("moe_dispatcher", None)
            par["ep_comm_overlap"] = False
            par.pop("delay_wgrad_compute", None)
            kernels.pop("ep_comm_high_priority", None)
    if kernels.get("cuda_graph_impl") == "full_iteration" and draw(st.integers(0, 3)):
        # one graph per step: only HybridEP with a per-rank token budget has no host sync
        kernels["moe_dispatcher"], kernels["fused_grouped_mlp"] = "hybridep", True
    if data["precision"]["dtype"] != "bf16" and draw(st.booleans()):
        data.setdefault("memory", {})["fp8_moe_act_input"] = True
    if not kernels:
        del data["kernels"]


SETTINGS = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


def _run(data: dict[str, Any]) -> tuple[Any, Any, float] | None:
    try:
        scn = scenario_from_dict(data)
    except ConfigError:
        return None  # a combination the strategy does not rule out (ep_comm_overlap with recompute...)
    report = simulate(scn).report
    check_report(scn, report)
    json.dumps(report.to_dict(), allow_nan=False)
    return scn, report, memory_footprint(scn).peak_bytes


def _with(data: dict[str, Any], section: str, key: str, value: object) -> dict[str, Any]:
    out = copy.deepcopy(data)
    node = out
    for part in section.split("."):
        node = node.setdefault(part, {})
    node[key] = value
    return out


@SETTINGS
@given(data=moe_scenarios())
def test_moe_report_invariants(data: dict[str, Any]) -> None:
    assume(_run(data) is not None)


# (section, key, less, more, step time with `more` is >=, <= or unordered (None), memory likewise)
MONOTONE = (
    ("model.moe", "load_imbalance", 1.0, 2.0, ">=", ">="),
    ("model.moe", "dispatch_dtype", "bf16", "fp8", "<=", None),
    ("memory", "offload_activations", 0.0, 0.5, ">=", "<="),
    ("memory", "offload_activations", 0.5, 1.0, ">=", "<="),
    ("memory", "offload_optimizer", False, True, ">=", "<="),
    # the combined 1F1B's comm stream at the default priority: EP kernels may wait behind compute
    ("kernels", "ep_comm_high_priority", True, False, ">=", None),
    # round 2: state kept in fewer bytes needs no more memory
    ("memory", "fp8_moe_act_input", False, True, None, "<="),
    # (not shared_expert_overlap: the EP kernels' SM interference it adds can exceed the
    # all-to-all time it hides; the fuzz found a step 214 ns slower)
    # (not e5m6_attention_output: its 1.5 B replace the projection's 1 B FP8 copy plus the core's
    # 2 B output, but with core_attn recomputed only the 1 B copy was kept -- more memory, rightly)
    ("memory", "exp_avg_dtype", "fp32", "bf16", None, "<="),
    ("memory", "exp_avg_sq_dtype", "fp32", "fp8", None, "<="),
    ("precision", "fp8_param_gather", False, True, None, "<="),
    # (time unordered: a dtype apart from the rest's splits the reduction into two collectives,
    # each with its latency, exposed where torch.distributed.pipelining waits for it)
    ("kernels", "expert_grad_reduce_dtype", "fp32", "bf16", None, "<="),
    # ZeRO-3 keeping the gathered parameters for the step needs more memory. Its time is left
    # unordered: the per-step buckets' last reduce-scatter is exposed after the last backward,
    # while the per-layer (resharding) path hides each layer's transfer behind that layer's own
    # pass, its last one included (program.py _Coster.layer; the fuzz found steps 0.4% apart)
    ("parallel", "reshard_after_forward", True, False, None, ">="),
)


@SETTINGS
@given(data=moe_scenarios(), which=st.sampled_from(range(len(MONOTONE))))
def test_moe_keys_move_time_and_memory_the_right_way(data: dict[str, Any], which: int) -> None:
    section, key, less, more, time_rel, mem_rel = MONOTONE[which]
    lo, hi = _run(_with(data, section, key, less)), _run(_with(data, section, key, more))
    assume(lo is not None and hi is not None)
    assert lo is not None and hi is not None
    (_, r_lo, m_lo), (_, r_hi, m_hi) = lo, hi
    t_lo, t_hi = r_lo.step_time_s, r_hi.step_time_s
    if time_rel == ">=":
        assert t_hi >= t_lo * (1 - 1e-9), (key, less, more, t_lo, t_hi)
    elif time_rel == "<=":
        assert t_hi <= t_lo * (1 + 1e-9), (key, less, more, t_lo, t_hi)
    if mem_rel == ">=":
        assert m_hi >= m_lo * (1 - 1e-9), (key, less, more, m_lo, m_hi)
    elif mem_rel == "<=":
        assert m_hi <= m_lo * (1 + 1e-9), (key, less, more, m_lo, m_hi)


def _scaled(scn: Any, factor: float, what: str) -> Any:
    topo = scn.topology
    if what == "gpu":
        g = scn.gpu
        fast = replace(
            g,
            peak_bf16_flop_per_s=factor * g.peak_bf16_flop_per_s,
            peak_fp16_flop_per_s=factor * g.peak_fp16_flop_per_s,
            peak_fp8_flop_per_s=factor * g.peak_fp8_flop_per_s,
            peak_fp4_flop_per_s=factor * g.peak_fp4_flop_per_s,
        )
        return replace(scn, topology=replace(topo, gpu=fast))
    if what == "nvlink":
        intra = replace(
            topo.intra_node, link_bandwidth_bytes_per_s=factor * topo.intra_node.link_bandwidth_bytes_per_s
        )
        return replace(scn, topology=replace(topo, intra_node=intra))
    inter = replace(
        topo.inter_node, nic_bandwidth_bytes_per_s=factor * topo.inter_node.nic_bandwidth_bytes_per_s
    )
    return replace(scn, topology=replace(topo, inter_node=inter))


@SETTINGS
@given(data=moe_scenarios(), what=st.sampled_from(("gpu", "nvlink", "nic")))
def test_faster_hardware_never_slows_a_moe_step(data: dict[str, Any], what: str) -> None:
    """More GPU peak (every dtype, NVFP4 included), NVLink or NIC bandwidth never makes a MoE
    step slower (the fuzz audit found overlap windows counted twice: tests/test_invariants.py
    DOUBLE_COUNTED). Left out, documented: ZB-V, whose greedy order is chosen from the pass times
    (schedules.zero_bubble_v), and userbuffer TP overlap in MoE layers, whose pooled hiding
    feeds the per-module host-issue pipeline (CHANGELOG, fuzz audit)."""
    assume(data["parallel"]["schedule"] != "zb-v" and not data["parallel"]["tp_comm_overlap"])
    run = _run(data)
    assume(run is not None)
    scn, report, _ = run  # type: ignore[misc]  # assume() rejected None
    for factor in (1.25, 2.0):
        faster = simulate(_scaled(scn, factor, what)).report.step_time_s
        assert faster <= report.step_time_s * (1 + 1e-9), (what, factor, report.step_time_s, faster)
