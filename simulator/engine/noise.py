"""Step-to-step variability: random multipliers for compute, network and stragglers.

All of them are exactly 1 (and draw nothing) when the scenario's `[variability]` is off, so a
quiet run needs no random generator at all (`Noise.quiet`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..specs import VariabilitySpec


def lognormal(rng: Any, cv: float, size: int | None = None) -> Any:
    """Multipliers with mean 1 and coefficient of variation `cv` (lognormal: never negative)."""
    sigma2 = math.log1p(cv * cv)
    return rng.lognormal(-sigma2 / 2, math.sqrt(sigma2), size)


def is_quiet(spec: VariabilitySpec) -> bool:
    """No jitter and no straggler: every micro-batch of every step is the same."""
    no_straggler = spec.straggler_probability <= 0 or spec.straggler_slowdown == 1.0
    return spec.compute_jitter <= 0 and spec.network_jitter <= 0 and no_straggler


@dataclass(frozen=True, slots=True)
class Noise:
    """Per-run random multipliers (all 1.0 when variability is off; `rng` is then never used)."""

    rng: Any  # numpy.random.Generator, or None for a quiet spec
    spec: VariabilitySpec
    group_size: int  # GPUs that synchronize inside a block (tp·cp)
    replicas: int  # data-parallel replicas that synchronize at the end (dp)

    @staticmethod
    def for_spec(spec: VariabilitySpec, group_size: int, replicas: int) -> Noise:
        if is_quiet(spec):
            return Noise(None, spec, group_size, replicas)
        import numpy as np

        return Noise(np.random.default_rng(spec.seed), spec, group_size, replicas)

    def compute_factor(self) -> float:
        cv = self.spec.compute_jitter
        if cv <= 0:
            return 1.0
        # the block ends when the slowest GPU of its TP/CP group ends (they sync every layer)
        return float(max(lognormal(self.rng, cv, self.group_size)))

    def network_factor(self) -> float:
        cv = self.spec.network_jitter
        return 1.0 if cv <= 0 else float(lognormal(self.rng, cv))

    def straggler_factor(self) -> float:
        """A stage is as slow as its slowest GPU across all replicas (synchronous DP)."""
        p = self.spec.straggler_probability
        if p <= 0 or self.spec.straggler_slowdown == 1.0:
            return 1.0
        gpus = self.group_size * self.replicas
        p_any = 1.0 - (1.0 - p) ** gpus
        return self.spec.straggler_slowdown if self.rng.random() < p_any else 1.0

    def replica_skew_s(self, own_s: float, mean_s: float, std_s: float) -> float:
        """Extra wait at the gradient sync for the slowest of the other dp−1 replicas."""
        if std_s <= 0 or self.replicas <= 1:
            return 0.0
        z = float(max(self.rng.standard_normal(self.replicas - 1)))
        return max(0.0, mean_s + std_s * z - own_s)
