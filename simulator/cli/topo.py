"""`mfusim topo TOPOLOGY [--gpus N] [--json]`: what a topology file describes, in numbers."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .common import print_json

DEFAULT_SCALABLE_UNITS = 4  # summary size when --gpus is not given: four SUs (a small SuperPOD)


def _gpus_line(s: dict[str, Any]) -> str:
    """'1,024 = 128 nodes x 8'; a partly used node said so (12 GPUs printed '12 = 2 nodes x 8')."""
    gpus, nodes, per_node = s["num_gpus"], s["num_nodes"], s["gpus_per_node"]
    if gpus == nodes * per_node:
        return f"{gpus:,} = {nodes:,} node{'s' if nodes != 1 else ''} x {per_node}"
    last = gpus - (nodes - 1) * per_node
    if nodes == 1:
        return f"{gpus:,} of one node's {per_node}"
    return f"{gpus:,} on {nodes:,} nodes of {per_node} (the last uses {last})"


def _text(s: dict[str, Any]) -> str:
    rows = [
        ("topology", f"{s['name']}  ({s['gpu']})"),
        ("GPUs", _gpus_line(s)),
        (
            "intra-node",
            f"{s['intra_node_fabric']}{' + NVLS' if s['nvls'] else ''}, "
            f"{s['intra_node_GBps_per_gpu']:.0f} GB/s per GPU per direction, {s['intra_node_latency_us']:g} us",
        ),
        (
            "inter-node",
            f"{s['inter_node_fabric']}, {s['nics_per_node']} x {s['nic_Gbps']:g} Gb/s NICs per node "
            f"= {s['nic_GBps_per_node']:.0f} GB/s ({s['nic_GBps_per_gpu']:.1f} GB/s per GPU), "
            f"{s['inter_node_latency_us']:g} us",
        ),
        (
            "switches",
            "none (one node: no inter-node network)"
            if s["num_nodes"] < 2
            else f"{s['num_scalable_units']} scalable unit(s) of {s['nodes_per_leaf']} nodes, "
            f"{s['num_leaf_switches']} leaf, {s['num_spine_switches']} spine"
            + (f", {s['num_core_switches']} core" if s["num_core_switches"] else "")
            + f" ({s['switch_radix']}-port"
            + (f", {s['planes']} planes)" if s["planes"] > 1 else ")"),
        ),
        (
            "tiers",
            "; ".join(
                f"{t['name']}: {t['gpus_per_group']:,} GPUs per group, {t['oversubscription']:g}:1"
                for t in s["tiers"]
            ),
        ),
        (
            "oversubscription",
            f"{s['oversubscription']:g}:1  (leaf uplinks {s['leaf_uplink_GBps']:.0f} GB/s per leaf)",
        ),
        (
            "bisection",
            f"{s['bisection_GBps']:,.0f} GB/s per direction ({s['bisection_GBps_per_gpu']:.1f} GB/s per GPU)",
        ),
        ("rank order", " < ".join(s["rank_order"]) + "  (innermost first)"),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def cmd_topo(args: argparse.Namespace) -> int:
    from ..loading import load_topology
    from ..network.fabric import Fabric
    from ..network.summary import topology_summary

    ref = args.topology
    topo = load_topology(ref, base_dir=Path.cwd())
    gpus = getattr(args, "gpus", None)
    if gpus is None:
        gpus = topo.gpus_per_node * topo.inter_node.nodes_per_leaf * DEFAULT_SCALABLE_UNITS
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise ConfigError(f"must be a positive integer, got {gpus!r}", key="--gpus")
    fabric = Fabric(topo, gpus)
    try:
        fabric.check_buildable()
    except ConfigError as err:
        raise err.with_file(ref) if hasattr(err, "with_file") else err from None
    summary = topology_summary(fabric)
    if getattr(args, "json", False):
        from .. import __version__

        print_json({**summary, "mfusim_version": __version__})
    else:
        sys.stdout.write(_text(summary) + "\n")
    return 0
