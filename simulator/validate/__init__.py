"""`mfusim validate`: predicted vs published, measured training runs (SPEC §3, §5).

Pipeline, one way:

    CSV (SPEC §5 columns) --read_runs_csv--> PublishedRun
        --build_case--> Case (a scenario dict + the source's comparison convention + the
                              assumptions made where the row is silent)  |  Unusable(reason)
        --simulate--> StepReport --compare--> RowResult (predicted, measured, error %)
        --summarize--> MAPE overall / per source / per GPU / on the target set

Every assumption applied to a row is written into `Case.assumptions` and printed with
`--json`; the rules are listed (with their reasons) in docs/validate-assumptions.md. A row
that cannot be simulated is never dropped: it is reported as `Unusable` with the reason.

Comparison conventions (scenarios/published/SOURCES.md):

* iteration time, else tokens/s per GPU, when the source gives them (MPT, NeMo 24.07,
  Megatron-Bridge);
* otherwise TFLOP/s per GPU recomputed from the *simulated* step time with the source's own
  FLOP formula:
  - Narayanan et al. 2021: 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)), which counts the recompute
    forward pass (their eq. 3);
  - Megatron-LM README (Megatron-Core `num_floating_point_operations`) and NeMo: model FLOPs,
    equal to our exact count (full s×s attention, logit layer included);
  - Megatron-Bridge: model FLOPs with causal attention halved (checked against the published
    TFLOP/s ÷ tokens/s ratio, which is 0.89 of the exact count for Llama 3 8B at s = 8192);
  - MosaicML MPT: (6·N + 12·L·h·s) per token with N = all parameters (composer's MFU);
* MFU/HFU percentages are used only when nothing else is given (MPT FP8 rows use the FP8
  peak, as composer does).

Error % = (predicted − measured) / measured of the compared quantity, so for throughput-like
quantities a positive error means the simulator is optimistic (predicts a faster run).
"""

from __future__ import annotations

from ..flops import (
    FLOP_CONVENTIONS,
    FLOPS_EXACT,
    FLOPS_EXACT_CAUSAL,
    FLOPS_MPT,
    FLOPS_NARAYANAN,
    FLOPS_TORCHTITAN,
)
from .architectures import (
    FAMILY_VOCAB,
    GATED_FAMILIES,
    KNOWN_ARCHITECTURES,
    MOE_MARKERS,
    PRESET_ALIASES,
    known_architecture,
    preset_for,
)
from .cases import (
    Case,
    Unusable,
    _arch_int,
    _measured,
    _model_table,
    _preset_layers,
    _smallest_vp,
    build_case,
)
from .cells import parse_dtype, parse_recompute, parse_zero
from .columns import (
    ARCH_COLUMNS,
    CSV_COLUMNS,
    FLOAT_COLUMNS,
    INT_COLUMNS,
    MAX_CSV_BYTES,
    MEASURED_COLUMNS,
    METRIC_HFU,
    METRIC_ITERATION_TIME,
    METRIC_MFU,
    METRIC_TFLOPS,
    METRIC_TOKENS,
    REQUIRED_COLUMNS,
    TARGET_DTYPES,
    TARGET_GPU_PREFIXES,
)
from .conventions import (
    exact_causal_flops_per_step,
    mpt_flops_per_step,
    narayanan_flops_per_step,
    predicted_value,
    source_flops_per_step,
    torchtitan_flops_per_step,
)
from .gpus import GPULabels, GPUMapping, gpu_labels, gpu_mapping
from .report import OUT_COLUMNS, UNITS, _fmt, error_histogram, format_report, markdown_table, write_out
from .results import RowResult, ValidationReport, _flat, result_dict
from .runner import SimulateFn, default_simulate, evaluate, scenario_for, select_runs, validate_runs
from .runs import PublishedRun, _is_number, read_runs_csv
from .sources import KnownSource, SourceRules, SourceTable, StackRule, known_sources, source_rules

__all__ = [
    "FLOP_CONVENTIONS",
    "GPULabels",
    "KnownSource",
    "SourceTable",
    "StackRule",
    "gpu_labels",
    "known_sources",
    "ARCH_COLUMNS",
    "CSV_COLUMNS",
    "Case",
    "FAMILY_VOCAB",
    "FLOAT_COLUMNS",
    "FLOPS_EXACT",
    "FLOPS_EXACT_CAUSAL",
    "FLOPS_MPT",
    "FLOPS_NARAYANAN",
    "FLOPS_TORCHTITAN",
    "GATED_FAMILIES",
    "GPUMapping",
    "INT_COLUMNS",
    "KNOWN_ARCHITECTURES",
    "MAX_CSV_BYTES",
    "MEASURED_COLUMNS",
    "METRIC_HFU",
    "METRIC_ITERATION_TIME",
    "METRIC_MFU",
    "METRIC_TFLOPS",
    "METRIC_TOKENS",
    "MOE_MARKERS",
    "OUT_COLUMNS",
    "PRESET_ALIASES",
    "PublishedRun",
    "REQUIRED_COLUMNS",
    "RowResult",
    "SimulateFn",
    "SourceRules",
    "TARGET_DTYPES",
    "TARGET_GPU_PREFIXES",
    "UNITS",
    "Unusable",
    "ValidationReport",
    "_arch_int",
    "_flat",
    "_fmt",
    "_is_number",
    "_measured",
    "_model_table",
    "_preset_layers",
    "_smallest_vp",
    "build_case",
    "default_simulate",
    "error_histogram",
    "evaluate",
    "exact_causal_flops_per_step",
    "format_report",
    "gpu_mapping",
    "known_architecture",
    "markdown_table",
    "mpt_flops_per_step",
    "narayanan_flops_per_step",
    "parse_dtype",
    "parse_recompute",
    "parse_zero",
    "predicted_value",
    "preset_for",
    "read_runs_csv",
    "result_dict",
    "scenario_for",
    "select_runs",
    "source_flops_per_step",
    "source_rules",
    "torchtitan_flops_per_step",
    "validate_runs",
    "write_out",
]
