"""The columns of a sweep's rows (SPEC §3) and the limits of a sweep."""

from __future__ import annotations

from dataclasses import fields

from ..plan import PLAN_COLUMNS
from ..specs import ParallelConfig
from ..timeline import CATEGORIES

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
# (list-valued keys are no row cells: recompute_modules and pipeline_layout stay the scenario's, in the fingerprint)
UNSWEPT_PARALLEL_FIELDS = ("recompute_modules", "pipeline_layout")
EXTRA_CONFIG_COLUMNS = ("num_gpus",) + tuple(
    f.name for f in fields(ParallelConfig) if f.name not in SPEC_CONFIG_COLUMNS + UNSWEPT_PARALLEL_FIELDS
)  # overlap_grad_reduce, overlap_param_gather, tp_comm_overlap, grad_bucket_params, ...
# `fingerprint`: which scenario (and mfusim version) a row was computed for; --resume refuses a
# file of another scenario's rows (simulator.sweep.files.scenario_fingerprint)
FINGERPRINT_COLUMN = "fingerprint"
# `closed_form_mfu`: on a row the engine checked (engine = des), the closed form's MFU it replaced
EXTRA_RESULT_COLUMNS = ("num_microbatches", "capacity_gib", "engine", "closed_form_mfu", FINGERPRINT_COLUMN)
KEY_COLUMNS = SPEC_CONFIG_COLUMNS + EXTRA_CONFIG_COLUMNS
# the whole-run plan of the configuration (simulator/plan.py), filled when the scenario has [run]
COLUMNS = (
    SPEC_CONFIG_COLUMNS
    + RESULT_COLUMNS
    + CATEGORY_COLUMNS
    + EXTRA_CONFIG_COLUMNS
    + EXTRA_RESULT_COLUMNS
    + PLAN_COLUMNS
)
NUMERIC_COLUMNS = frozenset(
    ("step_time_s", "tokens_per_s", "mfu", "hfu", "peak_memory_gib", "capacity_gib", "closed_form_mfu")
    + CATEGORY_COLUMNS
    + PLAN_COLUMNS
)

# numeric columns that may be empty: the plan (no [run] table), the closed form's MFU (a row the
# engine did not check)
OPTIONAL_NUMERIC_COLUMNS = frozenset(PLAN_COLUMNS) | {"closed_form_mfu"}

STATUS_OK = "ok"
STATUS_OOM = "infeasible_memory"
STATUS_INVALID = "invalid"
STATUSES = (STATUS_OK, STATUS_OOM, STATUS_INVALID)

PARALLEL_FIELDS = tuple(f.name for f in fields(ParallelConfig))
CHUNK_SIZE = 64  # configurations per task sent to a worker (they share comm models)
MAX_JOBS_PER_CPU = 4  # --jobs beyond this many processes per core only adds overhead
MAX_BASE_TRIALS = 2000  # combinations tried to find a valid base scenario (load_sweep_scenario)
MAX_CONFIGS = 2_000_000  # one sweep; beyond this the rows alone outgrow memory
