"""Routing of pipeline messages (simulator/engine/routing.py): pure functions, no simpy.

Every forward's output is consumed by exactly one forward (the next virtual stage's) and every
backward's by exactly one backward, in both directions the same pair of neighbours; the ends of
the model read data and start from the loss.
"""

from __future__ import annotations

import pytest

from simulator.engine.routing import downstream, link_stage, reads_data, route_for, upstream
from simulator.schedules import Task, stage_tasks


@pytest.mark.parametrize("pp,vp", [(1, 1), (4, 1), (1, 3), (4, 2), (3, 3)])
def test_interleaved_neighbours(pp: int, vp: int) -> None:
    route = route_for("interleaved" if vp > 1 else "1f1b", pp, vp)
    for s in range(pp):
        for c in range(vp):
            k = c * pp + s  # Megatron: chunk c of stage s is virtual stage c·pp + s
            prev = ((k - 1) % pp, (k - 1) // pp) if k > 0 else None
            nxt = ((k + 1) % pp, (k + 1) // pp) if k < pp * vp - 1 else None
            assert upstream(route, Task("F", 0, c), s) == prev
            assert downstream(route, Task("F", 0, c), s) == nxt
            assert upstream(route, Task("B", 0, c), s) == nxt
            assert downstream(route, Task("B", 0, c), s) == prev
            assert upstream(route, Task("W", 0, c), s) is None
            assert downstream(route, Task("W", 0, c), s) is None
            assert reads_data(route, Task("F", 0, c), s) == (k == 0)


@pytest.mark.parametrize(
    "schedule,pp,vp",
    [
        ("1f1b", 4, 1),
        ("interleaved", 4, 2),
        ("zb-h1", 3, 1),
        ("zb-v", 4, 1),
        ("dualpipev", 4, 1),
        ("dualpipe", 4, 1),
    ],
)
def test_every_message_has_one_sender_and_one_receiver(schedule: str, pp: int, vp: int) -> None:
    route = route_for(schedule, pp, vp)
    m = 2 * pp
    sent, wanted = [], []
    for s in range(pp):
        for t in stage_tasks(schedule, pp, vp, m, s):
            dst, src = downstream(route, t, s), upstream(route, t, s)
            if dst is not None:
                sent.append((t.phase, t.microbatch, (s, t.chunk), dst))
            if src is not None:
                wanted.append((t.phase, t.microbatch, src, (s, t.chunk)))
    assert sorted(sent) == sorted(wanted)
    # every chunk but the last of a path sends each of its micro-batches once, each way
    hops = {"dualpipe": pp - 1, "zb-v": 2 * pp - 1, "dualpipev": 2 * pp - 1}.get(schedule, pp * vp - 1)
    assert len(sent) == 2 * m * hops


def test_link_is_the_lower_stage_in_both_directions() -> None:
    route = route_for("interleaved", 4, 2)
    assert link_stage(route, (1, 0), (2, 0)) == 1 == link_stage(route, (2, 0), (1, 0))
    assert link_stage(route, (3, 0), (0, 1)) == 3  # the wrap from the last stage to the first
    one = route_for("interleaved", 1, 3)
    assert link_stage(one, (0, 0), (0, 1)) is None  # same GPU: a hand-over in memory
    v = route_for("zb-v", 4, 1)
    assert v.next[(3, 0)] == (3, 1) and link_stage(v, (3, 0), (3, 1)) is None  # the turn of the V
    assert link_stage(v, (3, 1), (2, 1)) == 2  # on the way back, the same link 2 <-> 3 (p2p_s of stage 2)
