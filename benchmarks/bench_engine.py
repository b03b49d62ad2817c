"""Engine speed (issue 16): the targets, as ratios to Python start-up, on this machine.

Not a test (no timing assertions in unit tests): run `python benchmarks/bench_engine.py` and read
the numbers. Whole-process timings are the best of a few paired runs, in CPU seconds of the
child (user + system: robust to other load on a shared machine) and wall seconds.

1. `mfusim presets` — the unit (Python start-up plus the catalogs).
2. `mfusim run --json` of every shipped scenario (target <= 1 s each).
3. Every published-run scenario `mfusim validate` builds: in-process simulate time of the slowest
   plus `run`'s start-up (target <= 1 s each).
4. Megatron-Turing NLG 530B on 2,240 A100 (tp8 pp35 vp3, 280 micro-batches) (target <= 3x presets).
5. `mfusim validate` of all rows (target <= 30 s, <= 500 MB).
6. One run at ~100k GPUs (Llama-3-405B, dp 800) (target <= 200 MB).
7. Compressed replay (engine/steady.py) == full replay on every shipped and published-run
   scenario: the worst relative difference (target <= 1e-9), and how many were compressed.
Pass --quick to skip items 3 and 7 (the in-process sweeps over 400+ scenarios).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MT_NLG_530B = """
name = "MT-NLG 530B on 2240 A100"
[model]
preset = "gpt3-530b"
[cluster]
topology = "dgx-a100"
num_gpus = 2240
[parallel]
tp = 8
pp = 35
vp = 3
dp = 8
micro_batch = 1
global_batch = 2240
schedule = "interleaved"
sequence_parallel = true
recompute = "full"
zero = 1
[precision]
dtype = "bf16"
"""
LLAMA_100K = """
name = "Llama-3-405B on 102400 H100"
[model]
preset = "llama3-405b"
[cluster]
topology = "dgx-h100"
num_gpus = 102400
[parallel]
tp = 8
pp = 16
dp = 800
vp = 4
micro_batch = 1
global_batch = 12800
sequence_parallel = true
zero = 1
[precision]
dtype = "bf16"
"""


def child(args: list[str]) -> tuple[float, float, float]:
    """(wall s, CPU s, peak RSS MB) of one `python -m simulator ...` process."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "simulator", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"mfusim {' '.join(args)} exited {proc.returncode}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def best(args: list[str], n: int = 3) -> tuple[float, float, float]:
    runs = [child(args) for _ in range(n)]
    return min(r[0] for r in runs), min(r[1] for r in runs), max(r[2] for r in runs)


def report(label: str, measured: tuple[float, float, float], unit_cpu: float, target: str) -> None:
    wall, cpu, mb = measured
    print(
        f"{label:<44} {cpu:6.2f} s CPU ({cpu / unit_cpu:5.1f}x presets) {wall:6.2f} s wall {mb:6.0f} MB  {target}"
    )


def validate_scenarios():
    from simulator.resources import data_dir
    from simulator.validate.cases import Case, build_case
    from simulator.validate.runner import scenario_for
    from simulator.validate.runs import read_runs_csv

    runs = read_runs_csv(data_dir("scenarios") / "published" / "calibration_runs.csv")
    from simulator.errors import ConfigError

    for case in (build_case(r) for r in runs):
        if isinstance(case, Case):
            try:
                yield case.run_id, scenario_for(case)
            except ConfigError:  # validate reports these rows as unusable
                continue


def slowest_validate_scenario() -> tuple[str, float, int]:
    from simulator.simulate import simulate

    worst, name, n = 0.0, "", 0
    for run_id, scn in validate_scenarios():
        t0 = time.process_time()
        simulate(scn)
        dt = time.process_time() - t0
        n += 1
        if dt > worst:
            worst, name = dt, run_id
    return name, worst, n


def compressed_vs_full() -> tuple[float, int, int]:
    from simulator.engine import steady
    from simulator.engine.replay import steady_step
    from simulator.loading import load_scenario
    from simulator.program import build_program
    from simulator.timeline import CATEGORIES

    scenarios = [load_scenario(p) for p in sorted((ROOT / "scenarios").glob("*.toml"))]
    scenarios += [scn for _, scn in validate_scenarios()]
    worst, compressed = 0.0, 0
    for scn in scenarios:
        for factor in (1, 4):
            program = build_program(scn)
            program = replace(program, num_microbatches=factor * program.num_microbatches)
            ext = steady.extended_step(program, lambda p: steady_step(p, compress=False))
            if ext is None:
                continue
            full = steady_step(program, compress=False)
            compressed += 1
            errs = [abs(ext.step_time_s - full.step_time_s)]
            for a, b in zip(ext.breakdown_by_stage_s(), full.breakdown_by_stage_s(), strict=True):
                errs += [abs(a[c] - b[c]) for c in CATEGORIES]
            worst = max(worst, max(errs) / full.step_time_s)
    return worst, compressed, 2 * len(scenarios)


def main() -> None:
    quick = "--quick" in sys.argv
    unit = best(["presets"], 5)
    report("mfusim presets (the unit)", unit, unit[1], "")
    for path in sorted((ROOT / "scenarios").glob("*.toml")):
        report(f"run {path.stem}", best(["run", str(path), "--json"]), unit[1], "target <= 1 s")
    with tempfile.TemporaryDirectory() as tmp:
        big = Path(tmp) / "mt-nlg-530b.toml"
        big.write_text(MT_NLG_530B)
        report(
            "run MT-NLG 530B, 2,240 A100, 280 mb", best(["run", str(big), "--json"]), unit[1], "target <= 3x"
        )
        huge = Path(tmp) / "llama-100k.toml"
        huge.write_text(LLAMA_100K)
        report(
            "run Llama-3-405B on 102,400 GPUs",
            best(["run", str(huge), "--json"], 1),
            unit[1],
            "target <= 200 MB",
        )
        out = Path(tmp) / "v.csv"
        report(
            "validate (all rows)", best(["validate", "--out", str(out)], 1), unit[1], "target <= 30 s, 500 MB"
        )
    if quick:
        return
    name, worst, n = slowest_validate_scenario()
    print(
        f"slowest of {n} validate scenarios in-process: {name} {worst:.3f} s CPU (+ start-up; target <= 1 s)"
    )
    err, compressed, total = compressed_vs_full()
    print(
        f"compressed vs full replay: {compressed} of {total} (scenario, m and 4m) extended; worst {err:.2e} rel"
    )


if __name__ == "__main__":
    main()
