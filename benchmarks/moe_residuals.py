#!/usr/bin/env python
"""Where the MoE rows of `mfusim validate` miss time, per layer and micro-batch. DIAGNOSTIC ONLY:
the published runs are test data here, nothing is fitted to this table.

    mfusim validate --jobs 2 --out /tmp/v.csv
    python benchmarks/moe_residuals.py /tmp/v.csv [--match Qwen3_30B]

For every simulated Megatron-Bridge MoE row it prints the throughput error, the time the model
misses per (transformer layer x micro-batch) of one pipeline stage -- measured step minus
predicted step (predicted step x error), spread evenly over the stage's layers and micro-batches --
and what one MoE layer of one micro-batch costs in the model, by bucket (forward + backward +
weight gradients + recompute, milliseconds):

    attn    fused attention, forward and backward
    gemm    the layer's other GEMMs (projections, router, shared experts)
    xgemm   the routed experts' GEMMs
    xover   the eager path's residual per expert GEMM (expert_gemm_overhead_s, fitted)
    xelem   the experts' elementwise and quantization work
    perm    token permutes and sorts
    epcomm  EP communication as costed (before any overlap hides it)
    host    exposed host issue
    elem    everything else (norms, RoPE, residuals)

plus the local experts per rank and their GEMMs' mean duration (xgemm / (6 x local experts): two
GEMMs per expert, three passes each). docs/accuracy.md ("Eager expert GEMMs: what the residuals
say") reads this table.
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections import Counter
from pathlib import Path

from simulator import program as P
from simulator.network.model import default_comm_model
from simulator.validate.cases import build_case
from simulator.validate.runner import scenario_for
from simulator.validate.runs import read_runs_csv

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "scenarios" / "published" / "calibration_runs.csv"
FAMILIES = ("DeepSeekV3", "GPTOSS", "Kimi_K2", "Qwen3_30B", "Qwen3_235B")
BUCKETS = ("attn", "gemm", "xgemm", "xover", "xelem", "perm", "epcomm", "host", "elem")


def bucket(seg: P.Segment) -> str:
    name = seg.name
    if seg.category == "ep_comm":
        return "epcomm"
    if seg.category == "host_bound":
        return "host"
    if name.startswith("attention"):
        return "attn"
    if name.startswith(P.EXPERT_GEMM_OVERHEAD_NAME):
        return "xover"
    if name.startswith("expert fc") and "bias" not in name:
        return "xgemm"
    if name.startswith("expert") or "per expert" in name:
        return "xelem"
    if "permute" in name or "sort" in name:
        return "perm"
    return "gemm" if seg.flops > 0 else "elem"


def layer_buckets_ms(scn: object) -> Counter[str]:
    coster = P._Coster(scn, default_comm_model(scn))  # type: ignore[arg-type]
    coster.device, _ = P.power_limited_device(coster)
    total: Counter[str] = Counter()
    for phase in coster.layer(True)[:4]:  # forward, backward, weight gradients, recompute
        for seg in phase.parts:
            total[bucket(seg)] += seg.duration_s * 1e3
    return total


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv", type=Path, help="the --out CSV of `mfusim validate`")
    ap.add_argument("--match", default="", help="only rows whose id contains this")
    args = ap.parse_args(argv)
    runs = {r.run_id: r for r in read_runs_csv(str(RUNS))}
    header = f"{'row':56s} {'err%':>6s} {'miss':>6s} {'local':>5s} {'us/xg':>6s} " + " ".join(
        f"{b:>6s}" for b in BUCKETS
    )
    print(header)
    with args.csv.open() as fh:
        for row in csv.DictReader(fh):
            rid = row["id"]
            if row["status"] != "ok" or not rid.startswith("mbridge_") or args.match not in rid:
                continue
            if not any(f in rid for f in FAMILIES):
                continue
            run = runs[rid]
            scn = scenario_for(build_case(run), run.source)  # type: ignore[arg-type]
            par, model = scn.parallel, scn.model
            error = float(row["error_pct"]) / 100.0
            micro_batches = par.global_batch // (par.dp * par.micro_batch)
            miss_ms = float(row["step_time_s"]) * error / (micro_batches * model.layers / par.pp) * 1e3
            ms = layer_buckets_ms(scn)
            local = model.num_experts // par.ep
            per_gemm_us = ms["xgemm"] * 1e3 / (6 * local)
            cells = " ".join(f"{ms[b]:6.2f}" for b in BUCKETS)
            print(f"{rid[8:64]:56s} {100 * error:+6.1f} {miss_ms:6.2f} {local:5d} {per_gemm_us:6.1f} {cells}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
