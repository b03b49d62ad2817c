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
from functools import lru_cache


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
    """ZB-H1 (Qi et al. 2023, "Zero Bubble Pipeline Parallelism", §3.1): the backward is split
    into B (input gradient, on the critical path) and W (weight gradient, deferrable). Built
    like the paper's handcrafted schedule with unit-time F, B and W: each stage prefers a ready
    B, then an F while fewer than p − i micro-batches hold activations (1F1B's memory), and
    fills what would be idle time with deferred W's. Bubble ≈ (p−1)(T_F + T_B − T_W)."""
    return list(_zb_h1_orders(pp, m)[stage])


@lru_cache(maxsize=64)
def _zb_h1_orders(pp: int, m: int) -> tuple[tuple[Task, ...], ...]:
    orders: list[list[Task]] = [[] for _ in range(pp)]
    next_f = [0] * pp
    f_done: list[set[int]] = [set() for _ in range(pp)]  # forward finished (output sent)
    b_done: list[set[int]] = [set() for _ in range(pp)]
    w_pending: list[list[int]] = [[] for _ in range(pp)]
    w_count = [0] * pp
    t = 0
    while any(w_count[s] < m for s in range(pp)):
        started: list[tuple[int, str, int]] = []
        for s in range(pp):
            in_flight = next_f[s] - w_count[s]
            ready_b = [
                i for i in sorted(f_done[s]) if i not in b_done[s] and (s == pp - 1 or i in b_done[s + 1])
            ]
            if ready_b:
                started.append((s, "B", ready_b[0]))
            elif next_f[s] < m and (s == 0 or next_f[s] in f_done[s - 1]) and in_flight < pp - s:
                started.append((s, "F", next_f[s]))
            elif w_pending[s]:
                started.append((s, "W", w_pending[s][0]))
        # all chosen tasks take one time unit; their effects are visible from t + 1
        for s, phase, i in started:
            orders[s].append(Task(phase, i))
            if phase == "F":
                next_f[s] += 1
        for s, phase, i in started:
            if phase == "F":
                f_done[s].add(i)
            elif phase == "B":
                b_done[s].add(i)
                w_pending[s].append(i)
            else:
                w_pending[s].pop(0)
                w_count[s] += 1
        t += 1
        if t > 10 * pp * m + 100:  # cannot happen for valid inputs; guards the loop
            raise RuntimeError("zb-h1 schedule construction did not converge")
    return tuple(tuple(o) for o in orders)


SCHEDULES: dict[str, Callable[[int, int, int, int], list[Task]]] = {
    "gpipe": gpipe,
    "1f1b": one_f_one_b,
    "interleaved": interleaved,
    "zb-h1": zero_bubble_h1,
}


def stage_tasks(schedule: str, pp: int, vp: int, m: int, stage: int) -> list[Task]:
    return SCHEDULES[schedule](pp, vp, m, stage)


def virtual_stages(schedule: str, pp: int, vp: int) -> tuple[tuple[int, int], ...]:
    """Where each piece of the model runs: the (stage, chunk) of virtual stage k, in model
    order (the first layers first). Activations flow k → k+1, gradients k+1 → k. Megatron's
    interleaving puts virtual stage k on stage k mod pp, chunk k div pp (layers_per_chunk in
    program.py uses the same order); a V-shaped schedule would return its own order here."""
    return tuple((k % pp, k // pp) for k in range(pp * vp))
