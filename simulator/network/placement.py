"""Ranks -> GPUs, and the communication groups of every parallel axis (issue 4, item 2).

Rank r runs on GPU r. A rank's coordinates follow `topology.rank_order` (innermost first; default
tp, cp, dp, pp = Megatron-LM's order "tp-cp-(ep)-dp-pp"): with sizes (tp, cp, dp, pp),
    r = tp_rank + tp * (cp_rank + cp * (dp_rank + dp * pp_rank)).
A group of axis `a` holds the ranks that differ only in their `a` coordinate: an arithmetic
sequence with step `stride(a)`. Expert-parallel groups are carved out of the data-parallel ranks
(Megatron-Core: the EP group is `ep` consecutive data-parallel ranks; when `ep` does not divide
dp, the group runs over consecutive ranks of the stage's (tp, cp, dp) block in rank order).

The expert-data-parallel group ("edp") holds the ranks that keep the same routed-expert shard:
the data-parallel ranks at the same position of every EP group (dp coordinates c, c + ep, c + 2·ep,
...), whose routed-expert gradients Megatron-Core's DDP reduces apart from the dense ones
(megatron/core/parallel_state.py: the expert-data-parallel group is the data-parallel complement
of the expert-model-parallel group; distributed_data_parallel.py: `expert_parallel_buffers`
reduce over it). With ep consecutive dp ranks per EP group it strides like `dp_replicate` with a
shard of ep: at ep = gpus per node it holds one GPU per node, each sending through its own NIC.

The representative pipeline is the one whose tp, cp and dp coordinates are all 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import ConfigError
from ..specs import Scenario

GROUP_AXES = ("tp", "cp", "dp", "ep", "pp", "dp_shard", "dp_replicate", "edp")
# Sub-groups of the data-parallel ranks (issue 14, HSDP): the shard group is dp_shard consecutive
# dp ranks (FSDP2's mesh (replicate, shard): shard innermost), the replicate group the ranks at
# the same position of every shard group.
DP_SUBGROUPS = ("dp_shard", "dp_replicate", "edp")


@dataclass(frozen=True, slots=True)
class Placement:
    tp: int
    cp: int
    dp: int
    pp: int
    ep: int
    rank_order: tuple[str, ...]
    dp_shard: int = 0  # 0 = dp (one shard group = the whole dp group)
    _strides: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        strides, s = {}, 1
        for a in self.rank_order:
            strides[a] = s
            s *= self.size(a)
        missing = set(("tp", "cp", "dp", "pp")) - set(strides)
        if missing:
            raise ConfigError(f"rank_order {list(self.rank_order)} lacks {sorted(missing)}", key="rank_order")
        strides["ep"] = strides["dp"] if self.dp % self.ep == 0 else strides[self.rank_order[0]]
        if not self.dp_shard:
            object.__setattr__(self, "dp_shard", self.dp)
        strides["dp_shard"] = strides["dp"]
        strides["dp_replicate"] = strides["dp"] * self.dp_shard
        strides["edp"] = strides["dp"] * self.ep
        object.__setattr__(self, "_strides", strides)

    @classmethod
    def of(cls, scn: Scenario) -> Placement:
        par = scn.parallel
        return cls(par.tp, par.cp, par.dp, par.pp, par.ep, scn.topology.rank_order, par.shard_size)

    # ------------------------------------------------------------------ coordinates
    @property
    def num_ranks(self) -> int:
        return self.tp * self.cp * self.dp * self.pp

    def size(self, axis: str) -> int:
        if axis not in GROUP_AXES:
            raise ConfigError(f"unknown parallel axis {axis!r}; known: {', '.join(GROUP_AXES)}")
        if axis == "dp_replicate":
            return self.dp // self.dp_shard
        if axis == "edp":
            return self.dp // self.ep if self.dp % self.ep == 0 else 1
        return int(getattr(self, axis))

    def stride(self, axis: str) -> int:
        """Distance in ranks between neighbours of `axis` ('ep' strides like 'dp')."""
        try:
            return self._strides[axis]
        except KeyError:
            raise ConfigError(f"unknown parallel axis {axis!r}; known: {', '.join(GROUP_AXES)}") from None

    def coord(self, rank: int, axis: str) -> int:
        if axis == "dp_shard":
            return self.coord(rank, "dp") % self.dp_shard
        if axis == "dp_replicate":
            return self.coord(rank, "dp") // self.dp_shard
        if axis == "edp":
            return self.coord(rank, "dp") // self.ep
        return (rank // self.stride(axis)) % self.size(axis)

    def stage_of(self, rank: int) -> int:
        return (rank // self._strides["pp"]) % self.pp

    def representative_rank(self, stage: int) -> int:
        """Rank of pipeline stage `stage` in the representative pipeline (tp=cp=dp=0)."""
        if not 0 <= stage < self.pp:
            raise ConfigError(f"stage {stage} out of range for pp = {self.pp}")
        return stage * self.stride("pp")

    # ------------------------------------------------------------------ groups
    def _ep_generic(self) -> bool:
        return self.ep > 1 and self.dp % self.ep != 0

    def members(self, axis: str, rank: int) -> range | list[int]:
        """All ranks of `rank`'s group on `axis`, in group order (ring order for NCCL)."""
        if axis == "ep" and self._ep_generic():
            return self._ep_members(rank)
        n = self.size(axis)
        if axis == "ep":
            stride = self.stride("dp")
            base = rank - (self.coord(rank, "dp") % n) * stride
        elif axis in DP_SUBGROUPS:
            stride = self.stride(axis)
            base = rank - self.coord(rank, axis) * stride
        else:
            stride = self.stride(axis)
            base = rank - self.coord(rank, axis) * stride
        return range(base, base + n * stride, stride)

    def group_bounds(self, axis: str, rank: int) -> tuple[int, int]:
        """(first, last) rank of the group, O(1) for strided groups; first identifies the group."""
        if axis == "ep" and self._ep_generic():
            m = self._ep_members(rank)
            return m[0], m[-1]
        n = self.size(axis)
        if axis == "ep":
            stride = self.stride("dp")
            first = rank - (self.coord(rank, "dp") % n) * stride
        elif axis in DP_SUBGROUPS:
            stride = self.stride(axis)
            first = rank - self.coord(rank, axis) * stride
        else:
            stride = self.stride(axis)
            first = rank - self.coord(rank, axis) * stride
        return first, first + (n - 1) * stride

    def _ep_members(self, rank: int) -> list[int]:
        """EP over consecutive ranks of the stage's non-pp block, in rank order."""
        inner = [a for a in self.rank_order if a != "pp"]
        strides = {a: self.stride(a) for a in inner}
        # linear index of `rank` among the non-pp coordinates (innermost first)
        lin, mul = 0, 1
        for a in inner:
            lin += self.coord(rank, a) * mul
            mul *= self.size(a)
        pp_part = rank - sum(self.coord(rank, a) * strides[a] for a in inner)
        start = lin - lin % self.ep
        out = []
        for idx in range(start, start + self.ep):
            r, rest = pp_part, idx
            for a in inner:
                r += (rest % self.size(a)) * strides[a]
                rest //= self.size(a)
            out.append(r)
        return sorted(out)

    def group(self, axis: str, stage: int = 0) -> range | list[int]:
        """The representative pipeline's group of `axis` at pipeline stage `stage`."""
        return self.members(axis, self.representative_rank(stage))

    def group_firsts(self, axis: str, stage: int, period: int) -> dict[int, int]:
        """One group of `axis` in pipeline stage `stage` per residue of its first rank modulo
        `period` (the node, or the scalable unit when leaf uplinks matter): {residue: smallest
        such first rank}. Strided groups whose firsts agree modulo the period sit on the fabric
        the same way, so these are all the ways this stage's groups can differ — at most
        `period` of them, found without listing the (possibly millions of) ranks."""
        if axis == "ep" and self._ep_generic():  # irregular EP groups: the representative only
            first = self.group_bounds("ep", self.representative_rank(stage))[0]
            return {first % period: first}
        found = {(stage * self.stride("pp")) % period: stage * self.stride("pp")}
        for b in self.rank_order:
            if b == "pp":
                continue
            if b == axis or (axis in ("ep", "dp_shard", "dp_replicate", "edp") and b == "dp"):
                if axis == "ep":  # EP groups: ep consecutive dp ranks, firsts at dp coords 0, ep, ...
                    steps = [c * self.stride("dp") for c in range(0, self.dp, self.ep)][:period]
                elif axis == "dp_shard":  # shard groups: firsts at dp coords 0, dp_shard, ...
                    steps = [c * self.stride("dp") for c in range(0, self.dp, self.dp_shard)][:period]
                elif axis == "dp_replicate":  # replicate groups: firsts at dp coords 0 .. dp_shard-1
                    steps = [c * self.stride("dp") for c in range(min(self.dp_shard, period))]
                elif axis == "edp":  # expert-DP groups: firsts at dp coords 0 .. ep-1
                    steps = [c * self.stride("dp") for c in range(min(self.ep, period))]
                else:
                    continue
            else:
                steps = [c * self.stride(b) for c in range(min(self.size(b), period))]
            nxt: dict[int, int] = {}
            for x in found.values():
                for d in steps:
                    y = x + d
                    key = y % period
                    if key not in nxt or y < nxt[key]:
                        nxt[key] = y
            found = nxt
        return found

    def next_rank(self, axis: str, rank: int) -> int:
        """Peer that `rank` sends to in a ring step of `axis` (pp: stage s -> s+1, wrapping)."""
        n = self.size(axis)
        if axis == "ep" and self._ep_generic():
            m = self._ep_members(rank)
            return m[(m.index(rank) + 1) % n]
        if axis == "ep":
            stride = self.stride("dp")
            c = self.coord(rank, "dp") % n
        elif axis in DP_SUBGROUPS:
            stride, c = self.stride(axis), self.coord(rank, axis)
        else:
            stride = self.stride(axis)
            c = self.coord(rank, axis)
        return rank + (((c + 1) % n) - c) * stride
