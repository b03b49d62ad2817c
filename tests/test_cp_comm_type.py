"""Context-parallel attention by implementation (`[parallel] cp_comm_type`, program.CP_COMM_NOTE):
Transformer Engine's p2p ring, its all-gather CP (the Llama 3 paper's design) and PyTorch's
experimental context_parallel ring. Each test checks a closed form, an invariant at cp = 1 or a
monotonic consequence of the mechanism."""

from __future__ import annotations

import pytest

from simulator import program as P
from simulator.comm import default_comm_model
from simulator.costs import Device, attention_time_s
from simulator.errors import ConfigError
from simulator.loading import load_gpu_catalog, scenario_from_dict
from simulator.simulate import simulate
from simulator.specs import CP_COMM_TYPES, Scenario


def run_scenario(scn: Scenario):  # the step report of one simulated step
    return simulate(scn).report


LLAMA = {"layers": 4, "hidden": 4096, "heads": 32, "kv_heads": 8, "ffn_hidden": 14336, "vocab": 128256}
TORCH = ("torch-allgather", "torch-alltoall")


def _scn(
    cp: int,
    comm_type: str = "p2p",
    seq_per_rank: int = 16384,
    num_gpus: int = 8,
    tp: int = 1,
    attention: str = "fa2",
) -> Scenario:
    return scenario_from_dict(
        {
            "name": "t",
            "model": {**LLAMA, "seq_len": seq_per_rank * cp, "gated_mlp": True},
            "cluster": {"topology": "dgx-h100", "num_gpus": num_gpus, "gpu": "h100-sxm"},
            "parallel": {
                "tp": tp,
                "cp": cp,
                "dp": num_gpus // (cp * tp),
                "micro_batch": 1,
                "global_batch": num_gpus // (cp * tp),
                "cp_comm_type": comm_type,
            },
            "precision": {"dtype": "bf16"},
            "kernels": {"attention": attention},
        }
    )


def _parts(scn: Scenario) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
    """(seconds, forward bytes, backward bytes) per part name of one layer."""
    fwd, b_in, _, _, _ = P._Coster(scn, default_comm_model(scn)).layer(False)
    secs: dict[str, float] = {}
    fb: dict[str, float] = {}
    bb: dict[str, float] = {}
    for phase, by in ((fwd, fb), (b_in, bb)):
        for seg in phase.parts:
            secs[seg.name] = secs.get(seg.name, 0.0) + seg.duration_s
            by[seg.name] = by.get(seg.name, 0.0) + seg.message_bytes
    return secs, fb, bb


def _device() -> Device:
    return Device(load_gpu_catalog()["h100-sxm"], "bf16")


def test_cp1_is_the_same_step_for_every_comm_type() -> None:
    """Without context parallelism the key has nothing to cost: one causal kernel, no exchange."""
    base = run_scenario(_scn(1)).step_time_s
    for comm_type in CP_COMM_TYPES:
        assert run_scenario(_scn(1, comm_type)).step_time_s == base


def test_unknown_comm_type_and_unfused_are_refused() -> None:
    with pytest.raises(ConfigError) as err:
        _scn(2, "ring")
    assert err.value.key == "parallel.cp_comm_type"
    for comm_type in ("allgather", "a2a", *TORCH):
        with pytest.raises(ConfigError) as err:
            _scn(2, comm_type, attention="unfused")
        assert err.value.key == "parallel.cp_comm_type"
        _scn(1, comm_type, attention="unfused")  # nothing to refuse without context parallelism
    run_scenario(_scn(2, "p2p", attention="unfused"))  # the unfused path keeps the p2p ring


def test_ring_waits_for_the_slower_kernel_of_each_step() -> None:
    """Every later ring step has ranks of both kinds, so it costs the slower one (not the mean);
    the ring is the causal first step plus cp - 1 such steps."""
    dev = _device()
    s, h, d = 8192, 32, 128
    (t0, ts), _ = P.cp_ring_step_s(dev, "fa2", 1, s, h, d)
    kinds = [
        attention_time_s(dev, "fa2", "fwd", batch=1, seq_q=q, seq_kv=kv, heads=h, head_dim=d, causal=False)
        for q, kv in ((s, s // 2), (s // 2, s))
    ]
    assert ts == max(kinds) and ts >= sum(kinds) / 2
    assert t0 == attention_time_s(dev, "fa2", "fwd", batch=1, seq_q=s, seq_kv=s, heads=h, head_dim=d)
    for cp in (2, 4, 8):
        assert P.cp_ring_attention_s(dev, "fa2", 1, s, h, d, cp)[0] == pytest.approx(
            t0 + (cp - 1) * ts, rel=1e-12
        )


def test_allgather_kernels_balanced_and_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """All-gather CP: with a kernel whose time is its query-key pairs (the mask's half counted), each
    rank's two chunks cost exactly its share of the causal work, (cp·s_local)²/2/cp, whichever the
    rank; with the real kernel model the slowest rank's time grows with the sequence the local
    queries attend to (cp at a fixed s_local)."""
    dev = _device()
    s, h, d = 8192, 32, 128
    times = [P.cp_allgather_attention_s(dev, "fa2", 1, s, h, d, cp) for cp in (2, 4, 8)]
    assert [t[0] for t in times] == sorted(t[0] for t in times)
    assert [t[1] for t in times] == sorted(t[1] for t in times)

    def pairs(device, impl, pass_, *, batch, seq_q, seq_kv, heads, head_dim, causal=True):
        return seq_q * seq_kv * (0.5 if causal else 1.0)

    monkeypatch.setattr(P, "attention_time_s", pairs)
    for cp in (1, 2, 4, 8):
        assert P.cp_allgather_attention_s(dev, "fa2", 1, s, h, d, cp)[0] == pytest.approx(
            (cp * s) ** 2 / 2 / cp, rel=1e-12
        )


def test_allgather_exposes_its_collectives() -> None:
    """TE's all-gather CP waits for the K and V all-gathers (forward, again in the backward) and
    the dK/dV reduce-scatters: exposed, one collective per tensor of the whole sequence."""
    scn = _scn(4, "allgather")
    coster = P._Coster(scn, default_comm_model(scn))
    secs, fb, bb = _parts(scn)
    m = scn.model
    msg = m.seq_len * (m.num_kv_heads * m.dim_per_head) * 2.0
    ag, rs = coster.coll("allgather", "cp", msg), coster.coll("reducescatter", "cp", msg)
    assert secs["cp kv all-gather (exposed)"] == pytest.approx(2 * ag, rel=1e-12)
    assert secs["cp kv all-gather + dkv reduce-scatter (exposed)"] == pytest.approx(
        2 * ag + 2 * rs, rel=1e-12
    )
    assert fb["cp kv all-gather (exposed)"] == pytest.approx(2 * msg, rel=1e-12)
    assert "attention (fa2) (2 all-gather CP chunks)" in secs


def test_torch_merges_in_fp32_per_step() -> None:
    """PyTorch's ring merges each step in fp32 with eager ops: bytes = once + (cp - 1) x per step
    over the rank's output O and its exchanged K/V (expanded to the query heads, 2·O); the
    per-step part vanishes as cp -> 1 and the bytes grow linearly with cp at a fixed s_local."""
    s = 8192
    o = s * LLAMA["hidden"]  # b·s_local·heads·head_dim
    kv = 2 * o
    for cp in (2, 4, 8):
        _, fb, bb = _parts(_scn(cp, "torch-allgather", seq_per_rank=s))
        once_f = P.TORCH_CP_MERGE_ONCE_BYTES * o
        step_f = P.TORCH_CP_MERGE_STEP_BYTES * o + P.TORCH_CP_KV_CAT_BYTES * kv
        assert fb["cp fp32 output merge (eager)"] == pytest.approx(once_f + (cp - 1) * step_f, rel=1e-12)
        once_b = P.TORCH_CP_GRAD_ONCE_BYTES * (o + kv) + P.TORCH_CP_DKV_CAT_BYTES * kv
        step_b = (
            P.TORCH_CP_GRAD_STEP_BYTES * (o + kv)
            + P.TORCH_CP_DKV_CAT_BYTES * kv
            + P.TORCH_CP_KV_CAT_BYTES * kv
        )
        assert bb["cp fp32 gradient accumulation (eager)"] == pytest.approx(
            once_b + (cp - 1) * step_b, rel=1e-12
        )
    # the fp32 merge moves more than TE's 16-bit correction per step
    assert P.TORCH_CP_MERGE_STEP_BYTES > P.CP_CORRECTION_BYTES_PER_ELEMENT


def test_torch_exchanges_query_head_kv() -> None:
    """torchtitan's Llama repeats the GQA K/V to the query heads before SDPA, so PyTorch's ring
    all-gathers q_heads/kv_heads times TE's volume."""
    s, cp = 8192, 4
    _, fb_torch, _ = _parts(_scn(cp, "torch-allgather", seq_per_rank=s))
    _, fb_te, _ = _parts(_scn(cp, "allgather", seq_per_rank=s))
    ratio = LLAMA["heads"] / LLAMA["kv_heads"]
    assert fb_torch["cp kv exchange (torch)"] == pytest.approx(
        ratio * fb_te["cp kv all-gather (exposed)"], rel=1e-12
    )


def test_torch_allgather_hides_behind_the_first_step_only() -> None:
    """The all-gather is waited for before the second ring step: exposed = max(0, AG - first
    kernel). Across nodes (tp 8 fills a node, so the CP group spans nodes) it shows; a larger cp
    gathers more behind the same first kernel."""
    exposed = []
    for cp in (2, 4, 8):
        scn = _scn(cp, "torch-allgather", seq_per_rank=16384, num_gpus=8 * cp, tp=8)
        coster = P._Coster(scn, default_comm_model(scn))
        m = scn.model
        s_local = m.seq_len // cp
        heads, q_local = m.heads // 8, m.heads // 8 * m.dim_per_head
        kv_bytes = s_local * 2 * q_local * 2.0
        t_ag = coster.coll("allgather", "cp", cp * kv_bytes)
        (t0_f, _), _ = P.cp_ring_step_s(coster.device, "fa2", 1, s_local, heads, m.dim_per_head)
        secs, _, _ = _parts(scn)
        assert secs.get("cp kv exchange (torch)", 0.0) == pytest.approx(max(0.0, t_ag - t0_f), rel=1e-9)
        exposed.append(secs.get("cp kv exchange (torch)", 0.0))
    assert exposed == sorted(exposed) and exposed[-1] > 0


def test_torch_ring_costs_at_least_the_p2p_ring() -> None:
    """Same kernels, more memory passes and a less hidden exchange: PyTorch's ring is never faster
    than TE's at cp > 1, and its extra time per token grows with cp at a fixed s_local."""
    extra = []
    for cp in (2, 4, 8):
        p2p = run_scenario(_scn(cp, "p2p", seq_per_rank=8192)).step_time_s
        torch_ag = run_scenario(_scn(cp, "torch-allgather", seq_per_rank=8192)).step_time_s
        assert torch_ag > p2p
        extra.append(torch_ag - p2p)
    assert extra == sorted(extra)


def test_a2a_splits_heads_and_exposes_its_all_to_alls() -> None:
    """All-to-all CP (DeepSpeed-Ulysses as Transformer Engine runs it): one causal kernel over the
    whole sequence on heads/cp heads, the four all-to-alls of each pass exposed; the heads per TP
    rank must split over cp."""
    cp, s_local = 4, 8192
    scn = _scn(cp, "a2a", seq_per_rank=s_local)
    coster = P._Coster(scn, default_comm_model(scn))
    secs, fb, _ = _parts(scn)
    m = scn.model
    whole = attention_time_s(
        coster.device,
        "fa2",
        "fwd",
        batch=1,
        seq_q=m.seq_len,
        seq_kv=m.seq_len,
        heads=m.heads // cp,
        head_dim=128,
    )
    assert secs["attention (fa2) (a2a CP, heads/cp)"] == pytest.approx(whole, rel=1e-12)
    q_msg = s_local * m.heads * m.dim_per_head * 2.0
    kv_msg = s_local * m.num_kv_heads * m.dim_per_head * 2.0
    t = 2 * coster.coll("alltoall", "cp", q_msg) + 2 * coster.coll("alltoall", "cp", kv_msg)
    assert secs["cp qkv + out all-to-all (exposed)"] == pytest.approx(t, rel=1e-12)
    assert fb["cp qkv + out all-to-all (exposed)"] == pytest.approx(2 * q_msg + 2 * kv_msg, rel=1e-12)
    # 8 key/value heads do not split over 16 ranks; nor 1 per TP rank (tp 8) over 2
    with pytest.raises(ConfigError) as err:
        _scn(16, "a2a", seq_per_rank=1024, num_gpus=16)
    assert err.value.key == "parallel.cp_comm_type"
    with pytest.raises(ConfigError):
        _scn(2, "a2a", num_gpus=16, tp=8)
