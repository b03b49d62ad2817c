"""HSDP and resharding (issue 14, item 4): `[parallel] dp_shard` (dp = dp_shard x replicas:
gathers within the shard group, gradient all-reduce across replicas) and
`reshard_after_forward` (false: one gather per step instead of one per micro-batch and layer,
at the cost of the stage's gathered weights and gradient accumulators in memory)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from simulator.errors import ConfigError
from simulator.loading import load_scenario, scenario_from_dict
from simulator.memory import memory_footprint
from simulator.network import Placement
from simulator.program import build_program
from simulator.simulate import simulate

GiB = 2**30
MODEL = {"name": "t", "layers": 16, "hidden": 4096, "heads": 32, "vocab": 32000, "seq_len": 2048}


def scn(**parallel: object):
    par = {"tp": 8, "pp": 4, "global_batch": 256, "zero": 3, **parallel}
    return scenario_from_dict(
        {"model": MODEL, "cluster": {"topology": "dgx-h100", "num_gpus": 1024}, "parallel": par}
    )


def test_shard_and_replicate_groups() -> None:
    """FSDP2's mesh (replicate, shard): the shard group is dp_shard consecutive dp ranks, the
    replicate group the same position in every shard group; dp = dp_shard x replicas."""
    pl = Placement(tp=8, cp=1, dp=32, pp=4, ep=1, rank_order=("tp", "cp", "dp", "pp"), dp_shard=8)
    assert pl.size("dp_shard") == 8 and pl.size("dp_replicate") == 4
    shard = list(pl.members("dp_shard", 8 * 9))  # dp coord 9: shard group of dp coords 8..15
    assert shard == [8 * c for c in range(8, 16)]
    rep = list(pl.members("dp_replicate", 8 * 9))  # dp coords 1, 9, 17, 25
    assert rep == [8 * c for c in (1, 9, 17, 25)]
    assert pl.next_rank("dp_shard", 8 * 15) == 8 * 8  # the ring wraps inside the shard group
    firsts = pl.group_firsts("dp_shard", 0, 8 * 32 * 8)
    assert sorted(firsts.values()) == sorted(8 * c + t for c in (0, 8, 16, 24) for t in range(8))


def test_hsdp_shards_state_over_the_shard_group_only() -> None:
    full = memory_footprint(scn()).parts_bytes
    hsdp = memory_footprint(scn(dp_shard=8)).parts_bytes
    # dp = 32: the optimizer state of a rank is 1/32 with full sharding, 1/8 with dp_shard = 8
    assert hsdp["optimizer"] == pytest.approx(4 * full["optimizer"], rel=1e-9)
    assert hsdp["weights"] == pytest.approx(4 * full["weights"], rel=1e-9)


def test_hsdp_traffic_gathers_in_shard_allreduces_across_replicas() -> None:
    prog = build_program(scn(dp_shard=8))
    groups = {(c["group"], c["kind"]) for c in prog.collectives}
    assert ("dp_shard", "allgather") in groups and ("dp_shard", "reducescatter") in groups
    assert ("dp_replicate", "allreduce") in groups
    assert not any(c["group"] == "dp" for c in prog.collectives)  # nothing spans all 32 replicas
    full = build_program(scn())
    assert {c["group"] for c in full.collectives} >= {"dp"}
    # the replicas all-reduce only the 1/dp_shard shard of each bucket's fp32 gradients
    ar = [c for c in prog.collectives if c["group"] == "dp_replicate"]
    assert max(c["message_bytes"] for c in ar) <= 40e6 * 4 / 8 + 1


def test_reshard_after_forward_false_gathers_once_per_step() -> None:
    """Every micro-batch re-gathers every layer (FSDP2's default): dp_comm grows with m; keeping
    the gathered parameters makes it one gather per step — more memory, much less traffic."""
    every = simulate(scn(global_batch=512)).report
    once = simulate(scn(global_batch=512, reshard_after_forward=False)).report
    assert once.breakdown_s["dp_comm"] < 0.2 * every.breakdown_s["dp_comm"]
    assert once.step_time_s < every.step_time_s
    assert once.memory.peak_bytes > every.memory.peak_bytes
    # what it holds: the stage's 16-bit weights and fp32 gradient accumulators, unsharded
    extra = once.memory.parts_bytes["buffers"] - every.memory.parts_bytes["buffers"]
    stage_params = sum(c.params_local for c in build_program(scn()).stages[0].chunks)
    assert extra == pytest.approx(6 * stage_params, rel=0.15)


def test_llama3_405b_layout_loses_half_its_mfu_to_regathering() -> None:
    """Issue 14: a Llama-3-405B-like pipelined layout under ZeRO-3 that re-gathers per
    micro-batch loses about half its MFU; reshard_after_forward = false gives it back."""
    base = load_scenario(Path(__file__).resolve().parent.parent / "scenarios" / "llama3-405b-16k-h100.toml")

    def mfu(**kw: object) -> float:
        s = dataclasses.replace(base, parallel=dataclasses.replace(base.parallel, zero=3, **kw))
        return simulate(s, detail=False).report.mfu

    every, once = mfu(), mfu(reshard_after_forward=False)
    assert every < 0.65 * once


@pytest.mark.parametrize(
    "parallel,key",
    [
        ({"dp_shard": 3}, "parallel.dp_shard"),
        ({"dp_shard": 8, "zero": 0}, "parallel.dp_shard"),
        ({"reshard_after_forward": False, "zero": 1}, "parallel.reshard_after_forward"),
        ({"reshard_after_forward": "no"}, "parallel.reshard_after_forward"),
    ],
)
def test_bad_hsdp_keys_are_refused(parallel: dict, key: str) -> None:
    with pytest.raises(ConfigError) as err:
        scn(**parallel)
    assert err.value.key == key
