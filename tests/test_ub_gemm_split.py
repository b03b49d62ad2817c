"""TE userbuffer TP overlap runs some layer GEMMs in row chunks (issue 12, hopper-megatron).

With `--tp-comm-overlap`, Transformer Engine's default methods (module/base.py initialize_ub)
cut qkv/fc1 fprop and proj/fc2 dgrad into tp ring-exchange chunks of T/tp rows and proj/fc2
fprop into 4 pipeline chunks, up to 3 chunk GEMMs at once: smaller GEMMs, lower efficiency,
charged as `tp overlap gemm split`."""

from __future__ import annotations

from simulator import program as P
from simulator.costs import Device, matmul_time_s
from simulator.loading import scenario_from_dict
from simulator.specs import Scenario

NAME = "tp overlap gemm split"


def _scn(tp: int, overlap: bool = True, seq_len: int = 4096) -> Scenario:
    return scenario_from_dict(
        {
            "name": "t",
            "model": {"layers": 2, "hidden": 8192, "heads": 64, "vocab": 32000, "seq_len": seq_len},
            "cluster": {"topology": "dgx-h100", "num_gpus": tp},
            "parallel": {
                "tp": tp,
                "global_batch": 1,
                "micro_batch": 1,
                "sequence_parallel": tp > 1,
                "tp_comm_overlap": overlap and tp > 1,
            },
            "precision": {"dtype": "bf16"},
        }
    )


def _split_s(scn: Scenario) -> tuple[float, float]:
    chunk = P.build_program(scn).stages[0].chunks[0]
    return tuple(  # type: ignore[return-value]
        sum(s.duration_s for s in block.segments if s.name == NAME)
        for block in (chunk.forward, chunk.backward)
    )


def test_chunk_counts_follow_te_default_methods() -> None:
    for name in ("qkv", "fc1"):
        assert P.ub_gemm_chunks(name, "fprop", 8) == 8  # ring_exchange: one chunk per TP shard
        assert P.ub_gemm_chunks(name, "dgrad", 8) == 1  # bulk overlap: the GEMM stays whole
    for name in ("attn out", "fc2"):
        assert P.ub_gemm_chunks(name, "fprop", 8) == P.UB_PIPELINE_SPLITS == 4  # pipeline
        assert P.ub_gemm_chunks(name, "dgrad", 8) == 8  # ring_exchange
    assert P.ub_gemm_chunks("logits", "fprop", 8) == 1


def test_split_time_closed_form() -> None:
    d = Device(_scn(8).gpu, "bf16")
    m, n, k = 4096, 3584, 8192
    whole = matmul_time_s(d, m, n, k)
    assert P.ub_split_gemm_s(d, m, n, k, 1) == whole
    # 8 chunks of 512 rows, 3 at a time: 8/3 launches of a 1536-row GEMM's worth of tiles
    assert P.ub_split_gemm_s(d, m, n, k, 8) == 8 / 3 * matmul_time_s(d, 1536, n, k)
    # 2 chunks run together: the whole GEMM's tiles at once, no loss
    assert P.ub_split_gemm_s(d, m, n, k, 2) == whole
    assert P.ub_split_gemm_s(d, m, n, k, 8) > whole


def test_only_with_userbuffer_overlap() -> None:
    assert _split_s(_scn(8, overlap=False)) == (0.0, 0.0)
    assert _split_s(_scn(1)) == (0.0, 0.0)
    fwd, bwd = _split_s(_scn(8))
    assert fwd > 0 and bwd > 0


def test_cost_grows_as_chunks_shrink() -> None:
    # the same tp: shorter sequences give smaller chunks, each relatively less efficient
    long_f, _ = _split_s(_scn(8, seq_len=8192))
    short_f, _ = _split_s(_scn(8, seq_len=2048))
    long_whole = sum(
        s.duration_s for s in P.build_program(_scn(8, seq_len=8192)).stages[0].chunks[0].forward.segments
    )
    short_whole = sum(
        s.duration_s for s in P.build_program(_scn(8, seq_len=2048)).stages[0].chunks[0].forward.segments
    )
    assert short_f / short_whole > long_f / long_whole
