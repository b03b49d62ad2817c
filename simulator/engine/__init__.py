"""The discrete-event engine: one training step of one representative pipeline.

This is the only package that imports simpy. It replays a costed `Program`
(simulator/program.py) under a pipeline schedule (simulator/schedules.py), in named parts:

* routing.py — pure functions: which stage and chunk a task's input comes from and its output
  goes to (the schedule module supplies the order of virtual stages);
* stage.py — one process per pipeline stage: for each task, receive → compute → send; then
  the exposed gradient reduction, the pipeline-wide sync and the optimizer;
* clock.py — the mailbox of point-to-point arrivals and the barrier, in simpy time or in each
  stage's own time (the fast path when nothing random or shared is involved);
* dpstream.py — each stage's data-parallel stream (gradient buckets, ZeRO parameter gathers);
* dataloader.py — workers, a prefetch buffer and its steady state across steps;
* noise.py — seeded jitter and stragglers; recorder.py — spans, or seconds per category;
* replay.py — `run_step`, the front door.

DP replicas are identical, so only one pipeline is simulated: the work is O(p · v · m),
independent of dp. Every wait is recorded as a span of the category that caused it, so each
stage's main timeline tiles [0, step_time] (simulator/timeline.py). No global state.
`simulate()` (cost, replay, measure) lives one layer up, in simulator/simulate.py.
"""

from .dataloader import LoaderState, steady_loader_state
from .noise import lognormal
from .replay import run_step

__all__ = ["LoaderState", "lognormal", "run_step", "steady_loader_state"]
