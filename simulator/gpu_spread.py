"""Per-GPU speed spread: a synchronous step waits for the slowest of its N GPUs (issue 12, scale).

GPUs of one SKU do not run a saturating GEMM equally fast. Under the board power limit each chip
settles at its own clock (manufacturing variation in leakage and the V-F curve, a board's shared
power and cooling): Sinha et al., "Not All GPUs Are Created Equal: Characterizing Variability in
Large-Scale, Accelerator-Rich Systems", SC22 (arXiv 2208.11035), measured 8% average (max 22%)
performance variation across same-SKU GPUs of four clusters, outliers up to 1.5× slower than the
median. The finder the kernel model's sustained clock comes from measured it on one node
(stas00/ml-engineering, branch fast-mamf at 082816f, compute/accelerator/benchmarks/README.md,
"What we measured: alone vs all-8 concurrent"): the maximum sustainable matmul (MSMF) of all 8
GPUs of a node × 5 rounds (n = 40) spans **4.5%** of its mean on H200 SXM (698.6 TFLOP/s,
1,405–1,527 MHz) and **10.4%** on B200 (1,426.4 TFLOP/s, 1,228–1,410 MHz).

A training step synchronizes every GPU: a TP/CP group inside every layer, the pipeline stages per
micro-batch (the slowest stage paces 1F1B), the data-parallel replicas at the gradient
reduction. So the compute of a step runs at the pace of the slowest of the job's N GPUs. With
per-GPU time multipliers 1 + σ·Z (Z standard normal, σ the coefficient of variation of the
per-GPU speed, `[cluster] gpu_speed_spread`) the expected step compute is the nominal one times

    1 + σ · E[max of N standard normals]

(order statistics; E[M_8] = 1.42, E[M_128] = 2.59, E[M_1024] = 3.25, E[M_16384] = 3.97). σ comes
from the range of the n = 40 node samples: the expected range of 40 normal draws is d₂(40) =
4.322σ, so H200 σ = 4.5% / 4.322 = 1.04% and B200 σ = 10.4% / 4.322 = 2.41% (kernels.toml
`[gpu_speed_spread]` per architecture; Hopper takes the H200 figure, GH100 at the same 700 W;
Ampere and older have no same-protocol figure and keep 0). The mean of the concurrent samples
(−0.6% / −2.0% against one GPU alone) is not added: a uniform level is what the fitted
`sustained_clock_fraction` already carries. The spread is what grows with N.

What is scaled: the kernels of the busiest stage (its compute and recompute) and the pipeline
bubble they cause, i.e. max over stages of (compute + recompute) × (1 + the schedule's closed-form
bubble fraction, schedules.bubble_closed_form_s with T_B = T_W = T_F). Exposed communication,
the optimizer, host and data-loader waits are not. The bubble is taken from the schedule, not
from the engine's `bubble` seconds: those also hold idle time behind other stages' exposed
communication, which a faster network turns into bubble (a faster NIC must never lengthen the
step). The wait σ·E[M_N] × those seconds is added to the step as its own breakdown category
`gpu_spread`. It is exact when the slowest stage
paces the whole step (pp = 1, or many micro-batches per pipeline); the fill and drain of a
pipeline are paced by every stage in turn rather than the slowest, so there it is an upper
bound, by at most σ·(E[M_N] − E[M_tp·cp]) × the bubble share (tests/test_gpu_spread.py checks
both against a Monte Carlo of the 1F1B schedule). A report-level expected wait: traces and
`--samples` draws do not place it on the timeline.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .specs import Scenario

SPREAD_CATEGORY = "gpu_spread"
# the categories the slowest GPU stretches: its own kernels (and, through the schedule's bubble
# fraction, the idle time they cause on the other stages)
PACED_CATEGORIES = ("compute", "recompute")

_GRID_STEP = 1.0e-3
_GRID_LIMIT = 9.0  # 1 − Φ(9) ≈ 1e-19: N up to 1e6 GPUs loses nothing beyond this


@lru_cache(maxsize=256)
def expected_max_std_normal(n: int) -> float:
    """E[max of n independent standard normal draws], by quadrature of
    E[M] = ∫₀^∞ (1 − Φ(x)ⁿ) dx − ∫_{−∞}^0 Φ(x)ⁿ dx (trapezoid, step 0.001 on [−9, 9])."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    if n == 1:
        return 0.0
    steps = int(round(_GRID_LIMIT / _GRID_STEP))
    total = 0.0
    for i in range(-steps, steps + 1):
        x = i * _GRID_STEP
        cdf_n = (0.5 * math.erfc(-x / math.sqrt(2.0))) ** n
        f = (1.0 - cdf_n) if x >= 0 else -cdf_n
        weight = 0.5 if i in (-steps, 0, steps) else 1.0
        if i == 0:  # both integrands meet at 0: 1 − Φ(0)ⁿ from the right, −Φ(0)ⁿ from the left
            total += 0.5 * (1.0 - cdf_n) * _GRID_STEP + 0.5 * (-cdf_n) * _GRID_STEP
            continue
        total += weight * f * _GRID_STEP
    return total


def gpu_speed_spread(scn: Scenario) -> float:
    """σ of the per-GPU speed: `[cluster] gpu_speed_spread`, else the architecture's cited value."""
    given = scn.topology.gpu_speed_spread
    if given is not None:
        return given
    return architecture_spread(scn.gpu.name)


@lru_cache(maxsize=64)
def architecture_spread(gpu_name: str) -> float:
    """The cited σ of the GPU's architecture (kernels.toml `[gpu_speed_spread]`; 0 where none)."""
    from .kernel_catalog import architecture, kernel_data

    return float(kernel_data().get("gpu_speed_spread", {}).get(architecture(gpu_name), 0.0))


def slowest_gpu_factor(spread: float, num_gpus: int) -> float:
    """The expected extra time, as a fraction of the paced seconds: σ · E[max of N normals]."""
    if spread <= 0.0:
        return 0.0
    return spread * expected_max_std_normal(num_gpus)


def bubble_fraction(schedule: str, pp: int, vp: int, m: int) -> float:
    """The schedule's pipeline bubble as a fraction of a stage's busy time (closed form, balanced
    stages, T_B = T_W = T_F): (p−1)/(v·m) for 1F1B / interleaved, less for the zero-bubble and
    DualPipe schedules (schedules.bubble_closed_form_s)."""
    from .schedules import bubble_closed_form_s

    if pp <= 1 or m <= 0:
        return 0.0
    return max(0.0, bubble_closed_form_s(schedule, pp, vp, m, 1.0, 1.0, 1.0) / (3.0 * m))


# Idle time in which a stage's GPUs wait for input data: a slower GPU finishes its kernels inside it
# instead of delaying the step (each GPU's loader, not its neighbours' kernels, paces a
# loader-bound step).
SLACK_CATEGORIES = ("dataloader",)


def spread_wait_s(by_stage: Sequence[Mapping[str, float]], factor: float, bubble: float = 0.0) -> float:
    """The step's wait for its slowest GPU: over the stages, factor × the stage's paced seconds
    × (1 + the schedule's bubble fraction `bubble`), less the time the stage already waits for
    its data (SLACK_CATEGORIES), which the slower GPU's extra kernel time fills first. The paced
    seconds include the slowdown charged on hidden communication, which grows when more
    bandwidth hides more of it; the pass itself then shortens by more than that, and in a
    loader-bound step the data wait grows by what the pass lost, so more bandwidth anywhere
    never lengthens the step through this wait."""
    if factor <= 0.0 or not by_stage:
        return 0.0
    return max(
        0.0,
        max(
            factor * sum(s.get(c, 0.0) for c in PACED_CATEGORIES) * (1.0 + bubble)
            - sum(s.get(c, 0.0) for c in SLACK_CATEGORIES)
            for s in by_stage
        ),
    )
