"""DeepSeek-V3's own layout (arXiv 2412.19437 §3.2: 2,048 H800, tp 1, pp 16 DualPipe, ep 64,
ZeRO-1, FP8, seq 4096): every part of the per-GPU memory checked against a hand count from the
model's dimensions, and each of the report's memory features by its closed-form saving (issue 13)."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.errors import ConfigError
from simulator.loading import load_scenario
from simulator.memory import (
    FRAGMENTATION_FRACTION,
    FRAMEWORK_BYTES,
    memory_footprint,
    scenario_layer_activations,
)
from simulator.specs import Scenario

REPORT_LAYOUT = """
name = "dsv3-report"
[model]
preset = "deepseek-v3"
seq_len = 4096
[model.moe]
max_nodes_per_token = 4
dispatch_dtype = "fp8"
load_imbalance = 1.0  # the closed forms below hold each EP rank's mean dispatched tokens
[cluster]
topology = "dgx-h100"
num_gpus = 2048
gpu = "h800"
[parallel]
tp = 1
pp = 16
ep = 64
zero = 1
schedule = "dualpipe"
global_batch = 15360
{parallel}
[precision]
dtype = "{dtype}"
[memory]
{memory}
"""
# the report's documented features that the simulator has keys for: recomputation of the RMSNorms
# and MLA up-projections (§3.2.3), the SwiGLU output of the experts recomputed from its FP8-cached
# input (§3.3.4), BF16 Adam moments (§3.3.3)
FEATURES_PARALLEL = 'recompute = "selective"\nrecompute_modules = ["layernorm", "mla_up_proj", "moe_act"]'
FEATURES_MEMORY = 'exp_avg_dtype = "bf16"\nexp_avg_sq_dtype = "bf16"\nfp8_moe_act_input = true'

S, H, V = 4096, 7168, 129280  # tokens per micro-batch (b = 1), hidden, vocabulary
GIB = 2.0**30


def _scn(tmp_path: Path, parallel: str = "", memory: str = "", dtype: str = "fp8") -> Scenario:
    path = tmp_path / "dsv3.toml"
    path.write_text(REPORT_LAYOUT.format(parallel=parallel, memory=memory, dtype=dtype))
    return load_scenario(path)


def _stage0_params() -> tuple[int, int]:
    """Parameters on pipeline rank 0 by hand: DualPipe gives it stage 0 (embedding, the 3 dense
    layers, MoE layer 3) and stage 15 (MoE layers 58-60, final norm, output head, the MTP module,
    which shares the embedding and head); routed experts 256/64 = 4 per rank."""
    attn = H * 1536 + 1536 + 1536 * 128 * 192 + H * (512 + 64) + 512 + 512 * 128 * 256 + 128 * 128 * H + H
    dense_mlp = 3 * H * 18432 + H
    moe_common = 256 * H + 3 * H * 2048 + H  # router, shared expert, norm
    experts = 4 * 3 * H * 2048
    mtp = attn + moe_common + 2 * H * H + 3 * H
    dense = 3 * (attn + dense_mlp) + 4 * (attn + moe_common) + 2 * V * H + H + mtp
    return dense, 5 * experts


def _layer_bytes_per_token() -> tuple[int, int]:
    """(dense, MoE) layer activations per token, FP8 training, no recompute, FlashAttention."""
    replicated = 2 * 2 * H + H + H  # two RMSNorm inputs (16-bit), the QKV and MLP inputs (FP8)
    # a MoE layer's MLP input: 16-bit, kept by the router, + the shared expert fc1's FP8 copy
    replicated_moe = 2 * 2 * H + H + (2 * H + H)
    q, k, v = 128 * 192, 128 * 192, 128 * 128
    # Q K V (16-bit), the attention output (16-bit, kept by the fused core, + the out-proj's FP8
    # copy), the latents (RMSNorm input 16-bit + the up-projection input's FP8 copy)
    attention = 2 * (q + k + v) + (2 + 1) * v + 3 * (1536 + 512)
    lse = 4 * 128
    dense_mlp = (2 * 2 + 1) * 18432  # gate, up (16-bit), their product (FP8: fc2's input)
    moe_mlp = (2 * 2 + 1) * (8 * 2048 + 2048) + 8 * H  # top-8 + shared expert, dispatched tokens
    return replicated + attention + lse + dense_mlp, replicated_moe + attention + lse + moe_mlp


def test_model_state_by_hand(tmp_path: Path) -> None:
    report = memory_footprint(_scn(tmp_path))
    dense, expert = _stage0_params()
    parts = report.parts_bytes
    # bf16 + TE's fp8 copy of the GEMM weights; the embedding, output head and final norm stay
    # 16-bit only (§3.3.1: "the embedding module, the output head" in original precision; no TE
    # modules in Megatron-Core either)
    ends = 2 * V * H + H
    assert parts["weights"] == pytest.approx(3 * (dense + expert) - ends)
    # FP32 gradients (§3.3.3: "gradients (used for batch size accumulation) ... in FP32"),
    # unsharded under ZeRO-1: this is why they exceed the 3-byte weights
    assert parts["grads"] == pytest.approx(4 * (dense + expert))
    # optimizer: dense sharded over dp = 128, experts over their 2 expert-data-parallel ranks
    assert parts["optimizer"] == pytest.approx(12 * (dense / 128 + expert / 2))


def test_dualpipe_activations_weight_each_chunk_by_its_own_layers(tmp_path: Path) -> None:
    """DualPipe (Table 2): PP + 1 chunk micro-batches in flight on rank 0 -- p of its first chunk
    (3 dense + 1 MoE layer) and one of its last (3 MoE layers), plus the output layer's inputs
    and fp32 logits of one micro-batch, and the MTP module's (§2.2) for that micro-batch: its two
    RMSNorm inputs (16-bit), the projection's 2h input (FP8), an MoE layer, the head again."""
    report = memory_footprint(_scn(tmp_path))
    dense, moe = _layer_bytes_per_token()
    p = 16
    layers = p * (3 * dense + moe) + 1 * (3 * moe)
    head = 2 * 2 * S * H + 4 * S * V
    mtp = S * (moe + 2 * 2 * H + 2 * H) + head
    expected = S * layers + head + mtp
    assert report.parts_bytes["activations"] == pytest.approx(expected)
    allocated = sum(v for k, v in report.parts_bytes.items() if k != "reserved")
    assert report.parts_bytes["reserved"] == pytest.approx(
        FRAMEWORK_BYTES + FRAGMENTATION_FRACTION * allocated
    )


def test_each_report_feature_saves_its_closed_form(tmp_path: Path) -> None:
    base = _scn(tmp_path)
    mem0 = memory_footprint(base).parts_bytes
    # BF16 moments: 4 + 2 + 2 bytes of optimizer state per parameter instead of 12
    bf16 = memory_footprint(_scn(tmp_path, memory='exp_avg_dtype = "bf16"\nexp_avg_sq_dtype = "bf16"'))
    assert bf16.parts_bytes["optimizer"] == pytest.approx(mem0["optimizer"] * 8 / 12)
    # FP8-cached SwiGLU inputs of the routed experts: 1 byte less on 2 x top_k x expert_ffn per
    # token of each MoE layer; rank 0 holds p + 3 + 1 (MTP) = 20 MoE layer-micro-batches
    fp8 = _scn(tmp_path, memory="fp8_moe_act_input = true")
    saving = 2 * 8 * 2048 * S
    assert scenario_layer_activations(base, True).stored - scenario_layer_activations(fp8, True).stored == (
        pytest.approx(saving)
    )
    assert scenario_layer_activations(fp8, False).stored == scenario_layer_activations(base, False).stored
    act = memory_footprint(fp8).parts_bytes["activations"]
    assert mem0["activations"] - act == pytest.approx(20 * saving)
    # MLA up-projections recomputed: Q, K, V (16-bit) not kept, 2 (q + k + v) bytes per token;
    # RMSNorms recomputed: the two norm outputs' FP8 copies (the next linears then save the
    # recomputed original, Megatron-Core 781e765818); and Megatron refuses layernorm recompute under
    # delayed scaling, so this FP8 run is non-delayed: the output projection keeps the attention
    # output's 16-bit original, not an FP8 copy beside it (2 + 1 -> 2 bytes per element)
    up = _scn(tmp_path, parallel='recompute = "selective"\nrecompute_modules = ["mla_up_proj", "layernorm"]')
    # (a MoE layer's pre-MLP norm output: the router's 16-bit copy and the shared expert's FP8 one)
    # rank 0: 16 x 3 dense layer-micro-batches, 16 + 3 + 1 (MTP) MoE ones
    per_dense = (2 * (128 * 192 * 2 + 128 * 128) + 2 * H + 128 * 128) * S
    per_moe = (2 * (128 * 192 * 2 + 128 * 128) + H + 3 * H + 128 * 128) * S
    assert mem0["activations"] - memory_footprint(up).parts_bytes["activations"] == pytest.approx(
        16 * 3 * per_dense + (16 + 3 + 1) * per_moe
    )


def test_report_features_together(tmp_path: Path) -> None:
    """The report's recompute, BF16 moments and FP8 SwiGLU inputs together (the E5M6 attention
    output: test_report_recipe_rank0_by_hand); the remaining gap to the report's 80 GB is rank 0's
    layer split (docs/accuracy.md "DeepSeek-V3's own layout in 80 GB")."""
    before = memory_footprint(_scn(tmp_path))
    after = memory_footprint(_scn(tmp_path, FEATURES_PARALLEL, FEATURES_MEMORY))
    assert after.peak_bytes < before.peak_bytes
    assert after.parts_bytes["weights"] == before.parts_bytes["weights"]
    assert after.parts_bytes["grads"] == before.parts_bytes["grads"]
    dense, moe = _layer_bytes_per_token()
    # up-proj, the norm outputs' FP8 copies, the out-proj's FP8 copy (non-delayed recipe), then
    # moe_act and the FP8-cached SwiGLU input
    recomputed = 2 * (128 * 192 * 2 + 128 * 128) + 128 * 128
    kept_moe = moe - recomputed - (H + 3 * H) - 8 * 2048 - 2 * 8 * 2048
    kept_dense = dense - recomputed - 2 * H
    head = 2 * 2 * S * H + 4 * S * V
    mtp = S * (kept_moe + 2 * 2 * H + 2 * H) + head
    expected = S * (16 * (3 * kept_dense + kept_moe) + 3 * kept_moe) + head + mtp
    assert after.parts_bytes["activations"] == pytest.approx(expected)


def test_fp8_moe_act_input_is_refused_outside_fp8(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="memory.fp8_moe_act_input"):
        _scn(tmp_path, memory="fp8_moe_act_input = true", dtype="bf16")


def test_mtp_module_on_rank_0(tmp_path: Path) -> None:
    """Without the MTP module rank 0 loses exactly its state and its activations (one micro-batch)
    -- rank 0's own total: without MTP another rank becomes the most loaded one."""
    with_mtp = memory_footprint(_scn(tmp_path)).stage_peak_bytes[0]
    path = tmp_path / "no-mtp.toml"
    path.write_text(
        REPORT_LAYOUT.format(parallel="", memory="", dtype="fp8").replace(
            "seq_len = 4096\n", "seq_len = 4096\nmtp_layers = 0\n", 1
        )
    )
    without = memory_footprint(load_scenario(path)).stage_peak_bytes[0]
    _, moe = _layer_bytes_per_token()
    attn = H * 1536 + 1536 + 1536 * 128 * 192 + H * (512 + 64) + 512 + 512 * 128 * 256 + 128 * 128 * H + H
    dense = attn + 256 * H + 3 * H * 2048 + H + 2 * H * H + 3 * H
    expert = 4 * 3 * H * 2048
    state = 7 * (dense + expert) + 12 * (dense / 128 + expert / 2)
    act = S * (moe + 2 * 2 * H + 2 * H) + 2 * 2 * S * H + 4 * S * V
    assert with_mtp - without == pytest.approx((1 + FRAGMENTATION_FRACTION) * (state + act))


def test_e5m6_attention_output_saves_its_closed_form(tmp_path: Path) -> None:
    """§3.3.3 "Low-Precision Activation" (1): the attention output, the input of the Linear after
    the attention operator, kept once in E5M6 (12 bits) for both the attention backward and the
    output projection. Against the report's recipe (RMSNorms recomputed: Megatron's non-delayed
    FP8, one 16-bit copy) 2 -> 1.5 bytes per element of heads·v_head_dim = 128·128 per token;
    against the delayed recipe (16-bit copy kept by the fused core + the projection's FP8 copy)
    2 + 1 -> 1.5. Rank 0 holds 16 x 4 + 3 layer-micro-batches and the MTP layer's one."""
    v = 128 * 128
    recipe = 'recompute = "selective"\nrecompute_modules = ["mla_up_proj", "layernorm"]'
    for parallel, per_element in ((recipe, 2 - 1.5), ("", 2 + 1 - 1.5)):
        base = _scn(tmp_path, parallel=parallel)
        e5m6 = _scn(tmp_path, parallel=parallel, memory="e5m6_attention_output = true")
        for moe in (False, True):
            saved = (
                scenario_layer_activations(base, moe).stored - scenario_layer_activations(e5m6, moe).stored
            )
            assert saved == pytest.approx(per_element * v * S)
        act0 = memory_footprint(base).parts_bytes["activations"]
        act1 = memory_footprint(e5m6).parts_bytes["activations"]
        assert act0 - act1 == pytest.approx((16 * 4 + 3 + 1) * per_element * v * S)
        # the model state does not move
        for part in ("weights", "grads", "optimizer"):
            assert memory_footprint(base).parts_bytes[part] == memory_footprint(e5m6).parts_bytes[part]


def test_e5m6_attention_output_is_refused_outside_fp8(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="memory.e5m6_attention_output"):
        _scn(tmp_path, memory="e5m6_attention_output = true", dtype="bf16")


ALL_RECIPE_MEMORY = FEATURES_MEMORY + "\ne5m6_attention_output = true"


def test_report_recipe_rank0_by_hand(tmp_path: Path) -> None:
    """Every memory statement of the report the simulator has a key for (§3.2.3 recompute of the
    RMSNorms and MLA up-projections; §3.3.3 BF16 moments, E5M6 attention output, FP8 SwiGLU inputs
    with the output recomputed), rank 0 part by part from the model's dimensions: per token of a
    dense layer the two RMSNorm inputs (2·2h), the latents' RMSNorm inputs (16-bit) and FP8
    up-projection inputs (3·(1536 + 512)), the E5M6 attention output (1.5·128·128), the LSE
    (4·128) and the dense SwiGLU's gate, up (16-bit) and fc2 input (FP8) (5·18432); a MoE layer
    the same attention, the routed experts' FP8 gate and up (2·8·2048), the shared expert's
    5·2048 and the dispatched FP8 token copies (8h)."""
    scn = _scn(tmp_path, FEATURES_PARALLEL, ALL_RECIPE_MEMORY)
    attention = 2 * 2 * H + 3 * (1536 + 512) + 1.5 * 128 * 128 + 4 * 128
    dense = attention + 5 * 18432
    moe = attention + 2 * 8 * 2048 + 5 * 2048 + 8 * H
    assert scenario_layer_activations(scn, False).stored == pytest.approx(S * dense)
    assert scenario_layer_activations(scn, True).stored == pytest.approx(S * moe)
    head = 2 * 2 * S * H + 4 * S * V
    mtp = S * (moe + 2 * 2 * H + 2 * H) + head
    report = memory_footprint(scn)
    parts = report.parts_bytes
    assert parts["activations"] == pytest.approx(S * (16 * (3 * dense + moe) + 3 * moe) + head + mtp)
    d, e = _stage0_params()
    assert parts["weights"] == pytest.approx(3 * (d + e) - (2 * V * H + H))
    assert parts["grads"] == pytest.approx(4 * (d + e))
    assert parts["optimizer"] == pytest.approx(8 * (d / 128 + e / 2))


def test_report_layout_over_80_gb_on_rank_0_only(tmp_path: Path) -> None:
    """The report trained this layout in 80 GB (H800) but does not state how the 61 layers split
    over the 16 stages. With the simulator's default split (the extra layers on the first stages)
    rank 0 -- 16 micro-batches of layers 0-3, three of them dense 18432-wide MLPs, beside the
    embedding, head and MTP module -- is the only rank over it (docs/accuracy.md). Megatron-Bridge's
    own DeepSeek-V3 split for pp 16 (embedding + 4 layers, 4 x 14, 1 layer + MTP + loss;
    NVIDIA-NeMo/Megatron-Bridge@067f987d recipes/deepseek/h100/deepseek_v3.py
    _get_deepseek_v3_pipeline_layout) keeps rank 0's first chunk and takes two MoE layers out of its
    last one: exactly 2 MoE layer-micro-batches of activations and those layers' state less."""
    default = memory_footprint(_scn(tmp_path, FEATURES_PARALLEL, ALL_RECIPE_MEMORY))
    assert default.stage_peak_bytes[0] > default.capacity_bytes
    assert max(default.stage_peak_bytes[1:15]) <= default.capacity_bytes
    layout = "pipeline_layout = [" + "4, " * 15 + "1]"
    scn = _scn(tmp_path, FEATURES_PARALLEL + "\n" + layout, ALL_RECIPE_MEMORY)
    megatron = memory_footprint(scn).parts_bytes
    moe = scenario_layer_activations(scn, True).stored
    assert default.parts_bytes["activations"] - megatron["activations"] == pytest.approx(2 * moe)
    attn = H * 1536 + 1536 + 1536 * 128 * 192 + H * (512 + 64) + 512 + 512 * 128 * 256 + 128 * 128 * H + H
    layer_dense, layer_expert = attn + 256 * H + 3 * H * 2048 + H, 4 * 3 * H * 2048
    two = 2 * (layer_dense + layer_expert)
    assert default.parts_bytes["weights"] - megatron["weights"] == pytest.approx(3 * two)
    assert default.parts_bytes["grads"] - megatron["grads"] == pytest.approx(4 * two)
