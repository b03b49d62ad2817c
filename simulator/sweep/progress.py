"""A one-line progress bar on stderr."""

from __future__ import annotations

import time
from typing import TextIO


# ----------------------------------------------------------------------------- progress
class Progress:
    """A one-line progress bar on stderr (redrawn at most ten times a second)."""

    WIDTH = 28

    def __init__(self, total: int, stream: TextIO, label: str = "sweep", enabled: bool = True) -> None:
        self.total = max(total, 0)
        self.done = 0
        self._stream = stream
        self._label = label
        self._enabled = enabled and total > 0
        self._start = time.perf_counter()
        self._last = 0.0

    def update(self, n: int) -> None:
        self.done += n
        now = time.perf_counter()
        if self._enabled and now - self._last >= 0.1:
            self._last = now
            self._draw(now)

    def _draw(self, now: float) -> None:
        frac = self.done / self.total if self.total else 1.0
        filled = int(self.WIDTH * frac)
        elapsed = now - self._start
        rate = self.done / elapsed if elapsed > 0 else 0.0
        eta = (self.total - self.done) / rate if rate > 0 else 0.0
        bar = "█" * filled + "░" * (self.WIDTH - filled)
        self._stream.write(
            f"\r{self._label} {bar} {self.done}/{self.total} {frac:4.0%} {rate:6.0f} cfg/s ETA {eta:4.0f}s"
        )
        self._stream.flush()

    def close(self) -> None:
        if self._enabled:
            self._draw(time.perf_counter())
            self._stream.write("\n")
            self._stream.flush()
