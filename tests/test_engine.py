"""The step simulator: closed forms, invariants and monotonicity (issue 3).

Physics, not smoke: the pipeline bubble against (p−1)/m and (p−1)/(v·m), the breakdown
against the step time, MFU ≤ HFU ≤ 1, HFU/MFU for full recompute, and what must never
get slower when the hardware gets faster.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from simulator.engine import run_step
from simulator.loading import load_scenario, scenario_from_dict
from simulator.program import Block, ChunkProgram, Program, Segment, StageProgram
from simulator.schedules import stage_tasks
from simulator.simulate import simulate
from simulator.timeline import CATEGORIES

SCENARIOS = sorted((Path(__file__).resolve().parent.parent / "scenarios").glob("*.toml"))


# ----------------------------------------------------------------------------- synthetic pipelines
def synthetic_program(pp: int, vp: int, m: int, schedule: str, tf: float = 1.0, tb: float = 2.0) -> Program:
    """Equal stages, no communication, no data stall: the closed forms must hold exactly."""
    chunk_f, chunk_b = tf / vp, tb / vp
    return uniform_program(schedule, pp, vp, m, chunk_f, chunk_b, chunk_b / 2, chunk_b / 2)


def uniform_program(
    schedule: str,
    pp: int,
    chunks: int,
    m: int,
    forward_s: float,
    backward_s: float,
    backward_input_s: float,
    backward_weight_s: float,
    hop_s: float = 0.0,
) -> Program:
    """`pp` equal stages of `chunks` one-layer chunks with these pass durations, transfers of
    `hop_s`, no other communication, no optimizer, no data stall."""

    def block(name: str, d: float) -> Block:
        return Block((Segment("compute", name, d),))

    stages = tuple(
        StageProgram(
            stage=s,
            chunks=tuple(
                ChunkProgram(
                    stage=s,
                    chunk=c,
                    num_layers=1,
                    forward=block("f", forward_s),
                    backward=block("b", backward_s),
                    backward_input=block("bi", backward_input_s),
                    backward_weight=block("bw", backward_weight_s),
                    grad_bucket_s=(),
                    param_gather_s=(),
                    params_local=0.0,
                )
                for c in range(chunks)
            ),
            optimizer_s=0.0,
            p2p_s=hop_s,
        )
        for s in range(pp)
    )
    return Program(
        stages=stages,
        num_microbatches=m,
        pp=pp,
        vp=chunks,
        schedule=schedule,
        zero=0,
        overlap_grad_reduce=True,
        overlap_param_gather=True,
        dataloader_latency_s=0.0,
        dataloader_workers=1,
        dataloader_prefetch=1,
    )


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize("pp,m", [(2, 4), (4, 8), (4, 16), (8, 8), (8, 32), (3, 7)])
def test_bubble_equals_closed_form(schedule: str, pp: int, m: int) -> None:
    tf, tb = 1.0, 2.0
    tl = run_step(synthetic_program(pp, 1, m, schedule, tf, tb))
    ideal = m * (tf + tb)
    assert tl.step_time_s == pytest.approx(ideal * (1 + (pp - 1) / m), rel=1e-12)
    for stage in tl.breakdown_by_stage_s():
        assert stage["bubble"] / ideal == pytest.approx((pp - 1) / m, rel=1e-9)


@pytest.mark.parametrize("pp,vp,m", [(2, 2, 4), (4, 2, 8), (4, 3, 8), (4, 4, 16), (8, 2, 16)])
def test_interleaved_bubble_equals_closed_form(pp: int, vp: int, m: int) -> None:
    tf, tb = 1.0, 2.0  # per micro-batch over all of a stage's chunks
    tl = run_step(synthetic_program(pp, vp, m, "interleaved", tf, tb))
    ideal = m * (tf + tb)
    for stage in tl.breakdown_by_stage_s():
        assert stage["bubble"] / ideal == pytest.approx((pp - 1) / (vp * m), rel=1e-9)


def test_no_pipeline_no_bubble() -> None:
    tl = run_step(synthetic_program(1, 1, 8, "1f1b"))
    assert tl.breakdown_by_stage_s()[0]["bubble"] == 0.0
    assert tl.step_time_s == pytest.approx(8 * 3.0)


def test_zero_bubble_beats_1f1b() -> None:
    """ZB-H1 fills the cool-down with deferred weight-gradient work."""
    one = run_step(synthetic_program(4, 1, 8, "1f1b")).step_time_s
    zb = run_step(synthetic_program(4, 1, 8, "zb-h1")).step_time_s
    assert zb < one


@pytest.mark.parametrize("schedule,vp", [("gpipe", 1), ("1f1b", 1), ("interleaved", 2), ("zb-h1", 1)])
def test_schedules_run_each_task_once(schedule: str, vp: int) -> None:
    pp, m = 4, 8
    for s in range(pp):
        tasks = stage_tasks(schedule, pp, vp, m, s)
        fwd = sorted((t.microbatch, t.chunk) for t in tasks if t.phase == "F")
        bwd = sorted((t.microbatch, t.chunk) for t in tasks if t.phase == "B")
        expected = sorted((i, c) for i in range(m) for c in range(vp))
        assert fwd == expected and bwd == expected
        # a backward never precedes its own forward on the same stage
        seen = set()
        for t in tasks:
            if t.phase == "F":
                seen.add((t.microbatch, t.chunk))
            else:
                assert (t.microbatch, t.chunk) in seen


# ----------------------------------------------------------------------------- shipped scenarios
@pytest.fixture(scope="module")
def shipped_reports():
    return {p.stem: simulate(load_scenario(p)).report for p in SCENARIOS}


def test_scenarios_shipped() -> None:
    names = {p.stem for p in SCENARIOS}
    for required in (
        "gpt3-175b-1024-a100",
        "seed-7b-64-a100",
        "llama3-70b-512-h100",
        "llama3-405b-16k-h100",
        "teaching-pp4",
    ):
        assert required in names


def test_breakdown_sums_to_step_time(shipped_reports) -> None:
    for name, r in shipped_reports.items():
        total = sum(r.breakdown_s.values())
        assert total == pytest.approx(r.step_time_s, rel=1e-6), name
        for stage in r.breakdown_by_stage_s:
            assert sum(stage.values()) == pytest.approx(r.step_time_s, rel=1e-6), name
            assert all(v >= 0 for v in stage.values())
        assert set(r.breakdown_s) == set(CATEGORIES)


def test_utilization_bounds(shipped_reports) -> None:
    for name, r in shipped_reports.items():
        assert 0 < r.mfu <= r.hfu <= 1, name
        assert r.tokens_per_s * r.step_time_s == pytest.approx(r.tokens_per_step, rel=1e-12)


def small(**parallel) -> dict:
    base = {
        "name": "small",
        "model": {"preset": "gpt3-1.3b"},
        "cluster": {"topology": "dgx-a100", "num_gpus": 16},
        "parallel": {"tp": 2, "pp": 2, "micro_batch": 1, "global_batch": 32, "sequence_parallel": True},
    }
    base["parallel"].update(parallel)
    return base


def run(d: dict):
    return simulate(scenario_from_dict(d)).report


def test_recompute_none_hfu_equals_mfu() -> None:
    r = run(small(recompute="none"))
    assert r.hfu == r.mfu


def test_full_recompute_hfu_over_mfu() -> None:
    """8Ψ/6Ψ = 4/3, less the logit layer (not recomputed)."""
    r = run(small(recompute="full"))
    scn = scenario_from_dict(small())
    m = scn.model
    logit_share = (2 * m.hidden * m.vocab) / (r.model_flops_per_step / (32 * m.seq_len) / 3)
    expected = 1 + (1 - logit_share) / 3
    assert r.hfu / r.mfu == pytest.approx(expected, rel=1e-9)
    assert 1.25 < r.hfu / r.mfu < 4 / 3


def test_selective_recompute_between() -> None:
    none, sel, full = (run(small(recompute=x)) for x in ("none", "selective", "full"))
    assert none.step_time_s <= sel.step_time_s <= full.step_time_s
    assert none.hfu / none.mfu < sel.hfu / sel.mfu < full.hfu / full.mfu


# ----------------------------------------------------------------------------- monotonicity
def scaled(d: dict, **topo) -> dict:
    d = json.loads(json.dumps(d))
    d["cluster"].update(topo)
    return d


@pytest.mark.parametrize("parallel", [{"tp": 2, "pp": 2}, {"tp": 8, "pp": 1}, {"tp": 1, "pp": 4, "zero": 1}])
def test_more_bandwidth_never_slower(parallel) -> None:
    base = small(**parallel)
    t0 = run(base).step_time_s
    faster_nic = run(scaled(base, inter_node={"nic_Gbps": 400})).step_time_s
    faster_nvl = run(scaled(base, intra_node={"link_GBps_per_direction": 600})).step_time_s
    assert faster_nic <= t0 * (1 + 1e-12)
    assert faster_nvl <= t0 * (1 + 1e-12)


def test_faster_gpu_never_slower() -> None:
    scn = scenario_from_dict(small())
    t0 = simulate(scn).report.step_time_s
    gpu = scn.gpu
    fast = replace(
        gpu,
        peak_bf16_flop_per_s=gpu.peak_bf16_flop_per_s * 2,
        hbm_bandwidth_bytes_per_s=gpu.hbm_bandwidth_bytes_per_s * 2,
    )
    scn2 = replace(scn, topology=replace(scn.topology, gpu=fast))
    assert simulate(scn2).report.step_time_s < t0


@pytest.mark.parametrize("gb", [16, 32, 64, 128])
def test_more_microbatches_never_lower_mfu(gb: int) -> None:
    a = run(small(pp=4, tp=1, global_batch=gb))
    b = run(small(pp=4, tp=1, global_batch=2 * gb))
    assert b.mfu >= a.mfu


@pytest.mark.parametrize("key", ["overlap_grad_reduce", "overlap_param_gather", "tp_comm_overlap"])
def test_overlap_never_slower(key: str) -> None:
    for zero in (0, 1):
        on = run(small(**{key: True, "zero": zero}))
        off = run(small(**{key: False, "zero": zero}))
        assert on.step_time_s <= off.step_time_s * (1 + 1e-12)


# ----------------------------------------------------------------------------- data, seeds, scale
def test_slow_dataloader_shows_up() -> None:
    fast = small(pp=1, tp=1)
    fast["cluster"]["num_gpus"] = 16
    r_fast = run(fast)
    assert r_fast.breakdown_s["dataloader"] == 0.0
    per_mb = r_fast.breakdown_s["compute"] / 2  # 2 micro-batches per replica
    slow = json.loads(json.dumps(fast))
    slow["dataloader"] = {"microbatch_latency_ms": per_mb * 10 * 1e3, "workers": 1, "prefetch": 1}
    r_slow = run(slow)
    assert r_slow.breakdown_s["dataloader"] > 0
    assert r_slow.step_time_s > r_fast.step_time_s
    quick = json.loads(json.dumps(fast))
    quick["dataloader"] = {"microbatch_latency_ms": per_mb * 0.1 * 1e3, "workers": 2, "prefetch": 2}
    assert run(quick).breakdown_s["dataloader"] == 0.0


def test_same_seed_same_json() -> None:
    d = small()
    d["dataloader"] = {"microbatch_latency_ms": 50.0, "jitter": 0.3, "seed": 7}
    d["variability"] = {"compute_jitter": 0.05, "network_jitter": 0.1, "seed": 3}
    a = json.dumps(run(d).to_dict(), sort_keys=True)
    b = json.dumps(run(d).to_dict(), sort_keys=True)
    assert a == b
    d["variability"]["seed"] = 4
    assert json.dumps(run(d).to_dict(), sort_keys=True) != a


def test_event_count_independent_of_dp() -> None:
    """One representative pipeline: spans (≈ events) do not grow with dp."""

    def spans(num_gpus: int, dp: int) -> int:
        d = small(tp=8, pp=2, global_batch=4 * dp)
        d["cluster"]["num_gpus"] = num_gpus
        return len(simulate(scenario_from_dict(d), detail=True).timeline.spans)

    # same p and m = global_batch / dp = 4; dp 2 vs 64 differ only in DP bucket counts
    small_dp, big_dp = spans(32, 2), spans(1024, 64)
    assert big_dp <= small_dp * 1.5


@pytest.mark.parametrize("latency_ms,workers", [(500, 2), (1000, 2), (3000, 4), (800, 1)])
def test_loader_bound_step_is_loader_throughput(latency_ms: float, workers: int) -> None:
    """Steady state: a loader slower than compute paces the step at m·L/workers,
    even when m is smaller than the prefetch buffer (the buffer is empty in steady state)."""
    d = small(pp=1, tp=1, global_batch=32)
    d["cluster"]["num_gpus"] = 8  # dp 8, m = 4
    d["dataloader"] = {"microbatch_latency_ms": latency_ms, "workers": workers, "prefetch": 2}
    r = run(d)
    m = r.parallel.num_microbatches
    assert r.step_time_s == pytest.approx(m * latency_ms / 1e3 / workers, rel=1e-9)
    # the wait is what the loader adds beyond the compute (here about half the step at 500 ms)
    assert r.breakdown_s["dataloader"] > 0.4 * r.step_time_s


# ----------------------------------------------------------------------------- the quiet loop
QUIET_VARIANTS = [
    {},
    {"schedule": "1f1b", "vp": 1},
    {"schedule": "gpipe", "vp": 1},
    {"schedule": "zb-h1", "vp": 1},
    {"schedule": "zb-v", "vp": 1},
    {"schedule": "1f1b", "vp": 1, "zero": 1, "overlap_grad_reduce": False},
    {"zero": 2, "overlap_param_gather": True},
    {"zero": 3, "overlap_grad_reduce": True},
]


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_quiet_loop_equals_stage_process_bit_for_bit(path: Path) -> None:
    """engine/quiet.py's tight loop is StageProcess's step under a LocalClock, rewritten for
    speed: same floats in the same order, so every number is identical, not merely close —
    across schedules (split backward, V), ZeRO gathers overlapped with the first forwards and
    gradient buckets reduced as they are produced or after the step."""
    from simulator.engine.noise import Noise
    from simulator.engine.recorder import SumRecorder
    from simulator.engine.replay import replay_local
    from simulator.errors import ConfigError
    from simulator.program import build_program
    from simulator.specs import VariabilitySpec

    scn = load_scenario(path)
    quiet = Noise.for_spec(VariabilitySpec(), 1, 1)
    compared = 0
    for changes in QUIET_VARIANTS:
        try:
            program = build_program(replace(scn, parallel=replace(scn.parallel, **changes)))
        except ConfigError:  # e.g. zb-v with fewer layers than 2·pp
            continue
        tight = replay_local(program, quiet, SumRecorder(program.pp)).timeline
        general = replay_local(program, quiet, SumRecorder(program.pp), tight=False).timeline
        assert tight.step_time_s == general.step_time_s, changes
        assert tight.breakdown_by_stage_s() == general.breakdown_by_stage_s(), changes
        compared += 1
    assert compared >= 4


# ----------------------------------------------------------------------------- the two clocks
@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_local_time_equals_simpy_time(path: Path) -> None:
    """Without randomness, stages in their own time give the simpy replay's numbers."""
    from simulator.engine.noise import Noise
    from simulator.engine.recorder import SumRecorder
    from simulator.engine.replay import replay_local, replay_simpy
    from simulator.program import build_program
    from simulator.specs import VariabilitySpec

    scn = load_scenario(path)
    for par in (scn.parallel, replace(scn.parallel, schedule="zb-h1", vp=1)):
        program = build_program(replace(scn, parallel=par))
        quiet = Noise.for_spec(VariabilitySpec(), 1, 1)
        a = replay_simpy(program, quiet, SumRecorder(program.pp), None).timeline
        b = replay_local(program, quiet, SumRecorder(program.pp)).timeline
        assert b.step_time_s == pytest.approx(a.step_time_s, rel=1e-12)
        for sa, sb in zip(a.breakdown_by_stage_s(), b.breakdown_by_stage_s(), strict=True):
            for c in CATEGORIES:
                assert sb[c] == pytest.approx(sa[c], rel=1e-12, abs=1e-15)
