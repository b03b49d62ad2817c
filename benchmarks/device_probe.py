#!/usr/bin/env python
"""One short, prepared measurement run for a lent GPU (issues 12 and 13). NOT run in CI.

    python benchmarks/device_probe.py --out $OUT            # ~4-6 min on an H200, all sections
    python benchmarks/device_probe.py --out $OUT --quick    # ~2 min, fewer shapes and shorter runs
    python benchmarks/device_probe.py --sections recompute,power --out $OUT

Writes `probe.json` (every measurement with its shape, dtype, time and rate) and `probe.txt` (the
same as readable lines) under --out, section by section, so a run cut short still returns what
it measured. Needs PyTorch with CUDA; `pynvml` (nvidia-ml-py) for the power/clock samples.

What each section answers, and where the answer goes:

* `env`: GPU name, SM count, clocks and power limit (NVML), torch/CUDA/cuDNN versions.
* `gemm`: cuBLAS(Lt) BF16 and FP8 (torch._scaled_mm, per-tensor scales) burst TFLOP/s by shape:
  squares, the MPT/Llama layer shapes, skinny and expert-sized GEMMs -> `[[gemm]]` figures in
  simulator/catalog/kernels.toml (cite this file, the commit and the device).
* `attention`: torch SDPA with the FlashAttention-2 and cuDNN backends, causal BF16, by sequence
  length and head dim, forward and forward+backward -> `[[attention]]` figures.
* `memory`: achieved GB/s of copy, add, GeLU forward/backward, LayerNorm forward/backward, the
  bias-gradient column sum, cross-entropy forward/backward and cat by size -> `[[memory]]`.
* `power`: board power and SM clock (NVML samples every ~20 ms) while a saturating GEMM, a
  streaming copy, GeLU, SDPA and interleaved GEMM+GeLU mixes run for a few seconds each, and the
  GEMM's own speed inside each mix. Settles the weight of memory-bound and attention kernels in
  the power-limited clock's tensor activity (simulator/clocks.py; docs/accuracy.md "MPT on H100:
  full recompute against none"): today they count as drawing no dynamic power.
* `recompute`: an MPT-style block (LayerNorm, fused-QKV Linear with bias, causal SDPA, out
  projection, LayerNorm, 4h GeLU MLP, residuals) forward, forward+backward, and forward+backward
  under torch.utils.checkpoint (non-reentrant), at the MPT-760M/1B/7B/13B widths: does full
  recompute cost one forward? (the same docs section: the model's recompute rows are 4-8% slow on
  H100).
* `experts`: E small GEMMs issued from a Python loop vs one GEMM of the same rows vs the loop
  replayed as a CUDA graph: the per-expert-GEMM overhead of eager MoE layers, host and device
  apart (docs/accuracy.md "Per-GEMM overhead of TE's multi-stream grouped GEMM").
"""

# ruff: noqa: B023  (each measured closure is timed inside the iteration that made it)
from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

SECTIONS = ("env", "gemm", "attention", "memory", "power", "recompute", "experts")


class Probe:
    """Holds the output files and the budget; every section appends its records here."""

    def __init__(self, out: Path, quick: bool, budget_s: float, smoke: bool = False) -> None:
        self.out = out
        self.quick = quick or smoke
        self.smoke = smoke  # CPU plumbing check with tiny shapes (tests only): no CUDA, no NVML
        self.dev = "cpu" if smoke else "cuda"
        self.deadline = time.monotonic() + budget_s
        self.records: dict[str, list[dict[str, Any]]] = {}
        out.mkdir(parents=True, exist_ok=True)
        self.txt = open(out / "probe.txt", "w")

    def n(self, size: int) -> int:
        """A dimension as measured: itself on the GPU, at most 64 in the CPU smoke check."""
        return min(size, 64) if self.smoke else size

    def sync(self, torch: Any) -> None:
        if not self.smoke:
            torch.cuda.synchronize()

    def empty(self, torch: Any) -> None:
        if not self.smoke:
            torch.cuda.empty_cache()

    def over_budget(self) -> bool:
        return time.monotonic() > self.deadline

    def add(self, section: str, **rec: Any) -> None:
        self.records.setdefault(section, []).append(rec)
        line = f"[{section}] " + " ".join(f"{k}={_fmt(v)}" for k, v in rec.items())
        print(line, flush=True)
        self.txt.write(line + "\n")
        self.txt.flush()

    def save(self) -> None:
        (self.out / "probe.json").write_text(json.dumps(self.records, indent=1, sort_keys=True))


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def timed(torch: Any, fn: Callable[[], Any], reps: int, warmup: int = 2, smoke: bool = False) -> float:
    """Median seconds of one call of `fn` over `reps` CUDA-event-timed calls after `warmup`
    (wall clock in the CPU smoke check)."""
    for _ in range(warmup):
        fn()
    if smoke:
        walls = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            walls.append(time.perf_counter() - t0)
        return statistics.median(walls)
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def reps_for(seconds_per_call: float, target_s: float = 0.25, lo: int = 3, hi: int = 50) -> int:
    return int(min(hi, max(lo, target_s / max(seconds_per_call, 1e-6))))


# ---------------------------------------------------------------------------------------- env


def section_env(p: Probe, torch: Any) -> None:
    if p.smoke:
        p.add("env", torch=torch.__version__, device="cpu (smoke check)")
        return
    props = torch.cuda.get_device_properties(0)
    rec: dict[str, Any] = {
        "gpu": props.name,
        "sms": props.multi_processor_count,
        "memory_gib": props.total_memory / 2**30,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
    }
    nv = _nvml()
    if nv is not None:
        pynvml, h = nv
        rec["power_limit_w"] = pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1e3
        rec["max_sm_clock_mhz"] = pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM)
        rec["max_mem_clock_mhz"] = pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_MEM)
        rec["driver"] = _text(pynvml.nvmlSystemGetDriverVersion())
    p.add("env", **rec)


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _nvml() -> tuple[Any, Any] | None:
    try:
        import pynvml  # nvidia-ml-py

        pynvml.nvmlInit()
        return pynvml, pynvml.nvmlDeviceGetHandleByIndex(0)
    except Exception:  # no NVML: the power section reports rates only
        return None


# --------------------------------------------------------------------------------------- gemm

# (label, M, N, K): M tokens, N output features, K input features, as the layer runs them
LAYER_GEMMS = [
    ("mpt760m fc1 24x2048", 49152, 6144, 1536),
    ("mpt1b fc1 12x2048", 24576, 8192, 2048),
    ("mpt1b qkv 12x2048", 24576, 6144, 2048),
    ("mpt7b fc1 6x2048", 12288, 16384, 4096),
    ("mpt7b wgrad fc1", 16384, 4096, 12288),
    ("mpt13b fc1 16x2048", 32768, 20480, 5120),
    ("llama70b fc1 tp1 2x8192", 16384, 57344, 8192),
    ("llama70b fc2 tp1 2x8192", 16384, 8192, 28672),
    ("skinny issue12", 2048, 128, 1024),
    ("skinny 4096x256x4096", 4096, 256, 4096),
    ("qwen3-30b expert fc1", 8192, 1536, 2048),
    ("qwen3-30b expert fc2", 8192, 2048, 768),
    ("gpt-oss expert fc1", 4096, 5760, 2880),
    ("dsv3 expert fc1 1k rows", 1024, 4096, 7168),
]
SQUARES = (1024, 2048, 4096, 8192, 16384)


def _gemm_bf16(p: Probe, torch: Any, m: int, n: int, k: int) -> Callable[[], Any]:
    a = torch.randn(m, k, device=p.dev, dtype=torch.bfloat16)
    b = torch.randn(k, n, device=p.dev, dtype=torch.bfloat16)
    return lambda: torch.mm(a, b)


def _gemm_fp8(p: Probe, torch: Any, m: int, n: int, k: int) -> Callable[[], Any]:
    a = torch.randn(m, k, device=p.dev).to(torch.float8_e4m3fn)
    bt = torch.randn(n, k, device=p.dev).to(torch.float8_e4m3fn)  # column-major B
    one = torch.ones((), device=p.dev, dtype=torch.float32)
    return lambda: torch._scaled_mm(a, bt.t(), one, one, out_dtype=torch.bfloat16)


def section_gemm(p: Probe, torch: Any) -> None:
    shapes = [(f"square {s}", s, s, s) for s in SQUARES] + LAYER_GEMMS
    if p.quick:
        shapes = shapes[:4] + LAYER_GEMMS[:6] + LAYER_GEMMS[8:11]
    for dtype, make in (("bf16", _gemm_bf16), ("fp8", _gemm_fp8)):
        for label, m, n, k in shapes:
            if p.over_budget():
                return
            try:
                m, n, k = p.n(m), p.n(n), p.n(k)
                fn = make(p, torch, m, n, k)
                t1 = timed(torch, fn, 3, warmup=2, smoke=p.smoke)
                t = timed(torch, fn, reps_for(t1), smoke=p.smoke)
                p.add(
                    "gemm", dtype=dtype, label=label, m=m, n=n, k=k, time_s=t, tflops=2 * m * n * k / t / 1e12
                )
            except Exception as exc:  # an unsupported dtype or shape: say so, go on
                p.add("gemm", dtype=dtype, label=label, m=m, n=n, k=k, error=repr(exc)[:200])
            p.empty(torch)


# ---------------------------------------------------------------------------------- attention


def section_attention(p: Probe, torch: Any) -> None:
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    seqs = (1024, 2048, 4096, 8192, 16384) if not p.quick else (2048, 8192)
    seqs = tuple(sorted({p.n(s) for s in seqs}))
    tokens = p.n(32768)  # batch = tokens / seq, so every point does the same linear work
    for backend_name, backend in (("fa2", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
        for head_dim, heads in ((128, 32), (64, 64)):
            for s in seqs:
                if p.over_budget():
                    return
                b = max(1, tokens // s)
                heads = p.n(heads) if not p.smoke else 2
                try:
                    q, k, v = (
                        torch.randn(
                            b, heads, s, head_dim, device=p.dev, dtype=torch.bfloat16, requires_grad=True
                        )
                        for _ in range(3)
                    )
                    g = torch.randn(b, heads, s, head_dim, device=p.dev, dtype=torch.bfloat16)

                    def fwd() -> Any:
                        with sdpa_kernel(backend):
                            return sdpa(q, k, v, is_causal=True)

                    def fwd_bwd() -> None:
                        with sdpa_kernel(backend):
                            o = sdpa(q, k, v, is_causal=True)
                        o.backward(g)

                    # causal FLOPs: half of 4·b·h·s²·d forward, 2.5x that forward+backward
                    f_fwd = 4 * b * heads * s * s * head_dim / 2
                    t_f = timed(torch, fwd, 5, smoke=p.smoke)
                    t_fb = timed(torch, fwd_bwd, 5, smoke=p.smoke)
                    p.add(
                        "attention",
                        impl=backend_name,
                        batch=b,
                        heads=heads,
                        head_dim=head_dim,
                        seq=s,
                        causal=True,
                        fwd_s=t_f,
                        fwd_tflops=f_fwd / t_f / 1e12,
                        fwd_bwd_s=t_fb,
                        fwd_bwd_tflops=3.5 * f_fwd / t_fb / 1e12,
                        bwd_tflops=2.5 * f_fwd / max(t_fb - t_f, 1e-9) / 1e12,
                    )
                except Exception as exc:
                    p.add(
                        "attention",
                        impl=backend_name,
                        heads=heads,
                        head_dim=head_dim,
                        seq=s,
                        error=repr(exc)[:200],
                    )
                p.empty(torch)


# ------------------------------------------------------------------------------------- memory


def section_memory(p: Probe, torch: Any) -> None:
    import torch.nn.functional as F

    sizes_mib = (16, 64, 256, 1024) if not p.quick else (64, 1024)
    for mib in sizes_mib:
        n = mib * 2**20 // 2 if not p.smoke else 4096 * mib  # bf16 elements
        x = torch.randn(n, device=p.dev, dtype=torch.bfloat16)
        y = torch.randn(n, device=p.dev, dtype=torch.bfloat16)
        xg = x.clone().requires_grad_(True)
        gy = torch.randn_like(x)

        def gelu_bwd() -> None:
            F.gelu(xg).backward(gy)

        cases: list[tuple[str, Callable[[], Any], float]] = [
            ("copy", lambda: x.clone(), 4.0),
            ("add", lambda: x + y, 6.0),
            ("gelu fwd", lambda: F.gelu(x), 4.0),
            ("gelu fwd+bwd", gelu_bwd, 4.0 + 6.0),
        ]
        for name, fn, bytes_per_elem in cases:
            if p.over_budget():
                return
            t = timed(torch, fn, 10, smoke=p.smoke)
            p.add("memory", op=name, mib=mib, time_s=t, GBps=bytes_per_elem * n / t / 1e9)
        p.empty(torch)
    # row-wise ops at transformer widths: LayerNorm, bias-grad column sums, cross-entropy
    rows = p.n(16384 if not p.quick else 8192)
    for width in sorted({p.n(w) for w in (1536, 2048, 4096, 8192)}):
        if p.over_budget():
            return
        x = torch.randn(rows, width, device=p.dev, dtype=torch.bfloat16, requires_grad=True)
        w = torch.ones(width, device=p.dev, dtype=torch.bfloat16, requires_grad=True)
        bias = torch.zeros(width, device=p.dev, dtype=torch.bfloat16, requires_grad=True)
        g = torch.randn(rows, width, device=p.dev, dtype=torch.bfloat16)

        def ln_fwd() -> Any:
            return F.layer_norm(x, (width,), w, bias)

        def ln_fwd_bwd() -> None:
            F.layer_norm(x, (width,), w, bias).backward(g)

        e = rows * width * 2
        t_f = timed(torch, ln_fwd, 10, smoke=p.smoke)
        t_fb = timed(torch, ln_fwd_bwd, 10, smoke=p.smoke)
        t_sum = timed(torch, lambda: g.sum(dim=0), 10, smoke=p.smoke)
        p.add("memory", op="layer_norm fwd", rows=rows, width=width, time_s=t_f, GBps=2 * e / t_f / 1e9)
        p.add("memory", op="layer_norm fwd+bwd", rows=rows, width=width, time_s=t_fb)
        p.add("memory", op="bias grad sum(dim=0)", rows=rows, width=width, time_s=t_sum, GBps=e / t_sum / 1e9)
        p.empty(torch)
    for vocab in (50368, 128256):
        if p.over_budget():
            return
        vocab = p.n(vocab) if not p.smoke else vocab // 1000
        t_rows = p.n(8192)
        logits = torch.randn(t_rows, vocab, device=p.dev, dtype=torch.bfloat16, requires_grad=True)
        target = torch.randint(0, vocab, (t_rows,), device=p.dev)

        def ce() -> Any:
            return F.cross_entropy(logits.float(), target)

        def ce_bwd() -> None:
            F.cross_entropy(logits.float(), target).backward()

        t_f = timed(torch, ce, 5, smoke=p.smoke)
        t_fb = timed(torch, ce_bwd, 5, smoke=p.smoke)
        p.add("memory", op="cross_entropy (fp32 upcast) fwd", rows=t_rows, vocab=vocab, time_s=t_f)
        p.add("memory", op="cross_entropy (fp32 upcast) fwd+bwd", rows=t_rows, vocab=vocab, time_s=t_fb)
        p.empty(torch)


# -------------------------------------------------------------------------------------- power


class Sampler:
    """NVML power (W) and SM clock (MHz) every ~20 ms on a background thread."""

    def __init__(self, nv: tuple[Any, Any] | None) -> None:
        self.nv = nv
        self.samples: list[tuple[float, float, float]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Sampler:
        if self.nv is not None:
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        assert self.nv is not None
        pynvml, h = self.nv
        while not self._stop.is_set():
            try:
                watts = pynvml.nvmlDeviceGetPowerUsage(h) / 1e3
                mhz = pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)
                self.samples.append((time.monotonic(), watts, float(mhz)))
            except Exception:
                pass
            time.sleep(0.02)

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def summary(self, skip_s: float) -> dict[str, float]:
        """Mean power and clock after the first `skip_s` seconds (the ramp)."""
        if not self.samples:
            return {}
        t0 = self.samples[0][0]
        kept = [s for s in self.samples if s[0] - t0 >= skip_s] or self.samples
        return {
            "power_w": statistics.mean(s[1] for s in kept),
            "sm_clock_mhz": statistics.mean(s[2] for s in kept),
            "samples": float(len(kept)),
        }


def section_power(p: Probe, torch: Any) -> None:
    import torch.nn.functional as F
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    if p.smoke:
        p.add("power", skipped="CPU smoke check: no CUDA events, no NVML")
        return
    nv = _nvml()
    run_s = 2.0 if p.quick else 4.0
    a = torch.randn(8192, 8192, device=p.dev, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=p.dev, dtype=torch.bfloat16)
    gemm_flops = 2 * 8192**3
    x = torch.randn(256 * 2**20, device=p.dev, dtype=torch.bfloat16)  # 512 MiB
    xg = x[: 64 * 2**20].clone().requires_grad_(True)
    gy = torch.randn_like(xg)
    q, k, v = (
        torch.randn(4, 32, 4096, 128, device=p.dev, dtype=torch.bfloat16, requires_grad=True)
        for _ in range(3)
    )
    go = torch.randn(4, 32, 4096, 128, device=p.dev, dtype=torch.bfloat16)
    # a GeLU pass of about half an 8192^3 GEMM's time: 1.4 ms at ~790 TFLOP/s on an H200 against
    # 768 Mi bf16 elements read and written (3 GiB) at ~4.3 TB/s, ~0.75 ms
    small = torch.randn(768 * 2**20, device=p.dev, dtype=torch.bfloat16)

    def gemm() -> None:
        torch.mm(a, b)

    def copy() -> None:
        x.clone()

    def gelu() -> None:
        F.gelu(xg).backward(gy)

    def attention() -> None:
        sdpa(q, k, v, is_causal=True).backward(go)

    def mix(gelu_passes: int) -> Callable[[], None]:
        def run() -> None:
            torch.mm(a, b)
            for _ in range(gelu_passes):
                F.gelu(small)

        return run

    loads: list[tuple[str, Callable[[], None]]] = [
        ("gemm 8192^3 bf16", gemm),
        ("copy 512 MiB", copy),
        ("gelu fwd+bwd 128 MiB", gelu),
        ("sdpa causal fwd+bwd 4x32x4096x128", attention),
        ("mix gemm + 1 gelu", mix(1)),
        ("mix gemm + 3 gelu", mix(3)),
        ("idle", lambda: time.sleep(0.01)),
    ]
    # the GEMM alone and inside each mix: its own speed there is the clock the mix holds
    t_gemm_alone = timed(torch, gemm, 20, smoke=p.smoke)
    p.add("power", load="gemm alone (burst, 20 reps)", gemm_tflops=gemm_flops / t_gemm_alone / 1e12)
    for name, fn in loads:
        if p.over_budget():
            return
        torch.cuda.synchronize()
        calls = 0
        with Sampler(nv) as sampler:
            t0 = time.monotonic()
            while time.monotonic() - t0 < run_s:
                fn()
                calls += 1
                if calls % 8 == 0:
                    torch.cuda.synchronize()
            torch.cuda.synchronize()
            wall = time.monotonic() - t0
        rec: dict[str, Any] = {"load": name, "calls": calls, "wall_s": wall, **sampler.summary(skip_s=0.5)}
        if name == "gemm 8192^3 bf16":
            rec["gemm_tflops_sustained"] = calls * gemm_flops / wall / 1e12
        if name.startswith("mix"):
            # time the GEMM inside the running mix (events around it, after the ramp)
            ts = []
            for _ in range(20):
                fn()
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                torch.mm(a, b)
                e.record()
                fn()
                e.synchronize()
                ts.append(s.elapsed_time(e) / 1e3)
            rec["gemm_tflops_in_mix"] = gemm_flops / statistics.median(ts) / 1e12
        p.add("power", **rec)


# ---------------------------------------------------------------------------------- recompute

# MPT widths: (name, d_model, heads, micro-batch at 2,048 tokens), as the H100 tables ran them
MPT_WIDTHS = (
    ("mpt-760m", 1536, 12, 24),
    ("mpt-1b", 2048, 16, 12),
    ("mpt-7b", 4096, 32, 6),
    ("mpt-13b", 5120, 40, 4),
)


def section_recompute(p: Probe, torch: Any) -> None:
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.utils.checkpoint import checkpoint

    class Block(nn.Module):
        def __init__(self, d: int, heads: int) -> None:
            super().__init__()
            self.heads = heads
            self.ln1 = nn.LayerNorm(d)
            self.qkv = nn.Linear(d, 3 * d)
            self.proj = nn.Linear(d, d)
            self.ln2 = nn.LayerNorm(d)
            self.up = nn.Linear(d, 4 * d)
            self.down = nn.Linear(4 * d, d)

        def forward(self, x: Any) -> Any:
            b, s, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
            q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(a.transpose(1, 2).reshape(b, s, d))
            return x + self.down(F.gelu(self.up(self.ln2(x))))

    layers = 2 if p.quick else 4
    for name, d, heads, mb in MPT_WIDTHS:
        if p.over_budget():
            return
        try:
            seq = p.n(2048)
            if p.smoke:
                d, heads, mb = 64, 4, 2
            blocks = nn.ModuleList(Block(d, heads) for _ in range(layers)).to(p.dev).to(torch.bfloat16)
            x = torch.randn(mb, seq, d, device=p.dev, dtype=torch.bfloat16, requires_grad=True)
            g = torch.randn(mb, seq, d, device=p.dev, dtype=torch.bfloat16)

            def fwd() -> Any:
                with torch.no_grad():
                    h = x
                    for blk in blocks:
                        h = blk(h)
                return h

            def fwd_bwd(ckpt: bool) -> Callable[[], None]:
                def run() -> None:
                    h = x
                    for blk in blocks:
                        h = checkpoint(blk, h, use_reentrant=False) if ckpt else blk(h)
                    h.backward(g)

                return run

            t_f = timed(torch, fwd, 5, smoke=p.smoke)
            t_fb = timed(torch, fwd_bwd(False), 5, smoke=p.smoke)
            t_ac = timed(torch, fwd_bwd(True), 5, smoke=p.smoke)
            p.add(
                "recompute",
                model=name,
                d_model=d,
                micro_batch=mb,
                layers=layers,
                fwd_s=t_f,
                fwd_bwd_s=t_fb,
                fwd_bwd_ckpt_s=t_ac,
                recompute_over_fwd=(t_ac - t_fb) / t_f,
                bwd_over_fwd=(t_fb - t_f) / t_f,
            )
        except Exception as exc:
            p.add("recompute", model=name, error=repr(exc)[:200])
        p.empty(torch)


# ------------------------------------------------------------------------------------ experts


def section_experts(p: Probe, torch: Any) -> None:
    combos = [
        (e, m, k, n) for e in (8, 16, 32) for m in (512, 2048, 8192) for (k, n) in ((2048, 768), (2880, 5760))
    ]
    if p.quick:
        combos = [c for c in combos if c[0] == 16]
    if p.smoke:
        combos = [(4, 32, 64, 48)]
    for e, m, k, n in combos:
        if p.over_budget():
            return
        try:
            xs = [torch.randn(m, k, device=p.dev, dtype=torch.bfloat16) for _ in range(e)]
            ws = [torch.randn(k, n, device=p.dev, dtype=torch.bfloat16) for _ in range(e)]
            big_x = torch.randn(e * m, k, device=p.dev, dtype=torch.bfloat16)
            outs = [torch.empty(m, n, device=p.dev, dtype=torch.bfloat16) for _ in range(e)]

            def loop() -> None:
                for i in range(e):
                    torch.mm(xs[i], ws[i], out=outs[i])

            t_loop = timed(torch, loop, 10, smoke=p.smoke)
            t_big = timed(torch, lambda: torch.mm(big_x, ws[0]), 10, smoke=p.smoke)
            t_graph = float("nan")
            if not p.smoke:
                graph = torch.cuda.CUDAGraph()
                stream = torch.cuda.Stream()
                stream.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(stream):
                    loop()
                torch.cuda.current_stream().wait_stream(stream)
                with torch.cuda.graph(graph):
                    loop()
                t_graph = timed(torch, graph.replay, 10)
            # host issue rate: the loop issued back to back with no sync, wall clock per call
            p.sync(torch)
            t0 = time.perf_counter()
            for _ in range(20):
                loop()
            host_s = (time.perf_counter() - t0) / 20
            p.sync(torch)
            p.add(
                "experts",
                experts=e,
                rows=m,
                k=k,
                n=n,
                loop_s=t_loop,
                one_gemm_s=t_big,
                graph_s=t_graph,
                host_issue_s=host_s,
                overhead_per_gemm_us=(t_loop - t_big) / e * 1e6,
                graph_overhead_per_gemm_us=(t_graph - t_big) / e * 1e6,
            )
        except Exception as exc:
            p.add("experts", experts=e, rows=m, k=k, n=n, error=repr(exc)[:200])
        p.empty(torch)


RUNNERS = {
    "env": section_env,
    "gemm": section_gemm,
    "attention": section_attention,
    "memory": section_memory,
    "power": section_power,
    "recompute": section_recompute,
    "experts": section_experts,
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="folder for probe.json and probe.txt")
    ap.add_argument("--quick", action="store_true", help="fewer shapes, shorter power runs")
    ap.add_argument("--sections", default=",".join(SECTIONS), help=f"comma list of {', '.join(SECTIONS)}")
    ap.add_argument("--budget-s", type=float, default=480.0, help="stop starting new measurements after this")
    ap.add_argument(
        "--cpu-smoke", action="store_true", help="check the plumbing on CPU with tiny shapes (tests)"
    )
    args = ap.parse_args(argv)
    wanted = [s.strip() for s in args.sections.split(",") if s.strip()]
    unknown = [s for s in wanted if s not in RUNNERS]
    if unknown:
        print(
            f"device_probe: unknown section(s) {unknown}; choose from {', '.join(SECTIONS)}", file=sys.stderr
        )
        return 2
    try:
        import torch
    except ImportError:
        print("device_probe: needs PyTorch (python3 with torch on the device machine)", file=sys.stderr)
        return 2
    if not args.cpu_smoke and not torch.cuda.is_available():
        print("device_probe: no CUDA device visible", file=sys.stderr)
        return 2
    probe = Probe(args.out, args.quick, args.budget_s, smoke=args.cpu_smoke)
    if not args.cpu_smoke:
        torch.backends.cuda.matmul.allow_tf32 = False
    for name in wanted:
        if probe.over_budget():
            probe.add("skipped", part=name, reason="budget")
            continue
        t0 = time.monotonic()
        try:
            RUNNERS[name](probe, torch)
        except Exception as exc:  # one broken section must not cost the others
            probe.add(name, error=repr(exc)[:300])
        probe.add("timing", part=name, seconds=time.monotonic() - t0)
        probe.save()
    probe.save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
