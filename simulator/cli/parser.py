"""The `mfusim` argument parser: every command's flags (SPEC §3)."""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any

from ..errors import EXIT_USAGE
from ..names import canonical, did_you_mean
from ..specs import DTYPES, RECOMPUTE
from .common import MAX_SAMPLES, add_override_flags, plot_path, positive_float, positive_int, seed_flag

REFERENCE = "docs/reference.md"  # every key, --json field and CSV column (`mfusim schema`: the JSON Schema)
_INVALID_CHOICE = re.compile(r"invalid choice: '([^']*)' \(choose from (.*)\)")


def with_suggestion(message: str) -> str:
    """argparse's "invalid choice" message with the closest choice (`mfusim swep`: 'sweep')."""
    match = _INVALID_CHOICE.search(message)
    if match is None:
        return message
    choices = re.findall(r"'([^']*)'", match.group(2)) or [c.strip() for c in match.group(2).split(",")]
    return message + did_you_mean(match.group(1), choices)


def _chosen_subparser(parser: argparse.ArgumentParser, ns: argparse.Namespace) -> argparse.ArgumentParser:
    """The innermost (sub)command parser `ns` selected (`mfusim kernel gemm` -> its parser)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            chosen = action.choices.get(getattr(ns, action.dest, None) or "")
            if chosen is not None:
                return _chosen_subparser(chosen, ns)
    return parser


def flag_suggestion(extras: list[str], parser: argparse.ArgumentParser) -> str:
    """' (did you mean '--json'?)' for the first unknown flag close to one of `parser`'s flags."""
    flags = [s for a in parser._actions for s in a.option_strings if s.startswith("--")]
    for extra in extras:
        if extra.startswith("--"):
            hint = did_you_mean(extra.split("=", 1)[0], flags)
            if hint:
                return hint
    return ""


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad flag in one line with exit 2 (no usage dump)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        prog = self.prog
        sys.stderr.write(f"{prog}: error: {with_suggestion(message)}\n")
        raise SystemExit(EXIT_USAGE)

    def parse_args(self, args: Any = None, namespace: Any = None) -> argparse.Namespace:  # type: ignore[override]
        """As argparse, but an unknown flag is reported by the command that got it, with the
        closest flag it has (`mfusim run --jsn`: did you mean '--json'?)."""
        ns, extras = self.parse_known_args(args, namespace)
        if extras:
            target = _chosen_subparser(self, ns)
            target.error(f"unrecognized arguments: {' '.join(extras)}{flag_suggestion(extras, target)}")
        return ns


def _name_in(choices: tuple[str, ...]):
    """A choice flag that takes any case or a common alias (`--dtype bfloat16`, simulator/names.py)."""

    def parse(text: str) -> str:
        return canonical(text, choices) or text  # argparse then refuses what is not a choice

    return parse


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="mfusim",
        description="Distributed-training bottleneck simulator: MFU, HFU and where the time goes.",
        epilog=f"Every scenario key, --json field and CSV column: {REFERENCE} (shipped with mfusim; "
        "`mfusim schema` prints the scenario JSON Schema).",
    )
    from .. import __version__

    parser.add_argument("--version", action="version", version=f"mfusim {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    for add in (
        _add_run,
        _add_compare,
        _add_sweep,
        _add_mfu,
        _add_validate,
        _add_whatif,
        _add_topo,
        _add_kernel,
        _add_presets,
        _add_schema,
    ):
        add(sub)
    return parser


def _add_run(sub: Any) -> None:
    p = sub.add_parser("run", help="simulate one training step of a scenario (and plan the whole run)")
    p.add_argument(
        "scenario",
        nargs="?",
        help="scenario TOML or a shipped scenario's name (default: built-in GPT-3 175B on 1024 A100)",
    )
    p.add_argument("--json", action="store_true", help=f"print the JSON object only ({REFERENCE})")
    p.add_argument(
        "--trace",
        metavar="FILE.json",
        help="write a Chrome/Perfetto trace of the step (FILE.json, or FILE.json.gz gzip-compressed)",
    )
    p.add_argument(
        "--plot",
        metavar="FILE.png",
        type=plot_path("--plot"),
        help="write a picture of the step (Gantt + breakdown)",
    )
    p.add_argument(
        "--samples",
        type=positive_int("--samples", maximum=MAX_SAMPLES),
        default=1,
        metavar="N",
        help="simulate N steps with different seeds: mean, p50, p99 of the step time (the steps "
        "differ only with [variability] or [dataloader] jitter: docs/variability.md)",
    )
    p.add_argument("--seed", type=seed_flag("--seed"), default=None, help="override the scenario's seeds")
    p.add_argument(
        "--comm-model", choices=("topology", "flat"), default="topology", help="collective cost model"
    )
    add_override_flags(p)


def _add_compare(sub: Any) -> None:
    p = sub.add_parser("compare", help="several scenarios side by side (and their whole-run plans)")
    p.add_argument(
        "scenarios", nargs="+", metavar="SCENARIO", help="scenario TOMLs or shipped scenario names"
    )
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")
    p.add_argument("--plot", metavar="FILE.png", type=plot_path("--plot"), help="the breakdowns side by side")
    add_override_flags(p)


def _add_sweep(sub: Any) -> None:
    p = sub.add_parser("sweep", help="simulate every valid configuration of a scenario's [sweep] table")
    p.add_argument("scenario", help="scenario TOML (or a shipped scenario's name) with a [sweep] table")
    p.add_argument("--top", type=positive_int("--top"), default=10, help="rows in the ranked table")
    p.add_argument("--out", metavar="FILE.csv", help="write every configuration (CSV; .jsonl for JSON Lines)")
    p.add_argument(
        "--jobs",
        type=positive_int("--jobs"),
        default=None,
        help="local worker processes (default: one per CPU core); with --dask local, the LocalCluster's "
        "workers; not with --dask ADDRESS (that cluster's own workers run the sweep)",
    )
    p.add_argument("--resume", action="store_true", help="continue a sweep whose --out already holds rows")
    p.add_argument(
        "--rank-by",
        choices=("mfu", "tokens_per_s", "time_to_train", "cost"),
        default="mfu",
        help="time_to_train and cost need a [run] table (or --tokens; cost also --usd-per-gpu-hour)",
    )
    p.add_argument(
        "--export-best", metavar="FILE.toml", help="write the best configuration as a runnable scenario"
    )
    p.add_argument(
        "--export-top",
        nargs=2,
        metavar=("K", "DIR"),
        help="write the best K configurations as runnable scenarios into DIR",
    )
    p.add_argument("--plot", metavar="FILE.png", type=plot_path("--plot"), help="MFU of every configuration")
    p.add_argument(
        "--engine",
        choices=("auto", "analytic", "des"),
        default="auto",
        help="auto: closed form for all, discrete-event engine for the best --refine ones",
    )
    p.add_argument(
        "--refine",
        type=positive_int("--refine"),
        default=None,
        help="with --engine auto: how many of the best configurations the engine re-simulates (default 3)",
    )
    p.add_argument(
        "--dask",
        metavar="ADDRESS",
        help="run on an existing Dask scheduler (its workers; --jobs is refused), or 'local': start a "
        "LocalCluster of --jobs workers",
    )
    p.add_argument("--json", action="store_true", help="print the ranked results as JSON")
    add_override_flags(p)


def _add_mfu(sub: Any) -> None:
    p = sub.add_parser("mfu", help="the calculator: MFU/HFU of a measured run")
    p.add_argument(
        "--params", type=positive_float("--params"), help="parameter count (e.g. 7e9); then only 6Ψ applies"
    )
    p.add_argument("--model", help="a model preset name (exact FLOP counts apply)")
    p.add_argument("--seq-len", type=positive_int("--seq-len"), help="override the preset's sequence length")
    p.add_argument(
        "--tokens-per-s", type=positive_float("--tokens-per-s"), help="measured aggregate tokens/s"
    )
    p.add_argument(
        "--step-time-s",
        type=positive_float("--step-time-s"),
        help="measured step time (with --global-batch)",
    )
    p.add_argument(
        "--global-batch", type=positive_int("--global-batch"), help="sequences per step (with --step-time-s)"
    )
    p.add_argument("--gpus", type=positive_int("--gpus"), required=True, help="number of GPUs")
    p.add_argument("--gpu", required=True, help="GPU catalog name, e.g. a100-80gb")
    p.add_argument(
        "--dtype",
        type=_name_in(DTYPES),
        choices=DTYPES,
        default=None,
        help="the peak MFU divides by (default bf16; fp16 on a GPU without BF16 tensor cores)",
    )
    p.add_argument("--recompute", type=_name_in(RECOMPUTE), choices=RECOMPUTE, default="none")
    p.add_argument("--json", action="store_true")


def _add_validate(sub: Any) -> None:
    p = sub.add_parser("validate", help="predicted vs published measured runs")
    p.add_argument("runs", nargs="?", help="CSV of published runs (default: the shipped calibration set)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--out", metavar="FILE.csv", help="write the per-row table")
    p.add_argument("--gpu", help="only rows of this GPU label (substring match)")
    p.add_argument("--source", help="only rows whose source contains this text")
    p.add_argument(
        "--jobs",
        type=positive_int("--jobs"),
        default=1,
        help="worker processes simulating rows in parallel (same results, same order)",
    )


def _add_whatif(sub: Any) -> None:
    p = sub.add_parser("whatif", help="how much each lever would raise MFU")
    p.add_argument(
        "scenario",
        nargs="?",
        help="scenario TOML or a shipped scenario's name (default: the built-in default)",
    )
    p.add_argument("--json", action="store_true")
    add_override_flags(p, plan=False)


def _add_topo(sub: Any) -> None:
    p = sub.add_parser("topo", help="summarize a topology")
    p.add_argument("topology", help="a shipped topology name or a topology TOML")
    p.add_argument("--gpus", type=positive_int("--gpus"), default=None, help="cluster size for the summary")
    p.add_argument("--json", action="store_true")


def _add_kernel(sub: Any) -> None:
    from .kernel import add_parser

    add_parser(sub)


def _add_presets(sub: Any) -> None:
    p = sub.add_parser("presets", help="list shipped scenarios, model presets, GPUs and topologies")
    p.add_argument("--json", action="store_true")


def _add_schema(sub: Any) -> None:
    sub.add_parser(
        "schema",
        help="print the JSON Schema of scenario files (for editors; the keys are in docs/reference.md)",
    )
