"""Two published comparisons that bound where the Qwen3-30B-A3B rows of the 26.02-26.04.01
Megatron-Bridge containers lose the time `mfusim validate` misses (issue 13, qwen30;
docs/accuracy.md, "Qwen3-30B-A3B, 26.04.01 -> 26.06"). Test data, never fitted.

1. The 26.06 recipes set `fp8_dot_product_attention`; with an MXFP8 linear recipe Transformer
   Engine 2.16 runs the attention in MXFP8 (transformer_engine/pytorch/attention/
   dot_product_attention/dot_product_attention.py@4220403e, the recipe table: "MXFP8 | MXFP8 | Pass
   MXFP8 to autocast()"; Megatron-Bridge v0.5.0 / v0.6.0 set no NVTE_DPA_FP8_RECIPE). mfusim does
   not simulate the key and costs that attention as BF16 cuDNN. NVIDIA/cudnn-frontend
   benchmark/sdpa_benchmark_training/results/llama3.1/{gb200,gb300}/llama3.1_20260424_*.csv
   @3929da2 (cuDNN 9.22, 64 query / 8 KV heads, d128, batch 2, s = 4,096, causal "top_left",
   non-deterministic backward) time MXFP8 forward + backward at 0.326 + 1.305 ms (GB200) and
   0.242 + 1.203 ms (GB300), BF16 at 0.391 + 1.198 and 0.323 + 1.101 ms: MXFP8 is 2.6% / 1.5%
   *slower* in the sum. So the attention is no part of the 26.06 gain, and the BF16 kernel model
   must stand for the MXFP8 one within its own error against these figures (10%).

2. NVIDIA-NeMo/Megatron-Bridge#4439 (container 26.04.01, one DGX B200, the
   QWEN3_30B_A3B_PRETRAIN_CONFIG_B200_FP8_MX_V1 recipe, which is QWEN3_30B_A3B_PRETRAIN_CONFIG_B200_BF16_V1:
   scripts/performance/configs/qwen/qwen3_workload_base_configs.py@v0.4.2: micro-batch 4, global
   batch 512, EP 8, HybridEP, TE graphs of attn, moe_router, moe_preprocess; 100 iterations)
   measures ~562 TFLOP/s/GPU in MXFP8 and ~552 in BF16: MXFP8 / BF16 = 1.018 at equal model FLOPs.
   The model gives 1.036 for the same row. The 26.04.01 B200 row misses ~1.7 ms per layer and
   micro-batch (~17% of the step); a cost of that size carried only by the MXFP8 eager path (the
   per-expert quantize and scale-swizzle kernels) would put the ratio near 0.90 (8.66 s / (8.36 s + 768 layer-micro-batches x 1.7 ms)). So the missing
   time is (almost all) precision-independent, and this test fails if it is priced as MXFP8-only.
"""

from __future__ import annotations

import dataclasses

import pytest

from simulator import kernels as K
from simulator.loading import load_gpu_catalog
from simulator.resources import data_dir
from simulator.validate.cases import build_case
from simulator.validate.runner import scenario_for, simulate_report
from simulator.validate.runs import read_runs_csv

# cudnn-frontend @3929da2, llama3.1 config (64 / 8 heads, d128), batch 2, s 4096, causal, seconds
CUDNN_S4096 = {
    "gb200": {"bf16": (0.391e-3, 1.198e-3), "mxfp8": (0.326e-3, 1.305e-3)},
    "gb300": {"bf16": (0.323e-3, 1.101e-3), "mxfp8": (0.242e-3, 1.203e-3)},
}
ATTENTION_TOLERANCE = 0.10

# NVIDIA-NeMo/Megatron-Bridge#4439: TFLOP/s/GPU, 26.04.01, DGX B200, same layout both precisions
ISSUE4439_MXFP8_TFLOPS, ISSUE4439_BF16_TFLOPS = 562.0, 552.0
RATIO_TOLERANCE = 0.05
B200_ROW = "mbridge_26.04.01_Qwen3_30B_a3B_DGX-B200_8gpu_mxfp8"


@pytest.mark.parametrize("gpu_name", sorted(CUDNN_S4096))
def test_mxfp8_attention_costed_as_bf16_cudnn(gpu_name: str) -> None:
    gpu = load_gpu_catalog()[gpu_name]
    model_s = K.attention_time_s(
        gpu, batch=2, seq=4096, heads=64, head_dim=128, causal=True, impl="cudnn", pass_="fwd+bwd"
    )
    published = CUDNN_S4096[gpu_name]
    mxfp8_s, bf16_s = sum(published["mxfp8"]), sum(published["bf16"])
    # the published MXFP8 sum is 1.5-2.6% above the BF16 one at this shape (no gain): the BF16 cost
    # the model charges for the 26.06 recipes' MXFP8 attention is within 10% of the published
    # MXFP8 time (+8% on both; against cuDNN 9.22's BF16 it is +9 / +11%, the band kernels.toml
    # records for these reference-only figures: "cuDNN 9.22 runs 5-20% faster ... than the
    # FlashAttention-3-paper-era cuDNN the attention fit describes")
    assert abs(model_s / mxfp8_s - 1.0) <= ATTENTION_TOLERANCE, (model_s, mxfp8_s, bf16_s)


def test_b200_eager_recipe_mxfp8_over_bf16_matches_published() -> None:
    runs = {r.run_id: r for r in read_runs_csv(data_dir("scenarios") / "published" / "calibration_runs.csv")}
    run = runs[B200_ROW]
    mxfp8 = scenario_for(build_case(run), run.source)
    assert mxfp8.dtype == "mxfp8" and mxfp8.kernels.cuda_graph_impl == "transformer_engine"
    bf16 = dataclasses.replace(mxfp8, dtype="bf16", fp8_param_gather=False)
    ratio = simulate_report(bf16).step_time_s / simulate_report(mxfp8).step_time_s
    published = ISSUE4439_MXFP8_TFLOPS / ISSUE4439_BF16_TFLOPS
    assert ratio > 1.0  # the model still gives MXFP8 its (small) GEMM gain on this recipe
    assert abs(ratio / published - 1.0) <= RATIO_TOLERANCE, (ratio, published)
