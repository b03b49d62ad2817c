"""Sweep throughput (issue 5): GPT-3 175B on 1,024 A100 over tp {1,2,4,8} × pp {1,2,4,8,16,32}
× micro_batch {1,2,4,8} × recompute {none,selective,full} × zero {0,1} × vp {1,2,4} = 1,728
configurations (the [sweep] table of scenarios/gpt3-175b-1024-a100.toml), `--jobs 2`.

End to end: each run is a fresh `python -m simulator sweep ... --out FILE.csv` process (interpreter
start, scenario loading, pool start, every row written and flushed, the ranked table), timed from
outside. Prints configurations per second for each engine mode, then (with `--profile`) where one
process spends its time for the closed-form pass, split into the sweep's own per-configuration
overhead (construction, validation, memory model, CSV writing) and the evaluator.

Not a test: machines are noisy and shared; run `python benchmarks/bench_sweep.py [--profile]`.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from simulator.loading import load_scenario
from simulator.resources import data_dir
from simulator.sweep import plan_sweep, run_sweep

SCENARIO = data_dir("scenarios") / "gpt3-175b-1024-a100.toml"
GOAL_CONFIGS_PER_S = 300.0


def end_to_end(engine: str, jobs: int, top: int) -> tuple[float, int, str]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "sweep.csv"
        cmd = [
            sys.executable,
            "-m",
            "simulator",
            "sweep",
            str(SCENARIO),
            "--jobs",
            str(jobs),
            "--top",
            str(top),
            "--engine",
            engine,
            "--out",
            str(out),
        ]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
        wall = time.perf_counter() - t0
        rows = sum(1 for _ in out.open()) - 1
    return wall, rows, proc.stdout.splitlines()[0]


def profile_pass() -> None:
    scn = load_scenario(SCENARIO)
    with tempfile.TemporaryDirectory() as tmp:
        prof = cProfile.Profile()
        t0 = time.perf_counter()
        prof.enable()
        run_sweep(scn, engine="analytic", jobs=1, out=Path(tmp) / "p.csv")
        prof.disable()
        wall = time.perf_counter() - t0
    stats = pstats.Stats(prof)
    raw = stats.stats  # type: ignore[attr-defined]

    def cum(name: str) -> float:
        return sum(v[3] for k, v in raw.items() if k[2] == name and "sweep.py" in k[0])

    def cum_any(name: str, module: str) -> float:
        return sum(v[3] for k, v in raw.items() if k[2] == name and module in k[0])

    total = cum("run_sweep")
    evaluator = cum_any("estimate_step", "analytic.py")
    memory = cum_any("memory_footprint", "memory.py")
    build = cum("build_config")
    write = cum("write")
    n = plan_sweep(scn).size
    print(
        f"\nprofile, one process, --engine analytic ({wall:.2f} s wall under the profiler, {n} configurations):"
    )
    print(f"  evaluator (closed form)   {evaluator:6.2f} s  {1e3 * evaluator / n:6.2f} ms/config")
    print(f"    of which memory model   {memory:6.2f} s  {1e3 * memory / n:6.2f} ms/config")
    print(f"  build + validate config   {build:6.2f} s  {1e3 * build / n:6.2f} ms/config")
    print(f"  CSV writing               {write:6.2f} s  {1e3 * write / n:6.2f} ms/config")
    print(f"  sweep total               {total:6.2f} s")
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(12)
    print("\n".join(buf.getvalue().splitlines()[6:]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--top", type=int, default=10)
    ap.add_argument("--engines", default="analytic,auto", help="comma-separated: analytic, auto, des")
    ap.add_argument("--profile", action="store_true", help="also profile the closed-form pass in one process")
    args = ap.parse_args()
    n = plan_sweep(load_scenario(SCENARIO)).size
    print(f"{SCENARIO.name}: {n} configurations, --jobs {args.jobs}, --top {args.top}")
    for engine in args.engines.split(","):
        wall, rows, summary = end_to_end(engine, args.jobs, args.top)
        rate = rows / wall
        flag = "meets" if rate >= GOAL_CONFIGS_PER_S else "below"
        print(
            f"  --engine {engine:<8} {wall:6.2f} s  {rate:6.0f} configurations/s  ({flag} the {GOAL_CONFIGS_PER_S:.0f}/s goal)"
        )
    print(f"  {summary}")
    if args.profile:
        profile_pass()


if __name__ == "__main__":
    main()
