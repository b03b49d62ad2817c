"""`mfusim` command line (SPEC §3). Errors a user can cause exit 2 with one line on stderr.

Each command lives in its own function `cmd_<name>(args) -> int`; heavy modules are
imported inside it so `mfusim --help` stays fast.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path

from .errors import EXIT_USAGE, ConfigError
from .units import TERA, bytes_to_gib

DEFAULT_SCENARIO = "gpt3-175b-1024-a100"
MAX_SAMPLES = 10_000  # `run --samples`: each sample is a full step simulation


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad flag in one line with exit 2 (no usage dump)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        prog = self.prog
        sys.stderr.write(f"{prog}: error: {message}\n")
        raise SystemExit(EXIT_USAGE)


def _positive_float(flag: str):
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} must be a number, got {text!r}") from None
        if not math.isfinite(value) or value <= 0:
            raise argparse.ArgumentTypeError(f"{flag} must be a positive finite number, got {text!r}")
        return value

    return parse


def _int_flag(flag: str, minimum: int = 1, maximum: int = 10**7):
    """An integer flag in [minimum, maximum]; anything else is a one-line usage error."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} must be an integer, got {text!r}") from None
        if not minimum <= value <= maximum:
            raise argparse.ArgumentTypeError(
                f"{flag} must be an integer from {minimum} to {maximum:,}, got {text!r}"
            )
        return value

    return parse


def _positive_int(flag: str, maximum: int = 10**7):
    return _int_flag(flag, 1, maximum)


# What matplotlib's savefig can write (its backends' formats); the suffix picks the format.
PLOT_SUFFIXES = (
    "png",
    "pdf",
    "svg",
    "svgz",
    "jpg",
    "jpeg",
    "eps",
    "ps",
    "tif",
    "tiff",
    "webp",
    "gif",
    "pgf",
    "raw",
    "rgba",
    "avif",
)


def _plot_path(flag: str):
    def parse(text: str) -> str:
        suffix = Path(text).suffix.lower().lstrip(".")
        if suffix not in PLOT_SUFFIXES:
            raise argparse.ArgumentTypeError(
                f"{flag} must be a picture file ({', '.join('.' + s for s in PLOT_SUFFIXES[:4])}, ...), got {text!r}"
            )
        return text

    return parse


def _seed(flag: str):
    return _int_flag(flag, 0, 2**63 - 1)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="mfusim",
        description="Distributed-training bottleneck simulator: MFU, HFU and where the time goes.",
    )
    from . import __version__

    parser.add_argument("--version", action="version", version=f"mfusim {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    p = sub.add_parser("run", help="simulate one training step of a scenario")
    p.add_argument("scenario", nargs="?", help="scenario TOML (default: built-in GPT-3 175B on 1024 A100)")
    p.add_argument("--json", action="store_true", help="print the SPEC §4 JSON object only")
    p.add_argument("--trace", metavar="FILE.json", help="write a Chrome/Perfetto trace of the step")
    p.add_argument(
        "--plot",
        metavar="FILE.png",
        type=_plot_path("--plot"),
        help="write a picture of the step (Gantt + breakdown)",
    )
    p.add_argument(
        "--samples",
        type=_positive_int("--samples", maximum=MAX_SAMPLES),
        default=1,
        help="simulate N steps with different seeds",
    )
    p.add_argument("--seed", type=_seed("--seed"), default=None, help="override the scenario's seeds")
    p.add_argument(
        "--comm-model", choices=("topology", "flat"), default="topology", help="collective cost model"
    )

    p = sub.add_parser("sweep", help="simulate every valid configuration of a scenario's [sweep] table")
    p.add_argument("scenario", help="scenario TOML with a [sweep] table")
    p.add_argument("--top", type=_positive_int("--top"), default=10, help="rows in the ranked table")
    p.add_argument("--out", metavar="FILE.csv", help="write every configuration (CSV; .jsonl for JSON Lines)")
    p.add_argument(
        "--jobs",
        type=_positive_int("--jobs"),
        default=None,
        help="local worker processes (default: one per CPU core)",
    )
    p.add_argument("--resume", action="store_true", help="continue a sweep whose --out already holds rows")
    p.add_argument("--rank-by", choices=("mfu", "tokens_per_s"), default="mfu")
    p.add_argument("--plot", metavar="FILE.png", type=_plot_path("--plot"), help="MFU of every configuration")
    p.add_argument(
        "--engine",
        choices=("auto", "analytic", "des"),
        default="auto",
        help="auto: closed form for all, discrete-event engine for the best --refine ones",
    )
    p.add_argument(
        "--refine",
        type=_positive_int("--refine"),
        default=3,
        help="with --engine auto: how many of the best configurations the engine re-simulates",
    )
    p.add_argument("--dask", metavar="ADDRESS", help="run on an existing Dask scheduler ('local' starts one)")
    p.add_argument("--json", action="store_true", help="print the ranked results as JSON")

    p = sub.add_parser("mfu", help="the calculator: MFU/HFU of a measured run")
    p.add_argument(
        "--params", type=_positive_float("--params"), help="parameter count (e.g. 7e9); then only 6Ψ applies"
    )
    p.add_argument("--model", help="a model preset name (exact FLOP counts apply)")
    p.add_argument("--seq-len", type=_positive_int("--seq-len"), help="override the preset's sequence length")
    p.add_argument(
        "--tokens-per-s", type=_positive_float("--tokens-per-s"), help="measured aggregate tokens/s"
    )
    p.add_argument(
        "--step-time-s",
        type=_positive_float("--step-time-s"),
        help="measured step time (with --global-batch)",
    )
    p.add_argument(
        "--global-batch", type=_positive_int("--global-batch"), help="sequences per step (with --step-time-s)"
    )
    p.add_argument("--gpus", type=_positive_int("--gpus"), required=True, help="number of GPUs")
    p.add_argument("--gpu", required=True, help="GPU catalog name, e.g. a100-80gb")
    p.add_argument("--dtype", choices=("bf16", "fp16", "fp8"), default="bf16")
    p.add_argument("--recompute", choices=("none", "selective", "full"), default="none")
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("validate", help="predicted vs published measured runs")
    p.add_argument("runs", nargs="?", help="CSV of published runs (default: the shipped calibration set)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--out", metavar="FILE.csv", help="write the per-row table")
    p.add_argument("--gpu", help="only rows of this GPU label (substring match)")
    p.add_argument("--source", help="only rows whose source contains this text")

    p = sub.add_parser("whatif", help="how much each lever would raise MFU")
    p.add_argument("scenario", nargs="?", help="scenario TOML (default: the built-in default)")
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("topo", help="summarize a topology")
    p.add_argument("topology", help="a shipped topology name or a topology TOML")
    p.add_argument("--gpus", type=_positive_int("--gpus"), default=None, help="cluster size for the summary")
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("presets", help="list model presets, GPUs and topologies")
    p.add_argument("--json", action="store_true")
    return parser


# ----------------------------------------------------------------------------- helpers
def scenario_path(arg: str | None) -> Path:
    """A scenario argument, or the built-in default when absent."""
    from .resources import data_dir

    if arg is None:
        return data_dir("scenarios") / f"{DEFAULT_SCENARIO}.toml"
    return Path(arg)


def check_writable(path: str, flag: str) -> Path:
    """Fail early, with one line, when an output path cannot be written."""
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"{path} is a directory; give a file name", key=flag)
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.exists():
        raise ConfigError(f"directory {parent} does not exist", key=flag)
    try:
        with open(p, "a"):
            pass
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc.strerror or exc}", key=flag) from None
    return p


def print_json(obj: object) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, sort_keys=False) + "\n")


# ----------------------------------------------------------------------------- commands
def cmd_presets(args: argparse.Namespace) -> int:
    from . import flops
    from .loading import load_gpu_catalog, load_model_presets, model_preset
    from .resources import topology_names

    gpus = load_gpu_catalog()
    models = {name: model_preset(name) for name in load_model_presets()}
    topologies = topology_names()
    if args.json:
        print_json(
            {
                "models": {
                    n: {
                        "params": flops.total_params(m),
                        "layers": m.layers,
                        "hidden": m.hidden,
                        "seq_len": m.seq_len,
                    }
                    for n, m in models.items()
                },
                "gpus": {
                    n: {
                        "peak_bf16_tflops": g.peak_bf16_flop_per_s / TERA,
                        "peak_fp8_tflops": g.peak_fp8_flop_per_s / TERA,
                        "hbm_gib": bytes_to_gib(g.hbm_bytes),
                        "hbm_TBps": g.hbm_bandwidth_bytes_per_s / TERA,
                    }
                    for n, g in gpus.items()
                },
                "topologies": topologies,
            }
        )
        return 0
    print("Model presets:")
    print(f"  {'name':<14} {'params':>9} {'layers':>6} {'hidden':>6} {'heads':>5} {'kv':>4} {'seq':>6}")
    for n, m in models.items():
        print(
            f"  {n:<14} {flops.total_params(m) / 1e9:>8.1f}B {m.layers:>6} {m.hidden:>6} "
            f"{m.heads:>5} {m.num_kv_heads:>4} {m.seq_len:>6}" + ("  MoE" if m.is_moe else "")
        )
    print("\nGPUs (dense peak TFLOP/s):")
    print(f"  {'name':<11} {'bf16':>7} {'fp16':>7} {'fp8':>7} {'HBM GiB':>8} {'HBM TB/s':>9}")
    for n, g in gpus.items():
        fp8 = f"{g.peak_fp8_flop_per_s / TERA:>7.0f}" if g.peak_fp8_flop_per_s else f"{'-':>7}"
        print(
            f"  {n:<11} {g.peak_bf16_flop_per_s / TERA:>7.0f} {g.peak_fp16_flop_per_s / TERA:>7.0f} {fp8} "
            f"{bytes_to_gib(g.hbm_bytes):>8.0f} {g.hbm_bandwidth_bytes_per_s / TERA:>9.2f}"
        )
    print("\nTopologies:")
    for t in topologies:
        print(f"  {t}")
    return 0


def cmd_mfu(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from . import flops
    from .loading import gpu_by_name, model_preset

    gpu = gpu_by_name(args.gpu, key="--gpu")
    try:
        peak = gpu.peak_flop_per_s(args.dtype)
    except ConfigError as err:
        raise ConfigError(err.message, key="--dtype") from None
    if (args.params is None) == (args.model is None):
        raise ConfigError("give exactly one of --params or --model", key="--params")
    model = None
    if args.model is not None:
        try:
            model = model_preset(args.model)
        except ConfigError as err:
            raise ConfigError(err.message, key="--model") from None
        if args.seq_len:
            model = replace(model, seq_len=args.seq_len)
    if args.tokens_per_s is not None:
        if args.step_time_s is not None:
            raise ConfigError(
                "give --tokens-per-s or --step-time-s with --global-batch, not both", key="--tokens-per-s"
            )
        tokens_per_s = args.tokens_per_s
    else:
        if args.step_time_s is None or args.global_batch is None:
            raise ConfigError(
                "give --tokens-per-s, or --step-time-s and --global-batch", key="--tokens-per-s"
            )
        seq = model.seq_len if model else args.seq_len
        if not seq:
            raise ConfigError("--step-time-s with --params needs --seq-len", key="--seq-len")
        tokens_per_s = args.global_batch * seq / args.step_time_s
    result: dict[str, object] = {
        "gpu": gpu.name,
        "dtype": args.dtype,
        "num_gpus": args.gpus,
        "peak_flop_per_s_per_gpu": peak,
        "tokens_per_s": tokens_per_s,
    }
    if model is None:
        per_token = 6.0 * args.params
        mfu = flops.mfu(per_token, tokens_per_s, args.gpus, peak)
        hfu = mfu * (8.0 / 6.0 if args.recompute == "full" else 1.0)
        result.update(params=args.params, flops_per_token_6psi=per_token, mfu=mfu, mfu_6psi=mfu, hfu=hfu)
        if args.recompute == "selective":
            result["note"] = "selective recompute needs a model (--model) for its extra FLOPs; hfu = mfu here"
    else:
        conventions = {
            "6psi": flops.flops_per_token_6psi(model),
            "6psi_attn": flops.flops_per_token_6psi_attn(model),
            "exact": flops.flops_per_token_exact(model),
        }
        hw_per_token = (
            conventions["exact"] + flops.recompute_flops_per_sequence(model, args.recompute) / model.seq_len
        )
        result.update(
            model=args.model,
            params=flops.total_params(model),
            non_embedding_params=flops.non_embedding_params(model),
            seq_len=model.seq_len,
            flops_per_token={k: v for k, v in conventions.items()},
            mfu=flops.mfu(conventions["exact"], tokens_per_s, args.gpus, peak),
            mfu_6psi=flops.mfu(conventions["6psi"], tokens_per_s, args.gpus, peak),
            mfu_6psi_attn=flops.mfu(conventions["6psi_attn"], tokens_per_s, args.gpus, peak),
            hfu=flops.mfu(hw_per_token, tokens_per_s, args.gpus, peak),
        )
    result["model_tflops_per_gpu"] = float(result["mfu"]) * peak / TERA  # type: ignore[arg-type]
    if float(result["mfu"]) > 1.0:  # type: ignore[arg-type]
        sys.stderr.write(
            f"mfusim mfu: warning: MFU {float(result['mfu']):.0%} exceeds 100% of peak: "  # type: ignore[arg-type]
            "check --tokens-per-s (aggregate over all GPUs), --gpus and --gpu\n"
        )
    if args.json:
        print_json(result)
        return 0
    print(
        f"{args.gpus} x {gpu.name} ({peak / TERA:.0f} TFLOP/s dense {args.dtype}), {tokens_per_s:,.0f} tokens/s"
    )
    if model is None:
        print(f"  FLOPs/token (6Ψ, Ψ={args.params:.3g}): {result['flops_per_token_6psi']:.3e}")
        print(f"  MFU (6Ψ)           {result['mfu']:.1%}")
        print(f"  HFU                {result['hfu']:.1%}   (recompute={args.recompute})")
    else:
        fpt = result["flops_per_token"]
        assert isinstance(fpt, dict)
        print(
            f"  model {args.model}: Ψ(non-embedding) = {result['non_embedding_params']:.3e}, s = {model.seq_len}"
        )
        print(f"  MFU, 6Ψ            {result['mfu_6psi']:.1%}   ({fpt['6psi']:.3e} FLOP/token)")
        print(f"  MFU, 6Ψ + 12·L·h·s {result['mfu_6psi_attn']:.1%}   ({fpt['6psi_attn']:.3e} FLOP/token)")
        print(f"  MFU, exact         {result['mfu']:.1%}   ({fpt['exact']:.3e} FLOP/token)")
        print(f"  HFU, exact         {result['hfu']:.1%}   (recompute={args.recompute})")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from .run import cmd_run as run_command

    return run_command(args)


def cmd_sweep(args: argparse.Namespace) -> int:
    from .sweep import cmd_sweep as sweep_command

    return sweep_command(args)


def cmd_validate(args: argparse.Namespace) -> int:
    from .validate import cmd_validate as validate_command

    return validate_command(args)


def cmd_whatif(args: argparse.Namespace) -> int:
    from .whatif import cmd_whatif as whatif_command

    return whatif_command(args)


def cmd_topo(args: argparse.Namespace) -> int:
    from .network import cmd_topo as topo_command

    return topo_command(args)


COMMANDS = {
    "run": cmd_run,
    "sweep": cmd_sweep,
    "mfu": cmd_mfu,
    "validate": cmd_validate,
    "whatif": cmd_whatif,
    "topo": cmd_topo,
    "presets": cmd_presets,
}


def one_line(text: str) -> str:
    """A message as one printable line: newlines and control characters escaped."""
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in " ".join(str(text).splitlines()))


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    try:
        return COMMANDS[args.command](args)
    except ConfigError as err:
        sys.stderr.write(one_line(f"mfusim {args.command}: error: {err}") + "\n")
        return EXIT_USAGE
    except KeyboardInterrupt:
        sys.stderr.write("mfusim: interrupted\n")
        return 130
    except BrokenPipeError:
        return 0
    except OSError as exc:
        # The environment refused a file operation (permissions, disk full, a path that
        # vanished): the user's to fix, so one line and exit 2 like any bad input.
        where = f"{exc.filename}: " if exc.filename else ""
        sys.stderr.write(one_line(f"mfusim {args.command}: error: {where}{exc.strerror or exc}") + "\n")
        return EXIT_USAGE
    except Exception as exc:  # a bug in mfusim, not in the user's input
        if os.environ.get("MFUSIM_DEBUG"):
            traceback.print_exc()
        sys.stderr.write(
            one_line(
                f"mfusim: internal error: {type(exc).__name__}: {exc} -- this is a bug in mfusim; "
                "please report it with the command line and input files (MFUSIM_DEBUG=1 shows the traceback)"
            )
            + "\n"
        )
        return 1
