"""What each source leaves unsaid, and how it is filled in (docs/validate-assumptions.md)."""

from __future__ import annotations

from dataclasses import dataclass

from .columns import FLOPS_EXACT, FLOPS_EXACT_CAUSAL, FLOPS_MPT, FLOPS_NARAYANAN, FLOPS_TORCHTITAN


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
    tp_comm_async: bool = True  # [kernels] tp_comm_async: TP backward comm beside the GEMMs


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
            tp_comm_async=False,  # 2021 Megatron-LM: synchronous TP all-reduces
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
            attention="triton",
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
