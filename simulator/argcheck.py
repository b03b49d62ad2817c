"""Argument checks for the Python API (issue 18): the library refuses what the CLI refuses.

Each check raises `ValueError` naming the argument, what is allowed and what was given, so
`flops.mfu(..., num_gpus=-8)` fails loudly instead of returning a negative MFU.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable

from .console import safe_repr


def positive_int(name: str, value: object) -> int:
    """A positive integer (bool and integral floats refused: 2.0 GPUs is a caller's bug)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {safe_repr(value)}")
    return int(value)


def finite_number(name: str, value: object, *, minimum: float = 0.0, strict: bool = False) -> float:
    """A finite real number >= minimum (> minimum when `strict`)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a number, got {safe_repr(value)}")
    number = float(value)
    low_ok = number > minimum if strict else number >= minimum
    if not math.isfinite(number) or not low_ok:
        bound = f"> {minimum:g}" if strict else f">= {minimum:g}"
        raise ValueError(f"{name} must be a finite number {bound}, got {safe_repr(value)}")
    return number


def one_of(name: str, value: object, allowed: Iterable[str]) -> str:
    choices = tuple(allowed)
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(choices)}; got {safe_repr(value)}")
    return value
