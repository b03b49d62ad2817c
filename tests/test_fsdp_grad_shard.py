"""How a ZeRO-2/3 rank keeps its gradient shard ([memory] sharded_grad_dtype), and the optimizer
step's gradient copy under the precision-aware optimizer.

PyTorch FSDP (torch 2.0-era torch/distributed/fsdp/_runtime_utils.py _post_backward_hook): the
reduce-scattered shard is cast to the fp32 parameter's dtype (_cast_grad_to_param_dtype) and
accumulated in `_saved_grad_shard`; the 16-bit unsharded gradient is dropped after the
reduce-scatter. So a rank holds 4 bytes of gradient per sharded parameter whatever the reduce
dtype, where the default layout (Megatron-FSDP, DeepSpeed) holds the 16-bit shard plus the
optimizer's fp32 copy (2 + 4). Its parameter shard ([memory] sharded_param_dtype) is the fp32
FlatParameter the optimizer updates; the bf16 `_mp_shard` lives only around each all-gather
(fsdp/flat_param.py post_unshard _free_low_precision_sharded_param)."""

from __future__ import annotations

import pytest

from simulator.errors import ConfigError
from simulator.flops import total_params
from simulator.loading import scenario_from_dict
from simulator.memory import memory_footprint
from simulator.program import ADAM_BYTES_PER_PARAM, GRAD_16BIT_COPY_BYTES_PER_PARAM, adam_bytes_per_param

MODEL = {"name": "t", "layers": 4, "hidden": 1024, "heads": 16, "vocab": 32000, "seq_len": 512}
D = 8


def scn(
    zero: int, grad_reduce_dtype: str = "", sharded: str = "", memory: dict | None = None, params: str = ""
):
    mem = dict(memory or {})
    if sharded:
        mem["sharded_grad_dtype"] = sharded
    if params:
        mem["sharded_param_dtype"] = params
    return scenario_from_dict(
        {
            "model": MODEL,
            "cluster": {"topology": "dgx-a100", "num_gpus": D},
            "parallel": {"dp": D, "zero": zero, "global_batch": D},
            "precision": {"dtype": "bf16"},
            "kernels": {"grad_reduce_dtype": grad_reduce_dtype} if grad_reduce_dtype else {},
            "memory": mem,
        }
    )


def _state(s) -> tuple[float, float, float]:
    p = memory_footprint(s).parts_bytes
    return p["weights"], p["grads"], p["optimizer"]


@pytest.mark.parametrize("zero", [2, 3])
def test_pytorch_fsdp_keeps_only_the_fp32_shard(zero: int) -> None:
    params = float(total_params(scn(zero).model))
    # default layout, bf16 reduce: the 16-bit shard (2/d) + the optimizer's fp32 copy (4/d) + 12/d
    _, grads, optimizer = _state(scn(zero, "bf16"))
    assert grads == pytest.approx(2.0 * params / D, rel=1e-3)
    assert optimizer == pytest.approx((12.0 + 4.0) * params / D, rel=1e-3)
    # PyTorch FSDP, bf16 reduce (composer MP mode PURE): the fp32 shard (4/d) and Adam's 12/d only
    _, grads, optimizer = _state(scn(zero, "bf16", "fp32"))
    assert grads == pytest.approx(4.0 * params / D, rel=1e-3)
    assert optimizer == pytest.approx(12.0 * params / D, rel=1e-3)
    # fp32 reduce: both layouts hold the same 4/d shard and no copy
    assert _state(scn(zero, "fp32", "fp32")) == _state(scn(zero, "fp32"))


def test_pytorch_fsdp_saves_two_bytes_per_sharded_param() -> None:
    params = float(total_params(scn(3).model))
    default = sum(_state(scn(3, "bf16")))
    fsdp = sum(_state(scn(3, "bf16", "fp32")))
    assert default - fsdp == pytest.approx(2.0 * params / D, rel=1e-3)


def test_pytorch_fsdp_optimizer_reads_fp32_grads_without_a_copy() -> None:
    # Megatron-FSDP/DeepSpeed layout: 16-bit shard copied to fp32 in step() (r2 + w4, zeroing 2 not 4)
    assert (
        adam_bytes_per_param(scn(3, "bf16")) == ADAM_BYTES_PER_PARAM + GRAD_16BIT_COPY_BYTES_PER_PARAM == 38
    )
    # PyTorch FSDP: the cast ran in the post-backward hook; the step reads the fp32 shard
    assert adam_bytes_per_param(scn(3, "bf16", "fp32")) == ADAM_BYTES_PER_PARAM == 34


def test_precision_aware_optimizer_still_pays_the_gradient_copy() -> None:
    # BF16 moments (r2 + w2 each instead of r4 + w4: 34 - 8) do not remove the fp32 copy of a bf16
    # gradient buffer: Megatron-Bridge hands the optimizer a non-None fp8_recipe ("tensorwise" even
    # for BF16), so use_precision_aware_optimizer_no_fp8_or_ds_fp8 is False and
    # _copy_model_grads_to_main_grads still runs main_grad.float() (Megatron-LM d7288711)
    moments = {"exp_avg_dtype": "bf16", "exp_avg_sq_dtype": "bf16"}
    s = scn(1, "bf16", memory=moments)
    assert adam_bytes_per_param(s) == 34 - 8 + GRAD_16BIT_COPY_BYTES_PER_PARAM == 30
    params = float(total_params(s.model))
    # memory: Adam state 4 + 2 + 2 = 8 per sharded parameter; the copy is a step-time transient
    # set against the activations (none here: they outweigh it), the 16-bit buffer 2 per parameter
    _, grads, optimizer = _state(s)
    assert grads == pytest.approx(2.0 * params, rel=1e-3)
    assert optimizer == pytest.approx(8.0 * params / D, rel=1e-3)


def test_sharded_grad_dtype_needs_zero_2_or_3() -> None:
    with pytest.raises(ConfigError) as err:
        scn(1, "bf16", "fp32")
    assert err.value.key == "memory.sharded_grad_dtype"
    with pytest.raises(ConfigError) as err:
        scn(3, "bf16", "fp16")
    assert err.value.key == "memory.sharded_grad_dtype"


def test_pytorch_fsdp_keeps_no_16bit_weight_shard() -> None:
    # ZeRO-3 default: a 16-bit weight shard (2/d) beside the fp32 master in the optimizer's 12/d;
    # PyTorch FSDP: the fp32 shard is the master, the bf16 _mp_shard lives only around the gather
    params = float(total_params(scn(3).model))
    weights, _, optimizer = _state(scn(3))
    assert weights == pytest.approx(2.0 * params / D, rel=1e-3)
    fsdp_weights, _, fsdp_optimizer = _state(scn(3, params="fp32"))
    assert fsdp_weights == 0.0 and fsdp_optimizer == optimizer
    # with both keys (composer MP mode PURE): 4 (grad) + 12 (master + moments) = 16/d, against 20/d
    total = sum(_state(scn(3, "bf16", "fp32", params="fp32")))
    assert total == pytest.approx(16.0 * params / D, rel=1e-3)
    assert sum(_state(scn(3, "bf16"))) == pytest.approx(20.0 * params / D, rel=1e-3)
    # the step writes no 16-bit parameter (Adam's 34 B less the 2-byte write)
    assert adam_bytes_per_param(scn(3, params="fp32")) == ADAM_BYTES_PER_PARAM - 2 == 32


def test_sharded_param_dtype_needs_zero_3() -> None:
    with pytest.raises(ConfigError) as err:
        scn(2, params="fp32")
    assert err.value.key == "memory.sharded_param_dtype"
