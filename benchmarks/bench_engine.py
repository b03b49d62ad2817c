"""Engine speed (issue 16): every target of the issue, measured and marked PASS or MISS.

Not a test (no timing assertions in unit tests): run `python benchmarks/bench_engine.py` and read
the lines. Whole-process timings are paired with `mfusim presets` (Python start-up plus the
catalogs) on the same machine: the best of a few runs, in CPU seconds of the child (user +
system: robust to other load on a shared machine), with wall seconds and peak memory beside.
Children run with bytecode caching on (as an installed wheel has it), after one warm-up run.

1. `mfusim run --json` of every shipped scenario: <= 1 s each.
2. Every published-run scenario `mfusim validate` builds: <= 1 s each, whole process. All are
   timed in-process; the three slowest are then run alone (`mfusim validate --source RUN_ID`,
   which also reads the CSV and builds every row: an upper bound).
3. Megatron-Turing NLG 530B on 2,240 A100 (tp8 pp35 vp3, 280 micro-batches): <= 3x presets.
4. `mfusim validate --jobs 2` of all rows: <= 30 s and <= 500 MB (peak RSS of the process tree).
5. One run at 102,400 GPUs (Llama-3-405B, dp 800): <= 200 MB.
6. `run --samples 20` without variability: one simulation (CPU <= 1.25x one run) and a note.
7. Progress on stderr for long commands on a terminal (validate under a pseudo-terminal), none
   when stderr is not one.
8. Compressed replay (engine/steady.py) == full replay on every shipped and published-run
   scenario, with m and 4m micro-batches: worst relative difference <= 1e-9.
Pass --quick to skip items 2 and 8 (the in-process sweeps over 500+ scenarios).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

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


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "PYTHONPATH": str(ROOT)}


def _tree_peaks_mb(pid: int, peaks: dict[int, float]) -> None:
    """Record the peak resident memory (VmHWM, reset at exec) of `pid` and all its descendants."""
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    peaks[p] = max(peaks.get(p, 0.0), int(line.split()[1]) / 1024)
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError, ValueError):
            continue


@dataclass(frozen=True)
class Measured:
    wall_s: float
    cpu_s: float  # user + system of the child and its waited-for descendants
    peak_mb: float  # sum of the peak RSS of every process of the tree (sampled every 5 ms)
    stderr: str = ""


def child(args: list[str], stderr_tty: bool = False) -> Measured:
    """One `python -m simulator ...` process, its stdout discarded."""
    if stderr_tty:
        master, slave = os.openpty()
        err: Any = slave
    else:
        err = subprocess.PIPE
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "simulator", *args], stdout=subprocess.DEVNULL, stderr=err, env=_env()
    )
    chunks: list[bytes] = []
    peaks: dict[int, float] = {}
    reader = proc.stderr.fileno() if proc.stderr is not None else master
    if stderr_tty:
        os.close(slave)
    os.set_blocking(reader, False)
    while True:
        _tree_peaks_mb(proc.pid, peaks)
        try:
            while data := os.read(reader, 65536):
                chunks.append(data)
        except (BlockingIOError, OSError):
            pass
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        time.sleep(0.005)
    wall = time.perf_counter() - t0
    try:
        while data := os.read(reader, 65536):
            chunks.append(data)
    except (BlockingIOError, OSError):
        pass
    if proc.stderr is not None:
        proc.stderr.close()
    else:
        os.close(master)
    proc.returncode = os.waitstatus_to_exitcode(status)
    text = b"".join(chunks).decode(errors="replace")
    if proc.returncode != 0:
        raise SystemExit(f"mfusim {' '.join(args)} exited {proc.returncode}: {text[-500:]}")
    cpu = usage.ru_utime + usage.ru_stime
    return Measured(wall, cpu, sum(peaks.values()), text)  # ru_maxrss counts the forking parent


def best(args: list[str], n: int = 3) -> Measured:
    runs = [child(args) for _ in range(n)]
    return Measured(
        min(r.wall_s for r in runs), min(r.cpu_s for r in runs), max(r.peak_mb for r in runs), runs[0].stderr
    )


RESULTS: list[bool] = []


def report(label: str, m: Measured, unit_cpu: float, target: str, ok: bool) -> None:
    RESULTS.append(ok)
    print(
        f"{'PASS' if ok else 'MISS'}  {label:<46} {m.cpu_s:6.2f} s CPU ({m.cpu_s / unit_cpu:4.1f}x presets) "
        f"{m.wall_s:6.2f} s wall {m.peak_mb:6.0f} MB  target {target}"
    )


def validate_scenarios():
    from simulator.errors import ConfigError
    from simulator.resources import data_dir
    from simulator.validate.cases import Case, build_case
    from simulator.validate.runner import scenario_for
    from simulator.validate.runs import read_runs_csv

    runs = read_runs_csv(data_dir("scenarios") / "published" / "calibration_runs.csv")
    for case in (build_case(r) for r in runs):
        if isinstance(case, Case):
            try:
                yield case.run_id, scenario_for(case)
            except ConfigError:  # validate reports these rows as unusable
                continue


def validate_in_process() -> list[tuple[float, str]]:
    """(simulate CPU seconds, run id) of every published-run scenario, slowest first."""
    from simulator.simulate import simulate

    out = []
    for run_id, scn in validate_scenarios():
        t0 = time.process_time()
        simulate(scn)
        out.append((time.process_time() - t0, run_id))
    return sorted(out, reverse=True)


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
    child(["presets"])  # warm-up: writes the bytecode caches
    unit = best(["presets"], 5)
    report("mfusim presets (the unit)", unit, unit.cpu_s, "", True)
    for path in sorted((ROOT / "scenarios").glob("*.toml")):
        m = best(["run", str(path), "--json"])
        report(f"1. run {path.stem}", m, unit.cpu_s, "<= 1 s", m.cpu_s <= 1.0)
    if not quick:
        slow = validate_in_process()
        print(f"      {len(slow)} validate scenarios in-process: slowest {slow[0][1]} {slow[0][0]:.3f} s CPU")
        for _, run_id in slow[:3]:
            m = best(["validate", "--source", run_id, "--json"])
            report(f"2. validate --source {run_id[:26]}", m, unit.cpu_s, "<= 1 s", m.cpu_s <= 1.0)
    with tempfile.TemporaryDirectory() as tmp:
        big = Path(tmp) / "mt-nlg-530b.toml"
        big.write_text(MT_NLG_530B)
        m = best(["run", str(big), "--json"], 5)
        report(
            "3. run MT-NLG 530B, 2,240 A100, 280 mb",
            m,
            unit.cpu_s,
            "<= 3x presets",
            m.cpu_s <= 3 * unit.cpu_s,
        )
        out = Path(tmp) / "v.csv"
        m = child(["validate", "--out", str(out), "--jobs", "2"])
        ok = m.wall_s <= 30 and m.peak_mb <= 500
        report("4. validate --jobs 2 (all rows)", m, unit.cpu_s, "<= 30 s, <= 500 MB", ok)
        huge = Path(tmp) / "llama-100k.toml"
        huge.write_text(LLAMA_100K)
        m = child(["run", str(huge), "--json"])
        report("5. run Llama-3-405B on 102,400 GPUs", m, unit.cpu_s, "<= 200 MB", m.peak_mb <= 200)
    one = best(["run", str(ROOT / "scenarios" / "gpt3-175b-1024-a100.toml"), "--json"])
    m = best(["run", str(ROOT / "scenarios" / "gpt3-175b-1024-a100.toml"), "--json", "--samples", "20"])
    ok = m.cpu_s <= 1.25 * one.cpu_s and "identical" in m.stderr
    report("6. run gpt3-175b --samples 20 (no variability)", m, unit.cpu_s, "one simulation + a note", ok)
    on_tty = child(["validate", "--gpu", "H100"], stderr_tty=True)
    off_tty = child(["validate", "--gpu", "H100"])
    ok = "validate" in on_tty.stderr and "rows" in on_tty.stderr and "rows" not in off_tty.stderr
    report("7. progress: validate --gpu H100 on a terminal", on_tty, unit.cpu_s, "a bar; none off one", ok)
    if not quick:
        err, compressed, total = compressed_vs_full()
        ok = err <= 1e-9
        RESULTS.append(ok)
        print(
            f"{'PASS' if ok else 'MISS'}  8. compressed vs full replay: {compressed} of {total} "
            f"(scenario, m and 4m) extended; worst {err:.2e} relative  target <= 1e-9"
        )
    print(f"{sum(RESULTS)} of {len(RESULTS)} PASS")


if __name__ == "__main__":
    main()
