"""Stack "megatron-deepspeed": DeepSpeed's pipeline engine around Megatron-LM's 2021-22 kernels
(simulator/program.py DS_PIPE_NOTE). Nothing of it is fitted: the system residuals are
megatron-2021's (stacks.RESIDUALS_OF) and each mechanism is a closed form from the DeepSpeed source,
checked here against the program and the engine."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from simulator.analytic import estimate_step
from simulator.errors import ConfigError
from simulator.loading import scenario_from_dict
from simulator.memory import WEIGHT_BYTES
from simulator.program import (
    DS_ALLREDUCE_BUCKET_PARAMS,
    DS_BF16_HP_GRAD_BYTES_PER_PARAM,
    Program,
    build_program,
)
from simulator.simulate import simulate
from simulator.stacks import stack_efficiency

DS = "megatron-deepspeed"


def _scn(stack: str = DS, dtype: str = "bf16", **parallel: Any) -> Any:
    par = {"tp": 2, "pp": 2, "micro_batch": 1, "global_batch": 16, "recompute": "full"} | parallel
    data: dict[str, Any] = {
        "model": {"preset": "gpt3-1.3b", "layers": 8},
        "cluster": {"topology": "dgx-a100", "num_gpus": 16},
        "parallel": par,
        "precision": {"dtype": dtype},
        "kernels": {"attention": "unfused"} | ({"stack": stack} if stack else {}),
    }
    return scenario_from_dict(data)


def _segments(program: Program, stage: int, block: str, category: str) -> list[Any]:
    blk = getattr(program.stages[stage].chunks[0], block)
    return [s for s in blk.segments if s.category == category]


@pytest.mark.parametrize("name", ["deepspeed", "megatron-ds", "deepspeed-pipe"])
def test_unknown_stack_is_refused_naming_the_key(name: str) -> None:
    with pytest.raises(ConfigError) as err:
        _scn(stack=name)
    assert err.value.key == "kernels.stack"


@pytest.mark.parametrize(
    "parallel",
    [{"zero": 2}, {"zero": 3}, {"vp": 2, "pp": 2}, {"schedule": "gpipe"}],
    ids=["zero2", "zero3", "interleaved", "gpipe"],
)
def test_what_the_pipeline_engine_cannot_run_is_refused(parallel: dict[str, Any]) -> None:
    """pipe/engine.py asserts ZeRO < 2; TrainSchedule is the engine's only training schedule."""
    with pytest.raises(ConfigError) as err:
        _scn(**parallel)
    assert err.value.key == "kernels.stack"


def test_residuals_are_megatron_2021s_and_refused_where_it_has_no_fit() -> None:
    """A default for a stack without calibration runs: megatron-2021's fitted Ampere table,
    field for field (the precision recipe's fp4 fraction stays the GPU's); no Hopper fit exists."""
    eff = _scn().gpu.efficiency
    ref = stack_efficiency("megatron-2021", "ampere")
    assert ref is not None and ref.kernel_launch_s > 0  # megatron-2021 has a fitted Ampere table
    assert eff == replace(ref, fp4_matmul_fraction=eff.fp4_matmul_fraction)
    assert stack_efficiency(DS, "ampere") == ref
    with pytest.raises(ConfigError) as err:
        scenario_from_dict(
            {
                "model": {"preset": "gpt3-1.3b", "layers": 8},
                "cluster": {"topology": "dgx-h100", "num_gpus": 16},
                "parallel": {"tp": 2, "pp": 2, "global_batch": 16},
                "kernels": {"stack": DS},
            }
        )
    assert err.value.key == "kernels.stack"


def test_grad_reduce_after_the_last_backward_adds_exactly_its_collective_time() -> None:
    """ReduceGrads runs after the last backward (enable_backward_allreduce = False): the engine's
    dp_comm is the whole chain of all-reduce buckets, serial, each at most 5e8 elements, 16-bit on
    the wire (communication_data_type); the closed form agrees with the engine."""
    scn = _scn(tp=8, pp=1)  # 16 GPUs: dp 2 across two nodes
    program = build_program(scn)
    assert not program.overlap_grad_reduce
    ch = program.stages[0].chunks[0]
    assert ch.grad_bucket_s and all(b <= 2 * DS_ALLREDUCE_BUCKET_PARAMS for b in ch.grad_bucket_bytes)
    assert sum(ch.grad_bucket_bytes) == pytest.approx(2 * ch.params_local, rel=1e-12)
    report = simulate(scn).report
    assert report.breakdown_s["dp_comm"] == pytest.approx(sum(ch.grad_bucket_s), rel=1e-9)
    # the same scenario with Megatron's overlap hides part of it: the DS step is longer by what
    # the overlap hid, never by more than the whole chain
    m21 = simulate(_scn(stack="megatron-2021", tp=8, pp=1)).report
    assert report.breakdown_s["dp_comm"] >= m21.breakdown_s["dp_comm"]
    closed = estimate_step(scn)
    assert closed.step_time_s == pytest.approx(report.step_time_s, rel=1e-9)


def test_bf16_zero1_all_reduces_and_fp16_zero1_reduce_scatters() -> None:
    """bf16: _bf16_reduce_grads all-reduces the whole gradient beside the BF16_Optimizer's
    sharded master; fp16 ZeRO-1 reduces each rank's partition. Both gather 16-bit parameters in
    the optimizer step, not under the next forward."""
    bf16 = build_program(_scn(tp=8, pp=1, zero=1))
    fp16 = build_program(_scn(tp=8, pp=1, zero=1, dtype="fp16"))
    assert not bf16.overlap_param_gather and not fp16.overlap_param_gather
    b, f = bf16.stages[0].chunks[0], fp16.stages[0].chunks[0]
    assert b.grad_bucket_bytes == f.grad_bucket_bytes  # 16 bits on the wire either way
    # an all-reduce moves twice a reduce-scatter's bytes per rank (ring: 2(n-1)/n vs (n-1)/n)
    assert sum(b.grad_bucket_s) > 1.5 * sum(f.grad_bucket_s)
    assert b.param_gather_s and b.param_gather_s == f.param_gather_s


def test_blocking_p2p_is_serialised_with_the_sending_block() -> None:
    """p2p.send/recv are blocking: the transfer is a pp_comm segment of the sending block (no
    asynchronous post), of the same duration as the asynchronous hop of megatron-2021; with tp > 1
    the receiver all-gathers the 1/tp partitions (PartitionedTensor.full) before its block."""
    ds, m21 = build_program(_scn()), build_program(_scn(stack="megatron-2021"))
    hop = m21.stages[0].p2p_s
    assert hop > 0 and all(st.p2p_s == 0.0 for st in ds.stages)
    (send_f,) = _segments(ds, 0, "forward", "pp_comm")
    assert send_f.duration_s == pytest.approx(hop, rel=1e-12)
    assert send_f.message_bytes == m21.stages[0].p2p_bytes
    gather_f, *_ = _segments(ds, 1, "forward", "pp_comm")
    assert gather_f.message_bytes == pytest.approx(2 * m21.stages[0].p2p_bytes, rel=1e-12)  # tp = 2
    assert gather_f.duration_s > 0
    # the forward blocks differ by exactly those segments (fp16: both stacks accumulate the same
    # 6 bytes per parameter, so the stages' power-limited clocks are the same too)
    ds16, m16 = build_program(_scn(dtype="fp16")), build_program(_scn(stack="megatron-2021", dtype="fp16"))
    for s in (0, 1):
        extra = sum(x.duration_s for x in _segments(ds16, s, "forward", "pp_comm"))
        fd = ds16.stages[s].chunks[0].forward.duration_s - m16.stages[s].chunks[0].forward.duration_s
        assert extra > 0 and fd == pytest.approx(extra, rel=1e-9)
    # backward: stage 1 sends the input gradient, stage 0 gathers it
    assert [x.name for x in _segments(ds, 1, "backward", "pp_comm")][-1].startswith("blocking send")
    assert _segments(ds, 0, "backward", "pp_comm")[0].name.startswith("gradient all-gather")
    report, closed = simulate(_scn()).report, estimate_step(_scn())
    assert closed.step_time_s == pytest.approx(report.step_time_s, rel=1e-9)
    for category, seconds in report.breakdown_s.items():
        assert closed.breakdown_s[category] == pytest.approx(seconds, rel=1e-9, abs=1e-12), category


@pytest.mark.parametrize(
    ("dtype", "per_param"), [("bf16", DS_BF16_HP_GRAD_BYTES_PER_PARAM), ("fp16", 3 * WEIGHT_BYTES)]
)
def test_gradient_accumulation_bytes(dtype: str, per_param: float) -> None:
    """bf16: BF16_Optimizer.update_hp_grads casts and adds every gradient into fp32 (2 + 4 + 3 x 4
    bytes); fp16: autograd accumulates into the 16-bit param.grad (2 + 2 + 2)."""
    program = build_program(_scn(dtype=dtype))
    ch = program.stages[0].chunks[0]  # the first of two stages: no output layer to sum twice
    (acc,) = [s for s in ch.backward.segments if "accumulate" in s.name]
    assert per_param == (18 if dtype == "bf16" else 6)
    assert acc.message_bytes == pytest.approx(per_param * ch.params_local, rel=1e-12)


def test_default_and_other_stacks_have_none_of_it() -> None:
    """Outside the stack nothing changes: asynchronous hops, the parallel config's overlap flags,
    no blocking-send or partition-gather segments."""
    for stack in ("", "megatron-2021", "composer-fsdp"):
        program = build_program(_scn(stack=stack))
        assert program.overlap_grad_reduce and program.overlap_param_gather
        assert all(st.p2p_s > 0 for st in program.stages)
        for st in program.stages:
            for blk in (st.chunks[0].forward, st.chunks[0].backward):
                assert not [s for s in blk.segments if s.category == "pp_comm"]


def test_tp_all_reduces_are_synchronous_as_in_the_2021_layers() -> None:
    """Megatron-DeepSpeed's ColumnParallelLinear is the 2021 one (no asynchronous input-gradient
    all-reduce): its backward TP time is megatron-2021's with tp_comm_async = false, whatever the
    key says, and more than with the asynchronous all-reduce hidden beside the wgrad GEMM."""

    def tp_bwd(program: Program) -> float:
        return sum(st.chunks[0].backward.seconds("tp_comm") for st in program.stages)

    ds = build_program(_scn(dtype="fp16"))
    sync = scenario_from_dict(
        {
            "model": {"preset": "gpt3-1.3b", "layers": 8},
            "cluster": {"topology": "dgx-a100", "num_gpus": 16},
            "parallel": {"tp": 2, "pp": 2, "micro_batch": 1, "global_batch": 16, "recompute": "full"},
            "precision": {"dtype": "fp16"},
            "kernels": {"attention": "unfused", "stack": "megatron-2021", "tp_comm_async": False},
        }
    )
    assert tp_bwd(ds) == pytest.approx(tp_bwd(build_program(sync)), rel=1e-12)
    assert tp_bwd(ds) > tp_bwd(build_program(_scn(stack="megatron-2021", dtype="fp16")))


@pytest.mark.parametrize(
    ("table", "key"),
    [("parallel", "overlap_grad_reduce"), ("parallel", "overlap_param_gather"), ("kernels", "tp_comm_async")],
)
def test_an_explicit_overlap_the_engine_does_not_have_is_refused(table: str, key: str) -> None:
    """Exact or refused: asking for an overlap DeepSpeed's engine (or its 2021 layers) does not do
    is an error naming the key; setting it false is what the stack runs anyway."""
    data: dict[str, Any] = {
        "model": {"preset": "gpt3-1.3b", "layers": 8},
        "cluster": {"topology": "dgx-a100", "num_gpus": 16},
        "parallel": {"tp": 2, "pp": 2, "global_batch": 16},
        "kernels": {"attention": "unfused", "stack": DS},
    }
    data[table] = {**data[table], key: True}
    with pytest.raises(ConfigError) as err:
        scenario_from_dict(data)
    assert err.value.key == f"{table}.{key}"
    data[table][key] = False
    off = build_program(scenario_from_dict(data))
    assert not off.overlap_grad_reduce and not off.overlap_param_gather


def test_run_json_names_the_mechanisms(run_cli: Any, write_file: Any) -> None:
    """`run --json` reports what the stack ran: synchronous TP, 16-bit wire, blocking p2p time."""
    import json

    path = write_file(
        'name = "ds"\n[model]\npreset = "gpt3-1.3b"\nlayers = 8\n[cluster]\ntopology = "dgx-a100"\n'
        'num_gpus = 16\n[parallel]\ntp = 2\npp = 2\nglobal_batch = 16\n[kernels]\nattention = "unfused"\n'
        f'stack = "{DS}"\n',
        "ds.toml",
    )
    result = run_cli(["run", str(path), "--json"])
    assert result.code == 0, result.err
    out = json.loads(result.out)
    assert out["kernels"]["stack"] == DS
    assert out["kernels"]["tp_comm_async"] is False
    assert out["kernels"]["grad_reduce_dtype"] == "bf16"
    assert out["breakdown_s"]["pp_comm"] > 0


@pytest.mark.parametrize(
    ("parallel", "key"),
    [
        ({"tp_comm_overlap": True, "sequence_parallel": True}, "parallel.tp_comm_overlap"),
        ({"cp": 2}, "parallel.cp"),
    ],
)
def test_inputs_the_2022_stack_did_not_have_are_refused(parallel: dict, key: str) -> None:
    """TP communication overlap and context parallelism did not exist in Megatron-DeepSpeed
    2021-22: refused naming the key, not run as if they did (or silently without them)."""
    with pytest.raises(ConfigError) as err:
        _scn(**parallel)
    assert err.value.key == key
