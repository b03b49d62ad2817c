"""Pipeline schedules as pure functions: the order of work on one pipeline stage, where each
piece of work sends its output, and the closed forms the replays must meet.

A schedule returns, for stage `stage` of `pp`, the list of `Task`s it runs in order.
Phases: F = forward, B = backward (the whole backward, or only its input-gradient part when
the same stage also runs a W task for that micro-batch and chunk), W = the weight-gradient
part of a split backward. Everything else here is a pure function of the schedule's name
and sizes, so the engine, the closed-form estimate (analytic.py) and the memory model
(memory.py) share one set of facts:

* `num_chunks`, `chunk_layers`: how many model chunks a stage holds and which layers each has;
* `next_chunk` / `prev_chunk`: where a chunk's forward output goes and where its input comes
  from — the routing of the three chunk layouts (a straight line, Megatron's interleaving,
  a V, DualPipe's two directions);
* `is_split_backward`, `overlapped_pairs`: which B's leave their W for later, and which F/B
  pairs of two micro-batches run overlapped (DualPipe's F&B: the EP all-to-all of one hides
  behind the other's compute — the MoE model reads the pairs from here);
* `replay`: the order played with given durations (what the engine does, without simpy);
* `bubble_closed_form_s`, `inflight_chunk_microbatches`: the papers' closed forms.

Each order function reads like picotron's 1F1B: warm-up, steady state, cool-down.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

SPLIT_BACKWARD_SCHEDULES = ("zb-h1", "zb-v", "dualpipe", "dualpipev")
V_SCHEDULES = ("zb-v", "dualpipev")  # two chunks per stage in a V: s, then 2p−1−s
TWO_CHUNK_SCHEDULES = ("zb-v", "dualpipe", "dualpipev")
PAIRED_SCHEDULES = ("dualpipe", "dualpipev")  # the orders with overlapped F&B pairs (Task.paired)


@dataclass(frozen=True, slots=True)
class Task:
    phase: str  # "F" | "B" | "W"
    microbatch: int
    chunk: int = 0
    paired: bool = False  # F only: runs overlapped with the next task, a B of another micro-batch


# ----------------------------------------------------------------------------- layout and routing
def num_chunks(schedule: str, vp: int) -> int:
    """Model chunks one stage holds: 2 for the V and bidirectional schedules, else vp."""
    return 2 if schedule in TWO_CHUNK_SCHEDULES else vp


def num_virtual_stages(schedule: str, pp: int, vp: int) -> int:
    """Model pieces a micro-batch crosses. DualPipe's two chunks are the same p stages twice
    (one copy per direction), so its micro-batches cross p pieces; the others cross p·chunks."""
    return pp if schedule == "dualpipe" else pp * num_chunks(schedule, vp)


def virtual_stage(schedule: str, pp: int, vp: int, stage: int, chunk: int) -> int:
    """Position of (stage, chunk) along its micro-batches' path (0 = embedding side)."""
    if schedule == "dualpipe":  # chunk 0 carries stage s of the forward direction, chunk 1 stage p−1−s
        return stage if chunk == 0 else pp - 1 - stage
    if schedule in V_SCHEDULES:
        return stage if chunk == 0 else 2 * pp - 1 - stage
    return chunk * pp + stage  # Megatron: chunk c of stage s is virtual stage c·p + s


def _location(schedule: str, pp: int, vp: int, vs: int, chunk_hint: int) -> tuple[int, int]:
    if schedule == "dualpipe":
        return (vs, 0) if chunk_hint == 0 else (pp - 1 - vs, 1)
    if schedule in V_SCHEDULES:
        return (vs, 0) if vs < pp else (2 * pp - 1 - vs, 1)
    return vs % pp, vs // pp


def next_chunk(schedule: str, pp: int, vp: int, stage: int, chunk: int) -> tuple[int, int] | None:
    """(stage, chunk) that receives this chunk's forward output; None after the last layer
    (the loss). Backward gradients travel the same links the other way."""
    vs = virtual_stage(schedule, pp, vp, stage, chunk)
    if vs + 1 >= num_virtual_stages(schedule, pp, vp):
        return None
    return _location(schedule, pp, vp, vs + 1, chunk)


def prev_chunk(schedule: str, pp: int, vp: int, stage: int, chunk: int) -> tuple[int, int] | None:
    """(stage, chunk) whose forward output this chunk consumes; None for the embedding chunk."""
    vs = virtual_stage(schedule, pp, vp, stage, chunk)
    if vs == 0:
        return None
    return _location(schedule, pp, vp, vs - 1, chunk)


def chunk_layers(
    schedule: str,
    num_layers: int,
    pp: int,
    vp: int,
    embedding_slot: bool = False,
    loss_slot: bool = False,
    layout: Sequence[int] = (),
) -> list[list[list[int]]]:
    """Layer indices of each stage's chunks, [stage][chunk]. The model is cut into equal pieces
    (the first pieces get one layer more when it does not divide), one per virtual stage;
    DualPipe keeps two copies of the p pieces, one per direction (2x parameters per rank).
    With Megatron's --account-for-embedding-in-pipeline-split (--account-for-loss-in-pipeline-
    split) the embedding (loss) takes one layer's slot of the first (last) piece, so the pieces
    may number layers + 2 (Megatron-LM `get_num_layers_to_build`). An explicit `layout` (layers per
    virtual stage, Megatron's --pipeline-model-parallel-layout) replaces the even split."""
    n_virtual = num_virtual_stages(schedule, pp, vp)
    counts = list(layout) or _piece_sizes(num_layers, n_virtual, embedding_slot, loss_slot)
    pieces, start = [], 0
    for n in counts:
        pieces.append(list(range(start, start + n)))
        start += n
    chunks = num_chunks(schedule, vp)
    return [[pieces[virtual_stage(schedule, pp, vp, s, c)] for c in range(chunks)] for s in range(pp)]


def _piece_sizes(num_layers: int, n_virtual: int, embedding_slot: bool, loss_slot: bool) -> list[int]:
    base, extra = divmod(num_layers + int(embedding_slot) + int(loss_slot), n_virtual)
    counts = [base + (1 if v < extra else 0) for v in range(n_virtual)]
    if embedding_slot:
        counts[0] -= 1
    if loss_slot:
        counts[-1] -= 1
    for v, neighbour in ((0, 1), (n_virtual - 1, n_virtual - 2)):  # a one-piece model: no -1
        if counts[v] < 0 and 0 <= neighbour < n_virtual:
            counts[neighbour] += counts[v]
            counts[v] = 0
    return counts


def microbatches_per_chunk(schedule: str, pp: int, m: int, chunk: int) -> int:
    """Micro-batches that pass through one chunk of a stage in a step: all m, except DualPipe,
    whose two chunks each carry one direction's half."""
    if schedule == "dualpipe":
        return m // 2 if chunk == 0 else m - m // 2
    return m


def is_split_backward(tasks: Sequence[Task]) -> set[tuple[int, int]]:
    """(micro-batch, chunk) pairs whose B is the input-gradient part only (a W follows later)."""
    return {(t.microbatch, t.chunk) for t in tasks if t.phase == "W"}


def overlapped_pairs(tasks: Sequence[Task]) -> list[tuple[int, int]]:
    """Indices (i, i+1) of the F/B pairs that run overlapped (DualPipe's F&B chunks)."""
    return [(i, i + 1) for i, t in enumerate(tasks) if t.paired]


# ----------------------------------------------------------------------------- the orders
def gpipe(pp: int, vp: int, m: int, stage: int) -> list[Task]:
    """GPipe (Huang et al. 2019): all forwards, then all backwards. Bubble (p−1)/m."""
    return [Task("F", i) for i in range(m)] + [Task("B", i) for i in range(m)]


def one_f_one_b(pp: int, vp: int, m: int, stage: int) -> list[Task]:
    """1F1B (PipeDream-Flush, Narayanan et al. 2021): same bubble as GPipe, at most p
    micro-batches in flight."""
    warmup = min(pp - stage - 1, m)
    fwd, bwd = _passes(m)
    return _one_f_one_b_order(fwd, bwd, warmup)


@lru_cache(maxsize=16)
def _passes(m: int) -> tuple[tuple[Task, ...], tuple[Task, ...]]:
    """Every micro-batch's F and B task, built once and shared by all stages (start-up time)."""
    return tuple(Task("F", i) for i in range(m)), tuple(Task("B", i) for i in range(m))


def _one_f_one_b_order(fwd: Sequence[Task], bwd: Sequence[Task], warmup: int) -> list[Task]:
    """`warmup` forwards (fill the pipeline), then one forward and one backward at a time (steady
    state), then the remaining backwards (cool-down: drain it)."""
    steady = len(fwd) - warmup
    pairs: list[Task] = [fwd[0]] * (2 * steady)
    pairs[0::2] = fwd[warmup:]
    pairs[1::2] = bwd[:steady]
    return [*fwd[:warmup], *pairs, *bwd[steady:]]


def _interleaved_chunk(k: int, pp: int, vp: int, forward: bool) -> int:
    """Megatron's get_model_chunk_id: virtual micro-batch k → model chunk."""
    c = (k // pp) % vp
    return c if forward else vp - 1 - c


def _interleaved_microbatch(k: int, pp: int, vp: int) -> int:
    return (k // (pp * vp)) * pp + k % pp


def interleaved(pp: int, vp: int, m: int, stage: int) -> list[Task]:
    """Interleaved 1F1B (Narayanan et al. 2021 §2.2.2): each stage holds vp model chunks;
    bubble (p−1)/(v·m). Needs m to be a multiple of pp (as Megatron does)."""
    total = m * vp
    warmup = min((pp - stage - 1) * 2 + (vp - 1) * pp, total)
    fwd, bwd = _interleaved_passes(pp, vp, m)
    return _one_f_one_b_order(fwd, bwd, warmup)


def combined_1f1b(schedule: str, pp: int, vp: int, m: int, stage: int) -> list[Task]:
    """Megatron-Core's combined 1F1B (--overlap-moe-expert-parallel-comm): each steady-state
    forward runs merged with the backward of an earlier micro-batch (`Task.paired`), layer by
    layer, so the EP all-to-all of one hides behind the other's compute. Without pipelining
    (pipeline_parallel/combined_1f1b.py combined_1f1b_schedule_for_no_pipelining) the first
    forward and the last backward run alone; interleaved, one more warm-up forward than usual
    (schedules.py get_pp_rank_microbatches: "we schedule one extra micro-batch forward step
    before the 1f1b stages") makes every steady-state pair independent."""
    if schedule == "interleaved":
        total = m * vp
        warmup = min((pp - stage - 1) * 2 + (vp - 1) * pp + 1, total)
        fwd, bwd = _interleaved_passes(pp, vp, m)
    else:  # pp = 1: no pipelining
        warmup = min(1, m)
        fwd, bwd = _passes(m)
    steady = len(fwd) - warmup
    pairs: list[Task] = []
    for f, b in zip(fwd[warmup:], bwd[:steady], strict=True):
        pairs += [Task(f.phase, f.microbatch, f.chunk, True), b]
    return [*fwd[:warmup], *pairs, *bwd[steady:]]


@lru_cache(maxsize=16)
def _interleaved_passes(pp: int, vp: int, m: int) -> tuple[tuple[Task, ...], tuple[Task, ...]]:
    """The k-th virtual micro-batch's F and B task, k < m·vp, shared by all stages."""
    ks = range(m * vp)
    return (
        tuple(Task("F", _interleaved_microbatch(k, pp, vp), _interleaved_chunk(k, pp, vp, True)) for k in ks),
        tuple(
            Task("B", _interleaved_microbatch(k, pp, vp), _interleaved_chunk(k, pp, vp, False)) for k in ks
        ),
    )


def zero_bubble_h1(pp: int, vp: int, m: int, stage: int) -> list[Task]:
    """ZB-H1 (Qi et al. 2023, "Zero Bubble Pipeline Parallelism", §2.1 and Fig. 3 top).

    The backward is split into B (input gradient, on the critical path) and W (weight
    gradient, deferrable). The schedule is 1F1B with the start of the W's delayed by the
    stage's number of warm-up micro-batches, so that every stage holds the same p
    micro-batches in flight as 1F1B's first stage:
      warm-up   p−i−1 F's (as 1F1B), then i pairs F B with their W held back;
      steady    F B W;
      cool-down B W for the remaining backwards, then the i held-back W's fill the tail.
    Bubble on balanced stages (p−1)(T_F + T_B − T_W), a third of 1F1B's when T_F=T_B=T_W."""
    i = stage
    warmup = min(pp - i - 1, m)
    held = min(i, m - warmup)  # F B pairs whose W is held back
    tasks = [Task("F", k) for k in range(warmup)]
    nf, nb, nw = warmup, 0, 0
    for _ in range(held):
        tasks += [Task("F", nf), Task("B", nb)]
        nf, nb = nf + 1, nb + 1
    while nf < m:  # steady state
        tasks += [Task("F", nf), Task("B", nb), Task("W", nw)]
        nf, nb, nw = nf + 1, nb + 1, nw + 1
    while nb < m:  # cool-down
        tasks += [Task("B", nb), Task("W", nw)]
        nb, nw = nb + 1, nw + 1
    tasks += [Task("W", k) for k in range(nw, m)]  # the held-back W's fill the tail bubble
    return tasks


@dataclass(frozen=True, slots=True)
class PassTimes:
    """Durations of one micro-batch's passes on one chunk (s), and the stage-to-stage hop."""

    forward_s: float = 1.0
    backward_input_s: float = 1.0
    backward_weight_s: float = 1.0
    hop_s: float = 0.0


UNIT_PASSES = PassTimes()


def zero_bubble_v(pp: int, vp: int, m: int, stage: int, times: PassTimes = UNIT_PASSES) -> list[Task]:
    """ZB-V (Qi et al. 2024, "Zero Bubble (Almost) Pipeline Parallelism", ICLR 2024, §6; the
    V-shape block of "Pipeline Parallelism with Controllable Memory", NeurIPS 2024).

    Each stage holds two chunks: chunk 0 = virtual stage s, chunk 1 = virtual stage 2p−1−s, so
    the forward runs down the stages and back up, the loss is on stage 0, and the turn on
    stage p−1 needs no transfer. Built like the paper's greedy (sail-sg zbv.py) with the
    chunk's real F/B/W durations `times`: a stage runs a ready B first, then a ready F
    (chunk 1 before chunk 0), and fills what would be idle time with deferred W's; its
    activations stay within 1F1B's peak (2p chunk micro-batches of L/(2p) layers each).
    Bubble on balanced stages: one ramp of chunk passes, (p−1)·max(T_F, T_B)/2, independent
    of m — the paper's "zero bubble" measures each stage from its own first op (it has no
    step-wide barrier), which removes that ramp too. Because the order is chosen from the pass
    times, it is not monotone in them: a faster GPU can switch the greedy to another order with
    a longer step (seen up to ~0.5% by the fuzz audit), as the paper's own scheduler would."""
    return list(_zbv_orders(pp, m, times)[stage])


@lru_cache(maxsize=64)
def _zbv_orders(pp: int, m: int, times: PassTimes) -> tuple[tuple[Task, ...], ...]:
    """The ZB-V heuristic of sail-sg/zero-bubble-pipeline-parallelism (zbv.py `try_v_schedule`,
    re-implemented): warm-up forwards placed to meet the first chunk-1 forward, then 2m rounds
    of one B and one F per stage, W's filling the waits they fit in; repeated with the stages'
    bubbles as targets while that lowers the worst one, and the best of the four fill policies
    kept. Legs: F down (chunk 0), F up (chunk 1), B down (chunk 1), B up (chunk 0)."""
    best: tuple[float, list[list[tuple[int, int, int]]]] | None = None
    for fill_b in (True, False):
        for fill_f in (True, False):
            approved: list[float] | None = None
            while True:
                bubble, sched, stage_bubble = _zbv_try(pp, m, times, fill_f, fill_b, approved)
                if best is None or bubble < best[0]:
                    best = (bubble, sched)
                if approved is not None and bubble >= max(approved):
                    break
                if approved is not None and stage_bubble == approved:
                    break
                approved = stage_bubble
    assert best is not None
    out = []
    for stage_order in best[1]:
        tasks = []
        for cat, leg, i in stage_order:
            chunk = leg if cat == 0 else 1 - leg  # B/W legs run the chunks backwards
            tasks.append(Task("FBW"[cat], i, chunk))
        out.append(tuple(tasks))
    return tuple(out)


def _zbv_try(
    n: int, m: int, times: PassTimes, fill_f: bool, fill_b: bool, approved: list[float] | None
) -> tuple[float, list[list[tuple[int, int, int]]], list[float]]:
    cost = (times.forward_s, times.backward_input_s, times.backward_weight_s)
    hop = times.hop_s
    mem_of = (1.0, 0.0, -1.0)  # activations held from F until its W (the B frees almost nothing)
    max_mem = 2.0 * n  # 1F1B's first stage: p micro-batches of twice a chunk's layers
    count = [[0] * 6 for _ in range(n)]  # per stage: F leg0, F leg1, B leg0, B leg1, W leg0, W leg1
    end: dict[tuple[int, int, int, int], float] = {}
    cur = [0.0] * n
    mem = [0.0] * n
    stage_bubble = [0.0] * n
    pending: list[deque[tuple[int, int]]] = [deque() for _ in range(n)]
    sched: list[list[tuple[int, int, int]]] = [[] for _ in range(n)]
    approved_list = approved or [-1.0] * n
    max_approved = max(approved_list)

    def max_bubble(stage: int = -1) -> float:
        out = max(stage_bubble)
        if stage >= 0:
            out = max(out, max_approved - approved_list[stage])
        return out

    def put(cat: int, leg: int, s: int) -> None:
        k = count[s][cat * 2 + leg]
        t = no_bubble = cur[s] + cost[cat]
        if cat < 2 and leg == 1 and s < n - 1:
            t = max(t, end[(cat, 1, s + 1, k)] + hop + cost[cat])
        if cat < 2 and leg == 0 and s > 0:
            t = max(t, end[(cat, 0, s - 1, k)] + hop + cost[cat])
        if count[s][0] > 0:
            stage_bubble[s] += t - no_bubble
        end[(cat, leg, s, k)] = t
        cur[s] = t
        mem[s] += mem_of[cat]
        sched[s].append((cat, leg, k))
        if cat == 1:
            pending[s].append((leg, k))
        count[s][cat * 2 + leg] += 1

    def put_w(s: int) -> None:
        leg, _ = pending[s].popleft()
        put(2, leg, s)

    def fill(s: int, dep: tuple[int, int, int, int] | None, allow: bool) -> None:
        """W's that end before the next pass's input arrives; one more if this stage's bubble
        is below the worst and the policy allows."""
        if dep is None:
            return
        while pending[s] and end[dep] + hop >= cur[s] + cost[2]:
            put_w(s)
        if pending[s] and allow and end[dep] + hop - cur[s] > max_bubble(s) - stage_bubble[s]:
            put_w(s)

    # warm-up: one chunk-0 forward per stage, then as many as fit before the chunk-1 forward
    for i in range(n):
        put(0, 0, i)
    for i in range(n - 1, -1, -1):
        if i < n - 1:
            arrive = end[(0, 1, i + 1, 0)] + hop
            while (
                mem[i] + mem_of[0] * (2 + 2 * i) <= max_mem and cur[i] + cost[0] <= arrive and count[i][0] < m
            ):
                for j in range(i + 1):
                    put(0, 0, j)
        put(0, 1, i)
    leg = 0
    for i in range(1, n):
        while count[i][0] + count[i][1] < count[i - 1][0] + count[i - 1][1] or (
            count[i][1] <= count[i - 1][1] < m
        ):
            for j in range(n - 1, i - 1, -1):
                if count[j][leg] < m:
                    put(0, leg, j)
            leg = 1 - leg
    # steady state: per round, one B then one F on every stage
    for _ in range(2 * m):
        up, down = [], []
        for i in range(n):
            if count[i][3] >= count[i][2]:
                down.append(i)
            elif i == n - 1 or (1, 1, i + 1, count[i][3]) in end or count[i][2] >= m:
                up.append(i)
            else:
                down.append(i)
        for i, lg in [(i, 1) for i in reversed(up)] + [(i, 0) for i in down]:
            if lg == 0 and (count[i][2] >= m or count[i][2] >= count[i][1]):
                continue  # nothing forwarded here yet to run backward
            dep = None
            if lg == 1 and i < n - 1:
                dep = (1, 1, i + 1, count[i][3])
            if lg == 0 and i > 0:
                dep = (1, 0, i - 1, count[i][2])
            if dep is not None and dep not in end:
                continue
            fill(i, dep, lg == 1 or fill_b)
            put(1, lg, i)
        for i in range(n):
            if count[i][1] >= m:
                continue
            item = None
            if count[i][1] >= count[i][0]:
                item = 0
            elif i == n - 1:
                item = 1
            elif (0, 1, i + 1, count[i][1]) in end:
                item = 1
            elif count[i][0] < m and (i == 0 or (0, 0, i - 1, count[i][0]) in end):
                item = 0
            if item is None:
                continue
            while mem[i] + mem_of[0] > max_mem and pending[i]:
                put_w(i)
            dep = None
            if item == 0 and i > 0:
                dep = (0, 0, i - 1, count[i][0])
            if item == 1 and i < n - 1:
                dep = (0, 1, i + 1, count[i][1])
            fill(i, dep, fill_f)
            put(0, item, i)
    for i in range(n):
        while pending[i]:
            put_w(i)
    if any(c != [m] * 6 for c in count):
        raise RuntimeError(f"zb-v schedule construction failed for pp={n}, m={m}")
    return max_bubble(), sched, list(stage_bubble)


def dualpipe(pp: int, vp: int, m: int, stage: int) -> list[Task]:
    """DualPipe (DeepSeek-AI 2024, "DeepSeek-V3 Technical Report" §3.2.1; deepseek-ai/DualPipe
    dualpipe.py `step`, transcribed phase by phase). Bidirectional: rank r holds stage r of
    the forward direction (chunk 0) and stage p−1−r of the reverse one (chunk 1, 2x
    parameters); half the micro-batches enter at rank 0, half at rank p−1. In the main phase
    each F of one direction runs overlapped with a B of the other (`Task.paired`), so the EP
    all-to-all of one hides behind the other's compute; W's are deferred at the ramps only.
    Needs p even and m an even number ≥ 2p. Bubble on balanced stages
    (p/2 − 1)(F&B + B − 3W) with F, B (full backward), W per chunk (README table)."""
    return list(_dualpipe_order(pp, m, stage, v_shape=False))


def dualpipe_v(pp: int, vp: int, m: int, stage: int) -> list[Task]:
    """DualPipeV (deepseek-ai/DualPipe dualpipev.py `step`; Sea AI Lab's "cut-in-half" of
    DualPipe): DualPipe folded onto p ranks as a V — chunk 0 = virtual stage r, chunk 1 =
    virtual stage 2p−1−r, one copy of the parameters. Needs m ≥ 2p. Bubble on balanced stages
    (p − 1)(F&B + B − 3W) per chunk (README table, with its PP = 2p stages)."""
    return list(_dualpipe_order(pp, m, stage, v_shape=True))


@lru_cache(maxsize=256)
def _dualpipe_order(pp: int, m: int, rank: int, v_shape: bool) -> tuple[Task, ...]:
    """The `step` of dualpipe.py / dualpipev.py with every compute call recorded as a Task.

    Local phase 0/1 maps to chunk phase ^ second_half (DualPipe) or phase (DualPipeV);
    micro-batches are consumed FIFO per chunk; `enable_zb` backwards push their W on a FIFO
    that `_weight_chunk` pops; `_forward_backward_chunk(a, b)` is F(a) paired with B(b)."""
    out: list[Task] = []
    if v_shape:
        half_rank, ranks, chunks_per_dir = rank, pp, m
        second_half, is_turn = False, rank == pp - 1
        first_dir_mb = (0, 0)
    else:
        half_rank, ranks, chunks_per_dir = min(rank, pp - 1 - rank), pp // 2, m // 2
        second_half = rank >= pp // 2
        is_turn = rank in (pp // 2 - 1, pp // 2)
        first_dir_mb = (0, m // 2)  # direction 0 feeds micro-batches 0.., direction 1 m/2..
    nf = [0, 0]
    nb = [0, 0]
    wq: deque[tuple[int, int]] = deque()

    def chunk_of(phase: int) -> int:
        return phase ^ 1 if second_half else phase

    def mb(c: int, k: int) -> int:
        return (0 if v_shape else first_dir_mb[c]) + k

    def fwd(phase: int, paired: bool = False) -> None:
        c = chunk_of(phase)
        out.append(Task("F", mb(c, nf[c]), c, paired))
        nf[c] += 1

    def bwd(phase: int, zb: bool = False) -> None:
        c = chunk_of(phase)
        out.append(Task("B", mb(c, nb[c]), c))
        if zb:
            wq.append((mb(c, nb[c]), c))
        nb[c] += 1

    def weight() -> None:
        i, c = wq.popleft()
        out.append(Task("W", i, c))

    def fwd_bwd(p0: int, p1: int) -> None:
        fwd(p0, paired=True)
        bwd(p1)

    for _ in range((ranks - half_rank - 1) * 2):  # step 1: nF0
        fwd(0)
    for _ in range(half_rank + 1):  # step 2: nF0F1
        fwd(0)
        fwd(1)
    for _ in range(ranks - half_rank - 1):  # step 3: nB1W1F1 (zero bubble)
        bwd(1, zb=True)
        weight()
        fwd(1)
    step4 = chunks_per_dir - 2 * ranks + half_rank + 1
    for i in range(step4):  # step 4 (main): nF0B1F1B0
        if i == 0 and is_turn:  # "we don't overlap these two chunks to further reduce bubble size"
            fwd(0)
            bwd(1)
        else:
            fwd_bwd(0, 1)
        fwd_bwd(1, 0)
    for _ in range(ranks - half_rank - 1):  # step 5: nB1F1B0
        bwd(1)
        fwd_bwd(1, 0)
    zb = False
    steps6 = half_rank + 1
    for i in range(steps6):  # step 6: nB1B0, the second half with zero bubble
        if i == steps6 // 2 and half_rank % 2 == 1:
            zb = True
        bwd(1, zb)
        if i == steps6 // 2 and half_rank % 2 == 0:
            zb = True
        bwd(0, zb)
    for _ in range(ranks - half_rank - 1):  # step 7: nWB0
        weight()
        bwd(0, zb=True)
    while wq:  # step 8: nW
        weight()
    return tuple(out)


SCHEDULES: dict[str, Callable[[int, int, int, int], list[Task]]] = {
    "gpipe": gpipe,
    "1f1b": one_f_one_b,
    "interleaved": interleaved,
    "zb-h1": zero_bubble_h1,
    "zb-v": zero_bubble_v,
    "dualpipe": dualpipe,
    "dualpipev": dualpipe_v,
}


def stage_tasks(
    schedule: str, pp: int, vp: int, m: int, stage: int, times: PassTimes | None = None
) -> list[Task]:
    """The ordered tasks of `stage`. `times` (per chunk, balanced) shapes the orders that are
    built by a greedy list scheduler (zb-v); the fixed orders ignore it."""
    if schedule == "zb-v":
        return zero_bubble_v(pp, vp, m, stage, times or UNIT_PASSES)
    return SCHEDULES[schedule](pp, vp, m, stage)


def check_schedule(schedule: str, pp: int, m: int, num_layers: int) -> str | None:
    """Why `schedule` cannot run with these sizes (None when it can)."""
    if schedule == "dualpipe":
        if pp % 2:
            return f"dualpipe needs an even pp (two directions meet in the middle); got pp = {pp}"
        if m % 2 or m < 2 * pp:
            return f"dualpipe needs an even number of micro-batches >= 2*pp = {2 * pp}; got {m}"
    if schedule == "dualpipev" and pp > 1 and m < 2 * pp:
        return f"dualpipev needs at least 2*pp = {2 * pp} micro-batches; got {m}"
    if schedule in V_SCHEDULES and num_layers < 2 * pp:
        return f"{schedule} cuts the model into 2*pp = {2 * pp} chunks; it has only {num_layers} layers"
    return None


# ----------------------------------------------------------------------------- replay
@dataclass(frozen=True, slots=True)
class ChunkTimes:
    """One micro-batch's passes on one (stage, chunk), in seconds."""

    forward_s: float
    backward_s: float  # the whole backward (B and W together)
    backward_input_s: float
    backward_weight_s: float
    forward_paired_s: float | None = None  # in an overlapped F&B pair (DualPipe); None = as alone
    backward_paired_s: float | None = None


@dataclass(frozen=True, slots=True)
class Replay:
    """Start and end of every task, per stage, in schedule order."""

    tasks: tuple[tuple[Task, ...], ...]
    start_s: tuple[tuple[float, ...], ...]
    end_s: tuple[tuple[float, ...], ...]
    gate_wait_s: tuple[float, ...] = ()  # per stage: seconds its first forwards waited at `gates`

    @property
    def makespan_s(self) -> float:
        return max((e[-1] for e in self.end_s if e), default=0.0)

    def busy_s(self, stage: int) -> float:
        return sum(e - s for s, e in zip(self.start_s[stage], self.end_s[stage], strict=True))


def link_s(p2p_s: Sequence[float], src: int, dst: int) -> float:
    """Transfer time between two stages: none on the same stage (a V's turn), the link of the
    lower stage to its successor between neighbours, the last stage's (wrapping) link else."""
    if src == dst:
        return 0.0
    if abs(src - dst) == 1:
        return p2p_s[min(src, dst)]
    return p2p_s[len(p2p_s) - 1]


def replay(
    schedule: str,
    pp: int,
    vp: int,
    m: int,
    times: Sequence[Sequence[ChunkTimes]],
    p2p_s: Sequence[float] | None = None,
    orders: Sequence[Sequence[Task]] | None = None,
    data_s: Callable[[float], float] | None = None,
    gates: Sequence[Mapping[int, tuple[float, float]]] | None = None,
) -> Replay:
    """Play the schedule's orders with these durations (the engine's dependencies, no simpy):
    an F waits for its input from `prev_chunk`, a B for the gradient from `next_chunk` (or its
    own loss), a W follows its B; a paired F waits for both its own input and its partner's
    gradient. `times[stage][chunk]`; `p2p_s[stage]` = hop from stage to stage + 1. `data_s`:
    when a batch the first chunk's forward asks for at t is in hand (a dataloader, shared by
    every stage that reads data: called once per such forward, in the order of the times
    asked, as the engine's stages take from one buffer); None: at once. `gates[stage][chunk]` = (t₁, t₂): the
    chunk's first forward starts no earlier than t₁ and hands its output on no earlier than t₂
    (ZeRO parameter gathers launched at the step start: first bucket in, all buckets in; as
    engine/dpstream.py `ParamGathers`)."""
    hops = list(p2p_s) if p2p_s is not None else [0.0] * pp
    if orders is None:
        orders = [stage_tasks(schedule, pp, vp, m, s) for s in range(pp)]
    splits = [is_split_backward(o) for o in orders]
    partners = [{j for _, j in overlapped_pairs(o)} for o in orders]
    end: dict[tuple[str, int, int, int], float] = {}
    starts: list[list[float]] = [[] for _ in range(pp)]
    ends: list[list[float]] = [[] for _ in range(pp)]
    pos = [0] * pp
    free = [0.0] * pp
    gated = [dict(g) for g in gates] if gates is not None else [{} for _ in range(pp)]
    gate_wait = [0.0] * pp
    asked: dict[int, float] = {}  # stage -> when its next forward asked for data, not yet taken
    fed: dict[int, float] = {}  # stage -> when the batch of its next forward is in hand

    def ready(s: int, t: Task) -> float | None:
        if t.phase == "F":
            src = prev_chunk(schedule, pp, vp, s, t.chunk)
            if src is None and data_s is None:
                return 0.0
            if src is None:  # a batch is taken only once no stage could ask earlier (see below)
                if s not in fed:
                    asked[s] = free[s]
                return fed.get(s)
            e = end.get(("F", t.microbatch, src[0], src[1]))
            return None if e is None else e + link_s(hops, src[0], s)
        if t.phase == "B":
            dst = next_chunk(schedule, pp, vp, s, t.chunk)
            if dst is None:
                return end.get(("F", t.microbatch, s, t.chunk))
            e = end.get(("B", t.microbatch, dst[0], dst[1]))
            return None if e is None else e + link_s(hops, dst[0], s)
        return end.get(("B", t.microbatch, s, t.chunk))

    total = sum(len(o) for o in orders)
    done = 0
    while done < total:
        progressed = False
        for s in range(pp):
            order = orders[s]
            while pos[s] < len(order):
                t = order[pos[s]]
                r = ready(s, t)
                if r is None:
                    break
                if t.paired and pos[s] + 1 < len(order):
                    r2 = ready(s, order[pos[s] + 1])
                    if r2 is None:
                        break
                    r = max(r, r2)
                ct = times[s][t.chunk]
                if t.phase == "F":
                    d = ct.forward_paired_s if t.paired and ct.forward_paired_s is not None else ct.forward_s
                elif t.phase == "W":
                    d = ct.backward_weight_s
                elif (t.microbatch, t.chunk) in splits[s]:
                    d = ct.backward_input_s
                elif pos[s] in partners[s] and ct.backward_paired_s is not None:
                    d = ct.backward_paired_s
                else:
                    d = ct.backward_s
                start = max(free[s], r)
                gate = gated[s].pop(t.chunk, None) if t.phase == "F" else None
                if gate is None:
                    free[s] = start + d
                else:  # the chunk's first forward: its parameters must have been gathered
                    ungated = start
                    start = max(start, gate[0])
                    free[s] = max(start + d, gate[1])
                    gate_wait[s] += (start - ungated) + (free[s] - (start + d))
                end[(t.phase, t.microbatch, s, t.chunk)] = free[s]
                starts[s].append(start)
                ends[s].append(free[s])
                fed.pop(s, None)
                pos[s] += 1
                done += 1
                progressed = True
        if not progressed and asked and data_s is not None:
            # every stage is done, blocked, or asking for data: the earliest ask is served first
            # (a stage still to ask can only do so after a pending ask is served, and later)
            s = min(asked, key=lambda k: (asked[k], k))
            fed[s] = data_s(asked.pop(s))
        elif not progressed:
            raise RuntimeError(f"schedule {schedule!r} deadlocks for pp={pp}, m={m}")
    return Replay(
        tuple(tuple(o) for o in orders),
        tuple(tuple(x) for x in starts),
        tuple(tuple(x) for x in ends),
        tuple(gate_wait),
    )


# ----------------------------------------------------------------------------- closed forms
def bubble_closed_form_s(
    schedule: str,
    pp: int,
    vp: int,
    m: int,
    forward_s: float,
    backward_input_s: float,
    backward_weight_s: float,
    overlapped_fb_s: float | None = None,
) -> float:
    """Idle time per stage of a step on balanced stages with free transfers, from the papers.

    T_F, T_B (input gradient), T_W: one micro-batch's passes over all of a stage's layers.
      GPipe, 1F1B      (p−1)(T_F + T_B + T_W)                 Narayanan et al. 2021 §2.2
      interleaved      (p−1)(T_F + T_B + T_W)/v               ibid. §2.2.2
      ZB-H1            (p−1)(T_F + T_B − T_W)                 Qi et al. 2023 §2.1
      ZB-V             (p−1)·max(T_F, T_B)/2 (one chunk ramp)  Qi et al. 2024 §6 (see zero_bubble_v)
      DualPipe         (p/2 − 1)(F&B + B − 3W), chunk = stage DeepSeek-V3 report Table 2
      DualPipeV        (p − 1)(F&B + B − 3W), chunk = half a stage
    with, per chunk, B the whole backward and F&B the time of an overlapped F/B pair
    (`overlapped_fb_s`; default F + B, no overlap). Valid for ZB-H1 when T_W ≤ T_F and
    T_W ≤ T_B (the held-back W's then fit the tail), and for the DualPipes when m ≥ 2p."""
    p = pp
    if p <= 1:
        return 0.0
    tf, tb, tw = forward_s, backward_input_s, backward_weight_s
    if schedule in ("gpipe", "1f1b"):
        return (p - 1) * (tf + tb + tw)
    if schedule == "interleaved":
        return (p - 1) * (tf + tb + tw) / vp
    if schedule == "zb-h1":
        return (p - 1) * (tf + tb - tw)
    if schedule == "zb-v":
        return (p - 1) * max(tf, tb) / 2
    if schedule in ("dualpipe", "dualpipev"):
        share = 1.0 if schedule == "dualpipe" else 0.5  # a chunk's part of the stage's layers
        f, b, w = tf * share, (tb + tw) * share, tw * share
        fb = overlapped_fb_s if overlapped_fb_s is not None else f + b
        ramps = p / 2 - 1 if schedule == "dualpipe" else p - 1
        return ramps * (fb + b - 3 * w)
    raise ValueError(f"unknown schedule {schedule!r}")


def peak_inflight(tasks: Sequence[Task], chunk_weights: Sequence[float] | None = None) -> float:
    """Most chunk micro-batches whose activations a stage holds at once, from its order: an F
    stores them, the whole backward (or, split, the W) frees them. `chunk_weights` weighs each
    chunk (e.g. its layer count); default 1 per chunk."""
    split = is_split_backward(tasks)
    held = peak = 0.0
    for t in tasks:
        wgt = chunk_weights[t.chunk] if chunk_weights is not None else 1.0
        if t.phase == "F":
            held += wgt
            peak = max(peak, held)
        elif t.phase == "W" or (t.phase == "B" and (t.microbatch, t.chunk) not in split):
            held -= wgt
    return peak


def inflight_chunk_microbatches(schedule: str, pp: int, vp: int, m: int, stage: int) -> float:
    """Peak chunk micro-batches in flight on `stage` (activations stored, not yet freed).

    1F1B min(p − i, m); ZB-H1 the same p micro-batches on every stage (its W's are held, not
    its F's: Qi et al. 2023 §2.1); GPipe m; the others read off their orders — ZB-V ≤ 2p
    chunks of half a stage (1F1B's peak), DualPipe p + 1 (README table)."""
    return peak_inflight(stage_tasks(schedule, pp, vp, m, stage))
