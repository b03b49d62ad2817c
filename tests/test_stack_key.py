"""`[kernels] stack` (issue 12 item 3): a scenario names the software stack whose fitted system
residuals it runs with, instead of the GPU's default-stack table — the same residuals
`mfusim validate` applies per source (simulator/stacks.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from simulator.errors import ConfigError
from simulator.loading import scenario_from_dict
from simulator.simulate import simulate
from simulator.specs import STACK_NAMES
from simulator.stacks import RESIDUALS_OF, STACKS, with_stack

MODEL = {"name": "t", "layers": 8, "hidden": 4096, "heads": 32, "vocab": 51200, "seq_len": 2048}


def scn(topology: str = "dgx-a100", **kernels: object):
    return scenario_from_dict(
        {
            "model": MODEL,
            "cluster": {"topology": topology, "num_gpus": 16},
            "parallel": {"tp": 8, "pp": 2, "global_batch": 16},
            "kernels": kernels,
        }
    )


def test_the_key_lists_every_stack_with_residuals() -> None:
    """Every stack a source ran, plus those without calibration runs that borrow a fitted one's
    residuals (megatron-deepspeed), and a borrowed stack is itself fitted from some source."""
    assert set(STACK_NAMES) == set(STACKS) | set(RESIDUALS_OF)
    assert set(RESIDUALS_OF.values()) <= set(STACKS)


@pytest.mark.parametrize("stack", ["megatron-2021", "composer-fsdp"])
def test_stack_key_applies_the_same_residuals_as_validate(stack: str) -> None:
    """The key applies the residuals validate maps onto a row (stacks.with_stack). The key also
    selects the stack's kernels (a 16-bit weight gradient, not Megatron-Core's fp32 main_grad
    accumulation: program.py wgrad_bytes), which a GEMM near its ridge point pays for
    (kernels.gemm_plan), so both sides run the key's kernel options."""
    keyed = scn(stack=stack)
    mapped = replace(with_stack(scn(), stack), kernels=keyed.kernels)
    assert keyed.gpu.efficiency == mapped.gpu.efficiency
    assert keyed.gpu.efficiency != scn().gpu.efficiency
    assert simulate(keyed).report.step_time_s == pytest.approx(simulate(mapped).report.step_time_s, rel=1e-12)


def test_empty_and_default_stack_keep_the_gpu_table() -> None:
    assert scn(stack="").gpu.efficiency == scn().gpu.efficiency


def test_a_stack_not_fitted_on_the_architecture_is_refused() -> None:
    with pytest.raises(
        ConfigError, match="kernels.stack = 'megatron-2021' has no fitted residuals on hopper"
    ):
        scn("dgx-h100", stack="megatron-2021")


def test_unknown_stack_is_refused_naming_the_key() -> None:
    with pytest.raises(ConfigError, match="kernels.stack"):
        scn(stack="deepspeed")


def test_unfused_attention_without_a_stack_says_which_stack_ran_it() -> None:
    """Unfused attention is the 2021-22 Megatron-LM generation: a scenario that runs it without
    naming a stack is told that today's residuals were used and which key selects that stack's;
    the numbers are not changed by the hint."""

    def hinted(s) -> bool:
        return any('stack = "megatron-2021"' in w for w in simulate(s).report.warnings)

    plain = scn(attention="unfused")
    assert hinted(plain)
    assert simulate(plain).report.step_time_s == simulate(scn(attention="unfused")).report.step_time_s
    assert not hinted(scn(attention="unfused", stack="megatron-2021"))
    assert not hinted(scn(attention="unfused", stack="composer-fsdp"))
    assert not hinted(scn())  # FlashAttention-2, today's default on A100
    assert not hinted(scn("dgx-h100", attention="unfused"))  # no 2021 stack fitted on Hopper
