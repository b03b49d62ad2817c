"""`--set section.key=value`: change a scenario's file values from the command line (issue 15).

An override edits the scenario's TOML tables *before* they are validated, so it is checked
exactly like the file (same allowed keys, same types, same ranges); an error names the
override (`flag --set parallel.tp`). The value is read as a TOML literal (`4`, `2.5e12`,
`true`, `"full"`, `[1, 2]`); a bare word that is not one (`full`, `dgx-h100`) is taken as a
string, so `--set parallel.recompute=full` works without shell quoting.

`--unset section.key` (repeatable) removes a key (or a whole table, `--unset run`) from the
file's tables, so the key takes its default as if the file never set it; internally an unset is
an override whose value is `None` (a value TOML cannot write), and the Python API's
`overrides={"parallel.dp": None}` means the same. Unsets apply before the `--set`s; a key both
set and unset, an unknown key and a required key (no default) are refused by name
(`check_unsets`, called by the loader).
"""

from __future__ import annotations

import copy
import tomllib
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .errors import ConfigError

Override = tuple[str, Any]  # ("parallel.tp", 4)

MAX_OVERRIDE_CHARS = 10_000
UNSET = None  # the value of an override that removes its key (`--unset KEY`)


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


def parse_unset(text: str, flag: str = "--unset") -> Override:
    """`section.key` -> ("section.key", UNSET)."""
    if len(text) > MAX_OVERRIDE_CHARS:
        raise ConfigError(f"longer than {MAX_OVERRIDE_CHARS:,} characters", key=flag)
    key = text.strip()
    if "=" in key:
        raise ConfigError(f"expected a dotted key without a value (e.g. parallel.dp), got {text!r}", key=flag)
    parts = key.split(".")
    if not key or any(not p or not all(c.isalnum() or c in "_-" for c in p) for p in parts):
        raise ConfigError(f"{key!r} is not a dotted key like parallel.dp", key=flag)
    return key, UNSET


def override_label(key: str, value: Any, flag: str = "--set") -> str:
    """How an error names one override: `--set parallel.tp`, `--unset parallel.dp` (the Python
    API names both `overrides KEY`)."""
    return f"{'--unset' if flag == '--set' and value is UNSET else flag} {key}"


def check_conflicts(overrides: Iterable[Override], flag: str = "--set") -> None:
    """A key both set and unset is ambiguous: refuse it rather than let the order of the flags
    decide (`--unset run --set run.tokens=N` is fine: unsets apply first)."""
    sets = {key for key, value in overrides if value is not UNSET}
    for key, value in overrides:
        if value is UNSET and key in sets:
            raise ConfigError(
                "is both set and unset; give one (unset removes the file's value so the default "
                "applies, set gives a value)",
                key=override_label(key, value, flag),
            )


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
    `flag` names where the overrides came from in errors (`--set`, or the Python API's `overrides`).
    Unsets (value `UNSET`) apply first, removing the key if the file has it; then the sets."""
    out = copy.deepcopy(dict(data))
    overrides = list(overrides)
    check_conflicts(overrides, flag)
    for key, _ in (o for o in overrides if o[1] is UNSET):
        parts = key.split(".")
        holder: Any = out
        for part in parts[:-1]:
            holder = holder.get(part) if isinstance(holder, dict) else None
        if isinstance(holder, dict):
            holder.pop(parts[-1], None)
    for key, value in (o for o in overrides if o[1] is not UNSET):
        _parent_table(out, key, value, flag)[key.split(".")[-1]] = value
    return out


def _parent_table(data: dict[str, Any], key: str, value: object, flag: str) -> dict[str, Any]:
    """The table of `data` that holds `key`'s last part, created where missing; a value in the
    way is refused naming the override (`flag key=value`)."""
    parts = key.split(".")
    table: Any = data
    for i, part in enumerate(parts[:-1]):
        nxt = table.get(part)
        if nxt is None:
            nxt = table[part] = {}
        if not isinstance(nxt, dict):
            where = ".".join(parts[: i + 1])
            raise ConfigError(f"{where} is a value, not a table", key=override_label(key, value, flag))
        table = nxt
    return table  # type: ignore[no-any-return]


def attribute_error(err: ConfigError, overrides: Iterable[Override], flag: str = "--set") -> ConfigError:
    """The error of a scenario with overrides, blamed on the override when it is about its key
    (named `flag key`: `--set parallel.tp` on the command line, `overrides parallel.tp` in Python)."""
    overrides = list(overrides)
    if err.key:
        for key, value in overrides:
            if err.key == key or err.key.startswith(key + ".") or key.startswith(err.key + "."):
                message = err.message
                if value is UNSET and message.startswith("missing required"):
                    message = f"{message}: it has no default, so it cannot be unset (--set it instead)"
                return ConfigError(message, key=override_label(key, value, flag))
    if not overrides:
        return err
    with_sets = ", ".join(override_label(key, value, flag) for key, value in overrides)
    return ConfigError(f"{err.message} (with {with_sets})", key=err.key, file=err.file)


PROBE = "__unset_probe__"


def check_unsets(
    data: Mapping[str, Any],
    overrides: Iterable[Override],
    build: Callable[[dict[str, Any]], object],
    flag: str = "--set",
) -> None:
    """Refuse an unset of a key the loader does not know (`--unset parallel.dpp`), naming the
    flag and the closest allowed key. `data` is the scenario with the overrides applied; `build`
    the loader. The keys allowed in the unset key's table are asked of the loader itself: a probe
    key in that table raises its unknown-key error, which lists them. When the scenario fails
    before that table is checked, nothing is said here (loading it reports that error)."""
    from .names import did_you_mean

    for key, value in overrides:
        if value is not UNSET:
            continue
        parts = key.split(".")
        probe = copy.deepcopy(dict(data))
        _parent_table(probe, key, value, flag)[PROBE] = 1
        try:
            build(probe)
        except ConfigError as err:
            if err.key != ".".join((*parts[:-1], PROBE)) or err.allowed is None:
                continue
            if parts[-1] not in err.allowed:
                allowed = [a for a in err.allowed if a != PROBE]
                raise ConfigError(
                    f"unknown key{did_you_mean(parts[-1], allowed)}; allowed here: {', '.join(allowed)} "
                    "(docs/reference.md)",
                    key=override_label(key, value, flag),
                ) from None
