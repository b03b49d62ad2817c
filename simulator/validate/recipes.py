"""Megatron-Bridge launch recipes per NeMo container release: the settings a published row ran
with that its table does not show (simulator/catalog/mbridge_recipes.toml, issues 12/13), for the
MoE families and the dense Llama families. An entry applies only to a row of the same container
whose own layout equals the recipe's exactly; every other row keeps the source defaults, and
`recipe_for` says why in one line."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from ..resources import catalog_file
from ..specs import CUDA_GRAPH_IMPLS, CUDA_GRAPH_MODULES, FP8_PARAM_DTYPES, MOE_DISPATCHERS, RECOMPUTE_MODULES

RECIPES_FILE = "mbridge_recipes.toml"
LAYOUT_KEYS = ("tp", "pp", "vp", "ep", "micro_batch", "global_batch")
# context parallelism: written in the dense entries (Llama recipes use cp 2), 1 when absent
OPTIONAL_LAYOUT = {"cp": 1}
# the keys only an MoE family's entry carries (a dense family's entry must leave them out)
MOE_KEYS = (
    "ep_comm_overlap",
    "fused_grouped_mlp",
    "moe_dispatcher",
    "fp8_dot_product_attention",
    "moe_expert_rank_capacity_factor",
    "moe_pad_experts_for_cuda_graph_inference",
    "moe_hybridep_num_sms",
    "moe_shared_expert_overlap",
    "delay_wgrad_compute",
)
# and the keys only a dense family's entry carries
DENSE_KEYS = ("megatron_fsdp", "cpu_offloading_num_layers")


@dataclass(frozen=True, slots=True)
class Recipe:
    """One launch configuration of one release (fields: the TOML file's header)."""

    name: str
    family: str  # a key of the file's [family] table
    container: str  # NeMo container, e.g. "26.04.01"
    release: str  # Megatron-Bridge release tag of that container
    commit: str
    gpu: str  # the CSV's GPU label
    dtype: str  # the simulated dtype
    layout: tuple[tuple[str, int], ...]
    ep_comm_overlap: bool
    recompute_modules: tuple[str, ...]
    fused_grouped_mlp: bool
    moe_dispatcher: str
    cuda_graph_impl: str
    cuda_graph_modules: tuple[str, ...]
    fp8_dot_product_attention: bool
    moe_expert_rank_capacity_factor: float  # HybridEP per-rank token budget; 0 = none
    moe_pad_experts_for_cuda_graph_inference: bool
    moe_hybridep_num_sms: int
    moe_shared_expert_overlap: bool
    delay_wgrad_compute: bool
    dense: bool = False  # a dense family's entry (the MoE fields above then keep their neutral values)
    megatron_fsdp: bool = False  # use_megatron_fsdp (validate simulates zero 3 from the row itself)
    # cpu_offloading_num_layers: the activations of that many transformer layers (per pipeline
    # rank; Megatron-Core allows activation offloading with pp = 1 only) wait in host memory
    cpu_offloading_num_layers: int = 0


@dataclass(frozen=True, slots=True)
class Release:
    container: str
    release: str
    commit: str
    undetermined: str  # why no recipe is determined for this container ("" = recipes recorded)


@dataclass(frozen=True, slots=True)
class Unexpressible:
    """A launch configuration of one release that no scenario expresses: its rows are refused."""

    name: str
    family: str
    container: str
    gpu: str
    layout: tuple[tuple[str, int], ...]
    reason: str


@dataclass(frozen=True, slots=True)
class PipelineLayout:
    """A family's explicit pipeline layout for some (pp, vp): decoder layers per virtual stage."""

    family: str
    pp_vp: tuple[tuple[int, int], ...]
    layers: tuple[int, ...]
    source: str
    gpus: tuple[str, ...] = ()  # () = any GPU


@dataclass(frozen=True, slots=True)
class Catalog:
    releases: Mapping[str, Release]
    families: Mapping[str, str]  # family -> regular expression on the lower-cased model name
    recipes: tuple[Recipe, ...]
    unexpressible: tuple[Unexpressible, ...] = ()
    dense_families: frozenset[str] = frozenset()  # the [family] keys of dense models
    # the simulated dtypes whose preset sets fp8_param_gather, and the families whose scripts keep it
    fp8_param_gather_dtypes: frozenset[str] = frozenset()
    fp8_param_gather_families: frozenset[str] = frozenset()
    pipeline_layouts: tuple[PipelineLayout, ...] = ()
    # family -> the containers whose model recipe stores Adam's moments in BF16 ([bf16_moments])
    bf16_moments: Mapping[str, frozenset[str]] = field(default_factory=dict)


def _pipeline_layout(table: Mapping[str, Any], families: Mapping[str, str]) -> PipelineLayout:
    where = f"{RECIPES_FILE} pipeline_layout of {table.get('model')!r}"
    if table.get("model") not in families:
        raise ValueError(f"{where}: model is not a [family] key")
    layers = tuple(int(n) for n in table["layers"])
    pp_vp = tuple((int(pp), int(vp)) for pp, vp in table["pp_vp"])
    if any(n < 0 for n in layers) or any(pp * vp != len(layers) for pp, vp in pp_vp):
        raise ValueError(f"{where}: needs one layer count >= 0 per virtual stage (pp*vp of each pp_vp)")
    if not str(table.get("source", "")).strip():
        raise ValueError(f"{where}: needs a source")
    return PipelineLayout(table["model"], pp_vp, layers, str(table["source"]), tuple(table.get("gpus", ())))


def _choice(where: str, key: str, value: Any, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise ValueError(f"{where}: {key} = {value!r} is not one of {', '.join(allowed)}")
    return str(value)


def _layout(where: str, layout: Mapping[str, Any]) -> tuple[tuple[str, int], ...]:
    extra = sorted(set(layout) - set(LAYOUT_KEYS))
    if any(k not in layout for k in LAYOUT_KEYS) or any(k not in OPTIONAL_LAYOUT for k in extra):
        raise ValueError(
            f"{where}: layout needs exactly {', '.join(LAYOUT_KEYS)} (and optionally {', '.join(OPTIONAL_LAYOUT)})"
        )
    return tuple((k, int(layout[k])) for k in LAYOUT_KEYS) + tuple(
        (k, int(layout.get(k, default))) for k, default in OPTIONAL_LAYOUT.items()
    )


def _recipe(
    table: Mapping[str, Any],
    releases: Mapping[str, Release],
    families: Mapping[str, str],
    dense_families: frozenset[str] = frozenset(),
) -> Recipe:
    where = f"{RECIPES_FILE} recipe {table.get('name')!r}"
    layout = _layout(where, table.get("layout", {}))
    dense = table.get("model") in dense_families
    wrong = [k for k in (MOE_KEYS if dense else DENSE_KEYS) if k in table]
    if wrong:
        kind = "dense" if dense else "MoE"
        raise ValueError(f"{where}: {', '.join(wrong)} do not apply to a {kind} family's recipe")
    if dense:
        table = {**_DENSE_NEUTRAL, **table}
    elif any(k not in table for k in MOE_KEYS):
        raise ValueError(f"{where}: an MoE family's recipe needs {', '.join(MOE_KEYS)}")
    modules = tuple(table["recompute_modules"])
    unknown = [m for m in modules if m not in RECOMPUTE_MODULES]
    if unknown:
        raise ValueError(f"{where}: unknown recompute module(s) {unknown}")
    release = releases.get(table["container"])
    if release is None or release.undetermined:
        raise ValueError(f"{where}: container {table['container']!r} has no recorded release")
    if table["model"] not in families:
        raise ValueError(f"{where}: model {table['model']!r} is not a [family] key")
    impl = _choice(where, "cuda_graph_impl", table["cuda_graph_impl"], CUDA_GRAPH_IMPLS)
    graph_modules = tuple(
        _choice(where, "cuda_graph_modules", m, CUDA_GRAPH_MODULES) for m in table["cuda_graph_modules"]
    )
    if graph_modules and impl != "transformer_engine":
        raise ValueError(f"{where}: cuda_graph_modules only scope cuda_graph_impl = transformer_engine")
    capacity = float(table["moe_expert_rank_capacity_factor"])
    if capacity != 0.0 and capacity < 1.0:
        raise ValueError(f"{where}: moe_expert_rank_capacity_factor must be 0 (dropless) or >= 1")
    offloaded = int(table.get("cpu_offloading_num_layers", 0))
    if offloaded < 0:
        raise ValueError(f"{where}: cpu_offloading_num_layers must be >= 0")
    if offloaded and (dict(layout)["pp"] > 1 or modules or impl != "none"):
        # Megatron-Core transformer_config.py refuses activation offloading with pp > 1, with
        # activation recomputation and with CUDA graphs
        raise ValueError(
            f"{where}: cpu_offloading_num_layers needs pp = 1, no recompute_modules and cuda_graph_impl = none"
        )
    return Recipe(
        name=table["name"],
        family=table["model"],
        container=table["container"],
        release=release.release,
        commit=release.commit,
        gpu=table["gpu"],
        dtype=table["dtype"],
        layout=layout,
        ep_comm_overlap=bool(table["ep_comm_overlap"]),
        recompute_modules=modules,
        fused_grouped_mlp=bool(table["fused_grouped_mlp"]),
        moe_dispatcher=_choice(where, "moe_dispatcher", table["moe_dispatcher"], MOE_DISPATCHERS),
        cuda_graph_impl=impl,
        cuda_graph_modules=graph_modules,
        fp8_dot_product_attention=bool(table["fp8_dot_product_attention"]),
        moe_expert_rank_capacity_factor=capacity,
        moe_pad_experts_for_cuda_graph_inference=bool(table["moe_pad_experts_for_cuda_graph_inference"]),
        moe_hybridep_num_sms=int(table["moe_hybridep_num_sms"]),
        moe_shared_expert_overlap=bool(table["moe_shared_expert_overlap"]),
        delay_wgrad_compute=bool(table["delay_wgrad_compute"]),
        dense=dense,
        megatron_fsdp=bool(table.get("megatron_fsdp", False)),
        cpu_offloading_num_layers=offloaded,
    )


# what a dense family's recipe leaves at Megatron-Core's defaults (no MoE layer to act on)
_DENSE_NEUTRAL: dict[str, Any] = {
    "ep_comm_overlap": False,
    "fused_grouped_mlp": False,
    "moe_dispatcher": "alltoall",
    "fp8_dot_product_attention": False,
    "moe_expert_rank_capacity_factor": 0.0,
    "moe_pad_experts_for_cuda_graph_inference": False,
    "moe_hybridep_num_sms": 0,
    "moe_shared_expert_overlap": False,
    "delay_wgrad_compute": False,
}


def _unexpressible(
    table: Mapping[str, Any], releases: Mapping[str, Release], families: Mapping[str, str]
) -> Unexpressible:
    where = f"{RECIPES_FILE} unexpressible {table.get('name')!r}"
    layout = _layout(where, table.get("layout", {}))
    if table["container"] not in releases:
        raise ValueError(f"{where}: container {table['container']!r} has no [container] table")
    if table["model"] not in families:
        raise ValueError(f"{where}: model {table['model']!r} is not a [family] key")
    if not str(table.get("reason", "")).strip():
        raise ValueError(f"{where}: needs a reason")
    return Unexpressible(
        name=table["name"],
        family=table["model"],
        container=table["container"],
        gpu=table["gpu"],
        layout=layout,
        reason=str(table["reason"]),
    )


def parse_catalog(text: str) -> Catalog:
    data = tomllib.loads(text)
    releases = {
        name: Release(name, t["release"], t["commit"], t.get("undetermined", ""))
        for name, t in data.get("container", {}).items()
    }
    families = dict(data.get("family", {}))
    dense = frozenset(data.get("dense_families", ()))
    unknown = sorted(dense - set(families))
    if unknown:
        raise ValueError(f"{RECIPES_FILE}: dense_families {unknown} are not [family] keys")
    fp8_params = frozenset(data.get("fp8_param_gather_dtypes", ()))
    wrong = sorted(fp8_params - set(FP8_PARAM_DTYPES))
    if wrong:
        raise ValueError(
            f"{RECIPES_FILE}: fp8_param_gather_dtypes {wrong} are not {', '.join(FP8_PARAM_DTYPES)}"
        )
    fp8_families = frozenset(data.get("fp8_param_gather_families", ()))
    unknown_families = sorted(fp8_families - set(families))
    if unknown_families:
        raise ValueError(
            f"{RECIPES_FILE}: fp8_param_gather_families {unknown_families} are not [family] keys"
        )
    bf16_moments = {f: frozenset(c) for f, c in data.get("bf16_moments", {}).items()}
    for f, containers in bf16_moments.items():
        if f not in families:
            raise ValueError(f"{RECIPES_FILE}: bf16_moments {f!r} is not a [family] key")
        if containers - set(releases):
            raise ValueError(
                f"{RECIPES_FILE}: bf16_moments {f!r}: containers {sorted(containers - set(releases))} "
                "are not [container.*] keys"
            )
    return Catalog(
        releases,
        families,
        tuple(_recipe(t, releases, families, dense) for t in data.get("recipe", ())),
        tuple(_unexpressible(t, releases, families) for t in data.get("unexpressible", ())),
        dense,
        fp8_params,
        fp8_families,
        tuple(_pipeline_layout(t, families) for t in data.get("pipeline_layout", ())),
        bf16_moments,
    )


@cache
def catalog() -> Catalog:
    return parse_catalog(catalog_file(RECIPES_FILE).read_text(encoding="utf-8"))


def recipes() -> tuple[Recipe, ...]:
    return catalog().recipes


def container_of(run_id: str) -> str:
    """The NeMo container of a Megatron-Bridge row id (`mbridge_<container>_<model>_...`)."""
    parts = run_id.split("_")
    return parts[1] if len(parts) > 2 and parts[0].lower() == "mbridge" else ""


def fp8_param_gather_for(run_id: str, model_name: str, dtype: str, cat: Catalog | None = None) -> str:
    """The assumption line when this row's release preset keeps its weights as FP8 parameters
    (a family of fp8_param_gather_families, a recorded and determined container, a dtype of
    fp8_param_gather_dtypes), else "" (the default: 16-bit weights beside their FP8 copies)."""
    cat = cat or catalog()
    container = container_of(run_id)
    release = cat.releases.get(container)
    if release is None or release.undetermined or dtype not in cat.fp8_param_gather_dtypes:
        return ""
    name = model_name.lower()
    family = next((f for f, pattern in cat.families.items() if re.search(pattern, name)), None)
    if family not in cat.fp8_param_gather_families:
        return ""
    preset = "bf16_with_mxfp8_mixed" if dtype == "mxfp8" else "bf16_with_fp8_current_scaling_mixed"
    return (
        f"precision: fp8_param_gather = true (Megatron-Bridge {release.release} ({release.commit[:9]}, "
        f"container {container}) {preset}: FP8 weights only, fp32 master in the optimizer)"
    )


def bf16_moments_for(run_id: str, model_name: str, fsdp: bool, cat: Catalog | None = None) -> str:
    """The assumption line when this row's model recipe stores Adam's moments in BF16 (Megatron-Core's
    precision-aware optimizer; its family and container listed in [bf16_moments], and no Megatron
    FSDP, under which the perf scripts turn the precision-aware optimizer off), else ""."""
    cat = cat or catalog()
    container = container_of(run_id)
    name = model_name.lower()
    family = next((f for f, pattern in cat.families.items() if re.search(pattern, name)), None)
    if fsdp or family is None or container not in cat.bf16_moments.get(family, frozenset()):
        return ""
    release = cat.releases[container]
    return (
        f"memory: exp_avg_dtype = exp_avg_sq_dtype = bf16 (Megatron-Bridge {release.release} "
        f"({release.commit[:9]}, container {container}) {family} model recipe: "
        f"use_precision_aware_optimizer = true, BF16 Adam moments; {RECIPES_FILE} [bf16_moments])"
    )


def pipeline_layout_for(
    run_id: str, model_name: str, gpu: str, pp: int, vp: int, layers: int, cat: Catalog | None = None
) -> tuple[tuple[int, ...], str]:
    """The explicit pipeline layout this Megatron-Bridge row's model recipe sets for its (pp, vp)
    and GPU, with the assumption line; ((), "") when it sets none (the even split)."""
    cat = cat or catalog()
    if not container_of(run_id):
        return (), ""
    name = model_name.lower()
    family = next((f for f, pattern in cat.families.items() if re.search(pattern, name)), None)
    for entry in cat.pipeline_layouts:
        if entry.family != family or (pp, vp) not in entry.pp_vp or (entry.gpus and gpu not in entry.gpus):
            continue
        if sum(entry.layers) != layers:
            return (), ""  # not the model the layout was written for
        return entry.layers, (
            f"pipeline_layout: {list(entry.layers)} layers per virtual stage (embedding on the first, "
            f"MTP and loss on the last; Megatron-Bridge {entry.source}; {RECIPES_FILE})"
        )
    return (), ""


def fp8_recipe_for(run_id: str, dtype: str, cat: Catalog | None = None) -> str:
    """The assumption line when this row ran Megatron-Bridge's FP8 current-scaling preset (an "fp8"
    row of a recorded, determined container: the performance scripts' fp8 compute dtype is
    bf16_with_fp8_current_scaling_mixed, the preset fp8_param_gather_for names), else "" (the
    simulator's default, delayed scaling)."""
    cat = cat or catalog()
    container = container_of(run_id)
    release = cat.releases.get(container)
    if release is None or release.undetermined or dtype != "fp8":
        return ""
    return (
        f"precision: fp8_recipe = current (Megatron-Bridge {release.release} ({release.commit[:9]}, "
        f"container {container}) bf16_with_fp8_current_scaling_mixed)"
    )


def unexpressible_for(
    run_id: str, model_name: str, gpu: str, layout: Mapping[str, int], cat: Catalog | None = None
) -> str | None:
    """Why this row's launch configuration cannot be simulated (its container, family, GPU and
    whole layout equal an [[unexpressible]] entry's), or None."""
    cat = cat or catalog()
    container = container_of(run_id)
    name = model_name.lower()
    family = next((f for f, pattern in cat.families.items() if re.search(pattern, name)), None)
    for u in cat.unexpressible:
        if u.container == container and u.family == family and u.gpu == gpu:
            if all(layout.get(k) == v for k, v in u.layout):
                release = cat.releases[container]
                return (
                    f"launch recipe not expressible: Megatron-Bridge {release.release} "
                    f"({release.commit[:9]}, container {container}) {u.name}: {u.reason}"
                )
    return None


def recipe_for(
    run_id: str,
    model_name: str,
    gpu: str,
    dtype: str,
    layout: Mapping[str, int],
    cat: Catalog | None = None,
) -> Recipe | str:
    """The recipe of this row's container whose GPU, dtype and whole layout equal the row's, or
    the reason there is none (an assumption line for validate)."""
    cat = cat or catalog()
    container = container_of(run_id)
    release = cat.releases.get(container)
    if release is None:
        return f"recipe: container {container or '?'} is not in {RECIPES_FILE} -> source defaults"
    if release.undetermined:
        return f"recipe: not determined for container {container} ({release.undetermined}) -> source defaults"
    name = model_name.lower()
    family = next((f for f, pattern in cat.families.items() if re.search(pattern, name)), None)
    if family is None:
        return f"recipe: {model_name} recipes are not recorded in {RECIPES_FILE} -> source defaults"
    for r in cat.recipes:
        if r.container != container or r.family != family or r.gpu != gpu or r.dtype != dtype:
            continue
        if r.dense and bool(layout.get("fsdp", r.megatron_fsdp)) != r.megatron_fsdp:
            continue  # the row publishes whether it ran Megatron FSDP: part of a dense layout
        if all(layout.get(k) == v for k, v in r.layout):
            return r
    return (
        f"recipe: Megatron-Bridge {release.release} ({release.commit[:9]}, container {container}) has no "
        f"{family} {gpu} {dtype} config of this exact layout (tp, pp, vp, ep, micro-batch, global batch"
        f"{', cp, FSDP' if family in cat.dense_families else ''}) -> source defaults"
    )


def scenario_kernels(r: Recipe) -> dict[str, Any]:
    """The recipe's [kernels] keys (SPEC §7): fused grouped MLP, token dispatcher, CUDA graphs, the
    EP kernels' SMs (a dense recipe: its CUDA graphs only)."""
    if r.dense:
        return {"cuda_graph_impl": r.cuda_graph_impl, "cuda_graph_modules": list(r.cuda_graph_modules)}
    return {
        "fused_grouped_mlp": r.fused_grouped_mlp,
        "moe_dispatcher": r.moe_dispatcher,
        "cuda_graph_impl": r.cuda_graph_impl,
        "cuda_graph_modules": list(r.cuda_graph_modules),
        # Megatron-Core routes moe_hybridep_num_sms to moe_flex_dispatcher_num_sms: the EP kernels' SMs
        **({"ep_comm_sms": r.moe_hybridep_num_sms} if r.moe_hybridep_num_sms else {}),
        # high_priority_a2a_comm_stream: Megatron-Bridge v0.5.0+ set_workload_base_configs
        # (scripts/performance/utils/overrides.py@fcbb6031:242, v0.6.0 @51885cf1:370) sets it with
        # cutedsl_fused_grouped_mlp and moe_a2a_overlap (v0.6.0's family full-iteration helpers,
        # e.g. perf_recipes/qwen/common.py:50, on the same configs); no earlier release sets it
        **({"ep_comm_high_priority": True} if r.ep_comm_overlap and r.fused_grouped_mlp else {}),
    }


def recorded_not_simulated(r: Recipe) -> tuple[str, ...]:
    """The recipe's settings no scenario key expresses yet, as `key = value` (validate lists them)."""
    if r.dense:
        return ()
    out = []
    if r.moe_expert_rank_capacity_factor:
        out.append(
            f"moe_expert_rank_capacity_factor = {r.moe_expert_rank_capacity_factor:g} (HybridEP token budget)"
        )
    if r.fp8_dot_product_attention:
        out.append("fp8_dot_product_attention = true")
    # delay_wgrad_compute, moe_shared_expert_overlap: simulated ([parallel] delay_wgrad_compute,
    # shared_expert_overlap; validate/cases.py)
    return tuple(out)
