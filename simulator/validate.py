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

import argparse
import copy
import csv
import io
import json
import math
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import flops
from .errors import ConfigError
from .loading import read_user_text
from .specs import ModelSpec, Scenario

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

# FLOP conventions of the sources (per optimizer step).
FLOPS_EXACT = "exact"  # SPEC §4 model FLOPs: NeMo, Megatron-Core
FLOPS_EXACT_CAUSAL = "exact-causal"  # attention halved for the causal mask: Megatron-Bridge
FLOPS_NARAYANAN = "narayanan96"  # 96·B·s·l·h²(1 + s/6h + V/16lh): counts the recompute pass
FLOPS_MPT = "mpt"  # (6N + 12·L·h·s) per token, N = all parameters; HFU 8N + 16·L·h·s
FLOPS_TORCHTITAN = "torchtitan"  # 6·(N − N_input_embedding) + 12·L·h·s per token

TARGET_GPU_PREFIXES = ("A100", "H100")
TARGET_DTYPES = ("bf16", "fp16")


# ----------------------------------------------------------------------------- sources
@dataclass(frozen=True, slots=True)
class SourceRules:
    """What a source leaves unsaid, and how we fill it in (docs/validate-assumptions.md)."""

    key: str
    flop_convention: str
    dtype: str  # when the precision cell is empty
    recompute: str  # when the recompute cell is empty
    zero: int  # when zero_or_dist_opt is empty
    sequence_parallel_if_tp: bool  # SP when tp > 1 and the cell is empty
    tp_comm_overlap_if_tp: bool
    overlap_grad_reduce: bool
    note: str
    attention: str = ""  # [kernels] attention of the source's stack ("" = the GPU's default)
    grad_reduce_dtype: str = ""  # [kernels] grad_reduce_dtype ("" = fp32 for bf16/fp8)


SOURCES: tuple[tuple[tuple[str, ...], SourceRules], ...] = (
    (
        ("narayanan",),
        SourceRules(
            key="narayanan21",
            flop_convention=FLOPS_NARAYANAN,
            dtype="fp16",  # "16-bit mixed precision"; A100 fp16 and bf16 peaks are equal (312)
            recompute="full",  # Table 2 ZeRO-3 rows: not stated; 175B/530B need checkpointing
            zero=0,
            sequence_parallel_if_tp=False,  # 2021: before sequence parallelism (Korthikanti 2022)
            tp_comm_overlap_if_tp=False,
            overlap_grad_reduce=False,  # Megatron-LM 2021 (local DDP) reduced grads after backward
            note="Megatron-LM 2021 on Selene (DGX A100 80GB, 8x200 Gb/s HDR)",
            attention="unfused",
            grad_reduce_dtype="",
        ),
    ),
    (
        ("megatron-lm readme", "nvidia/megatron-lm"),
        SourceRules(
            key="megatron-lm",
            flop_convention=FLOPS_EXACT,  # Megatron-Core num_floating_point_operations == exact
            dtype="bf16",  # MFU = TFLOPs / 989: the dense BF16 peak
            recompute="none",
            zero=1,  # Megatron-Core perf runs use the distributed optimizer
            sequence_parallel_if_tp=True,  # --tp-comm-overlap requires sequence parallelism
            tp_comm_overlap_if_tp=True,  # stated in the README
            overlap_grad_reduce=True,  # stated in the README
            note="Megatron-Core r0.8.0 weak scaling on DGX H100",
            attention="cudnn",
            grad_reduce_dtype="bf16",
        ),
    ),
    (
        ("megatron-bridge",),
        SourceRules(
            key="megatron-bridge",
            flop_convention=FLOPS_EXACT_CAUSAL,
            dtype="fp8",  # 25.09 tables: no precision column, page footnote implies FP8
            recompute="none",
            zero=1,  # NeMo/Megatron-Bridge recipes use the distributed optimizer
            sequence_parallel_if_tp=True,
            tp_comm_overlap_if_tp=True,
            overlap_grad_reduce=True,
            note="Megatron-Bridge performance summary (NeMo 25.09-26.08 containers)",
            attention="cudnn",
            grad_reduce_dtype="bf16",
        ),
    ),
    (
        ("nvidia/nemo", "nemo "),
        SourceRules(
            key="nemo",
            flop_convention=FLOPS_EXACT,  # NeMo flops_formulas: exact (checked: ratio 1.000)
            dtype="fp8",
            recompute="none",
            zero=1,
            sequence_parallel_if_tp=True,
            tp_comm_overlap_if_tp=True,
            overlap_grad_reduce=True,
            note="NeMo performance summaries (24.03-25.04)",
            attention="cudnn",
            grad_reduce_dtype="bf16",
        ),
    ),
    (
        ("llm-foundry", "mosaicml", "mpt"),
        SourceRules(
            key="mpt",
            flop_convention=FLOPS_MPT,
            dtype="bf16",
            recompute="none",
            zero=3,  # FSDP FULL_SHARD
            sequence_parallel_if_tp=False,
            tp_comm_overlap_if_tp=False,
            overlap_grad_reduce=True,
            note="MosaicML llm-foundry benchmarks (Composer + PyTorch FSDP)",
            attention="fa2",
            grad_reduce_dtype="bf16",
        ),
    ),
)
# Sources not in the shipped CSV but named by SOURCES.md (GPU labels, FSDP notes); rules from
# their public configurations, used when a CSV of such runs is validated.
OTHER_SOURCES: tuple[tuple[tuple[str, ...], SourceRules], ...] = (
    (
        ("torchtitan",),
        SourceRules(
            key="torchtitan",
            flop_convention=FLOPS_TORCHTITAN,  # torchtitan utils: 6·(N − N_emb) + 12·l·h·q·t
            dtype="bf16",
            recompute="selective",  # torchtitan's Llama configs: activation_checkpoint.mode = "selective"
            zero=3,  # FSDP2, parameters resharded after forward
            sequence_parallel_if_tp=True,  # its TP plan shards norms/dropout on the sequence
            tp_comm_overlap_if_tp=False,  # async TP is opt-in
            overlap_grad_reduce=True,
            note="PyTorch torchtitan (FSDP2 + TP + PP)",
            attention="fa2",
            grad_reduce_dtype="",
        ),
    ),
    (
        ("llama 3 herd", "herd of models", "2407.21783"),
        SourceRules(
            key="llama3-paper",
            flop_convention=FLOPS_EXACT,
            dtype="bf16",
            recompute="none",
            zero=2,  # Meta's FSDP keeps parameters after forward (ZeRO-2-like, SOURCES.md)
            sequence_parallel_if_tp=True,
            tp_comm_overlap_if_tp=False,
            overlap_grad_reduce=True,
            note="Llama 3 pre-training (Dubey et al. 2024), 4D parallelism on H100",
        ),
    ),
    (
        ("automodel",),
        SourceRules(
            key="automodel",
            flop_convention=FLOPS_EXACT,
            dtype="bf16",
            recompute="none",
            zero=3,  # NeMo AutoModel trains Hugging Face models with FSDP2
            sequence_parallel_if_tp=True,
            tp_comm_overlap_if_tp=False,
            overlap_grad_reduce=True,
            note="NVIDIA NeMo AutoModel (Hugging Face models on FSDP2)",
        ),
    ),
)
# Fallback when the source text is not recognised: the id prefixes of the shipped CSV.
ID_PREFIXES = (
    ("narayanan", "narayanan21"),
    ("megatronlm", "megatron-lm"),
    ("mbridge", "megatron-bridge"),
    ("nemo", "nemo"),
    ("mpt", "mpt"),
)
GENERIC_RULES = SourceRules(
    key="other",
    flop_convention=FLOPS_EXACT,
    dtype="bf16",
    recompute="none",
    zero=1,
    sequence_parallel_if_tp=True,
    tp_comm_overlap_if_tp=False,
    overlap_grad_reduce=True,
    note="unknown source: Megatron-style defaults",
)


def source_rules(source: str, run_id: str = "") -> SourceRules:
    """The rules of the source a row cites (matched on its source text, then its id)."""
    text = f" {source.lower()} "
    for needles, rules in OTHER_SOURCES + SOURCES:  # the specific names first ("NeMo AutoModel")
        if any(n in text for n in needles):
            return rules
    rid = run_id.lower()
    for prefix, key in ID_PREFIXES:
        if rid.startswith(prefix):
            return next(rules for _, rules in SOURCES if rules.key == key)
    return GENERIC_RULES


# ----------------------------------------------------------------------------- GPUs
@dataclass(frozen=True, slots=True)
class GPUMapping:
    topology: str
    gpu: str | None = None  # catalog name overriding the topology's GPU
    inter_node: tuple[tuple[str, object], ...] = ()
    intra_node: tuple[tuple[str, object], ...] = ()
    note: str = ""


# Published GPU label (upper-cased, spaces removed) -> shipped topology (+ overrides).
GPU_LABELS: tuple[tuple[str, GPUMapping], ...] = (
    ("A100-SXM-80GB", GPUMapping("dgx-a100")),
    ("A100-SXM4-80GB", GPUMapping("dgx-a100")),
    ("A100-80GB", GPUMapping("dgx-a100")),
    ("A100-SXM-40GB", GPUMapping("dgx-a100-40gb")),
    ("A100-SXM4-40GB", GPUMapping("dgx-a100-40gb")),
    ("A100-40GB", GPUMapping("dgx-a100-40gb")),
    ("A100-PCIE-80GB", GPUMapping("pcie-a100")),
    ("H100-SXM-80GB", GPUMapping("dgx-h100")),
    ("H100-SXM5-80GB", GPUMapping("dgx-h100")),
    ("H100-80GB", GPUMapping("dgx-h100")),
    ("H100", GPUMapping("dgx-h100")),
    ("H200", GPUMapping("dgx-h200")),
    (
        "H800",
        GPUMapping(
            "dgx-h100",
            gpu="h800",
            intra_node=(("link_GBps_per_direction", 200),),
            note="H800: DGX H100 network with NVLink cut to 400 GB/s bidirectional",
        ),
    ),
    ("B200", GPUMapping("dgx-b200")),
    (
        "B300",
        GPUMapping(
            "dgx-b200",
            gpu="b300",
            inter_node=(("nic_Gbps", 800),),
            note="B300: DGX B200 topology with the B300 GPU and 8x800 Gb/s ConnectX-8 NICs",
        ),
    ),
    ("GB200", GPUMapping("gb200-nvl72")),
    (
        "GB300",
        GPUMapping(
            "gb200-nvl72",
            gpu="gb300",
            inter_node=(("nic_Gbps", 800),),
            note="GB300: NVL72 rack as GB200 with the GB300 GPU and 800 Gb/s ConnectX-8 NICs",
        ),
    ),
)
UNSUPPORTED_GPUS = (("TPU", "TPUs are not modeled (no TPU catalog entry or ICI topology)"),)
# Meta's Grand Teton H100: 96 GB HBM2e, power-capped at 500 W. Not in the catalog; simulated as
# H100-SXM (same SMs and tensor cores), which over-states its clocks: expect optimism.
GRAND_TETON = GPUMapping(
    "dgx-h100",
    note="H100-SXM-96GB HBM2e at 500 W (Grand Teton) simulated as H100-SXM 80GB: same die, but its "
    "lower power cap means lower sustained clocks, so the prediction is optimistic (not in the catalog)",
)


def gpu_mapping(label: str) -> GPUMapping | str:
    """Topology for a published GPU label, or the reason it is not modeled.

    Exact labels of the shipped CSV first, then a lenient reading of other spellings
    ("NVIDIA A100 80GB", "H100 SXM5", "GB200 NVL72"): the part number decides.
    """
    key = re.sub(r"[\s_]+", "", label.upper()).replace("NVIDIA", "")
    for needle, reason in UNSUPPORTED_GPUS:
        if needle in key:
            return reason
    if "H100" in key and ("GRANDTETON" in key or "96GB" in key):
        return GRAND_TETON
    for known, mapping in GPU_LABELS:
        if key == known:
            return mapping
    by_part = dict(GPU_LABELS)
    if "GB300" in key:
        return by_part["GB300"]
    if "GB200" in key:
        return by_part["GB200"]
    if "B300" in key:
        return by_part["B300"]
    if "B200" in key:
        return by_part["B200"]
    if "H800" in key:
        return by_part["H800"]
    if "H200" in key:
        return by_part["H200"]
    if "H100" in key:
        if "PCIE" in key or "NVL" in key:
            return f"GPU {label!r}: H100 PCIe/NVL parts (lower clocks and power) are not in the GPU catalog"
        return by_part["H100"]
    if "A100" in key:
        if "PCIE" in key:
            return by_part["A100-PCIE-80GB"]
        return by_part["A100-40GB"] if "40G" in key else by_part["A100-80GB"]
    return f"GPU {label!r} has no topology mapping (known: {', '.join(k for k, _ in GPU_LABELS)})"


def parse_dtype(cell: str) -> str | None:
    """A published precision label -> simulated dtype ('' when not stated); None = not modeled."""
    text = cell.strip().lower()
    if not text:
        return ""
    if "fp4" in text or "int8" in text or "int4" in text:
        return None
    if "fp8" in text or "e4m3" in text:
        return "fp8"
    if "bf16" in text or "bfloat16" in text:
        return "bf16"
    if "fp16" in text or "float16" in text or "half" in text:
        return "fp16"
    if "fp32" in text or "tf32" in text:
        return None
    return None


def parse_recompute(cell: str) -> str | None:
    """none | selective | full ('' when not stated); None = not understood."""
    text = cell.strip().lower()
    if not text:
        return ""
    if text in ("none", "no", "false", "0", "off"):
        return "none"
    if "selective" in text or "attention" in text:
        return "selective"
    if text in ("full", "yes", "true", "1", "on") or "full" in text or "uniform" in text or "block" in text:
        return "full"
    return None


def parse_zero(cell: str) -> int | None:
    """ZeRO stage of a zero_or_dist_opt cell (-1 when not stated); None = not understood."""
    text = re.sub(r"[^a-z0-9]", "", cell.lower())
    if not text:
        return -1
    table = {
        "none": 0,
        "no": 0,
        "ddp": 0,
        "0": 0,
        "zero0": 0,
        "zero1": 1,
        "1": 1,
        "distopt": 1,
        "distributedoptimizer": 1,
        "distributedadam": 1,
        "zero2": 2,
        "2": 2,
        "shardgradop": 2,
        "fsdpshardgradop": 2,
        "zero3": 3,
        "3": 3,
        "fsdp": 3,
        "fullshard": 3,
        "fsdpfullshard": 3,
        "hsdp": 3,
        "hybridshard": 3,
    }
    return table.get(text)


# ----------------------------------------------------------------------------- reading
@dataclass(frozen=True, slots=True)
class PublishedRun:
    """One CSV row, as published (the cells are strings; empty = not given)."""

    line: int
    cells: Mapping[str, str]

    def get(self, column: str) -> str:
        return (self.cells.get(column) or "").strip()

    @property
    def run_id(self) -> str:
        return self.get("id") or f"line-{self.line}"

    @property
    def source(self) -> str:
        return self.get("source")

    @property
    def gpu(self) -> str:
        return self.get("gpu")

    def int_cell(self, column: str) -> int | None:
        text = self.get(column)
        return None if not text else int(float(text))

    def float_cell(self, column: str) -> float | None:
        text = self.get(column)
        return None if not text else float(text)


def _is_number(text: str) -> bool:
    try:
        value = float(text)
    except ValueError:
        return False
    return math.isfinite(value)


def read_runs_csv(path: str | Path) -> list[PublishedRun]:
    """Parse a published-runs CSV; any defect of the file is a ConfigError naming it."""
    name = str(path)
    text = read_user_text(path, "CSV", MAX_CSV_BYTES, encoding="utf-8-sig")
    try:
        reader = csv.DictReader(io.StringIO(text, newline=""))
        header = [h.strip() for h in (reader.fieldnames or [])]
        missing = [c for c in REQUIRED_COLUMNS if c not in header]
        if missing:
            raise ConfigError(f"missing column(s) {', '.join(missing)} (SPEC §5)", file=name)
        if not any(c in header for c in MEASURED_COLUMNS):
            raise ConfigError(
                f"no measurement column; expected one of {', '.join(MEASURED_COLUMNS)}", file=name
            )
        runs = []
        for row in reader:
            line = reader.line_num
            cells = {(k or "").strip(): (v if isinstance(v, str) else "") for k, v in row.items()}
            if not any(v.strip() for v in cells.values()):
                continue  # blank line
            run = PublishedRun(line=line, cells=cells)
            for column in INT_COLUMNS + FLOAT_COLUMNS:
                value = run.get(column)
                if value and not _is_number(value):
                    raise ConfigError(
                        f"line {line} (id {run.run_id!r}): column {column!r} must be a number, got {value!r}",
                        file=name,
                    )
            for column in INT_COLUMNS:
                value = run.get(column)
                if value and (float(value) != int(float(value)) or float(value) < 0):
                    raise ConfigError(
                        f"line {line} (id {run.run_id!r}): column {column!r} must be a non-negative integer, got {value!r}",
                        file=name,
                    )
            runs.append(run)
    except csv.Error as exc:
        raise ConfigError(f"malformed CSV: {exc}", file=name) from None
    if not runs:
        raise ConfigError("no data rows", file=name)
    return runs


# ----------------------------------------------------------------------------- row -> case
@dataclass(frozen=True, slots=True)
class Case:
    """A usable row: the scenario to simulate and how to compare it with the measurement."""

    run_id: str
    source: str
    source_key: str
    gpu: str
    scenario: Mapping[str, Any]  # shaped like a scenario TOML (SPEC §1)
    metric: str
    measured: float
    flop_convention: str
    dtype: str
    is_moe: bool
    assumptions: tuple[str, ...]

    @property
    def is_target(self) -> bool:
        """A100/H100, dense, BF16/FP16: the set the accuracy target is stated on."""
        return (
            any(prefix in self.gpu.upper() for prefix in TARGET_GPU_PREFIXES)
            and self.dtype in TARGET_DTYPES
            and not self.is_moe
        )


@dataclass(frozen=True, slots=True)
class Unusable:
    """A row that cannot be simulated, and why (never dropped silently)."""

    run_id: str
    source: str
    source_key: str
    gpu: str
    reason: str


def _arch_int(run: PublishedRun, column: str) -> int | None | str:
    """An architecture cell: an int, None when empty, or the raw text when annotated."""
    text = run.get(column)
    if not text:
        return None
    if _is_number(text) and float(text) == int(float(text)) and float(text) > 0:
        return int(float(text))
    return text


PRESET_ALIASES = (
    (r"^llama[-_ ]?2[-_ ]?7b$", "llama2-7b"),
    (r"^llama[-_ ]?2[-_ ]?13b$", "llama2-13b"),
    (r"^llama[-_ ]?2[-_ ]?70b$", "llama2-70b"),
    (r"^llama[-_ ]?3(\.1)?[-_ ]?8b$", "llama3-8b"),
    (r"^llama[-_ ]?3(\.1)?[-_ ]?70b$", "llama3-70b"),
    (r"^llama[-_ ]?3(\.1)?[-_ ]?405b$", "llama3-405b"),
    (r"^gpt-?3[-_ ]?175b$", "gpt3-175b"),
    (r"^mixtral[-_ ]?8x7b$", "mixtral-8x7b"),
    (r"^mpt[-_ ]?7b$", "mpt-7b"),
)
GATED_FAMILIES = ("llama", "mistral", "mixtral", "qwen", "gemma", "deepseek", "yi-", "internlm", "olmo")
MOE_MARKERS = (
    "moe",
    "mixtral",
    "deepseek",
    "qwen3_30b",
    "qwen3_235b",
    "a3b",
    "a22b",
    "gpt oss",
    "gpt-oss",
    "gptoss",
    "kimi",
    "nemotron_3_",
    "nemotron-3-",
    "nemotron 3 ",
    "dbrx",
    "grok",
)
FAMILY_VOCAB = (
    (
        "nemotron",
        256000,
        "Nemotron vocabulary 256,000 (Nemotron-4 SentencePiece; the published TFLOP/s ÷ tokens/s ratio implies ≈ 256k)",
    ),
    (
        "gpt",
        51200,
        "GPT vocabulary 51,200 (GPT-2 BPE padded, as Megatron/Narayanan; the NeMo TFLOP/s ÷ tokens/s ratio implies ≈ 51k)",
    ),
)


# MoE architectures the CSV only names (its notes point to the Hugging Face configs). Standard
# GQA attention + routed experts only: DeepSeek-V3/Kimi-K2 (MLA, dense first layers), GPT-OSS
# (attention sinks, sliding windows, biases) and Nemotron 3 Nano (hybrid Mamba) stay unusable.
KNOWN_ARCHITECTURES: tuple[tuple[str, dict[str, Any], str], ...] = (
    (
        r"qwen3[-_ ]?30b[-_ ]?a3b",
        {
            "layers": 48,
            "hidden": 2048,
            "heads": 32,
            "kv_heads": 4,
            "head_dim": 128,
            "ffn_hidden": 6144,
            "vocab": 151936,
            "gated_mlp": True,
            "moe": {"num_experts": 128, "top_k": 8, "expert_ffn_hidden": 768},
        },
        "Qwen/Qwen3-30B-A3B config.json (48 layers, hidden 2048, 32 heads x 128, 4 KV heads, "
        "128 experts of 768, top-8, vocab 151,936)",
    ),
    (
        r"qwen3[-_ ]?235b[-_ ]?a22b",
        {
            "layers": 94,
            "hidden": 4096,
            "heads": 64,
            "kv_heads": 4,
            "head_dim": 128,
            "ffn_hidden": 12288,
            "vocab": 151936,
            "gated_mlp": True,
            "moe": {"num_experts": 128, "top_k": 8, "expert_ffn_hidden": 1536},
        },
        "Qwen/Qwen3-235B-A22B config.json (94 layers, hidden 4096, 64 heads x 128, 4 KV heads, "
        "128 experts of 1536, top-8, vocab 151,936)",
    ),
)


def known_architecture(model_name: str) -> tuple[dict[str, Any], str] | None:
    name = model_name.strip().lower()
    for pattern, table, citation in KNOWN_ARCHITECTURES:
        if re.search(pattern, name):
            return copy.deepcopy(table), citation
    return None


def preset_for(model_name: str) -> str | None:
    from .loading import load_model_presets

    name = model_name.strip().lower().split(" (")[0]
    presets = load_model_presets()
    if name in presets:
        return name
    for pattern, preset in PRESET_ALIASES:
        if re.match(pattern, name) and preset in presets:
            return preset
    return None


def _model_table(run: PublishedRun, rules: SourceRules, notes: list[str]) -> dict[str, Any] | str:
    """The [model] table of the scenario, or the reason the row has no usable architecture."""
    name = run.get("model_name") or run.run_id
    lname = name.lower()
    ep = run.int_cell("ep") or 1
    arch = {c: _arch_int(run, c) for c in ARCH_COLUMNS}
    annotated = {c: v for c, v in arch.items() if isinstance(v, str)}
    moe = (
        ep > 1
        or any(m in lname for m in MOE_MARKERS)
        or any("expert" in v.lower() for v in annotated.values())
    )
    if moe:
        known = known_architecture(name)
        if known is not None:
            arch_table, citation = known
            notes.append(f"model: architecture from {citation} (the CSV has no expert columns)")
            if "tokendrop" in lname:
                notes.append(
                    "moe: published as token-dropping; simulated dropless (every token reaches top_k experts)"
                )
            notes.append("moe: routing simulated as perfectly balanced (the page force-balances tokens)")
            seq = run.int_cell("seq_len")
            return {"name": name, **arch_table, **({"seq_len": seq} if seq else {})}
        return (
            "mixture-of-experts model: the CSV has no expert columns (num_experts, top_k, expert ffn), "
            "the notes point to an external config we do not carry (or to MLA / hybrid Mamba layers "
            "the simulator does not model); not simulated"
            + (
                f" (annotated cells: {', '.join(f'{k}={v!r}' for k, v in annotated.items())})"
                if annotated
                else ""
            )
        )
    if annotated:
        return "non-numeric architecture cell(s): " + ", ".join(f"{k}={v!r}" for k, v in annotated.items())
    table: dict[str, Any] = {"name": name}
    preset = preset_for(name)
    if preset is not None:
        table["preset"] = preset
    for column in ("layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab"):
        value = arch[column]
        if isinstance(value, int):
            table[column] = value
    seq_len = run.int_cell("seq_len")
    if seq_len:
        table["seq_len"] = seq_len
    elif preset is not None:
        notes.append("seq_len: not given -> the preset's")
    if preset is None:
        missing = [c for c in ("layers", "hidden", "heads") if c not in table]
        if missing:
            return f"architecture not given ({', '.join(missing)} empty) and no model preset matches {name!r}"
        if "vocab" not in table:
            for family, vocab, why in FAMILY_VOCAB:
                if family in lname:
                    table["vocab"] = vocab
                    notes.append(f"vocab: {why}")
                    break
            else:
                return f"vocabulary not given and no model preset matches {name!r}"
        # Family conventions (the CSV has no column for them).
        if rules.key == "mpt" or lname.startswith("mpt"):
            table["tied_embeddings"] = True  # MPT ties input/output embeddings; ALiBi, no learned positions
        elif any(f in lname for f in GATED_FAMILIES):
            table["gated_mlp"] = True
        elif lname.startswith("gpt"):
            table["tied_embeddings"] = True  # Megatron GPT shares embedding and output weights
            table["position_embeddings"] = True  # learned absolute positions
    else:
        notes.append(f"model: preset {preset!r} for the fields the row leaves empty")
    return table


def _smallest_vp(layers: int, pp: int, num_microbatches: int) -> int:
    """Chunks per rank when a source used the interleaved schedule without saying how many."""
    if pp <= 1 or layers % pp or num_microbatches % pp:
        return 1
    per_stage = layers // pp
    for vp in range(2, 9):
        if per_stage % vp == 0:
            return vp
    return 1


def build_case(run: PublishedRun) -> Case | Unusable:
    """Turn one published row into a scenario dict + comparison, or say why it cannot be."""
    rules = source_rules(run.source, run.run_id)
    notes: list[str] = []

    def unusable(reason: str) -> Unusable:
        return Unusable(run.run_id, run.source, rules.key, run.gpu, reason)

    # --- what was measured, in the source's convention
    metric_value = _measured(run)
    if metric_value is None:
        return unusable(
            "no measurement (iteration_time_s, tokens_per_s, measured_tflops_per_gpu, MFU or HFU)"
        )
    metric, measured = metric_value
    if measured <= 0:
        return unusable(f"measured {metric} is {measured:g}, not positive")
    lname = (run.get("model_name") + " " + run.run_id).lower()
    if "lora" in lname or "_sft_" in lname or "fine-tun" in run.get("notes").lower()[:80]:
        return unusable("fine-tuning run (SFT on packed sequences / LoRA): not pre-training, not modeled")

    # --- hardware
    mapping = gpu_mapping(run.gpu)
    if isinstance(mapping, str):
        return unusable(mapping)
    precision = run.get("precision").lower()
    parsed_dtype = parse_dtype(precision)
    if parsed_dtype is None:
        return unusable(f"precision {precision!r} is not modeled (dtypes: bf16, fp16, fp8)")
    if not parsed_dtype:
        dtype = rules.dtype
        notes.append(f"precision: not stated -> {dtype} ({rules.key} default)")
    else:
        dtype = parsed_dtype
        if dtype == "fp8" and precision != "fp8":
            notes.append(
                f"precision: {precision} simulated as fp8 (same dense FP8 tensor-core peak; "
                "scaling-factor overhead of current/MX/blockwise scaling not modeled)"
            )

    # --- model
    model = _model_table(run, rules, notes)
    if isinstance(model, str):
        return unusable(model)
    if not model.get("seq_len") and "preset" not in model:
        return unusable("seq_len not given")

    # --- parallel split
    num_gpus = run.int_cell("num_gpus")
    tp, pp = run.int_cell("tp"), run.int_cell("pp")
    if not num_gpus:
        parts = [run.int_cell(c) for c in ("tp", "pp", "dp")]
        if not all(parts):
            return unusable("num_gpus not given (nor tp, pp and dp to derive it)")
        num_gpus = math.prod(p or 1 for p in parts) * (run.int_cell("cp") or 1)
        notes.append(f"num_gpus: not given -> tp*pp*dp*cp = {num_gpus}")
    if tp is None or pp is None:
        if rules.key == "mpt":
            tp, pp = tp or 1, pp or 1
        else:
            return unusable("parallel split (tp/pp) not published")
    cp = run.int_cell("cp") or 1
    if not run.get("cp"):
        notes.append("cp: not stated -> 1")
    if tp < 1 or pp < 1:
        return unusable(f"tp = {tp}, pp = {pp}: must be >= 1")
    mp = tp * pp * cp
    published_dp = run.int_cell("dp")
    if published_dp and published_dp * mp != num_gpus:
        # NeMo's B200 long-sequence table: tp*pp*dp*cp = num_gpus/4 in every row. Keep the
        # published split (it fixes the per-GPU work) and simulate the GPUs it covers; the
        # compared quantities are per GPU.
        notes.append(
            f"num_gpus: published {num_gpus} but tp*pp*dp*cp = {published_dp * mp}; "
            f"simulated the published split on {published_dp * mp} GPUs (per-GPU metric)"
        )
        num_gpus = published_dp * mp
    if num_gpus % mp:
        return unusable(f"tp*pp*cp = {mp} does not divide num_gpus = {num_gpus}")
    dp = num_gpus // mp
    micro_batch = run.int_cell("micro_batch")
    if not micro_batch:
        micro_batch = 1
        notes.append("micro_batch: not stated -> 1 (Megatron/NeMo default)")
    global_batch = run.int_cell("global_batch")
    if not global_batch:
        return unusable("global_batch not given")
    if global_batch % (micro_batch * dp):
        return unusable(
            f"global_batch {global_batch} is not a multiple of micro_batch*dp = {micro_batch}*{dp}"
        )
    num_microbatches = global_batch // (micro_batch * dp)
    layers = int(model.get("layers") or 0) or _preset_layers(model)
    vp_cell = run.int_cell("vp")
    if pp == 1:
        vp = 1
    elif vp_cell is None:
        vp = _smallest_vp(layers, pp, num_microbatches)
        notes.append(
            f"vp: not stated with pp = {pp} -> {vp} (smallest chunk count in 2..8 dividing the "
            f"{layers // pp if layers % pp == 0 else layers / pp:g} layers per stage; 1 = plain 1F1B)"
        )
    else:
        vp = vp_cell
    if vp > 1 and (layers % (pp * vp) or num_microbatches % pp):
        notes.append(
            f"vp: published {vp}, but {layers} layers / {num_microbatches} micro-batches do not split "
            f"evenly over pp*vp = {pp * vp} (Megatron's uneven first/last stages are not modeled): "
            "simulated as plain 1F1B"
        )
        vp = 1
    parsed_recompute = parse_recompute(run.get("recompute"))
    if parsed_recompute is None:
        return unusable(f"recompute {run.get('recompute')!r} is not one of none, selective, full")
    recompute = parsed_recompute
    if not recompute:
        recompute = rules.recompute
        notes.append(f"recompute: not stated -> {recompute} ({rules.key} default)")
    sp_cell = run.get("sequence_parallel").lower()
    if sp_cell in ("yes", "true", "1", "on", "y"):
        sequence_parallel = tp > 1
    elif sp_cell in ("no", "false", "0", "off", "n"):
        sequence_parallel = False
    else:
        sequence_parallel = rules.sequence_parallel_if_tp and tp > 1
        if tp > 1:
            notes.append(
                f"sequence_parallel: not stated -> {str(sequence_parallel).lower()} ({rules.key} default)"
            )
    zero_cell = run.get("zero_or_dist_opt").lower()
    parsed_zero = parse_zero(zero_cell)
    if parsed_zero is None:
        return unusable(f"zero_or_dist_opt {zero_cell!r} is not understood")
    zero = parsed_zero
    notes_text = run.get("notes").lower()
    if zero == 3 and (
        "zero-2-like" in notes_text or "not reshard" in notes_text or "no reshard" in notes_text
    ):
        zero = 2
        notes.append("zero: FSDP that keeps parameters after forward (the notes say so) -> zero = 2")
    if zero < 0:
        zero = rules.zero
        notes.append(f"zero: distributed optimizer not stated -> zero = {zero} ({rules.key} default)")
    if rules.key == "mpt" and zero_cell == "fsdp":
        notes.append("zero: FSDP FULL_SHARD -> zero = 3")
    tp_comm_overlap = rules.tp_comm_overlap_if_tp and tp > 1
    if tp_comm_overlap and not sequence_parallel:
        tp_comm_overlap = False
    if tp > 1:
        notes.append(f"tp_comm_overlap: -> {str(tp_comm_overlap).lower()} ({rules.key} default)")
    if not rules.overlap_grad_reduce:
        notes.append(
            "overlap_grad_reduce: false (Megatron-LM 2021 reduced gradients after the backward pass)"
        )
    ep = run.int_cell("ep") or 1

    parallel: dict[str, Any] = {
        "tp": tp,
        "pp": pp,
        "dp": dp,
        "cp": cp,
        "ep": ep,
        "vp": vp,
        "micro_batch": micro_batch,
        "global_batch": global_batch,
        "schedule": "interleaved" if vp > 1 else "1f1b",
        "sequence_parallel": sequence_parallel,
        "recompute": recompute,
        "zero": zero,
        "overlap_grad_reduce": rules.overlap_grad_reduce,
        "overlap_param_gather": True,
        "tp_comm_overlap": tp_comm_overlap,
    }
    cluster: dict[str, Any] = {"topology": mapping.topology, "num_gpus": num_gpus}
    if mapping.gpu:
        cluster["gpu"] = mapping.gpu
    if mapping.inter_node:
        cluster["inter_node"] = dict(mapping.inter_node)
    if mapping.intra_node:
        cluster["intra_node"] = dict(mapping.intra_node)
    if mapping.note:
        notes.append(f"cluster: {mapping.note}")
    run_notes = run.get("notes").lower()
    if "roce" in run_notes and "1600" in run_notes and run.gpu.upper().startswith("A100"):
        # MosaicML's A100 tables: "1600 Gbps node-node interconnect (RoCE)": 8 x 200 Gb/s per node
        # on a plain (not rail-optimized) Ethernet fabric.
        cluster["inter_node"] = {
            **cluster.get("inter_node", {}),
            "fabric": "fat-tree",
            "nics_per_node": 8,
            "nic_Gbps": 200,
        }
        notes.append("cluster: 1600 Gbps RoCE per node (8 x 200 Gb/s, fat tree) as the notes say")
    scenario: dict[str, Any] = {
        "name": run.run_id,
        "model": model,
        "cluster": cluster,
        "parallel": parallel,
        "precision": {"dtype": dtype},
    }
    # The source's software stack (docs/validate-assumptions.md): attention kernel and the dtype
    # of the data-parallel gradient reduction.
    kernels: dict[str, Any] = {}
    if rules.attention:
        kernels["attention"] = rules.attention
        notes.append(f"kernels: attention = {rules.attention} ({rules.key} stack)")
    if rules.grad_reduce_dtype:
        kernels["grad_reduce_dtype"] = rules.grad_reduce_dtype
        notes.append(f"kernels: grad_reduce_dtype = {rules.grad_reduce_dtype} ({rules.key} stack)")
    if kernels:
        scenario["kernels"] = kernels
    return Case(
        run_id=run.run_id,
        source=run.source,
        source_key=rules.key,
        gpu=run.gpu,
        scenario=scenario,
        metric=metric,
        measured=measured,
        flop_convention=rules.flop_convention,
        dtype=dtype,
        is_moe=ep > 1 or "moe" in model,
        assumptions=tuple(notes),
    )


def _preset_layers(model: Mapping[str, Any]) -> int:
    from .loading import load_model_presets

    preset = model.get("preset")
    if isinstance(preset, str):
        value = load_model_presets().get(preset, {}).get("layers", 0)
        return int(value) if isinstance(value, int) else 0
    return 0


def _measured(run: PublishedRun) -> tuple[str, float] | None:
    """The quantity to compare, in order of preference (SOURCES.md: as published)."""
    time_s = run.float_cell("iteration_time_s")
    if time_s is not None:
        return METRIC_ITERATION_TIME, time_s
    tokens = run.float_cell("tokens_per_s")
    if tokens is not None:
        return METRIC_TOKENS, tokens
    tflops = run.float_cell("measured_tflops_per_gpu")
    if tflops is not None:
        return METRIC_TFLOPS, tflops
    mfu = run.float_cell("measured_mfu_pct")
    if mfu is not None:
        return METRIC_MFU, mfu
    hfu = run.float_cell("measured_hfu_pct")
    if hfu is not None:
        return METRIC_HFU, hfu
    return None


# ----------------------------------------------------------------------------- conventions
def narayanan_flops_per_step(m: ModelSpec, global_batch: int) -> float:
    """Narayanan et al. 2021 eq. 3: 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)) (includes recompute)."""
    return flops.megatron_hardware_flops_per_step(m, global_batch)


def mpt_flops_per_step(m: ModelSpec, global_batch: int, recompute: str) -> float:
    """llm-foundry collect_results.py: (6N + 12·L·h·s) per token, N = all parameters;
    HFU convention with activation checkpointing: 8N + 16·L·h·s (one more forward)."""
    n = flops.total_params(m)
    attn = m.layers * m.hidden * m.seq_len
    per_token = 8 * n + 16 * attn if recompute == "full" else 6 * n + 12 * attn
    return per_token * global_batch * m.seq_len


def torchtitan_flops_per_step(m: ModelSpec, global_batch: int) -> float:
    """torchtitan `get_num_flop_per_token`: 6·(N − N_emb) + 12·l·h·q·t, N = all parameters,
    N_emb = the input embedding table only (the output projection stays in N)."""
    n = flops.total_params(m) - m.vocab * m.hidden
    per_token = 6 * n + 12 * m.layers * m.q_dim * m.seq_len
    return per_token * global_batch * m.seq_len


def exact_causal_flops_per_step(m: ModelSpec, global_batch: int) -> float:
    """Exact model FLOPs with the attention score/value matmuls halved for the causal mask."""
    core = sum(flops.layer_forward_flops(m, i).attention_core for i in range(m.layers))
    per_seq = flops.model_flops_per_sequence(m) - 0.5 * (1 + flops.BACKWARD_TO_FORWARD) * core
    return global_batch * per_seq


def source_flops_per_step(
    convention: str, m: ModelSpec, global_batch: int, recompute: str, *, hardware: bool = False
) -> float:
    """FLOPs of one step as the source counts them."""
    if convention == FLOPS_NARAYANAN:
        return narayanan_flops_per_step(m, global_batch)
    if convention == FLOPS_MPT:
        return mpt_flops_per_step(m, global_batch, recompute if hardware else "none")
    if convention == FLOPS_EXACT_CAUSAL:
        return exact_causal_flops_per_step(m, global_batch)
    if convention == FLOPS_TORCHTITAN:
        return torchtitan_flops_per_step(m, global_batch)
    if hardware:
        return flops.step_flops(m, global_batch, recompute).hardware
    return global_batch * flops.model_flops_per_sequence(m)


def predicted_value(case: Case, scenario: Scenario, step_time_s: float) -> float:
    """What the simulated step time means in the row's own convention."""
    par = scenario.parallel
    n = scenario.num_gpus
    if case.metric == METRIC_ITERATION_TIME:
        return step_time_s
    if case.metric == METRIC_TOKENS:
        return par.global_batch * scenario.model.seq_len / step_time_s / n
    hardware = case.metric == METRIC_HFU
    step_flops = source_flops_per_step(
        case.flop_convention, scenario.model, par.global_batch, par.recompute, hardware=hardware
    )
    flop_per_s_per_gpu = step_flops / step_time_s / n
    if case.metric == METRIC_TFLOPS:
        return flop_per_s_per_gpu / 1e12
    # MFU/HFU in percent against the dense peak of the simulated dtype (MPT FP8: the FP8 peak)
    return 100.0 * flop_per_s_per_gpu / scenario.peak_flop_per_s


# ----------------------------------------------------------------------------- results
@dataclass(frozen=True, slots=True)
class RowResult:
    case: Case
    predicted: float
    step_time_s: float
    mfu: float
    memory_fits: bool | None

    @property
    def error_pct(self) -> float:
        return 100.0 * (self.predicted - self.case.measured) / self.case.measured


@dataclass(frozen=True, slots=True)
class ValidationReport:
    results: tuple[RowResult, ...]
    unusable: tuple[Unusable, ...]
    csv_path: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def mape(self, predicate: Callable[[RowResult], bool] | None = None) -> tuple[float, int]:
        errs = [abs(r.error_pct) for r in self.results if predicate is None or predicate(r)]
        return (sum(errs) / len(errs) if errs else float("nan")), len(errs)

    def groups(self, key: Callable[[RowResult], str]) -> dict[str, tuple[float, int]]:
        names = sorted({key(r) for r in self.results})
        out = {}
        for name in names:
            errs = [abs(r.error_pct) for r in self.results if key(r) == name]
            out[name] = (sum(errs) / len(errs), len(errs))
        return out

    def summary(self) -> dict[str, Any]:
        overall, n = self.mape()
        target, nt = self.mape(lambda r: r.case.is_target)
        return {
            "overall": {"mape_pct": overall, "rows": n},
            "target_a100_h100_dense_16bit": {"mape_pct": target, "rows": nt},
            "by_source": {
                k: {"mape_pct": v, "rows": c} for k, v, c in _flat(self.groups(lambda r: r.case.source_key))
            },
            "by_gpu": {k: {"mape_pct": v, "rows": c} for k, v, c in _flat(self.groups(lambda r: r.case.gpu))},
            "by_dtype": {
                k: {"mape_pct": v, "rows": c} for k, v, c in _flat(self.groups(lambda r: r.case.dtype))
            },
            "unusable_rows": len(self.unusable),
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "csv": self.csv_path,
            "summary": _json_safe(self.summary()),
            "rows": [_json_safe(result_dict(r)) for r in self.results],
            "unusable": [
                {"id": u.run_id, "source": u.source_key, "gpu": u.gpu, "reason": u.reason}
                for u in self.unusable
            ],
            **self.extra,
        }


def _flat(groups: Mapping[str, tuple[float, int]]) -> Iterable[tuple[str, float, int]]:
    for k, (v, c) in groups.items():
        yield k, v, c


def _json_safe(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_json_safe(v) for v in obj]
    return obj


def result_dict(r: RowResult) -> dict[str, Any]:
    c = r.case
    return {
        "id": c.run_id,
        "source": c.source_key,
        "gpu": c.gpu,
        "dtype": c.dtype,
        "target": c.is_target,
        "metric": c.metric,
        "flop_convention": c.flop_convention if c.metric in (METRIC_TFLOPS, METRIC_MFU, METRIC_HFU) else "",
        "predicted": r.predicted,
        "measured": c.measured,
        "error_pct": r.error_pct,
        "step_time_s": r.step_time_s,
        "mfu": r.mfu,
        "memory_fits": r.memory_fits,
        "assumptions": list(c.assumptions),
        "scenario": copy.deepcopy(dict(c.scenario)),  # SPEC §1 tables: reproducible with `mfusim run`
    }


# ----------------------------------------------------------------------------- running
SimulateFn = Callable[[Scenario], Any]  # returns a StepReport (or an object with .report)


def default_simulate() -> SimulateFn:
    """The discrete-event engine's `simulate`, returning its StepReport."""
    try:
        from .engine import simulate  # type: ignore[attr-defined,unused-ignore]
    except ImportError as exc:  # pragma: no cover - only before the engine exists
        raise ConfigError(f"the simulation engine is not available ({exc})", key="validate") from None

    def run(scenario: Scenario) -> Any:
        result = simulate(scenario)
        return getattr(result, "report", result)

    return run


def scenario_for(case: Case, source: str = "") -> Scenario:
    from .loading import scenario_from_dict

    return scenario_from_dict(case.scenario, source=source or case.run_id)


def evaluate(case: Case, scenario: Scenario, simulate_fn: SimulateFn) -> RowResult:
    out = simulate_fn(scenario)
    report: Any = getattr(out, "report", out)
    step = float(report.step_time_s)
    if not math.isfinite(step) or step <= 0:
        raise ValueError(f"simulated step time {step!r}")
    memory = getattr(report, "memory", None)
    fits = bool(memory.fits) if memory is not None else None
    return RowResult(
        case=case,
        predicted=predicted_value(case, scenario, step),
        step_time_s=step,
        mfu=float(report.mfu),
        memory_fits=fits,
    )


class Progress:
    """A one-line progress indicator on stderr (redrawn in place on a terminal)."""

    def __init__(self, total: int, label: str = "validate", stream: Any = None) -> None:
        self.total = total
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.step = max(1, total // 10)

    def update(self, done: int, what: str = "") -> None:
        if self.tty:
            self.stream.write(f"\r{self.label}: {done}/{self.total} {what[:50]:<50}")
            self.stream.flush()
        elif done == self.total or done % self.step == 0:
            self.stream.write(f"{self.label}: {done}/{self.total} rows\n")
            self.stream.flush()

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()


def select_runs(
    runs: Sequence[PublishedRun], gpu: str | None = None, source: str | None = None
) -> list[PublishedRun]:
    out = list(runs)
    if gpu:
        out = [r for r in out if gpu.lower() in r.gpu.lower()]
    if source:
        s = source.lower()
        out = [
            r
            for r in out
            if s in r.source.lower()
            or s in source_rules(r.source, r.run_id).key
            or r.run_id.lower().startswith(s)
        ]
    return out


def validate_runs(
    runs: Sequence[PublishedRun],
    simulate_fn: SimulateFn,
    *,
    csv_path: str = "",
    progress: bool = True,
) -> ValidationReport:
    results: list[RowResult] = []
    unusable: list[Unusable] = []
    bar = Progress(len(runs)) if progress else None
    for i, run in enumerate(runs, 1):
        case = build_case(run)
        if isinstance(case, Unusable):
            unusable.append(case)
        else:
            try:
                scenario = scenario_for(case, source=csv_path)
                results.append(evaluate(case, scenario, simulate_fn))
            except ConfigError as err:
                unusable.append(
                    Unusable(
                        case.run_id,
                        case.source,
                        case.source_key,
                        case.gpu,
                        f"invalid scenario: {err.message if err.key is None else f'{err.key}: {err.message}'}",
                    )
                )
            except (ValueError, NotImplementedError, ArithmeticError, KeyError) as exc:
                unusable.append(
                    Unusable(
                        case.run_id,
                        case.source,
                        case.source_key,
                        case.gpu,
                        f"simulator failed: {type(exc).__name__}: {exc}",
                    )
                )
        if bar is not None:
            bar.update(i, run.run_id)
    if bar is not None:
        bar.close()
    return ValidationReport(results=tuple(results), unusable=tuple(unusable), csv_path=csv_path)


# ----------------------------------------------------------------------------- output
def _fmt(value: float, metric: str) -> str:
    if metric == METRIC_TOKENS:
        return f"{value:,.0f}"
    if metric == METRIC_ITERATION_TIME:
        return f"{value:.3f}"
    return f"{value:.1f}"


UNITS = {
    METRIC_TOKENS: "tok/s/GPU",
    METRIC_TFLOPS: "TFLOP/s/GPU",
    METRIC_ITERATION_TIME: "s/step",
    METRIC_MFU: "MFU %",
    METRIC_HFU: "HFU %",
}


def format_report(report: ValidationReport) -> str:
    lines = []
    width = max([len(r.case.run_id) for r in report.results] + [2])
    width = min(width, 64)
    gw = max([len(r.case.gpu) for r in report.results] + [3])
    lines.append(
        f"{'id':<{width}}  {'gpu':<{gw}}  {'metric':<11}  {'predicted':>10}  {'measured':>10}  {'error %':>8}"
    )
    for r in report.results:
        c = r.case
        lines.append(
            f"{c.run_id[:width]:<{width}}  {c.gpu:<{gw}}  {UNITS.get(c.metric, c.metric):<11}  "
            f"{_fmt(r.predicted, c.metric):>10}  {_fmt(c.measured, c.metric):>10}  {r.error_pct:>+8.1f}"
        )
    s = report.summary()
    lines.append("")
    lines.append("Mean absolute percentage error (MAPE)")

    def row(label: str, entry: Mapping[str, Any]) -> str:
        v = entry["mape_pct"]
        text = f"{v:6.1f}%" if isinstance(v, float) and math.isfinite(v) else "     - "
        return f"  {label:<44} {text}  ({entry['rows']} rows)"

    lines.append(row("overall", s["overall"]))
    lines.append(row("A100/H100 dense BF16/FP16 (target)", s["target_a100_h100_dense_16bit"]))
    lines.append(" by source:")
    for k, v in s["by_source"].items():
        lines.append(row("  " + k, v))
    lines.append(" by GPU:")
    for k, v in s["by_gpu"].items():
        lines.append(row("  " + k, v))
    lines.append(" by dtype:")
    for k, v in s["by_dtype"].items():
        lines.append(row("  " + k, v))
    if report.unusable:
        lines.append("")
        lines.append(f"Rows not simulated ({len(report.unusable)}):")
        for u in report.unusable:
            lines.append(f"  {u.run_id}  [{u.gpu}]  {u.reason}")
    return "\n".join(lines)


OUT_COLUMNS = (
    "id",
    "source",
    "gpu",
    "dtype",
    "target",
    "status",
    "metric",
    "flop_convention",
    "predicted",
    "measured",
    "error_pct",
    "step_time_s",
    "mfu",
    "memory_fits",
    "reason",
    "assumptions",
)


def write_out(report: ValidationReport, path: Path) -> None:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=OUT_COLUMNS)
        w.writeheader()
        for r in report.results:
            d = result_dict(r)
            d["status"] = "ok"
            d["reason"] = ""
            d["assumptions"] = "; ".join(d["assumptions"])
            d.pop("scenario", None)
            w.writerow({k: d.get(k, "") for k in OUT_COLUMNS})
        for u in report.unusable:
            w.writerow(
                {
                    "id": u.run_id,
                    "source": u.source_key,
                    "gpu": u.gpu,
                    "status": "unusable",
                    "reason": u.reason,
                }
            )


def cmd_validate(args: argparse.Namespace, simulate_fn: SimulateFn | None = None) -> int:
    from .resources import published_runs_csv

    path = Path(args.runs) if getattr(args, "runs", None) else published_runs_csv()
    out = None
    if getattr(args, "out", None):
        from .cli import check_writable

        out = check_writable(args.out, "--out")
    runs = read_runs_csv(path)
    selected = select_runs(runs, gpu=getattr(args, "gpu", None), source=getattr(args, "source", None))
    if not selected:
        flag = "--gpu" if getattr(args, "gpu", None) else "--source"
        raise ConfigError(f"no row of {path} matches the filter", key=flag)
    fn = simulate_fn if simulate_fn is not None else default_simulate()
    report = validate_runs(selected, fn, csv_path=str(path), progress=True)
    if out is not None:
        write_out(report, out)
    if getattr(args, "json", False):
        sys.stdout.write(json.dumps(report.to_dict(), indent=2) + "\n")
    else:
        sys.stdout.write(format_report(report) + "\n")
    return 0


# ----------------------------------------------------------------------------- accuracy report
def error_histogram(report: ValidationReport, path: Path, title: str = "") -> None:
    """Histogram of per-row errors (%), target rows and the others stacked (matplotlib, Agg)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    target = [r.error_pct for r in report.results if r.case.is_target]
    other = [r.error_pct for r in report.results if not r.case.is_target]
    clip = 100.0
    bins = [x * 5.0 for x in range(-20, 21)]
    fig, ax = plt.subplots(figsize=(8, 4.2))
    ax.hist(
        [[max(min(e, clip), -clip) for e in target], [max(min(e, clip), -clip) for e in other]],
        bins=bins,
        stacked=True,
        label=[
            f"A100/H100 dense BF16/FP16 ({len(target)} rows)",
            f"other rows: FP8, Blackwell, MoE ({len(other)})",
        ],
        color=["tab:blue", "tab:orange"],
    )
    ax.axvline(0, color="k", lw=0.8)
    ax.set_xlabel("error of predicted throughput vs measured, % (clipped to ±100)")
    ax.set_ylabel("rows")
    ax.set_title(title or "mfusim validate: prediction error per published run")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def markdown_table(report: ValidationReport, roles: Mapping[str, str] | None = None) -> str:
    """The per-row table and the MAPE groups as Markdown (docs/accuracy_table.md)."""
    roles = roles or {}
    s = report.summary()

    def pct(entry: Mapping[str, Any]) -> str:
        v = entry["mape_pct"]
        return f"{v:.1f}%" if isinstance(v, float) and math.isfinite(v) else "-"

    out = ["| group | MAPE | rows |", "|---|---:|---:|"]
    out.append(f"| overall | {pct(s['overall'])} | {s['overall']['rows']} |")
    t = s["target_a100_h100_dense_16bit"]
    out.append(f"| **A100/H100 dense BF16/FP16** | **{pct(t)}** | {t['rows']} |")
    for title, key in (("source", "by_source"), ("GPU", "by_gpu"), ("dtype", "by_dtype")):
        for name, entry in s[key].items():
            out.append(f"| {title}: {name} | {pct(entry)} | {entry['rows']} |")
    if roles:
        for role in ("fit", "held-out"):
            errs = [abs(r.error_pct) for r in report.results if roles.get(r.case.run_id) == role]
            if errs:
                out.append(f"| calibration {role} rows | {sum(errs) / len(errs):.1f}% | {len(errs)} |")
    out.append("")
    out.append("| id | GPU | dtype | metric | predicted | measured | error % | calibration |")
    out.append("|---|---|---|---|---:|---:|---:|---|")
    for r in sorted(report.results, key=lambda r: (r.case.source_key, r.case.gpu, r.case.run_id)):
        c = r.case
        out.append(
            f"| {c.run_id} | {c.gpu} | {c.dtype} | {UNITS.get(c.metric, c.metric)} | "
            f"{_fmt(r.predicted, c.metric)} | {_fmt(c.measured, c.metric)} | {r.error_pct:+.1f} | "
            f"{roles.get(c.run_id, '-')} |"
        )
    out.append("")
    out.append(f"Rows not simulated ({len(report.unusable)}):")
    out.append("")
    for u in report.unusable:
        out.append(f"* `{u.run_id}` ({u.gpu}): {u.reason}")
    return "\n".join(out) + "\n"
