#!/usr/bin/env python
"""Held-out published runs: predicted vs measured (issue 12). TEST ONLY, never fitted.

    python benchmarks/heldout_report.py                 # print the table and the mean/max errors
    python benchmarks/heldout_report.py --write-docs    # also rewrite docs/accuracy.md's heldout blocks
                                                        # (one per DOC_BLOCKS directory, and the
                                                        # heldout-overview table over all of them)
    python benchmarks/heldout_report.py --dir DIR       # another directory of scenarios + measured.toml
                                                        # (scenarios/heldout_automodel: NeMo AutoModel's
                                                        # published MoE and dense benchmarks;
                                                        # scenarios/heldout_torchtitan: PyTorch
                                                        # torchtitan's Llama 3 benchmarks;
                                                        # scenarios/heldout_moe: MoE runs from papers,
                                                        # reports and the Megatron-Core MoE README;
                                                        # scenarios/heldout_papers2: MegaScale's
                                                        # Megatron-LM baselines, OPT-175B, GLM-130B
                                                        # and Nemotron-4 15B's batch ramp)
    python benchmarks/heldout_report.py --set kernels.stack=megatron-2021 --only a100
                                                        # a what-if on the runs of one GPU

Reads every `<id>.toml` of scenarios/heldout/ (default) and the source's measurement from that
directory's measured.toml, runs each scenario as `mfusim run` would (defaults of the GPU's tables,
nothing set beyond what the scenario says) and reports throughput error = (predicted −
measured) / measured of tokens/s, i.e. measured step time / predicted step time − 1 (positive =
the model is optimistic). These runs are not in scenarios/published/calibration_runs.csv and no
calibration code reads this directory (tests/test_heldout_isolation.py).
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import mfusim
from simulator.errors import ConfigError
from simulator.overrides import parse_override

ROOT = Path(__file__).resolve().parents[1]
HELDOUT = ROOT / "scenarios" / "heldout"
AUTOMODEL = ROOT / "scenarios" / "heldout_automodel"
TORCHTITAN = ROOT / "scenarios" / "heldout_torchtitan"
NEMO = ROOT / "scenarios" / "heldout_nemo"  # NeMo 25.04 / 25.07 performance summaries (GB200)
NEMO_2024 = ROOT / "scenarios" / "heldout_nemo_2024"  # NeMo 25.02's performance summary (24.09/24.12: none)
MOE = ROOT / "scenarios" / "heldout_moe"  # MoE runs from papers, reports and the Megatron-Core MoE README
PAPERS2 = ROOT / "scenarios" / "heldout_papers2"  # MegaScale, OPT-175B, Nemotron-4 15B, GLM-130B
# docs/accuracy.md blocks --write-docs rewrites: (directory, block name)
DOC_BLOCKS: tuple[tuple[Path, str], ...] = (
    (HELDOUT, "heldout"),
    (AUTOMODEL, "heldout-automodel"),
    (TORCHTITAN, "heldout-torchtitan"),
    (NEMO, "heldout-nemo"),
    (NEMO_2024, "heldout-nemo-2024"),
    (MOE, "heldout-moe"),
    (PAPERS2, "heldout-papers2"),
)
# One line per set in the overview block ("heldout-overview"): what each directory holds.
SET_NAMES: dict[str, str] = {
    "heldout": "papers and technical reports (Megatron-LM 2022, Nemotron-4, Llama 3, MT-NLG, BLOOM, NeoX, TinyLlama)",
    "heldout-automodel": "NeMo AutoModel benchmarks (FSDP2 + TE + DeepEP, H100)",
    "heldout-torchtitan": "torchtitan Llama 3 benchmarks (FSDP2, async TP, CP, PP; H100)",
    "heldout-nemo": "NeMo 25.04 / 25.07 performance summaries (GB200)",
    "heldout-nemo-2024": "NeMo 25.02 performance summary (B200, H100)",
    "heldout-moe": "MoE papers and reports (Megatron-Core MoE README, DeepSeek-V2 / V3 reports; H100, H800)",
    "heldout-papers2": "papers, second set (MegaScale's Megatron-LM baselines on 256-12,288 A100, OPT-175B, GLM-130B; Nemotron-4 15B on H100)",
}
ACCURACY_MD = ROOT / "docs" / "accuracy.md"
KINDS = ("step_time_s", "mfu", "hfu_tflops_megatron", "tokens_per_s_per_gpu")
# Categories shown in the table (share of the predicted step).
SHOWN = ("compute", "recompute", "tp_comm", "pp_comm", "dp_comm", "ep_comm", "bubble", "optimizer")


@dataclass(frozen=True)
class HeldoutRow:
    run_id: str
    clean: bool
    source: str
    predicted_step_s: float
    measured_step_s: float
    predicted_mfu: float
    moe: bool
    shares: dict[str, float]
    assumptions: tuple[str, ...]

    @property
    def error(self) -> float:
        """Throughput error, (predicted − measured) / measured."""
        return self.measured_step_s / self.predicted_step_s - 1.0


def megatron_hfu_flops(scenario: dict, global_batch: int) -> float:
    """Megatron-LM/-DeepSpeed/NeoX throughput counter with full recompute (Narayanan et al. 2021
    eq. 3; Megatron-DeepSpeed training.py throughput_calculator, checkpoint factor 4):
    96·B·s·L·h²·(1 + s/(6h) + V/(16·L·h))."""
    m = scenario["model"]
    s, layers, h, v = m["seq_len"], m["layers"], m["hidden"], m["vocab"]
    return 96.0 * global_batch * s * layers * h * h * (1 + s / (6 * h) + v / (16 * layers * h))


def measured_step_s(kind: str, value: float, path: Path, report: mfusim.StepReport) -> float:
    if kind == "step_time_s":
        return value
    if kind == "mfu":
        return report.step_time_s * report.mfu / value
    if kind == "tokens_per_s_per_gpu":
        return report.step_time_s * report.tokens_per_s_per_gpu / value
    if kind == "hfu_tflops_megatron":
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
        flops = megatron_hfu_flops(raw, int(raw["parallel"]["global_batch"]))
        return flops / (report.num_gpus * value * 1e12)
    raise SystemExit(f"{path}: measured_kind {kind!r} is not one of {', '.join(KINDS)}")


def evaluate(
    directory: Path,
    overrides: Sequence[str] = (),
    only_gpu: str = "",
) -> list[HeldoutRow]:
    """Every run of `directory` (`overrides`: KEY=VALUE texts applied as `--set` would;
    `only_gpu`: runs whose GPU name contains it)."""
    meta = tomllib.loads((directory / "measured.toml").read_text(encoding="utf-8"))["runs"]
    rows = []
    for run_id, info in meta.items():
        path = directory / f"{run_id}.toml"
        scenario = mfusim.load_scenario(path)
        if only_gpu and only_gpu not in scenario.gpu.name:
            continue
        if overrides:
            try:
                scenario = mfusim.load_scenario(path, list(overrides))
            except ConfigError as exc:
                print(f"{run_id}: skipped ({exc})", file=sys.stderr)
                continue
        report = mfusim.simulate(scenario)
        step = report.step_time_s
        rows.append(
            HeldoutRow(
                run_id=run_id,
                clean=bool(info["clean"]),
                source=str(info["source"]),
                predicted_step_s=step,
                measured_step_s=measured_step_s(info["measured_kind"], float(info["measured"]), path, report),
                predicted_mfu=report.mfu,
                moe=scenario.model.num_experts > 0,
                shares={k: report.breakdown_s[k] / step for k in SHOWN},
                assumptions=tuple(info.get("assumptions", ())),
            )
        )
    return rows


def summary(rows: Sequence[HeldoutRow]) -> list[tuple[str, int, float, float, float]]:
    groups = (
        ("Korthikanti et al. 2022 Table 5", [r for r in rows if r.run_id.startswith("korthikanti22_")]),
        ("clean (fully published configuration)", [r for r in rows if r.clean]),
        ("all, incl. assumption-heavy", list(rows)),
        ("mixture of experts", [r for r in rows if r.moe]),
        ("dense", [r for r in rows if not r.moe] if any(r.moe for r in rows) else []),
    )
    out = []
    for name, sel in groups:
        if sel:
            errs = [r.error for r in sel]
            out.append(
                (
                    name,
                    len(sel),
                    statistics.fmean(abs(e) for e in errs),
                    max(abs(e) for e in errs),
                    statistics.fmean(errs),
                )
            )
    return out


def markdown(rows: Sequence[HeldoutRow]) -> str:
    lines = [
        "| run | clean | predicted step (s) | measured step (s) | error | predicted MFU | "
        + " | ".join(SHOWN)
        + " |",
        "| --- | :---: | ---: | ---: | ---: | ---: | " + " | ".join("---:" for _ in SHOWN) + " |",
    ]
    for r in rows:
        lines.append(
            f"| `{r.run_id}` | {'yes' if r.clean else 'no'} | {r.predicted_step_s:.3f} | {r.measured_step_s:.3f} | "
            f"{100 * r.error:+.1f}% | {r.predicted_mfu:.3f} | "
            + " | ".join(f"{100 * r.shares[k]:.0f}%" for k in SHOWN)
            + " |"
        )
    lines += [
        "",
        "| set | runs | mean abs error | max abs error | mean signed |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for name, n, mean_abs, max_abs, bias in summary(rows):
        lines.append(f"| {name} | {n} | {100 * mean_abs:.1f}% | {100 * max_abs:.1f}% | {100 * bias:+.1f}% |")
    return "\n".join(lines) + "\n"


def overview(sets: Sequence[tuple[str, Sequence[HeldoutRow]]]) -> str:
    """One line per held-out set: runs, clean runs' and all runs' mean |error|, the mean signed
    error, and dense / MoE where the set has both; a last line over every run."""

    def cell(sel: Sequence[HeldoutRow]) -> str:
        return f"{100 * statistics.fmean(abs(r.error) for r in sel):.1f}% ({len(sel)})" if sel else "–"

    lines = [
        "| set | runs | clean: mean abs (n) | all: mean abs | mean signed | dense | MoE |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    every: list[HeldoutRow] = []
    for name, rows in sets:
        every += rows
        lines.append(
            f"| {name} | {len(rows)} | {cell([r for r in rows if r.clean])} | {cell(rows)} | "
            f"{100 * statistics.fmean(r.error for r in rows):+.1f}% | {cell([r for r in rows if not r.moe])} | "
            f"{cell([r for r in rows if r.moe])} |"
        )
    lines.append(
        f"| **every held-out run** | {len(every)} | {cell([r for r in every if r.clean])} | {cell(every)} | "
        f"{100 * statistics.fmean(r.error for r in every):+.1f}% | {cell([r for r in every if not r.moe])} | "
        f"{cell([r for r in every if r.moe])} |"
    )
    return "\n".join(lines) + "\n"


def _replace_block(text: str, block: str, table: str) -> str | None:
    pattern = re.compile(rf"(<!-- generated: {block} -->\n)(.*?)(<!-- end: {block} -->)", re.DOTALL)
    if not pattern.search(text):
        print(f"{ACCURACY_MD}: no <!-- generated: {block} --> block", file=sys.stderr)
        return None
    return pattern.sub(lambda m: m.group(1) + table + m.group(3), text)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--dir", type=Path, default=HELDOUT, help="scenarios + measured.toml (default scenarios/heldout)"
    )
    ap.add_argument("--write-docs", action="store_true", help="rewrite the heldout block of docs/accuracy.md")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="what-if on every run")
    ap.add_argument("--only", default="", metavar="GPU", help="runs whose GPU name contains this")
    args = ap.parse_args(argv)
    if args.write_docs and (args.set or args.only or args.dir != HELDOUT):
        print("--write-docs writes the default tables only (no --set, --only or --dir)", file=sys.stderr)
        return 2
    for text in args.set:
        parse_override(text)  # a malformed KEY=VALUE fails here, before any run
    if not args.write_docs:
        rows = evaluate(args.dir, args.set, args.only)
        print(markdown(rows), end="")
        return 0
    text: str | None = ACCURACY_MD.read_text(encoding="utf-8")
    sets = []
    for directory, block in DOC_BLOCKS:
        rows = evaluate(directory)
        sets.append((SET_NAMES[block], rows))
        table = markdown(rows)
        print(f"{directory.relative_to(ROOT)}:\n{table}")
        text = _replace_block(text, block, table) if text is not None else None
    table = overview(sets)
    print(table)
    text = _replace_block(text, "heldout-overview", table) if text is not None else None
    if text is None:
        return 2
    ACCURACY_MD.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
