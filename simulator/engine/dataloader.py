"""The dataloader: workers load micro-batches into a bounded prefetch buffer; the first
pipeline stage takes one per micro-batch and waits when the buffer is empty.

The buffer at the start of a step is what the previous steps left. `LoaderModel` is the loader
on its own (deterministic latency, no simpy): fed the times the first stage asks for data over
a few previous steps, it gives the state the step starts from (`steady_loader_state`).
`SimpyLoader` is the same loader inside the step's replay, with seeded latency jitter.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from ..program import Program
from .noise import lognormal
from .recorder import Recorder

if TYPE_CHECKING:
    import simpy

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class LoaderState:
    """The dataloader at the start of a step: batches buffered, and when each worker's
    batch in hand is ready (0 = ready now)."""

    buffered: int
    worker_ready_s: tuple[float, ...]

    def close_to(self, other: LoaderState, tol_s: float) -> bool:
        """The same buffer, and every worker ready within `tol_s` of the other's."""
        return self.buffered == other.buffered and all(
            abs(x - y) <= tol_s for x, y in zip(self.worker_ready_s, other.worker_ready_s, strict=True)
        )


MAX_LOADER_STEPS = 64  # consecutive steps searched for the loader's cycle


def loader_cycle(
    start: LoaderState, step: Callable[[LoaderState], tuple[T, LoaderState]], tol_s: float
) -> tuple[list[T], int, bool]:
    """Steps played one after another, each from the loader state the previous one left, from
    `start` until a step ends in a state an earlier step started from (within `tol_s` per
    worker): the steps from that one on are one whole cycle. Returns every step's result, the
    index where the cycle begins, and whether a cycle was found within MAX_LOADER_STEPS (if not,
    the cycle is taken as the later half, past the transient). Used alike by the engine
    (engine/replay.py) and the closed form (analytic.py)."""
    starts, results = [start], []
    for _ in range(MAX_LOADER_STEPS):
        result, end = step(starts[-1])
        results.append(result)
        seen = [j for j, s in enumerate(starts) if s.close_to(end, tol_s)]
        if seen:
            return results, seen[-1], True
        starts.append(end)
    return results, len(results) // 2, False


class LoaderModel:
    """Workers that each load one batch in `latency_s`, put it into a buffer of `capacity`
    batches (or hold it while the buffer is full), and start the next one when theirs is taken."""

    def __init__(self, latency_s: float, workers: int, capacity: int, start_s: float, empty: bool) -> None:
        self.latency_s, self.workers, self.capacity = latency_s, workers, capacity
        if empty:
            # the buffer runs dry every step: workers busy, nothing buffered, and out of phase by
            # latency/workers. Workers that started together stay in phase only with exactly equal
            # latencies; any spread between their loads drifts them apart, and a loader that cannot
            # keep up has no idle worker to bring them back together. In phase, the batches came in
            # bursts of `workers`, consecutive steps alternated short and long, and which one the
            # engine reported depended on the step's length: a faster GPU made a loader-bound
            # step up to 9% slower (fuzz audit). Evenly spread, the loader delivers one batch every
            # latency/workers, its mean rate.
            self.done_s = [start_s + latency_s * (w + 1) / workers for w in range(workers)]
            self.holding = [False] * workers
            self.buffered = 0
        else:  # the loader keeps up: buffer full, every worker holding a finished batch
            self.done_s = [start_s] * workers
            self.holding = [True] * workers
            self.buffered = capacity

    @classmethod
    def from_state(cls, latency_s: float, workers: int, capacity: int, state: LoaderState) -> LoaderModel:
        """The loader at the start of a step (time 0) from `state`, as SimpyLoader starts it: the
        buffered batches in the buffer, each worker putting its batch in hand when it is ready
        (at once when ready now; in worker order at equal times)."""
        model = cls(latency_s, workers, capacity, 0.0, empty=True)
        model.buffered = state.buffered
        model.done_s = list(state.worker_ready_s)
        model.advance(0.0)
        return model

    def advance(self, t: float) -> None:
        """Let every load that finishes by `t` land in the buffer (in order of finishing)."""
        while True:
            running = [w for w in range(self.workers) if not self.holding[w] and self.done_s[w] <= t]
            if not running:
                return
            w = min(running, key=lambda i: self.done_s[i])
            if self.buffered < self.capacity:
                self.buffered += 1
                self.done_s[w] += self.latency_s
            else:
                self.holding[w] = True

    def take(self, t: float) -> float:
        """Take one batch asked for at `t`; return when it was got (later than t if none was ready)."""
        self.advance(t)
        if self.buffered == 0:
            w = min((i for i in range(self.workers) if not self.holding[i]), key=lambda i: self.done_s[i])
            t = self.done_s[w]
            self.advance(t)
        self.buffered -= 1
        waiting = [w for w in range(self.workers) if self.holding[w]]
        if waiting:  # the oldest held batch takes the freed slot; that worker starts anew
            w = waiting[0]
            self.holding[w] = False
            self.buffered += 1
            self.done_s[w] = t + self.latency_s
        return t

    def state(self, shift_s: float) -> LoaderState:
        """The state at a step start `shift_s` later than planned (time 0 of the next step)."""
        self.advance(shift_s)
        ready = tuple(
            0.0 if self.holding[w] else max(0.0, self.done_s[w] - shift_s) for w in range(self.workers)
        )
        return LoaderState(self.buffered, ready)


def steady_loader_state(
    latency_s: float,
    workers: int,
    capacity: int,
    request_times_s: list[float],
    period_s: float,
    periods: int = 4,
) -> LoaderState:
    """Run the loader alone over `periods` previous steps whose stage 0 would ask for batches at
    `request_times_s` (relative to each step's start, no stalls); return its state at the start
    of the next step. It starts full when the loader keeps up on average and empty when it
    cannot (then the buffer is dry at every step start, and starting full would take many
    periods to drain); when a batch is late, the rest of the schedule shifts by the wait, as
    the stalled pipeline would."""
    start = -periods * period_s
    loader_bound = len(request_times_s) * latency_s / workers > period_s
    model = LoaderModel(latency_s, workers, capacity, start, empty=loader_bound)
    shift = 0.0
    for k in range(periods):
        for r in request_times_s:
            asked = start + k * period_s + r + shift
            shift += model.take(asked) - asked
    return model.state(shift)


class SimpyLoader:
    """The loader inside one step's replay: worker processes fill a simpy Store; the first
    stage's forward takes from it, and the time it waits is recorded as `dataloader`."""

    def __init__(self, env: simpy.Environment, program: Program, state: LoaderState, recorder: Recorder):
        self.env, self.program, self.recorder = env, program, recorder
        import simpy

        capacity = max(1, program.dataloader_workers * program.dataloader_prefetch)
        self.store = simpy.Store(env, capacity=capacity)
        self.store.items.extend(range(state.buffered))
        self.requests_s: list[float] = []  # when stage 0 would have asked, had it never waited
        self.wait_s = 0.0
        self.busy_until_s = [0.0] * program.dataloader_workers  # when each worker's load in hand is done
        import numpy as np

        self.rng: Any = np.random.default_rng(program.dataloader_seed)
        for w in range(program.dataloader_workers):
            env.process(self._worker(w, state.worker_ready_s[w]))

    def _worker(self, w: int, first_s: float):
        env, latency = self.env, self.program.dataloader_latency_s
        if first_s > 0:  # finishing the batch it was loading when the step began
            self.busy_until_s[w] = first_s
            yield env.timeout(first_s)
            self.recorder.add(0, "dataloader", f"load (worker {w})", 0.0, env.now, stream="data")
        yield self.store.put(w)
        while True:
            cv = self.program.dataloader_jitter
            jitter = lognormal(self.rng, cv) if cv > 0 else 1.0
            start = env.now
            self.busy_until_s[w] = start + latency * float(jitter)
            yield env.timeout(latency * float(jitter))
            self.recorder.add(0, "dataloader", f"load (worker {w})", start, env.now, stream="data")
            yield self.store.put(w)

    def state_at(self, end_s: float) -> LoaderState:
        """The loader when the next step starts at `end_s`: the batches in the buffer, and when
        each worker's load in hand is done (0: done, putting it or holding it for a full buffer)."""
        ready = tuple(max(0.0, t - end_s) for t in self.busy_until_s)
        return LoaderState(len(self.store.items), ready)

    def take(self, stage: int, microbatch: int):
        """Stage `stage` takes one batch (a generator to `yield from`)."""
        t0 = self.env.now
        self.requests_s.append(t0 - self.wait_s)
        yield self.store.get()
        self.wait_s += self.env.now - t0
        self.recorder.add(stage, "dataloader", "wait for data", t0, self.env.now, microbatch=microbatch)
