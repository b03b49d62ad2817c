"""What each MoE token dispatcher sends over expert parallelism, and the DeepEP / HybridEP kernels'
published speed (simulator/ep_dispatch.py, issue 13)."""

from __future__ import annotations

from math import comb

import numpy as np
import pytest

from simulator.ep_dispatch import (
    DISPATCHER_ALGBW_GBPS,
    expected_groups_hit,
    kernel_algbw_bytes_per_s,
    round_robin_groups_hit,
)
from simulator.loading import scenario_from_dict
from simulator.program import build_program
from simulator.simulate import simulate
from simulator.specs import Scenario


def test_expected_groups_closed_forms() -> None:
    assert expected_groups_hit(256, 1, 8) == 1.0
    assert expected_groups_hit(64, 64, 8) == pytest.approx(8.0)  # one expert per rank: k ranks
    assert expected_groups_hit(256, 32, 1) == pytest.approx(1.0)  # one expert: one rank
    # 16 experts on 2 ranks, top-8: both ranks unless all 8 fall on one (2 of C(16, 8) choices)
    assert expected_groups_hit(16, 2, 8) == pytest.approx(2 - 2 / comb(16, 8))


def test_expected_groups_match_sampled_routing() -> None:
    """Uniform top-k routing without replacement (the benchmarks' random router, and
    Megatron-Core's forced balancing), sampled."""
    rng = np.random.default_rng(0)
    for experts, groups, k in ((256, 32, 8), (128, 8, 8), (128, 2, 8)):
        picks = np.argsort(rng.random((20000, experts)), axis=1)[:, :k] // (experts // groups)
        sampled = np.mean([len(set(row)) for row in picks])
        assert expected_groups_hit(experts, groups, k) == pytest.approx(sampled, rel=0.01)


def test_round_robin_groups_match_the_automodel_gate() -> None:
    """NeMo AutoModel's FakeBalancedGate (noise 0) routes token t to experts (t·k + j) mod E: run
    that formula over 10,000 tokens, place experts on ranks contiguously (e // (E/g)), count the
    distinct ranks per token. DeepSeek-V3 on EP64: 4 experts per rank, a token's 8 adjacent experts
    on exactly 2 ranks of one node (uniform routing: 7.2 ranks, 5.3 of 8 nodes)."""
    for experts, groups, k in (
        (256, 64, 8),
        (256, 8, 8),
        (128, 8, 8),
        (384, 32, 8),
        (128, 64, 4),
        (60, 4, 6),
    ):
        per = experts // groups
        counted = np.mean([len({((t * k + j) % experts) // per for j in range(k)}) for t in range(10_000)])
        assert round_robin_groups_hit(experts, groups, k) == pytest.approx(counted, rel=1e-3)
    assert round_robin_groups_hit(256, 64, 8) == 2.0
    assert round_robin_groups_hit(256, 8, 8) == 1.0
    assert round_robin_groups_hit(384, 32, 8) == pytest.approx(4 / 3)  # 12 per rank: 1, 2, 1 ranks
    assert round_robin_groups_hit(256, 1, 8) == 1.0
    # adjacency never reaches more groups than uniform routing does
    for experts in (16, 64, 128, 256, 384):
        for groups in (2, 4, 8, 16, 32):
            for k in (1, 2, 4, 8):
                rr = round_robin_groups_hit(experts, groups, k)
                assert 1.0 <= rr <= expected_groups_hit(experts, groups, k) + 1e-9


def test_table_interpolates_in_sms_and_agrees_with_the_guide() -> None:
    """Linear between measured SM counts, held above, SM-bound below; the 24-rank DeepEP row (used for EP32) is
    within 20% of Megatron-LM's GB200 guide §2.2.1 figure for EP32 at 24 SMs (~400 GB/s dispatch,
    ~190 GB/s combine)."""
    row = DISPATCHER_ALGBW_GBPS["deepep"][8]
    mid = kernel_algbw_bytes_per_s("deepep", 8, 20, "combine")
    assert mid == pytest.approx((row[16][2] + row[24][2]) / 2 * 1e9)
    assert kernel_algbw_bytes_per_s("deepep", 8, 64, "combine") == pytest.approx(row[32][2] * 1e9)
    assert kernel_algbw_bytes_per_s("deepep", 8, 8, "combine") == pytest.approx(row[16][2] / 2 * 1e9)
    assert kernel_algbw_bytes_per_s("deepep", 32, 24, "dispatch_bf16") == pytest.approx(400e9, rel=0.2)
    assert kernel_algbw_bytes_per_s("deepep", 32, 24, "combine") == pytest.approx(190e9, rel=0.2)


def _gb200(dispatcher: str, sms: int = 0) -> Scenario:
    """Megatron-LM docs/discussions/deepseek-v3-gb200-optimization (commit eb0783b6d3): DeepSeek-V3,
    256 GB200, MXFP8, TP1 PP8 VPP4 EP32 MBS1 GBS2048, layout Et|(tt|)*30L, recompute mlp and
    moe_act, TE graphs of attn/moe_router/moe_preprocess."""
    return scenario_from_dict(
        {
            "name": "dsv3-gb200",
            "model": {"preset": "deepseek-v3", "seq_len": 4096},
            "cluster": {"topology": "gb200-nvl72", "num_gpus": 256, "gpu": "gb200", "gpus_used_per_node": 64},
            "parallel": {
                "tp": 1,
                "pp": 8,
                "vp": 4,
                "ep": 32,
                "micro_batch": 1,
                "global_batch": 2048,
                "schedule": "interleaved",
                "recompute": "selective",
                "recompute_modules": ["mlp", "moe_act"],
                "account_for_embedding_in_pipeline_split": True,
                "account_for_loss_in_pipeline_split": True,
            },
            "precision": {"dtype": "mxfp8"},
            "kernels": {
                "cuda_graph_impl": "transformer_engine",
                "cuda_graph_modules": ["attn", "moe_router", "moe_preprocess"],
                "moe_dispatcher": dispatcher,
                "ep_comm_sms": sms,
            },
        }
    )


def _ep_segments(scn: Scenario) -> dict[str, tuple[float, float]]:
    ch = build_program(scn).stages[3].chunks[0]
    out: dict[str, tuple[float, float]] = {}
    for seg in ch.forward.segments + ch.backward.segments:
        if seg.category == "ep_comm":
            t, b = out.get(seg.name, (0.0, 0.0))
            out[seg.name] = (t + seg.duration_s, b + seg.message_bytes)
    return out


def test_flex_dispatchers_send_a_token_once_per_rank() -> None:
    """DeepEP / HybridEP send a token once per destination rank, NCCL's alltoall once per chosen
    expert: DeepSeek-V3's 8 of 256 experts over EP32 (8 per rank) reach 7.2 ranks on average."""
    a2a, hyb = _ep_segments(_gb200("alltoall")), _ep_segments(_gb200("hybridep"))
    ratio = hyb["ep dispatch"][1] / a2a["ep dispatch"][1]
    assert ratio == pytest.approx(expected_groups_hit(256, 32, 8) / 8)
    assert 0.89 < ratio < 0.91


def test_deepep_combine_is_slow_over_multi_node_nvlink() -> None:
    """DeepEP on EP32 inside an NVL72 rack: the combine runs at well under half the dispatch's rate
    (the guide §2.2.1: ~400 vs ~190 GB/s); HybridEP's two directions within 15% of each other."""
    deep, hyb = _ep_segments(_gb200("deepep", 24)), _ep_segments(_gb200("hybridep"))
    assert deep["ep combine"][0] > 2 * deep["ep dispatch"][0]
    assert hyb["ep combine"][0] == pytest.approx(hyb["ep dispatch"][0], rel=0.15)
    assert deep["ep combine"][0] > 2.5 * hyb["ep combine"][0]


def test_deepep_to_hybridep_ratio_on_gb200() -> None:
    """Published (test data, not fitted): the guide's summary table, DeepEP 829.93 -> HybridEP
    943.56 TFLOPS/GPU (time ratio 1.137; HybridEP's step also fused the buffer copy and padding
    into the permute). Simulated with the guide's DeepEP SM count (24, §2.2.1): within 10%."""
    ratio = (
        simulate(_gb200("deepep", 24)).report.step_time_s / simulate(_gb200("hybridep")).report.step_time_s
    )
    assert ratio == pytest.approx(943.56 / 829.93, rel=0.10)


def test_internode_flex_dispatch_crosses_ib_once_per_node() -> None:
    """Two H100 nodes, Qwen3-30B (128 experts, top-8) on EP16: NCCL's alltoall sends half of the
    8 copies of a token over InfiniBand, HybridEP one copy per remote node (about one): the
    dispatch is faster, never slower than the IB share alone predicts."""

    def scn(dispatcher: str) -> Scenario:
        return scenario_from_dict(
            {
                "name": "q30",
                "model": {"preset": "qwen3-30b-a3b", "seq_len": 4096},
                "cluster": {"topology": "dgx-h100", "num_gpus": 16, "gpu": "h100-sxm"},
                "parallel": {"ep": 16, "global_batch": 64},
                "precision": {"dtype": "fp8"},
                "kernels": {"moe_dispatcher": dispatcher},
            }
        )

    ch_a = build_program(scn("alltoall")).stages[0].chunks[0]
    ch_h = build_program(scn("hybridep")).stages[0].chunks[0]
    t_a, t_h = ch_a.forward.seconds("ep_comm"), ch_h.forward.seconds("ep_comm")
    ib_share = expected_groups_hit(128, 2, 8) / 2 / (8 / 2)  # remote-node copies / remote copies
    assert t_h < t_a
    assert t_h >= 0.9 * ib_share * t_a


def test_allgather_dispatcher_gathers_every_token() -> None:
    """MoEAllGatherTokenDispatcher: every rank receives the whole EP group's tokens (ep x its own),
    whatever top-k; NCCL's alltoall sends top-k copies. Qwen3-30B (top-8) on EP16: the gather
    moves 16/8 = 2x the all-to-all's bytes, yet over two nodes it is faster: every rank of the
    other node needs the same tokens, so each crosses InfiniBand once per node (T·h per NIC),
    where the all-to-all's copies are distinct (4·T·h per NIC)."""

    def dispatch(dispatcher: str) -> tuple[float, float]:
        scn = scenario_from_dict(
            {
                "name": "q30",
                "model": {"preset": "qwen3-30b-a3b", "seq_len": 4096},
                "cluster": {"topology": "dgx-h100", "num_gpus": 16, "gpu": "h100-sxm"},
                "parallel": {"ep": 16, "global_batch": 64},
                "kernels": {"moe_dispatcher": dispatcher},
            }
        )
        for seg in build_program(scn).stages[0].chunks[0].forward.segments:
            if seg.name == "ep dispatch":
                return seg.message_bytes, seg.duration_s
        raise AssertionError("no dispatch")

    (b_ag, t_ag), (b_a2a, t_a2a) = dispatch("allgather"), dispatch("alltoall")
    assert b_ag == pytest.approx(2 * b_a2a)
    assert t_ag < t_a2a


def test_run_json_names_what_bound_the_flex_dispatch() -> None:
    """`collectives` reports DeepEP's EP32 all-to-all on GB200 as DeepEP's, bound by its published
    kernel rate (the combine: 24-rank row), not as the NCCL all-to-all it was checked against."""
    report = simulate(_gb200("deepep", 24)).report
    ep = [c for c in report.collectives if c["group"] == "ep"]
    assert [c["algorithm"] for c in ep] == ["deepep"]
    assert ep[0]["bottleneck"] == "deepep kernel"
    assert ep[0]["message_bytes"] / ep[0]["time_s"] == pytest.approx(163.62e9)


@pytest.mark.parametrize("dispatcher", ["alltoall", "deepep", "hybridep"])
def test_ep_group_strided_past_a_node_has_one_rank_per_node(dispatcher: str) -> None:
    """tp·cp = 16 > 8 GPUs per node: each of the 4 EP ranks lies in a node of its own (the group
    spans 4 nodes, not the 8 its stride covers). The flex dispatchers' NVLink-forwarding leg
    divided by the EP ranks per node, 4 // 8 = 0 (ZeroDivisionError, found by the fuzz audit)."""
    scn = scenario_from_dict(
        {
            "name": "strided ep",
            "model": {
                "layers": 2, "hidden": 512, "heads": 8, "ffn_hidden": 2048, "vocab": 32000, "seq_len": 1024,
                "moe": {"num_experts": 4, "top_k": 2, "max_nodes_per_token": 1},
            },
            "cluster": {"topology": "dgx-h100", "num_gpus": 64},
            "parallel": {"tp": 8, "cp": 2, "dp": 4, "ep": 4, "global_batch": 16, "sequence_parallel": True},
            "kernels": {"moe_dispatcher": dispatcher},
        }
    )  # fmt: skip
    ep_s = build_program(scn).stages[0].chunks[0].forward.seconds("ep_comm")
    assert 0 < ep_s < float("inf")
    step = simulate(scn).report.step_time_s
    assert 0 < step < float("inf")


def _automodel_dsv3(routing: str, **moe: object) -> Scenario:
    """NeMo AutoModel's DeepSeek-V3 benchmark layout (docs/performance-summary.md: 256 H100, PP4
    VP8 EP64, FSDP 64, HybridEP), with the gate under test."""
    return scenario_from_dict(
        {
            "name": "dsv3-automodel",
            "model": {"preset": "deepseek-v3", "seq_len": 4096, "moe": {"routing": routing, **moe}},
            "cluster": {"topology": "dgx-h100", "num_gpus": 256},
            "parallel": {"pp": 4, "vp": 8, "ep": 64, "micro_batch": 1, "global_batch": 512, "zero": 3},
            "precision": {"dtype": "bf16"},
            "kernels": {"moe_dispatcher": "hybridep"},
        }
    )


def test_round_robin_routing_crosses_ib_once_per_token() -> None:
    """Round-robin routing puts a token's 8 experts on 2 adjacent ranks of one node: HybridEP sends
    it over RDMA to one node and over NVLink to 2 ranks, where DeepSeek-V3's node-limited router
    reaches 4 nodes and 7.4 ranks -- the dispatch shrinks by about the node ratio, never more;
    the experts' load is exact (busiest rank = mean)."""
    rr, bal = _automodel_dsv3("round_robin"), _automodel_dsv3("balanced")
    seg_rr, seg_bal = _ep_segments(rr), _ep_segments(bal)
    # the preset's learned router is node-limited: 8 experts within 4 of the 8 nodes (32 ranks)
    assert seg_rr["ep dispatch"][1] / seg_bal["ep dispatch"][1] == pytest.approx(
        2.0 / expected_groups_hit(128, 32, 8)
    )
    ratio = seg_rr["ep dispatch"][0] / seg_bal["ep dispatch"][0]
    assert ratio < 0.5
    assert ratio >= 0.9 / 4
    assert rr.model.busiest_rank_load(64, 4096 * 64) == 1.0
    assert not rr.model.uneven_expert_counts
    assert simulate(rr).report.step_time_s < simulate(bal).report.step_time_s


def test_round_robin_routing_ignores_the_routers_node_limit() -> None:
    """The preset's node limit (DeepSeek-V3: 4 nodes) belongs to its learned router; the
    round-robin gate replaces that router, so setting the limit explicitly changes nothing."""
    base = simulate(_automodel_dsv3("round_robin")).report.step_time_s
    assert simulate(_automodel_dsv3("round_robin", max_nodes_per_token=2)).report.step_time_s == base
    assert _automodel_dsv3("round_robin").model.node_limit == 0
    assert _automodel_dsv3("balanced").model.node_limit == 4
