"""`mfusim presets`: the model presets, GPUs and topologies that ship with mfusim."""

from __future__ import annotations

import argparse

from ..errors import ConfigError
from ..specs import GPUSpec
from ..units import TERA, bytes_to_gib
from .common import print_json


def cmd_presets(args: argparse.Namespace) -> int:
    from .. import flops
    from ..loading import load_gpu_catalog, load_model_presets, load_scenario, model_preset
    from ..resources import data_dir, scenario_names, topology_names

    scenarios = {n: load_scenario(data_dir("scenarios") / f"{n}.toml") for n in scenario_names()}
    gpus = load_gpu_catalog()
    models = {name: model_preset(name) for name in load_model_presets()}
    topologies = topology_names()
    if args.json:
        print_json(
            {
                "scenarios": {
                    n: {
                        "name": s.name,
                        "model": s.model.name,
                        "num_gpus": s.num_gpus,
                        "gpu": s.gpu.name,
                        "topology": s.topology.name,
                    }
                    for n, s in scenarios.items()
                },
                "models": {
                    n: {
                        "params": flops.total_params(m),
                        "active_params": flops.active_params(m),
                        "layers": m.layers,
                        "hidden": m.hidden,
                        "seq_len": m.seq_len,
                    }
                    for n, m in models.items()
                },
                "gpus": {
                    n: {
                        "peak_bf16_tflops": g.peak_bf16_flop_per_s / TERA,
                        "peak_fp8_tflops": g.peak_fp8_flop_per_s / TERA,
                        "peak_mxfp8_tflops": _peak(g, "mxfp8") / TERA,
                        "peak_nvfp4_tflops": _peak(g, "nvfp4") / TERA,
                        "hbm_gib": bytes_to_gib(g.hbm_bytes),
                        "hbm_TBps": g.hbm_bandwidth_bytes_per_s / TERA,
                        "board_power_w": g.board_power_w,
                    }
                    for n, g in gpus.items()
                },
                "topologies": topologies,
            }
        )
        return 0
    # columns as wide as the longest name, so every row lines up (qwen1.5-moe-a2.7b, h100-sxm-96gb)
    sw = max([22, *map(len, scenarios)])
    gw = max([10, *(len(s.gpu.name) for s in scenarios.values())])
    print("Shipped scenarios (run by name: mfusim run NAME):")
    for n, s in scenarios.items():
        print(f"  {n:<{sw}} {s.num_gpus:>6,} x {s.gpu.name:<{gw}} {s.model.name}")
    mw = max([14, *map(len, models)])
    print("\nModel presets:")
    print(f"  {'name':<{mw}} {'params':>9} {'layers':>6} {'hidden':>6} {'heads':>5} {'kv':>4} {'seq':>6}")
    for n, m in models.items():
        active = f"  MoE, {flops.active_params(m) / 1e9:.1f}B active" if m.is_moe else ""
        print(
            f"  {n:<{mw}} {flops.total_params(m) / 1e9:>8.1f}B {m.layers:>6} {m.hidden:>6} "
            f"{m.heads:>5} {m.num_kv_heads:>4} {m.seq_len:>6}" + active
        )
    print("\nGPUs (dense peak TFLOP/s):")
    dtypes = ("bf16", "fp16", "fp8", "mxfp8", "nvfp4")
    nw = max([11, *map(len, gpus)])
    print(
        f"  {'name':<{nw}} "
        + " ".join(f"{d:>7}" for d in dtypes)
        + f" {'HBM GiB':>8} {'HBM TB/s':>9} {'board W':>8}"
    )
    for n, g in gpus.items():
        peaks = " ".join(f"{_peak(g, d) / TERA:>7.0f}" if _peak(g, d) else f"{'-':>7}" for d in dtypes)
        print(
            f"  {n:<{nw}} {peaks} "
            f"{bytes_to_gib(g.hbm_bytes):>8.0f} {g.hbm_bandwidth_bytes_per_s / TERA:>9.2f} {g.board_power_w:>8.0f}"
        )
    print("\nTopologies:")
    for t in topologies:
        print(f"  {t}")
    return 0


def _peak(gpu: GPUSpec, dtype: str) -> float:
    """The GPU's dense peak FLOP/s in `dtype`; 0 where it has none (listed as "-")."""
    try:
        return gpu.peak_flop_per_s(dtype)
    except ConfigError:
        return 0.0
