"""Expert-data-parallel gradients on their own group (issue 13, moe-small): the routed experts'
gradients reduce-scatter (and their parameters all-gather) over the ranks that hold the same
expert shard -- at ep = GPUs per node one GPU per node, each sending through its own NIC --
not over the whole data-parallel group's NVLink-aggregated rings."""

from __future__ import annotations

import pytest

from simulator.loading import scenario_from_dict
from simulator.network import Placement, default_comm_model
from simulator.network.interface import bus_factor
from simulator.program import build_program
from tests.conftest import SMALL_MOE_MODEL

MOE = SMALL_MOE_MODEL


def scn(ep: int, num_gpus: int = 64):
    return scenario_from_dict(
        {
            "model": MOE,
            "cluster": {"topology": "dgx-b200", "num_gpus": num_gpus},
            "parallel": {"ep": ep, "micro_batch": 1, "global_batch": 4 * num_gpus, "zero": 1},
        }
    )


def test_expert_dp_group_is_the_same_position_of_every_ep_group() -> None:
    pl = Placement(tp=1, cp=1, dp=64, pp=1, ep=8, rank_order=("tp", "cp", "dp", "pp"))
    assert pl.size("edp") == 8
    assert list(pl.members("edp", 3)) == [3 + 8 * i for i in range(8)]  # one GPU of each node
    assert pl.next_rank("edp", 59) == 3  # the ring wraps inside the group
    # its groups start at dp coordinates 0 .. ep-1
    assert sorted(pl.group_firsts("edp", 0, 64).values()) == list(range(8))


def test_expert_gradients_cost_one_nic_per_gpu() -> None:
    """ep = 8 on 8-GPU nodes: each expert-DP group has one GPU per node, so a reduce-scatter of
    S bytes moves (n-1)/n·S through that GPU's own NIC (no NVLink aggregation): it takes at least
    that over the NIC's per-GPU share, and far longer than the dp group's hierarchical ring."""
    s = scn(8)
    comm = default_comm_model(s)
    msg = 128e6
    t_edp = comm.collective("reducescatter", "edp", msg).time_s
    topo = s.topology
    nic_per_gpu = topo.nic_bandwidth_per_node_bytes_per_s / topo.gpus_per_node
    assert t_edp >= bus_factor("reducescatter", 8) * msg / nic_per_gpu
    assert t_edp <= 1.5 * bus_factor("reducescatter", 8) * msg / (nic_per_gpu * 0.7)
    t_dp = comm.collective("reducescatter", "dp", msg).time_s
    assert t_edp > 2.5 * t_dp


def test_step_reduces_expert_gradients_on_the_expert_dp_group() -> None:
    prog = build_program(scn(8))
    groups = {(c["group"], c["kind"]) for c in prog.collectives}
    assert ("edp", "reducescatter") in groups and ("edp", "allgather") in groups
    # every expert gradient byte goes through an edp reduce-scatter: the step's expert-gradient
    # time is the expert buckets' bytes over the edp group's bus bandwidth
    edp = [c for c in prog.collectives if c["group"] == "edp" and c["kind"] == "reducescatter"]
    assert all(c["bottleneck"] == "nic" for c in edp)
    # ep = dp: each rank holds its experts alone, nothing to reduce over expert-DP
    alone = build_program(scn(64))
    assert not any(c["group"] == "edp" for c in alone.collectives)


def test_expert_gradient_time_grows_with_expert_dp() -> None:
    """Same expert bytes per rank, larger expert-DP group: the bus factor (n-1)/n grows."""
    t = {}
    for n in (16, 64):
        prog = build_program(scn(8, num_gpus=n))
        t[n] = sum(sum(c.grad_bucket_s) for st in prog.stages for c in st.chunks)
    assert t[64] > t[16]
    assert t[64] / t[16] == pytest.approx((7 / 8) / (1 / 2), rel=0.35)
