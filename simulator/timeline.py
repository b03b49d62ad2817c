"""What the engine records: spans on each pipeline stage's timelines.

The `compute` stream of a stage is that GPU's own timeline: its spans are exclusive and,
once the step is done, tile [0, step_time_s] exactly (idle time is recorded as explicit
`bubble` / `dataloader` / `*_comm` spans), so attribution is a sum. Other streams (`dp`,
`pp`, `tp`, `data`) show work that runs beside it (overlapped communication, transfers, the
dataloader) for traces and plots; they are not summed into the breakdown.
"""

from __future__ import annotations

from dataclasses import dataclass

CATEGORIES = (
    "compute",
    "recompute",
    "tp_comm",
    "cp_comm",
    "ep_comm",
    "pp_comm",
    "dp_comm",
    "bubble",
    "dataloader",
    "optimizer",
    "host_bound",
    "gpu_spread",  # the expected wait for the slowest GPU (simulator/gpu_spread.py); report-level, no spans
    "other",
)
MAIN_STREAM = "compute"


@dataclass(frozen=True, slots=True)
class Span:
    stage: int
    stream: str
    category: str
    name: str
    start_s: float
    end_s: float
    microbatch: int = -1
    chunk: int = -1
    flops: float = 0.0
    message_bytes: float = 0.0
    phase: str = ""  # the schedule task's phase: "F" forward, "B" backward, "W" weight grad; "" none

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


@dataclass(frozen=True, slots=True)
class Timeline:
    spans: tuple[Span, ...]
    step_time_s: float
    num_stages: int
    by_stage_s: tuple[dict[str, float], ...] = ()  # kept instead of spans when none were recorded
    # per stage, forward then backward inputs: seconds each input had landed before its task asked
    # for it (quiet replays only; engine/steady.py's periodicity check reads it)
    slack_s: tuple[float, ...] = ()

    def breakdown_by_stage_s(self) -> list[dict[str, float]]:
        """Seconds per category on each stage's own timeline (sums to step_time_s)."""
        if self.by_stage_s:
            return [dict(d) for d in self.by_stage_s]
        out = [dict.fromkeys(CATEGORIES, 0.0) for _ in range(self.num_stages)]
        for s in self.spans:
            if s.stream == MAIN_STREAM:
                out[s.stage][s.category] += s.duration_s
        return out
