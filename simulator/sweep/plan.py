"""The product of a [sweep] table: its axes, each combination's [parallel] values and Scenario."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..loading import SWEEP_KEYS, load_scenario, parallel_from_table, read_toml, scenario_from_dict
from ..overrides import Override, apply_overrides
from ..specs import MAX_GPUS, Scenario
from .columns import MAX_BASE_TRIALS, MAX_CONFIGS, PARALLEL_FIELDS


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


def load_sweep_scenario(path: str | Path, overrides: Sequence[Override] = ()) -> Scenario:
    """Load a sweep's scenario. Its [parallel] table may be valid only together with swept
    values (e.g. `tp = 3` replaced by the [sweep] list): then the first combination of the
    [sweep] lists that makes a valid scenario stands in for it (all swept keys are replaced
    per configuration anyway). `overrides` (`--set`) apply before either."""
    try:
        return load_scenario(path, overrides)
    except ConfigError as err:
        data = apply_overrides(read_toml(path), overrides)
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
