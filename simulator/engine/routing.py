"""Routing: where a task's input comes from and where its output goes (pure, no simpy).

The schedule module says where each chunk's forward output goes (`schedules.next_chunk`) and
where its input comes from (`schedules.prev_chunk`) — a straight line, Megatron's interleaving,
a V, DualPipe's two directions. From that: a forward needs the activation of the previous
chunk on its path and sends its own to the next; a backward (or its input-gradient part B)
needs the gradient of the next chunk and sends its own to the previous; a weight-gradient task W
needs and sends nothing. The first chunk of a path reads data from the loader; the last one
starts the backward from its own loss.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..schedules import Task, next_chunk, num_chunks, prev_chunk, virtual_stage

Place = tuple[int, int]  # (stage, chunk)
MessageKey = tuple[str, int, int, int]  # (phase that produced it, micro-batch, producer stage, chunk)


@dataclass(frozen=True, slots=True)
class Route:
    """Per (stage, chunk): the previous and next chunk on its micro-batches' path, and its
    position along that path (0 = the embedding side)."""

    prev: dict[Place, Place | None]
    next: dict[Place, Place | None]
    position: dict[Place, int]


def route_for(schedule: str, pp: int, vp: int) -> Route:
    places = [(s, c) for s in range(pp) for c in range(num_chunks(schedule, vp))]
    return Route(
        prev={p: prev_chunk(schedule, pp, vp, *p) for p in places},
        next={p: next_chunk(schedule, pp, vp, *p) for p in places},
        position={p: virtual_stage(schedule, pp, vp, *p) for p in places},
    )


def upstream(route: Route, task: Task, stage: int) -> Place | None:
    """The (stage, chunk) whose output `task` on `stage` waits for; None when it waits for none
    (a forward of the first chunk reads data, the last chunk's backward starts from its loss)."""
    if task.phase == "F":
        return route.prev[(stage, task.chunk)]
    if task.phase == "B":
        return route.next[(stage, task.chunk)]
    return None


def downstream(route: Route, task: Task, stage: int) -> Place | None:
    """The (stage, chunk) that receives `task`'s output; None at the ends and for W."""
    if task.phase == "F":
        return route.next[(stage, task.chunk)]
    if task.phase == "B":
        return route.prev[(stage, task.chunk)]
    return None


def reads_data(route: Route, task: Task, stage: int) -> bool:
    """Whether `task` takes a batch from the dataloader (the forward of a path's first chunk)."""
    return task.phase == "F" and route.prev[(stage, task.chunk)] is None


def message_key(phase: str, microbatch: int, producer: Place) -> MessageKey:
    """The mailbox key of the output `producer` sends for (phase, micro-batch)."""
    return (phase, microbatch, producer[0], producer[1])


def link_stage(route: Route, a: Place, b: Place) -> int | None:
    """The stage whose point-to-point link carries a message between neighbours a and b (stage
    s's `p2p_s` is costed for s → s + 1, the last stage's for the wrap to stage 0), in both
    directions — a V's and DualPipe's reverse legs use the same links; None when a and b are on
    the same stage (a hand-over in memory, e.g. the turn of a V)."""
    if a[0] == b[0]:
        return None
    if abs(a[0] - b[0]) == 1:  # stage s's p2p_s is the link between s and s + 1, either way
        return min(a[0], b[0])
    return max(a[0], b[0])  # interleaving's wrap-around from the last stage to the first
