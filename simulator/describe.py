"""What was simulated, for every `--json` output (issue 15): model, GPU, topology, dtype,
sequence length, mfusim version and the scenario's warnings. A pure function of the scenario."""

from __future__ import annotations

import tomllib
from functools import lru_cache
from typing import Any

from .resources import catalog_file
from .specs import Scenario

# Precision classes of the accuracy table (simulator/catalog/accuracy.toml): what a published run's
# dtype is grouped under
PRECISION_CLASS = {
    "bf16": "16bit",
    "fp16": "16bit",
    "fp32": "fp32",  # no published FP32 training run: a group of its own, without figures
    "fp8": "fp8",
    "mxfp8": "fp8",
    "nvfp4": "fp4",
}
ACCURACY_NOTE = (
    "mean absolute / signed error of `mfusim validate` on the shipped published runs of this GPU "
    "architecture, model kind and precision class on this software stack (all_stacks: of every "
    "stack) (docs/accuracy.md); bias > 0: predicted faster "
    "than measured. These are the runs the model is calibrated on (half of each group fitted, half "
    "held out); published runs outside them err more, mostly optimistic (docs/accuracy.md, held-out runs)"
)


def model_summary(scn: Scenario) -> dict[str, Any]:
    """`model`: name, parameters, the parameters one token visits (MoE: top_k experts) and the
    architecture as simulated (flops.model_summary, issue 13)."""
    from .flops import model_summary as summary

    return summary(scn.model, scn.expert_load_imbalance)


@lru_cache(maxsize=1)
def accuracy_table() -> dict[str, Any]:
    """simulator/catalog/accuracy.toml (written by benchmarks/accuracy_report.py), parsed once."""
    with open(catalog_file("accuracy.toml"), "rb") as fh:
        return tomllib.load(fh)


def accuracy_group_of(gpu_name: str, is_moe: bool, dtype: str) -> tuple[str, str, str]:
    """(architecture, "dense" | "moe", precision class) a run is judged with; architecture
    "other" for a GPU outside the catalog (a user's topology file)."""
    from .kernel_catalog import kernel_data

    arch = str(kernel_data()["architectures"].get(gpu_name, "other"))
    return arch, "moe" if is_moe else "dense", PRECISION_CLASS.get(dtype, dtype)


def _figures(group: dict[str, Any] | None) -> dict[str, Any]:
    if not group:
        return {"rows": 0, "mape_pct": None, "bias_pct": None}
    return {
        "rows": int(group["rows"]),
        "mape_pct": float(group["mape_pct"]),
        "bias_pct": float(group["bias_pct"]),
    }


def accuracy_summary(scn: Scenario) -> dict[str, Any]:
    """`accuracy`: how far the model lands from measured throughput on comparable published runs:
    the validation set's rows of this scenario's group run on its software stack (`[kernels]
    stack`; rows 0 where there are none), and the group's rows of all stacks (`all_stacks`). A stack
    with no calibration run of its own names the stack whose residuals it borrows (`residuals_of`)."""
    from .specs import residuals_stack
    from .stacks import DEFAULT_STACK

    arch, kind, precision = accuracy_group_of(scn.gpu.name, scn.model.is_moe, scn.dtype)
    table = accuracy_table()
    stack = scn.kernels.stack or DEFAULT_STACK
    out: dict[str, Any] = {"group": f"{arch} {kind} {precision}", "stack": stack}
    out["residuals_of"] = residuals_stack(stack)
    out.update(_figures(table.get("stacks", {}).get(stack, {}).get(arch, {}).get(kind, {}).get(precision)))
    out["all_stacks"] = _figures(table.get(arch, {}).get(kind, {}).get(precision))
    out["note"] = ACCURACY_NOTE
    return out


def _error_text(fig: dict[str, Any]) -> str:
    return f"mean error {fig['mape_pct']:.1f}% (bias {fig['bias_pct']:+.1f}%, > 0: predicted too fast)"


def accuracy_line(scn: Scenario) -> str:
    """The text report's line for `accuracy_summary`."""
    acc = accuracy_summary(scn)
    group, stack, pooled = acc["group"], acc["stack"], acc["all_stacks"]
    if acc["rows"]:
        return (
            f"accuracy: {_error_text(acc)} on {acc['rows']} published {group} calibration runs of the "
            f"{stack} stack (docs/accuracy.md)"
        )
    if acc["residuals_of"] != stack:
        head = (
            f"accuracy: no published run of the {stack} stack in the calibration data; residuals "
            f"borrowed from {acc['residuals_of']} (docs/calibration.md)"
        )
    elif pooled["rows"]:
        head = f"accuracy: no published {group} run of the {stack} stack in the calibration data"
    else:
        return f"accuracy: no published {group} run in the calibration data (docs/accuracy.md)"
    if not pooled["rows"]:
        return head
    return f"{head}; other stacks' {pooled['rows']} {group} runs: {_error_text(pooled)} (docs/accuracy.md)"


def scenario_summary(scn: Scenario, warnings: tuple[str, ...] | list[str] | None = None) -> dict[str, Any]:
    """The header of a JSON output: what was simulated, and with which mfusim."""
    from . import __version__

    return {
        "model": model_summary(scn),
        "gpu": scn.gpu.name,
        "topology": scn.topology.name,
        "dtype": scn.dtype,
        "seq_len": scn.model.seq_len,
        "accuracy": accuracy_summary(scn),
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
