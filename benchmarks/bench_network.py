"""Topology comm model speed (issue 4): cost the collectives of a 16,384-GPU H100 cluster
(tp 8, pp 16, 2:1 oversubscribed), then the per-call time of a repeated (memoized) question.

Not a test: machines are noisy and shared; run `python benchmarks/bench_network.py` and read
the numbers (the goal when written: under 1 s for the first pass, under 50 µs per cached call).
"""

from __future__ import annotations

import time

from simulator.loading import scenario_from_dict
from simulator.network import TopologyCommModel

MiB, GiB = 2**20, 2**30


def main() -> None:
    scn = scenario_from_dict(
        {
            "model": {
                "name": "t",
                "layers": 64,
                "hidden": 4096,
                "heads": 32,
                "vocab": 32000,
                "seq_len": 2048,
            },
            "cluster": {"topology": "dgx-h100", "num_gpus": 16384, "inter_node": {"oversubscription": 2.0}},
            "parallel": {"tp": 8, "pp": 16, "global_batch": 128 * 16 * 2},
        }
    )
    t0 = time.perf_counter()
    model = TopologyCommModel(scn)
    for stage in range(16):
        for kind, axis, size in (
            ("allreduce", "tp", 48 * MiB),
            ("reducescatter", "dp", GiB),
            ("allgather", "dp", GiB),
            ("allreduce", "dp", 80 * MiB),
            ("sendrecv", "pp", 24 * MiB),
        ):
            model.collective(kind, axis, size, stage)
    first_s = time.perf_counter() - t0
    n = 10_000
    t0 = time.perf_counter()
    for _ in range(n):
        model.collective("allreduce", "dp", 80 * MiB, 3)
    cached_s = (time.perf_counter() - t0) / n
    print(f"16,384 GPUs: first pass over 80 collectives {first_s:.3f} s; cached call {cached_s * 1e6:.2f} µs")


if __name__ == "__main__":
    main()
