"""Transformer Engine userbuffer TP overlap (`tp_comm_overlap`) against its source and published
figures (issue tpov).

What TE does (transformer_engine/pytorch/module/base.py initialize_ub and
common/comm_gemm_overlap/comm_gemm_overlap.cpp, v1.7 @4e7caa1c and v2.2 @c55e425a): every
userbuffer overlap is bound to ONE GEMM of the layer and ends with the main stream waiting for
its own comm and GEMM streams, so a collective hides behind its own GEMM only:

* ring_exchange (qkv/fc1 fprop, proj/fc2 dgrad): the GEMM in tp chunks, the first on the local
  shard, each of the tp - 1 peer copies beside one chunk (copy engines, `use_ce`);
* pipeline (proj/fc2 fprop): the GEMM in 4 chunks, chunk i's ReduceScatter beside chunk i+1's
  GEMM, the last chunk's ReduceScatter exposed -- "a 1x ReduceScatter chunk remains exposed"
  (Megatron-Bridge docs/performance-guide.md @e577829e), "exposes one reduce-scatter chunk"
  (NeMo docs/source/features/optimizations/communication_overlap.rst @8cfedd72);
* bulk (qkv/fc1 dgrad: re-gather of the normed input; qkv/fc1 wgrad: the input gradient's
  ReduceScatter): the whole collective beside the whole GEMM.

The model used to pool the layer's TP traffic against all its GEMMs (exposed = max(0, TP -
GEMMs)); it now pairs them as TE does (program.ub_tp_pair / ub_exposed_s).

Published figures (test data, never fitted):

* bytedance/flux docs/performance_report.md @79807b71 (H800, 8 GPUs, TP 8, fp16, M=4096,
  K=12288, N=49152): torch GEMM 0.846 ms, NCCL AllGather 0.583 ms, ReduceScatter 0.590 ms;
  Flux's fused AG+GEMM 0.957 ms in all (overlap efficiency 1 - (0.957 - 0.846)/0.583 = 0.81).
  The FLUX paper (Chang et al. 2024, arXiv 2406.06858) reports TE's userbuffer overlap below
  Flux's on H800 NVLink. Its operation-level TE range (-40% .. 80% on H800 NVLink) and its GPT-3
  175B training speedups (Flux 1.14x over no overlap and 1.10x over TE on H800: TE about 1.04x)
  are taken from a third-party summary of the paper, not checked against its tables: documented,
  not asserted.
"""

from __future__ import annotations

from typing import Any

import pytest

from simulator import program as P
from simulator.comm import default_comm_model
from simulator.costs import matmul_time_s
from simulator.loading import scenario_from_dict
from simulator.program import _Coster
from simulator.specs import Scenario

# bytedance/flux docs/performance_report.md @79807b71, H800 x 8, TP 8, M=4096 K=12288 N=49152, ms
FLUX_H800 = {"gemm": 0.846, "allgather": 0.583, "reducescatter": 0.590, "flux_ag_gemm_total": 0.957}
# model / published for the GEMM and the NCCL collectives at that shape (boost-clock microbenchmark)
INGREDIENT_BAND = (0.95, 1.15)


def _scn(
    topo: str = "dgx-h100",
    hidden: int = 8192,
    heads: int = 64,
    kv: int | None = 8,
    ffn: int = 28672,
    seq: int = 8192,
    overlap: bool = True,
    dtype: str = "bf16",
    **precision: Any,
) -> Scenario:
    model: dict[str, Any] = {"layers": 2, "hidden": hidden, "heads": heads, "ffn_hidden": ffn}
    model.update({"vocab": 51200, "seq_len": seq})
    if kv:
        model["kv_heads"] = kv
    return scenario_from_dict(
        {
            "name": "tpov",
            "model": model,
            "cluster": {"topology": topo, "num_gpus": 8},
            "parallel": {
                "tp": 8,
                "global_batch": 1,
                "micro_batch": 1,
                "sequence_parallel": True,
                "tp_comm_overlap": overlap,
            },
            "precision": {"dtype": dtype, **precision},
        }
    )


def _layer(scn: Scenario) -> tuple[list, list, list, _Coster]:
    c = _Coster(scn, default_comm_model(scn))
    c.stage = 0
    f, b_in, b_w, _, _ = c.layer(False)
    return list(f.parts), list(b_in.parts), list(b_w.parts), c


def _dur(parts: list, name: str) -> list[float]:
    return [p.duration_s for p in parts if p.name == name]


def test_exposed_closed_forms() -> None:
    t, g = 1.0, 2.0
    # ring exchange: the gather hides behind (tp - 1)/tp of its GEMM
    assert P.ub_exposed_s("ring_exchange", t, g, 8) == 0.0
    assert P.ub_exposed_s("ring_exchange", t, 0.8, 8) == pytest.approx(1.0 - 0.8 * 7 / 8)
    # pipeline: one of UB_PIPELINE_SPLITS = 4 ReduceScatter chunks stays exposed
    assert P.UB_PIPELINE_SPLITS == 4
    assert P.ub_exposed_s("pipeline", t, g, 8) == pytest.approx(0.25)
    # ... and when the chunks' ReduceScatter outlasts their GEMM, the chain of chunks shows
    assert P.ub_exposed_s("pipeline", t, 0.4, 8) == pytest.approx(1.0 - 0.4 * 3 / 4)
    # bulk: whole beside whole
    assert P.ub_exposed_s("bulk", t, 0.7, 8) == pytest.approx(0.3)
    assert P.ub_exposed_s("bulk", t, g, 8) == 0.0
    for method in ("ring_exchange", "pipeline", "bulk"):  # more GEMM never exposes more
        exposed = [P.ub_exposed_s(method, t, x / 10, 8) for x in range(0, 40)]
        assert all(a >= b for a, b in zip(exposed, exposed[1:], strict=False))


def test_each_collective_hides_behind_its_own_gemm() -> None:
    """Llama-3-70B-shaped layer at tp 8 (GQA: a thin qkv GEMM beside a large fc1): the qkv
    AllGather outlasts 7/8 of the qkv GEMM and shows, however much fc1/fc2 GEMM time the layer
    has to spare (the pooled model hid it all)."""
    off_f, off_b, off_w, _ = _layer(_scn(overlap=False))
    on_f, on_b, _, _ = _layer(_scn())
    ag = _dur(off_f, "tp allgather")[0]  # raw AllGather time (identical for qkv and fc1)
    rs = _dur(off_f, "tp reducescatter")[0]
    qkv, proj = _dur(off_f, "qkv")[0], _dur(off_f, "attn out")[0]
    fc1, fc2 = _dur(off_f, "fc1")[0], _dur(off_f, "fc2")[0]
    assert ag > qkv * 7 / 8  # the premise: this GEMM cannot hide its gather
    assert qkv + proj + fc1 + fc2 > 2 * (ag + rs)  # ... though the layer's GEMMs could (pooled)
    assert _dur(on_f, "tp allgather") == pytest.approx([P.ub_exposed_s("ring_exchange", ag, qkv, 8), 0.0])
    assert _dur(on_f, "tp reducescatter") == pytest.approx(
        [P.ub_exposed_s("pipeline", rs, proj, 8), P.ub_exposed_s("pipeline", rs, fc2, 8)]
    )
    # backward: the output gradient's gather beside the attn out / fc2 dgrad (ring exchange)
    proj_dgrad, fc2_dgrad = _dur(off_b, "attn out dgrad")[0], _dur(off_b, "fc2 dgrad")[0]
    assert _dur(on_b, "tp allgather") == pytest.approx(
        [
            P.ub_exposed_s("ring_exchange", ag, proj_dgrad, 8),
            P.ub_exposed_s("ring_exchange", ag, fc2_dgrad, 8),
        ]
    )
    # bulk: the re-gather beside the qkv/fc1 dgrad, the ReduceScatter beside the qkv/fc1 wgrad
    qkv_dgrad, qkv_wgrad = _dur(off_b, "qkv dgrad")[0], _dur(off_w, "qkv wgrad")[0]
    assert _dur(on_b, "tp allgather (beside dgrad)")[0] == pytest.approx(
        P.ub_exposed_s("bulk", ag, qkv_dgrad, 8)
    )
    assert _dur(on_b, "tp reducescatter (beside wgrad)")[0] == pytest.approx(
        P.ub_exposed_s("bulk", rs, qkv_wgrad, 8)
    )


def test_pipelined_reduce_scatter_exposes_one_chunk() -> None:
    """Nemotron-4-340B-shaped layer (hidden 18432, ffn 73728, seq 4096, tp 8): every GEMM
    outlasts its collective, so all that shows is one ReduceScatter chunk of four after
    attn out and after fc2 (the NeMo / Megatron-Bridge docs' statement)."""
    scn = _scn(hidden=18432, heads=96, ffn=73728, seq=4096)
    off_f, _, _, _ = _layer(_scn(hidden=18432, heads=96, ffn=73728, seq=4096, overlap=False))
    on_f, on_b, _, _ = _layer(scn)
    rs = _dur(off_f, "tp reducescatter")[0]
    assert _dur(on_f, "tp reducescatter") == pytest.approx([rs / 4, rs / 4])
    assert _dur(on_f, "tp allgather") == [0.0, 0.0]
    assert all(p.duration_s == 0.0 for p in on_b if p.category == "tp_comm")


def test_fp8_userbuffer_allgathers_move_one_byte() -> None:
    """initialize_ub's fp8_buf: with FP8 the gathered tensors (normed input, output gradient) sit
    in a uint8 userbuffer; the ReduceScatters stay 16-bit. Only with the overlap, per-tensor FP8."""
    bf16, _, _, _ = _layer(_scn(overlap=False))
    fp8, _, _, _ = _layer(_scn(overlap=False, dtype="fp8"))
    assert _dur(fp8, "tp allgather")[0] == pytest.approx(_dur(bf16, "tp allgather")[0])  # no ub: 16-bit
    on = _scn(dtype="fp8")
    assert P.ub_fp8_allgather(on)
    assert not P.ub_fp8_allgather(_scn(dtype="fp8", overlap=False))
    assert not P.ub_fp8_allgather(_scn(dtype="fp8", fp8_recipe="blockwise"))
    _, _, _, c = _layer(on)
    t_ag = c.coll("allgather", "tp", 8192 * 8192 * 1.0)
    on_f, on_b, _, _ = _layer(on)
    qkv = _dur(on_f, "qkv")[0]
    assert _dur(on_f, "tp allgather")[0] == pytest.approx(P.ub_exposed_s("ring_exchange", t_ag, qkv, 8))
    # the segments carry their bytes: one per element for the gathers, two for the scatters
    assert {p.message_bytes for p in on_f if p.name == "tp allgather"} == {8192 * 8192 * 1.0}
    assert {p.message_bytes for p in on_f if p.name == "tp reducescatter"} == {8192 * 8192 * 2.0}


def test_flux_h800_ingredients() -> None:
    """The GEMM and NCCL collectives of FLUX's published H800 shape, as the model costs them
    (test data: bytedance/flux docs/performance_report.md @79807b71)."""
    scn = _scn(topo="dgx-h800", hidden=12288, heads=96, kv=None, ffn=49152, seq=4096)
    _, _, _, c = _layer(scn)
    m, k, n = 4096, 12288, 49152 // 8
    model = {
        "gemm": matmul_time_s(c.device, m, n, k) * 1e3,
        "allgather": c.coll("allgather", "tp", m * k * 2) * 1e3,
        "reducescatter": c.coll("reducescatter", "tp", m * k * 2) * 1e3,
    }
    for key, ms in model.items():
        assert INGREDIENT_BAND[0] <= ms / FLUX_H800[key] <= INGREDIENT_BAND[1], (key, ms)


def test_ring_exchange_at_flux_shape_is_at_least_as_efficient_as_flux() -> None:
    """Documents the open gap. At FLUX's H800 AG+GEMM shape the model's ring-exchange overlap
    (chunked GEMM + interference, nothing exposed) reaches an overlap efficiency of about 0.88,
    above Flux's own measured 0.81 -- and the FLUX paper reports TE below Flux there. So even
    paired per GEMM, the model's userbuffer overlap hides more than TE did at this shape; what
    TE loses beyond the chunking (sync and launch gaps between chunks, copy-engine and HBM
    contention) has no published per-shape figure the model could take."""
    scn = _scn(topo="dgx-h800", hidden=12288, heads=96, kv=None, ffn=49152, seq=4096)
    _, _, _, c = _layer(scn)
    d = c.device
    m, k, n = 4096, 12288, 49152 // 8
    g = matmul_time_s(d, m, n, k)
    t = c.coll("allgather", "tp", m * k * 2)
    split = P.ub_split_gemm_s(d, m, n, k, 8)
    exposed = P.ub_exposed_s("ring_exchange", t, split, 8)
    slow = scn.gpu.efficiency.overlap_slowdown
    ect = split + exposed + slow * (t - exposed) - g  # FLUX's effective communication time
    model_eff = 1 - ect / t
    flux_eff = 1 - (FLUX_H800["flux_ag_gemm_total"] - FLUX_H800["gemm"]) / FLUX_H800["allgather"]
    assert flux_eff == pytest.approx(0.81, abs=0.01)
    assert model_eff > flux_eff  # the gap, documented (docs/accuracy.md "TE userbuffer overlap")
