"""How a stage process keeps time and exchanges messages: two interchangeable clocks.

A stage process (stage.py) asks its clock to `hold` (do work for d seconds), waits for a
point-to-point `arrival`, `post`s its own outputs and meets the others at the `barrier`. Each
call returns something to `yield` (a simpy event or a token), or None when nothing needs to
wait, so one process runs unchanged under either clock:

* `SimpyClock` — one simpy Environment for the whole pipeline: events happen in global time
  order. Needed when random draws (jitter, stragglers) or the shared dataloader make the order
  of events matter.
* `LocalClock` — every stage keeps its own time and runs ahead until it needs a message that
  has not been sent yet (`LocalKernel` in replay.py parks it until then). Without randomness
  and shared resources this gives the same times as simpy (a message lands at send time +
  transfer time; a wait ends at max(own time, landing)), with none of the event-queue cost.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .routing import MessageKey

MailKey = MessageKey | int  # local mailboxes also take quiet.py's integer keys

if TYPE_CHECKING:
    import simpy  # imported by replay_simpy only when a step needs it (start-up time)


# ----------------------------------------------------------------------------- simpy
class SimpyMailbox:
    """Point-to-point arrivals: one event per message, fired when the data lands."""

    def __init__(self, env: simpy.Environment) -> None:
        self.env = env
        self.events: dict[MessageKey, simpy.Event] = {}
        self.transfer_s: dict[MessageKey, float] = {}

    def event(self, key: MessageKey) -> simpy.Event:
        ev = self.events.get(key)
        if ev is None:
            ev = self.events[key] = self.env.event()
        return ev

    def post(self, key: MessageKey, transfer_s: float) -> None:
        ev = self.event(key)
        self.transfer_s[key] = transfer_s
        if transfer_s <= 0:
            ev.succeed()
        else:
            self.env.timeout(transfer_s).callbacks.append(lambda _ev: _fire(ev))


def _fire(ev: simpy.Event) -> None:
    ev.succeed()


class SimpyBarrier:
    """All stages synchronize (the global gradient norm spans the pipeline)."""

    def __init__(self, env: simpy.Environment, parties: int) -> None:
        self.event = env.event()
        self.parties = parties
        self.arrived = 0

    def arrive(self) -> simpy.Event:
        self.arrived += 1
        if self.arrived == self.parties:
            self.event.succeed()
        return self.event


class SimpyClock:
    def __init__(self, env: simpy.Environment, mailbox: SimpyMailbox, barrier: SimpyBarrier) -> None:
        self.env, self.mailbox, self._barrier = env, mailbox, barrier

    @property
    def now(self) -> float:
        return self.env.now

    def hold(self, seconds: float) -> Any:
        return self.env.timeout(seconds)

    def arrival(self, key: MessageKey) -> Any:
        ev = self.mailbox.event(key)
        return None if ev.triggered else ev

    def wire_s(self, key: MessageKey) -> float:
        return self.mailbox.transfer_s.get(key, 0.0)

    def post(self, key: MessageKey, transfer_s: float) -> None:
        self.mailbox.post(key, transfer_s)

    def barrier(self) -> Any:
        return self._barrier.arrive()


# ----------------------------------------------------------------------------- local time
@dataclass(frozen=True, slots=True)
class Pending:
    """Token a stage yields to its LocalKernel: wake me when `key` has been posted."""

    key: MailKey


BARRIER = "barrier"  # token: wake me when every stage has arrived


class LocalMailbox:
    """Messages as (landing time, transfer time); stages parked on a message not yet sent."""

    def __init__(self) -> None:
        self.landed: dict[MailKey, tuple[float, float]] = {}
        self.parked: dict[MailKey, LocalClock] = {}
        self.runnable: deque[int] = deque()


class LocalClock:
    __slots__ = ("stage", "now", "mailbox")

    def __init__(self, stage: int, mailbox: LocalMailbox) -> None:
        self.stage = stage
        self.now = 0.0
        self.mailbox = mailbox

    def hold(self, seconds: float) -> None:
        self.now += seconds
        return None

    def arrival(self, key: MessageKey) -> Pending | None:
        landed = self.mailbox.landed.get(key)
        if landed is None:
            return Pending(key)
        if landed[0] > self.now:
            self.now = landed[0]
        return None

    def wire_s(self, key: MessageKey) -> float:
        return self.mailbox.landed[key][1]

    def post(self, key: MessageKey, transfer_s: float) -> None:
        deliver(self.mailbox, key, self.now + transfer_s, transfer_s)

    def barrier(self) -> str:
        return BARRIER


def deliver(box: LocalMailbox, key: Any, at_s: float, transfer_s: float) -> None:
    """A message lands at `at_s` after `transfer_s` on the wire; a stage parked on it becomes
    runnable, no earlier than the landing (LocalClock.post; the quiet loop calls it directly)."""
    box.landed[key] = (at_s, transfer_s)
    waiter = box.parked.pop(key, None)
    if waiter is not None:
        if at_s > waiter.now:
            waiter.now = at_s
        box.runnable.append(waiter.stage)
