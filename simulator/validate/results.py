"""Predicted vs measured: per-row results and the MAPE summary."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..console import sanitize_json
from .cases import RowResult, Unusable
from .columns import METRIC_HFU, METRIC_MFU, METRIC_TFLOPS
from .spread import moe_summary


# ----------------------------------------------------------------------------- results
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
            "moe": moe_summary(self.results),
            "memory_disagreements": self.memory_disagreements(),
            "unusable_rows": len(self.unusable),
        }

    def memory_disagreements(self) -> dict[str, Any]:
        """Rows that ran although the memory model says they do not fit: where the model
        over-counts (or the run used a memory saving validate does not know). Reported, never
        used to change a prediction."""
        over = [r for r in self.results if r.memory_fits is False]
        by_gpu: dict[str, int] = {}
        for r in over:
            by_gpu[r.case.gpu] = by_gpu.get(r.case.gpu, 0) + 1
        return {"rows": len(over), "of": len(self.results), "by_gpu": dict(sorted(by_gpu.items()))}

    def to_dict(self) -> dict[str, Any]:
        return {
            "csv": self.csv_path,
            "summary": sanitize_json(self.summary()),
            "rows": [sanitize_json(result_dict(r)) for r in self.results],
            "unusable": [
                {"id": u.run_id, "source": u.source_key, "gpu": u.gpu, "reason": u.reason}
                for u in self.unusable
            ],
            **self.extra,
        }


def _flat(groups: Mapping[str, tuple[float, int]]) -> Iterable[tuple[str, float, int]]:
    for k, (v, c) in groups.items():
        yield k, v, c


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
