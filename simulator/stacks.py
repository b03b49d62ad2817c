"""Software stacks: which published sources ran which stack, and the stack's system residuals.

A stack is a training framework generation (issue 12): its kernels are chosen by the scenario's
[kernels] table (attention implementation, gradient-reduce dtype, TP-comm style), and what it
costs beyond its kernels (host overhead, launch gaps, achieved NCCL fraction, sustained clocks)
is fitted end-to-end per stack and GPU architecture by benchmarks/calibrate.py
(docs/calibration.md) and stored in simulator/catalog/efficiency.toml as
`[stacks.<stack>.<architecture>]`. `mfusim run` uses the per-GPU tables, which hold the default
stack (today's Megatron-Core + Transformer Engine); `mfusim validate` applies the stack of each
source (STACK_OF_SOURCE).
"""

from __future__ import annotations

from dataclasses import fields, replace
from functools import lru_cache
from typing import Any

from .specs import RESIDUALS_OF, GPUEfficiency, Scenario, residuals_stack

__all__ = ["RESIDUALS_OF", "residuals_stack"]

DEFAULT_STACK = "megatron-core"
# Each shipped source's stack (docs/validate-assumptions.md).
STACK_OF_SOURCE = {
    "megatron-lm": "megatron-core",  # Megatron-Core r0.8 + Transformer Engine (README weak scaling)
    "nemo": "megatron-core",  # NeMo 24.x-25.x = Megatron-Core + TE
    "nemo-2403": "megatron-core",  # NeMo 24.03.01 long-sequence table (FlashAttention-2 era TE)
    "megatron-bridge": "megatron-core",  # Megatron-Bridge = Megatron-Core + TE
    "mpt": "composer-fsdp",  # MosaicML Composer + PyTorch FSDP, Triton FlashAttention with ALiBi (2023)
    "narayanan21": "megatron-2021",  # Megatron-LM 2021: fp16, unfused attention, synchronous TP
}
STACKS = tuple(sorted(set(STACK_OF_SOURCE.values())))
# stacks with no calibration run borrow a fitted stack's residuals: specs.RESIDUALS_OF


def stack_of_source(source_key: str) -> str:
    return STACK_OF_SOURCE.get(source_key, DEFAULT_STACK)


@lru_cache(maxsize=1)
def _stack_tables() -> dict[str, Any]:
    from .loading import read_toml
    from .resources import catalog_file

    return dict(read_toml(catalog_file("efficiency.toml")).get("stacks", {}))


def stack_efficiency(stack: str, architecture: str) -> GPUEfficiency | None:
    """The fitted residuals of `stack` on `architecture`, or None when not fitted."""
    table = _stack_tables().get(residuals_stack(stack), {}).get(architecture)
    if not table:
        return None
    names = {f.name for f in fields(GPUEfficiency)}
    return GPUEfficiency(**{k: v for k, v in table.items() if k in names})


def with_stack(scn: Scenario, stack: str) -> Scenario:
    """`scn` with the GPU's efficiency replaced by the stack's fitted residuals (if any)."""
    from .kernels import architecture

    eff = stack_efficiency(stack, architecture(scn.gpu.name))
    if eff is None:
        return scn
    # the precision recipe's GEMM efficiency is the GPU's (catalog recipes.toml), not a stack residual
    eff = replace(eff, fp4_matmul_fraction=scn.gpu.efficiency.fp4_matmul_fraction)
    gpu = replace(scn.gpu, efficiency=eff)
    # the stack's kernel choices follow it too (program.py wgrad_bytes: only Megatron-Core fuses
    # the weight-gradient accumulation into main_grad)
    kernels = replace(scn.kernels, stack=stack) if stack != DEFAULT_STACK else scn.kernels
    return replace(scn, topology=replace(scn.topology, gpu=gpu), kernels=kernels)
