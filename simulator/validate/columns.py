"""The columns of a published-runs CSV (SPEC §5), the compared metrics and FLOP conventions."""

from __future__ import annotations

# ----------------------------------------------------------------------------- columns (SPEC §5)
CSV_COLUMNS = (
    "id",
    "source",
    "model_name",
    "params_b",
    "layers",
    "hidden",
    "heads",
    "kv_heads",
    "ffn_hidden",
    "vocab",
    "seq_len",
    "gpu",
    "num_gpus",
    "tp",
    "pp",
    "dp",
    "cp",
    "vp",
    "ep",
    "micro_batch",
    "global_batch",
    "recompute",
    "sequence_parallel",
    "zero_or_dist_opt",
    "precision",
    "measured_tflops_per_gpu",
    "measured_mfu_pct",
    "measured_hfu_pct",
    "iteration_time_s",
    "tokens_per_s",
    "notes",
)
# Columns without which no row can be read; the others are optional (empty when absent).
REQUIRED_COLUMNS = ("id", "gpu", "num_gpus", "seq_len", "global_batch")
MEASURED_COLUMNS = (
    "iteration_time_s",
    "tokens_per_s",
    "measured_tflops_per_gpu",
    "measured_mfu_pct",
    "measured_hfu_pct",
)
# Cells that must be numbers when present: a word here is a broken file (exit 2), not a row
# to skip. Architecture cells may carry a published annotation ("2048 per expert (MoE)"):
# such a row is reported as unusable instead.
INT_COLUMNS = ("num_gpus", "tp", "pp", "dp", "cp", "vp", "ep", "micro_batch", "global_batch", "seq_len")
FLOAT_COLUMNS = MEASURED_COLUMNS
ARCH_COLUMNS = ("layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab")

MAX_CSV_BYTES = 64 * 2**20

# Metrics a row is compared on, in the order of preference (brief: iteration time or
# tokens/s when given, otherwise TFLOP/s per GPU in the source's convention).
METRIC_ITERATION_TIME = "iteration_time_s"
METRIC_TOKENS = "tokens_per_s_per_gpu"
METRIC_TFLOPS = "tflops_per_gpu"
METRIC_MFU = "mfu_pct"
METRIC_HFU = "hfu_pct"

TARGET_GPU_PREFIXES = ("A100", "H100")
TARGET_DTYPES = ("bf16", "fp16")
