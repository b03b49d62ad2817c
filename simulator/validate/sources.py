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
class AttentionRule:
    """One table of a source that ran another attention kernel than the source's default
    (validate_sources.toml `[[source.attention_rule]]`): rows whose source text contains `table`
    and, when `models` is given, whose model_name is one of them (both lower-cased)."""

    table: str
    attention: str
    models: tuple[str, ...] = ()
    note: str = ""

    def applies(self, source: str, model_name: str) -> bool:
        if self.table not in source.lower():
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
    attention_rules: tuple[AttentionRule, ...] = ()  # per-table exceptions to `attention`

    def attention_for(self, source: str, model_name: str) -> tuple[str, str]:
        """(attention implementation, why) for a row of this source ("" = the GPU's default)."""
        for rule in self.attention_rules:
            if rule.applies(source, model_name):
                return rule.attention, rule.note
        return self.attention, ""


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


_RULE_KEYS = tuple(k for k in SourceRules.__dataclass_fields__ if k != "attention_rules")
_OPTIONAL_KEYS = (
    "attention",
    "grad_reduce_dtype",
    "tp_comm_async",
    "cross_entropy",
    "zero3_collectives",
    "zero3_backward_prefetch",
    "attention_rule",
)


def _rules(table: dict[str, Any], where: str) -> SourceRules:
    missing = [k for k in _RULE_KEYS if k not in table and k not in _OPTIONAL_KEYS]
    if missing:
        raise ValueError(f"{where}: missing {', '.join(missing)}")
    if table["flop_convention"] not in FLOP_CONVENTIONS:
        raise ValueError(f"{where}.flop_convention: unknown {table['flop_convention']!r}")
    rules = [
        AttentionRule(
            table=str(r["table"]).lower(),
            attention=str(r["attention"]),
            models=tuple(str(m).lower() for m in r.get("models", ())),
            note=str(r.get("note", "")),
        )
        for r in table.get("attention_rule", ())
    ]
    kw = {k: table[k] for k in _RULE_KEYS if k in table and k != "attention_rules"}
    return SourceRules(**kw, attention_rules=tuple(rules))


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
