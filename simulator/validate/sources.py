"""What each source leaves unsaid, and how it is filled in (docs/validate-assumptions.md).

The rules are data: simulator/catalog/validate_sources.toml, one table per source with the
reason for every default in a comment. This module reads and checks them.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import cache
from typing import Any

from ..flops import FLOP_CONVENTIONS
from ..resources import catalog_file

SOURCES_FILE = "validate_sources.toml"


@dataclass(frozen=True, slots=True)
class StackRule:
    """Rows of a source whose software stack differs from the source's default
    (validate_sources.toml `[[source.stack_rule]]`): rows whose source text contains `table`, whose
    notes contain `notes` and, when `models` is given, whose model_name is one of them (all
    lower-cased; an empty condition matches every row). It sets the keys it names."""

    attention: str = ""  # attention implementation ("" = the source's)
    grad_reduce_dtype: str = ""  # gradient reduction dtype ("" = the source's)
    cross_entropy: str = ""  # loss kernel ("" = the source's)
    attention_padding: str = ""  # q/k/v unpad/pad around the attention kernel ("" = the source's)
    zero3_backward_prefetch: str = ""  # ZeRO-3/FSDP backward gathers ("" = the source's)
    recompute: str = ""  # recomputation when the row's cell is empty ("" = the source's)
    table: str = ""
    notes: str = ""
    models: tuple[str, ...] = ()
    note: str = ""  # why, for the row's assumptions

    def applies(self, source: str, notes: str, model_name: str) -> bool:
        if self.table not in source.lower() or self.notes not in notes.lower():
            return False
        return not self.models or model_name.strip().lower() in self.models


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
    # the source's software stack (issue 12): [kernels] of its scenarios
    attention: str = ""  # attention implementation ("" = the GPU's default)
    grad_reduce_dtype: str = ""  # data-parallel gradient reduction dtype ("" = fp32 for bf16/fp8)
    tp_comm_async: bool = True  # TP backward collectives beside the dgrad/wgrad GEMMs
    cross_entropy: str = ""  # loss kernel ("" = Megatron-Core's unfused default)
    zero3_collectives: str = ""  # ZeRO-3 rows: how their collectives ran ("" = nccl)
    zero3_backward_prefetch: str = ""  # ZeRO-3/FSDP backward gathers ("" = pre)
    attention_padding: str = ""  # q/k/v unpad/pad around the attention kernel ("" = none)
    bias_grad: str = ""  # dense linear layers' bias gradients ("" = fused)
    norm: str = ""  # the layer norms' kernel ("" = fused)
    qkv_grad: str = ""  # q, k, v gradients into the qkv projection's ("" = packed)
    fsdp_flat_grad: str = ""  # ZeRO-2/3 rows: gradients into the flat buffer ("" = direct)
    sharded_grad_dtype: str = ""  # ZeRO-2/3 rows: [memory] sharded_grad_dtype ("" = the buffer's)
    sharded_param_dtype: str = ""  # ZeRO-3 rows: [memory] sharded_param_dtype ("" = 16-bit + master)
    moe_routing: str = ""  # MoE rows: [model.moe] routing ("" = balanced, Megatron's forced balancing)
    moe_dispatcher: str = ""  # MoE rows with ep > 1: [kernels] moe_dispatcher ("" = alltoall)
    mtp: bool = True  # the architecture's MTP module is trained (False: the stack does not build it)
    # recompute modes that mean something else in this stack than in mfusim (rows refused, naming why)
    recompute_not_modelled: tuple[str, ...] = ()
    recompute_not_modelled_why: str = ""
    # ZeRO-3 rows with pp > 1: one torch.distributed.pipelining schedule per step (PipelineStage
    # semantics: [parallel] local_batch = global_batch / dp)
    pipeline_stage_if_pp: bool = False
    reshard_after_forward_if_pp: bool = True  # ZeRO-3 rows with pp > 1: [parallel] reshard_after_forward
    fp8_recipe: str = ""  # fp8 rows: [precision] fp8_recipe ("" = delayed)
    stack_rules: tuple[StackRule, ...] = ()  # per-table / per-row exceptions to the stack keys

    def stack_for(self, key: str, source: str, notes: str, model_name: str) -> tuple[str, str]:
        """(value, why) of stack key `key` (STACK_RULE_KEYS) for one row: the
        first rule that applies and sets it, else the source's own ("" why)."""
        for rule in self.stack_rules:
            value = str(getattr(rule, key))
            if value and rule.applies(source, notes, model_name):
                return value, rule.note
        return str(getattr(self, key)), ""


@dataclass(frozen=True, slots=True)
class KnownSource:
    match: tuple[str, ...]  # any of these in the lower-cased source text
    id_prefix: str  # else a row id starting with this ("" = none)
    in_shipped_csv: bool
    rules: SourceRules


@dataclass(frozen=True, slots=True)
class SourceTable:
    sources: tuple[KnownSource, ...]  # in match order
    generic: SourceRules


# the stack keys a [[source.stack_rule]] can set for some of a source's rows
STACK_RULE_KEYS = (
    "attention",
    "grad_reduce_dtype",
    "cross_entropy",
    "attention_padding",
    "zero3_backward_prefetch",
)
# the other keys a [[source.stack_rule]] can set for some of a source's rows (not [kernels] keys)
ROW_RULE_KEYS = ("recompute",)
_RULE_KEYS = tuple(k for k in SourceRules.__dataclass_fields__ if k != "stack_rules")
_OPTIONAL_KEYS = (
    "attention",
    "grad_reduce_dtype",
    "tp_comm_async",
    "cross_entropy",
    "zero3_collectives",
    "zero3_backward_prefetch",
    "attention_padding",
    "bias_grad",
    "norm",
    "qkv_grad",
    "fsdp_flat_grad",
    "sharded_grad_dtype",
    "sharded_param_dtype",
    "moe_routing",
    "moe_dispatcher",
    "mtp",
    "recompute_not_modelled",
    "recompute_not_modelled_why",
    "reshard_after_forward_if_pp",
    "pipeline_stage_if_pp",
    "fp8_recipe",
    "stack_rule",
)


def _rules(table: dict[str, Any], where: str) -> SourceRules:
    missing = [k for k in _RULE_KEYS if k not in table and k not in _OPTIONAL_KEYS]
    if missing:
        raise ValueError(f"{where}: missing {', '.join(missing)}")
    if table["flop_convention"] not in FLOP_CONVENTIONS:
        raise ValueError(f"{where}.flop_convention: unknown {table['flop_convention']!r}")
    rules = []
    for i, r in enumerate(table.get("stack_rule", ())):
        unknown = set(r) - {*STACK_RULE_KEYS, *ROW_RULE_KEYS, "table", "notes", "models", "note"}
        if unknown or not any(r.get(k) for k in (*STACK_RULE_KEYS, *ROW_RULE_KEYS)):
            raise ValueError(f"{where}.stack_rule[{i}]: unknown {sorted(unknown)} or nothing set")
        rules.append(
            StackRule(
                attention=str(r.get("attention", "")),
                grad_reduce_dtype=str(r.get("grad_reduce_dtype", "")),
                cross_entropy=str(r.get("cross_entropy", "")),
                attention_padding=str(r.get("attention_padding", "")),
                zero3_backward_prefetch=str(r.get("zero3_backward_prefetch", "")),
                recompute=str(r.get("recompute", "")),
                table=str(r.get("table", "")).lower(),
                notes=str(r.get("notes", "")).lower(),
                models=tuple(str(m).lower() for m in r.get("models", ())),
                note=str(r.get("note", "")),
            )
        )
    kw = {k: table[k] for k in _RULE_KEYS if k in table}
    if "recompute_not_modelled" in kw:
        kw["recompute_not_modelled"] = tuple(kw["recompute_not_modelled"])
        if not kw.get("recompute_not_modelled_why"):
            raise ValueError(f"{where}: recompute_not_modelled needs recompute_not_modelled_why")
    return SourceRules(**kw, stack_rules=tuple(rules))


@cache
def known_sources() -> SourceTable:
    """The shipped source rules (read once)."""
    data = tomllib.loads(catalog_file(SOURCES_FILE).read_text(encoding="utf-8"))
    sources = tuple(
        KnownSource(
            match=tuple(s["match"]),
            id_prefix=s.get("id_prefix", ""),
            in_shipped_csv=s.get("in_shipped_csv", True),
            rules=_rules(s, f"{SOURCES_FILE} source {s.get('key')!r}"),
        )
        for s in data["source"]
    )
    return SourceTable(sources, _rules(data["generic"], f"{SOURCES_FILE} [generic]"))


def source_rules(source: str, run_id: str = "") -> SourceRules:
    """The rules of the source a row cites (matched on its source text, then its id)."""
    table = known_sources()
    text = f" {source.lower()} "
    for known in table.sources:  # file order: the specific names first ("NeMo AutoModel")
        if any(n in text for n in known.match):
            return known.rules
    rid = run_id.lower()
    for known in table.sources:
        if known.id_prefix and rid.startswith(known.id_prefix):
            return known.rules
    return table.generic
