"""What mfusim prints, made safe for any terminal (issue 18).

* Text from users' files (a scenario's `name`, a config.json's `_name_or_path`, a CSV's
  cells) may hold terminal escape sequences: every report goes through `ConsoleStream`,
  which shows C0/C1 control characters as visible escapes (`\\x1b`) instead of sending
  them to the terminal. Newlines, tabs and the carriage return of progress bars pass.
* A console that cannot show Unicode (ASCII, cp1252, `PYTHONIOENCODING=ascii`) gets ASCII
  stand-ins for the few symbols reports use (Ψ -> Psi, · -> ., — -> --, × -> x, █ -> #)
  and `\\u` escapes for anything else: the report is never lost to a UnicodeEncodeError.
* `one_line` / `shorten` keep error messages to one readable line: control characters
  escaped, very long values cut in the middle.
* `strict_json` is the one way to print JSON: non-finite numbers become `null`, and
  `allow_nan=False` guarantees the result is JSON (no `Infinity`, no `NaN`).
"""

from __future__ import annotations

import functools
import io
import json
import math
import re
from collections.abc import Mapping
from typing import Any, TextIO

MAX_VALUE_CHARS = 80
MAX_MESSAGE_CHARS = 400

# Stand-ins for the symbols reports print, for consoles whose encoding lacks them.
ASCII_FALLBACKS = {
    "Ψ": "Psi",
    "·": ".",
    "—": "--",
    "–": "-",
    "−": "-",
    "×": "x",
    "█": "#",
    "▏": "|",
    "░": "-",
    "▕": "|",
    "µ": "u",
    "…": "...",
    "≈": "~",
    "≤": "<=",
    "≥": ">=",
    "→": "->",
    "←": "<-",
    "±": "+/-",
    "²": "^2",
    "³": "^3",
    "‘": "'",
    "’": "'",
    "“": '"',
    "”": '"',
    "✓": "ok",
    "✗": "x",
}
_FALLBACK_TABLE = str.maketrans(ASCII_FALLBACKS)


def _is_control(ch: str) -> bool:
    o = ord(ch)
    return o < 0x20 or 0x7F <= o <= 0x9F or ch in "\u2028\u2029\u202a\u202b\u202c\u202d\u202e"


def _escape(ch: str) -> str:
    o = ord(ch)
    return f"\\x{o:02x}" if o <= 0xFF else f"\\u{o:04x}"


@functools.lru_cache(maxsize=8)
def _controls(keep: str) -> re.Pattern[str]:
    """One character class: the characters `_is_control` names, less those in `keep`."""
    candidates = map(chr, [*range(0xA0), *range(0x2028, 0x202F)])  # none above U+202E is one
    return re.compile(
        "[" + "".join(re.escape(c) for c in candidates if _is_control(c) and c not in keep) + "]"
    )


def escape_controls(text: str, keep: str = "\n\t\r") -> str:
    """`text` with every control character except those in `keep` shown as an escape."""
    return _controls(keep).sub(lambda m: _escape(m.group()), text)


def shorten(text: str, limit: int = MAX_VALUE_CHARS) -> str:
    """`text` cut in the middle to at most about `limit` characters."""
    if len(text) <= limit:
        return text
    keep = max(limit - 20, 10)
    head, tail = keep * 2 // 3, keep // 3
    return f"{text[:head]}...[{len(text) - head - tail} chars]...{text[-tail:]}"


def safe_repr(value: object, limit: int = MAX_VALUE_CHARS) -> str:
    """`repr(value)` for an error message: bounded, one line, never recursing forever."""
    try:
        text = repr(value)
    except RecursionError:
        text = f"<deeply nested {type(value).__name__}>"
    except Exception:  # a broken __repr__ must not hide the real error
        text = f"<{type(value).__name__}>"
    return shorten(escape_controls(text, keep=""), limit)


def one_line(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """A message as one printable line: line breaks joined, control characters escaped,
    and cut in the middle when longer than `limit`."""
    joined = escape_controls(" ".join(str(text).splitlines()), keep="")
    joined = _LONG_VALUE.sub(lambda m: shorten(m.group(0)), joined)
    return shorten(joined, limit)


# a quoted value or an unbroken run of characters longer than MAX_VALUE_CHARS; a quote opens a
# value only after a non-word character (the apostrophe of "Megatron-Core's" does not)
_N = MAX_VALUE_CHARS
_LONG_VALUE = re.compile(rf"(?<!\w)'[^']{{{_N},}}'|\"[^\"]{{{_N},}}\"|\S{{{_N},}}")


def to_ascii(text: str) -> str:
    return text.translate(_FALLBACK_TABLE).encode("ascii", "backslashreplace").decode("ascii")


def _encodes(text: str, encoding: str) -> bool:
    try:
        text.encode(encoding)
    except (UnicodeEncodeError, LookupError):
        return False
    return True


class ConsoleStream(io.TextIOBase):
    """A text stream in front of stdout/stderr: control characters escaped, and symbols the
    console's encoding lacks replaced (see the module docstring)."""

    def __init__(self, raw: TextIO, name: str = "output") -> None:
        super().__init__()
        self.raw = raw
        self.name = name
        self._encoding = getattr(raw, "encoding", None) or "utf-8"
        self._unicode = _encodes("Ψ·—×█", self._encoding)

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self._encoding

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        try:
            return bool(self.raw.isatty())
        except (OSError, ValueError, AttributeError):
            return False

    def fileno(self) -> int:
        return self.raw.fileno()

    def write(self, text: str) -> int:
        safe = escape_controls(text)
        if not self._unicode and not _encodes(safe, self._encoding):
            safe = safe.translate(_FALLBACK_TABLE)
            if not _encodes(safe, self._encoding):
                safe = safe.encode(self._encoding, "backslashreplace").decode(self._encoding)
        try:
            self.raw.write(safe)
        except BrokenPipeError:
            raise
        except (OSError, ValueError) as exc:  # ValueError: I/O operation on closed file
            raise StdStreamError(
                self.name, exc if isinstance(exc, OSError) else OSError(9, str(exc))
            ) from None
        return len(text)

    def flush(self) -> None:
        try:
            self.raw.flush()
        except BrokenPipeError:
            raise
        except (OSError, ValueError) as exc:
            raise StdStreamError(
                self.name, exc if isinstance(exc, OSError) else OSError(9, str(exc))
            ) from None


def sanitize_json(value: Any) -> Any:
    """`value` with every non-finite float replaced by None (JSON `null`), recursively;
    tuples become lists and numpy scalars plain numbers."""
    if isinstance(value, bool) or value is None or isinstance(value, str | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): sanitize_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [sanitize_json(v) for v in value]
    item = getattr(value, "item", None)  # numpy scalar
    if callable(item):
        return sanitize_json(item())
    return value


def strict_json(obj: Any, **kwargs: Any) -> str:
    """JSON text of `obj`: non-finite numbers as null, and nothing that is not JSON."""
    return json.dumps(sanitize_json(obj), allow_nan=False, **kwargs)


class _ClosedStream(io.TextIOBase):
    """Stands for a standard stream whose file descriptor was closed before mfusim started
    (Python then sets sys.stdout to None and print() silently drops everything)."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        raise StdStreamError(self.name, OSError(9, "the stream is closed"))


class StdStreamError(Exception):
    """Writing the report to standard output (or error) failed: closed, disk full, ..."""

    def __init__(self, name: str, cause: OSError) -> None:
        self.name = name
        self.cause = cause
        reason = "no space left on the device" if cause.errno == 28 else (cause.strerror or str(cause))
        super().__init__(f"cannot write to standard {name}: {reason}")


def install_console_streams(stdout: TextIO | None, stderr: TextIO | None) -> tuple[TextIO, TextIO]:
    """ConsoleStreams for the given standard streams (a closed one raises StdStreamError on
    first use)."""
    out = ConsoleStream(stdout, "output") if stdout is not None else _ClosedStream("output")
    err = ConsoleStream(stderr, "error") if stderr is not None else _ClosedStream("error")
    return out, err  # type: ignore[return-value]


def flush_stdout(stream: TextIO | None) -> None:
    """Flush standard output now, so a failure (closed, disk full) is reported as one line by
    the caller instead of as an 'Exception ignored' dump at interpreter exit."""
    if stream is None:
        return
    try:
        stream.flush()
    except StdStreamError:
        raise
    except OSError as exc:
        raise StdStreamError("output", exc) from None


def silence_stdout() -> None:
    """Point file descriptor 1 at /dev/null so the interpreter's final flush of whatever
    could not be written (a broken pipe, a full disk) neither fails nor prints."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)
    except OSError:
        pass
