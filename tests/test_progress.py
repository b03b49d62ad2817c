"""The one progress bar (simulator/progress.py): drawn on a terminal, silent elsewhere."""

from __future__ import annotations

import io

from simulator.progress import BAR_WIDTH, Progress, is_terminal


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_silent_when_the_stream_is_not_a_terminal() -> None:
    out = io.StringIO()
    bar = Progress(10, "sweep", stream=out)
    for _ in range(10):
        bar.update()
    bar.close()
    assert not is_terminal(out) and out.getvalue() == ""


def test_draws_in_place_on_a_terminal_with_rate_and_eta() -> None:
    out, clock = Terminal(), Clock()
    bar = Progress(8, "sweep", unit="cfg", stream=out, clock=clock)
    clock.now = 2.0
    bar.update(4)  # 4 items in 2 s: 2 cfg/s, 4 left -> ETA 2 s
    text = out.getvalue()
    assert text.startswith("\rsweep ") and "4/8" in text and " 50%" in text
    assert "█" * (BAR_WIDTH // 2) + "░" * (BAR_WIDTH // 2) in text
    assert "2 cfg/s" in text and "ETA    2s" in text
    bar.close()
    assert out.getvalue().endswith("4/8  50%      2 cfg/s ETA    2s\n")  # the last state, then a newline


def test_redraws_at_most_ten_times_a_second() -> None:
    out, clock = Terminal(), Clock()
    bar = Progress(1000, "validate", unit="rows", stream=out, clock=clock)
    for i in range(1000):
        clock.now = i * 0.001  # 1000 updates in one second
        bar.update()
    assert out.getvalue().count("\r") == 10


def test_enabled_overrides_and_an_empty_total_stays_silent() -> None:
    forced = io.StringIO()
    Progress(3, "x", stream=forced, enabled=True).update(3)
    assert "3/3" in forced.getvalue()
    empty = Terminal()
    bar = Progress(0, "x", stream=empty)
    bar.update(0)
    bar.close()
    assert empty.getvalue() == ""
