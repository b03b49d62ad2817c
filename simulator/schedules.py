"""Pipeline schedules as pure functions: the order of work on one pipeline stage.

A schedule returns, for stage `stage` of `pp`, the list of `Task`s it runs in order.
Phases: F = forward, B = backward (the whole backward, or only its input-gradient part
when the schedule also emits W), W = weight-gradient part of the backward. The engine
derives the cross-stage dependencies from the tasks, so a new schedule is one function.

Each function reads like picotron's 1F1B: warm-up, steady state, cool-down.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Task:
    phase: str  # "F" | "B" | "W"
    microbatch: int
    chunk: int = 0


def gpipe(pp: int, vp: int, m: int, stage: int) -> list[Task]:
    """GPipe (Huang et al. 2019): all forwards, then all backwards. Bubble (p−1)/m."""
    return [Task("F", i) for i in range(m)] + [Task("B", i) for i in range(m)]


def one_f_one_b(pp: int, vp: int, m: int, stage: int) -> list[Task]:
    """1F1B (PipeDream-Flush, Narayanan et al. 2021): same bubble as GPipe, at most p
    micro-batches in flight."""
    warmup = min(pp - stage - 1, m)
    tasks = [Task("F", i) for i in range(warmup)]  # warm-up: fill the pipeline
    for i in range(m - warmup):  # steady state: one forward, one backward
        tasks += [Task("F", warmup + i), Task("B", i)]
    tasks += [Task("B", i) for i in range(m - warmup, m)]  # cool-down: drain it
    return tasks


def _interleaved_chunk(k: int, pp: int, vp: int, forward: bool) -> int:
    """Megatron's get_model_chunk_id: virtual micro-batch k → model chunk."""
    c = (k // pp) % vp
    return c if forward else vp - 1 - c


def _interleaved_microbatch(k: int, pp: int, vp: int) -> int:
    return (k // (pp * vp)) * pp + k % pp


def interleaved(pp: int, vp: int, m: int, stage: int) -> list[Task]:
    """Interleaved 1F1B (Narayanan et al. 2021 §2.2.2): each stage holds vp model chunks;
    bubble (p−1)/(v·m). Needs m to be a multiple of pp (as Megatron does)."""
    total = m * vp
    warmup = min((pp - stage - 1) * 2 + (vp - 1) * pp, total)

    def fwd(k: int) -> Task:
        return Task("F", _interleaved_microbatch(k, pp, vp), _interleaved_chunk(k, pp, vp, True))

    def bwd(k: int) -> Task:
        return Task("B", _interleaved_microbatch(k, pp, vp), _interleaved_chunk(k, pp, vp, False))

    tasks = [fwd(k) for k in range(warmup)]
    for i in range(total - warmup):
        tasks += [fwd(warmup + i), bwd(i)]
    tasks += [bwd(k) for k in range(total - warmup, total)]
    return tasks


def zero_bubble_h1(pp: int, vp: int, m: int, stage: int) -> list[Task]:
    """ZB-H1 (Qi et al. 2023, "Zero Bubble Pipeline Parallelism"): 1F1B with the backward
    split into B (input gradient, on the critical path) and W (weight gradient, deferrable).
    Stage i postpones its first (p−1−i) W's into the cool-down, where 1F1B would idle;
    memory stays that of 1F1B. Bubble ≈ (p−1)/m · (T_F + T_B − T_W)/(T_F + T_B + T_W)."""
    warmup = min(pp - stage - 1, m)
    defer = min(pp - stage - 1, m)
    tasks = [Task("F", i) for i in range(warmup)]
    pending: list[int] = []
    for i in range(m - warmup):
        tasks += [Task("F", warmup + i), Task("B", i)]
        pending.append(i)
        if len(pending) > defer:
            tasks.append(Task("W", pending.pop(0)))
    for i in range(m - warmup, m):
        tasks.append(Task("B", i))
        pending.append(i)
        tasks.append(Task("W", pending.pop(0)))
    tasks += [Task("W", i) for i in pending]
    return tasks


SCHEDULES: dict[str, Callable[[int, int, int, int], list[Task]]] = {
    "gpipe": gpipe,
    "1f1b": one_f_one_b,
    "interleaved": interleaved,
    "zb-h1": zero_bubble_h1,
}


def stage_tasks(schedule: str, pp: int, vp: int, m: int, stage: int) -> list[Task]:
    return SCHEDULES[schedule](pp, vp, m, stage)
