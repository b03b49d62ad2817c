"""`mfusim mfu`: the calculator, MFU/HFU of a measured run (SPEC §3)."""

from __future__ import annotations

import argparse
import math
import sys
from typing import TYPE_CHECKING

from ..errors import ConfigError
from ..units import TERA
from .common import print_json

if TYPE_CHECKING:
    from ..specs import ModelSpec


def cmd_mfu(args: argparse.Namespace) -> int:
    from ..kernels import architecture
    from ..loading import gpu_by_name
    from ..specs import NO_BF16_ARCHS, check_dtype_arch

    gpu = gpu_by_name(args.gpu, key="--gpu")
    arch = architecture(gpu.name)
    if args.dtype is None:  # bf16, or fp16 on a GPU without BF16 tensor cores (as scenarios do)
        args.dtype = "fp16" if arch in NO_BF16_ARCHS else "bf16"
    check_dtype_arch(args.dtype, arch, gpu.name, "--dtype")
    try:
        peak = gpu.peak_flop_per_s(args.dtype)
    except ConfigError as err:
        raise ConfigError(err.message, key="--dtype") from None
    if (args.params is None) == (args.model is None):
        raise ConfigError("give exactly one of --params or --model", key="--params")
    if args.seq_len is not None and args.model is None and args.step_time_s is None:
        # 6Ψ per token has no sequence length: it would be dropped without a word
        raise ConfigError(
            "sets the sequence length of --model, or with --params turns --step-time-s into tokens/s",
            key="--seq-len",
        )
    if args.global_batch is not None and args.step_time_s is None:
        raise ConfigError(
            "goes with --step-time-s (tokens/s = global batch x sequence length / step time); "
            "--tokens-per-s needs no batch",
            key="--global-batch",
        )
    model = _model(args)
    tokens_per_s = _tokens_per_s(args, model)
    result: dict[str, object] = {
        "gpu": gpu.name,
        "dtype": args.dtype,
        "num_gpus": args.gpus,
        "peak_flop_per_s_per_gpu": peak,
        "tokens_per_s": tokens_per_s,
    }
    result.update(_utilization(args, model, tokens_per_s, peak))
    numbers = [v for v in result.values() if isinstance(v, float)]
    if not all(math.isfinite(v) for v in numbers):
        raise ConfigError(
            "the numbers overflow (infinite MFU): --params and --tokens-per-s are far beyond any real run",
            key="--tokens-per-s",
        )
    result["model_tflops_per_gpu"] = float(result["mfu"]) * peak / TERA  # type: ignore[arg-type]
    if float(result["mfu"]) > 1.0:  # type: ignore[arg-type]
        sys.stderr.write(
            f"mfusim mfu: warning: MFU {float(result['mfu']):.0%} exceeds 100% of peak: "  # type: ignore[arg-type]
            "check --tokens-per-s (aggregate over all GPUs), --gpus and --gpu\n"
        )
    if args.json:
        from .. import __version__

        print_json({**result, "mfusim_version": __version__})
        return 0
    _print_text(args, gpu.name, peak, tokens_per_s, model, result)
    return 0


def _model(args: argparse.Namespace) -> ModelSpec | None:
    """The --model preset (with --seq-len applied), or None for --params."""
    from dataclasses import replace

    from ..loading import model_preset

    if args.model is None:
        return None
    try:
        model = model_preset(args.model)
    except ConfigError as err:
        raise ConfigError(err.message, key="--model") from None
    return replace(model, seq_len=args.seq_len) if args.seq_len else model


def _tokens_per_s(args: argparse.Namespace, model: ModelSpec | None) -> float:
    """--tokens-per-s as given, or global batch x sequence length / step time."""
    if args.tokens_per_s is not None:
        if args.step_time_s is not None:
            raise ConfigError(
                "give --tokens-per-s or --step-time-s with --global-batch, not both", key="--tokens-per-s"
            )
        return args.tokens_per_s
    if args.step_time_s is None or args.global_batch is None:
        raise ConfigError("give --tokens-per-s, or --step-time-s and --global-batch", key="--tokens-per-s")
    seq = model.seq_len if model else args.seq_len
    if not seq:
        raise ConfigError("--step-time-s with --params needs --seq-len", key="--seq-len")
    return args.global_batch * seq / args.step_time_s


def _utilization(
    args: argparse.Namespace, model: ModelSpec | None, tokens_per_s: float, peak: float
) -> dict[str, object]:
    """MFU/HFU under each FLOP convention flops.py knows for what was given."""
    from .. import flops

    if model is None:
        per_token = 6.0 * args.params
        mfu = flops.mfu(per_token, tokens_per_s, args.gpus, peak)
        hfu = mfu * (8.0 / 6.0 if args.recompute == "full" else 1.0)
        out: dict[str, object] = {
            "params": args.params,
            "flops_per_token_6psi": per_token,
            "mfu": mfu,
            "mfu_6psi": mfu,
            "hfu": hfu,
        }
        if args.recompute == "selective":
            out["note"] = "selective recompute needs a model (--model) for its extra FLOPs; hfu = mfu here"
        return out
    conventions = {
        "6psi": flops.flops_per_token_6psi(model),
        "6psi_attn": flops.flops_per_token_6psi_attn(model),
        "exact": flops.flops_per_token_exact(model),
    }
    hw_per_token = (
        conventions["exact"] + flops.recompute_flops_per_sequence(model, args.recompute) / model.seq_len
    )
    return {
        "model": model.name,
        "params": flops.total_params(model),
        "non_embedding_params": flops.non_embedding_params(model),
        "seq_len": model.seq_len,
        "flops_per_token": {k: v for k, v in conventions.items()},
        "mfu": flops.mfu(conventions["exact"], tokens_per_s, args.gpus, peak),
        "mfu_6psi": flops.mfu(conventions["6psi"], tokens_per_s, args.gpus, peak),
        "mfu_6psi_attn": flops.mfu(conventions["6psi_attn"], tokens_per_s, args.gpus, peak),
        "hfu": flops.mfu(hw_per_token, tokens_per_s, args.gpus, peak),
    }


def _print_text(
    args: argparse.Namespace,
    gpu_name: str,
    peak: float,
    tokens_per_s: float,
    model: ModelSpec | None,
    result: dict[str, object],
) -> None:
    print(
        f"{args.gpus} x {gpu_name} ({peak / TERA:.0f} TFLOP/s dense {args.dtype}), {tokens_per_s:,.0f} tokens/s"
    )
    if model is None:
        print(f"  FLOPs/token (6Ψ, Ψ={args.params:.3g}): {result['flops_per_token_6psi']:.3e}")
        print(f"  MFU (6Ψ)           {result['mfu']:.1%}")
        print(f"  HFU                {result['hfu']:.1%}   (recompute={args.recompute})")
        return
    fpt = result["flops_per_token"]
    assert isinstance(fpt, dict)
    print(
        f"  model {model.name}: Ψ(non-embedding) = {result['non_embedding_params']:.3e}, s = {model.seq_len}"
    )
    print(f"  MFU, 6Ψ            {result['mfu_6psi']:.1%}   ({fpt['6psi']:.3e} FLOP/token)")
    print(f"  MFU, 6Ψ + 12·L·h·s {result['mfu_6psi_attn']:.1%}   ({fpt['6psi_attn']:.3e} FLOP/token)")
    print(f"  MFU, exact         {result['mfu']:.1%}   ({fpt['exact']:.3e} FLOP/token)")
    print(f"  HFU, exact         {result['hfu']:.1%}   (recompute={args.recompute})")
