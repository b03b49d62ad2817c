"""The one progress bar (sweep, validate): a line on stderr redrawn in place, only on a terminal.

When the stream is not a terminal (a pipe, a file, CI logs, a test's captured stderr) the bar
stays silent, so logs hold only results, warnings and errors.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

BAR_WIDTH = 28  # characters of the bar itself
MIN_REDRAW_S = 0.1  # at most ten redraws a second


def is_terminal(stream: object) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty()) if callable(isatty) else False
    except (OSError, ValueError):  # a closed or detached stream
        return False


class Progress:
    """`label ████░░░ done/total  pct  rate unit/s ETA s`, redrawn in place on a terminal.

    `stream` defaults to sys.stderr; `enabled` defaults to "the stream is a terminal".
    """

    def __init__(
        self,
        total: int,
        label: str,
        *,
        unit: str = "items",
        stream: TextIO | None = None,
        enabled: bool | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.total = max(total, 0)
        self.done = 0
        self.label = label
        self.unit = unit
        self._stream = stream if stream is not None else sys.stderr
        on = is_terminal(self._stream) if enabled is None else enabled
        self.enabled = on and self.total > 0
        self._clock = clock
        self._start = clock()
        self._last = -MIN_REDRAW_S

    def update(self, n: int = 1) -> None:
        """`n` more items are done."""
        self.done += n
        now = self._clock()
        if self.enabled and now - self._last >= MIN_REDRAW_S:
            self._last = now
            self._draw(now)

    def line(self, now: float) -> str:
        """The bar as text (without the carriage return)."""
        frac = min(self.done / self.total, 1.0) if self.total else 1.0
        filled = int(BAR_WIDTH * frac)
        elapsed = now - self._start
        rate = self.done / elapsed if elapsed > 0 else 0.0
        eta = (self.total - self.done) / rate if rate > 0 else 0.0
        bar = "█" * filled + "░" * (BAR_WIDTH - filled)
        return f"{self.label} {bar} {self.done}/{self.total} {frac:4.0%} {rate:6.0f} {self.unit}/s ETA {eta:4.0f}s"

    def _draw(self, now: float) -> None:
        self._stream.write("\r" + self.line(now))
        self._stream.flush()

    def close(self) -> None:
        if self.enabled:
            self._draw(self._clock())
            self._stream.write("\n")
            self._stream.flush()
