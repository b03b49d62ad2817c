"""`--set section.key=value`: change a scenario's file values from the command line (issue 15).

An override edits the scenario's TOML tables *before* they are validated, so it is checked
exactly like the file (same allowed keys, same types, same ranges); an error names the
override (`flag --set parallel.tp`). The value is read as a TOML literal (`4`, `2.5e12`,
`true`, `"full"`, `[1, 2]`); a bare word that is not one (`full`, `dgx-h100`) is taken as a
string, so `--set parallel.recompute=full` works without shell quoting.
"""

from __future__ import annotations

import copy
import tomllib
from collections.abc import Iterable, Mapping
from typing import Any

from .errors import ConfigError

Override = tuple[str, Any]  # ("parallel.tp", 4)

MAX_OVERRIDE_CHARS = 10_000


def parse_override(text: str, flag: str = "--set") -> Override:
    """`section.key=value` -> ("section.key", value)."""
    if len(text) > MAX_OVERRIDE_CHARS:
        raise ConfigError(f"longer than {MAX_OVERRIDE_CHARS:,} characters", key=flag)
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"expected KEY=VALUE (e.g. parallel.tp=4), got {text!r}", key=flag)
    parts = key.split(".")
    if any(not p or not all(c.isalnum() or c in "_-" for c in p) for p in parts):
        raise ConfigError(f"{key!r} is not a dotted key like parallel.tp", key=flag)
    return key, parse_value(raw.strip())


def parse_value(raw: str) -> Any:
    """A TOML literal, or the text itself when it is not one (a bare word)."""
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except (tomllib.TOMLDecodeError, RecursionError):
        return raw


def apply_overrides(
    data: Mapping[str, Any], overrides: Iterable[Override], flag: str = "--set"
) -> dict[str, Any]:
    """A copy of a scenario's tables with each override applied (tables created as needed);
    `flag` names where the overrides came from in errors (`--set`, or the Python API's `overrides`)."""
    out = copy.deepcopy(dict(data))
    for key, value in overrides:
        parts = key.split(".")
        table: Any = out
        for i, part in enumerate(parts[:-1]):
            nxt = table.get(part)
            if nxt is None:
                nxt = table[part] = {}
            if not isinstance(nxt, dict):
                where = ".".join(parts[: i + 1])
                raise ConfigError(f"{where} is a value, not a table", key=f"{flag} {key}")
            table = nxt
        table[parts[-1]] = value
    return out


def attribute_error(err: ConfigError, overrides: Iterable[Override], flag: str = "--set") -> ConfigError:
    """The error of a scenario with overrides, blamed on the override when it is about its key
    (named `flag key`: `--set parallel.tp` on the command line, `overrides parallel.tp` in Python)."""
    keys = [key for key, _ in overrides]
    if err.key:
        for key in keys:
            if err.key == key or err.key.startswith(key + ".") or key.startswith(err.key + "."):
                return ConfigError(err.message, key=f"{flag} {key}")
    if not keys:
        return err
    with_sets = ", ".join(f"{flag} {key}" for key in keys)
    return ConfigError(f"{err.message} (with {with_sets})", key=err.key, file=err.file)
