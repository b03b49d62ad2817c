#!/usr/bin/env python
"""Held-out runs as the hidden checker would write them: SPEC §1/§2/§7 keys only. TEST ONLY.

    python benchmarks/heldout_spec_only.py              # every held-out set: full vs SPEC-only error
    python benchmarks/heldout_spec_only.py --cli        # also run each SPEC-only file through
                                                        # `mfusim run --json` (exit status, one JSON
                                                        # object, the same step time) (~1 min)
    python benchmarks/heldout_spec_only.py --no-attribution   # skip the drop-one-key runs
    python benchmarks/heldout_spec_only.py --omit kernels.attention   # a checker that also leaves
                                                        # out this optional SPEC key
    python benchmarks/heldout_spec_only.py --write-docs # also rewrite docs/accuracy.md's
                                                        # heldout-spec-only block (~10 s)

The acceptance checks turn published runs into scenarios "per SPEC §1" and run them with `mfusim
run --json`. Our held-out scenarios (scenarios/heldout*/) also state mfusim-specific keys
([kernels] cross_entropy, grad_reduce_dtype, cuda_graph_*, moe_dispatcher, [memory]
sharded_*_dtype, [precision] fp8_recipe, ...). This script reduces each one to the contract's
names -- the keys of SPEC §1, the topology override tables of §2 with §2's fixed keys, and the
round-2 names of §7 -- and runs both versions exactly as benchmarks/heldout_report.py does
(`mfusim.simulate` with the GPU's default tables). Per run it prints the full scenario's error,
the SPEC-only error, and, where the two differ by more than 3 points, each dropped key's own
effect (the full scenario without that one key). A SPEC-only scenario that is refused or raises
is listed: the contract makes unknown keys errors, but a SPEC-valid file must run.

The measured step of a run is computed once, from the full scenario (the source's model and
FLOP count), so a dropped architecture key moves only the prediction. Errors are throughput
errors as in heldout_report.py: measured step / predicted step - 1 (positive = optimistic).
Nothing here is fitted or tuned; tests/test_heldout_isolation.py keeps calibration away from it.
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import math
import statistics
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import mfusim
from simulator.errors import ConfigError
from simulator.export import scenario_toml
from simulator.loading import scenario_from_dict


def _heldout_report() -> ModuleType:
    """benchmarks/heldout_report.py (the scripts are not a package): its directories, set names
    and measured-step conversion, so that both reports read the runs the same way."""
    name = "mfusim_heldout_report"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("heldout_report.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


_REPORT = _heldout_report()
DOC_BLOCKS: tuple[tuple[Path, str], ...] = _REPORT.DOC_BLOCKS
SET_NAMES: dict[str, str] = _REPORT.SET_NAMES
measured_step_s = _REPORT.measured_step_s

# The contract's scenario names: a leaf is None, a table is a dict of its names (None = any key).
# SPEC §1 (scenario file), §2 (a scenario's [cluster.intra_node] / [cluster.inter_node] overrides
# with the topology file's fixed keys), §7 (round-2 additions).
MOE_SPEC = ("num_experts", "top_k", "expert_ffn_hidden") + (  # §1
    "first_dense_layers",
    "routing",
    "load_imbalance",
    "max_nodes_per_token",
    "dispatch_dtype",
)  # §7
MLA_SPEC = ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")  # §7
SPEC_KEYS: dict[str, Any] = {
    "name": None,
    "model": {
        **dict.fromkeys(
            (
                "preset",
                "hf_config",
                "layers",
                "hidden",
                "heads",
                "kv_heads",
                "ffn_hidden",
                "vocab",
                "seq_len",
                "gated_mlp",
                "mtp_layers",  # §7
                "allow_unmodeled",  # §7
            )
        ),
        "moe": dict.fromkeys(MOE_SPEC),
        "mla": dict.fromkeys(MLA_SPEC),
    },
    "cluster": {
        "topology": None,
        "num_gpus": None,
        "gpu": None,
        "gpus_used_per_node": None,  # §7
        "intra_node": dict.fromkeys(("fabric", "link_GBps_per_direction", "latency_us")),  # §2
        "inter_node": dict.fromkeys(
            ("fabric", "nics_per_node", "nic_Gbps", "latency_us", "nodes_per_leaf", "oversubscription")
        ),  # §2
    },
    "parallel": dict.fromkeys(
        (
            "tp",
            "pp",
            "dp",
            "cp",
            "ep",
            "vp",
            "micro_batch",
            "global_batch",
            "schedule",
            "sequence_parallel",
            "recompute",
            "zero",
            "overlap_grad_reduce",
            "overlap_param_gather",
            "tp_comm_overlap",
            "etp",  # §7 from here
            "ep_comm_overlap",
            "dp_shard",
            "reshard_after_forward",
        )
    ),
    "precision": {"dtype": None},
    "dataloader": dict.fromkeys(("microbatch_latency_ms", "workers", "prefetch", "jitter", "seed")),
    "kernels": {"attention": None, "flash_attention": None},  # §7 (flash_attention "still works")
    "memory": {"offload_activations": None, "offload_optimizer": None},  # §7
    "run": None,  # §7 [run]: the whole-run plan, not the step
    "sweep": None,
}
MOVE_POINTS = 0.03  # runs whose SPEC-only error differs from the full one by more than this (fraction)
KEY_POINTS = 0.005  # a dropped key shown as a mover when it alone moves the error by this much (fraction)
GIVEN_BACK = " (given back)"  # a mover measured as SPEC-only + that key (refused when dropped alone)


def spec_only(
    data: Mapping[str, Any], allowed: Mapping[str, Any] = SPEC_KEYS, prefix: str = ""
) -> tuple[dict[str, Any], list[str]]:
    """(the scenario with only the contract's names, the dotted names of the keys dropped).
    A table left empty is dropped with its keys."""
    kept: dict[str, Any] = {}
    dropped: list[str] = []
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        if key not in allowed:
            if isinstance(value, Mapping):
                dropped += [f"{dotted}.{k}" for k in value]
            else:
                dropped.append(dotted)
            continue
        sub = allowed[key]
        if sub is None or not isinstance(value, Mapping):
            kept[key] = copy.deepcopy(value)
            continue
        inner, gone = spec_only(value, sub, f"{dotted}.")
        dropped += gone
        if inner:
            kept[key] = inner
    return kept, dropped


def _omitted(
    reduced: dict[str, Any], dropped: list[str], omit: Sequence[str]
) -> tuple[dict[str, Any], list[str]]:
    """`reduced` without the optional SPEC keys `omit` it states, and `dropped` with them."""
    for key in omit:
        if _has(reduced, key):
            reduced, dropped = without(reduced, key), [*dropped, key]
    return reduced, dropped


def _has(data: Mapping[str, Any], dotted: str) -> bool:
    node: Any = data
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return False
        node = node[part]
    return True


def without(data: Mapping[str, Any], dotted: str) -> dict[str, Any]:
    """A deep copy of `data` without the one key `dotted` (an emptied table goes with it)."""
    out = copy.deepcopy(dict(data))
    parts = dotted.split(".")
    tables = [out]
    for part in parts[:-1]:
        tables.append(tables[-1][part])
    del tables[-1][parts[-1]]
    for depth in range(len(parts) - 1, 0, -1):
        if not tables[depth]:
            del tables[depth - 1][parts[depth - 1]]
    return out


def with_key(reduced: Mapping[str, Any], raw: Mapping[str, Any], dotted: str) -> dict[str, Any]:
    """A deep copy of `reduced` with the one key `dotted` of `raw` given back."""
    out = copy.deepcopy(dict(reduced))
    parts = dotted.split(".")
    table, source = out, raw
    for part in parts[:-1]:
        table = table.setdefault(part, {})
        source = source[part]
    table[parts[-1]] = copy.deepcopy(source[parts[-1]])
    return out


@dataclass(frozen=True)
class SpecRow:
    set_name: str
    run_id: str
    clean: bool
    moe: bool
    full_error: float
    spec_error: float | None  # None: the SPEC-only scenario failed
    failure: str  # "" or why the SPEC-only scenario did not run
    dropped: tuple[str, ...]
    movers: tuple[tuple[str, float], ...]  # (dropped key, its own error change), largest first
    spec_step_s: float | None  # the SPEC-only prediction (None: failed)
    full_fits: bool | None  # memory.fits of the full scenario
    spec_fits: bool | None  # and of the SPEC-only one
    memory_keys: tuple[str, ...]  # dropped keys that alone change memory.fits

    @property
    def moved(self) -> float:
        return 0.0 if self.spec_error is None else self.spec_error - self.full_error


def _simulate(data: Mapping[str, Any], directory: Path, source: str) -> mfusim.StepReport:
    return mfusim.simulate(scenario_from_dict(data, base_dir=directory, source=source))


def _fits(report: mfusim.StepReport) -> bool | None:
    return None if report.memory is None else report.memory.fits


def _predicted_step(data: Mapping[str, Any], directory: Path, source: str) -> float:
    return _simulate(data, directory, source).step_time_s


def evaluate_set(
    directory: Path, set_name: str, attribute: bool = True, omit: Sequence[str] = ()
) -> list[SpecRow]:
    """Every run of one held-out directory, full and SPEC-only (`attribute`: find each moved
    run's dropped keys that move it; `omit`: SPEC keys left out too, as by a checker that does
    not state those optional keys)."""
    meta = tomllib.loads((directory / "measured.toml").read_text(encoding="utf-8"))["runs"]
    rows = []
    for run_id, info in meta.items():
        path = directory / f"{run_id}.toml"
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
        scenario = scenario_from_dict(raw, base_dir=directory, source=str(path))
        report = mfusim.simulate(scenario)
        measured = measured_step_s(info["measured_kind"], float(info["measured"]), path, report)
        full_error = measured / report.step_time_s - 1.0
        reduced, dropped = spec_only(raw)
        reduced, dropped = _omitted(reduced, dropped, omit)
        spec_error: float | None = None
        spec_step: float | None = None
        spec_fits: bool | None = None
        failure = ""
        try:
            spec_report = _simulate(reduced, directory, str(path))
            spec_step, spec_fits = spec_report.step_time_s, _fits(spec_report)
            spec_error = measured / spec_step - 1.0
        except ConfigError as exc:
            failure = f"refused: {exc}"
        except Exception as exc:  # noqa: BLE001 -- every failure is a finding to report
            failure = f"{type(exc).__name__}: {exc}"
        movers: list[tuple[str, float]] = []
        memory_keys: list[str] = []
        fits_flip = spec_fits is not None and spec_fits != _fits(report)
        moved = spec_error is None or abs(spec_error - full_error) > MOVE_POINTS
        if attribute and (moved or fits_flip):
            for key in dropped:
                try:
                    one = _simulate(without(raw, key), directory, str(path))
                except ConfigError as exc:
                    # refused alone (another stated key needs it): measured from the SPEC-only
                    # side instead, the SPEC-only scenario with this one key given back
                    print(
                        f"{run_id}: without {key} alone: {exc}; measured as SPEC-only + {key}",
                        file=sys.stderr,
                    )
                    if moved and spec_error is not None:
                        try:
                            back = (
                                measured / _predicted_step(with_key(reduced, raw, key), directory, str(path))
                                - 1
                            )
                        except ConfigError:
                            continue
                        if abs(spec_error - back) >= KEY_POINTS:
                            movers.append((key + GIVEN_BACK, spec_error - back))
                    continue
                err = measured / one.step_time_s - 1.0
                if moved and abs(err - full_error) >= KEY_POINTS:
                    movers.append((key, err - full_error))
                if _fits(one) != _fits(report):
                    memory_keys.append(key)
            movers.sort(key=lambda m: -abs(m[1]))
        rows.append(
            SpecRow(
                set_name=set_name,
                run_id=run_id,
                clean=bool(info["clean"]),
                moe=scenario.model.num_experts > 0,
                full_error=full_error,
                spec_error=spec_error,
                failure=failure,
                dropped=tuple(dropped),
                movers=tuple(movers),
                spec_step_s=spec_step,
                full_fits=_fits(report),
                spec_fits=spec_fits,
                memory_keys=tuple(memory_keys),
            )
        )
    return rows


def cli_check(directory: Path, row: SpecRow, omit: Sequence[str] = ()) -> str:
    """'' when `mfusim run --json` on the SPEC-only file exits 0 with one JSON object whose
    step_time_s is the library's (`row.spec_step_s`), else why."""
    run_id = row.run_id
    raw = tomllib.loads((directory / f"{run_id}.toml").read_text(encoding="utf-8"))
    reduced, _ = _omitted(*spec_only(raw), omit)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{run_id}.toml"
        path.write_text(scenario_toml(reduced), encoding="utf-8")
        proc = subprocess.run(
            [sys.executable, "-m", "simulator", "run", str(path), "--json"],
            capture_output=True,
            text=True,
            check=False,
        )
    if proc.returncode != 0:
        return f"exit {proc.returncode}: {proc.stderr.strip().splitlines()[-1:]}"
    try:
        out = json.loads(proc.stdout)
    except json.JSONDecodeError as exc:
        return f"stdout is not one JSON object: {exc}"
    if row.spec_step_s is None or not math.isclose(out["step_time_s"], row.spec_step_s, rel_tol=1e-9):
        return f"step_time_s {out['step_time_s']!r} is not the library's {row.spec_step_s!r}"
    return ""


def _pct(x: float | None) -> str:
    return "failed" if x is None else f"{100 * x:+.1f}%"


def _mean_abs(values: Sequence[float]) -> str:
    return f"{100 * statistics.fmean(abs(v) for v in values):.1f}%" if values else "–"


def run_table(rows: Sequence[SpecRow]) -> str:
    lines = [
        "| set | run | full | SPEC-only | moved | dropped keys that move it alone (points) |",
        "| --- | --- | ---: | ---: | ---: | --- |",
    ]
    for r in rows:
        movers = ", ".join(
            f"`{k.removesuffix(GIVEN_BACK)}`{GIVEN_BACK if k.endswith(GIVEN_BACK) else ''} {100 * d:+.1f}"
            for k, d in r.movers
        ) or ("–" if not r.failure else r.failure)
        lines.append(
            f"| {r.set_name} | `{r.run_id}` | {_pct(r.full_error)} | {_pct(r.spec_error)} | "
            f"{100 * r.moved:+.1f} | {movers} |"
        )
    return "\n".join(lines) + "\n"


def summary_table(rows: Sequence[SpecRow], sets: Sequence[str]) -> str:
    lines = [
        "| set | runs | full: mean abs | SPEC-only: mean abs | full: mean signed | SPEC-only: mean signed | "
        f"moved > {MOVE_POINTS * 100:g} points | failed |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]

    def line(name: str, sel: Sequence[SpecRow]) -> str:
        ok = [r for r in sel if r.spec_error is not None]
        full = [r.full_error for r in ok]
        spec = [r.spec_error for r in ok if r.spec_error is not None]
        return (
            f"| {name} | {len(sel)} | {_mean_abs(full)} | {_mean_abs(spec)} | "
            f"{100 * statistics.fmean(full):+.1f}% | {100 * statistics.fmean(spec):+.1f}% | "
            f"{sum(abs(r.moved) > MOVE_POINTS for r in ok)} | {len(sel) - len(ok)} |"
        )

    for name in sets:
        lines.append(line(name, [r for r in rows if r.set_name == name]))
    lines.append(line("**every held-out run**", rows))
    lines.append(line("clean runs", [r for r in rows if r.clean]))
    lines.append(line("dense", [r for r in rows if not r.moe]))
    lines.append(line("MoE", [r for r in rows if r.moe]))
    return "\n".join(lines) + "\n"


def dropped_counts(rows: Sequence[SpecRow], movers_only: bool = False) -> str:
    """Each dropped key: in how many runs, and in how many it moved the run by itself
    (`movers_only`: the keys that move at least one run)."""
    seen: dict[str, int] = {}
    moving: dict[str, list[float]] = {}
    for r in rows:
        for k in r.dropped:
            seen[k] = seen.get(k, 0) + 1
        for k, d in r.movers:
            moving.setdefault(k.removesuffix(GIVEN_BACK), []).append(d)
    lines = [
        "| dropped key | runs stating it | runs it moves alone | largest move (points) |",
        "| --- | ---: | ---: | ---: |",
    ]
    for k in sorted(seen, key=lambda k: (-len(moving.get(k, [])), -seen[k], k)):
        ds = moving.get(k, [])
        if movers_only and not ds:
            continue
        big = max(ds, key=abs) if ds else 0.0
        lines.append(
            f"| `{k}` | {seen[k]} | {len(ds)} | {100 * big:+.1f} |"
            if ds
            else f"| `{k}` | {seen[k]} | 0 | – |"
        )
    return "\n".join(lines) + "\n"


def memory_lines(rows: Sequence[SpecRow]) -> list[str]:
    out = []
    for r in rows:
        if r.spec_fits is not None and r.spec_fits != r.full_fits:
            why = ", ".join(f"`{k}`" for k in r.memory_keys) or "no single key"
            out.append(f"{r.set_name} `{r.run_id}`: full {r.full_fits}, SPEC-only {r.spec_fits} ({why})")
    return out


def docs_block(rows: Sequence[SpecRow], sets: Sequence[str]) -> str:
    """docs/accuracy.md's heldout-spec-only block: the summary, the runs that move, what they move on."""
    moved = [r for r in rows if r.failure or abs(r.moved) > MOVE_POINTS]
    text = (
        summary_table(rows, sets)
        + f"\nRuns that move by more than {MOVE_POINTS * 100:g} points:\n\n"
        + run_table(moved)
    )
    text += "\n" + dropped_counts(rows, movers_only=True)
    flips = memory_lines(rows)
    if flips:
        text += "\nmemory.fits changed (full -> SPEC-only; the dropped key that alone flips it):\n\n"
        text += "".join(f"- {line}\n" for line in flips)
    failed = [r for r in rows if r.failure]
    text += "\n" + (
        "".join(f"- failed: {r.set_name} `{r.run_id}`: {r.failure}\n" for r in failed)
        if failed
        else "Every SPEC-only scenario loads and runs (no refusal, no exception).\n"
    )
    return text


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--cli", action="store_true", help="also run each SPEC-only file with `mfusim run --json`"
    )
    ap.add_argument("--no-attribution", action="store_true", help="skip the drop-one-key runs")
    ap.add_argument("--dir", type=Path, action="append", default=[], help="only these held-out directories")
    ap.add_argument(
        "--omit",
        action="append",
        default=[],
        metavar="SECTION.KEY",
        help="also leave out this optional SPEC key (what a checker that omits it gets)",
    )
    ap.add_argument(
        "--write-docs", action="store_true", help="rewrite docs/accuracy.md's heldout-spec-only block"
    )
    args = ap.parse_args(argv)
    if args.write_docs and (args.dir or args.no_attribution or args.omit):
        print("--write-docs writes the whole table (no --dir, --no-attribution or --omit)", file=sys.stderr)
        return 2
    blocks = [(d, b) for d, b in DOC_BLOCKS if not args.dir or d.resolve() in {p.resolve() for p in args.dir}]
    rows: list[SpecRow] = []
    for directory, block in blocks:
        rows += evaluate_set(directory, block, attribute=not args.no_attribution, omit=args.omit)
    sets = [b for _, b in blocks]
    print(run_table(rows))
    print(summary_table(rows, sets))
    print(dropped_counts(rows))
    for line in memory_lines(rows):
        print(f"memory.fits {line}")
    failed = [r for r in rows if r.failure]
    for r in failed:
        print(f"SPEC-only {r.set_name}/{r.run_id}: {r.failure}")
    if args.cli:
        directories = {b: d for d, b in blocks}
        for r in rows:
            why = cli_check(directories[r.set_name], r, args.omit)
            if why:
                print(f"mfusim run --json, SPEC-only {r.set_name}/{r.run_id}: {why}")
                failed.append(r)
    print(f"set names: {'; '.join(f'{b} = {SET_NAMES[b]}' for _, b in blocks)}")
    if args.write_docs:
        text = _REPORT._replace_block(
            _REPORT.ACCURACY_MD.read_text(encoding="utf-8"), "heldout-spec-only", docs_block(rows, sets)
        )
        if text is None:
            return 2
        _REPORT.ACCURACY_MD.write_text(text, encoding="utf-8")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
