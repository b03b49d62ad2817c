"""What every command shares: the default scenario, flag parsers, output helpers.

Only the commands (simulator/cli/) import this module; the library never does.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

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
def positive_float(flag: str):
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} must be a number, got {text!r}") from None
        if not math.isfinite(value) or value <= 0:
            raise argparse.ArgumentTypeError(f"{flag} must be a positive finite number, got {text!r}")
        return value

    return parse


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
        suffix = Path(text).suffix.lower().lstrip(".")
        if suffix not in PLOT_SUFFIXES:
            raise argparse.ArgumentTypeError(
                f"{flag} must be a picture file ({', '.join('.' + s for s in PLOT_SUFFIXES[:4])}, ...), got {text!r}"
            )
        return text

    return parse


def seed_flag(flag: str):
    return int_flag(flag, 0, 2**63 - 1)


# ----------------------------------------------------------------------------- helpers
def scenario_path(arg: str | None) -> Path:
    """A scenario argument, or the built-in default when absent."""
    from ..resources import data_dir

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


def one_line(text: str) -> str:
    """A message as one printable line: newlines and control characters escaped."""
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in " ".join(str(text).splitlines()))
