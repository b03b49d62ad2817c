"""Hidden asynchronous TP communication slows the GEMM it overlaps (issue 12, heldout lane).

Megatron's LinearWithGradAccumulationAndAsyncCommunication issues the backward all-gather /
reduce-scatter (all-reduce without SP) with async_op=True beside the dgrad / wgrad GEMM; the NCCL
kernels share that GPU's SMs and HBM, so the hidden part costs `overlap_slowdown` x its time, as
userbuffer overlap (`tp overlap interference`) and hidden FSDP traffic already did."""

from __future__ import annotations

from dataclasses import replace

import pytest

from simulator import program as P
from simulator.loading import scenario_from_dict
from simulator.simulate import simulate
from simulator.specs import Scenario

NAME = "tp async interference"


def _scn(
    parallel: dict | None = None, kernels: dict | None = None, slowdown: float | None = None
) -> Scenario:
    data: dict = {
        "name": "t",
        "model": {"layers": 4, "hidden": 6144, "heads": 48, "vocab": 51200, "seq_len": 2048},
        "cluster": {"topology": "dgx-a100", "num_gpus": 16},
        # pp 2: stage 0 holds layers and the embedding only (the output layer's gather is on stage 1)
        "parallel": {
            "tp": 8,
            "pp": 2,
            "global_batch": 4,
            "micro_batch": 4,
            "sequence_parallel": True,
            **(parallel or {}),
        },
        "precision": {"dtype": "fp16"},
    }
    if kernels:
        data["kernels"] = kernels
    scn = scenario_from_dict(data)
    if slowdown is not None:
        eff = replace(scn.gpu.efficiency, overlap_slowdown=slowdown)
        scn = replace(scn, topology=replace(scn.topology, gpu=replace(scn.gpu, efficiency=eff)))
    return scn


def _sums(scn: Scenario) -> tuple[dict[str, float], dict[str, float]]:
    chunk = P.build_program(scn).stages[0].chunks[0]
    out: list[dict[str, float]] = []
    for block in (chunk.forward, chunk.backward):
        d: dict[str, float] = {"tp allgather (beside dgrad)": 0.0, "tp reducescatter (beside wgrad)": 0.0}
        d["tp allreduce (beside wgrad)"] = 0.0  # zero-length (fully hidden) segments are dropped
        for seg in block.segments:
            d[seg.name] = d.get(seg.name, 0.0) + seg.duration_s
        out.append(d)
    return out[0], out[1]


def test_interference_is_slowdown_times_the_hidden_collective_time() -> None:
    """Per chunk: interference = overlap_slowdown x (full backward AG + RS time of the column-
    parallel entries − their exposed parts); each entry's full AG/RS equals a forward one (same
    message), and there are as many entries as exits (two per layer)."""
    scn = _scn()
    fwd, bwd = _sums(scn)
    hidden = (fwd["tp allgather"] - bwd["tp allgather (beside dgrad)"]) + (
        fwd["tp reducescatter"] - bwd["tp reducescatter (beside wgrad)"]
    )
    assert hidden > 0
    assert bwd[NAME] == pytest.approx(scn.gpu.efficiency.overlap_slowdown * hidden, rel=1e-12)
    assert NAME not in fwd  # the forward collectives are not overlapped


def test_without_sequence_parallel_the_hidden_allreduce_interferes() -> None:
    scn = _scn(parallel={"sequence_parallel": False})
    fwd, bwd = _sums(scn)
    # the entry all-reduce has the exit's message: its full time is a forward "tp allreduce"
    hidden = fwd["tp allreduce"] - bwd["tp allreduce (beside wgrad)"]
    assert bwd[NAME] == pytest.approx(scn.gpu.efficiency.overlap_slowdown * hidden, rel=1e-12)


@pytest.mark.parametrize(
    ("parallel", "kernels", "slowdown"),
    [
        ({"tp_comm_overlap": True}, None, None),  # userbuffers: costed once, by _overlap_tp
        (None, {"tp_comm_async": False}, None),  # 2021-22 Megatron: nothing hidden
        (None, None, 0.0),
        ({"tp": 1, "dp": 8, "global_batch": 32}, None, None),
    ],
)
def test_no_interference_where_nothing_is_hidden_or_it_is_costed_elsewhere(
    parallel, kernels, slowdown
) -> None:
    _, bwd = _sums(_scn(parallel=parallel, kernels=kernels, slowdown=slowdown))
    assert NAME not in bwd


def test_step_time_grows_by_exactly_the_interference() -> None:
    """One micro-batch runs the two stages one after the other: the step is longer by the
    interference segments of both stages, and by nothing else (same scenario at
    overlap_slowdown 0; no TP overlap or ZeRO-3 here, the other users of overlap_slowdown)."""
    slowed, quiet = _scn(), _scn(slowdown=0.0)
    stages = P.build_program(slowed).stages
    extra = sum(
        s.duration_s for st in stages for c in st.chunks for s in c.backward.segments if s.name == NAME
    )
    assert extra > 0
    delta = simulate(slowed).report.step_time_s - simulate(quiet).report.step_time_s
    assert delta == pytest.approx(extra, rel=1e-9)
