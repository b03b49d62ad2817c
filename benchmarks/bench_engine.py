"""Engine speed (issue 3): one step of Llama-3-405B on 16,384 H100 (tp 8, pp 16, dp 128) and the
same p and m at dp = 8. Prints wall-clock seconds (best of 3) and the dp ratio. Not a test:
CI machines are noisy; run `python benchmarks/bench_engine.py` and read the numbers.
"""

from __future__ import annotations

import time
from dataclasses import replace

from simulator.loading import load_scenario
from simulator.resources import data_dir
from simulator.simulate import simulate


def best_of(fn, n: int = 3) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    scn = load_scenario(data_dir("scenarios") / "llama3-405b-16k-h100.toml")
    par = scn.parallel
    m = par.num_microbatches
    small_dp = 8
    scn_small = replace(
        scn,
        num_gpus=par.tp * par.pp * small_dp,
        parallel=replace(par, dp=small_dp, global_batch=m * par.micro_batch * small_dp),
    )
    for label, s in (
        ("dp=128 (16,384 GPUs)", scn),
        (f"dp={small_dp} ({scn_small.num_gpus} GPUs)", scn_small),
    ):
        result = simulate(s)
        t = best_of(lambda s=s: simulate(s))
        print(
            f"{label:<22} p={s.parallel.pp} v={s.parallel.vp} m={s.parallel.num_microbatches}: "
            f"{t:.3f} s per simulated step, {len(result.timeline.spans)} spans, MFU {result.report.mfu:.1%}"
        )
    ratio = best_of(lambda: simulate(scn)) / best_of(lambda: simulate(scn_small))
    print(f"time(dp=128) / time(dp={small_dp}) = {ratio:.2f}  (goal: <= 1.5; one step goal: < 2 s)")


if __name__ == "__main__":
    main()
