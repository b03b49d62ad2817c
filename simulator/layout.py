"""Which layers each pipeline stage runs: the one home of the layer split (cost and memory).

Virtual stage c·pp + s is chunk c of stage s, as Megatron interleaves. Layers are dealt out
evenly over the pp·vp virtual stages; uneven splits give the first virtual stages one more.
With Megatron's --account-for-embedding-in-pipeline-split (--account-for-loss-in-pipeline-split)
the embedding (the loss) takes one layer's slot of the first (last) virtual stage, so that
pp·vp may equal layers + 2 (Megatron-LM `get_num_layers_to_build`).
"""

from __future__ import annotations

from .specs import ParallelConfig


def layers_per_chunk(
    num_layers: int, pp: int, vp: int, embedding_slot: bool = False, loss_slot: bool = False
) -> list[list[int]]:
    """Layer indices of each virtual stage (see the module docstring)."""
    n_virtual = pp * vp
    slots = num_layers + int(embedding_slot) + int(loss_slot)
    base, extra = divmod(slots, n_virtual)
    counts = [base + (1 if v < extra else 0) for v in range(n_virtual)]
    if embedding_slot:
        counts[0] -= 1
    if loss_slot:
        counts[-1] -= 1
    # an uneven split may leave a slot stage with -1: give it back to its neighbour
    for v in (0, n_virtual - 1):
        if counts[v] < 0:
            counts[1 if v == 0 else n_virtual - 2] += counts[v]
            counts[v] = 0
    out, start = [], 0
    for n in counts:
        out.append(list(range(start, start + n)))
        start += n
    return out


def chunk_layers(num_layers: int, par: ParallelConfig) -> list[list[int]]:
    """`layers_per_chunk` for a parallel configuration."""
    return layers_per_chunk(
        num_layers,
        par.pp,
        par.vp,
        par.account_for_embedding_in_pipeline_split,
        par.account_for_loss_in_pipeline_split,
    )


def stage_layers(num_layers: int, par: ParallelConfig) -> list[list[int]]:
    """All layer indices each pipeline stage holds (its vp chunks together)."""
    chunks = chunk_layers(num_layers, par)
    return [[i for c in range(par.vp) for i in chunks[c * par.pp + s]] for s in range(par.pp)]
