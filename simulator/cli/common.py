"""What every command shares: the default scenario, flag parsers, output helpers.

Only the commands (simulator/cli/) import this module; the library never does.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Iterable
from pathlib import Path

from ..console import one_line as _one_line
from ..console import strict_json
from ..errors import ConfigError

DEFAULT_SCENARIO = "gpt3-175b-1024-a100"
MAX_SAMPLES = 10_000  # `run --samples`: each sample is a full step simulation

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


# ----------------------------------------------------------------------------- flag parsers
def _finite_float(flag: str, zero_ok: bool, requirement: str):
    """An argparse type: a finite number > 0 (>= 0 when `zero_ok`)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} must be a number, got {text!r}") from None
        if not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok):
            raise argparse.ArgumentTypeError(f"{flag} must be {requirement}, got {text!r}")
        return value

    return parse


def positive_float(flag: str):
    return _finite_float(flag, False, "a positive finite number")


def check_suffix(path: str, flag: str, suffixes: tuple[str, ...]) -> None:
    """Refuse an output name whose extension says a format mfusim does not write (`.parquet`
    was silently written as CSV, a `--trace` JSON as `t.png`). A character device such as
    /dev/null takes any format (simulator.outputs writes it directly)."""
    import stat

    from ..outputs import refuse_dash

    refuse_dash(path, flag)
    try:
        if stat.S_ISCHR(Path(path).stat().st_mode):
            return
    except (OSError, ValueError):
        pass
    name = Path(path).name.lower()
    if not name.endswith(suffixes):
        suffix = Path(path).suffix.lower()
        raise ConfigError(
            f"cannot write {suffix or 'a file without an extension'} ({path}): give a name ending in "
            + " or ".join(suffixes),
            key=flag,
        )


TRACE_SUFFIXES = (".json", ".json.gz")  # Chrome/Perfetto JSON; gzip-compressed on .gz


def nonnegative_float(flag: str):
    return _finite_float(flag, True, "a finite number >= 0")


def int_flag(flag: str, minimum: int = 1, maximum: int = 10**7):
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


def positive_int(flag: str, maximum: int = 10**7):
    return int_flag(flag, 1, maximum)


def plot_path(flag: str):
    def parse(text: str) -> str:
        if text == "-":
            raise argparse.ArgumentTypeError(
                f"{flag} cannot be '-' (standard output carries the report): give a picture file name"
            )
        suffix = Path(text).suffix.lower().lstrip(".")
        if suffix not in PLOT_SUFFIXES:
            raise argparse.ArgumentTypeError(
                f"{flag} must be a picture file ({', '.join('.' + s for s in PLOT_SUFFIXES[:4])}, ...), got {text!r}"
            )
        if suffix == "pgf" and (tex := _missing_tex()):
            # matplotlib's PGF backend runs TeX to measure text: without it the save failed after
            # the simulation as "internal error: RuntimeError: 'xelatex' not found"
            raise argparse.ArgumentTypeError(
                f"{flag} {text}: a .pgf picture needs {tex} (matplotlib's PGF backend), not found; "
                "give .pdf or .svg"
            )
        return text

    return parse


def _missing_tex() -> str:
    """The TeX program matplotlib's PGF backend would run, when it is not installed ('' if it is)."""
    import shutil

    from matplotlib import rcParams

    tex = str(rcParams["pgf.texsystem"])
    return "" if shutil.which(tex) else tex


def seed_flag(flag: str):
    return int_flag(flag, 0, 2**63 - 1)


# ----------------------------------------------------------------------------- helpers
def scenario_path(arg: str | None) -> Path:
    """A scenario argument (a file or a shipped scenario's name), or the built-in default."""
    from ..loading import resolve_scenario_path
    from ..resources import data_dir

    if arg is None:
        return data_dir("scenarios") / f"{DEFAULT_SCENARIO}.toml"
    return resolve_scenario_path(arg)


def scenario_label(arg: str | None) -> str:
    """A scenario argument as the user named it: the path as given, or a shipped scenario's
    name (`llama3-70b-512-h100.toml (shipped scenario)`, as the errors name it: cli/app.py
    shipped_label), never the installed copy's site-packages path."""
    from ..loading import path_kind

    if arg is not None and path_kind(Path(arg)) != "missing":
        return arg
    return f"{scenario_path(arg).name} (shipped scenario)"


# `run --tokens N --usd-per-gpu-hour P` are shorthands for these `--set` keys
PLAN_FLAGS = {"tokens": "run.tokens", "usd_per_gpu_hour": "run.usd_per_gpu_hour"}
MEMORY_FLAGS = {"memory_headroom": "memory.headroom_gib"}


def add_override_flags(p: argparse.ArgumentParser, plan: bool = True) -> None:
    """`--set KEY=VALUE` (repeatable) and, with `plan`, `--tokens` / `--usd-per-gpu-hour`."""
    p.add_argument(
        "--set",
        dest="overrides",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help="change a scenario value, validated like the file (e.g. parallel.tp=4); repeatable",
    )
    p.add_argument(
        "--unset",
        dest="unsets",
        metavar="KEY",
        action="append",
        default=[],
        help="remove a scenario key (or table, e.g. run) so its default applies, as if the file never "
        "set it (e.g. parallel.dp); repeatable; applied before --set; unknown and required keys are "
        "refused",
    )
    if plan:
        p.add_argument(
            "--tokens",
            type=positive_float("--tokens"),
            help="plan the whole run: training tokens (same as --set run.tokens=N)",
        )
        p.add_argument(
            "--usd-per-gpu-hour",
            type=positive_float("--usd-per-gpu-hour"),
            help="price per GPU-hour for the plan's cost (same as --set run.usd_per_gpu_hour=P)",
        )
    p.add_argument(
        "--memory-headroom",
        metavar="GIB",
        type=nonnegative_float("--memory-headroom"),
        help="GPU memory to keep free: a configuration fits when its peak is within the GPU's memory "
        "minus this (default 0; same as --set memory.headroom_gib=GIB)",
    )


def scenario_overrides(args: argparse.Namespace) -> list[tuple[str, object]]:
    """The `--unset` and `--set` overrides of a command line, then its plan flags."""
    from ..overrides import parse_override, parse_unset

    out = [parse_unset(text) for text in getattr(args, "unsets", None) or []]
    out += [parse_override(text) for text in getattr(args, "overrides", None) or []]
    for attr, key in {**PLAN_FLAGS, **MEMORY_FLAGS}.items():
        value = getattr(args, attr, None)
        if value is not None:
            flag = "--" + attr.replace("_", "-")
            if any(k == key and v is not None for k, v in out):
                # `--set run.tokens=1e9 --tokens 2e9`: the shorthand silently won
                raise ConfigError(f"sets {key}, which --set {key} also sets; give one", key=flag)
            out.append((key, value))
    return out


def override_texts(args: argparse.Namespace) -> list[str]:
    """The command line's overrides as the user gave them, for the report's header: the scenario's
    name is its file's, the values simulated are the file's with these applied."""
    out = [f"--unset {text.strip()}" for text in getattr(args, "unsets", None) or []]
    for text in getattr(args, "overrides", None) or []:
        key, _, raw = text.partition("=")
        out.append(f"{key.strip()}={raw.strip()}")
    for attr in {**PLAN_FLAGS, **MEMORY_FLAGS}:
        value = getattr(args, attr, None)
        if value is not None:
            out.append(f"--{attr.replace('_', '-')} {value:g}")
    return out


def flag_names(err: ConfigError) -> ConfigError:
    """An override error about a plan flag, named by that flag (`--tokens`, not `--set run.tokens`)."""
    key, message = err.key, err.message
    for attr, set_key in {**PLAN_FLAGS, **MEMORY_FLAGS}.items():
        flag = "--" + attr.replace("_", "-")
        if key == f"--set {set_key}":
            key = flag
        message = message.replace(f"--set {set_key}", flag)
    return ConfigError(message, key=key, file=err.file)


def load_cli_scenario(arg: str | None, args: argparse.Namespace):
    """The command's scenario: a file or a shipped name (or the default), with its overrides."""
    from ..loading import load_scenario
    from ..overrides import override_label

    path = scenario_path(arg)
    overrides = scenario_overrides(args)
    for key, value in overrides:
        label = override_label(key, value)
        if key == "sweep" or key.startswith("sweep."):
            # only `mfusim sweep` reads [sweep]: run, compare and whatif dropped it silently
            name = key.partition(".")[2]
            own = "cluster.num_gpus" if name == "num_gpus" else f"parallel.{name}"
            raise ConfigError(
                "only `mfusim sweep` reads [sweep]; this command simulates the scenario's own values"
                + (f" (--set {own}=VALUE)" if name else ""),
                key=label,
            )
        if (key == "run" or key.startswith("run.")) and not hasattr(args, "tokens"):
            # a command without the plan flags (whatif) plans no run: the value was dropped silently
            raise ConfigError(
                "this command does not plan the whole run ([run] is read by run, compare and sweep)",
                key=label,
            )
    try:
        scn = load_scenario(path, overrides)
    except ConfigError as err:
        raise flag_names(err) from None
    check_fabric(scn, path)
    return scn


def scenario_error(err: ConfigError, path: Path) -> ConfigError:
    """A refusal found after loading (building the network, costing the step), attributed to the
    scenario file; a topology key the network names ('inter_node.tiers') is the scenario's
    [cluster] key that sets or overrides it."""
    if err.key and err.key.startswith(("inter_node.", "intra_node.")):
        err = err.with_key_prefix("cluster")
    return err.with_file(str(path))


def check_fabric(scn, path: Path) -> None:
    """Refuse, naming the file and key, a cluster whose switch tiers cannot connect its GPUs
    (found when the network is built, after loading: it depends on num_gpus)."""
    from ..network.fabric import Fabric

    try:
        Fabric(scn.topology, scn.num_gpus).check_buildable()
    except ConfigError as err:
        raise scenario_error(err, path) from None


def check_writable(path: str, flag: str, inputs: Iterable[str | Path] = ()) -> Path:
    """Fail early, with one line, when an output path cannot be written or is one of the
    command's `inputs` (simulator.outputs.check_output). Creates nothing."""
    from ..outputs import check_output

    return check_output(path, flag, inputs)


def scenario_inputs(path: str | Path | None) -> list[Path]:
    """The files a scenario reads (itself, its topology file, its config.json): outputs must
    never be one of them."""
    from ..loading import scenario_input_files

    return scenario_input_files(path) if path is not None else []


def print_json(obj: object) -> None:
    """Strict JSON on stdout: non-finite numbers as null, never `Infinity` or `NaN`."""
    sys.stdout.write(strict_json(obj, indent=2) + "\n")


one_line = _one_line
