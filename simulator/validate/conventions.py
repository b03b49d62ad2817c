"""Each source's FLOP convention, and the simulated value in the row's own convention."""

from __future__ import annotations

from .. import flops
from ..specs import ModelSpec, Scenario
from .cases import Case
from .columns import (
    FLOPS_EXACT_CAUSAL,
    FLOPS_MPT,
    FLOPS_NARAYANAN,
    FLOPS_TORCHTITAN,
    METRIC_HFU,
    METRIC_ITERATION_TIME,
    METRIC_TFLOPS,
    METRIC_TOKENS,
)


# ----------------------------------------------------------------------------- conventions
def narayanan_flops_per_step(m: ModelSpec, global_batch: int) -> float:
    """Narayanan et al. 2021 eq. 3: 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)) (includes recompute)."""
    return flops.megatron_hardware_flops_per_step(m, global_batch)


def mpt_flops_per_step(m: ModelSpec, global_batch: int, recompute: str) -> float:
    """llm-foundry collect_results.py: (6N + 12·L·h·s) per token, N = all parameters;
    HFU convention with activation checkpointing: 8N + 16·L·h·s (one more forward)."""
    n = flops.total_params(m)
    attn = m.layers * m.hidden * m.seq_len
    per_token = 8 * n + 16 * attn if recompute == "full" else 6 * n + 12 * attn
    return per_token * global_batch * m.seq_len


def torchtitan_flops_per_step(m: ModelSpec, global_batch: int) -> float:
    """torchtitan `get_num_flop_per_token`: 6·(N − N_emb) + 12·l·h·q·t, N = all parameters,
    N_emb = the input embedding table only (the output projection stays in N)."""
    n = flops.total_params(m) - m.vocab * m.hidden
    per_token = 6 * n + 12 * m.layers * m.q_dim * m.seq_len
    return per_token * global_batch * m.seq_len


def exact_causal_flops_per_step(m: ModelSpec, global_batch: int) -> float:
    """Exact model FLOPs with the attention score/value matmuls halved for the causal mask."""
    core = sum(flops.layer_forward_flops(m, i).attention_core for i in range(m.layers))
    per_seq = flops.model_flops_per_sequence(m) - 0.5 * (1 + flops.BACKWARD_TO_FORWARD) * core
    return global_batch * per_seq


def source_flops_per_step(
    convention: str, m: ModelSpec, global_batch: int, recompute: str, *, hardware: bool = False
) -> float:
    """FLOPs of one step as the source counts them."""
    if convention == FLOPS_NARAYANAN:
        return narayanan_flops_per_step(m, global_batch)
    if convention == FLOPS_MPT:
        return mpt_flops_per_step(m, global_batch, recompute if hardware else "none")
    if convention == FLOPS_EXACT_CAUSAL:
        return exact_causal_flops_per_step(m, global_batch)
    if convention == FLOPS_TORCHTITAN:
        return torchtitan_flops_per_step(m, global_batch)
    if hardware:
        return flops.step_flops(m, global_batch, recompute).hardware
    return global_batch * flops.model_flops_per_sequence(m)


def predicted_value(case: Case, scenario: Scenario, step_time_s: float) -> float:
    """What the simulated step time means in the row's own convention."""
    par = scenario.parallel
    n = scenario.num_gpus
    if case.metric == METRIC_ITERATION_TIME:
        return step_time_s
    if case.metric == METRIC_TOKENS:
        return par.global_batch * scenario.model.seq_len / step_time_s / n
    hardware = case.metric == METRIC_HFU
    step_flops = source_flops_per_step(
        case.flop_convention, scenario.model, par.global_batch, par.recompute, hardware=hardware
    )
    flop_per_s_per_gpu = step_flops / step_time_s / n
    if case.metric == METRIC_TFLOPS:
        return flop_per_s_per_gpu / 1e12
    # MFU/HFU in percent against the dense peak of the simulated dtype (MPT FP8: the FP8 peak)
    return 100.0 * flop_per_s_per_gpu / scenario.peak_flop_per_s
