"""One MoE layer on 8 H100 against Megatron-LM's own MoE-layer benchmark (issue 13, moegemm).

NVIDIA/Megatron-LM tests/functional_tests/test_cases/common/moe_perf (added in cf39a4ddcf,
2025-12-17, "Add moe layer perf UT."; unchanged in baseline.json through d98e8a64dd) times one
Megatron-Core `MoELayer` (TE grouped GEMMs, `moe_grouped_gemm`, fused permute and router,
`moe_router_force_load_balancing`) on one DGX H100 (tests/test_utils/recipes/module_performance.yaml:
1 node, 8 GPUs, platform dgx_h100), EP 8, TP 1, 4,096 tokens per rank (seq 4096 x micro-batch 1),
BF16: CUDA events around the forward and around the backward (weight gradients included), after a
large dummy GEMM "to hide the router launch overhead", mean of 20 iterations after 5 warm-up ones
(__main__.py `_benchmark_moe_layer`). The baselines (baseline.json, ms):

* Mixtral proxy (hidden 4096, expert FFN 14336, 8 experts, top-2: one local expert of 8,192 rows);
* DeepSeek proxy (hidden 7168, expert FFN 2048, 32 experts, top-8: four local experts of 8,192 rows).
  The benchmark's config builder does not pass the proxy's shared expert (no
  `moe_shared_expert_intermediate_size` in `_build_transformer_config`), so the layer has none; it
  does pass group-limited routing (8 groups, top-4 groups: one group per EP rank, so a token reaches
  at most 4 ranks), which mfusim cannot express inside one node. Only the alltoall case, whose
  all-to-all sends top-k copies whatever the groups, is compared for it.

The model's MoE layer is every segment of a transformer layer's forward, backward and weight
gradients that is not attention, norm or residual: router, permutes, EP communication, expert
GEMMs and activation, and the host issue exposed after the dispatcher's sync. The comparison is
at the benchmarks' boost clock (a window of a few milliseconds; test_grouped_gemm_published.py does
the same). At these expert shapes (8,192 rows per expert) mfusim lands within +1 ... +11% of every
figure -- slower, never faster: the per-MoE-layer time the validate and held-out MoE rows miss is
not in the large-shape mechanics of the layer (docs/accuracy.md, "One MoE layer against
Megatron-LM's moe_perf").
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from simulator.clocks import sustained_clock_fraction
from simulator.comm import default_comm_model
from simulator.loading import scenario_from_dict
from simulator.program import _Coster
from simulator.specs import Scenario

# (forward ms, backward ms), NVIDIA/Megatron-LM
# tests/functional_tests/test_cases/common/moe_perf/baseline.json@cf39a4ddcf, BF16, TP 1, EP 8
MOE_PERF_H100_BF16_MS = {
    ("mixtral", "alltoall"): (4.32688798904419, 7.684332823753357),
    ("mixtral", "deepep"): (4.635550403594971, 7.854356813430786),
    ("mixtral", "hybridep"): (4.342604804039001, 7.740782427787781),
    ("deepseek", "alltoall"): (7.119169592857361, 10.482670497894286),
}
# model / published: the model may be slower by up to 15% (boost vs power-limited clock in a
# window of a few ms after a long GEMM; the baselines' own regression band is 2%) and faster by 5%
BAND = (0.95, 1.15)

# The same layers in FP8 with Transformer Engine's blockwise recipe (test_cases.py: fp8="e4m3",
# fp8_recipe="blockwise"; __main__.py runs them under fp8="hybrid", fp8_recipe="blockwise": E4M3
# forward, E5M2 gradients, the same bytes), baseline.json@cf39a4ddcf, ms
MOE_PERF_H100_FP8_BLOCKWISE_MS = {
    ("mixtral", "alltoall"): (3.7876319885253906, 6.618246412277221),
    ("mixtral", "deepep"): (4.101150441169739, 6.82720000743866),
    ("mixtral", "hybridep"): (3.7007392168045046, 6.57167682647705),
    ("deepseek", "alltoall"): (7.609272027015686, 10.126460886001587),
}
# model / published for the blockwise FP8 layers: mfusim is 4-14% fast here (0.86-0.93 forward,
# 0.89-0.96 backward) where it is 1-11% slow in BF16 -- its blockwise GEMMs run at the per-tensor
# FP8 rate (kernels.BLOCKWISE_PROMOTION_NOTE: DeepGEMM's H800 tables support that, cuBLAS's
# block-scaled Hopper kernels, which TE runs, have no published table), so it credits FP8 more gain
# than these layers show (docs/accuracy.md, "One MoE layer against Megatron-LM's moe_perf")
FP8_BLOCKWISE_BAND = (0.82, 1.10)

PROXIES: dict[str, dict[str, Any]] = {
    # test_cases.py MIXTRAL_PROXY
    "mixtral": {"preset": "mixtral-8x7b"},
    # test_cases.py DEEPSEEK_PROXY without the shared expert the benchmark leaves out (module docstring)
    "deepseek": {
        "name": "moe-perf-deepseek-proxy",
        "hidden": 7168,
        "heads": 8,
        "vocab": 129280,
        "ffn_hidden": 2048,
        "gated_mlp": True,
        "dropout": 0.0,
        "moe": {"num_experts": 32, "top_k": 8, "expert_ffn_hidden": 2048},
    },
}
# the DeepSeek proxy's 8 heads of 7168 are 896 wide, which no fused attention kernel takes
# (specs.MAX_FUSED_ATTENTION_HEAD_DIM); the attention is outside the MoE layer these tests time
PROXY_KERNELS: dict[str, dict[str, Any]] = {"deepseek": {"attention": "unfused"}}
# a transformer layer's segments outside Megatron-Core's MoELayer
NOT_MOE = ("input norm", "qkv", "qk norm", "rope", "gqa", "attention", "attn out", "residual add")
NOT_MOE += ("post-attn norm", "norm/bias main_grad")


def _scn(proxy: str, dispatcher: str, precision: dict[str, Any] | None = None) -> Scenario:
    model = {**PROXIES[proxy], "seq_len": 4096, "layers": 1}
    model["moe"] = {**model.get("moe", {}), "routing": "balanced"}  # moe_router_force_load_balancing
    data: dict[str, Any] = {
        "model": model,
        "cluster": {"topology": "dgx-h100", "num_gpus": 8},
        "parallel": {"ep": 8, "dp": 8, "micro_batch": 1, "global_batch": 8},
        "precision": precision or {"dtype": "bf16"},
        "kernels": {"moe_dispatcher": dispatcher, **PROXY_KERNELS.get(proxy, {})},
    }
    return scenario_from_dict(data)


def _moe_layer_ms(scn: Scenario) -> tuple[float, float, list[str]]:
    """(forward, backward + weight gradients) of the MoE part of one layer at the boost clock."""
    coster = _Coster(scn, default_comm_model(scn))
    coster.stage = 0
    coster.device = replace(coster.device, power_clock=1.0 / sustained_clock_fraction(scn.gpu))
    fwd, b_in, b_w, _, _ = coster.layer(True)

    def moe(parts: Any) -> list[Any]:
        return [s for s in parts if not s.name.startswith(NOT_MOE)]

    f = moe(fwd.parts)
    b = moe(b_in.parts) + moe(b_w.parts)
    return sum(s.duration_s for s in f) * 1e3, sum(s.duration_s for s in b) * 1e3, [s.name for s in f + b]


@pytest.mark.parametrize("case", sorted(MOE_PERF_H100_BF16_MS))
def test_moe_layer_matches_megatron_moe_perf(case: tuple[str, str]) -> None:
    fwd_pub, bwd_pub = MOE_PERF_H100_BF16_MS[case]
    fwd, bwd, names = _moe_layer_ms(_scn(*case))
    # the selection holds the layer's MoE work and nothing of the attention
    for needed in ("router", "ep dispatch", "expert fc1", "expert fc2", "ep combine", "expert fc1 wgrad"):
        assert needed in names
    assert not any(n.startswith(("attention", "qkv")) for n in names)
    assert BAND[0] <= fwd / fwd_pub <= BAND[1], f"forward {fwd:.2f} ms vs published {fwd_pub:.2f} ms"
    assert BAND[0] <= bwd / bwd_pub <= BAND[1], f"backward {bwd:.2f} ms vs published {bwd_pub:.2f} ms"


@pytest.mark.parametrize("case", sorted(MOE_PERF_H100_FP8_BLOCKWISE_MS))
def test_blockwise_fp8_moe_layer_against_moe_perf(case: tuple[str, str]) -> None:
    """The FP8 layers of the same benchmark, TE's Float8BlockScaling (`[precision] fp8_recipe =
    "blockwise"`): within FP8_BLOCKWISE_BAND of the published times. mfusim's FP8 / BF16 ratio is
    0.70-0.76 on Mixtral and 0.86-0.96 on DeepSeek alltoall against the published 0.85-0.88 and
    0.97-1.07: it credits blockwise FP8 more gain than these layers show (docs/accuracy.md)."""
    fwd_pub, bwd_pub = MOE_PERF_H100_FP8_BLOCKWISE_MS[case]
    fwd, bwd, names = _moe_layer_ms(_scn(*case, {"dtype": "fp8", "fp8_recipe": "blockwise"}))
    assert "fp8 cast" in names or "fp8 cast (per expert)" in names
    lo, hi = FP8_BLOCKWISE_BAND
    assert lo <= fwd / fwd_pub <= hi, f"forward {fwd:.2f} ms vs published {fwd_pub:.2f} ms"
    assert lo <= bwd / bwd_pub <= hi, f"backward {bwd:.2f} ms vs published {bwd_pub:.2f} ms"


def test_expert_gemms_are_most_of_the_large_shape_layer() -> None:
    """The Mixtral layer is mostly its expert GEMMs: mfusim's expert GEMMs alone (forward, dgrad,
    wgrad) are between 80% and 100% of the published forward + backward total. So the comparison
    above tests the kernel model's large expert GEMMs, and they are not slower than the whole
    published layer (0.93 at the boost clock)."""
    scn = _scn("mixtral", "alltoall")
    coster = _Coster(scn, default_comm_model(scn))
    coster.stage = 0
    coster.device = replace(coster.device, power_clock=1.0 / sustained_clock_fraction(scn.gpu))
    fwd, b_in, b_w, _, _ = coster.layer(True)
    parts = list(fwd.parts) + list(b_in.parts) + list(b_w.parts)
    gemm = sum(s.duration_s for s in parts if s.name.startswith("expert fc")) * 1e3
    total = sum(MOE_PERF_H100_BF16_MS[("mixtral", "alltoall")])
    assert 0.80 < gemm / total < 1.0
