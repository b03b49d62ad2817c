"""`mfusim whatif`: the seed notes' "how to raise MFU" list, answered with numbers (issue 7).

For each lever of the seed's list (more micro-batches, interleaving, overlap, sequence
parallel / selective recomputation, a faster network, a faster dataloader, FlashAttention,
tensor-core friendly shapes) the baseline Scenario is changed with `dataclasses.replace`
on its frozen specs, simulated, and compared with the baseline. A lever that does not
apply (pp = 1 for interleaving, FlashAttention already on, ...) or that makes an invalid
configuration is kept with the reason it was skipped. One sentence names the bottleneck
(the largest non-compute category of the baseline breakdown, with the bubble that a data
stall causes on later stages charged to the dataloader) and the lever that recovers most of it.

MFU of every variant counts the *baseline* model's FLOPs per token, so padding a shape
(extra, useless FLOPs) is credited only with the time it saves; for every other lever this
equals the variant's own MFU.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any, Protocol

from .errors import ConfigError
from .metrics import StepReport
from .schedules import bubble_closed_form_s
from .specs import Scenario
from .units import GIB_BYTES

# Phrases naming each breakdown category in the headline sentence.
CATEGORY_PHRASES = {
    "bubble": "pipeline bubble",
    "dataloader": "waiting for the dataloader",
    "dp_comm": "exposed data-parallel communication",
    "tp_comm": "exposed tensor-parallel communication",
    "pp_comm": "exposed pipeline send/recv",
    "cp_comm": "exposed context-parallel communication",
    "ep_comm": "exposed expert-parallel (all-to-all) communication",
    "recompute": "activation recomputation",
    "optimizer": "the optimizer step",
    "host_bound": "waiting for the CPU to issue kernels (host-bound MoE layers)",
    "gpu_spread": "waiting for the slowest GPU (per-GPU speed spread)",
    "other": "other overhead",
    "compute": "compute",
}
MIN_BOTTLENECK_FRACTION = 0.03  # below this, no loss category is worth naming: compute-bound


class _Result(Protocol):
    @property
    def report(self) -> StepReport: ...


SimulateFn = Callable[[Scenario], _Result]


@dataclass(frozen=True, slots=True)
class Lever:
    """One what-if variant of the baseline and its predicted effect."""

    key: str  # stable identifier, e.g. "interleave_vp3"
    name: str  # e.g. "interleave, vp=3"
    change: str  # what was changed, e.g. "parallel.vp 1 -> 3, schedule interleaved"
    addresses: tuple[str, ...]  # breakdown categories the lever attacks
    mfu: float | None = None  # predicted MFU (baseline model FLOPs per token), None if skipped
    gain: float | None = None  # mfu - baseline mfu (fraction; x100 = points of MFU)
    step_time_s: float | None = None
    tokens_per_s: float | None = None
    peak_memory_bytes: float | None = None
    fits: bool | None = None
    note: str = ""
    skipped: str = ""  # why the lever was not simulated ("" when it was)
    phrase: str = ""  # the lever inside a sentence: "interleaving with vp=3"

    @property
    def applied(self) -> bool:
        return not self.skipped

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "key": self.key,
            "name": self.name,
            "change": self.change,
            "addresses": list(self.addresses),
        }
        if self.applied:
            out.update(
                mfu=self.mfu,
                gain=self.gain,
                step_time_s=self.step_time_s,
                tokens_per_s=self.tokens_per_s,
                peak_memory_gib=None
                if self.peak_memory_bytes is None
                else self.peak_memory_bytes / GIB_BYTES,
                fits=self.fits,
            )
            if self.note:
                out["note"] = self.note
        else:
            out["skipped"] = self.skipped
        return out


@dataclass(frozen=True, slots=True)
class WhatIf:
    """The baseline, every lever (applied ones sorted by predicted MFU), and the headline."""

    scenario_name: str
    baseline: StepReport
    levers: tuple[Lever, ...]

    @property
    def applied(self) -> tuple[Lever, ...]:
        return tuple(lv for lv in self.levers if lv.applied)

    @property
    def skipped(self) -> tuple[Lever, ...]:
        return tuple(lv for lv in self.levers if not lv.applied)

    @property
    def bottleneck(self) -> tuple[str, float]:
        """(category, fraction of the step) of the largest loss; ("compute", f) if none matters."""
        return bottleneck(self.baseline)

    @property
    def headline(self) -> str:
        return headline(self.baseline, self.applied)

    def to_dict(self) -> dict[str, Any]:
        base = self.baseline
        cat, frac = self.bottleneck
        step = base.step_time_s
        return {
            "name": self.scenario_name,
            "headline": self.headline,
            "bottleneck": {"category": cat, "fraction_of_step": frac},
            "baseline": {
                "mfu": base.mfu,
                "hfu": base.hfu,
                "step_time_s": step,
                "tokens_per_s": base.tokens_per_s,
                "breakdown_s": base.breakdown_s,
                "breakdown_fraction": {
                    k: (v / step if step > 0 else 0.0) for k, v in base.breakdown_s.items()
                },
                "attributed_fraction": {
                    k: (v / step if step > 0 else 0.0) for k, v in attributed_losses_s(base).items()
                },
                "memory_fits": None if base.memory is None else base.memory.fits,
            },
            "cheapest_fit": None if (fit := cheapest_fit(self.applied)) is None else fit.key,
            "levers": [lv.to_dict() for lv in self.applied],
            "skipped": [lv.to_dict() for lv in self.skipped],
        }


# ----------------------------------------------------------------------------- the levers
@dataclass(frozen=True, slots=True)
class _Variant:
    key: str
    name: str
    change: str
    addresses: tuple[str, ...]
    build: Callable[[], Scenario] | None  # None: skipped
    skipped: str = ""
    note: str = ""

    @property
    def phrase(self) -> str:
        return lever_phrase(self.key, self.name)


_PHRASES = {
    "microbatches_x2_global": "doubling the micro-batches (global batch x2)",
    "microbatches_x2_smaller": "doubling the micro-batches (half-size micro-batches)",
    "enable_overlap_grad_reduce": "overlapping the gradient reduction with backward",
    "enable_overlap_param_gather": "overlapping the parameter all-gather with forward",
    "enable_tp_comm_overlap": "overlapping TP communication with the GEMMs",
    "enable_all_overlap": "turning on every communication overlap",
    "sequence_parallel": "sequence parallelism",
    "recompute_selective": "selective instead of full recomputation",
    "recompute_none": "dropping recomputation",
    "zero1_instead_of_zero3": "ZeRO-1 instead of ZeRO-3",
    "network_x2": "a 2x faster network",
    "dataloader_x4": "a 4x faster dataloader",
    "dataloader_free": "an instant dataloader",
    "flash_attention": "FlashAttention",
    "pad_shapes": "padding to tensor-core friendly shapes",
    "micro_batch_x2": "doubling the micro-batch size",
    "cuda_graphs": "CUDA graphs of the attention, router and preprocess",
}


def lever_phrase(key: str, name: str) -> str:
    """How a lever reads inside the headline sentence."""
    if key.startswith("interleave_vp"):
        return f"interleaving with vp={key.removeprefix('interleave_vp')}"
    return _PHRASES.get(key, name)


def _par(scn: Scenario, **changes: Any) -> Scenario:
    return replace(scn, parallel=replace(scn.parallel, **changes))


def _with_micro_batch(scn: Scenario, micro_batch: int) -> Scenario:
    """A new micro-batch size; loading one micro-batch takes proportionally longer or shorter
    (the dataloader's latency is per micro-batch), so loading does not become free."""
    dl = scn.dataloader
    scale = micro_batch / scn.parallel.micro_batch
    return replace(
        _par(scn, micro_batch=micro_batch),
        dataloader=replace(dl, microbatch_latency_s=dl.microbatch_latency_s * scale),
    )


def _skip(key: str, name: str, addresses: tuple[str, ...], reason: str) -> _Variant:
    return _Variant(key, name, "", addresses, None, skipped=reason)


def _round_up(x: int, multiple: int) -> int:
    return -(-x // multiple) * multiple


def _latency_change(scn: Scenario, scale: float) -> str:
    lat_ms = scn.dataloader.microbatch_latency_s * 1e3
    # as the scenario key, so that `run --set` of the change is the lever
    return f", dataloader.microbatch_latency_ms {lat_ms:.12g} -> {lat_ms * scale:.12g}" if lat_ms > 0 else ""


def _microbatch_levers(scn: Scenario) -> Iterator[_Variant]:
    par = scn.parallel
    addr = ("bubble",)
    m = par.num_microbatches
    if par.pp == 1:
        reason = "pp = 1: there is no pipeline bubble to shrink"
        yield _skip("microbatches_x2_global", "2x micro-batches (global batch x2)", addr, reason)
        yield _skip("microbatches_x2_smaller", "2x micro-batches (micro-batch /2)", addr, reason)
        return
    yield _Variant(
        "microbatches_x2_global",
        "2x micro-batches (global batch x2)",
        f"parallel.global_batch {par.global_batch} -> {2 * par.global_batch} (m {m} -> {2 * m})",
        addr,
        lambda: _par(scn, global_batch=2 * par.global_batch),
        note="changes the optimizer batch: check convergence",
    )
    if par.micro_batch % 2:
        yield _skip(
            "microbatches_x2_smaller",
            "2x micro-batches (micro-batch /2)",
            addr,
            f"micro_batch = {par.micro_batch} cannot be halved",
        )
    else:
        yield _Variant(
            "microbatches_x2_smaller",
            "2x micro-batches (micro-batch /2)",
            f"parallel.micro_batch {par.micro_batch} -> {par.micro_batch // 2} (m {m} -> {2 * m})"
            + _latency_change(scn, 0.5),
            addr,
            lambda: _with_micro_batch(scn, par.micro_batch // 2),
        )


# Which pipeline schedules a schedule lever may lead to: only to a tier above the baseline's, or
# to a peer of the same tier, never down (a downgrade is not a lever; `run --set
# parallel.schedule=...` still simulates it). Tier 0: GPipe and 1F1B, the bubble the levers
# shrink. Tier 1: interleaved 1F1B (Narayanan et al. 2021 §2.2.2) and ZB-H1 (Qi et al. 2023
# §2.1), peers: ZB-H1 keeps 1F1B's memory and fills the cool-down with W's, interleaving shrinks
# the whole ramp by v at more memory and P2P, and neither bubble is below the other's for every
# v (ZB-H1 (p-1)(F+B-W), interleaved (p-1)(F+B+W)/v): between them the smaller closed form
# decides (`_downgrade`). Tier 2: ZB-V (Qi et al. 2024 §6: the
# V-shaped zero-bubble schedule at ZB-H1's memory with a smaller bubble), DualPipe and
# DualPipeV (DeepSeek-V3 report Table 2: below ZB1P's bubble), peers trading parameter memory,
# in-flight chunks and P2P. From tier 2 the tier-1 schedules are downgrades: whatif on a zb-v
# baseline offered ZB-H1 and interleaved 1F1B as levers.
SCHEDULE_TIER = {
    "gpipe": 0,
    "1f1b": 0,
    "interleaved": 1,
    "zb-h1": 1,
    "zb-v": 2,
    "dualpipe": 2,
    "dualpipev": 2,
}


def _downgrade(scn: Scenario, target: str, target_vp: int) -> str:
    """Why `target` (with `target_vp` chunks) is not a lever from the baseline's schedule ('' when
    it is one): a lower tier, or, between the tier-1 peers interleaved and ZB-H1, a closed-form
    bubble (schedules.bubble_closed_form_s at T_F = T_B = T_W) that is not smaller: interleaved
    with v >= 3 already beats ZB-H1's (p-1)(F+B-W) (an interleaved vp = 5 baseline was offered
    ZB-H1 at -3.4 points)."""
    par = scn.parallel
    current = par.schedule
    if SCHEDULE_TIER[target] < SCHEDULE_TIER[current]:
        return (
            f"schedule = {current!r} already has a smaller pipeline bubble than {target!r}: not a lever "
            f"(`--set parallel.schedule={target}` simulates it)"
        )
    if {current, target} == {"interleaved", "zb-h1"}:
        m = par.num_microbatches
        now = bubble_closed_form_s(current, par.pp, par.vp, m, 1.0, 1.0, 1.0)
        then = bubble_closed_form_s(target, par.pp, target_vp, m, 1.0, 1.0, 1.0)
        if then >= now:
            vp_note = f" with vp = {par.vp}" if current == "interleaved" else ""
            target_note = f" at vp = {target_vp}" if target == "interleaved" else ""
            return (
                f"schedule = {current!r}{vp_note} has a pipeline bubble no larger than {target!r}{target_note} "
                f"((p-1)(F+B+W)/v against (p-1)(F+B-W)): not a lever"
            )
    return ""


def _interleave_levers(scn: Scenario) -> Iterator[_Variant]:
    par = scn.parallel
    for vp in (2, 3, 4):
        key, name = f"interleave_vp{vp}", f"interleave, vp={vp}"
        if par.pp == 1:
            yield _skip(key, name, ("bubble",), "pp = 1: interleaving needs a pipeline")
            continue
        if par.schedule == "interleaved" and vp <= par.vp:
            # fewer chunks per stage is a larger bubble, the opposite of the lever
            reason = (
                f"already vp = {vp}"
                if vp == par.vp
                else f"already vp = {par.vp}: fewer chunks per stage is a larger bubble, not a lever"
            )
            yield _skip(key, name, ("bubble",), reason)
            continue
        if reason := _downgrade(scn, "interleaved", vp):
            yield _skip(key, name, ("bubble",), reason)
            continue
        changes = [f"parallel.vp {par.vp} -> {vp}"] if vp != par.vp else []
        if par.schedule != "interleaved":
            changes.append(f"{'schedule' if changes else 'parallel.schedule'} {par.schedule} -> interleaved")
        yield _Variant(
            key,
            name,
            ", ".join(changes),
            ("bubble",),
            lambda vp=vp: _par(scn, vp=vp, schedule="interleaved"),  # type: ignore[misc]
            note="more P2P traffic; more in-flight activations",
        )


SCHEDULE_LEVERS = (
    ("zb-h1", "zero-bubble ZB-H1 schedule", "W's fill the cool-down; 1F1B's activation memory"),
    ("zb-v", "zero-bubble ZB-V schedule", "two chunks per stage in a V; 2x P2P traffic, 1F1B's memory"),
    ("dualpipe", "DualPipe schedule", "2x parameters per stage; p + 1 micro-batches in flight"),
    ("dualpipev", "DualPipeV schedule", "two chunks per stage in a V; 2p + 1 half-stage chunks in flight"),
)


def _schedule_levers(scn: Scenario) -> Iterator[_Variant]:
    """The zero-bubble and DualPipe schedules (Qi et al. 2023/2024; DeepSeek-V3 report)."""
    par = scn.parallel
    for schedule, name, note in SCHEDULE_LEVERS:
        key = f"schedule_{schedule.replace('-', '_')}"
        if par.pp == 1:
            yield _skip(key, name, ("bubble",), "pp = 1: no pipeline to schedule")
            continue
        if par.schedule == schedule:
            yield _skip(key, name, ("bubble",), f"already schedule = {schedule!r}")
            continue
        if reason := _downgrade(scn, schedule, 2 if schedule in ("zb-v", "dualpipe", "dualpipev") else 1):
            yield _skip(key, name, ("bubble",), reason)
            continue
        try:
            # the V and DualPipe schedules hold two chunks per stage: vp resolves to 2 for them
            new_vp = _par(scn, schedule=schedule, vp=1).parallel.vp
        except ConfigError as err:
            yield _skip(key, name, ("bubble",), str(err).split(": ", 1)[-1])
            continue
        yield _Variant(
            key,
            name,
            # every key the variant changes, so `run --set` of `change` is this lever (zb-h1 from
            # vp = 2 left out "vp 2 -> 1", and from vp = 4 the V schedules said "-> 1", not 2)
            f"parallel.schedule {par.schedule} -> {schedule}"
            + (f", vp {par.vp} -> {new_vp}" if new_vp != par.vp else ""),
            ("bubble",),
            lambda schedule=schedule: _par(scn, schedule=schedule, vp=1),  # type: ignore[misc]
            note=note,
        )


def _overlap_levers(scn: Scenario) -> Iterator[_Variant]:
    par = scn.parallel
    switches = (
        (
            "overlap_grad_reduce",
            "overlap DP gradient reduction with backward",
            ("dp_comm",),
            par.dp > 1,
            "dp = 1",
        ),
        (
            "overlap_param_gather",
            "overlap parameter all-gather with forward",
            ("dp_comm",),
            par.dp > 1 and par.zero >= 1,
            "no sharded parameters to gather (dp = 1 or zero = 0)",
        ),
        ("tp_comm_overlap", "overlap TP communication with GEMMs", ("tp_comm",), par.tp > 1, "tp = 1"),
    )
    off = []
    for flag, name, addr, relevant, why_not in switches:
        if not relevant:
            yield _skip(f"enable_{flag}", name, addr, f"{why_not}: nothing to overlap")
        elif getattr(par, flag):
            yield _skip(f"enable_{flag}", name, addr, f"parallel.{flag} is already on")
        else:
            off.append(flag)
            yield _Variant(
                f"enable_{flag}",
                name,
                f"parallel.{flag} false -> true",
                addr,
                lambda flag=flag: _par(scn, **{flag: True}),  # type: ignore[misc]
            )
    if len(off) > 1:
        yield _Variant(
            "enable_all_overlap",
            "all communication overlaps on",
            ", ".join(f"parallel.{f} -> true" for f in off),
            ("dp_comm", "tp_comm"),
            lambda: _par(scn, **dict.fromkeys(off, True)),
        )


def _memory_levers(scn: Scenario) -> Iterator[_Variant]:
    par = scn.parallel
    if par.tp == 1:
        yield _skip("sequence_parallel", "sequence parallel", ("tp_comm", "recompute"), "tp = 1")
    elif par.sequence_parallel:
        yield _skip("sequence_parallel", "sequence parallel", ("tp_comm", "recompute"), "already on")
    else:
        yield _Variant(
            "sequence_parallel",
            "sequence parallel",
            "parallel.sequence_parallel false -> true",
            ("tp_comm", "recompute"),
            lambda: _par(scn, sequence_parallel=True),
            note="shards LayerNorm/dropout activations over TP (less memory; AG+RS instead of AR)",
        )
    if par.recompute == "full":
        yield _Variant(
            "recompute_selective",
            "selective instead of full recomputation",
            "parallel.recompute full -> selective",
            ("recompute",),
            lambda: _par(scn, recompute="selective"),
        )
    else:
        yield _skip(
            "recompute_selective",
            "selective instead of full recomputation",
            ("recompute",),
            f"recompute = {par.recompute}, not full",
        )
    if par.recompute == "none":
        yield _skip("recompute_none", "no recomputation", ("recompute",), "recompute is already none")
    else:
        yield _Variant(
            "recompute_none",
            "no recomputation",
            f"parallel.recompute {par.recompute} -> none",
            ("recompute",),
            lambda: _par(scn, recompute="none", recompute_modules=()),  # nothing left to recompute
            note="needs the activation memory",
        )
    if par.zero == 3:
        yield _Variant(
            "zero1_instead_of_zero3",
            "ZeRO-1 instead of ZeRO-3",
            "parallel.zero 3 -> 1",
            ("dp_comm",),
            lambda: _par(scn, zero=1),
            note="no per-layer parameter all-gathers; full weights on every GPU",
        )


def _light_recompute_modules(scn: Scenario) -> tuple[str, ...]:
    """Megatron-Core's recompute modules that re-run no weight GEMM of the layer's own width:
    the layer norms, the attention core, MLA's up-projections (small low-rank GEMMs whose outputs
    are the widest tensors of an MLA layer) and the MoE activation -- the memory levers DeepSeek-V3
    used (report §3.2.3) short of full recomputation; only those the model has."""
    m = scn.model
    out = ["core_attn", "layernorm"]
    if m.mla is not None:
        out.append("mla_up_proj")
    if m.is_moe:
        out.append("moe_act")
    return tuple(out)


def _fit_levers(scn: Scenario) -> Iterator[_Variant]:
    """Ways to make an out-of-memory configuration fit (offered only when the baseline does not):
    recomputation, a deeper pipeline, a higher ZeRO stage, sequence parallelism, offloading."""
    par = scn.parallel
    addr = ("memory",)
    steps = {"none": ("selective", "full"), "selective": ("full",), "full": ()}[par.recompute]
    for mode in steps:
        yield _Variant(
            f"fit_recompute_{mode}",
            f"{mode} recomputation",
            f"parallel.recompute {par.recompute} -> {mode}",
            addr,
            lambda mode=mode: _par(scn, recompute=mode),  # type: ignore[misc]
            note="recomputes activations in the backward pass",
        )
    light = _light_recompute_modules(scn)
    if par.recompute != "full" and not set(light) <= set(par.recomputed_modules):
        yield _Variant(
            "fit_recompute_light",
            "light selective recomputation",
            f"parallel.recompute {par.recompute} -> selective, recompute_modules -> {list(light)}",
            addr,
            lambda: _par(scn, recompute="selective", recompute_modules=light),
            note="re-runs norms, attention cores and activations, not the GEMMs (DeepSeek-V3 §3.2.3 style)",
        )
    if par.dp % 2 == 0 and scn.model.layers >= 2 * par.pp * par.vp:
        yield _Variant(
            "fit_pp_x2",
            "2x pipeline stages",
            f"parallel.pp {par.pp} -> {2 * par.pp}, dp {par.dp} -> {par.dp // 2}",
            addr,
            lambda: _par(scn, pp=2 * par.pp, dp=par.dp // 2),
            note="fewer layers per GPU; more micro-batches per pipeline, larger bubble share",
        )
    if par.dp > 1:
        for zero in range(par.zero + 1, 4):
            yield _Variant(
                f"fit_zero{zero}",
                f"ZeRO-{zero}",
                f"parallel.zero {par.zero} -> {zero}",
                addr,
                lambda zero=zero: _par(scn, zero=zero),  # type: ignore[misc]
                note={1: "optimizer state sharded", 2: "gradients sharded too"}.get(
                    zero, "parameters sharded too: per-layer all-gathers"
                ),
            )
    if par.tp > 1 and not par.sequence_parallel:
        yield _Variant(
            "fit_sequence_parallel",
            "sequence parallel",
            "parallel.sequence_parallel false -> true",
            addr,
            lambda: _par(scn, sequence_parallel=True),
            note="shards LayerNorm/dropout activations over TP (less memory; AG+RS instead of AR)",
        )
    mem = scn.memory
    if hasattr(mem, "offload_optimizer") and not mem.offload_optimizer:
        yield _Variant(
            "fit_offload_optimizer",
            "optimizer offload",
            "memory.offload_optimizer false -> true",
            addr,
            lambda: replace(scn, memory=replace(mem, offload_optimizer=True)),
            note="Adam on the CPU; host-link traffic every step",
        )
    if hasattr(mem, "offload_activations") and mem.offload_activations < 1.0:
        yield _Variant(
            "fit_offload_activations",
            "activation offload",
            f"memory.offload_activations {mem.offload_activations:g} -> 1",
            addr,
            lambda: replace(scn, memory=replace(mem, offload_activations=1.0)),
            note="activations copied to host memory and back",
        )


def fit_variants(scn: Scenario) -> list[_Variant]:
    """The ways to fit tried for an out-of-memory baseline."""
    return list(_fit_levers(scn))


def _network_lever(scn: Scenario) -> Iterator[_Variant]:
    topo = scn.topology
    name = "faster network (2x NIC bandwidth)"
    addr = ("dp_comm", "pp_comm", "tp_comm", "cp_comm", "ep_comm")
    if scn.num_gpus <= topo.gpus_per_node:
        yield _skip(
            "network_x2", name, addr, f"all {scn.num_gpus} GPUs are in one node: no inter-node traffic"
        )
        return
    inter = topo.inter_node
    gbps_old = inter.nic_bandwidth_bytes_per_s * 8 / 1e9
    yield _Variant(
        "network_x2",
        name,
        f"cluster.inter_node.nic_Gbps {gbps_old:g} -> {2 * gbps_old:g}",
        addr,
        lambda: replace(
            scn,
            topology=replace(
                topo, inter_node=replace(inter, nic_bandwidth_bytes_per_s=2 * inter.nic_bandwidth_bytes_per_s)
            ),
        ),
    )


def _dataloader_levers(scn: Scenario) -> Iterator[_Variant]:
    dl = scn.dataloader
    lat_ms = dl.microbatch_latency_s * 1e3
    for key, name, factor in (
        ("dataloader_x4", "4x faster dataloader", 0.25),
        ("dataloader_free", "instant dataloader (latency 0)", 0.0),
    ):
        if dl.microbatch_latency_s <= 0:
            yield _skip(key, name, ("dataloader",), "the dataloader latency is already 0")
            continue
        yield _Variant(
            key,
            name,
            f"dataloader.microbatch_latency_ms {lat_ms:g} -> {lat_ms * factor:g}",
            ("dataloader",),
            lambda factor=factor: replace(  # type: ignore[misc]
                scn, dataloader=replace(dl, microbatch_latency_s=dl.microbatch_latency_s * factor)
            ),
        )


def _kernel_levers(scn: Scenario) -> Iterator[_Variant]:
    if scn.kernels.flash_attention:
        yield _skip("flash_attention", "FlashAttention on", ("compute",), "already on")
    else:
        yield _Variant(
            "flash_attention",
            "FlashAttention on",
            "kernels.flash_attention false -> true",
            ("compute",),
            lambda: replace(scn, kernels=replace(scn.kernels, flash_attention=True)),
        )
    yield _shapes_lever(scn)
    yield _cuda_graph_lever(scn)


# Megatron-Core MoE README "CPU Overhead Bottleneck": --cuda-graph-impl transformer_engine
# --cuda-graph-modules attn moe_router moe_preprocess (what a dropless MoE layer can capture)
MOE_GRAPH_MODULES = ("attn", "moe_router", "moe_preprocess")


def _cuda_graph_lever(scn: Scenario) -> _Variant:
    """Per-layer CUDA graphs of the attention block, router and preprocess (host_bound)."""
    key, name, addr = "cuda_graphs", "CUDA graphs (attn, moe_router, moe_preprocess)", ("host_bound",)
    k = scn.kernels
    if not scn.model.is_moe:
        return _skip(key, name, addr, "a dense model has no host-bound MoE layers")
    if k.cuda_graph_impl == "full_iteration" or set(MOE_GRAPH_MODULES) <= set(k.cuda_graph_modules):
        return _skip(key, name, addr, f"already graphed (cuda_graph_impl = {k.cuda_graph_impl!r})")
    try:  # Megatron-Core's own refusals (full recompute, offloading, ...): the lever does not apply
        graphed = replace(
            scn,
            kernels=replace(k, cuda_graph_impl="transformer_engine", cuda_graph_modules=MOE_GRAPH_MODULES),
        )
    except ConfigError as err:
        return _skip(key, name, addr, err.message)
    return _Variant(
        key,
        name,
        f"kernels.cuda_graph_impl {k.cuda_graph_impl!r} -> 'transformer_engine', "
        f"cuda_graph_modules -> {list(MOE_GRAPH_MODULES)}",
        addr,
        lambda: graphed,
        note="graph memory; static shapes (fixed sequence length and micro-batch)",
    )


def padded_shapes(scn: Scenario) -> dict[str, int]:
    """Tensor-core friendly model dimensions: the fields that change and their new values.

    hidden up to a multiple of 64 (and of heads, so heads keep equal size); the per-GPU
    shards of the MLP and of the vocabulary up to multiples of 128 (Megatron pads the
    vocabulary to a multiple of 128·tp: `--make-vocab-size-divisible-by 128`).
    """
    m, tp = scn.model, scn.parallel.tp
    out: dict[str, int] = {}
    hidden_multiple = 64 if m.head_dim else math.lcm(64, m.heads)
    hidden = _round_up(m.hidden, hidden_multiple)
    if hidden != m.hidden and hidden <= 1.25 * m.hidden:
        out["hidden"] = hidden
    ffn = _round_up(m.ffn, 128 * tp)
    if ffn != m.ffn or ("hidden" in out and not m.ffn_hidden):
        out["ffn_hidden"] = ffn if ffn != m.ffn else m.ffn
    vocab = _round_up(m.vocab, 128 * tp)
    if vocab != m.vocab:
        out["vocab"] = vocab
    return out


def _shapes_lever(scn: Scenario) -> _Variant:
    name = "tensor-core friendly shapes (pad to multiples of 64/128)"
    addr = ("compute",)
    pads = padded_shapes(scn)
    if not pads:
        return _skip("pad_shapes", name, addr, "hidden, ffn/tp and vocab/tp are already multiples of 64/128")
    m = scn.model
    change = ", ".join(f"model.{k} {getattr(m, k) or m.ffn} -> {v}" for k, v in pads.items())
    return _Variant(
        "pad_shapes",
        name,
        change,
        addr,
        lambda: replace(
            scn,
            model=replace(
                m,
                hidden=pads.get("hidden", m.hidden),
                ffn_hidden=pads.get("ffn_hidden", m.ffn_hidden),
                vocab=pads.get("vocab", m.vocab),
            ),
        ),
        note="padding is wasted work: MFU counts the unpadded model's FLOPs",
    )


def _batch_shape_lever(scn: Scenario) -> _Variant:
    par = scn.parallel
    name = "2x micro-batch size (bigger GEMMs)"
    if par.global_batch % (2 * par.micro_batch * par.dp):
        return _skip(
            "micro_batch_x2",
            name,
            ("compute",),
            f"global_batch {par.global_batch} is not a multiple of 2*micro_batch*dp",
        )
    return _Variant(
        "micro_batch_x2",
        name,
        f"parallel.micro_batch {par.micro_batch} -> {2 * par.micro_batch}" + _latency_change(scn, 2.0),
        ("compute", "host_bound"),
        lambda: _with_micro_batch(scn, 2 * par.micro_batch),
        note="halves the number of micro-batches (more bubble when pp > 1); more activation memory",
    )


def candidate_variants(scn: Scenario) -> list[_Variant]:
    """Every lever of the seed's list, applicable or not (the latter with the reason)."""
    out: list[_Variant] = []
    out += _dataloader_levers(scn)
    out += _microbatch_levers(scn)
    out += _interleave_levers(scn)
    out += _schedule_levers(scn)
    out += _overlap_levers(scn)
    out += _memory_levers(scn)
    out += _network_lever(scn)
    out += _kernel_levers(scn)
    out.append(_batch_shape_lever(scn))
    return out


# ----------------------------------------------------------------------------- analysis
def _default_simulate() -> SimulateFn:
    from .simulate import simulate

    return simulate


def _useful_flops_per_token(report: StepReport) -> float:
    return report.model_flops_per_step / report.tokens_per_step


def analyze(scenario: Scenario, simulate: SimulateFn | None = None, progress: bool = False) -> WhatIf:
    """Simulate the baseline and every applicable lever; applied levers sorted by MFU.
    An out-of-memory baseline also gets the ways to make it fit (`_fit_levers`). `progress`:
    a bar on stderr while the levers are simulated (only on a terminal)."""
    from .progress import Progress

    sim = simulate or _default_simulate()
    base = sim(scenario).report
    per_token = _useful_flops_per_token(base)
    applied: list[Lever] = []
    skipped: list[Lever] = []
    variants = candidate_variants(scenario)
    if base.memory is not None and not base.memory.fits:
        ways_to_fit = fit_variants(scenario)
        same = {v.change for v in ways_to_fit}  # e.g. sequence parallel: one row, as a way to fit
        variants = ways_to_fit + [v for v in variants if v.build is None or v.change not in same]
    bar = Progress(len(variants), "whatif", unit="levers", enabled=None if progress else False)
    for v in variants:
        bar.update()
        if v.build is None:
            skipped.append(Lever(v.key, v.name, v.change, v.addresses, skipped=v.skipped, phrase=v.phrase))
            continue
        try:
            variant = v.build()
            rep = sim(variant).report
        except ConfigError as err:
            skipped.append(
                Lever(
                    v.key, v.name, v.change, v.addresses, skipped=f"invalid: {err.message}", phrase=v.phrase
                )
            )
            continue
        except (ValueError, ArithmeticError) as err:  # one lever's failure must not hide the others
            skipped.append(
                Lever(
                    v.key,
                    v.name,
                    v.change,
                    v.addresses,
                    skipped=f"could not be simulated: {err}",
                    phrase=v.phrase,
                )
            )
            continue
        mfu = per_token * rep.tokens_per_s / (rep.num_gpus * rep.peak_flop_per_s)
        mem = rep.memory
        note = v.note
        if mem is not None and not mem.fits:
            warn = f"does not fit: {mem.peak_bytes / GIB_BYTES:.1f} GiB > {mem.capacity_bytes / GIB_BYTES:.0f} GiB"
            note = f"{warn}; {note}" if note else warn
        applied.append(
            Lever(
                v.key,
                v.name,
                v.change,
                v.addresses,
                mfu=mfu,
                gain=mfu - base.mfu,
                step_time_s=rep.step_time_s,
                tokens_per_s=rep.tokens_per_s,
                peak_memory_bytes=None if mem is None else mem.peak_bytes,
                fits=None if mem is None else mem.fits,
                note=note,
                phrase=v.phrase,
            )
        )
    bar.close()
    # best first; equal MFU keeps the candidate order (the milder lever first)
    applied.sort(key=lambda lv: -round(lv.mfu or 0.0, 9))
    return WhatIf(scenario.name, base, tuple(applied) + tuple(skipped))


def whatif(scenario: Scenario, simulate: SimulateFn | None = None) -> list[Lever]:
    """Every lever: applied ones first, sorted by predicted MFU (best first), then skipped ones."""
    return list(analyze(scenario, simulate).levers)


WORK_CATEGORIES = ("compute", "recompute", "tp_comm", "cp_comm", "ep_comm", "pp_comm")


def expected_bubble_s(report: StepReport) -> float:
    """The pipeline bubble the schedule itself causes, per stage on average.

    Closed form (Narayanan et al. 2021 §2.2): bubble = (p−1)/(v·m) of the ideal (busy) time
    for GPipe, 1F1B and interleaved 1F1B; the zero-bubble and DualPipe schedules' forms
    (schedules.bubble_closed_form_s) taken at T_F = T_B = T_W; no pipeline, no bubble.
    """
    par = report.parallel
    if par.pp <= 1:
        return 0.0
    work = sum(report.breakdown_s.get(c, 0.0) for c in WORK_CATEGORIES)
    m = par.microbatches_per_run
    share = bubble_closed_form_s(par.schedule, par.pp, par.vp, m, 1.0, 1.0, 1.0) / (3.0 * m)
    return share * work


def attributed_losses_s(report: StepReport) -> dict[str, float]:
    """The mean breakdown with stalls charged to their cause.

    When stage 0 waits for data, every later stage then idles waiting for its activations:
    that idle time is recorded as `bubble` on those stages, but its cause is the dataloader.
    Bubble beyond the schedule's own (p−1)/(v·m) share is moved to `dataloader`, up to what
    the dataloader stall on stage 0 can have caused downstream ((p−1) × its mean share).
    """
    out = dict(report.breakdown_s)
    data = out.get("dataloader", 0.0)
    if data > 0 and report.parallel.pp > 1:
        excess = max(0.0, out.get("bubble", 0.0) - expected_bubble_s(report))
        moved = min(excess, data * (report.parallel.pp - 1))
        out["bubble"] = out.get("bubble", 0.0) - moved
        out["dataloader"] = data + moved
    return out


def bottleneck(report: StepReport) -> tuple[str, float]:
    """The largest loss (stalls charged to their cause) and its fraction of the step.

    ("compute", compute fraction) when no loss reaches MIN_BOTTLENECK_FRACTION.
    """
    step = report.step_time_s
    if step <= 0:
        return ("compute", 0.0)
    losses = {c: v / step for c, v in attributed_losses_s(report).items() if c != "compute"}
    cat, frac = max(losses.items(), key=lambda kv: kv[1], default=("compute", 0.0))
    if frac < MIN_BOTTLENECK_FRACTION:
        return ("compute", report.breakdown_s.get("compute", 0.0) / step)
    return (cat, frac)


def _usable(levers: tuple[Lever, ...], baseline_fits: bool = True) -> list[Lever]:
    """Levers worth recommending: positive gain and fitting in memory (a lever that does not fit
    is listed, marked, but never recommended)."""
    return [
        lv for lv in levers if (lv.gain or 0.0) > 0 and lv.fits is not False and not lv.key.startswith("fit_")
    ]


def cheapest_fit(applied: tuple[Lever, ...]) -> Lever | None:
    """Of the levers that make an out-of-memory baseline fit, the one that keeps the most MFU."""
    fitting = [lv for lv in applied if lv.key.startswith("fit_") and lv.fits]
    return max(fitting, key=lambda lv: lv.mfu or 0.0, default=None)


def _fit_sentence(base: StepReport, applied: tuple[Lever, ...]) -> str:
    mem = base.memory
    assert mem is not None
    need = f"{mem.peak_bytes / GIB_BYTES:.1f} GiB needed per GPU, {mem.capacity_bytes / GIB_BYTES:.0f} GiB usable"
    fit = cheapest_fit(applied)
    if fit is None:
        return f"It does not fit in GPU memory ({need}), and none of the ways tried makes it fit."
    cost = 100 * (fit.gain or 0.0)
    return (
        f"It does not fit in GPU memory ({need}): the cheapest way to fit is {fit.name} "
        f"({fit.change}; {(fit.peak_memory_bytes or 0) / GIB_BYTES:.1f} GiB), at MFU "
        f"{100 * base.mfu:.1f}% -> {100 * (fit.mfu or 0):.1f}% ({cost:+.1f} points)."
    )


def headline(base: StepReport, applied: tuple[Lever, ...]) -> str:
    """One sentence: the bottleneck of the baseline and the lever that recovers most of it; for a
    baseline that does not fit in memory, first the cheapest way to make it fit."""
    fits = base.memory is None or base.memory.fits
    rest = _bottleneck_sentence(base, applied, baseline_fits=fits)
    return rest if fits else f"{_fit_sentence(base, applied)} {rest}"


def _bottleneck_sentence(base: StepReport, applied: tuple[Lever, ...], baseline_fits: bool = True) -> str:
    cat, frac = bottleneck(base)
    good = _usable(applied)
    pct = f"{100 * frac:.0f}%"

    def recovers(lv: Lever) -> str:
        gain = 100 * (lv.gain or 0.0)
        return f"{lv.phrase or lv.name} recovers {gain:.1f} points of MFU ({100 * base.mfu:.1f}% -> {100 * (lv.mfu or 0):.1f}%)"

    if cat == "compute":
        first = f"The step is compute-bound: {pct} of it is compute and no other category reaches {100 * MIN_BOTTLENECK_FRACTION:.0f}%"
        return f"{first}; {recovers(good[0])}." if good else f"{first}; none of the levers raises MFU."
    first = f"{pct} of the step is {CATEGORY_PHRASES.get(cat, cat)}"
    if cat == "dataloader" and base.parallel.pp > 1:
        first += " (stage 0 waits for data, the later stages idle behind it)"
    targeted = [lv for lv in good if cat in lv.addresses]
    if targeted:
        best = good[0]
        also = ""
        if best is not targeted[0] and (best.gain or 0.0) > (targeted[0].gain or 0.0) + 0.0005:
            also = f"; the best lever overall is {best.phrase or best.name} ({100 * (best.gain or 0.0):+.1f} points)"
        return f"{first}; {recovers(targeted[0])}{also}."
    if good:
        return f"{first}; no lever tried removes it, the best overall is: {recovers(good[0])}."
    if not baseline_fits:  # the ways to fit are in the sentence before; the rest still do not fit
        return (
            f"{first}; no other lever raises MFU within the GPU memory on its own "
            "(apply a way to fit first, then run whatif again)."
        )
    return f"{first}; none of the levers tried raises MFU within the GPU memory."


def format_json(result: WhatIf) -> str:
    from .console import strict_json

    return strict_json(result.to_dict(), indent=2)
