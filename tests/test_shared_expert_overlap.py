"""Megatron-Core's --moe-shared-expert-overlap ([parallel] shared_expert_overlap): the shared
expert's GEMMs on a side stream beside the same micro-batch's EP all-to-alls (program.py
SHARED_OVERLAP_NOTE), the configurations Megatron-Core refuses, and the validate mapping."""

from __future__ import annotations

import pytest

from simulator import validate as V
from simulator.comm import default_comm_model
from simulator.errors import ConfigError
from simulator.loading import scenario_from_dict
from simulator.program import _Coster, ep_sm_fraction, sm_interference_s
from simulator.resources import published_runs_csv
from simulator.simulate import simulate
from simulator.specs import Scenario

SHARED = {"shared_expert_ffn_hidden": 1536}
KEY = "parallel.shared_expert_overlap"


def _scn(
    parallel: dict,
    moe: dict | None = SHARED,
    kernels: dict | None = None,
    num_gpus: int = 16,
    layers: int = 4,
) -> Scenario:
    model: dict = {"preset": "qwen3-30b-a3b", "seq_len": 4096, "layers": layers}
    if moe:
        model["moe"] = moe
    data: dict = {
        "name": "t",
        "model": model,
        "cluster": {"topology": "dgx-h100", "num_gpus": num_gpus},
        "parallel": {"ep": 8, "global_batch": 64, "shared_expert_overlap": True, **parallel},
    }
    if kernels:
        data["kernels"] = kernels
    return scenario_from_dict(data)


@pytest.mark.parametrize(
    ("parallel", "moe", "kernels", "says"),
    [
        ({}, None, None, "no shared expert"),  # Qwen3-30B-A3B has none
        ({}, SHARED, {"moe_dispatcher": "deepep"}, "alltoall"),  # transformer_config.py @a2d7d674
        ({}, SHARED, {"moe_dispatcher": "allgather"}, "alltoall"),
        ({"ep_comm_overlap": True, "pp": 1}, SHARED, None, "ep_comm_overlap"),
        (
            {"recompute": "selective", "recompute_modules": ["shared_experts"]},
            SHARED,
            None,
            "shared_experts",
        ),
        ({"ep": 1}, SHARED, None, "ep = 1"),
        ({"pp": 2, "schedule": "dualpipev"}, SHARED, None, "dualpipev"),
    ],
)
def test_refusals_name_the_key(parallel: dict, moe: dict | None, kernels: dict | None, says: str) -> None:
    with pytest.raises(ConfigError, match=says) as err:
        _scn(parallel, moe, kernels)
    assert err.value.key == KEY


def test_default_off_and_accepted_where_megatron_runs_it() -> None:
    assert not _scn({"shared_expert_overlap": False}).parallel.shared_expert_overlap
    assert _scn({}).parallel.shared_expert_overlap
    # a value that is not a boolean is refused
    with pytest.raises(ConfigError):
        _scn({"shared_expert_overlap": "yes"})


def _passes(scn: Scenario) -> tuple:
    coster = _Coster(scn, default_comm_model(scn))
    coster.stage = 0
    fwd, b_in, b_w, _, _ = coster.layer(True)
    return fwd.parts, b_in.parts, b_w.parts


def _ep(parts) -> float:
    return sum(p.duration_s for p in parts if p.category == "ep_comm")


def _named(parts, names) -> float:
    return sum(p.duration_s for p in parts if p.name in names)


@pytest.mark.parametrize(
    ("moe", "ep", "num_gpus"),
    [
        (SHARED, 16, 16),  # EP over two nodes: the all-to-all outlasts the shared expert
        ({"shared_expert_ffn_hidden": 16384}, 8, 8),  # a large shared expert hides it all
    ],
)
def test_exposed_all_to_all_closed_form(moe: dict, ep: int, num_gpus: int) -> None:
    """Per pass: exposed EP comm = max(0, a2a - shared) and one interference segment
    = min(a2a, shared) x (EP SMs / SMs); every other segment as without the overlap. The backward
    hides behind the shared dgrad + wgrad (one Linear backward on the side stream under 1F1B)."""
    on = _scn({"ep": ep}, moe, num_gpus=num_gpus)
    off = _scn({"ep": ep, "shared_expert_overlap": False}, moe, num_gpus=num_gpus)
    f_on, bi_on, _ = _passes(on)
    f_off, bi_off, bw_off = _passes(off)
    frac = ep_sm_fraction(on)
    assert 0 < frac < 1
    shared_f = _named(f_off, ("shared fc1", "shared fc2"))
    shared_b = _named(bi_off, ("shared fc1 dgrad", "shared fc2 dgrad")) + _named(
        bw_off, ("shared fc1 wgrad", "shared fc2 wgrad")
    )
    regimes = []
    for p_on, p_off, shared, name in (
        (f_on, f_off, shared_f, "shared expert overlap interference"),
        (bi_on, bi_off, shared_b, "shared expert overlap interference bwd"),
    ):
        a2a = _ep(p_off)
        assert a2a > 0 and shared > 0
        assert _ep(p_on) == pytest.approx(max(0.0, a2a - shared), rel=1e-12, abs=1e-15)
        assert _named(p_on, (name,)) == pytest.approx(sm_interference_s(min(a2a, shared), frac), rel=1e-12)
        # the compute as without the overlap (the host issue after the dispatcher's sync races a
        # shorter GPU tail: it may only grow, by at most what the tail lost)
        kept = ("ep_comm", "host_bound")
        assert [p for p in p_on if p.category not in kept and p.name != name] == [
            p for p in p_off if p.category not in kept
        ]
        regimes.append(a2a > shared)
    # the two parametrizations exercise both branches of the max
    assert all(regimes) if ep == 16 else not any(regimes)


def test_zero_bubble_hides_behind_the_dgrad_only() -> None:
    """ZB-H1 defers the weight gradients (W): the backward's all-to-all hides behind the shared
    dgrad alone."""
    par = {"ep": 16, "pp": 2, "schedule": "zb-h1"}
    on, off = _scn(par, num_gpus=32), _scn({**par, "shared_expert_overlap": False}, num_gpus=32)
    bi_on, bi_off = _passes(on)[1], _passes(off)[1]
    dgrad = _named(bi_off, ("shared fc1 dgrad", "shared fc2 dgrad"))
    assert _ep(bi_off) > dgrad
    assert _ep(bi_on) == pytest.approx(_ep(bi_off) - dgrad, rel=1e-12)


@pytest.mark.parametrize(
    ("parallel", "num_gpus"),
    [
        ({"ep": 8}, 8),
        ({"ep": 16}, 16),
        ({"ep": 8, "pp": 2, "micro_batch": 2}, 16),
        ({"ep": 16, "pp": 2, "vp": 2, "schedule": "interleaved"}, 32),
        ({"ep": 8, "tp": 2, "sequence_parallel": True}, 16),
    ],
)
def test_overlap_is_never_slower(parallel: dict, num_gpus: int) -> None:
    """The step saves (1 - f)·min(a2a, shared) per pass and MoE layer, f = EP SMs / SMs < 1
    (specs refuses f >= 1): never slower with the overlap, and faster whenever the layer has an
    all-to-all. (The interference term is positive: with f -> 1 the saving goes to 0.)"""
    on = simulate(_scn(parallel, num_gpus=num_gpus)).report.step_time_s
    off = simulate(_scn({**parallel, "shared_expert_overlap": False}, num_gpus=num_gpus)).report.step_time_s
    assert on < off


def test_validate_simulates_the_recipes_shared_expert_overlap() -> None:
    """Megatron-Bridge v0.2.0 (container 25.11) DEEPSEEK_V3_B200_FP8_MX_BASE_CONFIG sets
    moe_shared_expert_overlap = true: validate maps it to [parallel] shared_expert_overlap and no
    longer lists it as recorded, not simulated; a recipe with it off leaves the key at its default."""
    runs = {r.run_id: r for r in V.read_runs_csv(published_runs_csv())}
    case = V.build_case(runs["mbridge_25.11_DeepSeekV3_DGX-B200_256gpu_fp8-mx"])
    assert isinstance(case, V.Case)
    assert case.scenario["parallel"]["shared_expert_overlap"] is True
    recipe = [a for a in case.assumptions if a.startswith("recipe:")]
    assert "shared_expert_overlap = true" in recipe[0]
    assert not any("moe_shared_expert_overlap" in a for a in recipe)
    assert V.scenario_for(case).parallel.shared_expert_overlap
    other = V.build_case(runs["mbridge_26.04.01_DeepSeekV3_DGX-B200_256gpu_mxfp8"])
    assert isinstance(other, V.Case)
    assert "shared_expert_overlap" not in other.scenario["parallel"]
    assert not V.scenario_for(other).parallel.shared_expert_overlap
