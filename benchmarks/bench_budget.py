"""Measure the per-unit costs behind simulator/budget.py on this machine and print them next to
the constants the budget uses (issue 18). Run: python benchmarks/bench_budget.py [--tasks N]."""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from pathlib import Path

from simulator import budget
from simulator.loading import load_scenario
from simulator.simulate import simulate
from simulator.trace import write_chrome_trace

SCENARIO = """\
name = "budget probe"
[model]
layers = 8
hidden = 512
heads = 8
vocab = 32000
seq_len = 1024
[cluster]
topology = "dgx-a100"
num_gpus = 8
[parallel]
pp = 8
global_batch = {gb}
[variability]
compute_jitter = {jitter}
"""


def _load(tmp: Path, gb: int, jitter: float):
    path = tmp / f"s{gb}-{jitter}.toml"
    path.write_text(SCENARIO.format(gb=gb, jitter=jitter))
    return load_scenario(path)


def _timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--microbatches", type=int, default=2000)
    m = ap.parse_args().microbatches
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        quiet, jittered = _load(tmp, m, 0.0), _load(tmp, m, 0.05)
        tasks = budget.pipeline_tasks(quiet)
        _, t_quiet = _timed(lambda: simulate(quiet))
        _, t_simpy = _timed(lambda: simulate(jittered))
        detailed, t_detail = _timed(lambda: simulate(quiet, detail=True))
        spans = len(detailed.timeline.spans)
        _, t_trace = _timed(lambda: write_chrome_trace(detailed.timeline, detailed.report, tmp / "t.json"))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(f"{tasks:,} tasks, {spans:,} spans (estimate {budget.estimated_spans(quiet):,})")
    print(f"quiet step (extended):   {t_quiet:8.2f} s")
    print(
        f"simpy step:              {1e6 * t_simpy / tasks:8.1f} µs/task  (budget {1e6 * budget.SIMPY_S_PER_TASK:.0f})"
    )
    print(
        f"spans recorded:          {1e6 * t_detail / spans:8.1f} µs/span (budget {1e6 * budget.SPAN_SIM_S:.0f})"
    )
    print(
        f"trace written:           {1e6 * t_trace / spans:8.1f} µs/span (budget {1e6 * budget.SPAN_TRACE_S:.0f})"
    )
    print(
        f"peak memory:             {rss / spans:8.0f} B/span  (budget {budget.SPAN_SIM_BYTES + budget.SPAN_TRACE_BYTES:.0f})"
    )


if __name__ == "__main__":
    main()
