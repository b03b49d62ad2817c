"""`mfusim sweep`: every configuration of a scenario's [sweep] table, ranked (SPEC §3, issue 5).

The configurations are the Cartesian product of the [sweep] lists. Keys absent from the
table keep the scenario's value, except:

* `tp` absent: every divisor of num_gpus up to gpus_per_node (tensor parallelism beyond a
  node is never sensible); `pp` absent: every divisor of num_gpus up to the layer count.
  (With `num_gpus` swept, the union over its values.)
* `dp` absent: num_gpus / (tp·pp·cp), as in a scenario file.
* `schedule` absent while `vp` is swept: `interleaved` when vp > 1, else the scenario's
  schedule (`1f1b` if that was `interleaved`).

Each configuration is built from the loaded scenario with `dataclasses.replace` (the
scenario file, topology and catalogs are read once), so it passes the same validation as
a scenario file. One that does not validate is kept with status `invalid` and the
ConfigError as its reason; one that does not fit in GPU memory is still evaluated and
kept with status `infeasible_memory`. Every configuration becomes one row of the output
(CSV, or JSON Lines for `.jsonl`), written and flushed as soon as it is done, so a killed
sweep loses at most the line being written; `--resume` reads the rows back (keyed by the
configuration columns), drops a truncated last line and evaluates only what is missing.

Engines: `analytic` is the closed form (`simulator.analytic.estimate_step`), `des` the
discrete-event engine (`simulator.simulate.simulate`), `auto` the closed form for every
configuration and then the engine for the best `--refine N` (default 3), listed first and
re-ranked by the engine's numbers. The engine costs about 0.2-2 s per GPT-3-size
configuration against a few ms for the closed form, so N stays small by default: that keeps
the 1,728-configuration GPT-3 sweep near the 300 configurations/s goal on two cores.

Local parallelism is a process pool (`--jobs N`, default one per core; forked workers,
chunks of configurations that share their comm models); `--dask ADDRESS` runs the same
chunks on a Dask cluster (`local` starts a LocalCluster of `--jobs` workers). Dask
and not Ray: Dask distributed is pure Python and pip-installable everywhere mfusim runs
(Ray ships large platform wheels and a C++ runtime), `LocalCluster` gives a real
scheduler + worker processes on one machine for tests, and `client.submit` /
`as_completed` map one-to-one onto the chunked loop used for the local pool.
"""

from __future__ import annotations

import argparse
import csv
import importlib
import io
import itertools
import json
import math
import multiprocessing
import os
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, TextIO

from .comm import CommModel, default_comm_model
from .errors import ConfigError
from .loading import SWEEP_KEYS, load_scenario, parallel_from_table, read_toml, scenario_from_dict
from .memory import memory_footprint
from .metrics import StepReport
from .specs import MAX_GPUS, ParallelConfig, Scenario
from .timeline import CATEGORIES
from .units import GIB_BYTES

# ----------------------------------------------------------------------------- columns
SPEC_CONFIG_COLUMNS = (
    "tp",
    "pp",
    "dp",
    "cp",
    "ep",
    "vp",
    "micro_batch",
    "global_batch",
    "schedule",
    "recompute",
    "sequence_parallel",
    "zero",
)
RESULT_COLUMNS = ("status", "reason", "step_time_s", "tokens_per_s", "mfu", "hfu", "peak_memory_gib")
CATEGORY_COLUMNS = tuple(f"{c}_s" for c in CATEGORIES)
# beyond SPEC §3's minimum: the other sweepable keys, so a row names its configuration fully
EXTRA_CONFIG_COLUMNS = ("num_gpus",) + tuple(
    f.name for f in fields(ParallelConfig) if f.name not in SPEC_CONFIG_COLUMNS
)  # overlap_grad_reduce, overlap_param_gather, tp_comm_overlap, grad_bucket_params, ...
EXTRA_RESULT_COLUMNS = ("num_microbatches", "capacity_gib", "engine")
KEY_COLUMNS = SPEC_CONFIG_COLUMNS + EXTRA_CONFIG_COLUMNS
COLUMNS = (
    SPEC_CONFIG_COLUMNS + RESULT_COLUMNS + CATEGORY_COLUMNS + EXTRA_CONFIG_COLUMNS + EXTRA_RESULT_COLUMNS
)
NUMERIC_COLUMNS = frozenset(
    ("step_time_s", "tokens_per_s", "mfu", "hfu", "peak_memory_gib", "capacity_gib") + CATEGORY_COLUMNS
)

STATUS_OK = "ok"
STATUS_OOM = "infeasible_memory"
STATUS_INVALID = "invalid"
STATUSES = (STATUS_OK, STATUS_OOM, STATUS_INVALID)

PARALLEL_FIELDS = tuple(f.name for f in fields(ParallelConfig))
CHUNK_SIZE = 64  # configurations per task sent to a worker (they share comm models)
MAX_JOBS_PER_CPU = 4  # --jobs beyond this many processes per core only adds overhead
MAX_BASE_TRIALS = 2000  # combinations tried to find a valid base scenario (load_sweep_scenario)
MAX_CONFIGS = 2_000_000  # one sweep; beyond this the rows alone outgrow memory


# ----------------------------------------------------------------------------- evaluators
Evaluator = Callable[[Scenario, CommModel], StepReport]
ENGINES = ("analytic", "des")


def _analytic(scn: Scenario, comm: CommModel) -> StepReport:
    from .analytic import estimate_step

    return estimate_step(scn, comm)


def _des(scn: Scenario, comm: CommModel) -> StepReport:
    from .simulate import simulate

    return simulate(scn, comm, detail=False).report


def resolve_evaluator(engine: str) -> Evaluator:
    """The function that evaluates one configuration: 'analytic' (closed form) or 'des'."""
    if engine == "analytic":
        return _analytic
    if engine == "des":
        return _des
    raise ValueError(f"unknown engine {engine!r}; known: {', '.join(ENGINES)}")


def evaluate(scenario: Scenario, engine: str) -> StepReport:
    """One configuration's StepReport with `engine` ('analytic' or 'des')."""
    return resolve_evaluator(engine)(scenario, default_comm_model(scenario))


@dataclass(slots=True)
class CommModels:
    """Comm models shared by the configurations of one chunk.

    A comm model depends only on the cluster and the placement (num_gpus, tp, cp, dp, pp,
    ep, rank order) and memoizes its answers, so configurations that differ in micro-batch,
    recompute, ZeRO stage or vp reuse the same analysed groups (about a third of the
    closed-form cost for GPT-3 175B).
    """

    models: dict[tuple[int, ...], CommModel] = field(default_factory=dict)

    def for_scenario(self, scn: Scenario) -> CommModel:
        par = scn.parallel
        key = (scn.num_gpus, par.tp, par.cp, par.dp, par.pp, par.ep)
        model = self.models.get(key)
        if model is None:
            model = self.models[key] = default_comm_model(scn)
        return model


# ----------------------------------------------------------------------------- the product
@dataclass(frozen=True, slots=True)
class SweepPlan:
    """The ordered sweep axes: (key, values), the product of which is the sweep."""

    axes: tuple[tuple[str, tuple[Any, ...]], ...]

    @property
    def size(self) -> int:
        return math.prod(len(v) for _, v in self.axes)

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(k for k, _ in self.axes)

    def combos(self) -> Iterator[dict[str, Any]]:
        keys = self.keys
        for values in itertools.product(*(v for _, v in self.axes)):
            yield dict(zip(keys, values, strict=True))


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def plan_sweep(scn: Scenario) -> SweepPlan:
    """The sweep axes of a scenario: its [sweep] lists plus defaults for tp and pp (module doc)."""
    table = dict(scn.sweep)
    gpu_counts = [
        n
        for n in table.get("num_gpus", (scn.num_gpus,))
        if isinstance(n, int) and not isinstance(n, bool) and 0 < n <= MAX_GPUS
    ]
    if not gpu_counts:
        gpu_counts = [scn.num_gpus]
    axes: list[tuple[str, tuple[Any, ...]]] = []
    if "tp" not in table:
        tps = sorted({d for n in gpu_counts for d in _divisors(n) if d <= scn.topology.gpus_per_node})
        axes.append(("tp", tuple(tps)))
    if "pp" not in table:
        pps = sorted({d for n in gpu_counts for d in _divisors(n) if d <= scn.model.layers})
        axes.append(("pp", tuple(pps)))
    axes.extend(scn.sweep)
    plan = SweepPlan(tuple(axes))
    if plan.size > MAX_CONFIGS:
        raise ConfigError(
            f"the product of the lists is {plan.size:,} configurations; at most {MAX_CONFIGS:,} "
            "(split it into several sweeps)",
            key="sweep",
        )
    return plan


def _base_values(scn: Scenario) -> dict[str, Any]:
    return {f: getattr(scn.parallel, f) for f in PARALLEL_FIELDS}


def config_cells(base: Mapping[str, Any], num_gpus: int, combo: Mapping[str, Any]) -> dict[str, Any]:
    """The requested [parallel] values of one combination, with dp and schedule derived."""
    values = dict(base)
    values.update((k, v) for k, v in combo.items() if k != "num_gpus")
    n = combo.get("num_gpus", num_gpus)
    if "dp" not in combo:
        sizes = (values.get("tp"), values.get("pp"), values.get("cp"), n)
        values["dp"] = None
        if all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in sizes):
            tp, pp, cp, gpus = (int(x) for x in sizes)  # type: ignore[arg-type]
            if gpus % (tp * pp * cp) == 0:
                values["dp"] = gpus // (tp * pp * cp)
    if "schedule" not in combo and "vp" in combo:
        vp = values.get("vp")
        if isinstance(vp, int) and not isinstance(vp, bool) and vp > 1:
            values["schedule"] = "interleaved"
        elif base.get("schedule") == "interleaved":
            values["schedule"] = "1f1b"
    values["num_gpus"] = n
    return values


def build_config(base_scn: Scenario, values: Mapping[str, Any]) -> Scenario:
    """A Scenario for one combination; raises ConfigError when it is not a valid one."""
    n = values["num_gpus"]
    table = {k: values[k] for k in PARALLEL_FIELDS if k in values}
    if table.get("dp") is None:
        table.pop("dp", None)
    par = parallel_from_table(table, n)
    return replace(base_scn, parallel=par, num_gpus=n, sweep=())


def _key(row: Mapping[str, Any]) -> tuple[str, ...]:
    return tuple("" if row.get(c) is None else str(row.get(c)) for c in KEY_COLUMNS)


def _empty_row(values: Mapping[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = dict.fromkeys(COLUMNS)
    for c in KEY_COLUMNS:
        row[c] = values.get(c)
    return row


def evaluate_config(
    base_scn: Scenario, values: Mapping[str, Any], engine: str, comms: CommModels | None = None
) -> dict[str, Any]:
    """One row: the configuration's cells, its status and its numbers."""
    row = _empty_row(values)
    try:
        scn = build_config(base_scn, values)
    except ConfigError as err:
        row["status"] = STATUS_INVALID
        row["reason"] = str(err)
        return row
    par = scn.parallel
    for c in SPEC_CONFIG_COLUMNS:
        row[c] = getattr(par, c)
    row["num_microbatches"] = par.num_microbatches
    try:
        comm = (comms or CommModels()).for_scenario(scn)
        report = resolve_evaluator(engine)(scn, comm)
    except ConfigError as err:
        row["status"] = STATUS_INVALID
        row["reason"] = str(err)
        return row
    except Exception as exc:  # noqa: BLE001 - one broken configuration must not end a sweep
        row["status"] = STATUS_INVALID
        row["reason"] = f"simulation failed: {type(exc).__name__}: {exc}"
        return row
    memory = report.memory if report.memory is not None else memory_footprint(scn)
    fill_numbers(row, report, memory.peak_bytes, memory.capacity_bytes, engine)
    if memory.fits:
        row["status"], row["reason"] = STATUS_OK, ""
    else:
        row["status"] = STATUS_OOM
        stage = max(range(len(memory.stage_peak_bytes)), key=memory.stage_peak_bytes.__getitem__, default=0)
        row["reason"] = (
            f"needs {memory.peak_bytes / GIB_BYTES:.1f} GiB per GPU (pipeline stage {stage}), "
            f"{memory.capacity_bytes / GIB_BYTES:.0f} GiB available"
        )
    return row


def fill_numbers(
    row: dict[str, Any], report: StepReport, peak_bytes: float, capacity_bytes: float, engine: str
) -> None:
    row["step_time_s"] = report.step_time_s
    row["tokens_per_s"] = report.tokens_per_s
    row["mfu"] = report.mfu
    row["hfu"] = report.hfu
    row["peak_memory_gib"] = peak_bytes / GIB_BYTES
    row["capacity_gib"] = capacity_bytes / GIB_BYTES
    for c, v in report.breakdown_s.items():
        if f"{c}_s" in row:
            row[f"{c}_s"] = v
    row["engine"] = engine


def evaluate_chunk(
    base_scn: Scenario, chunk: Sequence[Mapping[str, Any]], engine: str
) -> list[dict[str, Any]]:
    """Worker task: rows for a list of configurations (resolved values, see config_cells)."""
    comms = CommModels()
    return [evaluate_config(base_scn, values, engine, comms) for values in chunk]


def _evaluate_chunk_args(args: tuple[Scenario, Sequence[Mapping[str, Any]], str]) -> list[dict[str, Any]]:
    return evaluate_chunk(*args)


# ----------------------------------------------------------------------------- output files
def _is_jsonl(path: Path) -> bool:
    return path.suffix.lower() in (".jsonl", ".ndjson")


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else ""
    return str(value)


def _json_value(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class RowWriter:
    """Appends rows to the output file, one complete line at a time, flushed."""

    def __init__(self, fh: TextIO, jsonl: bool) -> None:
        self._fh = fh
        self._jsonl = jsonl
        self._buf = io.StringIO()
        self._csv = csv.writer(self._buf, lineterminator="\n")

    def header(self) -> None:
        if not self._jsonl:
            self._csv.writerow(COLUMNS)
            self._emit()

    def write(self, rows: Iterable[Mapping[str, Any]]) -> None:
        for row in rows:
            if self._jsonl:
                self._buf.write(json.dumps({c: _json_value(row.get(c)) for c in COLUMNS}) + "\n")
            else:
                self._csv.writerow([_cell(row.get(c)) for c in COLUMNS])
        self._emit()

    def _emit(self) -> None:
        # one write() of whole lines, then flush: a kill leaves at most one partial last line
        self._fh.write(self._buf.getvalue())
        self._fh.flush()
        self._buf.seek(0)
        self._buf.truncate()


TEXT_COLUMNS = frozenset(("status", "reason", "schedule", "recompute", "engine"))


def _parse_cell(column: str, text: str) -> Any:
    """A CSV cell back to the Python value whose str() it is; otherwise the text itself.

    Only exact round trips are parsed, so a row's key (the str() of its configuration cells)
    is the same read back as when it was written, whatever a user put in the [sweep] table.
    """
    if column in TEXT_COLUMNS:
        return text
    if text in ("True", "False"):
        return text == "True"
    for conv in (int, float):
        try:
            value = conv(text)
        except ValueError:
            continue
        if str(value) == text:
            return value
    return text


def _coerce(row: Mapping[str, Any]) -> dict[str, Any]:
    """A row read back from a file, with numbers and booleans as Python values."""
    out: dict[str, Any] = {}
    for c in COLUMNS:
        v = row.get(c)
        if v is None or v == "":
            out[c] = "" if c == "reason" else None
        elif isinstance(v, str):
            out[c] = _parse_cell(c, v)
        else:
            out[c] = v  # JSON Lines: already typed
    return out


def read_existing(path: Path) -> list[dict[str, Any]]:
    """Rows of a previous run of this sweep; cuts a truncated last line off the file.

    Only whole lines are kept: everything after the last newline (a row being written when
    the sweep was killed) is removed — after the file has been recognized as ours. A header
    (CSV) or a line (JSON Lines) that differs from ours is an error, so a file written by
    something else is neither truncated nor appended to.
    """
    if not path.exists() or path.stat().st_size == 0:
        return []
    raw = path.read_bytes()
    cut = raw.rfind(b"\n") + 1
    text = raw[:cut].decode("utf-8", errors="replace")
    tail = raw[cut:].decode("utf-8", errors="replace")
    lines = [line for line in text.split("\n")[:-1] if line.strip()]
    foreign = ConfigError(
        f"{path} was not written by this version of `mfusim sweep` (its columns differ); "
        "remove it or give another --out",
        key="--resume",
    )
    rows: list[dict[str, Any]] = []
    header_line = ",".join(COLUMNS)
    if _is_jsonl(path):
        if not lines and not ("{" + json.dumps(COLUMNS[0])).startswith(tail[: len(COLUMNS[0]) + 3]):
            raise foreign
        for line in lines:
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                raise foreign from None
            if not isinstance(obj, dict) or tuple(obj) != COLUMNS:
                raise foreign
            if obj.get("status") in STATUSES:
                rows.append(_coerce(obj))
    elif not lines:
        if not header_line.startswith(tail):  # not even a partial header of ours
            raise foreign
    else:
        if lines[0] != header_line:
            raise foreign
        for rec in csv.reader(lines[1:]):
            if len(rec) != len(COLUMNS):
                continue
            row = dict(zip(COLUMNS, rec, strict=True))
            if row["status"] in STATUSES:
                rows.append(_coerce(row))
    if cut < len(raw):
        with open(path, "r+b") as fh:
            fh.truncate(cut)
    return rows


def rewrite_atomically(path: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    """Replace the output file by `rows` (write a temporary file, then rename over it)."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, "w", encoding="utf-8", newline="") as fh:
        writer = RowWriter(fh, _is_jsonl(path))
        writer.header()
        writer.write(rows)
        os.fsync(fh.fileno())
    os.replace(tmp, path)


# ----------------------------------------------------------------------------- progress
class Progress:
    """A one-line progress bar on stderr (redrawn at most ten times a second)."""

    WIDTH = 28

    def __init__(self, total: int, stream: TextIO, label: str = "sweep", enabled: bool = True) -> None:
        self.total = max(total, 0)
        self.done = 0
        self._stream = stream
        self._label = label
        self._enabled = enabled and total > 0
        self._start = time.perf_counter()
        self._last = 0.0

    def update(self, n: int) -> None:
        self.done += n
        now = time.perf_counter()
        if self._enabled and now - self._last >= 0.1:
            self._last = now
            self._draw(now)

    def _draw(self, now: float) -> None:
        frac = self.done / self.total if self.total else 1.0
        filled = int(self.WIDTH * frac)
        elapsed = now - self._start
        rate = self.done / elapsed if elapsed > 0 else 0.0
        eta = (self.total - self.done) / rate if rate > 0 else 0.0
        bar = "█" * filled + "░" * (self.WIDTH - filled)
        self._stream.write(
            f"\r{self._label} {bar} {self.done}/{self.total} {frac:4.0%} {rate:6.0f} cfg/s ETA {eta:4.0f}s"
        )
        self._stream.flush()

    def close(self) -> None:
        if self._enabled:
            self._draw(time.perf_counter())
            self._stream.write("\n")
            self._stream.flush()


# ----------------------------------------------------------------------------- running
def _chunks(items: Sequence[Any], size: int) -> list[list[Any]]:
    return [list(items[i : i + size]) for i in range(0, len(items), size)]


class Runner:
    """Where configurations are evaluated: this process, a local process pool, or Dask.

    One runner serves both passes of a sweep (closed form, then the engine for the best),
    so the pool or the Dask cluster starts once. jobs = 1: in this process. jobs > 1: a
    process pool (fork where available), chunks in order. `dask`: 'local' (a LocalCluster of
    `jobs` worker processes) or a scheduler address; chunks as they complete. Use as a
    context manager: leaving it closes the pool or the cluster.
    """

    def __init__(self, base_scn: Scenario, *, jobs: int = 1, dask: str | None = None) -> None:
        self.base_scn = base_scn
        self.jobs = max(1, min(jobs, MAX_JOBS_PER_CPU * (os.cpu_count() or 1)))
        self.dask = dask
        self._pool: Any = None
        self._client: Any = None
        self._cluster: Any = None
        self._base_future: Any = None

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self.close(terminate=exc_type is not None)

    def close(self, terminate: bool = False) -> None:
        if self._pool is not None:
            if terminate:
                self._pool.terminate()
            else:
                self._pool.close()
            self._pool.join()
            self._pool = None
        if self._client is not None:
            self._client.close()
            self._client = None
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None

    def run(
        self, todo: Sequence[Mapping[str, Any]], engine: str, on_rows: Callable[[list[dict[str, Any]]], None]
    ) -> None:
        """Evaluate `todo` (resolved configurations); hand each finished chunk's rows to `on_rows`."""
        if not todo:
            return
        size = max(1, min(CHUNK_SIZE, math.ceil(len(todo) / (4 * self.jobs))))
        chunks = _chunks(todo, size)
        if self.dask:
            self._run_dask(chunks, engine, on_rows)
        elif self.jobs <= 1 or len(chunks) == 1:
            for chunk in chunks:
                on_rows(evaluate_chunk(self.base_scn, chunk, engine))
        else:
            pool = self._local_pool()
            for rows in pool.imap(_evaluate_chunk_args, [(self.base_scn, c, engine) for c in chunks]):
                on_rows(rows)

    def _local_pool(self) -> Any:
        if self._pool is None:
            # import both evaluators here, once: forked workers inherit them
            importlib.import_module(".analytic", __package__)
            importlib.import_module(".engine", __package__)
            methods = multiprocessing.get_all_start_methods()
            ctx = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
            self._pool = ctx.Pool(processes=self.jobs, initializer=_ignore_sigint)
        return self._pool

    def _run_dask(
        self, chunks: list[list[Any]], engine: str, on_rows: Callable[[list[dict[str, Any]]], None]
    ) -> None:
        try:
            from distributed import Client, LocalCluster, as_completed
        except ImportError:
            raise ConfigError(
                "needs the optional Dask extra: pip install 'mfusim[dask]'", key="--dask"
            ) from None
        if self._client is None:
            if self.dask == "local":
                self._cluster = LocalCluster(
                    n_workers=self.jobs, threads_per_worker=1, processes=True, dashboard_address=None
                )
                self._client = Client(self._cluster)
            else:
                try:
                    self._client = Client(self.dask, timeout="20s")
                except (OSError, TimeoutError, ValueError) as exc:
                    raise ConfigError(
                        f"cannot reach the Dask scheduler {self.dask!r}: {exc}", key="--dask"
                    ) from None
            self._base_future = self._client.scatter(self.base_scn, broadcast=True)
        futures = [
            self._client.submit(evaluate_chunk, self._base_future, chunk, engine, pure=False)
            for chunk in chunks
        ]
        for fut in as_completed(futures):
            on_rows(fut.result())


def run_configs(
    base_scn: Scenario,
    todo: Sequence[Mapping[str, Any]],
    engine: str,
    *,
    jobs: int = 1,
    dask: str | None = None,
    on_rows: Callable[[list[dict[str, Any]]], None],
) -> None:
    """Evaluate `todo` with a runner of its own (see Runner)."""
    with Runner(base_scn, jobs=jobs, dask=dask) as runner:
        runner.run(todo, engine, on_rows)


def _ignore_sigint() -> None:
    """Pool workers leave Ctrl-C to the parent, which terminates them (no worker tracebacks)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@dataclass(frozen=True, slots=True)
class SweepResult:
    rows: tuple[dict[str, Any], ...]
    counts: dict[str, int]
    ranked: tuple[dict[str, Any], ...]  # feasible rows, best first
    engine_note: str
    engine: str = "analytic"  # what was asked for: auto | analytic | des
    swept_keys: tuple[str, ...] = ()


def _rank_value(row: Mapping[str, Any], rank_by: str) -> float:
    v = row.get(rank_by)
    return float(v) if isinstance(v, int | float) else -math.inf


def rank_rows(rows: Iterable[Mapping[str, Any]], rank_by: str) -> list[dict[str, Any]]:
    ok = [dict(r) for r in rows if r.get("status") == STATUS_OK and r.get(rank_by) is not None]
    ok.sort(key=lambda r: -_rank_value(r, rank_by))  # stable: ties keep sweep order
    return ok


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
    """Run the sweep of `scn` (see the module docstring) and return every row, ranked."""
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

    file_rows: list[dict[str, Any]] = read_existing(out) if (out is not None and resume) else []
    done_keys = {_key(r) for r in file_rows}
    old_rows = [r for r in file_rows if _key(r) in seen]
    foreign_rows = [r for r in file_rows if _key(r) not in seen]  # another [sweep]'s rows: kept
    todo = [v for v in todo if _key(v) not in done_keys]

    with Runner(scn, jobs=jobs, dask=dask) as runner:
        rows = _run_passes(
            runner,
            todo,
            seen,
            old_rows,
            foreign_rows,
            engine=engine,
            refine=refine,
            rank_by=rank_by,
            out=out,
            resume=resume,
            progress=progress,
        )
    engine_note = _engines_used(rows)
    ranked = rank_rows(rows, rank_by)
    if engine == "auto":
        # the engine's numbers are the better ones: refined configurations first, re-ranked by
        # them, then the rest by the closed form
        ranked = [r for r in ranked if r.get("engine") == "des"] + [
            r for r in ranked if r.get("engine") != "des"
        ]
    counts = Counter(str(r.get("status")) for r in rows)
    return SweepResult(
        rows=tuple(rows),
        counts={s: counts.get(s, 0) for s in STATUSES},
        ranked=tuple(ranked),
        engine_note=engine_note,
        engine=engine,
        swept_keys=plan.keys,
    )


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
) -> list[dict[str, Any]]:
    """The closed-form (or engine) pass over `todo`, written as it goes; then, for `auto`, the
    engine over the best `refine` and an atomic rewrite of the file with their rows."""
    jsonl = out is not None and _is_jsonl(out)
    first_pass = "analytic" if engine in ("auto", "analytic") else "des"
    new_rows: list[dict[str, Any]] = []
    bar = Progress(len(todo), progress or sys.stderr, enabled=progress is not None)
    fh: TextIO | None = None
    try:
        if out is not None:
            # read_existing has cut any partial last line and checked the header
            append = resume and out.exists() and out.stat().st_size > 0
            fh = open(out, "a" if append else "w", encoding="utf-8", newline="")
            writer = RowWriter(fh, jsonl)
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
        ranked = rank_rows(rows, rank_by)
        todo_des = [r for r in ranked[:refine] if r.get("engine") != "des"]
        if todo_des:
            refined: list[dict[str, Any]] = []
            bar = Progress(
                len(todo_des), progress or sys.stderr, label="engine", enabled=progress is not None
            )

            def on_refined(rs: list[dict[str, Any]]) -> None:
                refined.extend(rs)
                bar.update(len(rs))

            try:
                runner.run([_values_of(r) for r in todo_des], "des", on_refined)
            finally:
                bar.close()
            for r in refined:
                if r.get("status") != STATUS_INVALID:  # an engine failure keeps the closed form's row
                    by_key[_key(r)] = r
            rows = [by_key[k] for k in seen if k in by_key]
            if out is not None:
                rewrite_atomically(out, rows + foreign_rows)
    return rows


def _values_of(row: Mapping[str, Any]) -> dict[str, Any]:
    return {c: row.get(c) for c in KEY_COLUMNS}


def _engines_used(rows: Iterable[Mapping[str, Any]]) -> str:
    used = Counter(str(r.get("engine")) for r in rows if r.get("engine"))
    names = {
        "analytic": "closed form (simulator.analytic)",
        "des": "discrete-event engine",
    }
    return "; ".join(f"{names.get(k, k)}: {n}" for k, n in sorted(used.items())) or "none"


# ----------------------------------------------------------------------------- report
TABLE_KEYS = (
    "tp",
    "pp",
    "dp",
    "cp",
    "ep",
    "vp",
    "micro_batch",
    "schedule",
    "recompute",
    "sequence_parallel",
    "zero",
)
SHORT = {
    "compute": "comp",
    "recompute": "recomp",
    "tp_comm": "tp-com",
    "cp_comm": "cp-com",
    "ep_comm": "ep-com",
    "pp_comm": "pp-com",
    "dp_comm": "dp-com",
    "bubble": "bubble",
    "dataloader": "data",
    "optimizer": "optim",
    "other": "other",
}


def format_table(scn: Scenario, result: SweepResult, top: int, rank_by: str) -> str:
    out = io.StringIO()
    c = result.counts
    total = sum(c.values())
    out.write(
        f"{scn.name}: {total} configurations — {c[STATUS_OK]} ok, {c[STATUS_OOM]} infeasible_memory, "
        f"{c[STATUS_INVALID]} invalid\n"
    )
    out.write(f"ranked by {rank_by}; evaluated with: {result.engine_note}\n")
    if result.engine == "auto":
        out.write(
            "(--engine auto: every configuration by the closed form, the best ones re-simulated by the "
            "discrete-event engine and listed first, re-ranked by its numbers)\n"
        )
    best = list(result.ranked[:top])
    if not best:
        out.write("no configuration is valid and fits in memory\n")
    else:
        cats = [k for k in CATEGORIES if any((r.get(f"{k}_s") or 0.0) > 0 for r in best)]
        extra = [k for k in result.swept_keys if k not in TABLE_KEYS]
        head = (
            f"{'#':>3} {'tp':>3} {'pp':>3} {'dp':>5} {'cp':>2} {'ep':>2} {'vp':>2} {'mb':>3} {'sched':<11} "
            f"{'recomp':<9} {'sp':<2} {'z':>1} "
            + "".join(f"{k:>{max(len(k), 6)}} " for k in extra)
            + f"{'engine':<8} {'MFU':>6} {'HFU':>6} {'tokens/s':>10} {'step s':>8} {'GiB':>5} |"
        )
        head += "".join(f" {SHORT[k]:>6}" for k in cats) + "  (% of step)\n"
        out.write(head)
        for i, r in enumerate(best, 1):
            step = r.get("step_time_s") or 0.0
            line = (
                f"{i:>3} {r['tp']:>3} {r['pp']:>3} {r['dp']:>5} {r['cp']:>2} {r['ep']:>2} {r['vp']:>2} "
                f"{r['micro_batch']:>3} {r['schedule']:<11} {r['recompute']:<9} "
                f"{'y' if r['sequence_parallel'] else 'n':<2} {r['zero']:>1} "
                + "".join(f"{r.get(k)!s:>{max(len(k), 6)}} " for k in extra)
                + f"{r.get('engine') or '':<8} {100 * r['mfu']:>5.1f}% {100 * r['hfu']:>5.1f}% "
                f"{r['tokens_per_s']:>10,.0f} {step:>8.3f} {r['peak_memory_gib']:>5.1f} |"
            )
            line += "".join(f" {100 * (r.get(f'{k}_s') or 0.0) / step if step else 0.0:>5.1f}%" for k in cats)
            out.write(line + "\n")
    faster_oom = [
        r
        for r in result.rows
        if r.get("status") == STATUS_OOM and best and _rank_value(r, rank_by) > _rank_value(best[0], rank_by)
    ]
    if faster_oom:
        r = max(faster_oom, key=lambda r: _rank_value(r, rank_by))
        out.write(
            f"{len(faster_oom)} configurations that do not fit in memory would rank higher; the best of them "
            f"({config_name(r)}) at {100 * r['mfu']:.1f}% MFU {r['reason']}\n"
        )
    if c[STATUS_INVALID]:
        reasons = Counter(
            _reason_kind(str(r.get("reason"))) for r in result.rows if r.get("status") == STATUS_INVALID
        )
        out.write("invalid configurations by reason:\n")
        for reason, n in reasons.most_common(6):
            out.write(f"  {n:>6}  {reason}\n")
    return out.getvalue()


def config_name(row: Mapping[str, Any]) -> str:
    """`tp 8, pp 16, dp 8, cp 1, ep 1, vp 1, micro_batch 1, recompute selective, zero 1`."""
    keys = ("tp", "pp", "dp", "cp", "ep", "vp", "micro_batch", "recompute", "zero")
    return ", ".join(f"{k} {row.get(k)}" for k in keys)


def _reason_kind(reason: str) -> str:
    """A reason without its numbers, to group invalid configurations."""
    head = reason.split(": ", 1)
    key = head[0] if len(head) == 2 else ""
    msg = head[-1]
    words = []
    for w in msg.split():
        words.append("N" if any(ch.isdigit() for ch in w) else w)
        if len(words) >= 14:
            break
    return (f"{key}: " if key else "") + " ".join(words)


def result_json(scn: Scenario, result: SweepResult, top: int, rank_by: str) -> dict[str, Any]:
    return {
        "name": scn.name,
        "num_configurations": len(result.rows),
        "counts": result.counts,
        "rank_by": rank_by,
        "engines": result.engine_note,
        "top": [dict(r) for r in result.ranked[:top]],
    }


def write_plot(path: str, scn: Scenario, result: SweepResult, top: int) -> None:
    from .plots import save_figure, sweep_mfu_figure

    fig = sweep_mfu_figure(
        list(result.rows), top=max(top, 10), title=f"{scn.name}: predicted MFU of every configuration"
    )
    save_figure(fig, path)


def load_sweep_scenario(path: str | Path) -> Scenario:
    """Load a sweep's scenario. Its [parallel] table may be valid only together with swept
    values (e.g. `tp = 3` replaced by the [sweep] list): then the first combination of the
    [sweep] lists that makes a valid scenario stands in for it (all swept keys are replaced
    per configuration anyway)."""
    try:
        return load_scenario(path)
    except ConfigError as err:
        data = read_toml(path)
        sweep, parallel, cluster = data.get("sweep"), data.get("parallel", {}), data.get("cluster", {})
        if not (err.key or "").startswith("parallel") or not isinstance(sweep, dict) or not sweep:
            raise
        if not isinstance(parallel, dict) or not isinstance(cluster, dict):
            raise
        keys = [k for k in sweep if k in SWEEP_KEYS]
        lists = [sweep[k] if isinstance(sweep[k], list) else [sweep[k]] for k in keys]
        base_dir = Path(path).resolve().parent
        for values in itertools.islice(itertools.product(*lists), MAX_BASE_TRIALS):
            trial_par = {k: v for k, v in parallel.items() if not (k == "dp" and "dp" not in sweep)}
            trial_cluster = dict(cluster)
            for k, v in zip(keys, values, strict=True):
                if k == "num_gpus":
                    trial_cluster["num_gpus"] = v
                else:
                    trial_par[k] = v
            if "schedule" not in sweep and "vp" in sweep and "schedule" not in parallel:
                trial_par.pop("schedule", None)
            trial = {**data, "parallel": trial_par, "cluster": trial_cluster}
            try:
                return scenario_from_dict(trial, base_dir=base_dir, source=str(path))
            except ConfigError:
                continue
        raise


def cmd_sweep(args: argparse.Namespace) -> int:
    from .cli import check_writable

    scn = load_sweep_scenario(args.scenario)
    out = None
    if args.out:
        if args.resume and Path(args.out).is_dir():
            raise ConfigError(f"{args.out} is a directory; give a file name", key="--out")
        out = check_writable(args.out, "--out")
    elif args.resume:
        raise ConfigError("--resume needs --out FILE (the file to continue)", key="--resume")
    if args.plot:
        check_writable(args.plot, "--plot")
    if out is not None and not args.resume and out.stat().st_size > 0:
        sys.stderr.write(f"mfusim sweep: overwriting {out} (--resume continues it instead)\n")
    progress_stream = sys.stderr
    result = run_sweep(
        scn,
        engine=args.engine,
        jobs=args.jobs or os.cpu_count() or 1,
        top=args.top,
        refine=args.refine,
        rank_by=args.rank_by,
        out=out,
        resume=args.resume,
        dask=args.dask,
        progress=progress_stream,
    )
    failed = sum(1 for r in result.rows if str(r.get("reason") or "").startswith("simulation failed"))
    if failed:
        sys.stderr.write(
            f"mfusim sweep: warning: {failed} configurations failed in the simulator (see their reason)\n"
        )
    if args.plot:
        write_plot(args.plot, scn, result, args.top)
    if args.json:
        sys.stdout.write(
            json.dumps(result_json(scn, result, args.top, args.rank_by), indent=2, allow_nan=False) + "\n"
        )
    else:
        sys.stdout.write(format_table(scn, result, args.top, args.rank_by))
    return 0
