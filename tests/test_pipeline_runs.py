"""Gradient accumulation as whole pipeline runs (`[parallel] local_batch`) and ZeRO-3's routed
experts sharded over their own group.

torch.distributed.pipelining (NeMo AutoModel, torchtitan) runs one `schedule.step()` per local
batch: the step is global_batch / (local_batch·dp) pipeline runs one after another, each filling
and draining the pipeline and reducing its gradients at its last backward (PipelineStage
backward_maybe_with_nosync / _post_backward), then one optimizer step. Megatron-Core runs every
micro-batch of the step in one schedule (local_batch = 0).

ZeRO-3 with experts: NeMo AutoModel's apply_fsdp shards each MoE block's experts over the
ep_shard mesh (dp / ep ranks, the expert-data-parallel group) and leaves them out of FSDP when
that mesh is one rank; the dense parameters shard over the whole dp group."""

from __future__ import annotations

import dataclasses

import pytest

from simulator.analytic import estimate_program
from simulator.engine import run_step
from simulator.errors import ConfigError
from simulator.flops import layer_params_per_rank
from simulator.loading import scenario_from_dict
from simulator.memory import param_gather_bytes_per_param
from simulator.program import build_program, expert_shard_axis, shard_axis
from simulator.specs import ParallelConfig
from tests.conftest import SMALL_MOE_MODEL

MODEL = {"name": "t", "layers": 16, "hidden": 4096, "heads": 32, "vocab": 32000, "seq_len": 2048}
MOE = SMALL_MOE_MODEL


def scn(model: dict | None = None, num_gpus: int = 256, **parallel: object):
    par = {"tp": 8, "pp": 4, "global_batch": 256, **parallel}
    return scenario_from_dict(
        {"model": model or MODEL, "cluster": {"topology": "dgx-h100", "num_gpus": num_gpus}, "parallel": par}
    )


# ----------------------------------------------------------------------------- pipeline runs
def test_runs_follow_the_closed_form_of_one_run() -> None:
    """dp = 8, global 256, local 8: 4 runs of 8 micro-batches. Each run is the one-run step of a
    global batch of local·dp = 64 without its optimizer tail: T = 4·(T₁ − O) + O."""
    runs = build_program(scn(local_batch=8))
    one = build_program(scn(global_batch=64, local_batch=8))
    assert (runs.num_microbatches, runs.pipeline_runs) == (8, 4)
    assert (one.num_microbatches, one.pipeline_runs) == (8, 1)
    assert runs.stages == one.stages  # the same costs per micro-batch
    top = max(st.optimizer_s for st in one.stages)
    assert top > 0
    t1 = run_step(one).step_time_s
    t4 = run_step(runs).step_time_s
    assert t4 == pytest.approx(4 * (t1 - top) + top, rel=1e-12)
    # the closed-form estimate repeats its run the same way
    a1, _ = estimate_program(one)
    a4, by_stage = estimate_program(runs)
    assert a4 == pytest.approx(4 * (a1 - top) + top, rel=1e-12)
    for cats in by_stage:
        assert sum(cats.values()) == pytest.approx(a4, rel=1e-12)


def test_runs_repeat_the_bubble_and_keep_one_optimizer_step() -> None:
    runs = run_step(build_program(scn(local_batch=8))).breakdown_by_stage_s()
    one = run_step(build_program(scn(global_batch=64, local_batch=8))).breakdown_by_stage_s()
    whole = run_step(build_program(scn(local_batch=32)))  # the same 32 micro-batches in one run
    for r, o, w in zip(runs, one, whole.breakdown_by_stage_s(), strict=True):
        assert r["optimizer"] == pytest.approx(o["optimizer"], rel=1e-12)  # once per step
        assert r["compute"] == pytest.approx(4 * o["compute"], rel=1e-12)
        assert r["compute"] == pytest.approx(w["compute"], rel=1e-9)  # the same work as one run
        assert r["bubble"] > 3 * o["bubble"]  # each run fills and drains the pipeline
        assert r["bubble"] > w["bubble"]
    t = run_step(build_program(scn(local_batch=8))).step_time_s
    for stage in runs:
        assert sum(stage.values()) == pytest.approx(t, rel=1e-12)


def test_more_runs_per_step_are_slower() -> None:
    """Same global batch, smaller local batches: more fills and drains."""
    times = [run_step(build_program(scn(local_batch=lb))).step_time_s for lb in (32, 16, 8, 4)]
    assert times == sorted(times)
    assert times[0] < times[-1]


def test_each_chunk_waits_for_its_reduction_before_sending_on() -> None:
    """torch.distributed.pipelining, one run (local_batch = global_batch / dp), 1F1B, ZeRO-3
    without resharding: a chunk's last backward reduce-scatters its gradients and the compute
    stream, with the send of that backward's input gradient queued on it, waits for them. The
    last micro-batch's backward passes stage p-1 ... 0, each holding it for its own
    reduce-scatter RS_s; stage 0 then waits for RS_0. Megatron's schedule with the reduction
    after the backward (overlap_grad_reduce = false) holds only stage 0's own:
        T_torch − T_megatron = RS_1 + … + RS_{p−1}."""
    kw = {"zero": 3, "reshard_after_forward": False}
    torch_pp = build_program(scn(local_batch=32, **kw))
    megatron = build_program(scn(overlap_grad_reduce=False, **kw))
    assert torch_pp.pipeline_runs == 1 and torch_pp.grad_reduce_waits and not megatron.grad_reduce_waits
    rs = [sum(sum(c.grad_bucket_s) for c in st.chunks) for st in torch_pp.stages]
    assert min(rs) > 0
    gap = run_step(torch_pp).step_time_s - run_step(megatron).step_time_s
    assert gap == pytest.approx(sum(rs[1:]), rel=1e-9)
    # the closed form charges the whole chain
    a_torch, _ = estimate_program(torch_pp)
    a_meg, _ = estimate_program(megatron)
    assert a_torch > a_meg


def test_spans_repeat_each_run() -> None:
    """The traced step (spans) equals the summed one and numbers every run's micro-batches."""
    prog = build_program(scn(local_batch=8))
    traced = run_step(prog, detail=True)
    summed = run_step(prog)
    assert traced.step_time_s == pytest.approx(summed.step_time_s, rel=1e-12)
    for a, b in zip(traced.breakdown_by_stage_s(), summed.breakdown_by_stage_s(), strict=True):
        for k in a:
            assert a[k] == pytest.approx(b[k], rel=1e-9, abs=1e-12)
    mbs = {s.microbatch for s in traced.spans if s.microbatch >= 0}
    assert mbs == set(range(32))
    assert max(s.end_s for s in traced.spans) <= traced.step_time_s * (1 + 1e-12)


def test_zero3_without_resharding_gathers_and_reduces_once_per_run() -> None:
    """FSDP2 under torch.distributed.pipelining (reshard_after_forward = false): the parameters
    are gathered and the gradients reduce-scattered in every run -- the per-run collectives
    are the one-run step's, four times."""
    kw = {"zero": 3, "reshard_after_forward": False}
    runs = run_step(build_program(scn(local_batch=8, **kw))).breakdown_by_stage_s()
    one = run_step(build_program(scn(global_batch=64, local_batch=8, **kw))).breakdown_by_stage_s()
    for r, o in zip(runs, one, strict=True):
        assert o["dp_comm"] > 0
        assert r["dp_comm"] == pytest.approx(4 * o["dp_comm"], rel=1e-12)


@pytest.mark.parametrize(
    ("parallel", "key"),
    [
        ({"pp": 1, "local_batch": 8}, "parallel.local_batch"),  # no pipeline to run
        ({"micro_batch": 2, "local_batch": 3}, "parallel.local_batch"),  # not whole micro-batches
        ({"local_batch": 12}, "parallel.local_batch"),  # 256 is no multiple of 12·8
        ({"zero": 1, "local_batch": 8}, "parallel.local_batch"),  # Megatron's optimizer: one run
        ({"vp": 2, "local_batch": 2}, "parallel.local_batch"),  # interleaving: pp | run's micro-batches
        ({"local_batch": -1}, "parallel.local_batch"),
        ({"local_batch": 8, "overlap_grad_reduce": False}, "parallel.overlap_grad_reduce"),
        (
            {"local_batch": 8, "zero": 3, "reshard_after_forward": False, "overlap_param_gather": False},
            "parallel.overlap_param_gather",
        ),
    ],
)
def test_refused(parallel: dict, key: str) -> None:
    with pytest.raises(ConfigError) as e:
        scn(**parallel)
    assert e.value.key == key


def test_repeated_runs_need_a_deterministic_step() -> None:
    s = scn(local_batch=8)
    with pytest.raises(ConfigError) as e:
        dataclasses.replace(s, variability=dataclasses.replace(s.variability, compute_jitter=0.05))
    assert e.value.key == "parallel.local_batch"


# ----------------------------------------------------------------------------- ZeRO-3 experts
def test_expert_shard_axis() -> None:
    base = {"tp": 1, "pp": 1, "cp": 1, "micro_batch": 1, "zero": 3}
    assert expert_shard_axis(ParallelConfig(dp=64, ep=64, global_batch=64, **base)) is None
    assert expert_shard_axis(ParallelConfig(dp=256, ep=64, global_batch=256, **base)) == "edp"
    assert expert_shard_axis(ParallelConfig(dp=64, ep=1, global_batch=64, **base)) == "dp"
    hsdp = ParallelConfig(dp=64, ep=8, dp_shard=16, global_batch=64, **base)
    assert expert_shard_axis(hsdp) == shard_axis(hsdp) == "dp_shard"


def moe_scn(ep: int, num_gpus: int = 64):
    return scn(MOE, num_gpus, tp=1, pp=1, ep=ep, micro_batch=1, global_batch=num_gpus, zero=3)


def test_zero3_gathers_experts_over_their_own_group_only() -> None:
    """dp = 64: with ep = 64 every rank holds its own experts (nothing to gather); with ep = 16
    each expert is on 4 ranks and gathers over that expert-data-parallel group. The dense
    parameters gather over dp in both, their message the layer's dense parameters exactly."""
    for ep, edp in ((64, 1), (16, 4)):
        s = moe_scn(ep)
        lp = layer_params_per_rank(s.model, s.parallel, True)
        per = param_gather_bytes_per_param(s.dtype)
        prog = build_program(s)
        gathers = {c["group"]: c["message_bytes"] for c in prog.collectives if c["kind"] == "allgather"}
        assert gathers["dp"] == pytest.approx((lp.total - lp.expert) * per, rel=1e-12)
        if edp == 1:
            assert "edp" not in gathers
        else:
            assert gathers["edp"] == pytest.approx(lp.expert * per, rel=1e-12)


@pytest.mark.parametrize("zero", [0, 3])
def test_quiet_loop_and_simpy_replay_agree_on_the_waits(zero: int) -> None:
    """The waiting reduction runs the same in the engine's three paths: the tight quiet loop,
    StageProcess under a local clock (bit for bit), and simpy time."""
    from simulator.engine.noise import Noise
    from simulator.engine.recorder import SumRecorder
    from simulator.engine.replay import replay_local, replay_simpy
    from simulator.specs import VariabilitySpec

    kw = {"zero": zero} | ({"reshard_after_forward": False} if zero == 3 else {})
    program = build_program(scn(local_batch=16, vp=2, **kw))
    quiet = Noise.for_spec(VariabilitySpec(), 1, 1)
    tight = replay_local(program, quiet, SumRecorder(program.pp)).timeline
    general = replay_local(program, quiet, SumRecorder(program.pp), tight=False).timeline
    assert tight.step_time_s == general.step_time_s
    assert tight.breakdown_by_stage_s() == general.breakdown_by_stage_s()
    simpy = replay_simpy(program, quiet, SumRecorder(program.pp), None).timeline
    assert simpy.step_time_s == pytest.approx(tight.step_time_s, rel=1e-12)
    assert any(st["dp_comm"] > 0 for st in tight.breakdown_by_stage_s())


@pytest.mark.parametrize("reshard", [True, False])
def test_unshared_experts_take_no_gather_buffers(reshard: bool) -> None:
    """ZeRO-3 memory: experts no other rank holds (ep = dp) are never gathered, so their size
    does not change the gather buffers (prefetched layers, or without resharding the stage's
    gathered weights and gradient accumulators); experts shared by 4 ranks (ep = dp/4) are."""
    from simulator.memory import memory_footprint

    def buffers(ep: int, expert_ffn: int) -> float:
        model = {**MOE, "moe": {**MOE["moe"], "expert_ffn_hidden": expert_ffn}}
        s = scn(model, 64, tp=1, pp=1, ep=ep, micro_batch=1, global_batch=64, zero=3)
        s = dataclasses.replace(s, parallel=dataclasses.replace(s.parallel, reshard_after_forward=reshard))
        return memory_footprint(s).parts_bytes["buffers"]

    assert buffers(64, 4096) == buffers(64, 2048)
    assert buffers(16, 4096) > buffers(16, 2048)


@pytest.mark.parametrize("reshard", [True, False])
def test_expert_grad_reduce_dtype_halves_only_the_experts_reduce_scatter(reshard: bool) -> None:
    """`[kernels] expert_grad_reduce_dtype = "bf16"` (AutoModel's experts: fully_shard without a
    mixed-precision policy): the experts' reduce-scatter carries 2 bytes per element, the dense
    parameters' stays fp32 (4 bytes)."""
    base = moe_scn(16)
    lp = layer_params_per_rank(base.model, base.parallel, True)

    def rs_bytes(expert_dtype: str) -> dict[str, list[float]]:
        s = dataclasses.replace(
            base,
            parallel=dataclasses.replace(base.parallel, reshard_after_forward=reshard),
            kernels=dataclasses.replace(base.kernels, expert_grad_reduce_dtype=expert_dtype),
        )
        out: dict[str, list[float]] = {}
        for c in build_program(s).collectives:
            if c["kind"] == "reducescatter":
                out.setdefault(c["group"], []).append(c["message_bytes"])
        return out

    fp32, bf16 = rs_bytes(""), rs_bytes("bf16")
    assert sum(bf16["edp"]) == pytest.approx(sum(fp32["edp"]) / 2, rel=1e-12)
    assert sorted(bf16["dp"]) == pytest.approx(sorted(fp32["dp"]), rel=1e-12)
    if reshard:  # a layer's messages: exactly its parameters
        assert fp32["edp"] == pytest.approx([4 * lp.expert], rel=1e-12)
        dense = 4 * (lp.total - lp.expert)
        assert any(abs(m - dense) <= 1e-9 * dense for m in fp32["dp"])


@pytest.mark.parametrize(("local_batch", "m_run"), [(8, 8), (32, 32)])
def test_fsdp_accumulates_unsharded_gradients_each_micro_batch(local_batch: int, m_run: int) -> None:
    """FSDP2 without resharding, gradient sync off until a run's last backward: the first
    micro-batch casts each 16-bit gradient to the fp32 accumulator (2 + 4 bytes per element),
    every later one adds into it (2 + 4 + 4): per micro-batch the mean, 6 + 4·(m−1)/m bytes per
    parameter of the layer, in every backward; nothing of the kind with resharding (the
    gradients are reduce-scattered each micro-batch)."""
    s = scn(zero=3, reshard_after_forward=False, local_batch=local_batch)
    ch = build_program(s).stages[1].chunks[0]
    acc = [g for g in ch.backward.segments if g.name == "fsdp grad accumulate"]
    n = layer_params_per_rank(s.model, s.parallel, False).total
    assert sum(g.message_bytes for g in acc) == pytest.approx(
        ch.num_layers * n * (6 + 4 * (m_run - 1) / m_run), rel=1e-12
    )
    resharded = build_program(scn(zero=3)).stages[1].chunks[0]
    assert not [g for g in resharded.backward.segments if g.name == "fsdp grad accumulate"]
