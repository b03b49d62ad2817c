"""Routing: where a task's input comes from and where its output goes (pure, no simpy).

The model is cut into virtual stages k = 0 … pp·vp − 1 in layer order; the schedule module
says which (stage, chunk) runs each (`schedules.virtual_stages`). A forward of virtual stage k
needs the activation of k − 1 and sends its own to k + 1; a backward (or its input-gradient
part B) needs the gradient of k + 1 and sends its own to k − 1; a weight-gradient task W needs
and sends nothing. The first virtual stage reads data from the loader; the last one starts the
backward from its own loss.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..schedules import Task, virtual_stages

Place = tuple[int, int]  # (stage, chunk)
MessageKey = tuple[str, int, int]  # (phase that produced it, micro-batch, producer's virtual stage)


@dataclass(frozen=True, slots=True)
class Route:
    """The virtual-stage order of one pipeline: `order[k]` is the (stage, chunk) of virtual stage k."""

    order: tuple[Place, ...]
    positions: dict[Place, int]

    def position(self, place: Place) -> int:
        return self.positions[place]


def route_for(schedule: str, pp: int, vp: int) -> Route:
    order = virtual_stages(schedule, pp, vp)
    return Route(order, {place: k for k, place in enumerate(order)})


def _neighbour(route: Route, stage: int, chunk: int, step: int) -> Place | None:
    k = route.position((stage, chunk)) + step
    return route.order[k] if 0 <= k < len(route.order) else None


def upstream(route: Route, task: Task, stage: int) -> Place | None:
    """The (stage, chunk) whose output `task` on `stage` waits for; None when it waits for none
    (a forward of the first virtual stage reads data, the last one's backward starts from its loss)."""
    if task.phase == "F":
        return _neighbour(route, stage, task.chunk, -1)
    if task.phase == "B":
        return _neighbour(route, stage, task.chunk, +1)
    return None


def downstream(route: Route, task: Task, stage: int) -> Place | None:
    """The (stage, chunk) that receives `task`'s output; None at the ends and for W."""
    if task.phase == "F":
        return _neighbour(route, stage, task.chunk, +1)
    if task.phase == "B":
        return _neighbour(route, stage, task.chunk, -1)
    return None


def reads_data(route: Route, task: Task, stage: int) -> bool:
    """Whether `task` takes a batch from the dataloader (the forward of the first virtual stage)."""
    return task.phase == "F" and route.order[0] == (stage, task.chunk)


def message_key(route: Route, phase: str, microbatch: int, producer: Place) -> MessageKey:
    """The mailbox key of the output `producer` sends for (phase, micro-batch)."""
    return (phase, microbatch, route.position(producer))


def link_stage(route: Route, a: Place, b: Place) -> int | None:
    """The stage whose point-to-point link carries a message between neighbours a and b (the
    lower virtual stage's, in both directions, as its `p2p_s` is costed); None when a and b are
    on the same stage (a hand-over in memory)."""
    if a[0] == b[0]:
        return None
    return min(a, b, key=route.position)[0]
