"""`[kernels] zero3_collectives = "flat"` (issue 12): ZeRO-3 parameter all-gathers and gradient
reduce-scatters on each GPU's own share of the node's NICs, without NCCL's node-level
aggregation over NVLink — what DeepSpeed's 2021 ZeRO-3 reached in Narayanan et al. 2021,
Table 2 (docs/calibration.md). Closed forms, monotonicity, and the validate mapping."""

from __future__ import annotations

import dataclasses

import pytest

from simulator.comm import bus_factor
from simulator.errors import ConfigError
from simulator.loading import scenario_from_dict
from simulator.program import build_program
from simulator.resources import data_dir
from simulator.simulate import simulate
from simulator.validate.cases import Case, build_case
from simulator.validate.runs import read_runs_csv

GPT3 = {"name": "gpt3", "layers": 96, "hidden": 12288, "heads": 96, "vocab": 51200, "seq_len": 2048}


def zero3(gpus: int = 1536, collectives: str = "flat", nic_gbps: float | None = None, **par: object):
    data = {
        "model": GPT3,
        "cluster": {"topology": "dgx-a100", "num_gpus": gpus},
        "parallel": {
            "tp": 1,
            "pp": 1,
            "micro_batch": 1,
            "global_batch": gpus,
            "zero": 3,
            "recompute": "full",
            **par,
        },
        "precision": {"dtype": "fp16"},
        "kernels": {"attention": "unfused", "zero3_collectives": collectives},
    }
    scn = scenario_from_dict(data)
    if nic_gbps is not None:
        inter = dataclasses.replace(scn.topology.inter_node, nic_bandwidth_bytes_per_s=nic_gbps * 1e9 / 8)
        scn = dataclasses.replace(scn, topology=dataclasses.replace(scn.topology, inter_node=inter))
    return scn


def _flat_busbw(scn) -> float:
    topo = scn.topology
    return topo.nic_bandwidth_per_node_bytes_per_s / topo.gpus_per_node * scn.gpu.efficiency.nccl_bw_fraction


def test_flat_collective_is_the_alpha_beta_ring_on_one_nic_share() -> None:
    """Per layer: all-gather of the layer's fp16 parameters = (n−1)·α + (n−1)/n · M / (25 GB/s · f)."""
    scn = zero3()
    n = 1536
    colls = {c["kind"]: c for c in build_program(scn).collectives if c["group"] == "dp"}
    ag = colls["allgather"]
    expected = (n - 1) * scn.topology.inter_node.latency_s + bus_factor("allgather", n) * ag[
        "message_bytes"
    ] / _flat_busbw(scn)
    assert ag["algorithm"] == "flat-ring"
    assert ag["time_s"] == pytest.approx(expected, rel=1e-9)
    # the layer's ~12h² fp16 parameters (+ norm weights)
    h = GPT3["hidden"]
    assert ag["message_bytes"] == pytest.approx(2 * 12 * h * h, rel=1e-3)
    assert _flat_busbw(scn) == pytest.approx(25e9 * scn.gpu.efficiency.nccl_bw_fraction, rel=1e-9)


def test_comm_bound_step_moves_four_times_the_parameters() -> None:
    """At 1536 GPUs and one micro-batch the step is bound by the parameter traffic: gathered for
    forward, for the recomputed forward and for backward, and the gradients reduce-scattered
    (k = 4 passes of the fp16 parameter bytes, each (n−1)/n of them over the NIC share)."""
    scn = zero3()
    rep = simulate(scn).report
    n = 1536
    layer_bytes = 2 * 12 * GPT3["hidden"] ** 2
    comm_s = 4 * GPT3["layers"] * bus_factor("allgather", n) * layer_bytes / _flat_busbw(scn)
    assert comm_s <= rep.step_time_s <= 1.1 * comm_s
    assert rep.breakdown_s["dp_comm"] > 0.5 * rep.step_time_s


def test_flat_step_time_stays_constant_as_gpus_double() -> None:
    """Ring traffic per GPU does not shrink with more GPUs: once comm-bound, doubling the GPUs at
    the same micro-batch count keeps the step time (Table 2: 88 -> 44 TFLOP/s per GPU)."""
    t768 = simulate(zero3(768, micro_batch=2, global_batch=1536)).report.step_time_s
    t1536 = simulate(zero3(1536, micro_batch=1, global_batch=1536)).report.step_time_s
    assert t1536 == pytest.approx(t768, rel=0.08)


def test_more_nic_bandwidth_is_never_slower_and_nccl_never_slower_than_flat() -> None:
    times = [
        simulate(zero3(384, nic_gbps=g, micro_batch=4, global_batch=1536)).report.step_time_s
        for g in (100, 200, 400, 1600)
    ]
    assert all(b <= a * (1 + 1e-12) for a, b in zip(times, times[1:], strict=False))
    assert times[0] > times[-1]
    nccl = simulate(zero3(384, "nccl", micro_batch=4, global_batch=1536)).report.step_time_s
    assert nccl <= times[1]


def test_flat_does_not_touch_other_zero_stages_or_a_group_inside_one_node() -> None:
    """The key is about ZeRO-3 traffic across nodes only: ZeRO-1 and an 8-GPU ZeRO-3 group stay NCCL."""
    for kw in ({"zero": 1}, {}):
        gpus = 8 if not kw else 64
        a = simulate(zero3(gpus, "flat", **kw)).report.step_time_s
        b = simulate(zero3(gpus, "nccl", **kw)).report.step_time_s
        assert a == b


def test_unknown_value_is_refused_naming_the_key() -> None:
    with pytest.raises(ConfigError, match="kernels.zero3_collectives"):
        zero3(collectives="ring")


def test_validate_maps_only_the_deepspeed_zero3_rows_to_flat() -> None:
    runs = read_runs_csv(data_dir("scenarios") / "published" / "calibration_runs.csv")
    cases = [build_case(r) for r in runs if r.run_id.startswith("narayanan21_t2")]
    flat = {
        c.run_id
        for c in cases
        if isinstance(c, Case) and c.scenario["kernels"].get("zero3_collectives") == "flat"
    }
    assert flat == {c.run_id for c in cases if "zero3" in c.run_id}
    assert len(flat) == 6


def test_reduce_scatter_outside_backward_when_grad_reduce_is_not_overlapped() -> None:
    """overlap_grad_reduce = false (DeepSpeed's overlap_comm default): each layer's gradient
    reduce-scatter runs after its backward. When the backward outlasts gather + reduce-scatter
    (384 GPUs, micro-batch 8), the step grows by layers x one reduce-scatter, less the compute
    slowdown the overlapped reduce-scatter caused (overlap_slowdown x its time), and is never faster."""
    kw = {"micro_batch": 8, "global_batch": 3072}
    on = zero3(384, **kw, overlap_grad_reduce=True)
    off = zero3(384, **kw, overlap_grad_reduce=False)
    t_on = simulate(on).report.step_time_s
    t_off = simulate(off).report.step_time_s
    rs = next(c["time_s"] for c in build_program(off).collectives if c["kind"] == "reducescatter")
    assert t_off > t_on
    slowdown = on.gpu.efficiency.overlap_slowdown
    assert t_off - t_on == pytest.approx(GPT3["layers"] * rs * (1 - slowdown), rel=0.1)


def test_comm_bound_layer_takes_the_transfer_time_not_transfer_plus_interference() -> None:
    """A layer whose gather outlasts its (interference-slowed) compute takes exactly the gather's
    time: the overlap slowdown hides under the transfer instead of adding to it."""
    prog = build_program(zero3())  # 1536 GPUs, one micro-batch: every layer's forward is gather-bound
    ag = next(c["time_s"] for c in prog.collectives if c["kind"] == "allgather")
    chunk = prog.stages[0].chunks[0]
    outside = {"host overhead (micro-batch)", "embedding lookup", "final norm", "logits", "cross-entropy"}
    layers_s = sum(seg.duration_s for seg in chunk.forward.segments if seg.name not in outside)
    assert layers_s == pytest.approx(chunk.num_layers * ag, rel=1e-9)
