"""A stage's data-parallel communication stream: gradient buckets and ZeRO parameter gathers
run one after another beside the compute stream (NCCL serializes one communicator's
collectives)."""

from __future__ import annotations

from collections.abc import Sequence

from .noise import Noise
from .recorder import Recorder


class DPStream:
    def __init__(self, stage: int, recorder: Recorder, noise: Noise) -> None:
        self.stage = stage
        self.recorder = recorder
        self.noise = noise
        self.free_s = 0.0  # when the stream has finished everything launched so far

    def launch(
        self,
        durations: Sequence[float],
        launch_times: Sequence[float],
        name: str,
        chunk: int,
        message_bytes: Sequence[float] = (),
    ) -> float:
        """Queue one collective per bucket, each no earlier than its launch time; return when
        the last one ends. `message_bytes` (per bucket, optional) is recorded on the spans."""
        end = self.free_s
        sizes = list(message_bytes) if len(message_bytes) == len(durations) else [0.0] * len(durations)
        for d, t_launch, size in zip(durations, launch_times, sizes, strict=True):
            d *= self.noise.network_factor()
            start = max(t_launch, self.free_s)
            end = start + d
            self.recorder.add(
                self.stage, "dp_comm", name, start, end, stream="dp", chunk=chunk, message_bytes=size
            )
            self.free_s = end
        return end


class ParamGathers:
    """ZeRO-1/2 parameter AllGathers overlapped with the first forward of each chunk: they are
    launched at the start of the step; a chunk's first forward waits for its first bucket before
    it starts and for all of them before it hands its output on."""

    def __init__(self) -> None:
        self.first_done_s: dict[int, float] = {}
        self.all_done_s: dict[int, float] = {}
        self.seen: set[int] = set()  # chunks whose first forward has run

    def launch(
        self,
        dp: DPStream,
        gathers_s: Sequence[tuple[float, ...]],
        gathers_bytes: Sequence[tuple[float, ...]] = (),
    ) -> None:
        for c, buckets in enumerate(gathers_s):
            if not buckets:
                continue
            sizes = gathers_bytes[c] if c < len(gathers_bytes) else ()
            first = dp.launch(buckets[:1], [0.0], "param allgather", c, sizes[:1])
            self.first_done_s[c] = first
            rest = buckets[1:]
            self.all_done_s[c] = (
                dp.launch(rest, [0.0] * len(rest), "param allgather", c, sizes[1:]) if rest else first
            )

    def wait_before_s(self, chunk: int, now: float) -> float:
        """Seconds the chunk's first forward must wait before it can start."""
        done = self.first_done_s.get(chunk)
        if done is None or chunk in self.seen or now >= done:
            return 0.0
        return done - now

    def wait_after_s(self, chunk: int, now: float) -> float:
        """Seconds the chunk's first forward must wait before handing its output on."""
        done = self.all_done_s.get(chunk)
        if done is None or chunk in self.seen or now >= done:
            return 0.0
        return done - now
