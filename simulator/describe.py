"""What was simulated, for every `--json` output (issue 15): model, GPU, topology, dtype,
sequence length, mfusim version and the scenario's warnings. A pure function of the scenario."""

from __future__ import annotations

from typing import Any

from .specs import Scenario


def model_summary(scn: Scenario) -> dict[str, Any]:
    """`model`: name, parameters, the parameters one token visits (MoE: top_k experts) and the
    architecture as simulated (flops.model_summary, issue 13)."""
    from .flops import model_summary as summary

    return summary(scn.model, scn.expert_load_imbalance)


def scenario_summary(scn: Scenario, warnings: tuple[str, ...] | list[str] | None = None) -> dict[str, Any]:
    """The header of a JSON output: what was simulated, and with which mfusim."""
    from . import __version__

    return {
        "model": model_summary(scn),
        "gpu": scn.gpu.name,
        "topology": scn.topology.name,
        "dtype": scn.dtype,
        "seq_len": scn.model.seq_len,
        "mfusim_version": __version__,
        "warnings": list(scn.warnings() if warnings is None else warnings),
    }


def add_summary(
    out: dict[str, Any], scn: Scenario, warnings: tuple[str, ...] | list[str] | None = None
) -> dict[str, Any]:
    """`out` with the summary's keys added where it lacks them (its own values win)."""
    for key, value in scenario_summary(scn, warnings).items():
        out.setdefault(key, value)
    return out
