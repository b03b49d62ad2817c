"""Names a user types: case-insensitive matching, common aliases, and "did you mean" (issue 17).

Every choice a user names in a file or on the command line (a key, a section, a model preset,
a GPU, a topology, a schedule, a dtype, a subcommand) goes through here:

- `canonical(value, choices)` accepts a name in any case, with `-`/`_`/spaces written either
  way (`llama-3-8b` = `llama3-8b`, `ZB_H1` = `zb-h1`) and the common aliases below
  (`bfloat16` -> `bf16`, `H100` -> `h100-sxm`); it returns the catalog's spelling, or None.
  Two choices that differ only in separators are never merged (then the exact name is needed).
- `did_you_mean(value, choices)` is the closest choice, by `difflib` ratio on the lower-cased
  names (Ratcliff/Obershelp, Python standard library), as " (did you mean 'x'?)", or "".

Aliases only say what a name *means*; the simulation is the same either way, so accepting
them is exact, not a guess.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

# Common alternative spellings -> the catalog's name. Only used when the target is a choice.
ALIASES: dict[str, str] = {
    # dtypes (PyTorch / NumPy spellings)
    "bfloat16": "bf16",
    "torch.bfloat16": "bf16",
    "float16": "fp16",
    "half": "fp16",
    "torch.float16": "fp16",
    "float8": "fp8",
    "e4m3": "fp8",
    "float8_e4m3fn": "fp8",
    "fp8e4m3": "fp8",
    "float32": "fp32",
    # GPUs (marketing names -> catalog entry, only where one entry fits)
    "h100": "h100-sxm",
    "h100sxm5": "h100-sxm",
    "h100-sxm5": "h100-sxm",
    "h100-80gb": "h100-sxm",
    "a100": "a100-80gb",
    "a100-sxm": "a100-80gb",
    "a100-80g": "a100-80gb",
    "a100-40g": "a100-40gb",
    "v100": "v100-32gb",
    # schedules (Megatron / paper spellings)
    "one-f-one-b": "1f1b",
    "pipedream-flush": "1f1b",
    "interleaved-1f1b": "interleaved",
    "virtual": "interleaved",
    "zero-bubble": "zb-h1",
    "zbh1": "zb-h1",
    # recompute
    "off": "none",
    "no": "none",
    "selective-recompute": "selective",
    "all": "full",
}

_SEPARATORS = str.maketrans("", "", "-_ ")


def _squash(name: str) -> str:
    return name.lower().translate(_SEPARATORS)


def canonical(value: object, choices: Iterable[str], aliases: dict[str, str] | None = None) -> str | None:
    """The choice `value` names (exact, any case, any `-`/`_` spelling, or an alias), else None."""
    if not isinstance(value, str):
        return None
    options = list(choices)
    if value in options:
        return value
    lowered = {c.lower(): c for c in options}
    if value.lower() in lowered:
        return lowered[value.lower()]
    table = ALIASES if aliases is None else aliases
    alias = table.get(value.lower()) or table.get(_squash(value))
    if alias is not None and alias in options:
        return alias
    squashed: dict[str, list[str]] = {}
    for c in options:
        squashed.setdefault(_squash(c), []).append(c)
    matches = squashed.get(_squash(value), [])
    return matches[0] if len(matches) == 1 else None


def closest(value: object, choices: Iterable[str]) -> str | None:
    """The choice most like `value` (difflib ratio >= 0.6 on lower-case names and on the aliases
    of the choices, which answer with their target), or None."""
    if not isinstance(value, str) or not value:
        return None
    options = list(choices)
    lowered = {c.lower(): c for c in options}
    # an alias stands for its target, so a slip on the short name ("h1000" for "h100") finds it
    targets = set(options)
    lowered.update({a: t for a, t in ALIASES.items() if t in targets and a not in lowered})
    hits = difflib.get_close_matches(value.lower(), list(lowered), n=1, cutoff=0.6)
    if not hits:  # a name written with other separators, e.g. "nic-gbps" for "nic_Gbps"
        squashed = {_squash(c): c for c in options}
        hits = [
            squashed[h] for h in difflib.get_close_matches(_squash(value), list(squashed), n=1, cutoff=0.6)
        ]
        return hits[0] if hits else None
    return lowered[hits[0]]


def did_you_mean(value: object, choices: Iterable[str]) -> str:
    """' (did you mean 'x'?)' for the closest choice, or '' when nothing is close."""
    best = closest(value, choices)
    return f" (did you mean {best!r}?)" if best is not None else ""
