"""Key combinations the real software cannot run are refused naming the key (exit 2, one line);
a legal one that costs nothing gets a warning line; the valid neighbour of each still runs.

Sources: Transformer Engine get_attention_backend (FlashAttention off for a learnable softmax),
llm-foundry flash_attn_fn (the only unpadding path), DeepEP / Hybrid-EP requirements, and
routing_skew.busiest_rank_factor's cap ep·min(k, m)/k (simulator/specs.py, simulator/loading.py).
"""

from __future__ import annotations

import copy
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import SMALL_SCENARIO, dump_toml

from mfusim import simulate
from simulator.cli import one_line
from simulator.errors import ConfigError
from simulator.loading import load_scenario

MOE = {"num_experts": 8, "top_k": 2, "expert_ffn_hidden": 1024}


def scenario(**tables: dict[str, Any]) -> dict[str, Any]:
    """SMALL_SCENARIO (dense, 16 A100s, tp 2, pp 2, dp 4) with tables merged in."""
    data = copy.deepcopy(tomllib.loads(SMALL_SCENARIO))
    for name, table in tables.items():
        data.setdefault(name, {}).update(table)
    return data


def moe_scenario(ep: int, topology: str = "dgx-a100", **kernels: Any) -> dict[str, Any]:
    data = scenario(kernels=kernels)
    data["model"]["moe"] = dict(MOE)
    data["parallel"]["ep"] = ep
    data["cluster"]["topology"] = topology
    return data


def refused(data: dict[str, Any], key: str, write_file: Callable[..., Path], run_cli, *needles: str) -> str:
    path = write_file(dump_toml(data))
    with pytest.raises(ConfigError) as info:
        load_scenario(path)
    assert info.value.key == key, (info.value.key, str(info.value))
    message = one_line(str(info.value))
    assert key in message and path.name in message
    res = run_cli(["run", str(path), "--json"])
    assert res.code == 2, (res.code, res.err)
    assert "Traceback" not in res.err and len(res.err.splitlines()) == 1, res.err
    for needle in (key, *needles):
        assert needle in res.err, (needle, res.err)
    return message


def runs(data: dict[str, Any], write_file: Callable[..., Path], run_cli) -> str:
    path = write_file(dump_toml(data), name="neighbour.toml")
    res = run_cli(["run", str(path), "--json"])
    assert res.code == 0, res.err
    return res.err


# ------------------------------------------------------------------ attention sinks
@pytest.mark.parametrize("impl", ["fa2", "triton"])
def test_sinks_refuse_flash_kernels(impl: str, write_file, run_cli) -> None:
    data = scenario(kernels={"attention": impl})
    data["model"]["attention_sinks"] = True
    refused(data, "kernels.attention", write_file, run_cli, "cudnn")


def test_sinks_refuse_fa3(write_file, run_cli) -> None:
    data = scenario(kernels={"attention": "fa3"})
    data["model"]["attention_sinks"] = True
    data["cluster"]["topology"] = "dgx-h100"
    refused(data, "kernels.attention", write_file, run_cli)


def test_sinks_refuse_ampere_default_fa2(write_file, run_cli) -> None:
    """No kernels.attention on an A100: the default is FlashAttention-2, which has no sinks."""
    data = scenario()
    data["model"]["attention_sinks"] = True
    refused(data, "kernels.attention", write_file, run_cli, "default")


@pytest.mark.parametrize(
    "kernels", [{"attention": "cudnn"}, {"attention": "unfused"}, {"flash_attention": False}]
)
def test_sinks_run_on_cudnn_and_unfused(kernels: dict[str, Any], write_file, run_cli) -> None:
    data = scenario(kernels=kernels)
    data["model"]["attention_sinks"] = True
    runs(data, write_file, run_cli)


def test_sinks_run_on_hopper_default(write_file, run_cli) -> None:
    data = scenario()
    data["model"]["attention_sinks"] = True
    data["cluster"]["topology"] = "dgx-h100"
    runs(data, write_file, run_cli)


# ------------------------------------------------------------------ unpadding
@pytest.mark.parametrize(
    "kernels", [{"attention": "cudnn"}, {"attention": "triton"}, {"flash_attention": False}]
)
def test_unpad_refused_without_flash_varlen(kernels: dict[str, Any], write_file, run_cli) -> None:
    data = scenario(kernels={"attention_padding": "unpad", **kernels})
    refused(data, "kernels.attention_padding", write_file, run_cli, "fa2")


def test_unpad_refused_on_hopper_default_cudnn(write_file, run_cli) -> None:
    data = scenario(kernels={"attention_padding": "unpad"})
    data["cluster"]["topology"] = "dgx-h100"
    refused(data, "kernels.attention_padding", write_file, run_cli, "set kernels.attention")


@pytest.mark.parametrize("kernels", [{}, {"attention": "fa2"}])
def test_unpad_runs_with_fa2(kernels: dict[str, Any], write_file, run_cli) -> None:
    runs(scenario(kernels={"attention_padding": "unpad", **kernels}), write_file, run_cli)


# ------------------------------------------------------------------ bias gradients
def test_bias_grad_separate_without_biases_warns(write_file, run_cli) -> None:
    """Legal (nn.Linear(bias=False) computes no bias gradient) and free: one warning line."""
    base = load_scenario(write_file(dump_toml(scenario())))
    sep = load_scenario(write_file(dump_toml(scenario(kernels={"bias_grad": "separate"})), name="s.toml"))
    warned = [w for w in sep.warnings() if "kernels.bias_grad" in w]
    assert len(warned) == 1 and "\n" not in warned[0]
    assert not any("kernels.bias_grad" in w for w in base.warnings())
    assert simulate(sep).step_time_s == simulate(base).step_time_s
    err = runs(scenario(kernels={"bias_grad": "separate"}), write_file, run_cli)
    assert "kernels.bias_grad" in err


def test_bias_grad_separate_with_biases_no_warning(write_file) -> None:
    data = scenario(kernels={"bias_grad": "separate"})
    data["model"]["linear_bias"] = True
    scn = load_scenario(write_file(dump_toml(data)))
    assert not any("kernels.bias_grad" in w for w in scn.warnings())


def test_bias_grad_separate_refused_with_mla(write_file, run_cli) -> None:
    data = scenario(kernels={"bias_grad": "separate"})
    data["model"].update(linear_bias=True, mla={"kv_lora_rank": 128, "qk_rope_head_dim": 32})
    refused(data, "kernels.bias_grad", write_file, run_cli)


# ------------------------------------------------------------------ DeepEP / HybridEP
def test_deepep_refused_on_pcie(write_file, run_cli) -> None:
    refused(
        moe_scenario(2, "pcie-a100", moe_dispatcher="deepep"),
        "kernels.moe_dispatcher",
        write_file,
        run_cli,
        "PCIe",
    )


def test_deepep_refused_across_a100_nodes(write_file, run_cli) -> None:
    """A100: DeepEP intra-node only; ep = 4 with tp = 2 steps 2 ranks: ranks 0-6, one node of 8
    (runs), two nodes of 4 (refused)."""
    runs(moe_scenario(4, moe_dispatcher="deepep"), write_file, run_cli)
    data = moe_scenario(4, moe_dispatcher="deepep")
    data["cluster"]["gpus_per_node"] = 4  # ranks 0, 2, 4, 6 now on two nodes
    refused(data, "kernels.moe_dispatcher", write_file, run_cli, "intra-node")


def test_hybridep_refused_on_ampere(write_file, run_cli) -> None:
    refused(moe_scenario(2, moe_dispatcher="hybridep"), "kernels.moe_dispatcher", write_file, run_cli, "SM90")


@pytest.mark.parametrize(
    ("dispatcher", "topology"), [("deepep", "dgx-a100"), ("deepep", "dgx-h100"), ("hybridep", "dgx-h100")]
)
def test_flex_dispatchers_run_where_supported(dispatcher: str, topology: str, write_file, run_cli) -> None:
    runs(moe_scenario(2, topology, moe_dispatcher=dispatcher), write_file, run_cli)


# ------------------------------------------------------------------ load imbalance
@pytest.mark.parametrize(("ep", "cap"), [(1, 1.0), (2, 2.0), (4, 4.0)])
def test_load_imbalance_above_cap_refused(ep: int, cap: float, write_file, run_cli) -> None:
    """8 experts, top-2: m = 8/ep experts per rank >= 2 = k, so the cap is ep·min(k, m)/k = ep."""
    data = moe_scenario(ep)
    data["model"]["moe"]["load_imbalance"] = cap * 1.01
    message = refused(data, "model.moe.load_imbalance", write_file, run_cli)
    assert f"maximum {cap:g}" in message
    data["model"]["moe"]["load_imbalance"] = cap
    runs(data, write_file, run_cli)


def test_load_imbalance_cap_with_few_local_experts(write_file, run_cli) -> None:
    """top-4 of 8 over ep = 4: m = 2 < k, cap = 4·2/4 = 2."""
    data = moe_scenario(4)
    data["model"]["moe"].update(top_k=4, load_imbalance=2.5)
    assert "maximum 2 " in refused(data, "model.moe.load_imbalance", write_file, run_cli)
    data["model"]["moe"]["load_imbalance"] = 2.0
    runs(data, write_file, run_cli)


def test_load_imbalance_below_one_refused(write_file, run_cli) -> None:
    data = moe_scenario(2)
    data["model"]["moe"]["load_imbalance"] = 0.5
    refused(data, "model.moe.load_imbalance", write_file, run_cli)


# ------------------------------------------------------------------ switches that need experts
@pytest.mark.parametrize(
    "kernels",
    [
        {"ep_comm_sms": 16},
        {"ep_comm_high_priority": True},
        {"expert_grad_reduce_dtype": "bf16"},
        {"fused_grouped_mlp": True},
    ],
)
def test_expert_switches_on_a_dense_model_warn_and_change_nothing(
    kernels: dict[str, Any], write_file
) -> None:
    """Legal (one [kernels] table may serve dense and MoE scenarios) and without effect on a dense
    model: one warning line naming the key, the same step (found by the fuzzkeys lane)."""
    base = load_scenario(write_file(dump_toml(scenario())))
    scn = load_scenario(write_file(dump_toml(scenario(kernels=kernels)), name="k.toml"))
    (key,) = kernels
    warned = [w for w in scn.warnings() if f"kernels.{key}" in w]
    assert len(warned) == 1 and "no experts" in warned[0]
    assert simulate(scn).step_time_s == simulate(base).step_time_s


def test_squared_relu_kernel_without_squared_relu_warns(write_file) -> None:
    scn = load_scenario(write_file(dump_toml(scenario(kernels={"squared_relu": "eager"}))))
    assert [w for w in scn.warnings() if 'kernels.squared_relu = "eager" changes nothing' in w]
