"""Seeded invariant fuzz of stack "megatron-deepspeed" (program.DS_PIPE_NOTE) and of `--unset`
(overrides={key: None}): every accepted scenario keeps the step's accounting and monotonicity
invariants, every refusal is a ConfigError naming a key. Random dense models on A100s; the other
GPUs have no residuals for the stack and must be refused."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

import mfusim
from mfusim import ConfigError
from simulator.analytic import estimate_step

DS = "megatron-deepspeed"
SEED = 6


def _scenario(rng: random.Random) -> dict[str, Any]:
    hidden = rng.choice([1024, 2048, 2560, 4096])
    tp, pp, dp = rng.choice([1, 2, 4, 8]), rng.choice([1, 1, 2, 4]), rng.choice([1, 2, 4])
    mb = rng.choice([1, 2, 4])
    par: dict[str, Any] = {
        "tp": tp,
        "pp": pp,
        "micro_batch": mb,
        "global_batch": mb * dp * rng.choice([1, 2, 4, 8]),
        "recompute": rng.choice(["none", "full", "selective"]),
        "zero": rng.choice([0, 1]),
    }
    if tp > 1 and rng.random() < 0.5:
        par["sequence_parallel"] = True
    kern: dict[str, Any] = {"stack": DS}
    if rng.random() < 0.5:
        kern["attention"] = "unfused"
    return {
        "model": {
            "preset": "gpt3-1.3b",
            "hidden": hidden,
            "heads": hidden // rng.choice([64, 128]),
            "ffn_hidden": 4 * hidden,
            "layers": pp * rng.choice([1, 2, 4]),
            "seq_len": rng.choice([1024, 2048]),
        },
        "cluster": {
            "topology": rng.choice(["dgx-a100", "dgx-a100-40gb", "pcie-a100"]),
            "num_gpus": tp * pp * dp,
        },
        "parallel": par,
        "precision": {"dtype": rng.choice(["fp16", "bf16"])},
        "kernels": kern,
    }


def _sim(data: dict[str, Any], overrides: dict[str, Any] | None = None) -> Any:
    return mfusim.simulate(mfusim.load_scenario(data, overrides=overrides))


CASES = [_scenario(random.Random(SEED * 1000 + i)) for i in range(60)]


@pytest.mark.parametrize("data", CASES, ids=[f"case{i}" for i in range(len(CASES))])
def test_deepspeed_step_invariants(data: dict[str, Any]) -> None:
    try:
        report = _sim(data)
    except ConfigError as err:  # e.g. tp not dividing the heads: refused, naming the key
        assert err.key
        return
    assert math.fsum(report.breakdown_s.values()) == pytest.approx(report.step_time_s, rel=1e-6)
    assert 0 < report.mfu <= report.hfu * (1 + 1e-12) <= 1
    # the closed form agrees with the engine (DS_PIPE_NOTE's mechanisms are in both)
    closed = estimate_step(mfusim.load_scenario(data))
    assert closed.step_time_s == pytest.approx(report.step_time_s, rel=1e-6)
    # twice the NIC bandwidth never slows the step
    faster = _sim(data, {"cluster.inter_node.nic_Gbps": 400})
    assert faster.step_time_s <= report.step_time_s * (1 + 1e-9)
    # twice the batch never lowers the throughput (bubble and DP reduce amortise)
    bigger = _sim(data, {"parallel.global_batch": 2 * data["parallel"]["global_batch"]})
    assert bigger.tokens_per_s >= report.tokens_per_s * (1 - 1e-9)
    # megatron-2021 on a 16-bit DP wire (DS_PIPE_NOTE: DeepSpeed's communication_data_type; the
    # 2021 stack's default fp32 wire can be slower, the one mechanism by which DS may win): the
    # engine's mechanisms only add or expose work
    m21 = {"kernels.stack": "megatron-2021"}
    if data["precision"]["dtype"] == "bf16":
        m21["kernels.grad_reduce_dtype"] = "bf16"
    assert _sim(data, m21).step_time_s <= report.step_time_s * (1 + 1e-9)


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_deepspeed_grad_reduce_dtype_sets_only_the_wire(dtype: str) -> None:
    """Under DeepSpeed `grad_reduce_dtype` is communication_data_type: the DP all-reduce's bytes.
    The optimizer's gradients (fp16 param.grad, BF16_Optimizer's fp32 hp_grad) and the tied-
    embedding sync keep their dtype (regression: "bf16" used to add the 16-bit-grad copy to the
    optimizer and halve the embedding sync and the gradient memory, "fp32" to drop fp16's copy)."""
    data = CASES[0] | {
        "model": {"preset": "gpt3-1.3b", "layers": 8},
        "cluster": {"topology": "dgx-a100", "num_gpus": 16},
        "parallel": {"tp": 2, "pp": 2, "micro_batch": 1, "global_batch": 16},
        "precision": {"dtype": dtype},
    }
    ref = _sim(data)
    base = ref.breakdown_s
    for wire in ("bf16", "fp32"):
        report = _sim(data, {"kernels.grad_reduce_dtype": wire})
        assert report.memory.parts_bytes == ref.memory.parts_bytes, wire  # nor their memory
        other = report.breakdown_s
        for category in ("compute", "optimizer", "pp_comm"):
            assert other[category] == pytest.approx(base[category], rel=1e-12), (wire, category)
        # the wire: 16 bits by default, twice the bytes in fp32
        assert (other["dp_comm"] > base["dp_comm"]) == (wire == "fp32")


GPUS = [("dgx-h100", ""), ("dgx-h800", ""), ("dgx-b200", ""), ("gb200-nvl72", ""), ("dgx-a100", "v100")]


@pytest.mark.parametrize(("topology", "gpu"), GPUS)
def test_deepspeed_is_refused_where_no_residuals_exist(topology: str, gpu: str) -> None:
    data = _scenario(random.Random(SEED))
    data["cluster"] = {"topology": topology, "num_gpus": data["cluster"]["num_gpus"]} | (
        {"gpu": gpu} if gpu else {}
    )
    data["precision"] = {"dtype": "fp16"}  # Volta has no bf16
    with pytest.raises(ConfigError) as err:
        _sim(data)
    assert err.value.key == "kernels.stack"


UNSET = [
    "parallel.dp", "parallel.tp", "parallel.pp", "parallel.global_batch", "parallel.zero",
    "parallel.sequence_parallel", "parallel", "kernels", "kernels.stack", "precision", "model.preset",
    "model", "cluster.num_gpus", "cluster.topology", "cluster", "cluster.inter_node", "run", "parallel.dpp",
    "kernels.stak", "nonsense", "model.moe", "model.moe.experts", "memory",
]  # fmt: skip
BAD = [
    {"parallel.zero": 2}, {"parallel.zero": 3}, {"parallel.vp": 2}, {"parallel.schedule": "gpipe"},
    {"parallel.overlap_grad_reduce": True}, {"parallel.overlap_param_gather": True},
    {"kernels.tp_comm_async": True}, {"cluster.topology": "dgx-h100"}, {"cluster.gpu": "v100"},
    {"precision.dtype": "fp8"},
]  # fmt: skip


@pytest.mark.parametrize("i", range(40))
def test_unset_and_refusals_never_trace_back(i: int) -> None:
    """Any mix of unsets and the stack's forbidden settings: a simulated step or a ConfigError
    naming a key, never another exception."""
    rng = random.Random(SEED * 7919 + i)
    data = _scenario(rng)
    overrides: dict[str, Any] = {k: None for k in rng.sample(UNSET, rng.choice([1, 2]))}
    overrides |= rng.choice(BAD) if rng.random() < 0.5 else {}
    try:
        report = _sim(data, overrides)
    except ConfigError as err:
        assert err.key
        return
    assert math.fsum(report.breakdown_s.values()) == pytest.approx(report.step_time_s, rel=1e-6)
    assert 0 < report.mfu <= report.hfu * (1 + 1e-12) <= 1


def _hook_bytes(data: dict[str, Any], schedule: str) -> float:
    from simulator.program import build_program

    program = build_program(mfusim.load_scenario(data, {"parallel.schedule": schedule}))
    return sum(
        seg.message_bytes
        for ch in program.stages[0].chunks
        for seg in ch.backward.segments
        if "ddp hook" in seg.name
    )


def test_v_schedule_keeps_the_tied_gradient_sum_on_the_stage_holding_both_ends() -> None:
    """MAIN_GRAD_HOOK_NOTE: a weight used twice on one stage has its two gradients summed first.
    At pp = 1 a V-shaped schedule (zb-v) puts the embedding and the output layer on the one stage
    in two chunks; the stage counts one shared matrix (`params`), so the sum stays (regression:
    it was charged only to a chunk that is both first and last, so zb-v ran up to 1.3% faster
    than 1F1B at pp = 1 on megatron-2021)."""
    data = {
        "model": {"preset": "gpt3-1.3b", "layers": 4},
        "cluster": {"topology": "dgx-a100", "num_gpus": 1},
        "parallel": {"global_batch": 1},
        "kernels": {"stack": "megatron-2021"},
    }
    assert mfusim.load_scenario(data).model.tied_embeddings
    assert _hook_bytes(data, "zb-v") == pytest.approx(_hook_bytes(data, "1f1b"), rel=1e-12)


@pytest.mark.parametrize("i", range(12))
def test_pp1_schedules_are_labelled_and_never_faster_than_1f1b(i: int) -> None:
    """At pp = 1 (specs.NO_PIPELINE_*): "interleaved" is 1F1B's step exactly, zero-bubble's vp = 1
    order only defers weight gradients (never faster), and the header says "no pipeline"."""
    from simulator.specs import schedule_label

    rng = random.Random(SEED * 31 + i)
    data = _scenario(rng)
    dp = data["cluster"]["num_gpus"] // (data["parallel"]["tp"] * data["parallel"]["pp"])
    data["parallel"] |= {"pp": 1, "global_batch": data["parallel"]["micro_batch"] * dp * 2}
    data["cluster"]["num_gpus"] = data["parallel"]["tp"] * dp
    data["kernels"] = {"stack": rng.choice(["megatron-2021", "megatron-core"])}
    if data["kernels"]["stack"] == "megatron-core":  # fitted on Hopper only
        data["cluster"]["topology"] = "dgx-h100"
    try:
        base = _sim(data)
    except ConfigError as err:
        assert err.key
        return
    same = _sim(data, {"parallel.schedule": "interleaved"})
    assert same.step_time_s == pytest.approx(base.step_time_s, rel=1e-12)
    assert any('"interleaved" changes nothing at pp = 1' in w for w in same.warnings)
    zb = _sim(data, {"parallel.schedule": "zb-h1"})
    assert zb.step_time_s >= base.step_time_s * (1 - 1e-12)
    assert any("no pipeline bubble to fill" in w for w in zb.warnings)
    assert schedule_label("interleaved", 1, 1) == schedule_label("1f1b", 1, 1) == "no pipeline"
    assert schedule_label("zb-h1", 1, 1) == "no pipeline (zb-h1 order)"


@pytest.mark.parametrize("key", ["", "parallel.tp=4", "parallel.", "a..b"])
def test_api_override_mapping_names_a_malformed_key_as_given(key: str) -> None:
    """overrides={key: value}: a key that is no dotted key is refused quoting the key itself
    (regression: the empty key was reported as "expected KEY=VALUE, got '=0'", text the caller
    never wrote, and "parallel.tp=4" passed the shape check)."""
    data = _scenario(random.Random(SEED))
    for value in (None, 2):
        with pytest.raises(ConfigError) as err:
            mfusim.load_scenario(data, overrides={key: value})
        assert err.value.key == "overrides"
        assert repr(key) in err.value.message and "=0" not in err.value.message
