"""`mfusim kernel gemm|attention|memory|allreduce|allgather|reducescatter|alltoall ...`: one
kernel as the kernel model (simulator/kernels.py) costs it.

    mfusim kernel gemm --gpu h100-sxm --m 8192 --n 8192 --k 8192 [--dtype bf16|fp16|fp8|...] [--batch 1] [--json]
    mfusim kernel attention --gpu a100-80gb --seq 8192 --heads 32 --head-dim 128 [--batch 1]
                            [--causal] [--impl fa2|fa3|cudnn|unfused] [--pass fwd|bwd|fwd+bwd] [--json]
    mfusim kernel memory --gpu h100-sxm --bytes 1e9 [--kind swiglu_bwd] [--json]
    mfusim kernel allreduce --topology dgx-h100 --gpus 8 --bytes 1e9 [--algo ring|nvls|...]
                            [--gpus-per-node 4] [--json]

JSON keys: `time_s`, and `tflops` (compute), `GBps` (memory), `algbw_GBps` and `busbw_GBps`
(collectives, nccl-tests conventions), plus the inputs and the model's choices. The kernel alone,
as a microbenchmark measures it: no training-job residuals (docs/calibration.md, level 1).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..errors import ConfigError
from ..kernels import ATTENTION_IMPLS, MEMORY_KINDS
from ..specs import (
    NO_BF16_ARCHS,
    check_attention_arch,
    check_attention_head_alignment,
    check_attention_head_dim,
    check_dtype_arch,
)
from .common import int_flag, positive_float, positive_int, print_json

COLLECTIVES = ("allreduce", "allgather", "reducescatter", "alltoall")
# = kernels.COLLECTIVE_ALGORITHMS
COLLECTIVE_ALGOS = ("ring", "tree", "nvls", "nvlstree", "pat", "hierarchical", "p2p")
KINDS = ("gemm", "attention", "memory", *COLLECTIVES)
MAX_DIM = 2**24  # one GEMM dimension / sequence length: beyond any real kernel


def add_parser(sub: Any) -> None:
    """`kernel` and its per-kind subcommands."""
    p = sub.add_parser(
        "kernel", help="one kernel (GEMM, attention, memory, collective) as the model costs it"
    )
    kinds = p.add_subparsers(dest="kind", metavar="KIND", parser_class=type(p))
    kinds.required = True

    g = kinds.add_parser("gemm", help="C[m,n] = A[m,k] B[k,n] (batched with --batch)")
    g.add_argument("--gpu", required=True, help="GPU catalog name, e.g. h100-sxm")
    g.add_argument("--m", type=int_flag("--m", 1, MAX_DIM), required=True)
    g.add_argument("--n", type=int_flag("--n", 1, MAX_DIM), required=True)
    g.add_argument("--k", type=int_flag("--k", 1, MAX_DIM), required=True)
    g.add_argument("--batch", type=positive_int("--batch", maximum=2**20), default=1)
    g.add_argument(
        "--dtype",
        choices=("bf16", "fp16", "fp8", "mxfp8", "nvfp4", "fp8_blockwise"),
        default=None,
        help="default bf16 (fp16 on Volta, which has no BF16 tensor cores); mxfp8 / nvfp4: block-scaled FP8 / FP4 (Blackwell), as a training step with that "
        "precision.dtype costs its GEMMs; fp8_blockwise: FP8 with 1x128 / 128x128 fp32 block scales "
        '(Hopper), as precision.dtype "fp8" with fp8_recipe "blockwise" costs them',
    )
    g.add_argument("--json", action="store_true")

    a = kinds.add_parser("attention", help="self-attention kernel (FlashAttention FLOP convention)")
    a.add_argument("--gpu", required=True, help="GPU catalog name, e.g. h100-sxm")
    a.add_argument("--seq", type=int_flag("--seq", 1, MAX_DIM), required=True)
    a.add_argument("--heads", type=positive_int("--heads", maximum=4096), required=True)
    a.add_argument("--head-dim", type=positive_int("--head-dim", maximum=1024), required=True)
    a.add_argument("--batch", type=positive_int("--batch", maximum=2**20), default=1)
    a.add_argument("--causal", action="store_true")
    a.add_argument(
        "--window",
        type=int_flag("--window", 1, MAX_DIM),
        default=None,
        help="causal sliding window of N keys per query, itself included (implies --causal; "
        "FlashAttention window_size = (N - 1, 0)); N >= --seq is full causal attention",
    )
    a.add_argument("--impl", choices=ATTENTION_IMPLS, default=None)
    a.add_argument("--pass", dest="pass_", choices=("fwd", "bwd", "fwd+bwd"), default="fwd")
    a.add_argument("--json", action="store_true")

    m = kinds.add_parser("memory", help="a streaming (memory-bound) kernel moving --bytes in total")
    m.add_argument("--gpu", required=True, help="GPU catalog name, e.g. h100-sxm")
    m.add_argument("--bytes", type=positive_float("--bytes"), required=True, help="bytes moved in total")
    m.add_argument(
        "--kind",
        dest="memory_kind",
        choices=MEMORY_KINDS,
        default="copy",
        help="kernel kind: copy (streaming) or a framework kernel with its own measured bandwidth",
    )
    m.add_argument("--json", action="store_true")

    for kind in COLLECTIVES:
        c = kinds.add_parser(kind, help=f"NCCL {kind} (nccl-tests size convention)")
        c.add_argument(
            "--topology", required=True, help="a shipped topology name or a topology TOML (it sets the GPU)"
        )
        c.add_argument(
            "--gpus", type=int_flag("--gpus", 2, 1_000_000), required=True, help="ranks in the collective"
        )
        c.add_argument(
            "--bytes",
            type=positive_float("--bytes"),
            required=True,
            help="message size in bytes, as nccl-tests counts it (e.g. 1e9)",
        )
        # `--gpu NAME` as on gemm/attention/memory: named here so that it gets a hint, not
        # argparse's "ambiguous option: --gpu could match --gpus, --gpus-per-node"
        c.add_argument("--gpu", default=None, help=argparse.SUPPRESS)
        c.add_argument(
            "--algo",
            choices=COLLECTIVE_ALGOS,
            default=None,
            help="the algorithm NCCL_ALGO would force (default: NCCL's fastest choice)",
        )
        c.add_argument(
            "--gpus-per-node",
            type=int_flag("--gpus-per-node", 1, 1_000_000),
            default=None,
            help="ranks on only this many GPUs of each node (default: whole nodes)",
        )
        c.add_argument("--json", action="store_true")


def _gpu(name: str) -> Any:
    from ..loading import gpu_by_name

    return gpu_by_name(name, key="--gpu")


def kernel_result(args: argparse.Namespace) -> dict[str, Any]:
    from .. import kernels as K

    kind = args.kind
    if kind == "gemm":
        gpu = _gpu(args.gpu)
        if args.dtype == "fp8_blockwise" and K.architecture(gpu.name) != "hopper":
            raise ConfigError(
                f"fp8_blockwise GEMMs run natively on Hopper only, not {gpu.name} (Blackwell runs the "
                "recipe as MXFP8: --dtype mxfp8)",
                key="--dtype",
            )
        if args.dtype is None:
            args.dtype = "fp16" if K.architecture(gpu.name) in NO_BF16_ARCHS else "bf16"
        check_dtype_arch(args.dtype, K.architecture(gpu.name), gpu.name, "--dtype")
        try:
            gpu.peak_flop_per_s(args.dtype)  # refuses a dtype the GPU lacks
        except ConfigError as exc:
            raise ConfigError(exc.message, key="--dtype") from None
        plan = K.gemm_plan(gpu, args.dtype, args.m, args.n, args.k, args.batch)
        flops = 2.0 * args.batch * args.m * args.n * args.k
        return {
            "kernel": "gemm",
            "gpu": gpu.name,
            "dtype": args.dtype,
            "m": args.m,
            "n": args.n,
            "k": args.k,
            "batch": args.batch,
            "time_s": plan.time_s,
            "tflops": flops / plan.time_s / 1e12,
            "flops": flops,
            "tile": f"{plan.tile_m}x{plan.tile_n}",
            "split_k": plan.split_k if plan.split_k else "stream-k",
            "waves": plan.waves,
        }
    if kind == "attention":
        gpu = _gpu(args.gpu)
        impl = args.impl or K.default_attention(gpu)
        check_attention_arch(impl, K.architecture(gpu.name), gpu.name, "--impl")
        check_attention_head_dim(impl, args.head_dim, "--head-dim")
        check_attention_head_alignment(impl, (args.head_dim,), "--head-dim")
        causal = args.causal or args.window is not None
        shape = dict(batch=args.batch, seq=args.seq, heads=args.heads, head_dim=args.head_dim, causal=causal)
        window = {} if args.window is None else {"window": args.window}
        if window and impl not in K.LOCAL_ATTENTION_IMPLS:
            raise ConfigError(
                f"{impl} takes no sliding window: one of {', '.join(K.LOCAL_ATTENTION_IMPLS)}", key="--impl"
            )
        t = K.attention_time_s(gpu, **shape, impl=impl, pass_=args.pass_, **window)
        flops = K.attention_flops(**shape, pass_=args.pass_, **window)
        return {
            "kernel": "attention",
            "gpu": gpu.name,
            "impl": impl,
            "pass": args.pass_,
            **shape,
            **window,
            "head_dim": args.head_dim,
            "time_s": t,
            "tflops": flops / t / 1e12,
            "flops": flops,
        }
    if kind == "memory":
        gpu = _gpu(args.gpu)
        t = K.memory_time_s(gpu, args.bytes, kind=args.memory_kind)
        return {
            "kernel": "memory",
            "gpu": gpu.name,
            "kind": args.memory_kind,
            "bytes": args.bytes,
            "time_s": t,
            "GBps": args.bytes / t / 1e9,
        }
    if getattr(args, "gpu", None) is not None:
        raise ConfigError(
            "a collective takes its GPU from --topology, not --gpu (e.g. --topology dgx-h100 --gpus 8); "
            "the shipped topologies: mfusim presets",
            key="--gpu",
        )
    try:
        per_node = getattr(args, "gpus_per_node", None)
        res = K.collective(
            args.topology, kind, args.gpus, args.bytes, getattr(args, "algo", None), gpus_per_node=per_node
        )
    except ConfigError as err:
        if err.key in ("topology", "cluster.topology"):  # name the flag the user typed
            raise ConfigError(err.message, key="--topology") from None
        raise
    return {
        "kernel": kind,
        "topology": args.topology,
        "gpus": args.gpus,
        **({"gpus_per_node": per_node} if per_node is not None else {}),
        "bytes": args.bytes,
        "time_s": res.time_s,
        "algbw_GBps": res.algbw_bytes_per_s / 1e9,
        "busbw_GBps": res.busbw_bytes_per_s / 1e9,
        "algorithm": res.algorithm,
        "bottleneck": res.bottleneck,
    }


def _text(r: dict[str, Any]) -> str:
    kind = r["kernel"]
    if kind == "gemm":
        head = f"gemm {r['batch']}x{r['m']}x{r['n']}x{r['k']} {r['dtype']} on {r['gpu']}"
        detail = (
            f"{r['tflops']:.1f} TFLOP/s  (tile {r['tile']}, split-k {r['split_k']}, {r['waves']} wave(s))"
        )
    elif kind == "attention":
        head = (
            f"attention {r['impl']} {r['pass']} b{r['batch']} s{r['seq']} h{r['heads']} d{r['head_dim']}"
            f"{' causal' if r['causal'] else ''}{' window ' + str(r['window']) if 'window' in r else ''}"
            f" on {r['gpu']}"
        )
        detail = f"{r['tflops']:.1f} TFLOP/s (FlashAttention FLOP convention)"
    elif kind == "memory":
        head = f"memory {r['kind']} {r['bytes']:.4g} B on {r['gpu']}"
        detail = f"{r['GBps']:.1f} GB/s"
    else:
        head = f"{kind} {r['bytes']:.4g} B on {r['gpus']} GPUs of {r['topology']}"
        if "gpus_per_node" in r:
            head += f" ({r['gpus_per_node']} per node)"
        detail = (
            f"algbw {r['algbw_GBps']:.1f} GB/s, busbw {r['busbw_GBps']:.1f} GB/s "
            f"({r['algorithm']}, bottleneck {r['bottleneck'] or '-'})"
        )
    return f"{head}\n  time {r['time_s'] * 1e6:,.2f} us  {detail}"


def cmd_kernel(args: argparse.Namespace) -> int:
    result = kernel_result(args)
    if getattr(args, "json", False):
        print_json(result)
    else:
        sys.stdout.write(_text(result) + "\n")
    return 0
