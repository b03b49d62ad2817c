"""The simulated value in a row's own convention (the FLOP conventions are in simulator/flops.py)."""

from __future__ import annotations

from .. import flops
from ..flops import (
    exact_causal_flops_per_step,
    mpt_flops_per_step,
    narayanan_flops_per_step,
    published_flops_per_step,
    torchtitan_flops_per_step,
)
from ..specs import Scenario
from .cases import Case
from .columns import (
    METRIC_HFU,
    METRIC_ITERATION_TIME,
    METRIC_TFLOPS,
    METRIC_TOKENS,
)


# ----------------------------------------------------------------------------- conventions
def predicted_value(case: Case, scenario: Scenario, step_time_s: float) -> float:
    """What the simulated step time means in the row's own convention."""
    par = scenario.parallel
    n = scenario.num_gpus
    if case.metric == METRIC_ITERATION_TIME:
        return step_time_s
    if case.metric == METRIC_TOKENS:
        return par.global_batch * scenario.model.seq_len / step_time_s / n
    hardware = case.metric == METRIC_HFU
    step_flops = flops.published_flops_per_step(
        case.flop_convention, scenario.model, par.global_batch, par.recompute, hardware=hardware
    )
    flop_per_s_per_gpu = step_flops / step_time_s / n
    if case.metric == METRIC_TFLOPS:
        return flop_per_s_per_gpu / 1e12
    # MFU/HFU in percent against the dense peak of the simulated dtype (MPT FP8: the FP8 peak)
    return 100.0 * flop_per_s_per_gpu / scenario.peak_flop_per_s


source_flops_per_step = published_flops_per_step  # the name validate used first

__all__ = [
    "exact_causal_flops_per_step",
    "mpt_flops_per_step",
    "narayanan_flops_per_step",
    "predicted_value",
    "source_flops_per_step",
    "torchtitan_flops_per_step",
]
