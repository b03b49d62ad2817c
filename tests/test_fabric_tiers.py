"""Fabrics with tiers (issue 14, item 3): buildable tier counts from switch radix, pods with
oversubscription above them, rail-only and multi-plane networks, `mfusim topo --json` tiers."""

from __future__ import annotations

import argparse
import dataclasses
import json

import pytest

from simulator.cli.topo import cmd_topo
from simulator.errors import ConfigError
from simulator.loading import load_topology, scenario_from_dict
from simulator.network import Fabric, TopologyCommModel
from simulator.network.fabric import clos_capacity_ports

MODEL = {"name": "t", "layers": 32, "hidden": 4096, "heads": 32, "vocab": 32000, "seq_len": 2048}


def h100(num_gpus: int, **inter: object) -> Fabric:
    topo = load_topology("dgx-h100")
    return Fabric(
        dataclasses.replace(topo, inter_node=dataclasses.replace(topo.inter_node, **inter)), num_gpus
    )


def test_clos_capacity() -> None:
    """Al-Fares et al. 2008: a k-port fat tree of t tiers connects 2·(k/2)^t ports."""
    assert [clos_capacity_ports(64, t) for t in (1, 2, 3)] == [64, 2048, 65536]
    assert clos_capacity_ports(40, 2) == 800


@pytest.mark.parametrize(
    "gpus,radix,tiers",
    [(64, 0, 1), (256, 0, 2), (2048, 0, 2), (16384, 0, 3), (24576, 0, 3), (98304, 0, 4), (98304, 128, 3)],
)
def test_tier_count_is_the_fewest_buildable(gpus: int, radix: int, tiers: int) -> None:
    """One NIC per GPU on 64-port NDR switches: 64 ports fit one switch, 2,048 two tiers, 16,384
    and 24,576 (Llama 3's cluster) need three, 98,304 more than a three-tier tree of 64-port switches holds (65,536)
    — three tiers with 128-port (51.2 Tb/s) switches."""
    fab = h100(gpus, switch_radix=radix)
    assert fab.num_tiers == tiers
    assert clos_capacity_ports(fab.switch_ports, tiers) >= fab.tree_ports
    if tiers > 1:
        assert clos_capacity_ports(fab.switch_ports, tiers - 1) < fab.tree_ports


def test_too_few_tiers_are_refused() -> None:
    with pytest.raises(ConfigError) as err:
        h100(98304, tiers=2).check_buildable()
    assert err.value.key == "inter_node.tiers" and "2,048" in str(err.value)


def test_rail_only_and_planes_need_fewer_tiers() -> None:
    """Rail-only: a tree per rail (12,288 ports for 98,304 GPUs: three tiers); multi-plane NICs
    give each switch `planes` times the ports at a fraction of the speed."""
    assert h100(98304, fabric="rail-only").num_tiers == 3
    assert h100(98304, planes=2).switch_ports == 128
    assert h100(98304, planes=2).num_tiers == 3 < h100(98304).num_tiers


def test_topo_json_reports_tiers_and_bisection(capsys: pytest.CaptureFixture[str]) -> None:
    assert cmd_topo(argparse.Namespace(topology="dgx-h100", gpus=98304, json=True)) == 0
    out = json.loads(capsys.readouterr().out)
    tiers = out["tiers"]
    assert [t["name"] for t in tiers] == ["leaf", "spine", "core", "super-core"]
    assert tiers[0]["gpus_per_group"] == 256 and tiers[1]["gpus_per_group"] == 2048
    assert tiers[-1]["gpus_per_group"] == 98304
    assert all(t["oversubscription"] == 1.0 and t["switches"] > 0 for t in tiers)
    assert out["bisection_GBps"] == pytest.approx(98304 / 2 * 50.0)  # non-blocking: the NICs' half


def test_pod_oversubscription_limits_bisection_and_cross_pod_dp() -> None:
    """Llama 3's 24k cluster (Dubey et al. 2024 §3.3.1): pods of 3,072 GPUs, 1:7 above them."""
    fab = h100(24576, nodes_per_pod=384, pod_oversubscription=7.0)
    assert fab.num_tiers == 3 and fab.num_pods == 8
    assert fab.tiers()[1]["oversubscription"] == 7.0
    assert fab.bisection_bytes_per_s == pytest.approx(h100(24576).bisection_bytes_per_s / 7)

    def dp_allreduce(**inter: object) -> float:
        scn = scenario_from_dict(
            {
                "model": MODEL,
                "cluster": {"topology": "dgx-h100", "num_gpus": 24576, "inter_node": inter},
                "parallel": {"tp": 8, "pp": 1, "global_batch": 3072},
            }
        )
        return TopologyCommModel(scn).collective("allreduce", "dp", 512 * 2**20).time_s

    # a DP ring (or tree) over all 3,072 nodes crosses each pod boundary only twice per rail:
    # the thin core barely matters for it — why Llama 3 put data parallelism across pods
    assert dp_allreduce(nodes_per_pod=384, pod_oversubscription=7.0) == pytest.approx(
        dp_allreduce(), rel=0.05
    )


def test_pod_oversubscription_slows_alltoall_across_pods() -> None:
    """An EP all-to-all sends half its bytes to the other pod: those go through the core."""

    def a2a(**inter: object) -> float:
        scn = scenario_from_dict(
            {
                "model": {**MODEL, "moe": {"num_experts": 64, "top_k": 2}},
                "cluster": {
                    "topology": "dgx-h100",
                    "num_gpus": 64,
                    "inter_node": {"nodes_per_leaf": 2, "tiers": 3, **inter},
                },
                "parallel": {"tp": 1, "pp": 1, "ep": 64, "global_batch": 64},
            }
        )
        return TopologyCommModel(scn).collective("alltoall", "ep", 256 * 2**20).time_s

    flat = a2a(nodes_per_pod=4)
    thin = a2a(nodes_per_pod=4, pod_oversubscription=4.0)
    assert thin > 1.5 * flat


def test_rail_only_routes_cross_rail_traffic_over_nvlink() -> None:
    fab = h100(64, fabric="rail-only")
    path = fab.route(0, 8 + 3)  # GPU 0 (rail 0) of node 0 to GPU 3 (rail 3) of node 1
    names = [a for a, _ in path] + [path[-1][1]]
    assert names[:3] == ["gpu0", "node0/switch", "gpu3"]  # the hop to the GPU on rail 3
    assert "node0/nic3" in names and not any("spine" in n for n in names)
    assert fab.route(0, 8) == h100(64).route(0, 8)  # same rail: as on a rail-optimized fabric


def test_rail_only_alltoall_pays_the_nvlink_hop() -> None:
    def a2a(fabric: str, nvlink_GBps: float) -> float:
        scn = scenario_from_dict(
            {
                "model": {**MODEL, "moe": {"num_experts": 64, "top_k": 2}},
                "cluster": {
                    "topology": "dgx-h100",
                    "num_gpus": 64,
                    "inter_node": {"fabric": fabric},
                    "intra_node": {"link_GBps_per_direction": nvlink_GBps},
                },
                "parallel": {"tp": 1, "pp": 1, "ep": 64, "global_batch": 64},
            }
        )
        return TopologyCommModel(scn).collective("alltoall", "ep", 256 * 2**20).time_s

    # with a slow NVLink the forwarded bytes show; ring-friendly traffic is unchanged
    assert a2a("rail-only", 20) > a2a("rail-optimized", 20)
    assert a2a("rail-only", 450) == pytest.approx(a2a("rail-optimized", 450), rel=0.05)


def test_pipeline_sends_between_pods_pay_the_core() -> None:
    """Every rank of a stage sends to the next stage at once: when stage boundaries cross pods
    (two 1,536-GPU stages per 3,072-GPU pod), those sends share the pod's 1:7 core uplinks."""
    scn = scenario_from_dict(
        {
            "model": MODEL,
            "cluster": {
                "topology": "dgx-h100",
                "num_gpus": 24576,
                "inter_node": {"nodes_per_pod": 384, "pod_oversubscription": 7.0},
            },
            "parallel": {"tp": 8, "pp": 16, "global_batch": 3072},
        }
    )
    comm = TopologyCommModel(scn)
    inside = comm.collective("sendrecv", "pp", 32 * 2**20, 0)  # stage 0 -> 1: same pod
    across = comm.collective("sendrecv", "pp", 32 * 2**20, 1)  # stage 1 -> 2: next pod
    assert inside.bottleneck == "nic" and across.bottleneck == "pod-uplink"
    assert across.time_s > 2 * inside.time_s
