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
discrete-event engine (`simulator.engine.simulate`), `auto` the closed form for every
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

from .columns import (
    CATEGORY_COLUMNS,
    CHUNK_SIZE,
    COLUMNS,
    EXTRA_CONFIG_COLUMNS,
    EXTRA_RESULT_COLUMNS,
    KEY_COLUMNS,
    MAX_BASE_TRIALS,
    MAX_CONFIGS,
    MAX_JOBS_PER_CPU,
    NUMERIC_COLUMNS,
    PARALLEL_FIELDS,
    RESULT_COLUMNS,
    SPEC_CONFIG_COLUMNS,
    STATUS_INVALID,
    STATUS_OK,
    STATUS_OOM,
    STATUSES,
)
from .driver import SweepResult, _engines_used, _run_passes, _values_of, run_sweep
from .evaluation import (
    ENGINES,
    CommModels,
    Evaluator,
    _analytic,
    _des,
    _empty_row,
    _evaluate_chunk_args,
    _key,
    evaluate,
    evaluate_chunk,
    evaluate_config,
    fill_numbers,
    resolve_evaluator,
)
from .files import (
    TEXT_COLUMNS,
    RowWriter,
    _cell,
    _coerce,
    _is_jsonl,
    _parse_cell,
    read_existing,
    rewrite_atomically,
)
from .plan import (
    SweepPlan,
    _base_values,
    _divisors,
    build_config,
    config_cells,
    load_sweep_scenario,
    plan_sweep,
)
from .rank import _rank_value, rank_rows
from .report import SHORT, TABLE_KEYS, _reason_kind, config_name, format_table, result_json, write_plot
from .runner import Runner, _chunks, _ignore_sigint, run_configs

__all__ = [
    "CATEGORY_COLUMNS",
    "CHUNK_SIZE",
    "COLUMNS",
    "CommModels",
    "ENGINES",
    "EXTRA_CONFIG_COLUMNS",
    "EXTRA_RESULT_COLUMNS",
    "Evaluator",
    "KEY_COLUMNS",
    "MAX_BASE_TRIALS",
    "MAX_CONFIGS",
    "MAX_JOBS_PER_CPU",
    "NUMERIC_COLUMNS",
    "PARALLEL_FIELDS",
    "RESULT_COLUMNS",
    "RowWriter",
    "Runner",
    "SHORT",
    "SPEC_CONFIG_COLUMNS",
    "STATUSES",
    "STATUS_INVALID",
    "STATUS_OK",
    "STATUS_OOM",
    "SweepPlan",
    "SweepResult",
    "TABLE_KEYS",
    "TEXT_COLUMNS",
    "_analytic",
    "_base_values",
    "_cell",
    "_chunks",
    "_coerce",
    "_des",
    "_divisors",
    "_empty_row",
    "_engines_used",
    "_evaluate_chunk_args",
    "_ignore_sigint",
    "_is_jsonl",
    "_key",
    "_parse_cell",
    "_rank_value",
    "_reason_kind",
    "_run_passes",
    "_values_of",
    "build_config",
    "config_cells",
    "config_name",
    "evaluate",
    "evaluate_chunk",
    "evaluate_config",
    "fill_numbers",
    "format_table",
    "load_sweep_scenario",
    "plan_sweep",
    "rank_rows",
    "read_existing",
    "resolve_evaluator",
    "result_json",
    "rewrite_atomically",
    "run_configs",
    "run_sweep",
    "write_plot",
]
