"""What `mfusim run` shows: the step report as text and the statistics of sampled steps (SPEC §3-4)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from .describe import accuracy_line
from .metrics import StepReport
from .specs import Scenario, schedule_label
from .timeline import CATEGORIES
from .units import bytes_to_gib

BAR_WIDTH = 30


def comm_model_for(scn: Scenario, name: str):
    from .comm import FlatCommModel, default_comm_model

    return FlatCommModel(scn) if name == "flat" else default_comm_model(scn)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    pos = q * (len(ordered) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def sample_stats(samples: list[StepReport]) -> dict[str, Any]:
    from statistics import fmean  # only here: statistics pulls in fractions, decimal, random

    steps = [r.step_time_s for r in samples]
    mfus = [r.mfu for r in samples]
    return {
        "n": len(samples),
        "step_time_s": {
            "mean": fmean(steps),
            "p50": _percentile(steps, 0.5),
            "p99": _percentile(steps, 0.99),
            "min": min(steps),
            "max": max(steps),
        },
        "mfu": {
            "mean": fmean(mfus),
            "p50": _percentile(mfus, 0.5),
            # the bad tail of MFU is the low one: its 1st percentile, the MFU 99% of steps beat
            "p1": (mfu_p1 := _percentile(mfus, 0.01)),
            "p99": mfu_p1,  # deprecated alias of "p1" (round 1 named it for the tail, not the value)
        },
    }


def format_samples(stats: dict[str, Any]) -> str:
    st, mf = stats["step_time_s"], stats["mfu"]
    return (
        f"\nOver {stats['n']} sampled steps: step time mean {st['mean']:.3f} s, p50 {st['p50']:.3f} s, "
        f"p99 {st['p99']:.3f} s; MFU mean {mf['mean']:.1%}, p50 {mf['p50']:.1%}, worst-1% {mf['p1']:.1%}"
        " (the report above is sample 0's step)"
    )


METRICS_LINE = (
    "MFU = model FLOPs / (step time x GPUs x peak); HFU also counts recomputation; "
    "MFU(6Ψ) counts 6 x parameters per token (no attention)"
)


def batch_arithmetic(micro_batch: int, num_microbatches: int, dp: int, global_batch: int) -> str:
    """How the global batch is made: "1 seq × 192 micro-batches × dp 8 = 1,536 sequences"."""
    seqs = "seq" if micro_batch == 1 else "seqs"
    mbs = "micro-batch" if num_microbatches == 1 else "micro-batches"
    return f"{micro_batch} {seqs} × {num_microbatches} {mbs} × dp {dp} = {global_batch:,} sequences"


def duration_text(seconds: float) -> str:
    """A duration with 3 significant digits, in ms below one second, else in s."""
    if seconds < 1.0:
        return f"{_three_digits(seconds * 1e3)} ms"
    return f"{_three_digits(seconds)} s"


def _three_digits(x: float) -> str:
    if x == 0:
        return "0"
    digits = max(0, 2 - math.floor(math.log10(abs(x))))
    return f"{x:.{digits}f}" if abs(x) >= 1e-3 else f"{x:.3g}"


def overrides_line(overrides: Sequence[str]) -> str:
    """`overrides: cluster.num_gpus=1024, --unset parallel.dp` ('' without overrides): under the
    scenario's name, which is its file's while the values simulated are the overridden ones."""
    return "overrides: " + ", ".join(overrides) if overrides else ""


def format_report(scn: Scenario, r: StepReport, overrides: Sequence[str] = ()) -> str:
    par = r.parallel
    flags = [schedule_label(par.schedule, par.pp, par.vp), f"recompute {par.recompute}"]
    if par.sequence_parallel:
        flags.append("SP")
    if par.zero:
        flags.append(f"ZeRO-{par.zero}")
    lines = [
        f"{r.name}",
        *([f"  {overrides_line(overrides)}"] if overrides else []),
        f"  {r.num_gpus} x {scn.gpu.name} ({scn.topology.name}), {scn.model.name}, {scn.dtype}",
        f"  tp {par.tp} · pp {par.pp} · dp {par.dp} · cp {par.cp}"
        + (f" ({par.cp_comm_type})" if par.cp > 1 else "")  # the CP implementation, as run --json
        + (f" · ep {par.ep}" if par.ep > 1 else "")
        + ";  "
        + batch_arithmetic(par.micro_batch, par.num_microbatches, par.dp, par.global_batch)
        + (f" in {par.pipeline_runs} pipeline runs" if par.pipeline_runs > 1 else "")
        + "; "
        + ", ".join(flags),
        "",
        f"  MFU  {r.mfu:6.1%}     HFU {r.hfu:6.1%}     MFU(6Ψ) {r.mfu_6psi:6.1%}     "
        f"{r.model_tflops_per_gpu:.1f} model TFLOP/s per GPU",
        f"  ({METRICS_LINE})",
        f"  step time {r.step_time_s:#.4g} s     {r.tokens_per_s:,.0f} tokens/s ({r.tokens_per_s_per_gpu:,.1f} per GPU)",
        f"  {accuracy_line(scn)}",
    ]
    if r.memory is not None:
        mem = r.memory
        fit = "fits" if mem.fits else "DOES NOT FIT"
        parts = ", ".join(f"{k} {bytes_to_gib(v):.1f}" for k, v in mem.parts_bytes.items())
        headroom = scn.memory.headroom_bytes
        usable = (
            f"{bytes_to_gib(mem.capacity_bytes):.0f} GiB usable per GPU "
            f"({bytes_to_gib(mem.capacity_bytes + headroom):.0f} - {bytes_to_gib(headroom):g} headroom)"
            if headroom > 0
            else f"{bytes_to_gib(mem.capacity_bytes):.0f} GiB per GPU"
        )
        lines.append(f"  memory {bytes_to_gib(mem.peak_bytes):.1f} GiB of {usable} ({fit}), in GiB: {parts}")
    lines += [
        "",
        "  Where the time goes (mean over pipeline stages):",
        f"  {'category':<11} {'time':>10} {'% step':>7}",
    ]
    bd = r.breakdown_s
    for cat in CATEGORIES:
        sec = bd[cat]
        if sec <= 0:
            continue
        frac = sec / r.step_time_s
        bar = "█" * max(1, round(frac * BAR_WIDTH)) if frac > 0.005 else ""
        lines.append(f"  {cat:<11} {duration_text(sec):>10} {frac:>7.1%} {bar}")
    if par.pp > 1:
        used = [c for c in CATEGORIES if any(st[c] > 0 for st in r.breakdown_by_stage_s)]
        widths = [max(9, len(c)) for c in used]  # whole category names (gpu_spread, host_bound)
        header = " ".join(f"{c:>{w}}" for c, w in zip(used, widths, strict=True))
        lines += ["", "  Per stage (% of step):", "  stage " + header]
        shown = range(par.pp) if par.pp <= 16 else [*range(4), -1, *range(par.pp - 4, par.pp)]
        for i in shown:
            if i < 0:
                lines.append("  ...")
                continue
            st = r.breakdown_by_stage_s[i]
            cells = (f"{st[c] / r.step_time_s:>{w}.1%}" for c, w in zip(used, widths, strict=True))
            lines.append(f"  {i:>5} " + " ".join(cells))
    return "\n".join(lines)
