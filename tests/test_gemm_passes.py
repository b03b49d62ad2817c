"""The backward GEMMs of a layer at their own shapes.

For Y[m×n] = X[m×k]·W[k×n] over m tokens, the input gradient dX = dY·Wᵀ is an (m, k, n) GEMM
(output m×k, reduction over n) and the weight gradient dW = Xᵀ·dY a (k, n, m) GEMM (output k×n,
reduction over the m tokens): Transformer Engine's three general_gemm calls (layouts "TN", "NN",
"NT", transformer_engine/pytorch/module/linear.py @d0067d0d; grouped_linear.py for the experts,
whose wgrad reduces over each expert's own tokens). Each costs 2·m·n·k FLOPs; the kernel model
prices each at its own tiles, waves and split-K.
"""

from __future__ import annotations

import math

import pytest

from simulator import kernels as K
from simulator.comm import default_comm_model
from simulator.costs import (
    GEMM_PASSES,
    Device,
    gemm_pass_shape,
    grouped_matmul_time_s,
    matmul_pass_times_s,
    matmul_time_s,
    wgrad_output_bytes,
)
from simulator.loading import load_gpu_catalog, scenario_from_dict
from simulator.program import TE_GEMM_STREAMS, _Coster
from simulator.specs import Scenario


def _device(gpu: str = "h100-sxm", dtype: str = "bf16") -> Device:
    return Device(load_gpu_catalog()[gpu], dtype)


def test_pass_shapes_closed_form() -> None:
    m, n, k = 4096, 5760, 2880
    assert gemm_pass_shape("fprop", m, n, k) == (m, n, k)
    assert gemm_pass_shape("dgrad", m, n, k) == (m, k, n)  # dX[m×k] = dY[m×n]·Wᵀ[n×k]
    assert gemm_pass_shape("wgrad", m, n, k) == (k, n, m)  # dW[k×n] = Xᵀ[k×m]·dY[m×n]
    for p in GEMM_PASSES:  # the same 2·m·n·k FLOPs in every pass
        assert math.prod(gemm_pass_shape(p, m, n, k)) == m * n * k
    with pytest.raises(ValueError, match="bwd"):
        gemm_pass_shape("bwd", m, n, k)
    with pytest.raises(ValueError, match="bwd"):
        grouped_matmul_time_s(_device(), m, n, k, 4, pass_="bwd")


@pytest.mark.parametrize(("gpu", "dtype"), [("a100-80gb", "bf16"), ("h100-sxm", "fp8"), ("b200", "mxfp8")])
def test_square_gemm_three_passes_cost_the_same(gpu: str, dtype: str) -> None:
    """A square GEMM has one shape in all three passes: one time (dense and grouped)."""
    d = _device(gpu, dtype)
    for size in (256, 1024, 8192):
        fprop, dgrad, wgrad = matmul_pass_times_s(d, size, size, size)
        assert fprop == dgrad == wgrad == matmul_time_s(d, size, size, size)
    for streams in (0, TE_GEMM_STREAMS):
        times = {grouped_matmul_time_s(d, 1024, 1024, 1024, 16, False, streams, p) for p in GEMM_PASSES}
        assert len(times) == 1


def test_skinny_expert_wgrad_closed_form() -> None:
    """A GPT-OSS expert fc1 on H100 (hidden 2880 -> 2·2880, 1024 tokens per expert, 4 experts in
    flight): the forward's output is 1024 × 5760 per expert, the wgrad's 2880 × 5760 with a k-loop
    of only 1024 tokens. Its plan: 12·45 tiles of 256×128 per expert, 2160 CTAs on 132 SMs = 17
    waves of one 1024-step tile each (no split-K: the tiles already fill the GPU twice), plus the
    kernel latency, at the sustained clock, plus the launch gap. Its HBM traffic (the operands and
    output at a memory-bound GEMM's bandwidth, 204 MB) takes 0.4 of the main loop's time, so the
    p-norm of the two (kernels.gemm_plan, imperfect overlap) adds only (1 + 0.4^p)^(1/p) - 1 of it."""
    d = _device()
    m, n, k, groups = 1024, 5760, 2880, 4
    wgrad = grouped_matmul_time_s(d, m, n, k, groups, pass_="wgrad")
    assert wgrad == matmul_time_s(d, k, n, m, groups)
    p, gpu = d.params, d.gpu
    plan = K.gemm_plan(gpu, "bf16", k, n, m, groups, p)
    assert (plan.tile_m, plan.tile_n, plan.split_k) == (256, 128, 1)
    waves = math.ceil(math.ceil(k / 256) * math.ceil(n / 128) * groups / gpu.num_sms)
    assert waves == plan.waves == 17
    peak_per_sm = gpu.peak_flop_per_s("bf16") * p.gemm_peak_fraction / gpu.num_sms
    t_tile = 2.0 * 256 * 128 * (m + p.gemm_tile_overhead) / peak_per_sm
    bw = gpu.hbm_bandwidth_bytes_per_s * p.memory_bw_fraction * p.gemm_memory_bw_scale
    t_mem = groups * ((k * m + m * n) * 2 + k * n * 2) / bw
    t_main = waves * t_tile
    assert 0.3 * t_main < t_mem < 0.5 * t_main
    q = p.gemm_overlap_exponent
    want = ((t_main**q + t_mem**q) ** (1 / q) + p.gemm_latency_s) / d.clock + d.launch_s
    assert wgrad == pytest.approx(want, rel=1e-12)
    fprop = grouped_matmul_time_s(d, m, n, k, groups)
    assert wgrad > 1.1 * fprop  # 17 short-k waves vs the forward's long-k tiles
    # the dgrad keeps the token rows: the forward of the transposed weight
    assert grouped_matmul_time_s(d, m, n, k, groups, pass_="dgrad") == grouped_matmul_time_s(
        d, m, k, n, groups
    )


@pytest.mark.parametrize("streams", [0, TE_GEMM_STREAMS])
def test_grouped_wgrad_tokens_are_its_reduction(streams: int) -> None:
    """The wgrad's tokens are its k-loop: padded to the recipe's alignment like the forward's rows,
    and (the kernel model's k-loop being linear in k) uneven routing costs the mean token count,
    while the forward and dgrad pay the ragged row tiles. Never faster with more tokens."""
    for gpu, dtype in (("h100-sxm", "bf16"), ("h100-sxm", "fp8"), ("b200", "mxfp8")):
        d = _device(gpu, dtype)
        n, k, groups = 1536, 2048, 16
        even = grouped_matmul_time_s(d, 500, n, k, groups, False, streams, "wgrad")
        assert grouped_matmul_time_s(d, 500, n, k, groups, True, streams, "wgrad") == even
        assert grouped_matmul_time_s(d, 512, n, k, groups, False, 0, "wgrad") == matmul_time_s(
            d, k, n, 512, groups
        )
        for p in ("fprop", "dgrad"):  # one kernel: its ragged row tiles cost (4 streams may hide them)
            ragged = grouped_matmul_time_s(d, 512, n, k, groups, True, 0, p)
            assert ragged > grouped_matmul_time_s(d, 512, n, k, groups, False, 0, p)
        times = [grouped_matmul_time_s(d, m, n, k, groups, True, streams, "wgrad") for m in range(1, 700, 7)]
        assert all(b >= a for a, b in zip(times, times[1:], strict=False))


def _scn(model: dict, parallel: dict, gpu: str = "h100-sxm", topology: str = "dgx-h100", **extra) -> Scenario:
    num_gpus = parallel.pop("num_gpus")
    return scenario_from_dict(
        {
            "name": "t",
            "model": model,
            "cluster": {"topology": topology, "num_gpus": num_gpus, "gpu": gpu},
            "parallel": {"global_batch": 64, **parallel},
            **extra,
        }
    )


SCENARIOS = {
    "dense tp2 sp overlap": _scn(
        {"preset": "llama3-8b", "seq_len": 4096},
        {"tp": 2, "num_gpus": 8, "sequence_parallel": True, "tp_comm_overlap": True},
    ),
    "gpt-oss experts": _scn(
        {"preset": "gpt-oss-120b", "seq_len": 4096}, {"ep": 8, "num_gpus": 8}, precision={"dtype": "bf16"}
    ),
    "deepseek mla + mtp": _scn(
        {"preset": "deepseek-v3", "seq_len": 4096, "layers": 4, "mtp_layers": 1},
        {"ep": 8, "tp": 2, "sequence_parallel": True, "num_gpus": 16},
        precision={"dtype": "fp8"},
    ),
}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_backward_gemm_flops_exactly_twice_the_forward(name: str) -> None:
    """Every weight GEMM of a layer (dense, grouped experts, router, MLA projections) and of the
    output layer and MTP projection has a dgrad and a wgrad of its forward FLOPs: fwd + dgrad +
    wgrad = 3 × forward, whatever each pass's shape costs."""
    scn = SCENARIOS[name]
    coster = _Coster(scn, default_comm_model(scn))
    layer = coster.layer(scn.model.is_moe)
    blocks = [layer[:3], coster.logits()]
    if scn.model.mtp_layers:
        blocks.append(coster.mtp(layer)[:3])
    for fwd, b_in, b_w in blocks:
        f = {s.name: s for s in fwd.parts if s.flops > 0 and not s.name.startswith("attention")}
        d = {s.name: s for s in b_in.parts if s.name.endswith(" dgrad")}
        w = {s.name: s for s in b_w.parts if s.name.endswith(" wgrad")}
        assert f, name
        assert sorted(d) == sorted(x + " dgrad" for x in f)
        assert sorted(w) == sorted(x + " wgrad" for x in f)
        total_f = sum(s.flops for s in f.values())
        assert sum(s.flops for s in f.values()) + sum(s.flops for s in d.values()) + sum(
            s.flops for s in w.values()
        ) == pytest.approx(3 * total_f, rel=1e-12)
        for x, s in f.items():
            assert d[x + " dgrad"].flops == s.flops == w[x + " wgrad"].flops


def test_layer_dump_shows_each_pass_at_its_shape() -> None:
    """GPT-OSS experts on H100 (hidden 2880, 128 experts, 16 per EP-8 rank): the dump's expert fc1
    and fc2 wgrads are the grouped GEMMs reduced over each expert's tokens, and differ from the
    forward; the dense qkv's dgrad and wgrad are their own shapes too."""
    scn = SCENARIOS["gpt-oss experts"]
    coster = _Coster(scn, default_comm_model(scn))
    fwd, b_in, b_w, _, _ = coster.layer(True)
    segs = {s.name: s for s in (*fwd.parts, *b_in.parts, *b_w.parts)}
    d, m = coster.device, scn.model
    experts_local = m.num_experts // 8
    per_expert = segs["expert fc1"].flops / (2.0 * 2 * m.expert_ffn * m.hidden * experts_local)
    assert per_expert == int(per_expert)
    args = (
        int(per_expert),
        2 * m.expert_ffn,
        m.hidden,
        experts_local,
        m.uneven_expert_counts,  # forced (random) routing: unequal per-expert counts too
        TE_GEMM_STREAMS,
    )
    assert coster.wgrad_bytes == 8  # Megatron-Core: accumulated into the fp32 main_grad
    for p, suffix in zip(GEMM_PASSES, ("", " dgrad", " wgrad"), strict=True):
        want = grouped_matmul_time_s(d, *args, p, coster.wgrad_bytes)
        assert segs["expert fc1" + suffix].duration_s == pytest.approx(want, rel=1e-12)
    assert segs["expert fc1 wgrad"].duration_s != segs["expert fc1"].duration_s
    q = m.heads * m.dim_per_head + 2 * m.num_kv_heads * m.dim_per_head
    T = scn.parallel.micro_batch * m.seq_len
    want = matmul_pass_times_s(d, T, q, m.hidden, 1, coster.wgrad_bytes)
    got = tuple(segs["qkv" + s].duration_s for s in ("", " dgrad", " wgrad"))
    assert got == pytest.approx(want, rel=1e-12)


def test_short_k_wgrad_accumulating_into_fp32_main_grad_is_its_output_traffic() -> None:
    """A DeepSeek-V3-sized expert fc1 (7168 -> 2·2048) with 128 tokens per expert, 4 experts in
    flight, on H100: accumulating into the fp32 main_grad (read + write, 8 bytes per element,
    gradient accumulation fusion) its time is the kernel model's memory floor: the k×n outputs,
    plus both operands, at the achievable HBM bandwidth, plus the kernel latency, at the sustained
    clock, plus the launch gap (its main loop, a small share of that, adds under 1e-4 of it through
    the p-norm of compute and memory time, kernels.gemm_plan); writing a 16-bit gradient instead it
    is several times faster."""
    d = _device()
    m, n, k, groups = 128, 4096, 7168, 4
    assert wgrad_output_bytes(4, fused_accumulation=True) == 8
    assert wgrad_output_bytes(2, fused_accumulation=True) == 4
    assert wgrad_output_bytes(4, fused_accumulation=False) == 2
    p = d.params
    # a memory-bound GEMM's share of the streaming bandwidth (kernels.py gemm_memory_bw_scale)
    bw = d.gpu.hbm_bandwidth_bytes_per_s * p.memory_bw_fraction * p.gemm_memory_bw_scale
    moved = groups * (k * n * 8 + (k * m + m * n) * 2)
    want = (moved / bw + p.gemm_latency_s) / d.clock + d.launch_s
    fused = grouped_matmul_time_s(d, m, n, k, groups, pass_="wgrad", wgrad_out_bytes=8)
    assert want <= fused <= want * (1 + 1e-4)
    assert fused > 3 * grouped_matmul_time_s(d, m, n, k, groups, pass_="wgrad")
    # a long-k dense wgrad (8192 tokens) stays compute-bound: the accumulation costs it nothing
    dense = matmul_pass_times_s(d, 8192, 4096, 4096, 1, 8)[2]
    assert dense == matmul_pass_times_s(d, 8192, 4096, 4096)[2]


def test_wgrad_accumulation_follows_the_stack() -> None:
    """Megatron-Core fuses the wgrad's gradient accumulation into main_grad (fp32 by default, bf16
    with grad_reduce_dtype = "bf16"); the 2021 Megatron-LM and composer/FSDP stacks write 16 bits."""
    base = {"preset": "llama3-8b", "seq_len": 4096}
    par = {"num_gpus": 8}

    def coster(**kernels: str) -> _Coster:
        scn = _scn(dict(base), dict(par), kernels=kernels) if kernels else _scn(dict(base), dict(par))
        return _Coster(scn, default_comm_model(scn))

    assert coster().wgrad_bytes == 8
    assert coster(grad_reduce_dtype="bf16").wgrad_bytes == 4
    assert coster(stack="composer-fsdp").wgrad_bytes == 2
