"""The tied word-embedding gradient's all-reduce between the first and the last pipeline stage
(program.EMBEDDING_SYNC_NOTE: Megatron-Core finalize_model_grads._allreduce_word_embedding_grads)."""

from __future__ import annotations

from typing import Any

import pytest

from simulator.loading import scenario_from_dict
from simulator.program import build_program
from simulator.simulate import simulate


def _scn(
    tied: bool, pp: int = 4, schedule: str = "1f1b", grad_dtype: str = "fp32", nic_gbps: int = 200
) -> Any:
    return scenario_from_dict(
        {
            "name": "tied" if tied else "untied",
            "model": {
                "layers": 8, "hidden": 2048, "heads": 16, "vocab": 50304, "seq_len": 2048,
                "tied_embeddings": tied,
            },
            "cluster": {"topology": "dgx-a100", "num_gpus": 8 * pp, "inter_node": {"nic_Gbps": nic_gbps}},
            "parallel": {"tp": 8, "pp": pp, "global_batch": 16, "schedule": schedule},
            "kernels": {"grad_reduce_dtype": grad_dtype},
        }
    )  # fmt: skip


def test_only_the_first_and_last_stage_sync_a_tied_table() -> None:
    scn = _scn(tied=True)
    program = build_program(scn)
    sync = [st.embedding_sync_bytes for st in program.stages]
    # vocab / tp x hidden fp32 main_grad elements, on stage 0 (the lookup) and pp-1 (the logits)
    expected = 50304 / 8 * 2048 * 4
    assert sync == [pytest.approx(expected), 0.0, 0.0, pytest.approx(expected)]
    assert all(st.embedding_sync_s > 0 for st in (program.stages[0], program.stages[-1]))
    # half the bytes with a bf16 gradient reduction
    bf16 = build_program(_scn(tied=True, grad_dtype="bf16"))
    assert bf16.stages[0].embedding_sync_bytes == pytest.approx(expected / 2)


@pytest.mark.parametrize("case", ["untied", "pp1", "zb-v"])
def test_no_sync_where_no_second_copy_lives_elsewhere(case: str) -> None:
    # untied tables have nothing to sync; at pp = 1 and in the V-shaped zb-v the lookup and the
    # logits share a rank (their gradients sum locally)
    scn = {
        "untied": _scn(tied=False),
        "pp1": _scn(tied=True, pp=1),
        "zb-v": _scn(tied=True, schedule="zb-v"),
    }[case]
    assert all(st.embedding_sync_s == 0.0 for st in build_program(scn).stages)


def test_the_sync_is_on_the_step_and_named_in_the_trace() -> None:
    tied, untied = _scn(tied=True), _scn(tied=False)
    sync_s = build_program(tied).stages[0].embedding_sync_s
    r_tied, r_untied = simulate(tied, detail=True), simulate(untied)
    # not overlapped: the step's global grad-norm sync waits for it
    assert r_tied.report.step_time_s - r_untied.report.step_time_s == pytest.approx(sync_s, rel=1e-6)
    named = [
        sp
        for sp in r_tied.timeline.spans
        if sp.category == "pp_comm" and sp.name.startswith("tied embedding grad all-reduce")
    ]
    assert {sp.stage for sp in named} == {0, 3}
    assert all((sp.end_s - sp.start_s) == pytest.approx(sync_s, rel=1e-9) for sp in named)
    assert r_tied.report.step_time_s == pytest.approx(sum(r_tied.report.breakdown_s.values()), rel=1e-9)


def test_faster_nics_shorten_the_sync() -> None:
    # stage 0 and stage 3 sit on different nodes: the transfer crosses the NICs
    slow = build_program(_scn(tied=True)).stages[0].embedding_sync_s
    fast = build_program(_scn(tied=True, nic_gbps=400)).stages[0].embedding_sync_s
    assert 0 < fast < slow
