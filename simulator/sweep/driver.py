"""A whole sweep: the closed-form (or engine) pass, then the engine on the best (module doc of simulator.sweep)."""

from __future__ import annotations

import contextlib
import itertools
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from .. import argcheck
from ..outputs import output_lock
from ..plan import RANK_KEYS
from ..progress import Progress
from ..specs import Scenario
from .columns import KEY_COLUMNS, STATUS_INVALID, STATUSES
from .evaluation import ENGINES, _key, refresh_plan
from .files import ExistingRows, RowWriter, _is_jsonl, read_existing, rewrite_atomically, scenario_fingerprint
from .plan import _base_values, config_cells, plan_sweep
from .rank import rank_rows
from .runner import Runner


@dataclass(frozen=True, slots=True)
class SweepResult:
    rows: tuple[dict[str, Any], ...]
    counts: dict[str, int]
    ranked: tuple[dict[str, Any], ...]  # feasible rows, best first
    engine_note: str
    engine: str = "analytic"  # what was asked for: auto | analytic | des
    swept_keys: tuple[str, ...] = ()
    # the largest |closed form − engine| / engine MFU over the rows the engine checked, and that row
    largest_gap: float | None = None
    largest_gap_row: dict[str, Any] | None = None


def run_sweep(
    scn: Scenario,
    *,
    engine: str = "auto",
    jobs: int = 1,
    top: int = 10,
    refine: int = 3,
    rank_by: str = "mfu",
    out: Path | None = None,
    resume: bool = False,
    dask: str | None = None,
    progress: TextIO | None = None,
) -> SweepResult:
    """Run the sweep of `scn` (see the module docstring) and return every row, ranked.

    Arguments are checked like the command line's flags: a ValueError names the argument and
    what is allowed (`engine="bogus"` or `rank_by="step_time_s"` never run silently)."""
    check_sweep_arguments(engine=engine, jobs=jobs, top=top, refine=refine, rank_by=rank_by)
    if resume and out is None:
        raise ValueError("resume=True needs out= (the file to continue)")
    plan = plan_sweep(scn)
    base = _base_values(scn)
    seen: dict[tuple[str, ...], None] = {}
    todo: list[dict[str, Any]] = []
    for combo in plan.combos():
        values = config_cells(base, scn.num_gpus, combo)
        k = _key(values)
        if k not in seen:  # repeated list values give one configuration
            seen[k] = None
            todo.append(values)

    with contextlib.ExitStack() as stack:
        if out is not None:
            stack.enter_context(output_lock(out, "--out"))  # one writer per file
        fingerprint = scenario_fingerprint(scn)
        existing = read_existing(out, fingerprint) if (out is not None and resume) else ExistingRows([])
        file_rows = existing.rows
        replanned = refresh_plan(file_rows, scn)  # [run] may differ from the file's rows
        done_keys = {_key(r) for r in file_rows}
        old_rows = [r for r in file_rows if _key(r) in seen]
        foreign_rows = [r for r in file_rows if _key(r) not in seen]  # another [sweep]'s rows: kept
        todo = [v for v in todo if _key(v) not in done_keys]
        if out is not None and resume and (not existing.clean or replanned):
            # torn lines, garbage and impossible rows go; their configurations are re-evaluated
            rewrite_atomically(out, file_rows, fingerprint)
            if progress is not None and existing.dropped:
                progress.write(
                    f"sweep: {existing.dropped} unreadable or impossible rows of {out} dropped; "
                    "their configurations are evaluated again\n"
                )

        with Runner(scn, jobs=jobs, dask=dask) as runner:
            rows = _run_passes(
                runner,
                todo,
                seen,
                old_rows,
                foreign_rows,
                engine=engine,
                refine=max(refine, top),
                rank_by=rank_by,
                out=out,
                resume=resume,
                progress=progress,
                fingerprint=fingerprint,
            )
    engine_note = _engines_used(rows)
    ranked = rank_rows(rows, rank_by)  # one ranking: the engine's numbers wherever it ran
    gap, gap_row = largest_gap(rows)
    counts = Counter(str(r.get("status")) for r in rows)
    return SweepResult(
        rows=tuple(rows),
        counts={s: counts.get(s, 0) for s in STATUSES},
        ranked=tuple(ranked),
        engine_note=engine_note,
        engine=engine,
        swept_keys=plan.keys,
        largest_gap=gap,
        largest_gap_row=gap_row,
    )


def check_sweep_arguments(*, engine: str, jobs: int, top: int, refine: int, rank_by: str) -> None:
    """ValueError naming the first argument of `run_sweep` that the CLI would refuse."""
    argcheck.one_of("engine", engine, ("auto", *ENGINES))
    argcheck.one_of("rank_by", rank_by, tuple(RANK_KEYS))
    argcheck.positive_int("jobs", jobs)
    argcheck.positive_int("top", top)
    argcheck.positive_int("refine", refine)


def _run_passes(
    runner: Runner,
    todo: list[dict[str, Any]],
    seen: dict[tuple[str, ...], None],
    old_rows: list[dict[str, Any]],
    foreign_rows: list[dict[str, Any]],
    *,
    engine: str,
    refine: int,
    rank_by: str,
    out: Path | None,
    resume: bool,
    progress: TextIO | None,
    fingerprint: str | None = None,
) -> list[dict[str, Any]]:
    """The closed-form (or engine) pass over `todo`, written as it goes; then, for `auto`, the
    engine over the best `refine` and an atomic rewrite of the file with their rows."""
    jsonl = out is not None and _is_jsonl(out)
    first_pass = "analytic" if engine in ("auto", "analytic") else "des"
    new_rows: list[dict[str, Any]] = []
    bar = Progress(len(todo), "sweep", unit="cfg", stream=progress, enabled=None if progress else False)
    fh: TextIO | None = None
    try:
        if out is not None:
            # read_existing has cut any partial last line and checked the header
            append = resume and out.exists() and out.stat().st_size > 0
            fh = open(out, "a" if append else "w", encoding="utf-8", newline="")
            writer = RowWriter(fh, jsonl, fingerprint)
            if not append:
                writer.header()

        def on_rows(rows: list[dict[str, Any]]) -> None:
            new_rows.extend(rows)
            if fh is not None:
                writer.write(rows)
            bar.update(len(rows))

        runner.run(todo, first_pass, on_rows)
    finally:
        bar.close()
        if fh is not None:
            fh.close()

    # rows in sweep order (in a resumed file the old rows come first)
    by_key = {_key(r): r for r in itertools.chain(old_rows, new_rows)}
    rows = [by_key[k] for k in seen if k in by_key]
    if engine == "auto":
        rows = _check_best(runner, rows, by_key, seen, refine, rank_by, progress)
        if out is not None:
            rewrite_atomically(out, rows + foreign_rows, fingerprint)
    return rows


def _check_best(
    runner: Runner,
    rows: list[dict[str, Any]],
    by_key: dict[tuple[str, ...], dict[str, Any]],
    seen: dict[tuple[str, ...], None],
    k: int,
    rank_by: str,
    progress: TextIO | None,
) -> list[dict[str, Any]]:
    """Re-simulate with the engine until the best `k` of the one ranking (engine numbers where it
    ran, closed form elsewhere) are all engine-checked: a checked row can fall out of the top k
    and let an unchecked one in, which is then checked in turn."""
    failed: set[tuple[str, ...]] = set()  # the engine failed: the closed form's row stays
    while True:
        todo = [r for r in rank_rows(rows, rank_by)[:k] if r.get("engine") != "des" and _key(r) not in failed]
        if not todo:
            return rows
        for r in _engine_pass(runner, todo, progress):
            key = _key(r)
            if r.get("status") == STATUS_INVALID:
                failed.add(key)
                continue
            before = by_key.get(key)
            r["closed_form_mfu"] = before.get("mfu") if before is not None else None
            by_key[key] = r
        rows = [by_key[key] for key in seen if key in by_key]


def _engine_pass(runner: Runner, todo: list[dict[str, Any]], progress: TextIO | None) -> list[dict[str, Any]]:
    """The engine's rows for these configurations (with a progress bar on a terminal)."""
    refined: list[dict[str, Any]] = []
    bar = Progress(len(todo), "engine", unit="cfg", stream=progress, enabled=None if progress else False)

    def on_refined(rs: list[dict[str, Any]]) -> None:
        refined.extend(rs)
        bar.update(len(rs))

    try:
        runner.run([_values_of(r) for r in todo], "des", on_refined)
    finally:
        bar.close()
    return refined


def largest_gap(rows: Iterable[Mapping[str, Any]]) -> tuple[float | None, dict[str, Any] | None]:
    """The largest relative MFU difference between the closed form and the engine, over the rows
    the engine checked (engine = des with a closed_form_mfu), and that row."""
    gaps = [
        (abs(float(r["closed_form_mfu"]) - float(r["mfu"])) / float(r["mfu"]), r)
        for r in rows
        if r.get("engine") == "des" and isinstance(r.get("closed_form_mfu"), float) and r.get("mfu")
    ]
    if not gaps:
        return None, None
    gap, row = max(gaps, key=lambda g: g[0])
    return gap, dict(row)


def _values_of(row: Mapping[str, Any]) -> dict[str, Any]:
    return {c: row.get(c) for c in KEY_COLUMNS}


def _engines_used(rows: Iterable[Mapping[str, Any]]) -> str:
    used = Counter(str(r.get("engine")) for r in rows if r.get("engine"))
    names = {
        "analytic": "closed form (simulator.analytic)",
        "des": "discrete-event engine",
    }
    return "; ".join(f"{names.get(k, k)}: {n}" for k, n in sorted(used.items())) or "none"
