"""Re-read the Megatron-Bridge MoE (issue 13) and dense Llama (issue 12) launch recipes of
containers 25.11 .. 26.06.01 from a git clone of NVIDIA-NeMo/Megatron-Bridge and compare them with
simulator/catalog/mbridge_recipes.toml. Not part of the test suite (it needs the clone):

    python benchmarks/mbridge_recipe_history.py /path/to/Megatron-Bridge [--csv runs.csv]

For each release tag it executes scripts/performance/utils/utils.py (WorkloadBaseConfig) and every
MoE and Llama family's *workload_base_configs.py, finds the config whose GPU, precision, layout and num_gpus
equal each Megatron-Bridge row of that container, and derives the effective settings with the
rules written in the TOML file's header (read from that release's overrides.py / helpers.py and
*_llm_pretrain.py). 26.08 (v0.6.0, imperative perf_recipes/) was read by hand and is not re-derived.
Prints every difference and exits 1 if there is one."""

from __future__ import annotations

import argparse
import csv
import dataclasses
import re
import subprocess
import sys
import tomllib
import types
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RELEASES = {
    "25.11": "v0.2.0",
    "26.02": "v0.3.0",
    "26.02.01": "v0.3.1",
    "26.04": "v0.4.0",
    "26.04.01": "v0.4.2",
    "26.06": "v0.5.0",
    "26.06.01": "v0.5.1",
}
FAMILIES = (  # (row-id marker, config-name prefix, TOML family)
    ("deepseekv3", "DEEPSEEK_V3", "deepseek"),
    ("gptoss120b", "GPT_OSS_120B", "gpt-oss"),
    ("qwen3_30b", "QWEN3_30B_A3B", "qwen3-30b"),
    ("qwen3_235b", "QWEN3_235B_A22B", "qwen3-235b"),
    ("kimi_k2", "KIMI_K2", "kimi-k2"),
    ("llama3_8b", "LLAMA3_8B", "llama3-8b"),
    ("llama3_70b", "LLAMA3_70B", "llama3-70b"),
    ("llama3.1_405b", "LLAMA31_405B", "llama31-405b"),
)
DENSE = ("llama3-8b", "llama3-70b", "llama31-405b")
CONFIG_DTYPE = {"mxfp8": "FP8_MX", "fp8-mx": "FP8_MX", "fp8": "FP8_CS", "fp8-cs": "FP8_CS", "bf16": "BF16"}
SIM_DTYPE = {"FP8_MX": "mxfp8", "FP8_CS": "fp8", "BF16": "bf16", "NVFP4": "nvfp4"}
DENSE_DTYPE = {**CONFIG_DTYPE, "nvfp4": "NVFP4"}  # the MoE NVFP4 rows are not recorded
CONFIG_GPU = {"GB300": "GB300", "GB200": "GB200", "B300": "B300", "B200": "B200", "H100-SXM-80GB": "H100"}
SHARED_EXPERT_OVERLAP_DEFAULT = {"deepseek": True, "kimi-k2": True, "qwen3-30b": False, "qwen3-235b": False}
FUSER_RELEASES = ("v0.5.0", "v0.5.1")  # before: _set_common_perf_overrides forces the op fuser off


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


def workload_configs(repo: Path, tag: str) -> dict[str, dict[str, Any]]:
    """Every MoE WorkloadBaseConfig of scripts/performance/configs at `tag`, as dicts."""
    utils, utils_utils = types.ModuleType("utils"), types.ModuleType("utils.utils")
    sys.modules["utils"], sys.modules["utils.utils"] = utils, utils_utils
    exec(
        compile(_git(repo, "show", f"{tag}:scripts/performance/utils/utils.py"), "utils.py", "exec"),
        utils_utils.__dict__,
    )
    out: dict[str, dict[str, Any]] = {}
    for path in _git(repo, "ls-tree", "-r", "--name-only", tag, "scripts/performance/configs").split():
        if not path.endswith("workload_base_configs.py") or not any(
            f in path for f in ("deepseek", "gpt_oss", "qwen", "kimi", "llama")
        ):
            continue
        namespace: dict[str, Any] = {"__name__": "configs"}
        exec(compile(_git(repo, "show", f"{tag}:{path}"), path, "exec"), namespace)
        for name, value in namespace.items():
            if (
                dataclasses.is_dataclass(value)
                and not isinstance(value, type)
                and not name.startswith("BASE_")
            ):
                out[name] = dataclasses.asdict(value)
    return out


def dispatcher(tag: str, family: str, gpu: str, backend: str | None) -> str:
    """Megatron's token dispatcher as the release's scripts set it (TOML header, moe_dispatcher)."""
    if tag == "v0.3.1" and family == "qwen3-235b" and gpu in ("B300", "B200", "H100"):
        return "alltoall"  # qwen3_llm_pretrain.py: moe_token_dispatcher_type = "alltoall"
    if tag == "v0.3.1" and family == "gpt-oss":
        return "alltoall"  # nothing applies a flex backend to GPT-OSS in v0.3.1
    if backend is None:
        return "alltoall"
    if backend == "deepep" and gpu in ("GB200", "GB300"):
        raise ValueError("apply_flex_dispatcher_backend skips DeepEP on GB200/GB300: read by hand")
    return backend


def derive_dense(c: dict[str, Any]) -> dict[str, Any]:
    """A dense Llama config's entry (TOML header, dense_families)."""
    if c["recompute_num_layers"] is not None:
        raise ValueError("recompute_num_layers (block full recomputation): unexpressible")
    impl = c["cuda_graph_impl"] or "none"
    scope = c["cuda_graph_scope"]
    scope = [scope] if isinstance(scope, str) else list(scope or [])
    if impl == "local" and scope == ["full_iteration"]:
        impl = "full_iteration"  # Megatron-Core's whole-iteration graph
    return {
        "megatron_fsdp": bool(c["use_megatron_fsdp"]),
        "cuda_graph_impl": impl,
        "cuda_graph_modules": scope if impl == "transformer_engine" else [],
        "recompute_modules": list(c["recompute_modules"] or []),
        "cpu_offloading_num_layers": c["cpu_offloading_num_layers"] or 0,
    }


def derive(tag: str, family: str, gpu: str, dtype: str, c: dict[str, Any]) -> dict[str, Any]:
    if family in DENSE:
        return derive_dense(c)
    impl = c["cuda_graph_impl"] or "none"
    overlap = bool(c["moe_a2a_overlap"])
    disp = dispatcher(tag, family, gpu, c["moe_flex_dispatcher_backend"])
    full = (
        impl == "full_iteration"
        and tag in FUSER_RELEASES
        and (not family.startswith("qwen3") or dtype == "FP8_MX")
    )
    if c["recompute_modules"] is None and family in ("deepseek", "kimi-k2"):
        raise ValueError("selective recompute with Megatron's default modules: read by hand")
    return {
        "moe_dispatcher": disp,
        "cuda_graph_impl": impl,
        "cuda_graph_modules": list(c["cuda_graph_scope"] or []) if impl == "transformer_engine" else [],
        "ep_comm_overlap": overlap,
        "recompute_modules": list(c["recompute_modules"] or []),
        "fused_grouped_mlp": bool(c.get("cutedsl_fused_grouped_mlp")) and tag in FUSER_RELEASES,
        "fp8_dot_product_attention": bool(c.get("fp8_dot_product_attention")),
        "moe_expert_rank_capacity_factor": 1.5 if full else 0.0,
        "moe_pad_experts_for_cuda_graph_inference": full,
        "moe_hybridep_num_sms": 32 if disp == "hybridep" else 0,
        "moe_shared_expert_overlap": False
        if overlap or disp in ("deepep", "hybridep")
        else SHARED_EXPERT_OVERLAP_DEFAULT.get(family, False),
        "delay_wgrad_compute": overlap,
    }


def expand_layout(text: str) -> list[int]:
    """Decoder layers per virtual stage of a Megatron layout string ("Et*4|(t*4|)*14tmL": `|`
    ends a stage, `x*n` and `(...)*n` repeat, t = decoder layer, E/m/L = embedding/MTP/loss)."""
    while "(" in text:
        text = re.sub(r"\(([^()]*)\)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), text)
    text = re.sub(r"(\w)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), text)
    return [stage.count("t") for stage in text.split("|")]


def deepseek_layouts(repo: Path, tag: str) -> dict[tuple[int, int], list[int]]:
    """The (pp, vp) -> decoder layers per virtual stage of the release's DeepSeek-V3 layout_map."""
    source = _git(repo, "show", f"{tag}:src/megatron/bridge/recipes/deepseek/deepseek_v3.py")
    block = re.search(r"layout_map = (\{.*?\n\s*\})", source, re.S)
    if block is None:
        raise ValueError(f"{tag}: no layout_map in deepseek_v3.py")
    table = eval(block.group(1), {"last_layer": ["mtp", "loss"]})  # noqa: S307 - the release's literal
    return {k: [stage.count("decoder") for stage in v] for k, v in table.items() if v is not None}


def check_layouts(repo: Path, shipped: dict[str, Any]) -> int:
    """[[pipeline_layout]] entries against every release's layout_map and the configs' pp_layout."""
    differences = 0
    for entry in shipped.get("pipeline_layout", ()):
        for tag in sorted(set(RELEASES.values())):
            maps = deepseek_layouts(repo, tag)
            strings = {
                (c["pipeline_model_parallel_size"], c["virtual_pipeline_model_parallel_size"] or 1): c[
                    "pp_layout"
                ]
                for name, c in workload_configs(repo, tag).items()
                if name.startswith("DEEPSEEK_V3")
                and c.get("pp_layout")
                and (not entry.get("gpus") or "_H100_" in name)
            }
            for pp, vp in entry["pp_vp"]:
                got = expand_layout(strings[(pp, vp)]) if (pp, vp) in strings else maps.get((pp, vp))
                if got is not None and got != entry["layers"]:
                    print(f"pipeline_layout {pp}x{vp}: TOML {entry['layers']}, {tag} {got}")
                    differences += 1
    return differences


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("repo", type=Path, help="a git clone of NVIDIA-NeMo/Megatron-Bridge with its tags")
    parser.add_argument("--csv", type=Path, default=ROOT / "scenarios/published/calibration_runs.csv")
    args = parser.parse_args()
    shipped = tomllib.loads((ROOT / "simulator/catalog/mbridge_recipes.toml").read_text(encoding="utf-8"))
    by_key = {(r["container"], r["name"], r["gpu"]): r for r in shipped["recipe"]}
    configs = {tag: workload_configs(args.repo, tag) for tag in sorted(set(RELEASES.values()))}
    differences, checked = 0, set()
    with args.csv.open(newline="", encoding="utf-8") as f:
        rows = [r for r in csv.DictReader(f) if r["id"].startswith("mbridge_")]
    for row in rows:
        container = row["id"].split("_")[1]
        key = row["id"].lower().replace(" ", "")
        family = next(((prefix, fam) for marker, prefix, fam in FAMILIES if marker in key), None)
        dtypes = DENSE_DTYPE if family and family[1] in DENSE else CONFIG_DTYPE
        if container not in RELEASES or family is None or row["precision"] not in dtypes:
            continue
        prefix, fam = family
        tag, gpu, dtype = RELEASES[container], CONFIG_GPU[row["gpu"]], dtypes[row["precision"]]
        layout = [
            int(row[k] or 1)
            for k in ("tp", "pp", "vp", "ep", "micro_batch", "global_batch", "num_gpus", "cp")
        ]
        fsdp = row["zero_or_dist_opt"].strip().lower() == "fsdp"
        hits = [
            (name, c)
            for name, c in configs[tag].items()
            if name.startswith(prefix)
            and not any(f"_{task}_" in name for task in ("LORA", "SFT", "FINETUNE"))
            and f"_{gpu}_" in name
            and f"_{dtype}_" in name + "_"
            and (fam not in DENSE or bool(c["use_megatron_fsdp"]) == fsdp)
            and [
                c["tensor_model_parallel_size"],
                c["pipeline_model_parallel_size"],
                c["virtual_pipeline_model_parallel_size"] or 1,
                c["expert_model_parallel_size"],
                c["micro_batch_size"],
                c["global_batch_size"],
                c["num_gpus"],
                c["context_parallel_size"],
            ]
            == layout
        ]
        derived = {}
        for name, c in hits:
            try:
                derived[name] = derive(tag, fam, gpu, dtype, c)
            except ValueError as err:
                print(f"{row['id']}: {name}: {err}")
                differences += 1
        if len({str(d) for d in derived.values()}) > 1:
            print(f"{row['id']}: {len(derived)} configs of this layout disagree at {tag}: {sorted(derived)}")
            differences += 1
            continue
        entry = next((by_key.get((container, name, row["gpu"])) for name in sorted(derived)), None)
        if not derived:
            entry = next(
                (
                    r
                    for r in shipped["recipe"]
                    if r["container"] == container
                    and r["model"] == fam
                    and r["gpu"] == row["gpu"]
                    and r["dtype"] == SIM_DTYPE[dtype]
                    and [r["layout"][k] for k in ("tp", "pp", "vp", "ep", "micro_batch", "global_batch")]
                    == layout[:6]
                    and r["layout"].get("cp", 1) == layout[7]
                ),
                None,
            )
            if entry is not None:
                print(f"{row['id']}: the TOML has {entry['name']} but {tag} has no config of this layout")
                differences += 1
            continue
        name, want = sorted(derived.items())[0]
        checked.add((container, name, row["gpu"]))
        if entry is None:
            print(f"{row['id']}: {tag} {name} is missing from the TOML")
            differences += 1
            continue
        for k, v in want.items():
            if entry[k] != v:
                print(f"{row['id']}: {name} {k}: TOML {entry[k]!r}, {tag} {v!r}")
                differences += 1
    differences += check_layouts(args.repo, shipped)
    stale = [k for k in by_key if k[0] in RELEASES and k not in checked]
    for k in stale:
        print(f"TOML entry {k} matches no row of its container")
    print(f"{len(checked)} entries re-derived, {differences + len(stale)} differences")
    return 1 if differences or stale else 0


if __name__ == "__main__":
    sys.exit(main())
