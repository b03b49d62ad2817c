#!/usr/bin/env python
"""Where the model puts a MoE launch recipe's gain, item by item. DIAGNOSTIC ONLY: the published
runs are test data here, nothing is fitted to this table.

    python benchmarks/moe_recipe_steps.py [ROW_ID ...]

For each Megatron-Bridge MoE row (default: the Qwen3-30B-A3B 26.04.01 rows of GB300, GB200 and
B300, whose 26.06 recipes differ from them only in these items) it simulates the row's scenario,
then applies the items the 26.06 full-iteration recipe adds (scripts/performance/configs/qwen/
qwen3_workload_base_configs.py and utils/overrides.py at Megatron-Bridge v0.5.0 fcbb6031), one at a
time and cumulatively, and prints the step time and the throughput ratio to the row's own recipe:

    + EP overlap        moe_a2a_overlap: overlap_moe_expert_parallel_comm and delay_wgrad_compute
    + fused grouped MLP cutedsl_fused_grouped_mlp (TE op fuser), with moe_a2a_overlap the
                        high-priority all-to-all stream
    + full iteration    cuda_graph_impl = "full_iteration" (with moe_expert_rank_capacity_factor:
                        the sync-free HybridEP dispatch)

The 26.06 recipe's fp8_dot_product_attention and moe_paged_stash are not simulated (validate lists
them); docs/accuracy.md ("Qwen3-30B-A3B, 26.04.01 -> 26.06") says why.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from simulator.specs import Scenario
from simulator.validate.cases import build_case
from simulator.validate.runner import scenario_for, simulate_report
from simulator.validate.runs import read_runs_csv

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "scenarios" / "published" / "calibration_runs.csv"
DEFAULT_ROWS = tuple(
    f"mbridge_26.04.01_Qwen3_30B_a3B_DGX-{gpu}_8gpu_mxfp8" for gpu in ("GB300", "GB200", "B300")
)


def recipe_steps(scn: Scenario) -> list[tuple[str, Scenario]]:
    """The row's scenario, then the 26.06 full-iteration recipe's items added cumulatively."""
    overlap = dataclasses.replace(
        scn, parallel=dataclasses.replace(scn.parallel, ep_comm_overlap=True, delay_wgrad_compute=True)
    )
    fused = dataclasses.replace(
        overlap,
        kernels=dataclasses.replace(overlap.kernels, fused_grouped_mlp=True, ep_comm_high_priority=True),
    )
    full = dataclasses.replace(
        fused,
        kernels=dataclasses.replace(fused.kernels, cuda_graph_impl="full_iteration", cuda_graph_modules=()),
    )
    return [
        ("row's recipe", scn),
        ("+ EP overlap (+ delay_wgrad)", overlap),
        ("+ fused grouped MLP", fused),
        ("+ full-iteration CUDA graph", full),
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("rows", nargs="*", default=list(DEFAULT_ROWS), help="validate row ids")
    args = ap.parse_args(argv)
    runs = {r.run_id: r for r in read_runs_csv(str(RUNS))}
    for rid in args.rows:
        run = runs[rid]
        scn = scenario_for(build_case(run), run.source)
        print(rid)
        base = 0.0
        for name, s in recipe_steps(scn):
            step = float(simulate_report(s).step_time_s)
            base = base or step
            print(f"  {name:32s} step {step:8.3f} s  throughput x{base / step:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
