"""`mfusim sweep --export-best FILE.toml` / `--export-top K DIR` (issue 15).

A ranked sweep row becomes a runnable scenario: the sweep's scenario file (with its `--set`
overrides) without its `[sweep]` table, with the row's `[parallel]` values and GPU count
written out in full, and every relative path (topology file, config.json) made absolute so
the file runs from wherever it is written. `mfusim run` on it reproduces the row (exactly
for rows the discrete-event engine evaluated; the closed form is within its stated error).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .errors import ConfigError
from .loading import PARALLEL_KEYS, path_kind, resolve_topology_path
from .resources import data_dir


def _absolute_refs(data: dict[str, Any], base_dir: Path) -> None:
    cluster = data.get("cluster")
    if isinstance(cluster, dict) and isinstance(cluster.get("topology"), str):
        ref = cluster["topology"]
        path = resolve_topology_path(ref, base_dir)
        if path.parent.resolve() != data_dir("topologies").resolve():
            cluster["topology"] = str(path.resolve())
    model = data.get("model")
    if isinstance(model, dict) and isinstance(model.get("hf_config"), str):
        ref = Path(model["hf_config"])
        if not ref.is_absolute():
            model["hf_config"] = str((base_dir / ref).resolve())


def scenario_data_for_row(
    data: Mapping[str, Any], base_dir: Path, row: Mapping[str, Any], *, rank: int, rank_by: str
) -> dict[str, Any]:
    """The scenario tables that reproduce one sweep row."""
    out = copy.deepcopy(dict(data))
    out.pop("sweep", None)
    _absolute_refs(out, base_dir)
    parallel = {k: row[k] for k in PARALLEL_KEYS if row.get(k) is not None}
    base_parallel = data.get("parallel")
    for key in ("recompute_modules", "pipeline_layout"):  # no row column
        if isinstance(base_parallel, Mapping) and key in base_parallel:
            parallel[key] = base_parallel[key]
    out["parallel"] = parallel
    cluster = dict(out.get("cluster") or {})
    if row.get("num_gpus") is not None:
        cluster["num_gpus"] = row["num_gpus"]
    out["cluster"] = cluster
    name = str(out.get("name") or "scenario")
    out["name"] = f"{name} (sweep rank {rank} by {rank_by})"
    # the file's key order: name first, as people write them
    return {"name": out.pop("name"), **out}


def scenario_toml(data: Mapping[str, Any], header: Sequence[str] = ()) -> str:
    import tomli_w

    comments = "".join(f"# {line}\n" for line in header)
    return comments + tomli_w.dumps(dict(data))


def _row_header(row: Mapping[str, Any], rank: int, rank_by: str, source: str) -> list[str]:
    def num(key: str, fmt: str) -> str:
        v = row.get(key)
        return format(v, fmt) if isinstance(v, int | float) else "-"

    return [
        f"Exported by `mfusim sweep --export-best/--export-top` from {source}: rank {rank} by {rank_by}.",
        f"Predicted ({row.get('engine', '?')}): MFU {num('mfu', '.4f')}, step {num('step_time_s', '.4g')} s, "
        f"{num('tokens_per_s', ',.0f')} tokens/s, {num('peak_memory_gib', '.1f')} GiB per GPU.",
    ]


def export_rows(
    data: Mapping[str, Any],
    base_dir: Path,
    rows: Sequence[Mapping[str, Any]],
    targets: Sequence[Path],
    *,
    rank_by: str,
    source: str,
    flag: str = "--export-best",
) -> list[Path]:
    """Write rows[i] as the scenario file targets[i] (atomically); returns the paths written."""
    from .outputs import write_text

    written = []
    for i, (row, target) in enumerate(zip(rows, targets, strict=True), start=1):
        tables = scenario_data_for_row(data, base_dir, row, rank=i, rank_by=rank_by)
        write_text(target, flag, scenario_toml(tables, _row_header(row, i, rank_by, source)))
        written.append(target)
    return written


def top_targets(directory: Path, rows: Sequence[Mapping[str, Any]], flag: str = "--export-top") -> list[Path]:
    """File names for `--export-top K DIR`: rank-01-tp8-pp16-dp8-mb1.toml, ..."""
    kind = path_kind(directory)
    if kind == "missing":
        directory.mkdir(parents=True)
    elif kind != "dir":
        raise ConfigError(f"{directory} is not a directory", key=flag)
    width = max(2, len(str(len(rows))))
    out = []
    for i, row in enumerate(rows, start=1):
        tag = "-".join(f"{k}{row.get(k)}" for k in ("tp", "pp", "dp", "cp") if row.get(k) is not None)
        tag += f"-mb{row.get('micro_batch')}-{row.get('recompute')}"
        tag = re.sub(r"[^A-Za-z0-9_.-]", "_", tag)
        out.append(directory / f"rank-{i:0{width}d}-{tag}.toml")
    return out
